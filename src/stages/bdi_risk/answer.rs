//! Step `bdi_risk`: each role's belief, desire and intention in the scene and what it risks if
//! it fails, plus the scenario description revised to agree with them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::annotation::check::{
    Problems, deserialize_answer, forbid_absent_cast, match_roles, named_role, require_prose,
};
use crate::annotation::context::ScenarioContext;
use crate::annotation::schema;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BdiRisk {
    pub roles: Vec<RoleBdi>,
    pub revised_description: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleBdi {
    pub name: String,
    pub belief: String,
    pub desire: String,
    pub intention: String,
    pub risk_if_failed: String,
}

named_role!(RoleBdi);

pub type Answer = BdiRisk;

pub fn schema() -> Value {
    schema::object(
        "Each participant's belief, desire, intention and risk, and the revised scenario \
         description.",
        &[
            (
                "roles",
                schema::roles(
                    "One entry per participant.",
                    &[
                        (
                            "belief",
                            schema::text(
                                "What the character takes to be true about the situation.",
                            ),
                        ),
                        (
                            "desire",
                            schema::text("What the character wants to come out of this scene."),
                        ),
                        (
                            "intention",
                            schema::text(
                                "What the character sets out to do in this scene to get it.",
                            ),
                        ),
                        (
                            "risk_if_failed",
                            schema::text(
                                "What the character stands to lose if they do not get it.",
                            ),
                        ),
                    ],
                ),
            ),
            (
                "revised_description",
                schema::text(
                    "The scenario description, revised so that it agrees with the beliefs, desires \
                     and intentions.",
                ),
            ),
        ],
    )
}

pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<BdiRisk, String> {
    let answer: BdiRisk = deserialize_answer::<BdiRisk, RoleBdi>(value)?;
    let mut problems = Problems::new();
    let roles = match_roles(answer.roles, ctx, &mut problems);
    for role in &roles {
        let who = Some(role.name.as_str());
        for (field, text) in [
            ("belief", &role.belief),
            ("desire", &role.desire),
            ("intention", &role.intention),
            ("risk_if_failed", &role.risk_if_failed),
        ] {
            if require_prose(&mut problems, who, field, text) {
                forbid_absent_cast(&mut problems, who, field, text, ctx);
            }
        }
    }
    if require_prose(
        &mut problems,
        None,
        "revised_description",
        &answer.revised_description,
    ) {
        forbid_absent_cast(
            &mut problems,
            None,
            "revised_description",
            &answer.revised_description,
            ctx,
        );
    }
    problems.finish()?;
    Ok(BdiRisk {
        roles,
        revised_description: answer.revised_description,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::annotation::schema::strictness_problems;
    use crate::stages::fixture;

    fn good() -> Value {
        json!({
            "roles": [
                {"name": "Ross", "belief": "Rachel promised to share the news before the party.",
                 "desire": "The secret is out before the party.",
                 "intention": "Press Rachel to commit to a time.",
                 "risk_if_failed": "Being blamed for keeping the secret."},
                {"name": "Rachel", "belief": "Telling the truth now would ruin the party.",
                 "desire": "Keep the secret a little longer.",
                 "intention": "Put off the decision.",
                 "risk_if_failed": "Losing a friend's trust."},
            ],
            "revised_description": "At closing time Ross presses Rachel to reveal her secret, and \
                                    she stalls."
        })
    }

    #[test]
    fn schema_is_strict() {
        assert_eq!(strictness_problems(&schema()), Vec::<String>::new());
    }

    #[test]
    fn accepts_a_good_answer() {
        let answer = validate(&good(), &fixture::context()).unwrap();
        assert_eq!(answer.roles.len(), 2);
    }

    #[test]
    fn rejects_empty_fields_missing_roles_and_absent_characters() {
        let mut value = good();
        value["roles"][0]["desire"] = json!("");
        value["revised_description"] = json!("Ross and Rachel argue about Monica Geller.");
        let error = validate(&value, &fixture::context()).unwrap_err();
        assert!(error.contains("Ross: desire is empty"), "{error}");
        assert!(
            error.contains("revised_description mentions Monica Geller"),
            "{error}"
        );
        let mut value = good();
        value["roles"].as_array_mut().unwrap().pop();
        let error = validate(&value, &fixture::context()).unwrap_err();
        assert!(error.contains("no entry for Rachel"), "{error}");
        let mut value = good();
        value["roles"][1]
            .as_object_mut()
            .unwrap()
            .remove("risk_if_failed");
        let error = validate(&value, &fixture::context()).unwrap_err();
        assert!(
            error.contains("roles[1] (Rachel): missing field `risk_if_failed`"),
            "{error}"
        );
    }
}

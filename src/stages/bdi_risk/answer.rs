//! Step `bdi_risk`: each role's belief, desire and intention in the scene and what it risks if
//! it fails, plus the scenario description revised to agree with them.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::annotation::check::{
    Checked, Problems, Rejection, deserialize_answer, forbid_absent_cast, match_roles, named_role,
    require_prose,
};
use crate::annotation::context::ScenarioContext;
use crate::annotation::gates::{
    Field, OtherRoles, PROMPT_COPY_WORDS, copied_run, forbid_annotation_terms,
    forbid_feeling_as_belief, forbid_looks_and_mental_states, forbid_near_duplicates,
    gate_free_text, name_words, near_duplicate, require_social_cost,
};
use crate::annotation::schema;
use crate::annotation::words::words;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BdiRisk {
    pub roles: Vec<RoleBdi>,
    pub revised_description: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
                                "The concrete social or relational cost to the character if the \
                                 desire is not met: whose trust, standing or relationship suffers.",
                            ),
                        ),
                    ],
                ),
            ),
            (
                "revised_description",
                schema::sentences(
                    "The scenario description, revised so that it agrees with the beliefs, desires \
                     and intentions.",
                    2,
                    4,
                ),
            ),
        ],
    )
}

/// The BDI fields, with what each says (what a field that repeats another should say instead).
const BDI_FIELDS: [(&str, &str); 4] = [
    ("belief", "a belief that is {who}'s own"),
    ("desire", "the outcome {who} is after here"),
    ("intention", "the step {who} takes to get there"),
    ("risk_if_failed", "whose goodwill {who} loses by failing"),
];

impl RoleBdi {
    fn fields(&self) -> [(&'static str, &str); 4] {
        [
            (BDI_FIELDS[0].0, &self.belief),
            (BDI_FIELDS[1].0, &self.desire),
            (BDI_FIELDS[2].0, &self.intention),
            (BDI_FIELDS[3].0, &self.risk_if_failed),
        ]
    }
}

fn what_it_says(field: &str, who: &str) -> String {
    BDI_FIELDS
        .iter()
        .find(|(name, _)| *name == field)
        .map_or(String::new(), |(_, about)| about.replace("{who}", who))
}

/// The answer, usable or not: an error names what leaves it unusable (with every other
/// problem, for the re-ask); a usable answer carries the quality gates it fails.
pub fn check(value: &Value, ctx: &ScenarioContext) -> Result<Checked<BdiRisk>, Rejection> {
    let answer: BdiRisk = deserialize_answer::<BdiRisk, RoleBdi>(value)?;
    let mut problems = Problems::new();
    let roles = match_roles(answer.roles, ctx, &mut problems);
    // What the model was shown of the scene: a BDI field says what the character makes of it,
    // and restating it says nothing of the character (the 1.5B model wrote the whole
    // description as Mila's belief).
    let shown: Vec<(&str, String)> = ctx
        .earlier(&crate::stages::describe::DESCRIPTION)
        .map(|d| vec![("background", d.background), ("description", d.description)])
        .unwrap_or_default();
    let names = name_words(ctx);
    for role in &roles {
        let who = role.name.as_str();
        for (field, text) in role.fields() {
            if !require_prose(&mut problems, Some(who), field, text) {
                continue;
            }
            forbid_absent_cast(&mut problems, Some(who), field, text, ctx);
            gate_free_text(&mut problems, Some(who), field, text, ctx);
            forbid_annotation_terms(&mut problems, who, field, text);
            if field == "belief" {
                forbid_feeling_as_belief(&mut problems, who, text);
            }
            for (source, scene) in shown.iter().filter(|(_, s)| !s.trim().is_empty()) {
                // A belief may take up a phrase of the scene to say what the character makes
                // of it; it repeats the scene when the copied run is most of it.
                let field_words = words(text);
                let copied = copied_run(&field_words, &[words(scene)], PROMPT_COPY_WORDS)
                    .is_some_and(|run| 2 * run.split(' ').count() >= field_words.len());
                if copied || near_duplicate(scene, text, &names) {
                    problems.gate(
                        "repeats_the_scene",
                        Some(who),
                        field,
                        format!(
                            "{who}: {field} repeats the {source}; write {} instead",
                            what_it_says(field, who)
                        ),
                    );
                    break;
                }
            }
        }
        if !role.risk_if_failed.trim().is_empty() {
            require_social_cost(&mut problems, who, &role.risk_if_failed, ctx);
        }
    }
    // Within a role, and across roles: each field says something of its own.
    let fields: Vec<Field<'_>> = roles
        .iter()
        .flat_map(|role| {
            role.fields().map(|(name, text)| Field {
                who: &role.name,
                name,
                text,
            })
        })
        .collect();
    forbid_near_duplicates(
        &mut problems,
        &fields,
        OtherRoles::SameField,
        ctx,
        |field| {
            format!(
                "write {}, in words of its own",
                what_it_says(field.name, field.who)
            )
        },
    );
    let revised = &answer.revised_description;
    if require_prose(&mut problems, None, "revised_description", revised) {
        forbid_absent_cast(&mut problems, None, "revised_description", revised, ctx);
        gate_free_text(&mut problems, None, "revised_description", revised, ctx);
        forbid_looks_and_mental_states(&mut problems, "revised_description", revised);
    }
    problems.finish_checked(BdiRisk {
        roles,
        revised_description: answer.revised_description,
    })
}

/// [`check`] for a clean answer: any problem is an error.
pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<BdiRisk, Rejection> {
    check(value, ctx).and_then(Checked::clean)
}

/// An answer the checks keep clean for a plain scene between `scene.names` (see
/// [`crate::stages::descriptor::StepDescriptor::example`]).
pub fn example(scene: &crate::stages::descriptor::Example<'_>) -> Value {
    json!({
        "roles": scene.roles(&|name, other| {
            let t = scene.topic(name);
            json!({
                "name": name,
                "belief": format!("{other} has been unfair about {t}."),
                "desire": format!("A clear answer on {t} before tonight."),
                "intention": format!("Press {other} to settle {t} today."),
                "risk_if_failed": format!("Losing {other}'s trust over {t}."),
            })
        }),
        "revised_description": "They settle who pays for the dent.",
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::annotation::check::Found;
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

    /// The (role, field, kind) of each problem of `rejection` that `keep` keeps.
    fn parts(
        rejection: &Rejection,
        keep: &dyn Fn(&Found) -> bool,
    ) -> Vec<(Option<String>, Option<String>, String)> {
        let kept = rejection.clone().keeping(keep).unwrap_err();
        kept.problems()
            .map(|p| (p.role.clone(), p.field.clone(), p.kind.clone()))
            .collect()
    }

    /// A rejection is asked again one part at a time: the scene's fields get the problems of
    /// the scene, each role those of its entry, read from the problems' parts, not their text.
    #[test]
    fn each_problem_names_its_role_field_and_kind_for_the_part_asked_again() {
        let mut value = good();
        value["roles"][0]["desire"] = json!("");
        value["revised_description"] = json!("Ross and Rachel argue about Monica Geller.");
        value["roles"][1]
            .as_object_mut()
            .unwrap()
            .remove("risk_if_failed");
        let rejection = check(&value, &fixture::context()).unwrap_err();
        // Rachel's entry does not parse, so nothing else is checked.
        assert_eq!(
            parts(&rejection, &|found| found.is_about("Rachel", 1)),
            [(None, Some("roles".to_string()), "entry_shape".to_string())]
        );
        assert!(rejection.clone().keeping(Found::is_scene).is_ok());
        value["roles"][1]["risk_if_failed"] = json!("Losing a friend's trust.");
        let rejection = check(&value, &fixture::context()).unwrap_err();
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            parts(&rejection, &|found| found.is_about("Ross", 0)),
            [(some("Ross"), some("desire"), "empty".to_string())]
        );
        assert_eq!(
            parts(&rejection, &Found::is_scene),
            [(None, some("revised_description"), "absent_cast".to_string())]
        );
        assert!(
            rejection
                .clone()
                .keeping(|f| f.is_about("Rachel", 1))
                .is_ok()
        );
        assert!(
            rejection
                .message()
                .starts_with("Fix these problems in your answer:\n- ")
        );
    }

    #[test]
    fn rejects_empty_fields_missing_roles_and_absent_characters() {
        let mut value = good();
        value["roles"][0]["desire"] = json!("");
        value["revised_description"] = json!("Ross and Rachel argue about Monica Geller.");
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(error.contains("Ross: desire is empty"), "{error}");
        assert!(
            error.contains("revised_description mentions Monica Geller"),
            "{error}"
        );
        let mut value = good();
        value["roles"].as_array_mut().unwrap().pop();
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(error.contains("no entry for Rachel"), "{error}");
        let mut value = good();
        value["roles"][1]
            .as_object_mut()
            .unwrap()
            .remove("risk_if_failed");
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(
            error.contains("roles[1] (Rachel): missing field `risk_if_failed`"),
            "{error}"
        );
    }

    /// The fixture with its description and the step's real instructions.
    fn context() -> ScenarioContext {
        let mut ctx = fixture::context();
        let description = crate::stages::describe::answer::Description {
            background: "Ross and Rachel are old friends who share a secret about a party."
                .to_string(),
            description: "At closing time Ross asks Rachel to reveal it.".to_string(),
        };
        ctx.set_earlier(&crate::stages::describe::DESCRIPTION, Some(description));
        let template = crate::stages::bdi_risk::STEP.prompt.text;
        ctx.instructions = crate::annotation::words::Instructions::from_prompt(template, &schema());
        ctx
    }

    #[test]
    fn accepts_a_good_answer_with_its_background_and_instructions() {
        validate(&good(), &context()).unwrap();
    }

    #[test]
    fn rejects_generic_risks() {
        let mut value = good();
        value["roles"][0]["risk_if_failed"] = json!(
            "The concrete social or relational cost to the character if the desire is not met."
        );
        value["roles"][1]["risk_if_failed"] = json!("No risk if they do not get it.");
        let error = validate(&value, &context()).unwrap_err().message();
        assert!(
            error.contains(
                "Ross: risk_if_failed copies \"the concrete social or relational cost to the \
                 character if the desire is not met\" from the instructions"
            ),
            "{error}"
        );
        assert!(
            error.contains(
                "Rachel: risk_if_failed names no concrete social cost; say what Rachel loses"
            ),
            "{error}"
        );
        let mut value = good();
        value["roles"][0]["risk_if_failed"] =
            json!("The character stands to lose if they do not get it");
        let error = validate(&value, &context()).unwrap_err().message();
        assert!(
            error.contains(
                "Ross: risk_if_failed names no concrete social cost; say what Ross loses"
            ),
            "{error}"
        );
    }

    #[test]
    fn rejects_the_same_desire_for_every_role_and_a_belief_that_repeats_the_background() {
        let mut value = good();
        for role in 0..2 {
            value["roles"][role]["desire"] = json!("To get the secret sorted out tonight.");
            value["roles"][role]["intention"] = json!("To get the secret sorted out tonight.");
        }
        value["roles"][1]["belief"] =
            json!("Ross and Rachel are old friends who share a secret about a party.");
        let error = validate(&value, &context()).unwrap_err().message();
        assert!(
            error.contains(
                "Ross: intention says nearly the same as its desire; write the step Ross \
                 takes to get there, in words of its own"
            ),
            "{error}"
        );
        assert!(
            error.contains("Rachel: desire says nearly the same as Ross's desire"),
            "{error}"
        );
        assert!(
            error.contains(
                "Rachel: belief repeats the background; write a belief that is Rachel's \
                 own instead"
            ),
            "{error}"
        );
    }

    #[test]
    fn a_desire_may_be_about_what_another_role_believes_but_not_be_its_desire() {
        let mut value = good();
        value["roles"][1]["desire"] = json!("Rachel wants to share the news before the party.");
        validate(&value, &context()).unwrap();
        value["roles"][1]["desire"] = json!("Rachel wants the secret out before the party.");
        let error = validate(&value, &context()).unwrap_err().message();
        assert!(
            error.contains("Rachel: desire says nearly the same as Ross's desire"),
            "{error}"
        );
    }

    #[test]
    fn a_field_may_take_up_a_phrase_of_the_background_to_say_something_of_its_own() {
        let mut value = good();
        value["roles"][1]["belief"] = json!(
            "Rachel is sure that two people who share a secret about a party cannot keep it \
             past the wedding, because Ross tells everyone everything."
        );
        validate(&value, &context()).unwrap();
        value["roles"][1]["belief"] = json!("That they share a secret about a party, really.");
        let error = validate(&value, &context()).unwrap_err().message();
        assert!(
            error.contains("Rachel: belief repeats the background"),
            "{error}"
        );
    }

    #[test]
    fn rejects_a_field_that_restates_the_description() {
        let mut value = good();
        value["roles"][0]["belief"] =
            json!("Ross believes that at closing time Ross asks Rachel to reveal it.");
        let error = validate(&value, &context()).unwrap_err().message();
        assert!(
            error.contains(
                "Ross: belief repeats the description; write a belief that is Ross's own"
            ),
            "{error}"
        );
    }

    #[test]
    fn rejects_looks_in_the_revised_description() {
        let mut value = good();
        value["revised_description"] =
            json!("At closing time Ross, in his brown jacket, presses Rachel to reveal it.");
        let error = validate(&value, &context()).unwrap_err().message();
        assert!(
            error.contains("revised_description describes looks or clothing (jacket)"),
            "{error}"
        );
    }
}

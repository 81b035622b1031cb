//! Step `affect`: how each role enters the scene: an emotion from a fixed set, and the facial
//! expression and body action that show it (what a portrait or a direct-vision agent sees).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::annotation::check::{
    Checked, Problems, Rejection, deserialize_answer, match_roles, named_role, require_text,
};
use crate::annotation::context::ScenarioContext;
use crate::annotation::gates::gate_free_text;
use crate::annotation::schema;
use crate::annotation::vocab::Emotion;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Affect {
    pub roles: Vec<RoleAffect>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleAffect {
    pub name: String,
    pub emotion: Emotion,
    pub facial_expression: String,
    pub body_action: String,
}

named_role!(RoleAffect);

pub type Answer = Affect;

pub fn schema() -> Value {
    schema::object(
        "Each participant's emotion, facial expression and body action as the scene opens.",
        &[(
            "roles",
            schema::roles(
                "One entry per participant.",
                &[
                    (
                        "emotion",
                        schema::label::<Emotion>("The character's emotion as the scene opens."),
                    ),
                    (
                        "facial_expression",
                        schema::text("The visible facial expression, in a short phrase."),
                    ),
                    (
                        "body_action",
                        schema::text("A visible body action or posture, in a short phrase."),
                    ),
                ],
            ),
        )],
    )
}

/// The answer, usable or not: an error names what leaves it unusable (with every other
/// problem, for the re-ask); a usable answer carries the quality gates it fails.
pub fn check(value: &Value, ctx: &ScenarioContext) -> Result<Checked<Affect>, Rejection> {
    let answer: Affect = deserialize_answer::<Affect, RoleAffect>(value)?;
    let mut problems = Problems::new();
    let roles = match_roles(answer.roles, ctx, &mut problems);
    for role in &roles {
        let who = Some(role.name.as_str());
        for (field, text) in [
            ("facial_expression", &role.facial_expression),
            ("body_action", &role.body_action),
        ] {
            if require_text(&mut problems, who, field, text) {
                gate_free_text(&mut problems, who, field, text, ctx);
            }
        }
    }
    problems.finish_checked(Affect { roles })
}

/// [`check`] for a clean answer: any problem is an error.
pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<Affect, Rejection> {
    check(value, ctx).and_then(Checked::clean)
}

/// An answer the checks keep clean for a plain scene between `scene.names` (see
/// [`crate::stages::descriptor::StepDescriptor::example`]).
pub fn example(scene: &crate::stages::descriptor::Example<'_>) -> Value {
    json!({"roles": scene.roles(&|name, _| json!({
        "name": name, "emotion": "anger", "facial_expression": "a tight frown",
        "body_action": "crosses arms",
    }))})
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::annotation::schema::strictness_problems;
    use crate::stages::fixture;

    fn good() -> Value {
        json!({"roles": [
            {"name": "Ross", "emotion": "anger", "facial_expression": "tight jaw, narrowed eyes",
             "body_action": "leans on the counter"},
            {"name": "Rachel", "emotion": "fear", "facial_expression": "avoids eye contact",
             "body_action": "wipes the counter"},
        ]})
    }

    #[test]
    fn schema_is_strict_and_lists_the_seven_emotions() {
        let schema = schema();
        assert_eq!(strictness_problems(&schema), Vec::<String>::new());
        assert_eq!(
            schema["properties"]["roles"]["items"]["properties"]["emotion"]["enum"]
                .as_array()
                .unwrap()
                .len(),
            7
        );
    }

    #[test]
    fn accepts_a_good_answer() {
        assert_eq!(
            validate(&good(), &fixture::context()).unwrap().roles[0].emotion,
            Emotion::Anger
        );
    }

    #[test]
    fn rejects_unlisted_emotions_and_empty_fields() {
        let mut value = good();
        value["roles"][1]["emotion"] = json!("nervous");
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(
            error.contains("roles[1] (Rachel)") && error.contains("nervous"),
            "{error}"
        );
        let mut value = good();
        value["roles"][0]["body_action"] = json!("");
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(error.contains("Ross: body_action is empty"), "{error}");
    }

    #[test]
    fn rejects_the_instructions_examples() {
        let mut ctx = fixture::context();
        // A user's prompt with an example in it (the default prompt carries none).
        let template = "[user]\nbody_action: what the body does, e.g. \"Arms crossed, leaning \
                        back.\"\n";
        ctx.instructions = crate::annotation::words::Instructions::from_prompt(template, &schema());
        validate(&good(), &ctx).unwrap();
        let mut value = good();
        value["roles"][0]["body_action"] = json!("Arms crossed, leaning back.");
        let error = validate(&value, &ctx).unwrap_err().message();
        assert!(
            error.contains("Ross: body_action is the instructions' example \"arms crossed leaning"),
            "{error}"
        );
    }
}

//! Step `describe`: the scenario's background and a description of the situation, consistent
//! with the dialogue and the group image, free of looks, inner states and absent characters.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::annotation::check::{
    Checked, Problems, Rejection, deserialize_whole, forbid_absent_cast, require_prose,
};
use crate::annotation::context::ScenarioContext;
use crate::annotation::gates::{forbid_looks_and_mental_states, forbid_restating, gate_free_text};
use crate::annotation::schema;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Description {
    /// What led up to the scene: relationships and prior events the dialogue implies.
    pub background: String,
    /// The situation as the scene opens: where, who, what is at stake.
    pub description: String,
}

pub type Answer = Description;

/// What a description that restates the background should say instead (the fields' split:
/// what came before, then the scene as it opens).
pub const RESTATED_BACKGROUND: &str =
    "say where the scene happens, who is there and what is at stake as it opens";

pub fn schema() -> Value {
    schema::object(
        "The scenario's background and description.",
        &[
            (
                "background",
                schema::sentences(
                    "What led up to this scene: relationships and earlier events the dialogue \
                     implies.",
                    1,
                    3,
                ),
            ),
            (
                "description",
                schema::sentences(
                    "The situation as the scene opens: where it happens, who is there and what is \
                     at stake.",
                    2,
                    4,
                ),
            ),
        ],
    )
}

/// The answer, usable or not: an error names what leaves it unusable (with every other
/// problem, for the re-ask); a usable answer carries the quality gates it fails.
pub fn check(value: &Value, ctx: &ScenarioContext) -> Result<Checked<Description>, Rejection> {
    let answer: Description = deserialize_whole(value)?;
    let mut problems = Problems::new();
    let mut both_written = true;
    for (field, text) in [
        ("background", &answer.background),
        ("description", &answer.description),
    ] {
        if require_prose(&mut problems, None, field, text) {
            forbid_absent_cast(&mut problems, None, field, text, ctx);
            gate_free_text(&mut problems, None, field, text, ctx);
            forbid_looks_and_mental_states(&mut problems, field, text);
        } else {
            both_written = false;
        }
    }
    if both_written {
        forbid_restating(
            &mut problems,
            "description",
            &answer.description,
            "background",
            &answer.background,
            ctx,
            RESTATED_BACKGROUND,
        );
    }
    problems.finish_checked(answer)
}

/// [`check`] for a clean answer: any problem is an error.
pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<Description, Rejection> {
    check(value, ctx).and_then(Checked::clean)
}

/// An answer the checks keep clean for a plain scene between `scene.names` (see
/// [`crate::stages::descriptor::StepDescriptor::example`]).
pub fn example(_scene: &crate::stages::descriptor::Example<'_>) -> Value {
    json!({
        "background": "Flatmates move out of a flat.",
        "description": "They argue about a dented van."
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::annotation::schema::strictness_problems;
    use crate::stages::fixture;

    #[test]
    fn schema_is_strict() {
        assert_eq!(strictness_problems(&schema()), Vec::<String>::new());
    }

    #[test]
    fn accepts_a_description_of_participants_only() {
        let value = json!({
            "background": "Ross and Rachel share a secret that a friend of theirs does not know \
                           yet.",
            "description": "After closing time at the coffee house, Ross presses Rachel to reveal \
                            the secret before a party."
        });
        assert_eq!(
            validate(&value, &fixture::context()).unwrap().background,
            value["background"]
        );
    }

    #[test]
    fn rejects_absent_characters_and_empty_fields() {
        let value =
            json!({ "background": "", "description": "Ross and Rachel argue while Joey listens." });
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(error.contains("background is empty"), "{error}");
        let value = json!({
            "background": "...",
            "description": "Ross and Rachel argue while Joey listens.",
        });
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(
            error.contains("background is only \"...\", a placeholder; write it"),
            "{error}"
        );
        assert!(
            error.contains("description mentions Joey, who is not in this scene"),
            "{error}"
        );
        let error = validate(&json!({ "background": "x" }), &fixture::context())
            .unwrap_err()
            .message();
        assert!(error.contains("missing field `description`"), "{error}");
    }

    #[test]
    fn rejects_a_repeated_clause_clothing_and_feelings() {
        let value = json!({
            "background": "Ross and Rachel are old friends; Rachel is worried about the secret.",
            "description": "Ross and Rachel are in the coffee house, Ross and Rachel are in the \
                            coffee house, Ross and Rachel are in the coffee house, Rachel in her \
                            green apron and Ross in a brown jacket."
        });
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(
            error.contains(
                "description says \"ross and rachel are in the coffee house\" more than once; \
                 say each thing once"
            ),
            "{error}"
        );
        assert!(
            error.contains("description describes looks or clothing (jacket, apron)"),
            "{error}"
        );
        assert!(
            error.contains("background describes feelings or thoughts (worried)"),
            "{error}"
        );
    }

    #[test]
    fn rejects_a_description_that_restates_the_background() {
        let value = json!({
            "background": "Ross and Rachel share a secret that a friend of theirs does not know \
                           yet.",
            "description": "After closing time at the coffee house, Ross presses Rachel to \
                            reveal it. Ross and Rachel share a secret that a friend of theirs \
                            does not know."
        });
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(
            error.contains(
                "description restates the background (\"Ross and Rachel share a secret that a \
                 friend of theirs does not know.\"); say where the scene happens"
            ),
            "{error}"
        );
    }

    #[test]
    fn rejects_a_copy_of_the_instructions() {
        let mut ctx = fixture::context();
        let template = crate::stages::describe::STEP.prompt.text;
        ctx.instructions = crate::annotation::words::Instructions::from_prompt(template, &schema());
        let value = json!({
            "background": "How the participants know each other, earlier events the dialogue \
                           points to.",
            "description": "After closing time at the coffee house, Ross presses Rachel to reveal \
                            the secret before a party."
        });
        let error = validate(&value, &ctx).unwrap_err().message();
        assert!(
            error.contains(
                "background copies \"how the participants know each other earlier events the \
                 dialogue points to\" from the instructions"
            ),
            "{error}"
        );
    }
}

//! Step `tasks`: per role, three behaviour tasks (expression, characteristic, interaction
//! regulation) and then the interaction-outcome task the simulation is judged on.
//!
//! Every task is one sentence naming its character, so a judge can check it against one
//! character's dialogue, inner thoughts or visible cues. The outcome task must also name
//! another participant: an outcome the character could reach alone is no interaction.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::annotation::check::{
    Problems, deserialize_answer, match_roles, mentions, named_role, require_task_sentence,
};
use crate::annotation::context::ScenarioContext;
use crate::annotation::schema;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tasks {
    pub roles: Vec<RoleTasks>,
}

/// Field order is the order the model writes in: the behaviour tasks first, so the outcome
/// task is written knowing them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleTasks {
    pub name: String,
    /// Acting out the role's expression style.
    pub expression_task: String,
    /// Acting out the role's conflict characteristic.
    pub characteristic_task: String,
    /// How the role steers the interaction: turn-taking, topic, tone.
    pub interaction_regulation_task: String,
    /// A concrete, observable result involving at least one other character.
    pub interaction_outcome_task: String,
}

named_role!(RoleTasks);

pub type Answer = Tasks;

pub fn schema() -> Value {
    let sentence =
        |what: &str| schema::sentence(&format!("One sentence naming the character: {what}"));
    schema::object(
        "Each participant's tasks.",
        &[(
            "roles",
            schema::roles(
                "One entry per participant.",
                &[
                    (
                        "expression_task",
                        sentence(
                            "how they show or hide what they feel and know, following their \
                             expression style.",
                        ),
                    ),
                    (
                        "characteristic_task",
                        sentence(
                            "how they act in the conflict, following their conflict \
                             characteristic.",
                        ),
                    ),
                    (
                        "interaction_regulation_task",
                        sentence(
                            "how they steer the conversation: who talks, about what, in what tone.",
                        ),
                    ),
                    (
                        "interaction_outcome_task",
                        sentence(
                            "a concrete, observable result they must bring about with at least one \
                             other named participant.",
                        ),
                    ),
                ],
            ),
        )],
    )
}

/// For a grammar-constrained decoder, each task of `name` is a sentence that opens with the name,
/// and the outcome task also names one of the `others`: what the validator asks, made
/// unmissable for a small model.
pub fn narrow_role_for_decoder(role: &mut Value, name: &str, others: &[String]) {
    for field in [
        "expression_task",
        "characteristic_task",
        "interaction_regulation_task",
    ] {
        role["properties"][field]["pattern"] =
            Value::from(schema::sentence_about_pattern(name, &[]));
    }
    role["properties"]["interaction_outcome_task"]["pattern"] =
        Value::from(schema::sentence_about_pattern(name, others));
}

pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<Tasks, String> {
    let answer: Tasks = deserialize_answer::<Tasks, RoleTasks>(value)?;
    let mut problems = Problems::new();
    let roles = match_roles(answer.roles, ctx, &mut problems);
    for role in &roles {
        let who = role.name.as_str();
        require_task_sentence(&mut problems, who, "expression_task", &role.expression_task);
        require_task_sentence(
            &mut problems,
            who,
            "characteristic_task",
            &role.characteristic_task,
        );
        require_task_sentence(
            &mut problems,
            who,
            "interaction_regulation_task",
            &role.interaction_regulation_task,
        );
        require_task_sentence(
            &mut problems,
            who,
            "interaction_outcome_task",
            &role.interaction_outcome_task,
        );
        let others: Vec<&str> = ctx
            .participants
            .iter()
            .map(String::as_str)
            .filter(|p| *p != who)
            .collect();
        let names_another = others
            .iter()
            .any(|other| mentions(&role.interaction_outcome_task, other));
        if !others.is_empty() && !role.interaction_outcome_task.trim().is_empty() && !names_another
        {
            problems.push(format!(
                "{who}: interaction_outcome_task names no other participant; make it an outcome \
                 {who} reaches with {} (name them), not something {who} can do alone",
                others.join(" or ")
            ));
        }
    }
    problems.finish()?;
    Ok(Tasks { roles })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::annotation::schema::strictness_problems;
    use crate::stages::fixture;

    fn good() -> Value {
        json!({"roles": [
            {"name": "Ross",
             "expression_task": "Ross states plainly that he is tired of keeping the secret.",
             "characteristic_task": "Ross insists that the secret be told tonight and does not \
                                     back down.",
             "interaction_regulation_task": "Ross brings the talk back to the party whenever \
                                             Rachel changes the subject.",
             "interaction_outcome_task": "Ross gets Rachel to agree out loud to tell the secret \
                                          before the party."},
            {"name": "Rachel",
             "expression_task": "Rachel hides how worried she is behind small talk.",
             "characteristic_task": "Rachel sidesteps every demand for a deadline.",
             "interaction_regulation_task": "Rachel keeps her answers short to wind the \
                                             conversation down.",
             "interaction_outcome_task": "Rachel gets Ross to promise he will not tell anyone \
                                          himself."},
        ]})
    }

    #[test]
    fn schema_is_strict() {
        assert_eq!(strictness_problems(&schema()), Vec::<String>::new());
    }

    #[test]
    fn accepts_a_good_answer() {
        assert_eq!(
            validate(&good(), &fixture::context()).unwrap().roles[1].name,
            "Rachel"
        );
    }

    #[test]
    fn rejects_unnamed_multi_sentence_and_solitary_tasks() {
        let mut value = good();
        value["roles"][0]["expression_task"] = json!("He says what he thinks.");
        value["roles"][0]["characteristic_task"] = json!("Ross insists. He does not back down.");
        value["roles"][1]["interaction_outcome_task"] =
            json!("Rachel finishes wiping the counter.");
        let error = validate(&value, &fixture::context()).unwrap_err();
        assert!(
            error.contains("Ross: expression_task does not name Ross"),
            "{error}"
        );
        assert!(
            error.contains("Ross: characteristic_task has 2 sentences"),
            "{error}"
        );
        assert!(
            error.contains("Rachel: interaction_outcome_task names no other participant"),
            "{error}"
        );
        let mut value = good();
        value["roles"][1]["interaction_regulation_task"] = json!("");
        let error = validate(&value, &fixture::context()).unwrap_err();
        assert!(
            error.contains("Rachel: interaction_regulation_task is empty"),
            "{error}"
        );
    }
}

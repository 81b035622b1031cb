//! Step `tasks`: per role, three behaviour tasks (expression, characteristic, interaction
//! regulation) and then the interaction-outcome task the simulation is judged on.
//!
//! Every task is one sentence naming its character, so a judge can check it against one
//! character's dialogue, inner thoughts or visible cues. The outcome task must also name
//! another participant: an outcome the character could reach alone is no interaction.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::annotation::check::{
    Checked, Problems, Rejection, closing_words, deserialize_answer, match_roles, mentions,
    named_role, require_task_sentence,
};
use crate::annotation::context::ScenarioContext;
use crate::annotation::gates::{
    Field, OtherRoles, forbid_annotation_terms, forbid_near_duplicates, gate_free_text,
};
use crate::annotation::schema::{self, TASK_LEAD_CHARS, TaskCap};
use crate::annotation::words::words;
use crate::stages::llm_step::SceneFields;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Tasks {
    pub roles: Vec<RoleTasks>,
}

/// Field order is the order the model writes in: the behaviour tasks first, so the outcome
/// task is written knowing them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
pub fn narrow_role_for_decoder(
    role: &mut Value,
    name: &str,
    others: &[String],
    _: &ScenarioContext,
    _: Option<&SceneFields>,
) {
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

/// The four task fields, in the order the model writes them, with what each is about in a few
/// words of the validator's own (what a field that repeats another should say instead): a hint
/// in the prompt's words would be copied into the answer, and rejected as a copy.
const TASK_FIELDS: [(&str, &str); 4] = [
    (
        "expression_task",
        "how the character lets feelings and knowledge show or not",
    ),
    (
        "characteristic_task",
        "the character's stance against the others",
    ),
    (
        "interaction_regulation_task",
        "how the character steers the talk",
    ),
    (
        "interaction_outcome_task",
        "the result the character gets from another participant",
    ),
];

impl RoleTasks {
    fn fields(&self) -> [(&'static str, &str); 4] {
        [
            (TASK_FIELDS[0].0, &self.expression_task),
            (TASK_FIELDS[1].0, &self.characteristic_task),
            (TASK_FIELDS[2].0, &self.interaction_regulation_task),
            (TASK_FIELDS[3].0, &self.interaction_outcome_task),
        ]
    }
}

/// The answer, usable or not: an error names what leaves it unusable (with every other
/// problem, for the re-ask); a usable answer carries the quality gates it fails.
pub fn check(value: &Value, ctx: &ScenarioContext) -> Result<Checked<Tasks>, Rejection> {
    let answer: Tasks = deserialize_answer::<Tasks, RoleTasks>(value)?;
    let mut problems = Problems::new();
    let roles = match_roles(answer.roles, ctx, &mut problems);
    for role in &roles {
        let who = role.name.as_str();
        let others: Vec<&str> = ctx
            .participants
            .iter()
            .map(String::as_str)
            .filter(|p| *p != who)
            .collect();
        for (field, text) in role.fields() {
            require_task_sentence(&mut problems, who, field, text);
            gate_free_text(&mut problems, Some(who), field, text, ctx);
            forbid_annotation_terms(&mut problems, who, field, text);
            let offered: Vec<String> = if field == "interaction_outcome_task" {
                others.iter().map(|other| other.to_string()).collect()
            } else {
                Vec::new()
            };
            match schema::task_cap_reached(text, who, &offered) {
                Some(TaskCap::Length) => problems.gate(
                    "task_cut_off",
                    Some(who),
                    field,
                    format!(
                        "{who}: {field} was cut off at the length limit (\"... {}\"); write a \
                     shorter sentence",
                        closing_words(text, 4)
                    ),
                ),
                // The sentence did not end early: it could not end before naming someone.
                Some(TaskCap::BeforeName) => problems.gate(
                    "task_cut_off",
                    Some(who),
                    field,
                    format!(
                        "{who}: {field} went on for {TASK_LEAD_CHARS} characters without naming \
                     {} and was cut off (\"... {}\"); name the other participant early, as in \
                     \"{who} gets {} to ...\"",
                        offered.join(" or "),
                        closing_words(text, 4),
                        offered
                            .first()
                            .map_or("another participant", String::as_str)
                    ),
                ),
                None => {}
            }
        }
        let names_another = others
            .iter()
            .any(|other| mentions(&role.interaction_outcome_task, other));
        if !others.is_empty() && !role.interaction_outcome_task.trim().is_empty() && !names_another
        {
            problems.gate("outcome_names_no_other", Some(who), "interaction_outcome_task", format!(
                "{who}: interaction_outcome_task names no other participant; make it an outcome \
                 {who} reaches with {} (name them), not something {who} can do alone",
                others.join(" or ")
            ));
        }
        if acts_on_itself(&role.interaction_outcome_task, who, ctx) {
            problems.gate("outcome_acts_on_itself", Some(who), "interaction_outcome_task", format!(
                "{who}: interaction_outcome_task has {who} act on {who}; make it an outcome {who} \
                 gets {} to bring about (\"{who} gets <another participant> to ...\")",
                if others.is_empty() {
                    "another participant".to_string()
                } else {
                    others.join(" or ")
                }
            ));
        }
    }
    // Within a role, and across roles: every task says something of its own.
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
        OtherRoles::EveryField,
        ctx,
        |field| {
            let about = TASK_FIELDS
                .iter()
                .find(|(name, _)| *name == field.name)
                .map_or("", |(_, about)| about);
            format!(
                "write a different sentence, about {} for {} in this scene",
                about.replace("the character", field.who),
                field.who
            )
        },
    );
    problems.finish_checked(Tasks { roles })
}

/// [`check`] for a clean answer: any problem is an error.
pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<Tasks, Rejection> {
    check(value, ctx).and_then(Checked::clean)
}

/// Reflexive pronouns: "Ross convinces himself" is Ross acting on Ross.
const REFLEXIVES: &[&str] = &["himself", "herself", "themselves", "themself", "itself"];

/// Whether the outcome `task` of `who` has `who` act on `who`: the first two participants it
/// names are both `who` ("Theo gets Theo to ..."), or a reflexive pronoun follows `who` within
/// two words ("Theo gets himself to ...").
fn acts_on_itself(task: &str, who: &str, ctx: &ScenarioContext) -> bool {
    let task_words = words(task);
    let named = ctx.mentions(&task_words);
    let self_twice = named.len() >= 2 && named[0].1 == who && named[1].1 == who;
    let reflexive = named.first().is_some_and(|(at, p)| {
        *p == who
            && task_words
                .iter()
                .skip(at + 1)
                .take(2)
                .any(|w| REFLEXIVES.contains(&w.as_str()))
    });
    self_twice || reflexive
}

/// An answer the checks keep clean for a plain scene between `scene.names` (see
/// [`crate::stages::descriptor::StepDescriptor::example`]).
pub fn example(scene: &crate::stages::descriptor::Example<'_>) -> Value {
    json!({"roles": scene.roles(&|name, other| {
        let t = scene.topic(name);
        json!({
            "name": name,
            "expression_task": format!("{name} states plainly what {t} costs."),
            "characteristic_task": format!("{name} refuses to give ground on {t}."),
            "interaction_regulation_task": format!("{name} brings the talk back to {t}."),
            "interaction_outcome_task":
                format!("{name} gets {other} to agree on a date to pay for {t}."),
        })
    })})
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
        let error = validate(&value, &fixture::context()).unwrap_err().message();
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
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(
            error.contains("Rachel: interaction_regulation_task is empty"),
            "{error}"
        );
    }

    #[test]
    fn rejects_a_task_cut_at_the_decoders_length_limit() {
        let mut value = good();
        // What the local decoder writes when a sentence runs into the pattern's limit: the
        // stretch after the last offered name is exactly as long as the pattern allows.
        let cut = "Ross gets Rachel to agree out loud, right now and in front of everyone at \
                   the coffee house, that she will tell Monica the whole secret tonight, before \
                   the party starts and before Joey or anyone else can say a word about it, and \
                   then to let them leave the v.";
        value["roles"][0]["interaction_outcome_task"] = json!(cut);
        assert_eq!(
            cut.split_once("Rachel ").unwrap().1.len() - 1,
            schema::TASK_TAIL_CHARS
        );
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(
            error.contains(
                "Ross: interaction_outcome_task was cut off at the length limit (\"... them \
                 leave the v.\"); write a shorter sentence"
            ),
            "{error}"
        );
    }

    #[test]
    fn an_outcome_that_names_nobody_before_the_decoders_limit_is_told_to_name_one_early() {
        let mut value = good();
        // The local decoder's pattern lets an outcome run this far without naming another
        // participant, then makes it write one: the sentence ends wherever the name lands.
        let mut lead = "must keep the plan quiet ".repeat(schema::TASK_LEAD_CHARS);
        lead.truncate(schema::TASK_LEAD_CHARS - 1);
        lead.push('s');
        let forced = format!("Ross {lead} Rachel.");
        value["roles"][0]["interaction_outcome_task"] = json!(forced);
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(
            error.contains(&format!(
                "Ross: interaction_outcome_task went on for {} characters without naming Rachel \
                 and was cut off",
                schema::TASK_LEAD_CHARS
            )) && error.contains("name the other participant early, as in \"Ross gets Rachel to"),
            "{error}"
        );
    }

    /// The demo's fixture with the step's real instructions, as the stage validates.
    fn context() -> ScenarioContext {
        let mut ctx = fixture::context();
        let template = crate::stages::tasks::STEP.prompt.text;
        ctx.instructions = crate::annotation::words::Instructions::from_prompt(template, &schema());
        ctx
    }

    #[test]
    fn accepts_a_good_answer_with_the_instructions() {
        validate(&good(), &context()).unwrap();
    }

    #[test]
    fn rejects_the_same_sentence_for_every_task() {
        let same = "Ross believes Rachel knows each other through their names and the dialogue \
                    points to the van and the van people.";
        let mut value = good();
        for field in TASK_FIELDS.map(|(field, _)| field) {
            value["roles"][0][field] = json!(same);
        }
        let error = validate(&value, &context()).unwrap_err().message();
        for field in [
            "characteristic_task",
            "interaction_regulation_task",
            "interaction_outcome_task",
        ] {
            assert!(
                error.contains(&format!(
                    "Ross: {field} says nearly the same as its expression_task; write a \
                     different sentence, about"
                )),
                "{field}: {error}"
            );
        }
        assert!(
            error.contains("about Ross's stance against the others for Ross"),
            "{error}"
        );
    }

    #[test]
    fn rejects_a_task_that_repeats_another_roles() {
        let mut value = good();
        value["roles"][1]["expression_task"] =
            json!("Rachel states plainly that she is tired of keeping the secret.");
        let error = validate(&value, &context()).unwrap_err().message();
        assert!(
            error
                .contains("Rachel: expression_task says nearly the same as Ross's expression_task"),
            "{error}"
        );
    }

    #[test]
    fn rejects_copies_of_the_prompt_and_a_role_acting_on_itself() {
        let mut value = good();
        value["roles"][0]["expression_task"] =
            json!("Ross shows or hides what they feel and know about the secret.");
        value["roles"][0]["interaction_outcome_task"] =
            json!("Ross gets Ross to agree out loud to call the landlord tonight");
        value["roles"][1]["interaction_outcome_task"] = json!("Rachel feels better.");
        let error = validate(&value, &context()).unwrap_err().message();
        assert!(
            error.contains("Ross: expression_task copies \"shows or hides what they feel and know")
                && error.contains("from the instructions"),
            "{error}"
        );
        assert!(
            error.contains("Ross: interaction_outcome_task has Ross act on Ross"),
            "{error}"
        );
        assert!(
            error.contains("Rachel: interaction_outcome_task names no other participant"),
            "{error}"
        );
    }

    #[test]
    fn a_role_acting_on_itself_is_told_from_one_naming_itself_twice() {
        let ctx = context();
        assert!(acts_on_itself("Ross gets Ross to agree.", "Ross", &ctx));
        assert!(acts_on_itself(
            "Ross talks himself into telling Rachel.",
            "Ross",
            &ctx
        ));
        assert!(!acts_on_itself(
            "Ross gets Rachel to admit that Ross was right.",
            "Ross",
            &ctx
        ));
        assert!(!acts_on_itself(
            "Ross's plan gets Rachel to talk.",
            "Ross",
            &ctx
        ));
    }
}

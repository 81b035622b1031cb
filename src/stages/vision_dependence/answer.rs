//! Step `vision_dependence`: whether judging each role's interaction-outcome task needs what
//! the characters can see. A strongly vision-dependent task must name the visual channels it
//! turns on; a weakly dependent one names none, so the two classes cannot blur.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::annotation::check::{
    Checked, Problems, Rejection, deserialize_answer, match_roles, named_role, require_prose,
};
use crate::annotation::context::ScenarioContext;
use crate::annotation::gates::{channels_named, gate_free_text};
use crate::annotation::schema;
use crate::annotation::vocab::{VisionDependenceClass, VisualChannel};
use crate::stages::llm_step::SceneFields;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VisionDependence {
    pub roles: Vec<RoleVisionDependence>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleVisionDependence {
    pub name: String,
    pub dependence: VisionDependenceClass,
    /// At least one when strongly dependent; empty when weakly.
    pub channels: Vec<VisualChannel>,
    pub reason: String,
}

named_role!(RoleVisionDependence);

pub type Answer = VisionDependence;

pub fn schema() -> Value {
    schema::object(
        "Whether judging each participant's interaction-outcome task needs vision.",
        &[(
            "roles",
            schema::roles(
                "One entry per participant.",
                &[
                    (
                        "dependence",
                        schema::label::<VisionDependenceClass>(
                            "strongly if the outcome can only be judged from a visible cue; weakly \
                             if the words are enough.",
                        ),
                    ),
                    (
                        "channels",
                        schema::array(
                            "The visible cues the outcome turns on: at least one when strongly, \
                             none when weakly.",
                            schema::label::<VisualChannel>("A visual channel."),
                            None,
                            Some(VisualChannel::ALL.len()),
                        ),
                    ),
                    ("reason", schema::text("One sentence on why.")),
                ],
            ),
        )],
    )
}

/// For decoders that follow the schema exactly: each role is strongly with at least one
/// channel or weakly with none, so the answer cannot pair the class with the wrong channels
/// (the validator's rule). Where the role's outcome task is known, the paper's rule, which is
/// literal, decides the class too: strongly with just the channels the task names, or weakly.
/// The 1.5B model answered "strongly" for tasks that name no channel through five re-asks.
pub fn narrow_role_for_decoder(
    role: &mut Value,
    name: &str,
    _others: &[String],
    context: &ScenarioContext,
    _: Option<&SceneFields>,
) {
    let shape = |class: VisionDependenceClass, channels: &[VisualChannel], min: usize| {
        let mut shape = role.clone();
        shape["properties"]["dependence"] = schema::labels_of("The class.", &[class]);
        let listed = &mut shape["properties"]["channels"];
        listed["minItems"] = Value::from(min);
        listed["maxItems"] = Value::from(channels.len());
        if !channels.is_empty() {
            listed["items"] = schema::labels_of("A visual channel.", channels);
        }
        shape
    };
    let outcome = context
        .earlier(&crate::stages::tasks::TASKS)
        .zip(context.role_named(name))
        .and_then(|(tasks, role)| {
            tasks
                .roles
                .into_iter()
                .nth(role.index())
                .map(|task| task.interaction_outcome_task)
        });
    let weakly = shape(VisionDependenceClass::Weakly, &[], 0);
    *role = match outcome {
        None => {
            let strongly = shape(VisionDependenceClass::Strongly, VisualChannel::ALL, 1);
            serde_json::json!({ "anyOf": [strongly, weakly] })
        }
        Some(task) => {
            let named: Vec<VisualChannel> = channels_named(&task)
                .into_iter()
                .map(|(channel, _)| channel)
                .collect();
            if named.is_empty() {
                weakly
            } else {
                shape(VisionDependenceClass::Strongly, &named, 1)
            }
        }
    };
}

/// The answer, usable or not: an error names what leaves it unusable (with every other
/// problem, for the re-ask); a usable answer carries the quality gates it fails.
pub fn check(value: &Value, ctx: &ScenarioContext) -> Result<Checked<VisionDependence>, Rejection> {
    let answer: VisionDependence =
        deserialize_answer::<VisionDependence, RoleVisionDependence>(value)?;
    let mut problems = Problems::new();
    let mut roles = match_roles(answer.roles, ctx, &mut problems);
    let tasks = ctx.earlier(&crate::stages::tasks::TASKS);
    for role in &mut roles {
        if require_prose(&mut problems, Some(&role.name), "reason", &role.reason) {
            gate_free_text(&mut problems, Some(&role.name), "reason", &role.reason, ctx);
        }
        let outcome = tasks
            .as_ref()
            .zip(ctx.role_named(&role.name))
            .and_then(|(tasks, id)| {
                tasks
                    .roles
                    .get(id.index())
                    .map(|task| task.interaction_outcome_task.as_str())
            });
        if let Some(outcome) = outcome {
            check_the_literal_rule(&mut problems, role, outcome);
        }
        match role.dependence {
            VisionDependenceClass::Strongly if role.channels.is_empty() => {
                let message = format!(
                    "{}: dependence is strongly but channels is empty; name the visual channels \
                     the outcome depends on ({}), or make it weakly",
                    role.name,
                    channel_list(VisualChannel::ALL.iter().copied())
                );
                let who = Some(role.name.as_str());
                problems.gate("strongly_without_channels", who, "channels", message);
            }
            VisionDependenceClass::Weakly if !role.channels.is_empty() => {
                let message = format!(
                    "{}: dependence is weakly but channels lists {}; leave channels empty, or make \
                     it strongly if the outcome needs them",
                    role.name,
                    channel_list(role.channels.iter().copied())
                );
                let who = Some(role.name.as_str());
                problems.gate("weakly_with_channels", who, "channels", message);
            }
            _ => {}
        }
        // A repeated channel says nothing new; keeping the first of each is not a judgement call.
        let mut seen = Vec::new();
        role.channels.retain(|channel| {
            let new = !seen.contains(channel);
            seen.push(*channel);
            new
        });
    }
    problems.finish_checked(VisionDependence { roles })
}

/// [`check`] for a clean answer: any problem is an error.
pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<VisionDependence, Rejection> {
    check(value, ctx).and_then(Checked::clean)
}

/// `channels` as a problem names them: "gaze, posture".
fn channel_list(channels: impl IntoIterator<Item = VisualChannel>) -> String {
    channels
        .into_iter()
        .map(|c| c.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The paper's rule, taken literally: an outcome task is strongly vision-dependent exactly when
/// it names a concrete visual channel (by the words of [`channels_named`]), and the channels
/// listed are the ones it names.
fn check_the_literal_rule(problems: &mut Problems, role: &RoleVisionDependence, outcome: &str) {
    let who = &role.name;
    let named = channels_named(outcome);
    let named_list = channel_list(named.iter().map(|(channel, _)| *channel));
    match role.dependence {
        VisionDependenceClass::Strongly if named.is_empty() => {
            let message = format!(
                "{who}: dependence is strongly but {who}'s interaction_outcome_task \
                 (\"{outcome}\") names no visual channel; make it weakly with channels [] \
                 (strongly only when the task itself names gaze, a facial expression, a visible \
                 emotion, a posture, a gesture or proximity)"
            );
            problems.gate(
                "strongly_but_unnamed",
                Some(who.as_str()),
                "dependence",
                message,
            );
        }
        VisionDependenceClass::Weakly if !named.is_empty() => {
            let message = format!(
                "{who}: dependence is weakly but {who}'s interaction_outcome_task names {} \
                 (\"{}\"); make it strongly with channels [{named_list}]",
                named_list, named[0].1
            );
            problems.gate(
                "weakly_but_named",
                Some(who.as_str()),
                "dependence",
                message,
            );
        }
        VisionDependenceClass::Strongly => {
            let unnamed: Vec<VisualChannel> = role
                .channels
                .iter()
                .copied()
                .filter(|c| !named.iter().any(|(n, _)| n == c))
                .collect();
            if !unnamed.is_empty() {
                problems.gate(
                    "channels_not_named",
                    Some(who.as_str()),
                    "channels",
                    format!(
                        "{who}: channels lists {}, which {who}'s interaction_outcome_task does not \
                     name; list only the channels it names: [{named_list}]",
                        channel_list(unnamed)
                    ),
                );
            }
        }
        VisionDependenceClass::Weakly => {}
    }
}

/// An answer the checks keep clean for a plain scene between `scene.names` (see
/// [`crate::stages::descriptor::StepDescriptor::example`]).
pub fn example(scene: &crate::stages::descriptor::Example<'_>) -> Value {
    json!({"roles": scene.roles(&|name, _| json!({
        "name": name, "dependence": "weakly", "channels": [], "reason": "The words say it.",
    }))})
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::annotation::schema::strictness_problems;
    use crate::stages::fixture;

    #[test]
    fn the_decoder_shape_ties_the_channels_to_the_class() {
        let mut role = schema()["properties"]["roles"]["items"].clone();
        role["properties"]["name"]["enum"] = json!(["Noor"]);
        narrow_role_for_decoder(
            &mut role,
            "Noor",
            &["Theo".to_string()],
            &fixture::context(),
            None,
        );
        let answer = |dependence: &str, channels: Value| {
            json!({
                "name": "Noor", "dependence": dependence, "channels": channels,
                "reason": "Her face shows it."
            })
        };
        let fits = |value: &Value| jsonschema::is_valid(&role, value);
        assert!(fits(&answer("strongly", json!(["gaze"]))));
        assert!(fits(&answer("weakly", json!([]))));
        assert!(
            !fits(&answer("weakly", json!(["gaze"]))),
            "weakly with channels"
        );
        assert!(
            !fits(&answer("strongly", json!([]))),
            "strongly without channels"
        );
        assert!(!fits(
            &json!({"name": "Theo", "dependence": "weakly", "channels": [], "reason": "x"})
        ));
        // llama.cpp turns it into a grammar (what the embedded model decodes with).
        let whole = json!({
            "type": "object",
            "properties": {"roles": {"type": "array", "prefixItems": [role]}}
        });
        llama_cpp_2::json_schema_to_grammar(&whole.to_string()).expect("llama.cpp takes the shape");
    }

    fn good() -> Value {
        json!({"roles": [
            {"name": "Ross", "dependence": "weakly", "channels": [],
             "reason": "Rachel's agreement is said out loud."},
            {"name": "Rachel", "dependence": "strongly",
             "channels": ["gaze", "facial_expression", "gaze"],
             "reason": "Whether Ross is reassured shows in his face rather than his words."},
        ]})
    }

    #[test]
    fn schema_is_strict() {
        assert_eq!(strictness_problems(&schema()), Vec::<String>::new());
    }

    #[test]
    fn accepts_a_good_answer_and_drops_repeated_channels() {
        let answer = validate(&good(), &fixture::context()).unwrap();
        assert_eq!(
            answer.roles[1].channels,
            [VisualChannel::Gaze, VisualChannel::FacialExpression]
        );
    }

    #[test]
    fn rejects_classes_that_disagree_with_channels() {
        let mut value = good();
        value["roles"][0]["channels"] = json!(["posture"]);
        value["roles"][1]["channels"] = json!([]);
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(
            error.contains("Ross: dependence is weakly but channels lists posture"),
            "{error}"
        );
        assert!(
            error.contains("Rachel: dependence is strongly but channels is empty"),
            "{error}"
        );
        let mut value = good();
        value["roles"][1]["channels"] = json!(["smell"]);
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(
            error.contains("roles[1] (Rachel)") && error.contains("smell"),
            "{error}"
        );
    }

    /// The fixture with tasks whose outcomes name a channel (Ross's) and none (Rachel's).
    fn context_with_tasks() -> ScenarioContext {
        let mut ctx = fixture::context();
        let tasks = crate::stages::tasks::answer::validate(
            &json!({"roles": [
                {"name": "Ross", "expression_task": "Ross says he is tired of the secret.",
                 "characteristic_task": "Ross insists on tonight.",
                 "interaction_regulation_task": "Ross steers back to the party.",
                 "interaction_outcome_task":
                     "Ross gets Rachel to meet his eyes and nod when he names the date."},
                {"name": "Rachel", "expression_task": "Rachel hides her worry.",
                 "characteristic_task": "Rachel sidesteps every deadline.",
                 "interaction_regulation_task": "Rachel keeps her answers short.",
                 "interaction_outcome_task": "Rachel gets Ross to drop the subject for tonight."}
            ]}),
            &ctx,
        )
        .unwrap();
        ctx.set_earlier(&crate::stages::tasks::TASKS, Some(tasks));
        ctx
    }

    #[test]
    fn with_the_outcome_tasks_known_the_decoder_shape_is_the_literal_rule() {
        let ctx = context_with_tasks();
        let role_for = |name: &str| {
            let mut role = schema()["properties"]["roles"]["items"].clone();
            role["properties"]["name"]["enum"] = json!([name]);
            narrow_role_for_decoder(&mut role, name, &[], &ctx, None);
            role
        };
        let answer = |name: &str, dependence: &str, channels: Value| {
            json!({"name": name, "dependence": dependence, "channels": channels,
                   "reason": "It shows."})
        };
        // Ross's task names his eyes and a nod: strongly, with gaze and gesture only.
        let ross = role_for("Ross");
        let fits = |value: &Value| jsonschema::is_valid(&ross, value);
        assert!(fits(&answer(
            "Ross",
            "strongly",
            json!(["gaze", "gesture"])
        )));
        assert!(fits(&answer("Ross", "strongly", json!(["gaze"]))));
        assert!(!fits(&answer("Ross", "strongly", json!(["posture"]))));
        assert!(!fits(&answer("Ross", "weakly", json!([]))));
        // Rachel's names no channel: weakly is all a decoder can write.
        let rachel = role_for("Rachel");
        let fits = |value: &Value| jsonschema::is_valid(&rachel, value);
        assert!(fits(&answer("Rachel", "weakly", json!([]))));
        assert!(!fits(&answer("Rachel", "strongly", json!(["gaze"]))));
        llama_cpp_2::json_schema_to_grammar(&ross.to_string()).unwrap();
        llama_cpp_2::json_schema_to_grammar(&rachel.to_string()).unwrap();
    }

    #[test]
    fn the_label_follows_the_channels_the_outcome_task_names() {
        let ctx = context_with_tasks();
        let good = json!({"roles": [
            {"name": "Ross", "dependence": "strongly", "channels": ["gesture", "gaze"],
             "reason": "Whether Rachel agrees shows in her nod and her eyes."},
            {"name": "Rachel", "dependence": "weakly", "channels": [],
             "reason": "Ross dropping the subject is heard in what he says."},
        ]});
        validate(&good, &ctx).unwrap();

        // The demo's answer: strongly, with all six channels, for tasks naming none or two.
        let all: Vec<&str> = VisualChannel::ALL.iter().map(|c| c.as_str()).collect();
        let mut value = good.clone();
        value["roles"][0]["channels"] = json!(all);
        value["roles"][1]["dependence"] = json!("strongly");
        value["roles"][1]["channels"] = json!(all);
        let error = validate(&value, &ctx).unwrap_err().message();
        assert!(
            error.contains(
                "Ross: channels lists facial_expression, visible_emotion, posture, proximity, \
                 which Ross's interaction_outcome_task does not name; list only the channels it \
                 names: [gaze, gesture]"
            ),
            "{error}"
        );
        assert!(
            error.contains(
                "Rachel: dependence is strongly but Rachel's interaction_outcome_task (\"Rachel \
                 gets Ross to drop the subject for tonight.\") names no visual channel; make it \
                 weakly with channels []"
            ),
            "{error}"
        );

        let mut value = good;
        value["roles"][0]["dependence"] = json!("weakly");
        value["roles"][0]["channels"] = json!([]);
        let error = validate(&value, &ctx).unwrap_err().message();
        assert!(
            error.contains(
                "Ross: dependence is weakly but Ross's interaction_outcome_task names gaze, \
                 gesture (\"eyes\"); make it strongly with channels [gaze, gesture]"
            ),
            "{error}"
        );
    }
}

//! Step `vision_dependence`: whether judging each role's interaction-outcome task needs what
//! the characters can see. A strongly vision-dependent task must name the visual channels it
//! turns on; a weakly dependent one names none, so the two classes cannot blur.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::check::{Problems, deserialize_answer, match_roles, named_role, require_text};
use super::context::ScenarioContext;
use super::schema;
use super::vocab::{VisionDependenceClass, VisualChannel};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisionDependence {
    pub roles: Vec<RoleVisionDependence>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
                            "strongly if the outcome can only be judged from a visible cue; weakly if the words are enough.",
                        ),
                    ),
                    (
                        "channels",
                        schema::array(
                            "The visible cues the outcome turns on: at least one when strongly, none when weakly.",
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

pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<VisionDependence, String> {
    let answer: VisionDependence =
        deserialize_answer::<VisionDependence, RoleVisionDependence>(value)?;
    let mut problems = Problems::new();
    let mut roles = match_roles(answer.roles, ctx, &mut problems);
    for role in &mut roles {
        require_text(&mut problems, Some(&role.name), "reason", &role.reason);
        match role.dependence {
            VisionDependenceClass::Strongly if role.channels.is_empty() => problems.push(format!(
                "{}: dependence is strongly but channels is empty; name the visual channels the outcome depends on ({}), or make it weakly",
                role.name,
                VisualChannel::ALL.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
            )),
            VisionDependenceClass::Weakly if !role.channels.is_empty() => problems.push(format!(
                "{}: dependence is weakly but channels lists {}; leave channels empty, or make it strongly if the outcome needs them",
                role.name,
                role.channels.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
            )),
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
    problems.finish()?;
    Ok(VisionDependence { roles })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::annotation::context::fixture;
    use crate::annotation::schema::strictness_problems;

    fn good() -> Value {
        json!({"roles": [
            {"name": "Ross", "dependence": "weakly", "channels": [], "reason": "Rachel's agreement is said out loud."},
            {"name": "Rachel", "dependence": "strongly", "channels": ["gaze", "facial_expression", "gaze"],
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
        let error = validate(&value, &fixture::context()).unwrap_err();
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
        let error = validate(&value, &fixture::context()).unwrap_err();
        assert!(
            error.contains("roles[1] (Rachel)") && error.contains("smell"),
            "{error}"
        );
    }
}

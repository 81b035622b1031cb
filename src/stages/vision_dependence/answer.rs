//! Step `vision_dependence`: whether judging each role's interaction-outcome task needs what
//! the characters can see. A strongly vision-dependent task must name the visual channels it
//! turns on; a weakly dependent one names none, so the two classes cannot blur.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::annotation::check::{
    Problems, deserialize_answer, match_roles, named_role, require_prose,
};
use crate::annotation::context::ScenarioContext;
use crate::annotation::schema;
use crate::annotation::vocab::{VisionDependenceClass, VisualChannel};

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

/// For decoders that follow the schema exactly: each role is one of two shapes, strongly with
/// at least one channel or weakly with none, so the answer cannot pair the class with the wrong
/// channels (the validator's rule).
pub fn narrow_role_for_decoder(role: &mut Value, _name: &str, _others: &[String]) {
    let shape = |class: VisionDependenceClass, min: usize, max: usize| {
        let mut shape = role.clone();
        shape["properties"]["dependence"] = schema::labels_of("The class.", &[class]);
        shape["properties"]["channels"]["minItems"] = Value::from(min);
        shape["properties"]["channels"]["maxItems"] = Value::from(max);
        shape
    };
    let strongly = shape(VisionDependenceClass::Strongly, 1, VisualChannel::ALL.len());
    let weakly = shape(VisionDependenceClass::Weakly, 0, 0);
    *role = serde_json::json!({ "anyOf": [strongly, weakly] });
}

pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<VisionDependence, String> {
    let answer: VisionDependence =
        deserialize_answer::<VisionDependence, RoleVisionDependence>(value)?;
    let mut problems = Problems::new();
    let mut roles = match_roles(answer.roles, ctx, &mut problems);
    for role in &mut roles {
        require_prose(&mut problems, Some(&role.name), "reason", &role.reason);
        match role.dependence {
            VisionDependenceClass::Strongly if role.channels.is_empty() => problems.push(format!(
                "{}: dependence is strongly but channels is empty; name the visual channels the \
                 outcome depends on ({}), or make it weakly",
                role.name,
                VisualChannel::ALL
                    .iter()
                    .map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            VisionDependenceClass::Weakly if !role.channels.is_empty() => problems.push(format!(
                "{}: dependence is weakly but channels lists {}; leave channels empty, or make it \
                 strongly if the outcome needs them",
                role.name,
                role.channels
                    .iter()
                    .map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
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
    use crate::annotation::schema::strictness_problems;
    use crate::stages::fixture;

    #[test]
    fn the_decoder_shape_ties_the_channels_to_the_class() {
        let mut role = schema()["properties"]["roles"]["items"].clone();
        role["properties"]["name"]["enum"] = json!(["Noor"]);
        narrow_role_for_decoder(&mut role, "Noor", &["Theo".to_string()]);
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

//! A scripted model behind the in-process MOCK OpenAI-compatible server: answers that pass
//! every validator for whichever step a request asks (named by its response schema), for
//! whoever takes part. `viss bench simulate` builds the front half of a synthetic benchmark with
//! it and the tests script their annotators with it; nothing it writes is a real annotation.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::{Value, json};

/// The step a request asks for, named by its response schema.
pub fn step_of(body: &Value) -> String {
    body["response_format"]["json_schema"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A short digest of the request's prompt, written into free-text answers: a changed prompt
/// gets a changed answer, as it would from a real model, so early cutoff cannot hide which
/// stages depend on it.
pub fn digest(body: &Value) -> String {
    let mut hasher = DefaultHasher::new();
    body["messages"].to_string().hash(&mut hasher);
    format!("{:06x}", hasher.finish() & 0xff_ffff)
}

/// What each participant's free text is about, by the participant's position in `people`: the
/// answers of different roles then differ by more than their names, as the quality gates
/// require (near-duplicate fields of different roles are rejected).
pub fn topic(people: &[impl AsRef<str>], name: &str) -> &'static str {
    const TOPICS: [&str; 6] = [
        "the fuel money",
        "the spare key",
        "the parking fine",
        "the broken lamp",
        "the late rent",
        "the heavy boxes",
    ];
    let index = people.iter().position(|p| p.as_ref() == name).unwrap_or(0);
    TOPICS[index % TOPICS.len()]
}

/// A valid answer to any annotation step for the participants the request's schema names;
/// `gender` gives each one's gender as the script states it ("unknown" where it does not).
pub fn annotation_answer(body: &Value, gender: &dyn Fn(&str) -> &'static str) -> Value {
    let schema = &body["response_format"]["json_schema"]["schema"];
    let names: Vec<String> = schema["properties"]["roles"]["items"]["properties"]["name"]["enum"]
        .as_array()
        .map(|n| {
            n.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let roles = |make: &dyn Fn(&str, &str) -> Value| -> Value {
        Value::Array(
            names
                .iter()
                .map(|name| {
                    let other = names.iter().find(|o| *o != name).unwrap_or(name);
                    make(name, other)
                })
                .collect(),
        )
    };
    match step_of(body).as_str() {
        "annotate" => json!({
            "dialogue_type": "persuasion",
            "roles": roles(&|name, _| json!({
                "name": name, "gender": gender(name), "age": "30s", "occupation": "mover"
            })),
        }),
        "describe" => json!({
            "background": "Flatmates move out of a flat.",
            "description": "They argue about a dented van."
        }),
        "profiles" => json!({"roles": roles(&|name, _| json!({
            "name": name,
            "profile": format!("{name} is moving house."),
            "expression_style": "honest_signaling",
            "conflict_characteristic": "competing",
            "non_competing_alternative": "compromising",
        }))}),
        "bdi_risk" => json!({
            "roles": roles(&|name, other| {
                let t = topic(&names, name);
                json!({
                    "name": name,
                    "belief": format!("{other} has been unfair about {t}."),
                    "desire": format!("A clear answer on {t} before tonight."),
                    "intention": format!("Press {other} to settle {t} today."),
                    "risk_if_failed": format!("Losing {other}'s trust over {t}."),
                })
            }),
            "revised_description": "They settle who pays for the dent.",
        }),
        "tasks" => json!({"roles": roles(&|name, other| {
            let t = topic(&names, name);
            json!({
                "name": name,
                "expression_task": format!("{name} states plainly what {t} costs."),
                "characteristic_task": format!("{name} refuses to give ground on {t}."),
                "interaction_regulation_task": format!("{name} brings the talk back to {t}."),
                "interaction_outcome_task":
                    format!("{name} gets {other} to agree on a date to pay for {t}."),
            })
        })}),
        "affect" => json!({"roles": roles(&|name, _| json!({
            "name": name, "emotion": "anger", "facial_expression": "a tight frown",
            "body_action": "crosses arms",
        }))}),
        "vision_dependence" => json!({"roles": roles(&|name, _| json!({
            "name": name, "dependence": "weakly", "channels": [], "reason": "The words say it.",
        }))}),
        other => json!({ "error": format!("the scripted model has no answer for {other:?}") }),
    }
}

/// An agent's turn that passes the protocol: the speaker (the system message opens "You are
/// NAME,") hands over to the first name it may and says something new (the request's seed and
/// digest make every message differ).
pub fn turn_answer(body: &Value) -> Value {
    let system = body["messages"][0]["content"].to_string();
    let me = system
        .split("You are ")
        .nth(1)
        .and_then(|after| after.split(',').next())
        .unwrap_or("someone");
    let schema = &body["response_format"]["json_schema"]["schema"];
    let next = schema["properties"]["next_speaker"]["enum"][0].clone();
    let d = digest(body);
    json!({
        "inner_thought": format!("{me} weighs what to push for next ({d})."),
        "emotion": "Joy",
        "emotion_description": "Pleased the talk is moving.",
        "image_edit": false,
        "facial_expression": "a small smile",
        "body_actions": "leans on the counter",
        "next_speaker": next,
        "message": format!("{me} speaks at seed {} ({d}) through {}.", body["seed"], body["model"]),
    })
}

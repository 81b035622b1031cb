//! A scripted model behind the in-process MOCK OpenAI-compatible server: answers that pass
//! every validator for whichever step a request asks (named by its response schema), for
//! whoever takes part. `viss bench simulate` builds the front half of a synthetic benchmark with
//! it and the tests script their annotators with it; nothing it writes is a real annotation.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::{Value, json};

use crate::stages::descriptor::Example;

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

pub use crate::stages::descriptor::topic;

/// A valid answer to any annotation step (its descriptor's example) for the participants the
/// request's schema names; `gender` gives each one's gender as the script states it
/// ("unknown" where it does not).
pub fn annotation_answer(body: &Value, gender: &dyn Fn(&str) -> &'static str) -> Value {
    let names = participant_names(body);
    let step = step_of(body);
    // What a model reads off the dialogue the prompt shows, one `Name: text` line per line said.
    let prompt = prompt_text(body);
    let lines = |name: &str| {
        let said = format!("{name}: ");
        prompt
            .lines()
            .filter(|line| line.starts_with(&said))
            .count()
    };
    match crate::stages::STEPS.iter().find(|s| s.stage() == step) {
        Some(descriptor) => {
            let mut answer = (descriptor.example)(&Example {
                names: &names,
                gender,
                lines: &lines,
            });
            if step == "relationships" {
                relate_as_stated(&mut answer, &prompt, &names);
            }
            answer
        }
        None if step == "instantiate" => cast_answer(&prompt, body["seed"].as_u64().unwrap_or(0)),
        None if step == "script_prediction" => crate::stages::script_prediction::example(),
        None if step == "blind_test" => crate::stages::blind_test::example(),
        None if step == "sense_turn" => sense_turn_answer(body),
        None if step == "evaluate_sense" => sense_evaluation_answer(body),
        None => json!({ "error": format!("the scripted model has no answer for {step:?}") }),
    }
}

/// Each pair of a `relationships` answer between `names` (the answer's roles and the others
/// they relate to) that the prompt's text relates ("his brother Theo") related as it says, as a
/// model reading the scene would.
fn relate_as_stated(answer: &mut Value, prompt: &str, names: &[String]) {
    let Some(roles) = answer["roles"].as_array_mut() else {
        return;
    };
    let stated = crate::stages::relationships::stated::stated_in_text(prompt, names);
    for role in roles.iter_mut() {
        let name = role["name"].as_str().unwrap_or_default().to_string();
        for relation in role["relationships"].as_array_mut().into_iter().flatten() {
            let other = relation["other"].as_str().unwrap_or_default();
            if let Some(found) = stated.iter().find(|r| r.relates(&name, other)) {
                relation["relationship"] = json!(found.allowed[0].as_str());
            }
        }
    }
}

/// The participants the request's schema names.
fn participant_names(body: &Value) -> Vec<String> {
    let schema = &body["response_format"]["json_schema"]["schema"];
    schema["properties"]["roles"]["items"]["properties"]["name"]["enum"]
        .as_array()
        .map(|n| {
            n.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The text of a request's messages, one after another.
fn prompt_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .map_or(String::new(), |messages| {
            messages
                .iter()
                .flat_map(|m| match &m["content"] {
                    Value::Array(parts) => {
                        parts.iter().filter_map(|p| p["text"].as_str()).collect()
                    }
                    content => content.as_str().into_iter().collect::<Vec<_>>(),
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
}

/// The scripted model's answer to any request a build makes: an agent's turn, or any other
/// step's answer ([`annotation_answer`]), each participant's gender as the scene's description
/// in the prompt states it ("Noor, the nurse in his thirties"; "unknown" where it does not).
pub fn answer(body: &Value) -> Value {
    if step_of(body) == "turn" {
        return turn_answer(body);
    }
    let prompt = prompt_text(body);
    let names = participant_names(body);
    let sentences: Vec<String> = prompt
        .lines()
        .flat_map(crate::annotation::check::sentences)
        .collect();
    annotation_answer(
        body,
        &|name| match crate::stages::annotate::answer::gender_in_apposition(
            sentences.iter().cloned(),
            &names,
            name,
        ) {
            Some((crate::annotation::Gender::Male, _)) => "male",
            Some((crate::annotation::Gender::Female, _)) => "female",
            _ => "unknown",
        },
    )
}

/// An AgentSense interview's or judge's answer that passes its checks: every goal the schema
/// asks about reached when its number is odd, every question answered A.
pub fn sense_evaluation_answer(body: &Value) -> Value {
    let schema = &body["response_format"]["json_schema"]["schema"]["properties"];
    let keys = |part: &str| -> Vec<String> {
        schema[part]["required"]
            .as_array()
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| k.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let goals: serde_json::Map<String, Value> = keys("goals")
        .into_iter()
        .enumerate()
        .map(|(index, key)| {
            let verdict =
                json!({"reason": "The last turn decides it.", "achieved": index % 2 == 0});
            (key, verdict)
        })
        .collect();
    let mut answer = json!({ "goals": goals });
    let questions = keys("questions");
    if !questions.is_empty() {
        let choices: serde_json::Map<String, Value> =
            questions.into_iter().map(|key| (key, json!("A"))).collect();
        answer["questions"] = Value::Object(choices);
    }
    answer
}

/// A character's turn in an AgentSense run that passes its checks: the speaker (the system
/// message opens "You are NAME.") says something new (the digest of the conversation so far).
pub fn sense_turn_answer(body: &Value) -> Value {
    let system = body["messages"][0]["content"].to_string();
    let me = system
        .split("You are ")
        .nth(1)
        .and_then(|after| after.split('.').next())
        .unwrap_or("someone");
    json!({
        "action_type": "speak",
        "argument": format!("{me} raises point {}.", digest(body)),
    })
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

/// A cast for `instantiate`'s prompt that keeps the rules it states for each slot ("- {r1}: must
/// have age 20 to 49, gender female, occupation nurse."), named after the request's seed.
pub fn cast_answer(prompt: &str, seed: u64) -> Value {
    use crate::stages::relationships::answer::RoleConstraints;
    let rules: Vec<RoleConstraints> = prompt
        .lines()
        .filter_map(|line| line.strip_prefix("- {r"))
        .filter_map(|rest| {
            let (number, rest) = rest.split_once("}: must have ")?;
            let index = number.parse::<usize>().ok()?.checked_sub(1)?;
            let rules = rest.split('.').next()?;
            let mut constraint = RoleConstraints {
                role: crate::text::role::RoleId::at(index),
                gender: None,
                age: (18, 80),
                occupation: None,
                reasons: Vec::new(),
            };
            for rule in rules.split(", ") {
                if let Some(range) = rule.strip_prefix("age ") {
                    let (low, high) = range.split_once(" to ")?;
                    constraint.age = (low.parse().ok()?, high.parse().ok()?);
                } else if let Some(gender) = rule.strip_prefix("gender ") {
                    constraint.gender = serde_json::from_value(json!(gender)).ok();
                } else if let Some(occupation) = rule.strip_prefix("occupation ") {
                    constraint.occupation = Some(occupation.to_string());
                }
            }
            Some(constraint)
        })
        .collect();
    crate::stages::instantiate::answer::example(&rules, seed)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_scripted_model_gives_the_genders_the_scene_states_and_no_others() {
        let heading = "[Scene: The rental office. Bruno, the rental clerk, a man in his fifties, \
                       stands behind the counter. Noor, the nurse in his thirties, and Mila, the \
                       retired teacher in her sixties, come in with Ada.]";
        let body = json!({
            "messages": [{"role": "user", "content": format!("{heading}\nNoor: We are here.")}],
            "response_format": {"json_schema": {"name": "annotate", "schema": {"properties": {
                "roles": {"items": {"properties": {"name": {
                    "enum": ["Bruno", "Noor", "Mila", "Ada"]}}}}}}}},
        });
        let answer = super::answer(&body);
        let gender = |name: &str| {
            answer["roles"]
                .as_array()
                .unwrap()
                .iter()
                .find(|role| role["name"] == name)
                .map(|role| role["gender"].clone())
                .unwrap()
        };
        assert_eq!(gender("Bruno"), "male", "{answer}");
        assert_eq!(gender("Noor"), "male");
        assert_eq!(gender("Mila"), "female");
        assert_eq!(gender("Ada"), "unknown");
    }
}

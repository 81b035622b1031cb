//! Reading the requests the in-process MOCK OpenAI-compatible server receives, for the tests'
//! scripted annotators.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::Value;

/// The step a request asks for, named by its response schema.
pub fn step_of(body: &Value) -> String {
    body["response_format"]["json_schema"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The participants the request's schema binds the roles to, in order.
pub fn participants(body: &Value) -> Vec<String> {
    let schema = &body["response_format"]["json_schema"]["schema"];
    let names = &schema["properties"]["roles"]["items"]["properties"]["name"]["enum"];
    names
        .as_array()
        .map(|n| n.iter().map(|v| v.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// A short digest of the request's prompt, written into the mock's free-text answers: a changed
/// prompt gets a changed answer, as it would from a real model, so early cutoff cannot hide
/// which stages depend on it.
pub fn digest(body: &Value) -> String {
    let mut hasher = DefaultHasher::new();
    body["messages"].to_string().hash(&mut hasher);
    format!("{:06x}", hasher.finish() & 0xff_ffff)
}

/// The report's count of `stage`'s jobs that ran, from `viss build --json`.
pub fn ran(report: &Value, stage: &str) -> u64 {
    report["stages"]
        .as_array()
        .and_then(|stages| stages.iter().find(|s| s[0] == stage))
        .map_or(0, |s| s[1]["ran"].as_u64().unwrap_or(0))
}

/// What each participant's free text is about, by the participant's position in `people`: the
/// scripted answers of different roles then differ by more than their names, as the
/// validators' quality gates require (near-duplicate fields of different roles are rejected).
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

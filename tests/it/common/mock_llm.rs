//! Reading the requests the in-process MOCK OpenAI-compatible server receives, for the tests'
//! scripted annotators.

use std::collections::BTreeMap;

use serde_json::Value;
use viss::llm::mock_server::MockServer;

pub use viss::bench::scripted::{digest, step_of, topic};

/// The participants the request's schema binds the roles to, in order.
pub fn participants(body: &Value) -> Vec<String> {
    let schema = &body["response_format"]["json_schema"]["schema"];
    let names = &schema["properties"]["roles"]["items"]["properties"]["name"]["enum"];
    names
        .as_array()
        .map(|n| n.iter().map(|v| v.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// A valid answer for whichever LLM step the request asks about the demo show, for whoever
/// takes part.
pub fn demo_answer(body: &Value) -> Value {
    // The demo's headings give every gender: "unknown" would be re-asked.
    viss::bench::scripted::annotation_answer(body, &|name| {
        if name == "Mila" { "female" } else { "male" }
    })
}

/// The report's count of `stage`'s jobs that ran, from `viss build --json`.
pub fn ran(report: &Value, stage: &str) -> u64 {
    report["stages"]
        .as_array()
        .and_then(|stages| stages.iter().find(|s| s[0] == stage))
        .unwrap_or_else(|| panic!("no stage {stage} in the report: {report}"))[1]["ran"]
        .as_u64()
        .unwrap_or_else(|| panic!("{stage} has no ran count: {report}"))
}

/// How many requests `server` received per step, from the first request on.
pub fn requests_by_step(server: &MockServer) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for index in 0..server.request_count() {
        *counts.entry(step_of(&server.body(index))).or_default() += 1;
    }
    counts
}

/// The AgentSense construction stages that ask a model, each asked per scenario template.
pub const AGENTSENSE_LLM_STAGES: [&str; 7] = [
    "goals",
    "private_info",
    "anonymize",
    "relationships",
    "instantiate",
    "script_prediction",
    "blind_test",
];

/// The AgentViSS steps' requests `server` received since `before` (its [`requests_by_step`]
/// then), once it is checked that each AgentSense stage asked for one scenario at most: five
/// casts, two questions for each of two roles, one request for the others.
pub fn new_agentviss_requests_for_one_scenario(
    before: &BTreeMap<String, usize>,
    server: &MockServer,
) -> usize {
    let after = requests_by_step(server);
    let new = |step: &str| after.get(step).unwrap_or(&0) - before.get(step).unwrap_or(&0);
    for stage in AGENTSENSE_LLM_STAGES {
        let most = match stage {
            "instantiate" => 5,
            "blind_test" => 4,
            _ => 1,
        };
        assert!(
            new(stage) <= most,
            "{stage} asked {} times: {after:?}",
            new(stage)
        );
    }
    after
        .keys()
        .filter(|step| !AGENTSENSE_LLM_STAGES.contains(&step.as_str()))
        .map(|step| new(step))
        .sum()
}

//! Reading the requests the in-process MOCK OpenAI-compatible server receives, for the tests'
//! scripted annotators.

use serde_json::Value;

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

/// The report's count of `stage`'s jobs that ran, from `viss build --json`.
pub fn ran(report: &Value, stage: &str) -> u64 {
    report["stages"]
        .as_array()
        .and_then(|stages| stages.iter().find(|s| s[0] == stage))
        .unwrap_or_else(|| panic!("no stage {stage} in the report: {report}"))[1]["ran"]
        .as_u64()
        .unwrap_or_else(|| panic!("{stage} has no ran count: {report}"))
}

//! Spending caps (`[llm] max_cost`, `[llm.max_cost_per_stage]`) against a priced endpoint: the
//! in-process mock of the OpenAI API (the network boundary), which bills 100 prompt and 20
//! completion tokens per answer.

use serde_json::Value;
use viss::llm::mock_server::{BackgroundMockServer, MockReply};

use crate::common::mock_llm::ran;
use crate::llm_stages::{LlmProject, text, valid_answer, viss};

/// Every request the annotation chain sends for the fixture's two scenes, uncapped.
const UNCAPPED_REQUESTS: usize = 14;

/// The mock model at $1,000 and $2,000 per million prompt and completion tokens: $0.14 an
/// answer.
fn priced(project: &LlmProject) {
    let path = project.root.join("viss.toml");
    let config = std::fs::read_to_string(&path).unwrap().replace(
        "input_per_mtok = 1.0\noutput_per_mtok = 2.0\n",
        "input_per_mtok = 1000.0\noutput_per_mtok = 2000.0\n",
    );
    std::fs::write(&path, config).unwrap();
}

fn set_caps(project: &LlmProject, caps: &str) {
    let path = project.root.join("viss.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    let config = match config.find("\n# caps\n") {
        Some(at) => config[..at].to_string(),
        None => config,
    };
    std::fs::write(&path, format!("{config}\n# caps\n{caps}")).unwrap();
}

fn build(project: &LlmProject) -> (std::process::Output, Value) {
    let output = viss(
        &project.root,
        &[
            "build",
            "--until",
            "affect,vision_dependence",
            "--json",
            "-j",
            "1",
        ],
    );
    let report = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (output, report)
}

#[test]
fn mock_endpoint_a_capped_build_sends_nothing_past_its_cap_and_a_larger_one_pays_nothing_twice() {
    let mock =
        BackgroundMockServer::start(|_, body| MockReply::answer(&valid_answer(body).to_string()));
    let project = LlmProject::new(&mock.server().base_url);
    priced(&project);

    // A stage's cap: `tasks` may spend a cent, less than any request could cost.
    set_caps(&project, "[llm.max_cost_per_stage]\ntasks = 0.01\n");
    let (output, report) = build(&project);
    assert!(!output.status.success(), "{}", text(&output));
    assert_eq!(ran(&report, "annotate"), 2, "{report}");
    assert_eq!(ran(&report, "tasks"), 0, "{report}");
    assert_eq!(report["budget"]["stages"]["tasks"]["refused_requests"], 2);
    assert_eq!(report["budget"]["stages"]["tasks"]["spent_usd"], 0.0);
    let failures = report["failures"].to_string();
    assert!(
        failures
            .contains("mock:mock-model was not asked: not sent: [llm.max_cost_per_stage] tasks"),
        "{failures}"
    );
    // What does not need `tasks` was asked, once.
    let first = mock.server().request_count();
    assert!(first >= 8 && first < UNCAPPED_REQUESTS, "{first}");

    // The build's cap, below what any request could cost: what is still to ask stops at it.
    set_caps(&project, "[llm]\nmax_cost = 0.01\n");
    let (output, report) = build(&project);
    assert!(!output.status.success(), "{}", text(&output));
    assert_eq!(
        mock.server().request_count(),
        first,
        "nothing could be sent"
    );
    let spent = report["budget"]["spent_usd"].as_f64().unwrap();
    assert!(spent <= 0.01, "{report}");
    let printed = text(&viss(
        &project.root,
        &["build", "--until", "affect,vision_dependence"],
    ));
    assert!(
        printed.contains("budget: spent $0.0000 of [llm] max_cost $0.0100"),
        "{printed}"
    );
    assert!(printed.contains("request(s) not sent"), "{printed}");
    assert!(printed.contains("raise the cap in viss.toml"), "{printed}");

    // A cap that holds what is left: the build finishes, and nothing is asked twice.
    set_caps(&project, "[llm]\nmax_cost = 1000.0\n");
    let (output, report) = build(&project);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(ran(&report, "tasks"), 2, "{report}");
    assert_eq!(mock.server().request_count(), UNCAPPED_REQUESTS);
    let spent = report["budget"]["spent_usd"].as_f64().unwrap();
    let asked = (UNCAPPED_REQUESTS - first) as f64;
    assert!((spent - asked * 0.14).abs() < 1e-9, "{report}");

    // A cap with a model that has no price cannot be kept: the build says what to add.
    let path = project.root.join("viss.toml");
    let config = std::fs::read_to_string(&path).unwrap().replace(
        "[llm.endpoints.mock.prices.\"mock-model\"]\ninput_per_mtok = 1000.0\noutput_per_mtok \
         = 2000.0\n",
        "",
    );
    std::fs::write(&path, config).unwrap();
    std::fs::remove_dir_all(project.root.join("artifacts")).unwrap();
    let (output, report) = build(&project);
    assert!(!output.status.success());
    let failures = report["failures"].to_string();
    assert!(
        failures.contains("[llm] max_cost is set, but mock:mock-model has no price"),
        "{failures}"
    );
    assert_eq!(mock.server().request_count(), UNCAPPED_REQUESTS);
}

//! What language models cost: the estimate of `viss build --dry-run`, and the spending caps
//! (`[llm] max_cost`, `[llm.max_cost_per_stage]`), against a priced endpoint: the in-process
//! mock of the OpenAI API (the network boundary), which bills 100 prompt and 20 completion
//! tokens per answer.

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
    assert!((8..UNCAPPED_REQUESTS).contains(&first), "{first}");

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

fn stage_estimate<'a>(report: &'a Value, stage: &str) -> &'a Value {
    report["estimate"]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == stage)
        .unwrap_or_else(|| panic!("no estimate for {stage}: {report}"))
}

#[test]
fn mock_endpoint_a_dry_run_estimates_requests_and_cost_and_the_build_spends_that() {
    let mock =
        BackgroundMockServer::start(|_, body| MockReply::answer(&valid_answer(body).to_string()));
    let project = LlmProject::new(&mock.server().base_url);
    priced(&project);
    let dry_run = |project: &LlmProject| {
        let output = viss(
            &project.root,
            &[
                "build",
                "--until",
                "affect,vision_dependence",
                "--dry-run",
                "--json",
            ],
        );
        assert!(output.status.success(), "{}", text(&output));
        serde_json::from_slice::<Value>(&output.stdout).unwrap()
    };

    // Nothing built: the episode's scenarios are not known, and nothing is stored to count by.
    let report = dry_run(&project);
    let annotate = stage_estimate(&report, "annotate");
    assert_eq!(annotate["incomplete"], true, "{report}");
    assert_eq!(annotate["basis"], "prior");
    let printed = text(&viss(
        &project.root,
        &["build", "--until", "affect,vision_dependence", "--dry-run"],
    ));
    assert!(
        printed.contains("language-model requests it would send"),
        "{printed}"
    );
    assert!(
        printed.contains("viss build --until parse_script"),
        "{printed}"
    );
    assert_eq!(mock.server().request_count(), 0, "a dry run asks nothing");

    // Parsed: two scenarios, each step asked about each at the prior's rate, priced.
    let output = viss(&project.root, &["build", "--until", "parse_script"]);
    assert!(output.status.success(), "{}", text(&output));
    let report = dry_run(&project);
    let annotate = stage_estimate(&report, "annotate");
    assert_eq!(annotate["items"], 2, "{report}");
    assert_eq!(annotate["incomplete"], false);
    assert_eq!(annotate["models"][0], "mock:mock-model");
    let cost = &annotate["cost_usd"];
    assert!(cost["low"].as_f64().unwrap() > 0.0, "{report}");
    assert!(
        cost["low"].as_f64() <= cost["expected"].as_f64(),
        "{report}"
    );
    assert!(
        cost["expected"].as_f64() <= cost["high"].as_f64(),
        "{report}"
    );

    // Built, then one prompt changed: the estimate counts that step's items at its measured
    // rates, and the build then spends what it said.
    let (output, _) = build(&project);
    assert!(output.status.success(), "{}", text(&output));
    let prompt = project.root.join("prompts/tasks.j2");
    let text_now = std::fs::read_to_string(&prompt).unwrap();
    std::fs::write(&prompt, format!("{text_now}\nBe brief.\n")).unwrap();
    let report = dry_run(&project);
    let tasks = stage_estimate(&report, "tasks");
    assert_eq!(tasks["items"], 2, "{report}");
    assert_eq!(tasks["basis"]["measured"]["items"], 2, "{report}");
    assert_eq!(tasks["requests"]["expected"], 2.0, "{report}");
    let expected = tasks["cost_usd"]["expected"].as_f64().unwrap();
    assert!((expected - 2.0 * 0.14).abs() < 1e-9, "{report}");
    // What reads the changed answers waits on it, and is counted too.
    let estimated_requests = report["estimate"]["requests"]["expected"].as_f64().unwrap();
    let estimated_cost = report["estimate"]["cost_usd"]["expected"].as_f64().unwrap();
    let before = mock.server().request_count();
    let (output, built) = build(&project);
    assert!(output.status.success(), "{}", text(&output));
    let asked = mock.server().request_count() - before;
    assert!(asked > 2, "what reads tasks' answers ran too: {built}");
    assert_eq!(asked as f64, estimated_requests, "{report}");
    let spent = built["usage"]["cost_usd"].as_f64().unwrap();
    assert!((spent - estimated_cost).abs() < 1e-9, "{spent} vs {report}");
}

//! What language models cost: the estimate of `viss build --dry-run`, and the spending caps
//! (`[llm] max_cost`, `[llm.max_cost_per_stage]`), against a priced endpoint: the in-process
//! mock of the OpenAI API (the network boundary), which bills 100 prompt and 20 completion
//! tokens per answer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use viss::llm::mock_server::{BackgroundMockServer, BatchBehaviour, MockReply};

use crate::common::mock_llm::{ran, step_of};
use crate::llm_stages::{LlmProject, counts, text, valid_answer, viss};

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
    let range = &report["estimate"]["cost_usd"];
    assert!(range["low"].as_f64().unwrap() <= spent, "{report}");
    assert!(spent <= range["high"].as_f64().unwrap(), "{report}");

    // Warm: nothing to run, nothing to pay.
    let report = dry_run(&project);
    assert_eq!(report["estimate"]["requests"]["high"], 0.0, "{report}");
    assert_eq!(report["estimate"]["cost_usd"]["high"], 0.0, "{report}");

    // One step's answer damaged on disk and its record forgotten by `viss verify`: the item
    // runs again and the request cache answers all of it. The dry run runs it from the cache
    // alone and counts it free; the same answer comes out, so nothing after it would run.
    let scenario = project.scenario(0);
    let damaged = {
        let project = viss::project::Project::open(&project.root).unwrap();
        let workspace =
            viss::workspace::Workspace::open(project, viss::stages::BUILTIN, "test").unwrap();
        let record = workspace.store().index().get("tasks", &scenario).unwrap();
        let hash = record.expect("a stored tasks record").outputs["tasks"];
        workspace.store().blobs().local_path(&hash).unwrap()
    };
    let mut bytes = std::fs::read(&damaged).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&damaged, bytes).unwrap();
    let verified = text(&viss(&project.root, &["verify"]));
    assert!(
        verified.contains(&format!("will rebuild: tasks {scenario}")),
        "{verified}"
    );
    let report = dry_run(&project);
    let tasks = stage_estimate(&report, "tasks");
    assert_eq!(tasks["items"], 1, "{report}");
    assert_eq!(tasks["items_from_cache"], 1, "{report}");
    assert_eq!(tasks["answers_from_cache"], 1, "{report}");
    assert_eq!(tasks["requests"]["high"], 0.0, "{report}");
    assert_eq!(report["estimate"]["answers_from_cache"], 1, "{report}");
    assert_eq!(report["estimate"]["cost_usd"]["high"], 0.0, "{report}");
    let after_tasks = counts(&report, "vision_dependence");
    assert_eq!(after_tasks["would_run"], 0, "{report}");
    assert_eq!(after_tasks["waiting"], 0, "{report}");
    let printed = text(&viss(
        &project.root,
        &["build", "--until", "affect,vision_dependence", "--dry-run"],
    ));
    assert!(
        printed.contains("those the request cache answers (free)"),
        "{printed}"
    );
    let before = mock.server().request_count();
    let (output, built) = build(&project);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(ran(&built, "tasks"), 1, "{built}");
    assert_eq!(ran(&built, "vision_dependence"), 0, "{built}");
    assert_eq!(mock.server().request_count(), before, "the cache answered");

    // The index lost, the request cache kept: every item runs again, no question is asked, and
    // `viss status` says what the cache saved (14 answers at $0.14 when first asked).
    let store = project.root.join("artifacts/v3");
    std::fs::remove_dir_all(store.join("index")).unwrap();
    std::fs::remove_file(store.join("index.seal")).unwrap();
    let before = mock.server().request_count();
    let (output, _) = build(&project);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(mock.server().request_count(), before);
    let status = text(&viss(&project.root, &["status"]));
    assert!(
        status.contains(&format!(
            "the request cache answered {UNCAPPED_REQUESTS} question(s) of the stored runs \
             instead of asking; they cost $1.9600 when first asked"
        )),
        "{status}"
    );
    assert!(status.contains("tasks 2 ($0.2800)"), "{status}");
}

/// The endpoint of `project` answers through its batch API, with short waits.
fn batched(project: &LlmProject) {
    let path = project.root.join("viss.toml");
    let config = std::fs::read_to_string(&path).unwrap().replace(
        "retry_backoff_seconds = 0.01\n",
        "retry_backoff_seconds = 0.01\nbatch = true\nbatch_window_seconds = 0.3\n\
         batch_poll_seconds = 0.05\n",
    );
    std::fs::write(&path, config).unwrap();
}

/// Every stage's answer for every scenario, as `viss show` prints it.
fn answers(project: &LlmProject) -> BTreeMap<String, Value> {
    let mut answers = BTreeMap::new();
    for (stage, output) in [
        ("annotate", "annotation"),
        ("describe", "description"),
        ("bdi_risk", "bdi_risk"),
        ("tasks", "tasks"),
        ("affect", "affect"),
        ("vision_dependence", "vision_dependence"),
    ] {
        for index in 0..2 {
            let scenario = project.scenario(index);
            let record = project.record(stage, &scenario, output);
            answers.insert(format!("{stage} {scenario}"), record["answer"].clone());
        }
    }
    answers
}

#[test]
fn mock_endpoint_batches_resume_by_id_after_a_kill_and_resubmit_only_what_went_unanswered() {
    let online_mock =
        BackgroundMockServer::start(|_, body| MockReply::answer(&valid_answer(body).to_string()));
    let online = LlmProject::new(&online_mock.server().base_url);
    priced(&online);
    let (output, online_report) = build(&online);
    assert!(output.status.success(), "{}", text(&output));
    let online_cost = online_report["usage"]["cost_usd"].as_f64().unwrap();

    // The second batch expires half answered; each `affect` line fails the first time.
    let hold = Arc::new(AtomicBool::new(true));
    let failed_once = Arc::new(Mutex::new(BTreeSet::new()));
    let failed = failed_once.clone();
    let behaviour = BatchBehaviour {
        polls_before_done: 1,
        hold: hold.clone(),
        expire: vec![1],
        fail_line: Some(Box::new(move |body: &Value| {
            step_of(body) == "affect" && failed.lock().unwrap().insert(body.to_string())
        })),
    };
    let mock = BackgroundMockServer::start_with_batches(
        |_, body| MockReply::answer(&valid_answer(body).to_string()),
        behaviour,
    );
    let project = LlmProject::new(&mock.server().base_url);
    priced(&project);
    batched(&project);

    // Killed while its first batch is pending.
    let mut first = std::process::Command::new(env!("CARGO_BIN_EXE_viss"))
        .arg("-C")
        .arg(&project.root)
        .args(["build", "--until", "affect,vision_dependence", "-j", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while mock.server().submitted_batches().is_empty() {
        assert!(started.elapsed().as_secs() < 120, "no batch was submitted");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    first.kill().unwrap();
    first.wait().unwrap();
    let pending = mock.server().submitted_batches();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(
        mock.server().requests_to("/v1/chat"),
        0,
        "nothing asked online"
    );
    let status = text(&viss(&project.root, &["status"]));
    assert!(
        status.contains("batches submitted and not seen finished"),
        "{status}"
    );
    assert!(status.contains("batch_1"), "{status}");

    // Resumed: the pending batch is waited on by its id, not submitted again.
    hold.store(false, Ordering::SeqCst);
    let (output, report) = build(&project);
    assert!(output.status.success(), "{}", text(&output));
    let batches = mock.server().submitted_batches();
    let mut times: BTreeMap<&String, usize> = BTreeMap::new();
    for id in batches.iter().flatten() {
        *times.entry(id).or_default() += 1;
    }
    for id in &pending[0] {
        assert_eq!(times[id], 1, "{id} was submitted again: {batches:?}");
    }
    // Submitted twice: exactly the half the expired batch left unanswered, and the failed
    // `affect` lines, each in a later batch with none of the others.
    let expired = &batches[1];
    let unanswered: BTreeSet<&String> = expired[expired.len() / 2..].iter().collect();
    let twice: BTreeSet<&String> = times
        .iter()
        .filter(|(_, n)| **n == 2)
        .map(|(id, _)| *id)
        .collect();
    assert!(times.values().all(|n| *n <= 2), "{batches:?}");
    assert_eq!(
        failed_once.lock().unwrap().len(),
        2,
        "both affect lines failed once"
    );
    assert_eq!(twice.len(), unanswered.len() + 2, "{batches:?}");
    assert!(unanswered.is_subset(&twice), "{batches:?}");
    assert_eq!(
        mock.server().requests_to("/v1/chat"),
        0,
        "nothing asked online"
    );
    assert_eq!(status_pending(&project), 0);

    // The same answers as online, at half the price.
    assert_eq!(answers(&project), answers(&online));
    let cost = report["usage"]["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - online_cost * 0.5).abs() < 1e-9,
        "{cost} vs {online_cost}"
    );
    // Counted apart from online answers.
    let status = text(&viss(&project.root, &["status"]));
    assert!(status.contains("mock:mock-model (batch)"), "{status}");
}

/// Batches `viss status --json` lists as pending.
fn status_pending(project: &LlmProject) -> usize {
    let output = viss(&project.root, &["status", "--json"]);
    let status: Value = serde_json::from_slice(&output.stdout).unwrap();
    status["pending_batches"].as_array().unwrap().len()
}

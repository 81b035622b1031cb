//! `viss review`: verdicts given through piped stdin (and a real browser for `--serve`), what
//! the next build makes of them, stale verdicts, and agreement between two reviewers.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use viss::llm::mock_server::BackgroundMockServer;

use crate::common::mock_llm::ran;
use crate::llm_stages::{LlmProject, describing_clothes, text, viss};

/// `viss review ARGS` on `project` with `stdin` typed in.
pub(crate) fn review(project: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_viss"))
        .arg("-C")
        .arg(project)
        .arg("review")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn verdict_lines(project: &Path, reviewer: &str) -> Vec<Value> {
    let path = project.join(format!("manifests/reviews/{reviewer}.jsonl"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn build_json(project: &Path) -> Value {
    let build = viss(project, &["build", "--until", "export", "--json"]);
    assert!(build.status.success(), "{}", text(&build));
    serde_json::from_slice(&build.stdout).unwrap()
}

/// The items a session showed, in order (`[1/2] tasks van/e1/sc1234`).
fn shown_items(output: &Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| {
            line.strip_prefix('[')
                .and_then(|rest| rest.split_once(']'))
                .is_some_and(|(at, _)| at.contains('/'))
        })
        .filter_map(|line| line.split_whitespace().nth(2).map(str::to_string))
        .collect()
}

fn exported(project: &Path) -> (Vec<Value>, String) {
    let export = viss(project, &["export"]);
    assert!(export.status.success(), "{}", text(&export));
    let out = project.join("export");
    let rows = std::fs::read_to_string(out.join("data.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (
        rows,
        std::fs::read_to_string(out.join("README.md")).unwrap(),
    )
}

#[test]
fn mock_server_review_through_stdin_edits_rejects_and_accepts_and_the_build_applies_them() {
    let mock = BackgroundMockServer::start(|_, body| describing_clothes(body));
    let project = LlmProject::new(&mock.server().base_url);
    let root = &project.root;
    build_json(root);
    let flagged = project.scenario(1);
    let clean = project.scenario(0);
    let clean_tasks_before = project.record("tasks", &clean, "tasks");

    // 1. The flagged description: its background edited, with a comment.
    let session = review(
        root,
        &["describe", "--flagged", "--reviewer", "ann"],
        "e\nbackground\nAda shares a van with Ben.\nremoved the raincoat\nn\n",
    );
    assert!(session.status.success(), "{}", text(&session));
    let shown = String::from_utf8_lossy(&session.stdout).into_owned();
    assert!(
        shown.contains(&format!("[1/1] describe {flagged} (flagged")),
        "{shown}"
    );
    assert!(
        shown.contains("ADA") || shown.contains("Ada:"),
        "the scene: {shown}"
    );
    assert!(shown.contains("wearing"), "the problem is shown: {shown}");
    assert!(shown.contains("edit kept"), "{shown}");
    let lines = verdict_lines(root, "ann");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["verdict"], "edit");
    assert_eq!(lines[0]["item"], flagged.as_str());
    assert_eq!(lines[0]["field"], "background");
    assert_eq!(lines[0]["value"], "Ada shares a van with Ben.");
    assert_eq!(lines[0]["comment"], "removed the raincoat");
    let stored = project.record("describe", &flagged, "description");
    assert_eq!(
        stored["answer"]["background"], "Ada, wearing a yellow raincoat, shares a van with Ben.",
        "the stage's own record is as the model wrote it"
    );

    // The edit re-runs what reads the description of that scenario, and nothing else.
    let asked_before = mock.server().request_count();
    let report = build_json(root);
    for stage in ["ingest", "parse_script", "annotate", "describe"] {
        assert_eq!(ran(&report, stage), 0, "{stage}: {report}");
    }
    assert_eq!(ran(&report, "bdi_risk"), 1, "{report}");
    for stage in ["profiles", "tasks", "affect", "vision_dependence"] {
        assert!(
            ran(&report, stage) <= 1,
            "{stage} ran for one scenario at most: {report}"
        );
    }
    assert_eq!(ran(&report, "export"), 1, "{report}");
    let asked_with_edit = (asked_before..mock.server().request_count()).any(|i| {
        mock.server()
            .body(i)
            .to_string()
            .contains("Ada shares a van with Ben.")
    });
    assert!(
        asked_with_edit,
        "a later step was asked with the edited background"
    );
    assert_eq!(
        project.record("tasks", &clean, "tasks"),
        clean_tasks_before,
        "the other scenario is untouched"
    );
    // The edit settled the only problem: both scenarios are exported, the edit in the data.
    let (rows, card) = exported(root);
    assert_eq!(rows.len(), 2, "{rows:?}");
    let edited = rows.iter().find(|r| r["id"] == flagged.as_str()).unwrap();
    assert_eq!(edited["problems"], serde_json::json!([]), "{edited}");
    assert!(
        edited.to_string().contains("Ada shares a van with Ben."),
        "{edited}"
    );
    assert!(card.contains("| `describe` | 1 | 0 | 1 | 0 |"), "{card}");

    // 2. The tasks of both scenarios: the first rejected, the second accepted.
    let session = review(root, &["tasks", "--reviewer", "ann"], "r\nmade up\na\n\n");
    assert!(session.status.success(), "{}", text(&session));
    let items = shown_items(&session);
    assert_eq!(items.len(), 2, "{}", text(&session));
    let lines = verdict_lines(root, "ann");
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[1]["verdict"], "reject");
    assert_eq!(lines[1]["item"], items[0].as_str());
    assert_eq!(lines[2]["verdict"], "accept");
    assert_eq!(lines[2]["comment"], Value::Null);
    let report = build_json(root);
    assert_eq!(ran(&report, "tasks"), 0, "{report}");
    let (rows, card) = exported(root);
    assert_eq!(rows.len(), 1, "the rejected scenario is left out: {rows:?}");
    assert_eq!(rows[0]["id"], items[1].as_str());
    assert!(card.contains("| `tasks` | 2 | 1 | 0 | 1 |"), "{card}");
    assert!(
        card.contains("1 scenario(s) are left out because a reviewer rejected"),
        "{card}"
    );

    // 3. A changed answer: the tasks prompt changes, so do both answers, and the verdicts on
    // them are stale (shown as such, and no longer applied).
    let prompt = root.join("prompts/tasks.j2");
    let mut template = std::fs::read_to_string(&prompt).unwrap();
    template.push_str("\nKeep each task to one sentence.\n");
    std::fs::write(&prompt, template).unwrap();
    let report = build_json(root);
    assert_eq!(ran(&report, "tasks"), 2, "{report}");
    let summary = viss(root, &["review", "--summary", "--json"]);
    assert!(summary.status.success(), "{}", text(&summary));
    let summary: Value = serde_json::from_slice(&summary.stdout).unwrap();
    let tasks = summary["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == "tasks")
        .unwrap();
    assert_eq!(tasks["stale_verdicts"], 2, "{summary}");
    assert_eq!(tasks["reviewed"], 0, "{summary}");
    let session = review(root, &["tasks", "--reviewer", "ann"], "q\n");
    let shown = String::from_utf8_lossy(&session.stdout).into_owned();
    assert!(shown.contains("stale: ann gave `reject`"), "{shown}");
    let (rows, _) = exported(root);
    assert_eq!(rows.len(), 2, "a stale reject no longer holds: {rows:?}");

    // 4. A rejected profiles suggestion keeps its natural intensity and takes no quota.
    let session = review(root, &["profiles", "--reviewer", "ann"], "r\n\nq\n");
    assert!(session.status.success(), "{}", text(&session));
    let rejected = shown_items(&session)[0].clone();
    build_json(root);
    let left_out = project.record("balance", "benchmark", &format!("profile@{rejected}"));
    assert!(
        left_out["explanation"]
            .as_str()
            .unwrap()
            .contains("not counted in the balance: rejected in review"),
        "{left_out}"
    );
    let balance = project.record("balance", "benchmark", "balance");
    let balanced: Vec<&str> = balance["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["scenario_id"].as_str().unwrap())
        .collect();
    assert!(!balanced.contains(&rejected.as_str()), "{balance}");
    assert_eq!(balanced.len(), 1, "{balance}");
    let (rows, _) = exported(root);
    assert!(
        rows.iter().all(|r| r["id"] != rejected.as_str()),
        "{rows:?}"
    );
}

#[test]
fn mock_server_two_reviewers_files_give_the_kappa_computed_by_hand() {
    let mock = BackgroundMockServer::start(|_, body| describing_clothes(body));
    let project = LlmProject::new(&mock.server().base_url);
    let root = &project.root;
    build_json(root);
    // The same queue for both (the flagged description first): ann edits the first and
    // rejects the second; bob edits the first and accepts the second.
    let edit = "e\nbackground\nAda and Ben share a van.\n\nn\n";
    for (reviewer, second) in [("ann", "r\n\n"), ("bob", "a\n\n")] {
        let session = review(
            root,
            &["describe", "--reviewer", reviewer],
            &format!("{edit}{second}"),
        );
        assert!(session.status.success(), "{}", text(&session));
        assert_eq!(shown_items(&session).len(), 2);
    }
    let summary = viss(root, &["review", "--summary", "--json"]);
    assert!(summary.status.success(), "{}", text(&summary));
    let summary: Value = serde_json::from_slice(&summary.stdout).unwrap();
    let describe = &summary["agreement"][0];
    assert_eq!(describe["stage"], "describe", "{summary}");
    assert_eq!(describe["measure"], "cohen");
    assert_eq!(describe["shared_items"], 2);
    // Calls: (edit, edit), (reject, accept). p_o = 1/2; ann edit 1/2 reject 1/2, bob edit 1/2
    // accept 1/2, so p_e = 1/4; kappa = (1/2 - 1/4) / (1 - 1/4) = 1/3. The background field:
    // (edit, edit), (reject, keep), the same arithmetic.
    let kappa = describe["kappa"]["value"].as_f64().unwrap();
    assert!((kappa - 1.0 / 3.0).abs() < 1e-9, "{describe}");
    let background = describe["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["field"] == "background")
        .unwrap();
    assert!((background["kappa"]["value"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-9);
    // Against the gates: both edited the flagged answer (neither accepted what was flagged);
    // of the answer the gates passed, ann rejected it.
    let gates = &summary["against_gates"][0];
    assert_eq!(gates["stage"], "describe");
    assert_eq!(gates["flagged_judged"], 2);
    assert_eq!(gates["flagged_accepted"], 0);
    assert_eq!(gates["passed_judged"], 2);
    assert_eq!(gates["passed_faulted"], 1);
    let shown = text(&viss(root, &["review", "--summary"]));
    assert!(shown.contains("Cohen's kappa 0.333"), "{shown}");
    // `viss check quality` reports the same.
    build_json(root);
    let (_, _) = exported(root);
    let quality = viss(root, &["check", "quality", "--json"]);
    let quality: Value = serde_json::from_slice(&quality.stdout).unwrap();
    let kappa = quality["review"]["agreement"][0]["kappa"]["value"].as_f64();
    assert!((kappa.unwrap() - 1.0 / 3.0).abs() < 1e-9, "{quality}");
}

#[test]
fn review_refuses_a_serve_address_off_loopback_and_a_bad_reviewer_name() {
    let mock = BackgroundMockServer::start(|_, body| describing_clothes(body));
    let project = LlmProject::new(&mock.server().base_url);
    let off = viss(
        &project.root,
        &[
            "review",
            "--serve",
            "--listen",
            "0.0.0.0:0",
            "--reviewer",
            "ann",
        ],
    );
    assert!(!off.status.success());
    assert!(
        text(&off).contains("loopback address only"),
        "{}",
        text(&off)
    );
    let bad = review(&project.root, &["--reviewer", "../x"], "");
    assert!(!bad.status.success());
    assert!(
        text(&bad).contains("cannot name a verdict file"),
        "{}",
        text(&bad)
    );
}

#[test]
fn mock_server_review_page_in_a_real_browser_edits_a_field_and_takes_a_key_shortcut() {
    let mock = BackgroundMockServer::start(|_, body| describing_clothes(body));
    let project = LlmProject::new(&mock.server().base_url);
    let root = &project.root;
    build_json(root);
    let flagged = project.scenario(1);
    let mut server = Command::new(env!("CARGO_BIN_EXE_viss"))
        .arg("-C")
        .arg(root)
        .args([
            "review",
            "describe",
            "--flagged",
            "--serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--reviewer", "web"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let first = crate::common::first_line(&mut server);
    let url = first
        .split_whitespace()
        .find(|word| word.starts_with("http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_string();

    let browser = crate::common::browser::WebDriver::start();
    browser.open(&url);
    let page = browser.text();
    assert!(page.contains(&format!("describe {flagged}")), "{page}");
    assert!(
        page.contains("wearing"),
        "the problem is on the page: {page}"
    );
    assert!(
        page.contains("Pump four is free."),
        "the scene is on the page: {page}"
    );
    let background = browser.find("textarea[data-field='background']");
    browser.clear(&background);
    browser.type_into(
        &background,
        "Ada and Ben share a van at the petrol station.",
    );
    let comment = browser.find("#comment");
    browser.type_into(&comment, "no clothes");
    browser.click(&browser.find("#edit"));
    let wait_for = |count: usize| -> Vec<Value> {
        let path = root.join("manifests/reviews/web.jsonl");
        for _ in 0..100 {
            if let Ok(text) = std::fs::read_to_string(&path)
                && text.lines().count() >= count
            {
                return text
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("no {count} verdict(s) in {}", path.display());
    };
    let lines = wait_for(1);
    assert_eq!(lines[0]["verdict"], "edit");
    assert_eq!(lines[0]["item"], flagged.as_str());
    assert_eq!(lines[0]["field"], "background");
    assert_eq!(
        lines[0]["value"],
        "Ada and Ben share a van at the petrol station."
    );
    assert_eq!(lines[0]["comment"], "no clothes");
    // The page came back for the same answer (the only one); `a` accepts it.
    browser.press("a");
    let lines = wait_for(2);
    assert_eq!(lines[1]["verdict"], "accept");
    assert_eq!(lines[1]["answer"], lines[0]["answer"]);
    drop(browser);
    let _ = server.kill();
    let _ = server.wait();
}

//! A project made by an older `viss init` (tests/fixtures/old-init-project: every
//! `stages/<name>.toml` carries `version` and `needs`) keeps working with the current binary: it
//! finds the store the demo built fresh, and a `version` bumped in one of its stage files re-runs
//! exactly that stage. These hold before and after stage wiring moves into the code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common;

use common::demo::UNTIL;
use common::{json_of, viss};

const EPISODE: &str = "demo/s01e01";

/// The stages after `keyframes` that the shared demo builds, each reading (through `detect`) what
/// `keyframes` made.
const AFTER_KEYFRAMES: [&str; 4] = ["detect", "group_image", "match_roles", "portraits"];

/// A copy of the shared demo project (raw media, manifests and the store built through
/// `portraits`) whose `stages/`, `prompts/` and `viss.toml` are the old `viss init`'s.
fn old_init_project() -> (tempfile::TempDir, PathBuf) {
    let (temp, project) = common::demo::copy();
    use_old_init_files(&project);
    (temp, project)
}

/// Replaces the project's `stages/`, `prompts/` and `viss.toml` with the old `viss init`'s.
///
/// The fixture's viss.toml replaces the demo's whole: `viss demo` makes its project with the
/// same `Project::init` as `viss init`, so the two files were byte-identical when the fixture was
/// recorded, and nothing the demo needs to build offline lives in it (no endpoints; the store at
/// `artifacts`; the default local models). Should they ever differ in a way that matters, the
/// first test below finds it: the old project's status then differs from the demo's own.
fn use_old_init_files(project: &Path) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/old-init-project");
    for name in ["stages", "prompts", "viss.toml"] {
        let (from, to) = (fixture.join(name), project.join(name));
        if to.is_dir() {
            std::fs::remove_dir_all(&to).unwrap();
        } else {
            std::fs::remove_file(&to).unwrap();
        }
        common::copy_all(&from, &to);
    }
}

/// The per-stage counts of a build report (`viss build --json`, or `plan` of `status --json`).
fn counts(report: &Value) -> BTreeMap<String, Value> {
    report["stages"]
        .as_array()
        .unwrap_or_else(|| panic!("no stages: {report}"))
        .iter()
        .map(|s| (s[0].as_str().unwrap().to_string(), s[1].clone()))
        .collect()
}

/// The stages of `viss status --json` whose every item is fresh, with how many there are: what
/// the store holds up to date.
fn fresh_stages(status: &Value) -> BTreeMap<String, u64> {
    counts(&status["plan"])
        .into_iter()
        .filter(|(_, c)| {
            let total: u64 = c
                .as_object()
                .unwrap()
                .values()
                .map(|n| n.as_u64().unwrap())
                .sum();
            c["fresh"].as_u64().unwrap() > 0 && c["fresh"].as_u64().unwrap() == total
        })
        .map(|(stage, c)| (stage, c["fresh"].as_u64().unwrap()))
        .collect()
}

/// Counts of `n` items in one state (`fresh`, `ran`, `would_run`, `waiting`) and none in any other.
fn all(state: &str, n: u64) -> Value {
    let mut counts = json!({
        "fresh": 0, "ran": 0, "failed": 0, "blocked": 0, "not_selected": 0, "would_run": 0,
        "waiting": 0,
    });
    counts[state] = json!(n);
    counts
}

#[test]
fn a_project_made_by_the_old_init_finds_the_demo_store_fresh() {
    let (_temp, project) = common::demo::copy();
    let demo_status = json_of(&viss(&project, &["status", "--json"]));
    let built = fresh_stages(&demo_status);
    assert!(
        built.contains_key(UNTIL),
        "the demo built through {UNTIL}: {demo_status}"
    );

    use_old_init_files(&project);
    let status = json_of(&viss(&project, &["status", "--json"]));
    assert_eq!(
        status["plan"]["stages"], demo_status["plan"]["stages"],
        "the old stage files plan what the demo's own do, stage by stage"
    );
    assert_eq!(status["plan"]["failures"], json!([]), "{status}");

    let report = json_of(&viss(&project, &["build", "--until", UNTIL, "--json"]));
    let reported = counts(&report);
    let stages: Vec<&String> = reported.keys().collect();
    assert_eq!(stages, built.keys().collect::<Vec<_>>(), "{report}");
    for (stage, n) in &built {
        assert_eq!(
            reported[stage],
            all("fresh", *n),
            "{stage} runs nothing: {report}"
        );
    }
}

#[test]
fn a_version_bumped_in_an_old_stage_file_reruns_exactly_that_stage() {
    let (_temp, project) = old_init_project();
    let built = fresh_stages(&json_of(&viss(&project, &["status", "--json"])));
    for stage in ["keyframes"].iter().chain(&AFTER_KEYFRAMES) {
        assert!(
            built.contains_key(*stage),
            "the demo built {stage}: {built:?}"
        );
    }

    let path = project.join("stages/keyframes.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    let line = config
        .lines()
        .find(|l| l.starts_with("version = "))
        .unwrap_or_else(|| panic!("the old keyframes.toml has a version: {config}"));
    let was: u64 = line["version = ".len()..].trim().parse().unwrap();
    let now = was + 1;
    std::fs::write(&path, config.replacen(line, &format!("version = {now}"), 1)).unwrap();

    // What would run: keyframes' items, for the version; what reads them waits on them; the rest
    // of what the demo built is fresh.
    let status = json_of(&viss(&project, &["status", "--json"]));
    let planned = counts(&status["plan"]);
    for (stage, n) in &built {
        let expected = match stage.as_str() {
            "keyframes" => all("would_run", *n),
            s if AFTER_KEYFRAMES.contains(&s) => all("waiting", *n),
            _ => all("fresh", *n),
        };
        assert_eq!(planned[stage], expected, "{stage}: {status}");
    }
    let scenarios = common::scenario_ids(&project, EPISODE);
    assert_eq!(scenarios.len() as u64, built["keyframes"], "{scenarios:?}");
    for item in scenarios.iter().map(String::as_str).chain([EPISODE]) {
        let why = json_of(&viss(&project, &["status", "--why", item, "--json"]));
        let stale: Vec<&Value> = why["plan"]["explanations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| built.contains_key(e["stage"].as_str().unwrap()))
            .filter(|e| e["verdict"] != "fresh" && e["verdict"] != "waiting")
            .collect();
        let expected = if item == EPISODE {
            json!([])
        } else {
            json!([{
                "stage": "keyframes", "item": item, "verdict": "changed",
                "changes": [{"changed": "version", "was": was, "now": now}],
            }])
        };
        assert_eq!(json!(stale), expected, "{item}: {why}");
    }

    // The build re-runs keyframes' items; their records are byte-identical (the version is in
    // the key, not in the record), so what reads them is fresh by early cutoff.
    let report = json_of(&viss(&project, &["build", "--until", UNTIL, "--json"]));
    let reported = counts(&report);
    assert_eq!(
        reported.keys().collect::<Vec<_>>(),
        built.keys().collect::<Vec<_>>()
    );
    for (stage, n) in &built {
        let state = if stage == "keyframes" { "ran" } else { "fresh" };
        assert_eq!(reported[stage], all(state, *n), "{stage}: {report}");
    }
    let status = json_of(&viss(&project, &["status", "--json"]));
    assert_eq!(
        fresh_stages(&status),
        built,
        "the new version is stored: {status}"
    );
}

/// An old stage file whose `needs` says something else than the ports the stage reads (before
/// the ports step, removing "keyframes" from detect's `needs` silently cut the edge and gave
/// every scenario an empty detect record) stops every command before anything runs, naming the
/// file and the line to delete; the store is untouched.
#[test]
fn an_old_stage_file_whose_needs_disagree_with_the_ports_stops_before_anything_runs() {
    let (_temp, project) = old_init_project();
    let before = json_of(&viss(&project, &["status", "--json"]));
    let file = project.join("stages/detect.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    let wanted = "needs = [\"parse_script\", \"frames\", \"keyframes\"]";
    assert!(text.contains(wanted), "{text}");
    std::fs::write(
        &file,
        text.replace(wanted, "needs = [\"parse_script\", \"frames\"]"),
    )
    .unwrap();
    for command in [
        &["graph"][..],
        &["status", "--json"],
        &["build", "--until", UNTIL, "--json"],
    ] {
        let out = viss(&project, command);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
        assert!(
            stderr.contains("stages/detect.toml: `needs = [\"parse_script\", \"frames\"]`")
                && stderr.contains("\"keyframes\"")
                && stderr.contains("delete the `needs` line"),
            "{command:?}: {stderr}"
        );
    }
    std::fs::write(&file, text.replace(&format!("{wanted}\n"), "")).unwrap();
    let after = json_of(&viss(&project, &["status", "--json"]));
    assert_eq!(
        counts(&after["plan"]),
        counts(&before["plan"]),
        "nothing changed: {after}"
    );
}

//! `viss check quality`: the scorecard of a hand-written export against a hand-written truth, and
//! its errors.

use std::path::Path;

use serde_json::{Value, json};

use crate::common::{json_of, text, viss, viss_in};

const TRUTH: &str = r#"show = "tv"
episode = "s01e01"

[[characters]]
name = "Ada"
gender = { value = "female", evidence = "Ada, a nurse in her thirties" }
age = { value = "30-39", evidence = "in her thirties" }
occupation = { value = "nurse", evidence = "a nurse" }

[[characters]]
name = "Ben"
gender = { value = "unknown", note = "the script gives no cue" }
age = { value = "unknown", note = "the script gives no cue" }
occupation = { value = "unknown", note = "the script gives no cue" }

[[scenarios]]
id = "tv/s01e01/sc0001"
participants = { value = ["Ada", "Ben"], evidence = "Ada and Ben" }
dialogue_type = { value = "persuasion", evidence = "Ada: Please carry it." }

[[scenarios.roles]]
name = "Ada"
competes = { value = true, evidence = "Ada: Now." }

[[scenarios]]
id = "tv/s01e01/sc0002"
participants = { value = ["Ada", "Ben"], evidence = "Ada and Ben" }
dialogue_type = { value = "eristic", evidence = "Ben: Never." }
"#;

/// A project with a hand-written export: one scenario right but for Ben's age, one missing.
fn project() -> (tempfile::TempDir, std::path::PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let out = viss_in(temp.path(), &["init", "p"]);
    assert!(out.status.success(), "{}", text(&out));
    let root = temp.path().join("p");
    let record = json!({
        "id": "tv/s01e01/sc0001",
        "dialogue_type": "persuasion",
        "roles": [
            {"name": "Ada", "gender": "female", "age": "early 30s", "occupation": "nurse",
             "natural_conflict_characteristic": "competing"},
            {"name": "Ben", "gender": "unknown", "age": "40s", "occupation": "unknown",
             "natural_conflict_characteristic": "avoiding"},
        ],
    });
    std::fs::create_dir_all(root.join("export")).unwrap();
    std::fs::write(root.join("export/data.jsonl"), format!("{record}\n")).unwrap();
    std::fs::write(root.join("truth.toml"), TRUTH).unwrap();
    (temp, root)
}

fn field<'a>(card: &'a Value, name: &str) -> &'a Value {
    card["truth"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["field"] == name)
        .unwrap()
}

#[test]
fn check_quality_scores_an_export_against_a_truth() {
    let (_temp, root) = project();
    let truth = root.join("truth.toml");
    let truth = truth.to_str().unwrap();
    let card = json_of(&viss(
        &root,
        &["check", "quality", "--truth", truth, "--json"],
    ));
    assert_eq!(card["records"], 1, "{card}");
    assert_eq!(
        card["truth"]["missing_scenarios"],
        json!(["tv/s01e01/sc0002"])
    );
    let counts = |name: &str| {
        let f = field(&card, name);
        (f["correct"].as_u64().unwrap(), f["total"].as_u64().unwrap())
    };
    assert_eq!(counts("dialogue_type"), (1, 2));
    assert_eq!(counts("participants"), (1, 2));
    assert_eq!(counts("gender"), (2, 4));
    assert_eq!(counts("age"), (1, 4));
    assert_eq!(counts("occupation"), (2, 4));
    assert_eq!(counts("competes"), (1, 1));
    assert_eq!(field(&card, "dialogue_type")["accuracy"], 0.5);
    // Ben's age is a guess where the script gives no cue.
    assert_eq!(
        field(&card, "age")["wrong"][0],
        json!({"item": "tv/s01e01/sc0001 Ben", "expected": "unknown", "got": "40s"})
    );
    assert_eq!(
        field(&card, "gender")["wrong"][1]["got"],
        "(scenario missing from the export)"
    );
    assert_eq!(
        (
            card["truth"]["correct"].as_u64(),
            card["truth"]["total"].as_u64()
        ),
        (Some(8), Some(17))
    );
    // Nothing was built: no LLM answers to count.
    assert_eq!(card["gates"]["stages"], json!([]), "{card}");
    assert_eq!(card["gates"]["rejected_calls"], 0);

    // For humans: the same numbers, the wrong items with expected and got.
    let out = viss(&root, &["check", "quality", "--truth", truth]);
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    assert!(printed.contains("8/17 correct (47%)"), "{printed}");
    assert!(
        printed.contains("tv/s01e01/sc0001 Ben: expected unknown, got 40s"),
        "{printed}"
    );
    assert!(
        printed.contains("missing from the export (all wrong): tv/s01e01/sc0002"),
        "{printed}"
    );
}

#[test]
fn check_quality_without_truth_reports_the_statistics_only() {
    let (_temp, root) = project();
    let card = json_of(&viss(&root, &["check", "quality", "--json"]));
    assert_eq!(card["records"], 1);
    assert_eq!(card["truth"], Value::Null);
    assert_eq!(card["gates"]["llm_calls"], 0);
    // The hand-written export was never built by this project's store: the card says so.
    let stale = card["stale"].as_str().unwrap_or_default();
    assert!(stale.contains("no built export"), "{card}");
}

#[test]
fn check_quality_names_a_bad_truth_file_and_line() {
    let (_temp, root) = project();
    let bad = TRUTH.replace("\"persuasion\"", "\"arguing\"");
    let bad_file = root.join("bad.toml");
    std::fs::write(&bad_file, bad).unwrap();
    let out = viss(
        &root,
        &["check", "quality", "--truth", bad_file.to_str().unwrap()],
    );
    assert!(!out.status.success());
    let printed = text(&out);
    assert!(printed.contains("bad.toml:19: "), "{printed}");
    assert!(printed.contains("arguing"), "{printed}");

    let out = viss(&root, &["check", "quality", "--truth", "absent.toml"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("absent.toml: cannot read the truth file"),
        "{}",
        text(&out)
    );

    let out = viss(&root, &["check", "quality", "--export", "nowhere"]);
    assert!(!out.status.success());
    let printed = text(&out);
    assert!(
        printed.contains(&format!(
            "{}: cannot read the export",
            Path::new("nowhere/data.jsonl").display()
        )),
        "{printed}"
    );
}

//! `parse_script` and `parse_subtitles` through the CLI: what a project's episodes become, and
//! how bad input is reported (file and line) without losing anything already built.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common;

fn viss(project: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_viss"))
        .arg("-C")
        .arg(project)
        .args(args)
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn json(project: &Path, args: &[&str]) -> serde_json::Value {
    let output = viss(project, args);
    assert!(output.status.success(), "{}", text(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Twelve lines between two people, in fan-transcript form.
const SCRIPT: &str = "[Scene: A bakery at dawn. Ines and Paolo.]\n\
Ines: The oven is cold again.\nPaolo: I lit it at four.\nInes: Then someone opened the door.\n\
Paolo: (shrugging) The wind did.\nInes: The wind does not have a key.\nPaolo: Fine. I went out for \
milk.\n\
Ines: We have milk.\nPaolo: We had milk.\nInes: How much is left?\nPaolo: Enough for one batch.\n\
Ines: Then we bake one batch.\nPaolo: And I buy milk.\n";

const SUBTITLES: &str = "1\n00:00:01,000 --> 00:00:02,500\nThe oven is cold again.\n\n\
2\n00:00:02,700 --> 00:00:04,000\n- I lit it at four.\n- Then someone opened the door.\n";

struct Project {
    _temp: tempfile::TempDir,
    root: PathBuf,
}

impl Project {
    fn new(episodes: &[(&str, &[u8], &[u8])]) -> Self {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().join("p");
        assert!(
            Command::new(env!("CARGO_BIN_EXE_viss"))
                .arg("init")
                .arg(&root)
                .status()
                .unwrap()
                .success()
        );
        std::fs::create_dir_all(root.join("raw/bake")).unwrap();
        let mut manifest = String::from("license = \"test text written for viss\"\n");
        for (id, script, subtitles) in episodes {
            std::fs::write(root.join(format!("raw/bake/{id}.txt")), script).unwrap();
            std::fs::write(root.join(format!("raw/bake/{id}.srt")), subtitles).unwrap();
            manifest.push_str(&format!(
                "\n[[episodes]]\nid = \"{id}\"\nscript = \
                 \"bake/{id}.txt\"\nsubtitles = \"bake/{id}.srt\"\n"
            ));
        }
        std::fs::write(root.join("manifests/shows/bake.toml"), manifest).unwrap();
        Self { _temp: temp, root }
    }
}

#[test]
fn an_episode_becomes_scenario_items_and_cues() {
    let project = Project::new(&[("e1", SCRIPT.as_bytes(), SUBTITLES.as_bytes())]);
    let report = json(&project.root, &["build", "--until", "align", "--json"]);
    assert_eq!(report["failures"], serde_json::json!([]));
    let first = &common::scenario_ids(&project.root, "bake/e1")[0];
    let scenario = json(
        &project.root,
        &[
            "show",
            "parse_script",
            "bake/e1",
            &format!("scenario@{first}"),
        ],
    );
    assert_eq!(
        scenario["unit"]["participants"],
        serde_json::json!(["Ines", "Paolo"])
    );
    assert_eq!(scenario["unit"]["dialogue_line_count"], 12);
    assert_eq!(scenario["unit"]["source_line_start"], 2);
    let cues = json(
        &project.root,
        &["show", "parse_subtitles", "bake/e1", "cues"],
    );
    assert_eq!(cues["format"], "srt");
    assert_eq!(cues["cues"].as_array().unwrap().len(), 2);
    assert_eq!(
        cues["cues"][1]["turns"],
        serde_json::json!(["I lit it at four.", "Then someone opened the door."])
    );
    assert_eq!(cues["cues"][1]["start_ms"], 2700);
}

#[test]
fn bad_scripts_and_subtitles_fail_alone_naming_file_and_line() {
    let project = Project::new(&[
        ("good", SCRIPT.as_bytes(), SUBTITLES.as_bytes()),
        ("empty", SCRIPT.as_bytes(), b""),
        (
            "badtime",
            SCRIPT.as_bytes(),
            b"1\n00:00:01,000 --> 00:00:02,500\nHi.\n\n2\n00:00:0x,000 --> 00:00:04,000\nHo.\n",
        ),
        (
            "nospeakers",
            b"The kitchen is empty.\nNobody says anything.\n",
            SUBTITLES.as_bytes(),
        ),
        (
            "binary",
            b"Ines: hi\n\x00\x00\x01\x02 garbage",
            SUBTITLES.as_bytes(),
        ),
    ]);
    let build = viss(&project.root, &["build", "--until", "align"]);
    assert_eq!(build.status.code(), Some(1));
    let out = text(&build);
    assert!(
        out.contains("parse_subtitles bake/empty: raw/bake/empty.srt: no subtitle cues found"),
        "{out}"
    );
    assert!(
        out.contains(
            "parse_subtitles bake/badtime: raw/bake/badtime.srt:6: malformed \
             timestamp \"00:00:0x,000\""
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "parse_script bake/nospeakers: raw/bake/nospeakers.txt: no speaker lines found"
        ),
        "{out}"
    );
    assert!(
        out.contains("parse_script bake/binary: raw/bake/binary.txt:2: undecodable"),
        "{out}"
    );
    assert!(
        !out.contains("bake/good:"),
        "the good episode builds: {out}"
    );

    // Fixing one file re-runs exactly that item; everything built stays built.
    std::fs::write(project.root.join("raw/bake/empty.srt"), SUBTITLES).unwrap();
    let report = json(
        &project.root,
        &[
            "build",
            "--until",
            "align",
            "--json",
            "--items",
            "bake/empty*",
        ],
    );
    let counts = |stage: &str| {
        report["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s[0] == stage)
            .unwrap()[1]
            .clone()
    };
    assert_eq!(counts("ingest")["ran"], 1);
    assert_eq!(counts("parse_subtitles")["ran"], 1);
    assert_eq!(
        counts("parse_subtitles")["fresh"],
        3,
        "good, nospeakers and binary keep their cues"
    );
    assert_eq!(
        counts("parse_script")["fresh"],
        3,
        "good, empty (its script did not change) and badtime"
    );
}

#[test]
fn editing_one_scene_changes_only_that_scenarios_record() {
    let two_scenes = format!(
        "{SCRIPT}\n{}",
        SCRIPT.replace("A bakery at dawn", "The bakery at noon")
    );
    let project = Project::new(&[("e1", two_scenes.as_bytes(), SUBTITLES.as_bytes())]);
    json(&project.root, &["build", "--until", "align", "--json"]);
    let before = text(&viss(&project.root, &["show", "parse_script", "bake/e1"]));
    let edited = two_scenes
        .replacen("And I buy milk.", "And I buy more milk.", 2)
        .replacen("And I buy more milk.", "And I buy milk.", 1);
    std::fs::write(project.root.join("raw/bake/e1.txt"), edited).unwrap();
    json(&project.root, &["build", "--until", "align", "--json"]);
    let after = text(&viss(&project.root, &["show", "parse_script", "bake/e1"]));
    let line = |listing: &str, name: &str| {
        listing
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap()
            .to_string()
    };
    let ids = common::scenario_ids(&project.root, "bake/e1");
    assert_eq!(ids.len(), 2);
    let (first, second) = (
        format!("scenario@{}", ids[0]),
        format!("scenario@{}", ids[1]),
    );
    assert_eq!(line(&before, &first), line(&after, &first));
    assert_ne!(line(&before, &second), line(&after, &second));
}

#[test]
fn an_episode_with_no_scenario_passing_the_filters_is_flagged() {
    let short = "[Scene: A hallway. Ines and Paolo.]\nInes: Morning.\nPaolo: Morning.\n";
    let project = Project::new(&[("e1", short.as_bytes(), SUBTITLES.as_bytes())]);
    let build = viss(&project.root, &["build", "--until", "align"]);
    assert!(build.status.success(), "{}", text(&build));
    let status = text(&viss(&project.root, &["status"]));
    assert!(
        status.contains(
            "parse_script bake/e1: no scenario unit passed the filters (min_lines 10, \
             min_speakers 2): 1 scene(s), the longest with 2 dialogue line(s)"
        ),
        "{status}"
    );
}

#[test]
fn control_characters_in_a_file_name_are_escaped_wherever_viss_prints_it() {
    let project = Project::new(&[("e1", SCRIPT.as_bytes(), SUBTITLES.as_bytes())]);
    // A manifest naming a script whose name rings the bell, clears the screen and breaks the line.
    let manifest = "license = \"test text written for viss\"\n\n[[episodes]]\nid = \"e2\"\n\
                    script = \"bake/e\\u0007\\u001b[2J\\r\\nfake: line\\u009b.txt\"\n";
    std::fs::write(project.root.join("manifests/shows/bake.toml"), manifest).unwrap();
    let build = viss(&project.root, &["build", "--until", "parse_script"]);
    assert_eq!(build.status.code(), Some(1), "{}", text(&build));
    let status = viss(&project.root, &["status"]);
    let why = viss(&project.root, &["status", "--why", "bake/e2"]);
    let show = viss(&project.root, &["show", "ingest", "bake/e2"]);
    for (what, output) in [
        ("build", &build),
        ("status", &status),
        ("status --why", &why),
        ("show", &show),
    ] {
        let printed = text(output);
        assert!(printed.contains("does not exist"), "{what}: {printed}");
        for raw in ["\u{7}", "\u{1b}[2J", "\r", "\nfake: line", "\u{9b}"] {
            assert!(
                !printed.contains(raw),
                "{what} printed {raw:?} raw: {printed:?}"
            );
        }
        assert!(
            printed.contains("e\\u0007\\u001b[2J\\r\\nfake: line\\u009b.txt"),
            "{what}: {printed}"
        );
    }
}

//! The checkout's top level is a viss project (#17 item 7): `stages/` and `prompts/` are the
//! built-in defaults, `manifests/shows/` holds the demo show's manifest and a commented example,
//! and `raw/` holds only its README. A copy of those folders is found as a project without
//! `viss.toml`, `viss graph` works there, and `viss build` works once `viss demo --media-only`
//! has written the demo show's media (which git does not hold).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{json_of, text, viss_in};

fn checkout() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The checkout's project folders copied into a temp dir, as a fresh clone has them (raw/
/// holds only its README), with an empty `src/` to run commands from.
fn copy_of_checkout() -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().join("viss");
    std::fs::create_dir_all(root.join("raw")).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    for dir in ["stages", "prompts", "manifests"] {
        crate::common::copy_all(&checkout().join(dir), &root.join(dir));
    }
    std::fs::copy(checkout().join("raw/README.md"), root.join("raw/README.md")).unwrap();
    (temp, root)
}

/// (ran, failed) of a stage in a `viss build --json` report.
fn ran_failed(report: &Value, stage: &str) -> (u64, u64) {
    let counts = report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry[0] == stage)
        .unwrap_or_else(|| panic!("no {stage} in {report}"))[1]
        .clone();
    (
        counts["ran"].as_u64().unwrap(),
        counts["failed"].as_u64().unwrap(),
    )
}

#[test]
fn the_checkout_is_a_project_that_builds_after_demo_media_only() {
    let (_temp, root) = copy_of_checkout();
    let inside = root.join("src");

    // Found from a folder inside it, without viss.toml.
    let graph = viss_in(&inside, &["graph"]);
    assert!(graph.status.success(), "{}", text(&graph));
    let listed: Vec<String> = String::from_utf8_lossy(&graph.stdout)
        .lines()
        .filter(|line| !line.starts_with(' '))
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .collect();
    assert!(
        listed.starts_with(&["ingest".to_string(), "parse_script".to_string()]),
        "{listed:?}"
    );
    assert!(listed.iter().any(|stage| stage == "export"), "{listed:?}");

    // Without the demo's media, the demo episode fails naming the manifest line and the way
    // to get them; the example manifest is neither read nor warned about.
    let missing = viss_in(&inside, &["build", "--until", "parse_script", "--json"]);
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing));
    let report: Value = serde_json::from_slice(&missing.stdout).unwrap();
    let failures = report["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{report}");
    assert_eq!(failures[0]["stage"], "ingest");
    assert_eq!(failures[0]["item"], "demo/s01e01");
    let error = failures[0]["error"].as_str().unwrap();
    assert!(
        error.starts_with("manifests/shows/demo.toml:") && error.contains("does not exist"),
        "{error}"
    );
    assert!(error.contains("`viss demo --media-only`"), "{error}");
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(!stderr.contains("myshow"), "{stderr}");

    // The demo's media, written into this project's raw/demo, nothing built.
    let media = viss_in(&inside, &["demo", "--media-only"]);
    assert!(media.status.success(), "{}", text(&media));
    assert!(
        String::from_utf8_lossy(&media.stdout).contains("raw/demo/: the demo show's media"),
        "{}",
        text(&media)
    );
    for file in [
        viss::demo::SCRIPT_PATH,
        viss::demo::SUBTITLES_PATH,
        viss::demo::VIDEO_PATH,
    ] {
        assert!(root.join("raw").join(file).is_file(), "{file}");
    }
    assert!(!root.join(viss::project::CONFIG_FILE).exists());
    assert!(!root.join("viss-demo").exists());
    // The manifest in git is left as it is.
    assert_eq!(
        std::fs::read(root.join("manifests/shows/demo.toml")).unwrap(),
        std::fs::read(checkout().join("manifests/shows/demo.toml")).unwrap()
    );

    let report = json_of(&viss_in(
        &inside,
        &["build", "--until", "parse_script", "--json"],
    ));
    assert_eq!(report["failures"], Value::Array(vec![]), "{report}");
    assert_eq!(ran_failed(&report, "ingest"), (1, 0), "{report}");
    assert_eq!(ran_failed(&report, "parse_script"), (1, 0), "{report}");
    assert!(root.join("artifacts").is_dir());

    // Again: everything is reused, and an up-to-date render is kept.
    let again = viss_in(&inside, &["demo", "--media-only"]);
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("already up to date"),
        "{}",
        text(&again)
    );
    let report = json_of(&viss_in(
        &root,
        &["build", "--until", "parse_script", "--json"],
    ));
    assert_eq!(ran_failed(&report, "ingest"), (0, 0), "{report}");
}

#[test]
fn the_checkout_demo_manifest_is_the_one_viss_demo_writes() {
    let committed = std::fs::read_to_string(checkout().join("manifests/shows/demo.toml")).unwrap();
    assert_eq!(committed, viss::demo::manifest());
}

#[test]
fn the_checkout_keeps_media_and_the_store_out_of_git() {
    let ignored = std::fs::read_to_string(checkout().join(".gitignore")).unwrap();
    for line in ["/artifacts/", "/export/", "/raw/*", "!/raw/README.md"] {
        assert!(ignored.lines().any(|l| l == line), "{line} in .gitignore");
    }
    let raw: Vec<_> = std::fs::read_dir(checkout().join("raw"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    // A developer's checkout may hold media (git-ignored); the README is always there.
    assert!(raw.iter().any(|name| name == "README.md"), "{raw:?}");
}

#[test]
fn the_example_manifest_is_not_a_show_but_is_one_once_copied() {
    let (_temp, root) = copy_of_checkout();
    std::fs::remove_file(root.join("manifests/shows/demo.toml")).unwrap();
    let example = root.join("manifests/shows/myshow.toml.example");
    assert!(example.is_file());

    // Only the example: no show, and no word about the example.
    let out = viss_in(&root, &["build", "--until", "ingest", "--json"]);
    let report = json_of(&out);
    assert_eq!(ran_failed(&report, "ingest"), (0, 0), "{report}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("myshow"), "{stderr}");
    assert!(stderr.contains("no show manifests"), "{stderr}");

    // Copied to myshow.toml it is a valid manifest: its episodes fail only because the
    // licensed media are not there, each naming its line (and no demo hint).
    std::fs::copy(&example, root.join("manifests/shows/myshow.toml")).unwrap();
    let out = viss_in(&root, &["build", "--until", "ingest", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let failures = report["failures"].as_array().unwrap();
    let items: Vec<&str> = failures
        .iter()
        .map(|f| f["item"].as_str().unwrap())
        .collect();
    assert_eq!(items, ["myshow/s01e01", "myshow/s01e02"], "{report}");
    for failure in failures {
        let error = failure["error"].as_str().unwrap();
        assert!(
            error.starts_with("manifests/shows/myshow.toml:")
                && error.contains("file raw/myshow/")
                && error.ends_with("does not exist; add it or fix the path"),
            "{error}"
        );
    }
}

//! The commands a user types, end to end through the binary.

use std::path::Path;
use std::process::{Command, Output};

fn viss(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_viss"))
        .args(args)
        .current_dir(cwd)
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

#[test]
fn demo_builds_green_and_a_second_run_reuses_everything() {
    // The first run is the shared demo's (built once per test run); the second runs on a copy.
    let demo = crate::common::demo::shared();
    let first = &demo.first_run;
    assert!(first.status.success(), "{}", text(first));
    assert!(
        text(first).contains("reused 0, failed 0"),
        "{}",
        text(first)
    );
    assert!(demo.project.join("raw/demo/s01e01/script.txt").is_file());

    let (temp, _project) = crate::common::demo::copy();
    let until = crate::common::demo::UNTIL;
    let second = viss(&["demo", "--dir", "demo", "--until", until], temp.path());
    assert!(second.status.success(), "{}", text(&second));
    assert!(text(&second).contains("ran 0 item(s)"), "{}", text(&second));
}
#[test]
fn status_why_names_the_changed_raw_input_and_build_reruns_it() {
    let (_temp, project) = crate::common::demo::copy();
    let why = text(&viss(&["status", "--why", "demo/s01e01"], &project));
    assert!(why.contains("ingest demo/s01e01: up to date"), "{why}");

    let script = project.join("raw/demo/s01e01/script.txt");
    let mut body = std::fs::read_to_string(&script).unwrap();
    body.push_str("Noor: One more line.\n");
    std::fs::write(&script, body).unwrap();
    let why = text(&viss(&["status", "--why", "demo/s01e01"], &project));
    assert!(
        why.contains("ingest demo/s01e01: will run because input `source` has new content"),
        "{why}"
    );

    let build = viss(&["build", "--until", "align", "--json"], &project);
    let report: serde_json::Value = serde_json::from_slice(&build.stdout).unwrap();
    assert_eq!(report["stages"][0][0], "ingest");
    assert_eq!(report["stages"][0][1]["ran"], 1);
}

#[test]
fn graph_lists_the_stages() {
    let temp = tempfile::tempdir().unwrap();
    assert!(viss(&["init", "p"], temp.path()).status.success());
    // The code owns the wiring and the versions: `viss init` writes neither into stage files.
    for entry in std::fs::read_dir(temp.path().join("p/stages")).unwrap() {
        let written = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(
            !written
                .lines()
                .any(|l| l.starts_with("needs") || l.starts_with("version"))
        );
    }
    let graph = crate::common::json_of(&viss(&["graph", "--json"], &temp.path().join("p")));
    let stages = graph["stages"].as_array().unwrap();
    let stage = |name: &str| stages.iter().find(|s| s["name"] == name).unwrap().clone();
    let ingest = stage("ingest");
    assert_eq!(
        (
            ingest["level"].as_str(),
            ingest["inputs"].as_array().map(Vec::len)
        ),
        (Some("episode"), Some(0))
    );
    // Every stage's typed inputs and outputs, each named by its producer.
    let detect = stage("detect");
    let reads: Vec<(&str, &str)> = detect["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["port"].as_str().unwrap(), p["record"].as_str().unwrap()))
        .collect();
    assert_eq!(
        reads,
        [
            ("parse_script.scenario@<child>", "ScenarioRecord"),
            ("frames.frames", "FrameSampling"),
            ("keyframes.keyframes", "KeyframesRecord"),
        ]
    );
    assert_eq!(detect["outputs"][0]["port"], "detect.detections");
    assert_eq!(
        stage("portraits")["after"],
        serde_json::json!(["group_image"])
    );
    for (at, stage) in stages.iter().enumerate() {
        for need in stage["needs"].as_array().unwrap() {
            let position = stages.iter().position(|s| &s["name"] == need).unwrap();
            assert!(position < at, "{} comes after {need}", stage["name"]);
        }
    }
    let text_graph = text(&viss(&["graph"], &temp.path().join("p")));
    assert!(
        text_graph.contains("  reads   frames.frames")
            && text_graph.contains("keyframes.keyframes                  KeyframesRecord"),
        "{text_graph}"
    );
    let dot = text(&viss(&["graph", "--dot"], &temp.path().join("p")));
    assert!(dot.starts_with("digraph viss {"), "{dot}");
}

#[test]
fn outside_a_project_the_error_says_how_to_make_one() {
    let temp = tempfile::tempdir().unwrap();
    let out = viss(&["build", "--until", "align"], temp.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("run `viss init` to make a project"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_second_build_process_is_refused_while_one_holds_the_store() {
    let temp = tempfile::tempdir().unwrap();
    assert!(viss(&["init", "p"], temp.path()).status.success());
    let project = temp.path().join("p");
    let _held = viss::dag::lock::StoreLock::acquire(&project.join("artifacts"), "build").unwrap();
    let out = viss(&["build", "--until", "align"], &project);
    assert_eq!(out.status.code(), Some(2));
    let message = text(&out);
    assert!(
        message.contains("is held by another viss process"),
        "{message}"
    );
    assert!(
        message.contains(&format!("pid {} running `viss build`", std::process::id())),
        "{message}"
    );
}

#[test]
fn gc_removes_unreferenced_blobs_and_clean_needs_yes() {
    let (_temp, project) = crate::common::demo::copy();
    let layout = format!("artifacts/v{}", viss::dag::store::LAYOUT_VERSION);
    let orphan = project.join(format!("{layout}/blobs/00/00{}", "0".repeat(62)));
    std::fs::create_dir_all(orphan.parent().unwrap()).unwrap();
    std::fs::write(&orphan, "orphan").unwrap();
    std::fs::create_dir_all(project.join("artifacts/v0/blobs")).unwrap();
    let gc = text(&viss(&["gc"], &project));
    assert!(gc.contains("removed 1 blob(s), 6 bytes;"), "{gc}");
    assert!(gc.contains("1 old store layout(s)"), "{gc}");
    assert!(!orphan.exists() && !project.join("artifacts/v0").exists());
    let verify = viss(&["verify"], &project);
    assert!(verify.status.success(), "{}", text(&verify));
    assert!(
        !text(&verify).contains("will rebuild"),
        "gc kept what records use: {}",
        text(&verify)
    );

    let refused = viss(&["clean"], &project);
    assert_eq!(refused.status.code(), Some(2));
    assert!(project.join(&layout).exists());
    assert!(viss(&["clean", "--yes"], &project).status.success());
    assert!(!project.join(&layout).exists());
}

#[test]
fn build_show_builds_only_that_show_and_names_the_shows_when_it_is_unknown() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().join("p");
    assert!(
        viss(&["init", root.to_str().unwrap()], temp.path())
            .status
            .success()
    );
    let scene = "[Scene: A kitchen.]\nAda: One.\nBen: Two.\nAda: Three.\nBen: Four.\nAda: \
                 Five.\nBen: Six.\n\
                 Ada: Seven.\nBen: Eight.\nAda: Nine.\nBen: Ten.\n";
    for show in ["alpha", "beta"] {
        std::fs::create_dir_all(root.join(format!("raw/{show}"))).unwrap();
        std::fs::write(root.join(format!("raw/{show}/e1.txt")), scene).unwrap();
        std::fs::write(
            root.join(format!("manifests/shows/{show}.toml")),
            format!(
                "license = \"test text\"\n\n[[episodes]]\nid = \"e1\"\nscript = \"{show}/e1.txt\"\n"
            ),
        )
        .unwrap();
    }
    let build = viss(
        &[
            "build",
            "--show",
            "beta",
            "--until",
            "parse_script",
            "--json",
        ],
        &root,
    );
    assert!(build.status.success(), "{}", text(&build));
    let report: serde_json::Value = serde_json::from_slice(&build.stdout).unwrap();
    let ran = |stage: &str| {
        report["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s[0] == stage)
            .unwrap()[1]["ran"]
            .clone()
    };
    assert_eq!((ran("ingest"), ran("parse_script")), (1.into(), 1.into()));
    let shown = viss(&["show", "parse_script", "beta/e1"], &root);
    assert!(shown.status.success(), "{}", text(&shown));
    assert!(
        !viss(&["show", "parse_script", "alpha/e1"], &root)
            .status
            .success(),
        "alpha was not built"
    );

    let unknown = viss(&["build", "--show", "gamma"], &root);
    assert!(!unknown.status.success());
    assert!(
        text(&unknown).contains("no show \"gamma\"") && text(&unknown).contains("alpha, beta"),
        "{}",
        text(&unknown)
    );
}

#[test]
fn init_keeps_the_store_the_export_and_licensed_media_out_of_git() {
    let temp = tempfile::tempdir().unwrap();
    assert!(viss(&["init", "p"], temp.path()).status.success());
    let root = temp.path().join("p");
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(&root)
            .output()
            .expect("git is installed")
    };
    assert!(git(&["init", "-q"]).status.success());
    for path in [
        "artifacts/index/db",
        "export/data.jsonl",
        "raw/myshow/e1.mkv",
    ] {
        assert!(
            git(&["check-ignore", "-q", path]).status.success(),
            "{path} is ignored"
        );
    }
    for path in [
        "raw/README.md",
        "viss.toml",
        "manifests/shows/myshow.toml",
        "prompts/tasks.j2",
    ] {
        assert!(
            !git(&["check-ignore", "-q", path]).status.success(),
            "{path} is kept"
        );
    }
}

/// Issue 16: `[paths] artifacts = "."` then `build` then `clean --yes` deleted the project, raw
/// media included. A store that is the project, contains it, or is one of its folders of user
/// files is refused by every command, which then writes and deletes nothing.
#[test]
fn a_store_that_is_the_project_a_parent_or_a_user_folder_is_refused_and_nothing_is_deleted() {
    let temp = tempfile::tempdir().unwrap();
    assert!(viss(&["init", "p"], temp.path()).status.success());
    let root = temp.path().join("p");
    std::fs::create_dir_all(root.join("raw/show")).unwrap();
    std::fs::write(root.join("raw/show/e1.mkv"), "licensed").unwrap();
    std::fs::write(temp.path().join("neighbour.txt"), "not viss's").unwrap();
    let config = std::fs::read_to_string(root.join("viss.toml")).unwrap();
    let before = tree(temp.path());
    for store in [
        ".",
        "",
        "..",
        "raw",
        "raw/store",
        "manifests",
        "stages",
        "prompts/x",
    ] {
        let line = format!("artifacts = \"{store}\"");
        std::fs::write(
            root.join("viss.toml"),
            config.replace("artifacts = \"artifacts\"", &line),
        )
        .unwrap();
        for args in [
            &["build"][..],
            &["clean", "--yes"],
            &["gc"],
            &["verify", "--repair"],
        ] {
            let out = viss(args, &root);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{line} {args:?}: {}",
                text(&out)
            );
            assert!(
                text(&out).contains("refusing to use"),
                "{line} {args:?}: {}",
                text(&out)
            );
        }
    }
    std::fs::write(root.join("viss.toml"), &config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_viss"))
        .args(["clean", "--yes"])
        .env("VISS_ARTIFACTS", "raw")
        .current_dir(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("it is raw/ (your licensed media)"),
        "{}",
        text(&out)
    );
    assert_eq!(tree(temp.path()), before, "nothing was written or deleted");
}

/// Every path under `dir`, sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        out.push(path.display().to_string());
        if path.is_dir() {
            out.extend(tree(&path));
        }
    }
    out.sort();
    out
}

/// The store is a directory viss made and marked; `clean` deletes only the built results in it,
/// a directory viss did not make is refused, and a store of the viss before the marker (only
/// `.lock`, `CACHEDIR.TAG` and `v<N>/` in it) is adopted.
#[test]
fn clean_deletes_only_what_viss_made_and_a_directory_it_did_not_make_is_refused() {
    let temp = tempfile::tempdir().unwrap();
    assert!(viss(&["init", "p"], temp.path()).status.success());
    let root = temp.path().join("p");
    let built = viss(&["build"], &root);
    assert!(built.status.success(), "{}", text(&built));
    let store = root.join("artifacts");
    assert!(store.join("VISS-STORE").is_file());
    std::fs::write(store.join("notes.txt"), "mine").unwrap();
    let cleaned = viss(&["clean", "--yes"], &root);
    assert!(cleaned.status.success(), "{}", text(&cleaned));
    assert!(text(&cleaned).contains("left what viss did not make there: notes.txt"));
    let layout = format!("v{}", viss::dag::store::LAYOUT_VERSION);
    assert!(!store.join(&layout).exists() && store.join("notes.txt").is_file());
    assert!(
        viss(&["build"], &root).status.success(),
        "still a store after clean"
    );

    // Somebody else's directory: refused, and left as it was (no lock file either).
    let docs = root.join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("readme.md"), "docs").unwrap();
    let config = std::fs::read_to_string(root.join("viss.toml")).unwrap();
    let docs_config = config.replace("artifacts = \"artifacts\"", "artifacts = \"docs\"");
    std::fs::write(root.join("viss.toml"), docs_config).unwrap();
    for args in [&["build"][..], &["clean", "--yes"]] {
        let out = viss(args, &root);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(
            text(&out).contains("has no VISS-STORE file"),
            "{}",
            text(&out)
        );
    }
    assert_eq!(tree(&docs), [docs.join("readme.md").display().to_string()]);

    // A store of the viss before the marker: adopted, and its results kept.
    let old = root.join("old");
    std::fs::create_dir_all(old.join(&layout)).unwrap();
    std::fs::create_dir_all(old.join("v2/blobs")).unwrap();
    let tag = "Signature: 8a477f597d28d172789f06886806bc55\n# viss artifact store; rebuildable\n";
    std::fs::write(old.join("CACHEDIR.TAG"), tag).unwrap();
    std::fs::write(old.join(".lock"), "").unwrap();
    let old_config = config.replace("artifacts = \"artifacts\"", "artifacts = \"old\"");
    std::fs::write(root.join("viss.toml"), old_config).unwrap();
    let out = viss(&["build"], &root);
    assert!(out.status.success(), "{}", text(&out));
    assert!(old.join("VISS-STORE").is_file());
}

/// A fresh project in a temp dir, with `viss.toml` replaced by `config` when given.
fn project_with(config: Option<&str>) -> (tempfile::TempDir, std::path::PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    assert!(viss(&["init", "p"], temp.path()).status.success());
    let root = temp.path().join("p");
    if let Some(config) = config {
        std::fs::write(root.join("viss.toml"), config).unwrap();
    }
    (temp, root)
}

fn viss_env(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_viss"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(cwd)
        .output()
        .unwrap()
}

#[test]
fn counts_out_of_range_are_errors_naming_the_key_and_range_not_panics() {
    for (key, value) in [
        ("cpu", "9223372036854775807"),
        ("jobs", "9223372036854775807"),
    ] {
        let (_temp, root) = project_with(Some(&format!("[build]\n{key} = {value}\n")));
        let out = viss(&["build", "--until", "ingest"], &root);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            text(&out).contains(&format!(
                "viss.toml: build.{key} = {value} is out of range: it must be an integer from 0 \
                 to 1024 (0 = one per core)"
            )),
            "{}",
            text(&out)
        );
    }
    let (_temp, root) = project_with(None);
    for name in ["VISS_CPU", "VISS_JOBS"] {
        let out = viss_env(
            &["build", "--until", "ingest"],
            &root,
            &[(name, "18446744073709551615")],
        );
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            text(&out).contains(&format!("environment variable {name} (sets [build] ")),
            "{}",
            text(&out)
        );
        assert!(text(&out).contains("from 0 to 1024"), "{}", text(&out));
    }
    let out = viss(
        &["build", "--until", "ingest", "-j", "18446744073709551615"],
        &root,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("-j/--jobs = 18446744073709551615 is out of range"),
        "{}",
        text(&out)
    );
}

#[test]
fn endpoint_and_model_numbers_out_of_range_are_refused_when_the_config_loads() {
    let endpoint = "[llm.endpoints.e]\nbase_url = \"http://127.0.0.1:9/v1\"\n";
    let cases = [
        (
            format!("{endpoint}timeout_seconds = inf\n"),
            "llm.endpoints.e.timeout_seconds = inf",
        ),
        (
            format!("{endpoint}timeout_seconds = 1e300\n"),
            "llm.endpoints.e.timeout_seconds = 1e300",
        ),
        (
            format!("{endpoint}retry_backoff_seconds = inf\n"),
            "retry_backoff_seconds = inf",
        ),
        (
            format!("{endpoint}max_in_flight = 9223372036854775807\n"),
            "llm.endpoints.e.max_in_flight = 9223372036854775807",
        ),
        (
            format!("{endpoint}max_retries = 4294967295\n"),
            "max_retries = 4294967295",
        ),
        (
            format!(
                "{endpoint}[llm.endpoints.e.prices.m]\ninput_per_mtok = -1\noutput_per_mtok = 1\n"
            ),
            "llm.endpoints.e.prices.m.input_per_mtok = -1",
        ),
        (
            "[models.text_embedder.options]\nintra_threads = 1000\n".to_string(),
            "models.text_embedder.options.intra_threads = 1000",
        ),
        (
            "[llm.local]\ncontext_tokens = 4\n".to_string(),
            "llm.local.context_tokens = 4",
        ),
        (
            "[models.person_detector]\nmodel_onnx = \"y.onnx\"\nnms_iou = 2\n".to_string(),
            "models.person_detector.nms_iou = 2",
        ),
    ];
    for (config, expected) in cases {
        let (_temp, root) = project_with(Some(&config));
        let out = viss(&["graph"], &root);
        assert_eq!(out.status.code(), Some(2), "{config}: {}", text(&out));
        let message = text(&out);
        assert!(
            message.contains("viss.toml: ") && message.contains(expected),
            "{message}"
        );
        assert!(
            message.contains("is out of range: it must be "),
            "{message}"
        );
    }
}

#[test]
fn stage_params_out_of_range_and_stage_files_that_are_not_files_name_the_file() {
    let (_temp, root) = project_with(None);
    let stage = root.join("stages/align.toml");
    let config = std::fs::read_to_string(&stage).unwrap();
    std::fs::write(&stage, config.replace("alpha = 0.8\n", "alpha = 2.0\n")).unwrap();
    let out = viss(&["graph"], &root);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(
            "stages/align.toml: params.alpha = 2 is out of range: it must be a number from 0 to 1"
        ),
        "{}",
        text(&out)
    );

    std::fs::write(
        root.join("stages/frames.toml"),
        "version = 2\n[params]\nfps = inf\n",
    )
    .unwrap();
    std::fs::write(&stage, config).unwrap();
    let out = text(&viss(&["graph"], &root));
    assert!(
        out.contains("stages/frames.toml: params.fps = inf is out of range"),
        "{out}"
    );

    std::fs::remove_file(root.join("stages/frames.toml")).unwrap();
    std::fs::remove_file(&stage).unwrap();
    std::fs::create_dir(&stage).unwrap();
    let out = viss(&["graph"], &root);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("stages/align.toml is a directory, not a regular file"),
        "{}",
        text(&out)
    );
}

#[test]
fn warnings_carry_no_colours_when_stderr_is_not_a_terminal() {
    let (_temp, root) = project_with(None);
    // A stage file from an older viss, which still said the version (align is at 3 now).
    let stage = root.join("stages/align.toml");
    let config = std::fs::read_to_string(&stage).unwrap();
    std::fs::write(&stage, format!("version = 1\n{config}")).unwrap();
    let out = viss(&["graph"], &root);
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("WARN") && stderr.contains("says version 1"),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

/// Piped into a reader that stops early (`viss graph --json | head -1`), viss ends quietly with
/// the shell's SIGPIPE status instead of a panic message.
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_viss"))
        .args(["graph", "--json"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before viss writes a byte.
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The lines of a TOML error as `viss` prints it: the place, then the file's line with a
/// caret under the spot, each on a line of its own.
fn assert_toml_error_lines(printed: &str, place: &str, source_line: &str) {
    assert!(!printed.contains("\\n"), "no escaped new line: {printed}");
    let lines: Vec<&str> = printed.lines().collect();
    let at = lines
        .iter()
        .position(|line| line.contains(place))
        .unwrap_or_else(|| panic!("{place} in {printed}"));
    assert_eq!(lines[at + 1].trim(), "|", "{printed}");
    assert_eq!(lines[at + 2].trim_start(), source_line, "{printed}");
    assert!(lines[at + 3].trim_start().starts_with("| "), "{printed}");
    assert!(lines[at + 3].trim_end().ends_with('^'), "{printed}");
}

#[test]
fn toml_errors_show_the_place_and_the_line_with_a_caret_as_lines() {
    let (_temp, root) = project_with(Some("[build]\njobs = \"four\n"));
    let out = viss(&["graph"], &root);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert_toml_error_lines(&text(&out), "viss.toml:2:", "2 | jobs = \"four");

    let (_temp, root) = project_with(None);
    std::fs::write(root.join("stages/align.toml"), "[params]\nalpha = 0.8.1\n").unwrap();
    let out = viss(&["graph"], &root);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert_toml_error_lines(&text(&out), "stages/align.toml:2:", "2 | alpha = 0.8.1");

    // A show manifest's error reaches the build's list of failures the same way.
    let (_temp, root) = project_with(None);
    std::fs::write(
        root.join("manifests/shows/bad.toml"),
        "license = \"mine\"\n[[episodes]]\nid = \"e1\"\nscript = \"a\" \"b\"\n",
    )
    .unwrap();
    let out = viss(&["build", "--until", "ingest"], &root);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_toml_error_lines(
        &text(&out),
        "manifests/shows/bad.toml:4:",
        "4 | script = \"a\" \"b\"",
    );
}

/// `viss bench mock-endpoint` (the scripted MOCK model as a server, for trying a pipeline such
/// as the Slurm example without a model) prints its address and answers a step's request with
/// an answer in the step's shape.
#[test]
fn mock_endpoint_prints_its_address_and_answers_a_steps_request() {
    use std::io::{Read, Write};
    let mut server = Command::new(env!("CARGO_BIN_EXE_viss"))
        .args(["bench", "mock-endpoint"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let first = crate::common::first_line(&mut server);
    let base_url = first
        .trim()
        .strip_prefix("base_url ")
        .expect(&first)
        .to_string();
    let address = base_url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let body = serde_json::json!({
        "model": "scripted",
        "messages": [{"role": "user", "content": "Ada: Hello.\nBen: Hi."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "annotate",
            "schema": {"properties": {"roles": {"items": {"properties": {"name": {
                "enum": ["Ada", "Ben"]}}}}}}}},
    })
    .to_string();
    let path = format!(
        "{}/chat/completions",
        base_url.split_once(&address).unwrap().1
    );
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    let json_start = response.find("\r\n\r\n").expect(&response) + 4;
    let reply: serde_json::Value = serde_json::from_str(&response[json_start..]).expect(&response);
    let content = reply["choices"][0]["message"]["content"]
        .as_str()
        .expect(&response);
    let answer: serde_json::Value = serde_json::from_str(content).unwrap();
    let names: Vec<&str> = answer["roles"]
        .as_array()
        .expect(content)
        .iter()
        .map(|role| role["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Ada", "Ben"], "{content}");
}

//! What several integration test modules share.
#![allow(dead_code)]

pub mod browser;
pub mod demo;
pub mod mock_llm;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The scenario ids of `episode` in script order, as `parse_script` lists its child items.
/// Ids are hashes of each scenario's opening lines, so tests look them up rather than spell them.
pub fn scenario_ids(project: &Path, episode: &str) -> Vec<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_viss"))
        .args(["show", "parse_script", episode])
        .current_dir(project)
        .env("NO_COLOR", "1")
        .output()
        .expect("run viss show");
    assert!(
        output.status.success(),
        "viss show parse_script {episode}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.strip_prefix("child\t"))
        .map(str::to_string)
        .collect()
}

/// Real test media in the checkout (tests/fixtures/media; see its README.md for licences and
/// attributions).
pub fn test_media(relative: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/media")
        .join(relative);
    assert!(path.exists(), "test media {} is missing", path.display());
    path
}

/// The Solvay Conference 1927 group photograph (public domain in the US): the copy the `scrfd`
/// 0.3.0 source distribution ships, fetched (sha256-checked) into the model cache with the face
/// detector, as `viss demo` uses it.
pub fn solvay_photo() -> PathBuf {
    viss::demo::solvay_photo_path().expect("fetch the face detector package")
}

/// Runs the viss binary on `project` (as `viss -C PROJECT ARGS`).
pub fn viss(project: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_viss"))
        .arg("-C")
        .arg(project)
        .args(args)
        .output()
        .expect("run viss")
}

/// Standard output then standard error, for assertion messages.
pub fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The JSON a successful `--json` command printed.
pub fn json_of(output: &Output) -> Value {
    assert!(output.status.success(), "{}", text(output));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(output)))
}

/// Runs the viss binary with `cwd` as its working directory (for commands whose paths are
/// relative to it, such as `viss demo --dir demo`).
pub fn viss_in(cwd: &Path, args: &[&str]) -> Output {
    viss_in_with_env(cwd, args, &[])
}

pub fn viss_in_with_env(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_viss"));
    command.args(args).current_dir(cwd);
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("run viss")
}

/// The JSON `viss show ARGS` prints for a record in `project`.
pub fn show(project: &Path, args: &[&str]) -> Value {
    let mut full = vec!["show"];
    full.extend_from_slice(args);
    json_of(&viss_in(project, &full))
}

/// A copy of a built project in its own temp dir (`cp -a`, so the store keeps its timestamps),
/// for a test that changes or rebuilds it without disturbing the shared original.
pub fn copy_of_project(source: &Path) -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let project = temp
        .path()
        .join(source.file_name().expect("a project directory"));
    copy_all(source, &project);
    (temp, project)
}

/// `cp -a from to`: a file or a whole directory, timestamps kept.
pub fn copy_all(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "cp -a {} {} failed",
        from.display(),
        to.display()
    );
}

/// The first line a spawned process prints on its piped stdout (a server's address), the
/// process left running.
pub fn first_line(child: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout piped"))
        .read_line(&mut first)
        .unwrap();
    first
}

/// Where the store keeps a binary output (`viss show` prints its path).
pub fn binary_output(project: &Path, stage: &str, item: &str, output: &str) -> PathBuf {
    let shown = viss_in(project, &["show", stage, item, output]);
    assert!(shown.status.success(), "{}", text(&shown));
    let line = String::from_utf8_lossy(&shown.stdout).trim().to_string();
    PathBuf::from(
        line.rsplit(": ")
            .next()
            .unwrap_or_else(|| panic!("not a binary output: {line}")),
    )
}

/// The Python with the loaders scripts/setup.sh installs (`VISS_TEST_PYTHON_ENV` or
/// ~/.cache/viss/test-python).
pub fn test_python() -> std::path::PathBuf {
    let env = std::env::var_os("VISS_TEST_PYTHON_ENV")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache/viss/test-python")
        });
    let python = env.join("bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/setup.sh, which installs the test loaders there",
        python.display()
    );
    python
}

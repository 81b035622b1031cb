//! What several integration test files share. Each test crate uses part of it.
#![allow(dead_code)]

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

/// Test media shared by the project (see ../shared/media/README.md).
pub fn shared_media(relative: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/media")
        .join(relative);
    assert!(path.exists(), "test media {} is missing", path.display());
    path
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

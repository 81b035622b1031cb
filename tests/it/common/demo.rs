//! The demo project, built once per test run and shared by every module that needs it.
//!
//! `viss demo --until portraits` is the fullest build any test needs (the stages after it ask an
//! LLM; the tests that reach them point the project at the in-process mock). Tests only read the
//! shared project; a test that changes or rebuilds it works on a [`copy`].

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use super::{copy_all, copy_of_project, text, viss_in};

/// The stages the shared demo is built through.
pub const UNTIL: &str = "portraits";

pub struct Demo {
    _temp: tempfile::TempDir,
    /// The project (`<temp>/demo`).
    pub project: PathBuf,
    /// A copy of the project taken right after the build, which no test runs `viss` in: readers
    /// of `project` let sled rewrite its snapshot files, and a `cp -a` racing that fails.
    pristine: PathBuf,
    /// What `viss demo --dir demo --until portraits` printed on the first, fresh run.
    pub first_run: Output,
}

/// The shared demo, built on first use.
pub fn shared() -> &'static Demo {
    static DEMO: OnceLock<Demo> = OnceLock::new();
    DEMO.get_or_init(|| {
        let temp = tempfile::tempdir().unwrap();
        let started = std::time::Instant::now();
        let first_run = viss_in(temp.path(), &["demo", "--dir", "demo", "--until", UNTIL]);
        assert!(first_run.status.success(), "{}", text(&first_run));
        eprintln!(
            "shared demo (viss demo --until {UNTIL}): {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let project = temp.path().join("demo");
        let pristine = temp.path().join("pristine");
        std::fs::create_dir(&pristine).unwrap();
        copy_all(&project, &pristine.join("demo"));
        Demo {
            _temp: temp,
            project,
            pristine: pristine.join("demo"),
            first_run,
        }
    })
}

/// The shared demo project, to read.
pub fn project() -> &'static Path {
    &shared().project
}

/// A copy of the shared demo project in its own temp dir, for a test that changes it.
pub fn copy() -> (tempfile::TempDir, PathBuf) {
    copy_of_project(&shared().pristine)
}

/// A copy of the shared demo's sources (raw media, manifests, stage configs, prompts) without its
/// store: the project as `viss demo` writes it before building anything, for tests that count
/// what a first build runs.
pub fn copy_without_store() -> (tempfile::TempDir, PathBuf) {
    let (temp, project) = copy();
    for built in ["artifacts", "export"] {
        let path = project.join(built);
        if path.exists() {
            std::fs::remove_dir_all(&path).unwrap();
        }
    }
    (temp, project)
}

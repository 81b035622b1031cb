//! `viss demo`: a small show that viss writes itself (an original script and broadcast-style
//! subtitles derived from it), built through every stage that exists, offline.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::dag::scheduler::{BuildOptions, BuildReport};
use crate::fsutil::write_atomic_beside;
use crate::project::{Project, ProjectError};
use crate::stages;
use crate::workspace::{Workspace, WorkspaceError};

pub const SHOW: &str = "demo";

const SCRIPT: &str = include_str!("s01e01.txt");
const SUBTITLES: &str = include_str!("s01e01.srt");

const MANIFEST: &str = r#"# The demo show: written by `viss demo`. Paths are relative to raw/.
title = "The Borrowed Van (viss demo)"
license = "Original text written for viss, CC0; no third-party media."

[[characters]]
name = "Noor"

[[characters]]
name = "Theo"

[[characters]]
name = "Mila"

[[episodes]]
id = "s01e01"
title = "The One With the Borrowed Van"
script = "demo/s01e01/script.txt"
script_format = "friends"
subtitles = "demo/s01e01/subtitles.srt"
"#;

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Project(#[from] ProjectError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub struct DemoOutcome {
    pub project_root: PathBuf,
    pub report: BuildReport,
    pub seconds: f64,
}

/// Writes the demo project into `dir` (creating it, or refreshing the demo's own files in an
/// existing demo project) and builds it.
pub fn run(dir: &Path, jobs: Option<usize>, progress: bool) -> Result<DemoOutcome, DemoError> {
    let started = Instant::now();
    let project = if dir.join(crate::project::CONFIG_FILE).is_file() {
        Project::open(dir)?
    } else {
        Project::init(dir, &stages::default_configs(), stages::DEFAULT_PROMPTS, false)?
    };
    write_show(&project)?;
    let workspace = Workspace::open(project.clone(), stages::BUILTIN, "demo")?;
    let options = BuildOptions {
        jobs: jobs.unwrap_or_else(|| project.config.jobs()),
        progress,
        ..BuildOptions::default()
    };
    let report = workspace.build(&options)?;
    Ok(DemoOutcome {
        project_root: project.root.clone(),
        report,
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn write_show(project: &Project) -> Result<(), DemoError> {
    let files = [
        (project.shows_dir().join(format!("{SHOW}.toml")), MANIFEST),
        (project.raw_dir().join("demo/s01e01/script.txt"), SCRIPT),
        (
            project.raw_dir().join("demo/s01e01/subtitles.srt"),
            SUBTITLES,
        ),
    ];
    for (path, text) in files {
        // Unchanged files keep their mtime, so ingest does not even re-hash them.
        if std::fs::read_to_string(&path).is_ok_and(|old| old == text) {
            continue;
        }
        write_atomic_beside(&path, text.as_bytes()).map_err(|source| DemoError::Io {
            path: path.clone(),
            source,
        })?;
    }
    Ok(())
}

//! What a user waits for, beside `viss bench align`'s aligner-to-aligner comparison: a cold
//! `viss build --until align` of a project holding the benchmark episode (its transcript and the
//! same derived subtitles the Python reference reads), from a fresh store. Everything a build
//! does is in the time: opening the project, ingest, parsing, screening the cues, loading the
//! embedding model, embedding, the dynamic program and writing the records.

use std::path::Path;
use std::time::Instant;

use crate::dag::scheduler::BuildOptions;
use crate::project::Project;
use crate::stages;
use crate::workspace::Workspace;

use super::dag::BenchError;

const MANIFEST: &str = "title = \"Hollybush Lane\"\n\
license = \"Original text written for viss's tests, CC0.\"\n\n\
[[episodes]]\nid = \"e01\"\nscript = \"bench/e01.txt\"\nsubtitles = \"bench/e01.srt\"\n";

/// Seconds of a cold `viss build --until align` in a new project under `dir` (which must not
/// hold one) on the benchmark episode with the subtitles of `seed`.
pub fn cold_build_until_align(dir: &Path, seed: u64) -> Result<f64, BenchError> {
    let project = Project::init(
        dir,
        &stages::default_configs(),
        stages::DEFAULT_PROMPTS,
        false,
    )?;
    let subtitles = super::align::episode_subtitles(seed)
        .map_err(|error| BenchError::Failed(error.to_string()))?;
    let write = |relative: &str, text: &str| {
        let path = dir.join(relative);
        std::fs::create_dir_all(path.parent().expect("a file in a folder"))
            .and_then(|()| std::fs::write(&path, text))
            .map_err(|error| BenchError::Failed(format!("{}: {error}", path.display())))
    };
    write("raw/bench/e01.txt", super::align::EPISODE)?;
    write("raw/bench/e01.srt", &subtitles)?;
    write("manifests/shows/bench.toml", MANIFEST)?;
    let started = Instant::now();
    let workspace = Workspace::open(project.clone(), stages::BUILTIN, "bench")?;
    let report = workspace.build(&BuildOptions {
        until: vec!["align".to_string()],
        jobs: project.config.jobs(),
        ..BuildOptions::default()
    })?;
    let seconds = started.elapsed().as_secs_f64();
    if !report.failures.is_empty() {
        return Err(BenchError::Failed(format!("{:?}", report.failures)));
    }
    Ok(seconds)
}

//! Annotation quality you can measure: a truth file for an episode ([`truth`]) and the scorecard
//! of an export against it, with the LLM steps' re-ask statistics ([`scorecard`]). `viss demo`
//! prints the demo's scorecard; `viss check quality` computes it for any project.

pub mod scorecard;
pub mod truth;

use std::path::{Path, PathBuf};

pub use scorecard::{GateStats, Scorecard, ScorecardError};
pub use truth::{Truth, TruthError};

use crate::workspace::Workspace;

/// Where the scorecard goes beside an export's `data.jsonl`.
pub const SCORECARD_FILE: &str = "scorecard.json";

#[derive(Debug, thiserror::Error)]
pub enum QualityError {
    #[error(transparent)]
    Truth(#[from] TruthError),
    #[error(transparent)]
    Scorecard(#[from] ScorecardError),
    #[error(transparent)]
    Review(#[from] crate::review::ReviewError),
    #[error("{}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The scorecard of the export in `export_dir` (its `data.jsonl`), against `truth` when given
/// (with the file it came from), with the re-ask statistics of `workspace`'s store.
pub fn scorecard(
    workspace: &Workspace,
    export_dir: &Path,
    truth: Option<(&Truth, &Path)>,
) -> Result<Scorecard, QualityError> {
    let data = export_dir.join(crate::export::DATA_JSONL);
    let records = scorecard::read_records(&data)?;
    let review =
        crate::review::summary::of_project(workspace.store(), &workspace.project().reviews_dir())?;
    Ok(Scorecard {
        review,
        truth: truth.map(|(truth, file)| scorecard::score(truth, file, &records)),
        records: records.len(),
        stale: stale_export(workspace, &data)?,
        export: data,
        gates: Some(scorecard::gate_stats(workspace.store(), &llm_stages())?),
    })
}

/// The built-in stages that ask an LLM: those that render a prompt.
fn llm_stages() -> Vec<&'static str> {
    crate::stages::BUILTIN
        .iter()
        .filter(|kind| !kind.prompts.is_empty())
        .map(|kind| kind.name)
        .collect()
}

/// Why `data` is not the data.jsonl of the store's last `export`, if it is not: `viss build`
/// updates the store, only `viss export` (and `viss demo`) write the export directory.
fn stale_export(workspace: &Workspace, data: &Path) -> Result<Option<String>, QualityError> {
    let built = workspace
        .store()
        .index()
        .get(crate::export::EXPORT_STAGE, crate::dag::BENCHMARK_ITEM)
        .map_err(ScorecardError::from)?
        .filter(|record| !record.failed())
        .and_then(|record| record.outputs.get(crate::export::DATA_JSONL).copied());
    let bytes = std::fs::read(data).map_err(|source| ScorecardError::Read {
        path: data.to_path_buf(),
        source,
    })?;
    Ok(match built {
        None => Some(
            "the store holds no built export; this data.jsonl may be from another build (run \
             `viss build`, then `viss export`)"
                .to_string(),
        ),
        Some(hash) if hash != crate::hash::ContentHash::of(&bytes) => Some(
            "this data.jsonl is not the store's latest export; run `viss export` to write it"
                .to_string(),
        ),
        Some(_) => None,
    })
}

/// Writes `card` as JSON into `export_dir`/[`SCORECARD_FILE`]; returns the path.
pub fn write_scorecard(card: &Scorecard, export_dir: &Path) -> Result<PathBuf, QualityError> {
    let path = export_dir.join(SCORECARD_FILE);
    let mut json = serde_json::to_string_pretty(card).expect("plain data serialises");
    json.push('\n');
    crate::fsutil::write_atomic_beside(&path, json.as_bytes()).map_err(|source| {
        QualityError::Write {
            path: path.clone(),
            source,
        }
    })?;
    Ok(path)
}

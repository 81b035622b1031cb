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
    Ok(Scorecard {
        truth: truth.map(|(truth, file)| scorecard::score(truth, file, &records)),
        records: records.len(),
        export: data,
        gates: Some(scorecard::gate_stats(workspace.store().index())?),
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

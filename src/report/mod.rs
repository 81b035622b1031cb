//! `viss report`: the numbers a researcher puts in a paper, from every judged run in the store
//! ([`tables`]), written as Markdown, CSV, Parquet and JSON ([`render`]) and as HTML pages
//! with charts and a transcript per run ([`html`], [`charts`]). Runs whose simulation or
//! evaluation failed are listed, not silently left out.

pub mod charts;
pub mod html;
pub mod render;
pub mod sense;
pub mod tables;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::eval::interval::Bootstrap;
use crate::workspace::Workspace;
use tables::{TableSettings, Tables};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(
        "no judged run in the store; build the runs and their evaluation first (`viss build`, or \
         `viss build --until evaluate`)"
    )]
    NothingJudged,
    #[error("cannot write the report in {dir}: {source}")]
    Write {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the report's CSV: {0}")]
    Csv(#[from] csv::Error),
    #[error("cannot write the report's Parquet file: {0}")]
    Parquet(#[from] viss_parquet::ParquetError),
    #[error(transparent)]
    Html(#[from] html::HtmlError),
    #[error(transparent)]
    Evaluate(#[from] crate::stages::evaluate::EvaluateError),
    #[error(transparent)]
    EvaluateSense(#[from] crate::stages::evaluate_sense::EvaluateSenseError),
    #[error(transparent)]
    Review(#[from] crate::review::ReviewError),
    #[error(transparent)]
    Simulate(#[from] crate::stages::simulate::SimulateError),
    #[error(transparent)]
    Store(#[from] crate::dag::store::StoreError),
}

impl Default for TableSettings {
    fn default() -> Self {
        Self {
            bootstrap: Bootstrap {
                resamples: 2000,
                level: 0.95,
                seed: 7,
            },
            min_scenarios: 5,
        }
    }
}

/// What [`write_report`] wrote.
#[derive(Debug, Clone, Serialize)]
pub struct WrittenReport {
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
    pub runs: usize,
    pub scenarios: usize,
    /// Runs with no evaluation in the tables: `stage item: why`.
    pub left_out: Vec<String>,
}

/// Runs that failed in `simulate` or `evaluate`, with why, for the report to name.
fn failed_runs(workspace: &Workspace) -> Result<Vec<String>, ReportError> {
    let mut out = Vec::new();
    let stages = [
        crate::stages::simulate::TRACE.id().stage,
        crate::stages::evaluate::JUDGEMENT.id().stage,
        crate::stages::simulate_sense::SENSE_TRACE.id().stage,
        crate::stages::evaluate_sense::SENSE_JUDGEMENT.id().stage,
    ];
    for stage in stages {
        for (item, record) in workspace.store().index().scan_stage(stage)? {
            if let Some(error) = &record.error {
                let first_line = error.lines().next().unwrap_or_default();
                out.push(format!("{stage} {item}: {first_line}"));
            }
        }
    }
    Ok(out)
}

/// Computes the tables from every stored evaluation of `workspace` and writes them into `dir`
/// (created if absent; the report's own files in it are replaced).
pub fn write_report(
    workspace: &Workspace,
    dir: &Path,
    settings: &TableSettings,
) -> Result<WrittenReport, ReportError> {
    let evaluations = crate::stages::evaluate::evaluations(workspace.store())?;
    let sense_evaluations = crate::stages::evaluate_sense::sense_evaluations(workspace.store())?;
    if evaluations.is_empty() && sense_evaluations.is_empty() {
        return Err(ReportError::NothingJudged);
    }
    let mut tables: Tables = tables::tables(&evaluations, settings);
    if evaluations.is_empty() {
        // An AgentSense-only report: AgentViSS's tables would be empty rows and notes about
        // runs that do not exist.
        tables.scores.clear();
        tables.not_shown =
            vec!["AgentViSS: no run judged (`evaluate`, after `simulate`)".to_string()];
    }
    if sense_evaluations.is_empty() {
        tables.not_shown.push(
            "AgentSense: no AgentSense run judged (`evaluate_sense`, after `simulate_sense`)"
                .to_string(),
        );
    } else {
        let blind: Vec<crate::stages::blind_test::BlindTest> = workspace
            .store()
            .read_all(&crate::stages::blind_test::BLIND)?
            .into_iter()
            .map(|(_, test)| test)
            .collect();
        let (sense_tables, not_shown) = sense::tables(&sense_evaluations, &blind, settings);
        tables.scores.extend(sense_tables);
        tables.sense_runs = sense_evaluations.len();
        tables.sense_templates = sense_evaluations
            .iter()
            .map(|(_, e)| e.template_id.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        tables.not_shown.extend(not_shown);
    }
    let left_out = failed_runs(workspace)?;
    let mut markdown = render::markdown(&tables);
    if !left_out.is_empty() {
        markdown.push_str(&format!(
            "\n## Runs not in these tables\n\n{} run(s) failed and are not counted:\n\n",
            left_out.len()
        ));
        for why in &left_out {
            markdown.push_str(&format!("- {}\n", crate::redact::redact(why)));
        }
    }
    // The people who checked the annotations the runs were made from: their agreement.
    let review =
        crate::review::summary::of_project(workspace.store(), &workspace.project().reviews_dir())?;
    if let Some(review) = &review {
        markdown.push_str(&format!(
            "\n## Annotation reviews\n\nThe verdicts of `viss review` on the annotations \
             (reviews.json holds them as data):\n\n```text\n{}```\n",
            review.render()
        ));
    }
    let records = render::cell_records(&tables);
    let traces = crate::stages::simulate::traces(workspace.store())?;
    let portrait = |hash: &str| -> Result<Vec<u8>, String> {
        let hash: crate::hash::ContentHash = hash.parse().map_err(|e| format!("{e}"))?;
        workspace
            .store()
            .get_blob(&hash)
            .map_err(|error| error.to_string())
    };
    let pages = html::pages(&tables, &traces, &evaluations, &left_out, &portrait)?;
    let mut files: Vec<(String, Vec<u8>)> = vec![
        ("index.html".to_string(), pages.index.into_bytes()),
        ("tables.md".to_string(), markdown.into_bytes()),
        (
            "tables.json".to_string(),
            serde_json::to_vec_pretty(&tables).expect("tables serialize"),
        ),
        ("cells.csv".to_string(), render::cells_csv(&tables)?),
        (
            "cells.parquet".to_string(),
            viss_parquet::write_parquet(&records, &render::cell_schema())?,
        ),
    ];
    if !sense_evaluations.is_empty() {
        let jsonl = crate::stages::export::agentsense::json_lines::<serde_json::Value>;
        let goals = sense::goal_rows(&sense_evaluations);
        let questions = sense::question_rows(&sense_evaluations);
        files.push(("sense_goals.jsonl".to_string(), jsonl(&goals)));
        files.push((
            "sense_goals.parquet".to_string(),
            viss_parquet::write_parquet(&goals, &sense::goal_row_schema())?,
        ));
        files.push(("sense_questions.jsonl".to_string(), jsonl(&questions)));
        files.push((
            "sense_questions.parquet".to_string(),
            viss_parquet::write_parquet(&questions, &sense::question_row_schema())?,
        ));
    }
    if let Some(review) = &review {
        files.push((
            "reviews.json".to_string(),
            serde_json::to_vec_pretty(review).expect("review summaries serialize"),
        ));
    }
    files.extend(
        pages
            .runs
            .into_iter()
            .map(|(path, page)| (path, page.into_bytes())),
    );
    let write_error = |source| ReportError::Write {
        dir: dir.to_path_buf(),
        source,
    };
    let run_pages = dir.join(html::RUN_PAGES);
    std::fs::create_dir_all(&run_pages).map_err(write_error)?;
    let mut written = Vec::new();
    for (name, bytes) in files {
        let path = dir.join(name);
        crate::fsutil::write_atomic_beside(&path, &bytes).map_err(write_error)?;
        written.push(path);
    }
    // Pages of runs no longer in the store would be linked from nowhere and mislead.
    for entry in std::fs::read_dir(&run_pages).map_err(write_error)? {
        let path = entry.map_err(write_error)?.path();
        if path.extension().is_some_and(|e| e == "html") && !written.contains(&path) {
            std::fs::remove_file(&path).map_err(write_error)?;
        }
    }
    Ok(WrittenReport {
        dir: dir.to_path_buf(),
        files: written,
        runs: tables.runs,
        scenarios: tables.scenarios,
        left_out,
    })
}

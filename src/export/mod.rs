//! The benchmark as a self-contained dataset directory:
//!
//! ```text
//! data.jsonl      one scenario per line, in script order (the schema:
//!                 src/stages/export/benchmark-record.schema.json)
//! data.parquet    the same rows (polars)
//! scenarios.parquet  the same rows with the images embedded (Hugging Face), when built
//! README.md       the dataset card: fields, statistics, provenance, license note
//! viss.lock       blake3 of every file and of every stage record behind each scenario
//! images/<scenario id>/G.png, images/<scenario id>/<role>.png   synthetic images, when built
//! ```
//!
//! The `export` stage assembles every file but the images (which the image stages already
//! keep in the store) from the scenario stages' records (`stages/export/dataset.rs`), so the
//! dataset is cached like any other result; [`write_dataset`] then only copies blobs out of the
//! store into a directory, replacing a previous export in one rename.

pub use crate::stages::export::dataset::{
    AssembledDataset, CARD_FILE, DATA_JSONL, DATA_PARQUET, DatasetError, DatasetFiles,
    EXPORT_STAGE, LeftOut, ReviewCounts, assemble_dataset,
};
pub use crate::stages::export::{card, huggingface, lock, record};
pub use viss_parquet as parquet;

use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use crate::dag::BENCHMARK_ITEM;
use crate::dag::scheduler::BuildOptions;
use crate::dag::store::{Store, StoreError};
use crate::fsutil::write_atomic;
use crate::hash::ContentHash;
use crate::stages::{evaluate, simulate};
use crate::workspace::{Workspace, WorkspaceError};
use card::Statistics;
use lock::{DatasetLock, LOCK_FILE};
use record::BenchmarkRecord;
use viss_parquet::write_parquet;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "building the benchmark failed; fix these and run `viss export --build` (or `viss build`) \
         again:\n{0}"
    )]
    BuildFailed(String),
    #[error(
        "the benchmark is not built: {0}. Run `viss build` first (or `viss export --build` to \
         build what is missing; LLM stages may make paid calls)"
    )]
    NotBuilt(String),
    #[error(
        "nothing to export: the project has no scenario (are there show manifests in \
         manifests/shows/, and do their scripts yield scenarios?)"
    )]
    NothingToExport,
    #[error(
        "the `export` stage's record {0} is not what this viss writes: {1}; run `viss build` again"
    )]
    BadRecord(String, String),
    #[error(
        "{path} exists and is not a viss export (no {LOCK_FILE} in it); choose another --out or \
         remove it"
    )]
    NotAnExport { path: PathBuf },
    #[error(
        "the dataset file name {0:?} is not a relative path inside the dataset; this is a bug in \
         viss"
    )]
    BadPath(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Traces(#[from] simulate::SimulateError),
    #[error(transparent)]
    Results(#[from] evaluate::EvaluateError),
    #[error(transparent)]
    SenseResults(#[from] crate::stages::evaluate_sense::EvaluateSenseError),
    #[error(
        "no {what} yet; run `viss build --until {until}` first (the dataset itself is written to \
         {})",
        out_dir.display()
    )]
    NoRuns {
        what: &'static str,
        until: &'static str,
        out_dir: PathBuf,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How [`write_dataset`] gets a fresh `export` result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildPolicy {
    /// Run only the `export` stage (cheap: no model is asked); refuse when anything it needs
    /// is not built or out of date.
    ExportOnly,
    /// Build whatever the export needs first, as `viss build --until export` would.
    Everything,
}

/// What an export wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ExportSummary {
    pub out_dir: PathBuf,
    /// The `export` stage ran in this call (otherwise its stored result was fresh).
    pub export_ran: bool,
    pub statistics: Statistics,
    pub files: usize,
    pub images: usize,
    /// The model answers behind the records and what they cost when first asked (the card's
    /// total).
    pub answers: crate::dag::cost::Cost,
    pub lock: ContentHash,
}

impl ExportSummary {
    pub fn render(&self) -> String {
        let s = &self.statistics;
        let levels: Vec<String> = s
            .conflict_intensities
            .iter()
            .map(|(level, n)| format!("{level} {n}"))
            .collect();
        let images = if self.images == 0 {
            "no images (the image stages were not built)".to_string()
        } else {
            format!("{} image(s)", self.images)
        };
        let cost = self
            .answers
            .usd()
            .map(|usd| format!(" (${usd:.4})"))
            .unwrap_or_default();
        format!(
            "exported {} scenario(s), {} role(s), {} task(s) to {}\nconflict intensity: {}\n{} \
             file(s), {images}; {} model answer(s) behind it{cost}; viss.lock {}\n",
            s.scenarios,
            s.roles,
            s.tasks,
            self.out_dir.display(),
            levels.join(", "),
            self.files,
            self.answers.answers,
            self.lock.short()
        )
    }
}

/// Writes the project's benchmark into `out_dir` (see the module docs for the layout). The
/// `export` stage must be fresh, or become so under `policy`. The directory is written beside
/// its final place and renamed over it: a failed export leaves any previous one as it was.
pub fn write_dataset(
    workspace: &Workspace,
    out_dir: &Path,
    policy: BuildPolicy,
    progress: bool,
) -> Result<ExportSummary, ExportError> {
    let options = BuildOptions {
        until: vec![EXPORT_STAGE.to_string()],
        only: match policy {
            BuildPolicy::ExportOnly => vec![EXPORT_STAGE.to_string()],
            BuildPolicy::Everything => Vec::new(),
        },
        jobs: workspace.project().config.jobs(),
        progress,
        ..BuildOptions::default()
    };
    let report = workspace.build(&options)?;
    if !report.failures.is_empty() {
        let lines: Vec<String> = report
            .failures
            .iter()
            .map(|f| format!("  {} {}: {}", f.stage, f.item, f.error))
            .collect();
        return Err(ExportError::BuildFailed(lines.join("\n")));
    }
    let counts = report.counts(EXPORT_STAGE);
    if counts.fresh + counts.ran == 0 {
        let stale: Vec<String> = report
            .stages
            .iter()
            .filter(|(stage, c)| stage != EXPORT_STAGE && c.not_selected + c.blocked > 0)
            .map(|(stage, c)| {
                format!(
                    "{stage} has {} item(s) to build",
                    c.not_selected + c.blocked
                )
            })
            .collect();
        if stale.is_empty() {
            return Err(ExportError::NothingToExport);
        }
        return Err(ExportError::NotBuilt(stale.join(", ")));
    }
    let store = workspace.store();
    let missing =
        |port: &str| ExportError::BadRecord(BENCHMARK_ITEM.into(), format!("no `{port}`"));
    let files: DatasetFiles = store
        .read(&crate::stages::export::FILES, BENCHMARK_ITEM)?
        .ok_or_else(|| missing("files"))?;
    let table: Vec<BenchmarkRecord> = store
        .read(&crate::stages::export::TABLE, BENCHMARK_ITEM)?
        .ok_or_else(|| missing("table"))?;
    let out_dir = std::path::absolute(out_dir).map_err(io_error(out_dir))?;
    materialize(store, &files, &out_dir)?;
    let answers = store
        .read(&crate::stages::export::COST, BENCHMARK_ITEM)?
        .ok_or_else(|| missing("cost"))?;
    Ok(ExportSummary {
        export_ran: counts.ran > 0,
        statistics: Statistics::of(&table),
        files: files.files.len(),
        images: files
            .files
            .keys()
            .filter(|path| path.starts_with("images/"))
            .count(),
        answers,
        lock: files
            .files
            .get(LOCK_FILE)
            .copied()
            .unwrap_or_else(|| ContentHash::of(b"")),
        out_dir,
    })
}

/// Run-level files `viss export --traces` and `--results` add to a written dataset: the stored
/// records as JSON lines and the same as a Parquet table under a config of the card.
pub struct RunConfig<'a> {
    /// The config's name in the card (`traces`, `results`).
    pub name: &'a str,
    pub jsonl_file: &'a str,
    /// One run per line ([`run_lines`]).
    pub jsonl: &'a [u8],
    pub parquet_file: &'a str,
    pub rows: Vec<serde_json::Value>,
    /// The rows' JSON schema, which sets the Parquet columns.
    pub schema: serde_json::Value,
}

/// Adds `config` to the dataset written in `out_dir`: its JSON lines, its Parquet table, the
/// config in the card's metadata, and every changed file's hash in the lock.
pub fn add_run_config(out_dir: &Path, config: RunConfig<'_>) -> Result<(), ExportError> {
    let card_path = out_dir.join(CARD_FILE);
    let lock_path = out_dir.join(LOCK_FILE);
    let card = std::fs::read_to_string(&card_path).map_err(io_error(&card_path))?;
    let card =
        huggingface::with_config(&card, config.name, config.parquet_file).ok_or_else(|| {
            ExportError::BadRecord(
                CARD_FILE.into(),
                "the card has no metadata block; export again with this viss".into(),
            )
        })?;
    let table = write_parquet(&config.rows, &config.schema)
        .map_err(|e| ExportError::BadRecord(config.parquet_file.into(), e.to_string()))?;
    let lock_text = std::fs::read_to_string(&lock_path).map_err(io_error(&lock_path))?;
    let mut lock = DatasetLock::parse(&lock_text)
        .map_err(|e| ExportError::BadRecord(LOCK_FILE.into(), e.to_string()))?;
    let files: [(&str, &[u8]); 3] = [
        (config.jsonl_file, config.jsonl),
        (config.parquet_file, &table),
        (CARD_FILE, card.as_bytes()),
    ];
    for (name, bytes) in files {
        lock.files.insert(name.to_string(), ContentHash::of(bytes));
    }
    let lock_text = lock.render();
    for (name, bytes) in files.into_iter().chain([(LOCK_FILE, lock_text.as_bytes())]) {
        let path = out_dir.join(name);
        crate::fsutil::write_atomic_beside(&path, bytes).map_err(io_error(&path))?;
    }
    Ok(())
}

/// A run-level table `viss export` adds on request (`--traces`, `--results`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunTable {
    /// Every stored simulation run's trace, and its turns as a Parquet table.
    Traces,
    /// Every stored run's evaluation, and its scores as a Parquet table.
    Results,
    /// Every judged AgentSense run's evaluation, and two Parquet tables: a row per run, goal
    /// and perspective, and a row per run, question and character asked.
    SenseResults,
}

/// What [`add_run_table`] added.
#[derive(Debug, Clone, PartialEq)]
pub struct AddedRuns {
    pub runs: usize,
    /// The JSON lines file written, in the dataset directory.
    pub jsonl: PathBuf,
}

/// Adds `table`, from every run `store` holds, to the dataset written in `out_dir` (see
/// [`add_run_config`]); with no run to add, an error that says which stage to build.
pub fn add_run_table(
    store: &Store,
    out_dir: &Path,
    table: RunTable,
) -> Result<AddedRuns, ExportError> {
    let no_runs = |what, until| ExportError::NoRuns {
        what,
        until,
        out_dir: out_dir.to_path_buf(),
    };
    let (runs, jsonl_file) = match table {
        RunTable::Traces => {
            let traces = simulate::traces(store)?;
            if traces.is_empty() {
                return Err(no_runs("simulation run has a trace", "simulate"));
            }
            let config = RunConfig {
                name: "traces",
                jsonl_file: huggingface::TRACES_JSONL,
                jsonl: &run_lines(&traces),
                parquet_file: huggingface::TURNS_PARQUET,
                rows: huggingface::turn_rows(&traces),
                schema: huggingface::turn_schema(),
            };
            add_run_config(out_dir, config)?;
            (traces.len(), huggingface::TRACES_JSONL)
        }
        RunTable::Results => {
            let evaluations = evaluate::evaluations(store)?;
            if evaluations.is_empty() {
                return Err(no_runs("run has been judged", "evaluate"));
            }
            let config = RunConfig {
                name: "results",
                jsonl_file: huggingface::RESULTS_JSONL,
                jsonl: &run_lines(&evaluations),
                parquet_file: huggingface::RESULTS_PARQUET,
                rows: huggingface::result_rows(&evaluations),
                schema: huggingface::result_schema(),
            };
            add_run_config(out_dir, config)?;
            (evaluations.len(), huggingface::RESULTS_JSONL)
        }
        RunTable::SenseResults => {
            let evaluations = crate::stages::evaluate_sense::sense_evaluations(store)?;
            if evaluations.is_empty() {
                return Err(no_runs("AgentSense run has been judged", "evaluate_sense"));
            }
            let jsonl = run_lines(&evaluations);
            let goals = RunConfig {
                name: "sense_goals",
                jsonl_file: huggingface::SENSE_RESULTS_JSONL,
                jsonl: &jsonl,
                parquet_file: huggingface::SENSE_GOALS_PARQUET,
                rows: crate::report::sense::goal_rows(&evaluations),
                schema: crate::report::sense::goal_row_schema(),
            };
            add_run_config(out_dir, goals)?;
            let questions = RunConfig {
                name: "sense_questions",
                jsonl_file: huggingface::SENSE_RESULTS_JSONL,
                jsonl: &jsonl,
                parquet_file: huggingface::SENSE_QUESTIONS_PARQUET,
                rows: crate::report::sense::question_rows(&evaluations),
                schema: crate::report::sense::question_row_schema(),
            };
            add_run_config(out_dir, questions)?;
            (evaluations.len(), huggingface::SENSE_RESULTS_JSONL)
        }
    };
    Ok(AddedRuns {
        runs,
        jsonl: out_dir.join(jsonl_file),
    })
}

/// One line of a run-level JSON lines file: the run's id and its record's fields.
#[derive(serde::Serialize)]
struct RunLine<'a, T> {
    run: &'a str,
    #[serde(flatten)]
    record: &'a T,
}

/// `runs` (run id, record) as JSON lines, one run per line.
pub fn run_lines<T: serde::Serialize>(runs: &[(String, T)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (run, record) in runs {
        serde_json::to_writer(&mut out, &RunLine { run, record }).expect("a record serializes");
        out.push(b'\n');
    }
    out
}

/// A dataset path as a relative path with no way out of the dataset directory.
fn checked_relative(path: &str) -> Result<&Path, ExportError> {
    let relative = Path::new(path);
    let fine = !path.is_empty()
        && relative
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if fine {
        Ok(relative)
    } else {
        Err(ExportError::BadPath(path.to_string()))
    }
}

/// Copies `files` out of the store into a new directory beside `out_dir`, then puts it in
/// `out_dir`'s place. A previous export there is moved aside first and removed last; any
/// other existing content makes it refuse, so a mistyped `--out` never deletes a user's files.
fn materialize(store: &Store, files: &DatasetFiles, out_dir: &Path) -> Result<(), ExportError> {
    if out_dir.exists() {
        let empty = std::fs::read_dir(out_dir)
            .map_err(io_error(out_dir))?
            .next()
            .is_none();
        if !empty && !out_dir.join(LOCK_FILE).is_file() {
            return Err(ExportError::NotAnExport {
                path: out_dir.to_path_buf(),
            });
        }
    }
    let parent = out_dir.parent().ok_or_else(|| ExportError::NotAnExport {
        path: out_dir.to_path_buf(),
    })?;
    std::fs::create_dir_all(parent).map_err(io_error(parent))?;
    let name = out_dir
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let temp = parent.join(format!(".{name}.new-{}", std::process::id()));
    let old = parent.join(format!(".{name}.old-{}", std::process::id()));
    for leftover in [&temp, &old] {
        if leftover.exists() {
            std::fs::remove_dir_all(leftover).map_err(io_error(leftover))?;
        }
    }
    let written: Result<(), ExportError> = (|| {
        for (path, hash) in &files.files {
            let bytes = store.get_blob(hash)?;
            let dest = temp.join(checked_relative(path)?);
            write_atomic(&dest, &bytes, &temp).map_err(io_error(&dest))?;
        }
        Ok(())
    })();
    if let Err(error) = written {
        let _ = std::fs::remove_dir_all(&temp);
        return Err(error);
    }
    let had_previous = out_dir.exists();
    if had_previous {
        std::fs::rename(out_dir, &old).map_err(io_error(out_dir))?;
    }
    if let Err(source) = std::fs::rename(&temp, out_dir) {
        if had_previous {
            let _ = std::fs::rename(&old, out_dir);
        }
        let _ = std::fs::remove_dir_all(&temp);
        return Err(ExportError::Io {
            path: out_dir.to_path_buf(),
            source,
        });
    }
    if let Ok(dir) = std::fs::File::open(parent) {
        let _ = dir.sync_all();
    }
    if had_previous {
        std::fs::remove_dir_all(&old).map_err(io_error(&old))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_paths_cannot_leave_the_dataset() {
        assert!(checked_relative("images/demo/s01e01/sc001/G.png").is_ok());
        for bad in ["", "/etc/passwd", "../x", "images/../../x"] {
            assert!(checked_relative(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_existing_directory_that_is_not_an_export_is_left_alone() {
        let temp = tempfile::tempdir().unwrap();
        let store = Store::open(&temp.path().join("artifacts")).unwrap();
        let hash = store.put_blob(b"line\n").unwrap();
        let files = DatasetFiles {
            files: [
                (DATA_JSONL.to_string(), hash),
                (LOCK_FILE.to_string(), hash),
            ]
            .into(),
        };
        let mine = temp.path().join("mine");
        std::fs::create_dir_all(&mine).unwrap();
        std::fs::write(mine.join("thesis.tex"), "precious").unwrap();
        let error = materialize(&store, &files, &mine).unwrap_err();
        assert!(matches!(error, ExportError::NotAnExport { .. }), "{error}");
        assert_eq!(
            std::fs::read_to_string(mine.join("thesis.tex")).unwrap(),
            "precious"
        );

        // A previous export is replaced whole, stale files included.
        let out = temp.path().join("export");
        materialize(&store, &files, &out).unwrap();
        std::fs::write(out.join("stale.txt"), "old").unwrap();
        materialize(&store, &files, &out).unwrap();
        assert!(!out.join("stale.txt").exists());
        assert_eq!(std::fs::read(out.join(DATA_JSONL)).unwrap(), b"line\n");
        let leftovers: Vec<_> = std::fs::read_dir(temp.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}

//! `viss bench dag`: the engine's own benchmark on a synthetic DAG (a source stage with N items
//! and a chain of steps, each hashing its input into a JSON record, about one item in ten also
//! writing a 16 KiB binary blob). It measures what a no-op rebuild costs per item, and it is the
//! workload of the crash-safety test.

use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::dag::port::{Bytes, Port, PortId};
use crate::dag::scheduler::{BuildOptions, BuildReport};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{Env, JobCtx, Level, Outputs, SourceItem, SourceProblem, Stage, StageFailure};
use crate::hash::ContentHash;
use crate::project::Project;
use crate::range::{BadSetting, Validate};
use crate::workspace::{Workspace, WorkspaceError};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SourceParams {
    /// Synthetic items, 0 to 10,000,000.
    pub items: usize,
}

impl Validate for SourceParams {
    fn validate(&self) -> Result<(), BadSetting> {
        crate::range::check("items", self.items, crate::range::Range::new(0.0, 1e7))
    }
}

pub struct SyntheticSource(SourceParams);

impl From<SourceParams> for SyntheticSource {
    fn from(p: SourceParams) -> Self {
        Self(p)
    }
}

#[async_trait::async_trait]
impl Stage<Env> for SyntheticSource {
    fn level(&self) -> Level {
        Level::Episode
    }

    fn inputs(&self) -> Vec<PortId> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<PortId> {
        vec![record_port(SOURCE).id()]
    }

    fn source_items(
        &self,
        _: &Env,
        _: &Store,
    ) -> Result<Vec<Result<SourceItem, SourceProblem>>, StageFailure> {
        Ok((0..self.0.items)
            .map(|i| {
                let id = format!("bench/i{i:06}");
                Ok(SourceItem {
                    fingerprint: ContentHash::of(id.as_bytes()),
                    payload: serde_json::json!({ "index": i }),
                    id,
                })
            })
            .collect())
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let payload = ctx.source.clone().unwrap_or_default();
        let mut outputs = Outputs::default();
        let record = serde_json::json!({ "item": ctx.item, "source": payload });
        outputs.put(ctx, &record_port(SOURCE), &record)?;
        Ok(outputs)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StepParams {
    pub salt: String,
    /// The step's own stage name, and the stage whose outputs it reads.
    pub stage: String,
    pub reads: String,
}

const SOURCE: &str = "bench_s0";

fn record_port(stage: &'static str) -> Port<serde_json::Value> {
    Port::item(stage, "record")
}

fn blob_port(stage: &'static str) -> Port<Bytes> {
    Port::item(stage, "blob")
}

impl Validate for StepParams {
    fn validate(&self) -> Result<(), BadSetting> {
        Ok(())
    }
}

pub struct SyntheticStep {
    params: StepParams,
    stage: &'static str,
    reads: &'static str,
}

impl From<StepParams> for SyntheticStep {
    fn from(params: StepParams) -> Self {
        // A handful of names per benchmark run, each a stage of the synthetic chain.
        let leak = |name: &str| -> &'static str { Box::leak(name.to_string().into_boxed_str()) };
        Self {
            stage: leak(&params.stage),
            reads: leak(&params.reads),
            params,
        }
    }
}

#[async_trait::async_trait]
impl Stage<Env> for SyntheticStep {
    fn level(&self) -> Level {
        Level::Episode
    }

    fn inputs(&self) -> Vec<PortId> {
        let mut inputs = vec![record_port(self.reads).id()];
        if self.reads != SOURCE {
            inputs.push(blob_port(self.reads).id());
        }
        inputs
    }

    fn outputs(&self) -> Vec<PortId> {
        vec![record_port(self.stage).id(), blob_port(self.stage).id()]
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let mut digest = blake3::Hasher::new();
        digest.update(self.params.salt.as_bytes());
        for input in &ctx.inputs {
            digest.update(&ctx.store().get_blob(&input.hash)?);
        }
        let value = ContentHash::from_hasher(&digest);
        let mut outputs = Outputs::default();
        let record = serde_json::json!({ "item": ctx.item, "stage": ctx.stage, "value": value });
        outputs.put(ctx, &record_port(self.stage), &record)?;
        if value.as_bytes()[0].is_multiple_of(10) {
            let mut bytes = Vec::with_capacity(16 * 1024);
            let mut reader = blake3::Hasher::new()
                .update(value.as_bytes())
                .finalize_xof();
            bytes.resize(16 * 1024, 0);
            reader.fill(&mut bytes);
            outputs.put_bytes(ctx, &blob_port(self.stage), "", &bytes)?;
        }
        Ok(outputs)
    }
}

/// The kinds of a synthetic chain of `stages` stages over `items` items.
pub fn synthetic_kinds(items: usize, stages: usize) -> Vec<StageKind> {
    let mut kinds = vec![StageKind {
        name: SOURCE,
        summary: "synthetic source",
        version: 1,
        prompts: &[],
        defaults: Defaults::Text(Box::leak(
            format!("[params]\nitems = {items}\n").into_boxed_str(),
        )),
        load: load_stage::<SourceParams, SyntheticSource>,
    }];
    for step in 1..stages.max(1) {
        kinds.push(StageKind {
            name: Box::leak(format!("bench_s{step}").into_boxed_str()),
            summary: "synthetic step",
            version: 1,
            prompts: &[],
            defaults: Defaults::Text(Box::leak(
                format!(
                    "[params]\nstage = \"bench_s{step}\"\nreads = \"bench_s{}\"\n",
                    step - 1
                )
                .into_boxed_str(),
            )),
            load: load_stage::<StepParams, SyntheticStep>,
        });
    }
    kinds
}

pub fn open_synthetic(
    dir: &Path,
    items: usize,
    stages: usize,
    jobs: usize,
) -> Result<(Workspace, BuildOptions), BenchError> {
    let kinds = synthetic_kinds(items, stages);
    let project = if dir.join(crate::project::CONFIG_FILE).is_file() {
        Project::open(dir)?
    } else {
        // A run killed inside `init` leaves its folders without the config, which `init`
        // takes for a project of someone else's; an empty `stages/` is only ever its own.
        let interrupted =
            std::fs::read_dir(dir.join("stages")).is_ok_and(|mut entries| entries.next().is_none());
        Project::init(dir, &[], &[], interrupted)?
    };
    let workspace = Workspace::open(project, &kinds, "bench dag")?;
    Ok((
        workspace,
        BuildOptions {
            jobs,
            ..BuildOptions::default()
        },
    ))
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Project(#[from] crate::project::ProjectError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error("the synthetic build failed: {0}")]
    Failed(String),
    #[error(transparent)]
    Store(#[from] crate::dag::store::StoreError),
}

/// What the synthetic project at `dir` holds, for the crash test to compare: one JSON line per
/// (stage, item) record (key, outputs, error), then the store's verification.
pub fn dump(
    dir: &Path,
    items: usize,
    stages: usize,
    jobs: usize,
) -> Result<Vec<serde_json::Value>, BenchError> {
    let (workspace, _) = open_synthetic(dir, items, stages, jobs)?;
    let verify = crate::dag::maintenance::verify(workspace.store())?;
    let mut lines: Vec<serde_json::Value> = workspace
        .store()
        .index()
        .scan_all()?
        .into_iter()
        .map(|(stage, item, record)| {
            serde_json::json!({
                "stage": stage,
                "item": item,
                "key": record.key,
                "outputs": record.outputs,
                "error": record.error,
            })
        })
        .collect();
    lines.push(serde_json::json!({ "verify": verify }));
    Ok(lines)
}

#[derive(Debug, Serialize)]
pub struct DagBenchResult {
    pub items: usize,
    pub stages: usize,
    pub cold_build_seconds: f64,
    pub noop_rebuild_seconds: Vec<f64>,
    pub noop_median_seconds: f64,
    pub noop_per_item_microseconds: f64,
}

impl DagBenchResult {
    /// The summary `viss bench` prints after the JSON report.
    pub fn summary(&self) -> String {
        format!(
            "no-op rebuild of {} items x {} stages: median {:.3} s ({:.2} us per (stage, item)); \
             cold build {:.1} s",
            self.items,
            self.stages,
            self.noop_median_seconds,
            self.noop_per_item_microseconds,
            self.cold_build_seconds
        )
    }
}

fn check(report: &BuildReport) -> Result<(), BenchError> {
    match report.failures.first() {
        Some(f) => Err(BenchError::Failed(format!(
            "{} {}: {}",
            f.stage, f.item, f.error
        ))),
        None => Ok(()),
    }
}

/// Cold build once, then `repeat` no-op rebuilds (each a fresh open: load index, plan, check).
pub fn run_dag_bench(
    dir: &Path,
    items: usize,
    stages: usize,
    repeat: usize,
    jobs: usize,
) -> Result<DagBenchResult, BenchError> {
    let started = Instant::now();
    {
        let (workspace, options) = open_synthetic(dir, items, stages, jobs)?;
        check(&workspace.build(&options)?)?;
    }
    let cold = started.elapsed().as_secs_f64();
    let mut times = Vec::new();
    for _ in 0..repeat.max(1) {
        let started = Instant::now();
        let (workspace, options) = open_synthetic(dir, items, stages, jobs)?;
        let report = workspace.build(&options)?;
        check(&report)?;
        let ran = report.total(|c| c.ran);
        if ran != 0 {
            return Err(BenchError::Failed(format!(
                "a no-op rebuild ran {ran} items"
            )));
        }
        drop(workspace);
        times.push(started.elapsed().as_secs_f64());
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    Ok(DagBenchResult {
        items,
        stages,
        cold_build_seconds: cold,
        noop_rebuild_seconds: times,
        noop_median_seconds: median,
        noop_per_item_microseconds: median * 1e6 / (items * stages.max(1)) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run killed inside `init` (the crash test kills at random instants from the first
    /// millisecond) leaves the project's folders without its config; the next run makes the
    /// project instead of refusing it as someone else's.
    #[test]
    fn a_synthetic_project_whose_init_was_killed_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        for folder in ["stages", "prompts", "raw", "manifests/shows"] {
            std::fs::create_dir_all(dir.path().join(folder)).unwrap();
        }
        let (workspace, options) = open_synthetic(dir.path(), 3, 2, 1).unwrap();
        let report = workspace.build(&options).unwrap();
        assert!(report.failures.is_empty());
        assert!(dir.path().join(crate::project::CONFIG_FILE).is_file());
    }
}

//! `export`: the benchmark as a dataset. Every scenario's records (its unit and time range, the
//! annotation, description, balanced profiles, BDI-Risk, tasks, initial affect and vision
//! dependence, and the synthetic images when the image stages are in the DAG) become one
//! benchmark record; the records become data.jsonl, data.parquet, a dataset card and a lock
//! of every hash. One item for the whole benchmark: it re-runs when any scenario's records
//! change, and `viss export` copies its files out of the store.
//!
//! The image stages are optional inputs: with `group_image` and `portraits` in `needs`, their
//! records fill the image fields; without them the fields are null and the card says the
//! images were not built.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::dag::spec::{NoParams, StageKind, load_stage};
use crate::dag::{JobCtx, JobError, Level, Outputs, Stage, StageFailure};
use crate::export::record::ScenarioSources;
use crate::export::{AssembledDataset, DatasetError, DatasetFiles, assemble_dataset};
use crate::hash::ContentHash;
use crate::vision::synthetic::{GROUP_IMAGE_RECORD, PORTRAITS_RECORD};

pub const KIND: StageKind = StageKind {
    name: "export",
    summary: "benchmark records -> data.jsonl, data.parquet, dataset card, viss.lock",
    default_config: include_str!("../../stages/export.toml"),
    load: load_stage::<NoParams, Export>,
};

pub struct Export;

impl From<NoParams> for Export {
    fn from(_: NoParams) -> Self {
        Export
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExportStageError {
    #[error(transparent)]
    Job(#[from] JobError),
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    #[error(
        "export: scenario {scenario} has no `{name}` from stage `{stage}`; check `needs` in stages/export.toml"
    )]
    Missing {
        scenario: String,
        stage: String,
        name: String,
    },
}

/// Every input by (stage, item, output name).
struct InputIndex(HashMap<(String, String, String), ContentHash>);

impl InputIndex {
    fn of(ctx: &JobCtx) -> Self {
        Self(
            ctx.inputs
                .iter()
                .map(|i| ((i.need.clone(), i.item.clone(), i.name.clone()), i.hash))
                .collect(),
        )
    }

    fn get(&self, stage: &str, item: &str, name: &str) -> Option<ContentHash> {
        self.0
            .get(&(stage.to_string(), item.to_string(), name.to_string()))
            .copied()
    }
}

fn read_optional<T: serde::de::DeserializeOwned>(
    ctx: &JobCtx,
    hash: Option<ContentHash>,
) -> Result<Option<T>, JobError> {
    hash.map(|hash| ctx.read_json(&hash)).transpose()
}

/// Reads one scenario's records, noting each one's hash for the lock.
fn scenario_sources(
    ctx: &JobCtx,
    index: &InputIndex,
    id: &str,
    episode: &str,
) -> Result<ScenarioSources, StageFailure> {
    let mut inputs = BTreeMap::new();
    let mut read = |stage: &str,
                    item: &str,
                    name: &str,
                    required: bool|
     -> Result<Option<ContentHash>, StageFailure> {
        match index.get(stage, item, name) {
            Some(hash) => {
                inputs.insert(stage.to_string(), hash);
                Ok(Some(hash))
            }
            None if required => Err(ExportStageError::Missing {
                scenario: id.into(),
                stage: stage.into(),
                name: name.into(),
            }
            .into()),
            None => Ok(None),
        }
    };
    let scenario =
        read("parse_script", episode, &format!("scenario@{id}"), true)?.expect("required");
    let span = read("align", episode, &format!("span@{id}"), false)?;
    let profile = read(
        "profiles",
        crate::dag::BENCHMARK_ITEM,
        &format!("profile@{id}"),
        true,
    )?
    .expect("required");
    let mut step =
        |stage: &str, name: &str| read(stage, id, name, true).map(|hash| hash.expect("required"));
    let annotation = step("annotate", "annotation")?;
    let description = step("describe", "description")?;
    let bdi = step("bdi_risk", "bdi_risk")?;
    let tasks = step("tasks", "tasks")?;
    let affect = step("affect", "affect")?;
    let vision = step("vision_dependence", "vision_dependence")?;
    let group_image = read("group_image", id, GROUP_IMAGE_RECORD, false)?;
    let portraits = read("portraits", id, PORTRAITS_RECORD, false)?;
    read("ingest", episode, "episode", true)?;
    Ok(ScenarioSources {
        scenario: ctx.read_json(&scenario)?,
        span: read_optional(ctx, span)?,
        annotation: ctx.read_json(&annotation)?,
        description: ctx.read_json(&description)?,
        profiles: ctx.read_json(&profile)?,
        bdi: ctx.read_json(&bdi)?,
        tasks: ctx.read_json(&tasks)?,
        affect: ctx.read_json(&affect)?,
        vision: ctx.read_json(&vision)?,
        group_image: read_optional(ctx, group_image)?,
        portraits: read_optional(ctx, portraits)?,
        inputs,
    })
}

#[async_trait::async_trait]
impl Stage for Export {
    fn level(&self) -> Level {
        Level::Benchmark
    }

    /// Per scenario only: an episode's whole script or alignment, or the benchmark-wide
    /// balance summary, would add nothing the scenarios' own records do not have.
    fn reads(&self, need: &str, output: &str) -> bool {
        match need {
            "ingest" => output == "episode",
            "parse_script" => output.starts_with("scenario@"),
            "align" => output.starts_with("span@"),
            "profiles" => output.starts_with("profile@"),
            _ => true,
        }
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let index = InputIndex::of(ctx);
        let scenario_ids: BTreeSet<&str> = ctx
            .inputs_from("annotate")
            .map(|i| i.item.as_str())
            .collect();
        let mut scenarios = Vec::with_capacity(scenario_ids.len());
        for id in scenario_ids {
            let episode = Level::Episode.ancestor_of(id);
            scenarios.push(scenario_sources(ctx, &index, id, episode)?);
        }
        let mut episodes = BTreeMap::new();
        for input in ctx.inputs_from("ingest") {
            episodes.insert(input.item.clone(), ctx.read_json(&input.hash)?);
        }
        let AssembledDataset {
            records,
            files,
            images,
        } = ctx
            .cpu(move || assemble_dataset(scenarios, episodes))
            .await
            .map_err(ExportStageError::from)?;
        let mut outputs = Outputs::default().with("table", ctx.put_json(&records)?);
        let mut placed: BTreeMap<String, ContentHash> = images
            .into_iter()
            .map(|image| (image.path, image.png))
            .collect();
        for (name, bytes) in files {
            let hash = ctx.put_bytes(&bytes)?;
            outputs = outputs.with(name, hash);
            placed.insert(name.to_string(), hash);
        }
        Ok(outputs.with("files", ctx.put_json(&DatasetFiles { files: placed })?))
    }
}

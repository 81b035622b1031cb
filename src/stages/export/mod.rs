//! `export`: the benchmark as a dataset. Every scenario's records (its unit and time range, the
//! annotation, description, balanced profiles, BDI-Risk, tasks, initial affect and vision
//! dependence, and the synthetic images when the image stages are in the DAG) become one
//! benchmark record; the records become data.jsonl, data.parquet, a dataset card and a lock
//! of every hash. One item for the whole benchmark: it re-runs when any scenario's records
//! change, and `viss export` copies its files out of the store.
//!
//! A scenario without video has no images: its image fields are null and the card says the
//! images were not built.

pub mod agentsense;
pub mod card;
pub mod dataset;
pub mod huggingface;
pub mod leakage;
pub mod lock;
pub mod record;

use std::collections::{BTreeMap, BTreeSet};

use crate::dag::cost::AnswersCost;
use crate::dag::port::{Bytes, Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::{Env, Input, JobCtx, JobError, Level, Outputs, Stage, StageFailure};
use crate::hash::ContentHash;
use crate::stages::descriptor::Exported;
use crate::stages::llm_step::{self, ReviewOutcome};
use crate::stages::{
    affect, align, annotate, anonymize, balance, bdi_risk, blind_test, cast, describe, group_image,
    ingest, instantiate, parse_script, portraits, script_prediction, tasks, template,
    vision_dependence,
};
use dataset::{AssembledDataset, DatasetError, DatasetFiles, LeftOut, assemble_dataset};
use record::ScenarioSources;

/// Every benchmark record, as `data.jsonl` holds them.
pub const TABLE: Port<Vec<record::BenchmarkRecord>> = Port::item(NAME, "table");
/// Where each exported file and image goes, by content hash.
pub const FILES: Port<DatasetFiles> = Port::item(NAME, "files");
/// One exported file's bytes, keyed by its path in the export (`data.jsonl`, `README.md`).
pub const FILE: Port<Bytes> = Port::keyed(NAME, "");
/// What the answers behind the records cost (the card's total).
pub const COST: Port<crate::dag::cost::Cost> = Port::item(NAME, "cost");

const NAME: &str = "export";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "benchmark records -> data.jsonl, data.parquet, dataset card, viss.lock",
    version: 7,
    prompts: &[],
    defaults: Defaults::of::<ExportParams>(),
    load: load_stage::<ExportParams, Export>,
};

pub struct Export(ExportParams);

/// export: the benchmark as a dataset. Every scenario's records (unit and time range,
/// annotation, description, balanced profiles, BDI-Risk, tasks, initial affect, vision
/// dependence) become one benchmark record; the records become data.jsonl, data.parquet, a
/// dataset card (README.md) and viss.lock (the hash of every file and of every record behind
/// each scenario). `viss export` writes them, with the images, into a directory.
///
/// The synthetic image G fills each record's `group_image`, and the portraits each role's
/// `portrait` (or why it has none); a scenario without video has neither: those fields are null
/// and the card says the images were not built.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ExportParams {
    /// The dataset's licence as the Hugging Face Hub names it (`cc-by-4.0`, `cc0-1.0`,
    /// `other`, ...), written into the card's metadata. `unknown` until you set it: the turns
    /// and annotations derive from the licensed media, whose terms decide it.
    pub license: String,
    /// Keep scenarios with a flagged answer (one that still fails a quality gate after its
    /// re-asks), each with its problems in the `problems` column. Off: they are left out, and
    /// the card counts them per stage and problem kind.
    pub include_flagged: bool,
    /// Write the AgentViSS records with anonymised names, as the paper's released tasks are:
    /// `anonymize`'s replacements applied to every text and each character's name replaced by
    /// a synthetic one (`instantiate`'s first clean cast whose genders agree). A scenario with
    /// no such cast (no AgentSense template, or every cast flagged) is left out and counted.
    pub anonymize_names: bool,
}

impl Default for ExportParams {
    fn default() -> Self {
        Self {
            license: "unknown".to_string(),
            include_flagged: false,
            anonymize_names: false,
        }
    }
}

impl crate::range::Validate for ExportParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        Ok(())
    }
}

impl From<ExportParams> for Export {
    fn from(params: ExportParams) -> Self {
        Export(params)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExportStageError {
    #[error(transparent)]
    Job(#[from] JobError),
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    #[error("export: scenario {scenario} has no `{port}`")]
    Missing { scenario: String, port: String },
}

/// The LLM steps whose answers land in a benchmark record (their answers' cost is in the card).
fn record_steps() -> Vec<&'static str> {
    steps_exported(|exported| matches!(exported, Exported::Fields { .. }))
}

/// The LLM stages behind an AgentSense template, its casts and the leakage probes.
fn template_steps() -> Vec<&'static str> {
    let mut stages = steps_exported(|exported| matches!(exported, Exported::AgentSense));
    stages.extend([
        instantiate::INSTANCES.id().stage,
        script_prediction::PREDICTION.id().stage,
        blind_test::BLIND.id().stage,
    ]);
    stages
}

fn steps_exported(kind: fn(&Exported) -> bool) -> Vec<&'static str> {
    crate::stages::STEPS
        .iter()
        .filter(|step| kind(&step.exported))
        .map(|step| step.stage())
        .collect()
}

/// What the answers behind scenario `id`'s records of `stages` cost, by stage (each step that
/// made a record stored it beside the record).
fn costs_of(
    ctx: &JobCtx,
    id: &str,
    stages: &[&'static str],
) -> Result<BTreeMap<String, AnswersCost>, JobError> {
    let mut costs = BTreeMap::new();
    for &stage in stages {
        let port = llm_step::answers_cost(stage);
        if let Some(input) = ctx.find(port.id(), id, "") {
            costs.insert(stage.to_string(), ctx.read_input(&port, input)?);
        }
    }
    Ok(costs)
}

/// Reads one scenario's records, noting each one's hash for the lock.
fn scenario_sources(
    ctx: &JobCtx,
    id: &str,
    episode: &str,
) -> Result<ScenarioSources, ExportStageError> {
    let mut inputs = BTreeMap::new();
    let mut find =
        |port: PortId, item: &str, key: &str, required: bool| match ctx.find(port, item, key) {
            Some(input) => {
                inputs.insert(port.stage.to_string(), input.hash);
                Ok(Some(input))
            }
            None if required => Err(ExportStageError::Missing {
                scenario: id.into(),
                port: port.output_name(key),
            }),
            None => Ok(None),
        };
    let scenario = find(parse_script::SCENARIO.id(), episode, id, true)?;
    let span = find(align::SPAN.id(), episode, id, false)?;
    let profile = find(balance::PROFILE.id(), crate::dag::BENCHMARK_ITEM, id, true)?;
    let annotation = find(annotate::ANNOTATION.id(), id, "", true)?;
    let description = find(describe::DESCRIPTION.id(), id, "", true)?;
    let bdi = find(bdi_risk::BDI_RISK.id(), id, "", true)?;
    let tasks = find(tasks::TASKS.id(), id, "", true)?;
    let affect = find(affect::AFFECT.id(), id, "", true)?;
    let vision = find(vision_dependence::VISION_DEPENDENCE.id(), id, "", true)?;
    let cast = find(cast::CAST.id(), id, "", true)?;
    let group_image = find(group_image::GROUP_IMAGE.id(), id, "", false)?;
    let portraits = find(portraits::PORTRAITS.id(), id, "", false)?;
    find(ingest::EPISODE.id(), episode, "", true)?;
    fn required(input: Option<&Input>) -> &Input {
        input.expect("required inputs are checked above")
    }
    Ok(ScenarioSources {
        scenario: ctx.read_input(&parse_script::SCENARIO, required(scenario))?,
        span: span.map(|i| ctx.read_input(&align::SPAN, i)).transpose()?,
        annotation: ctx.read_input(&annotate::ANNOTATION, required(annotation))?,
        description: ctx.read_input(&describe::DESCRIPTION, required(description))?,
        profiles: ctx.read_input(&balance::PROFILE, required(profile))?,
        bdi: ctx.read_input(&bdi_risk::BDI_RISK, required(bdi))?,
        tasks: ctx.read_input(&tasks::TASKS, required(tasks))?,
        affect: ctx.read_input(&affect::AFFECT, required(affect))?,
        vision: ctx.read_input(&vision_dependence::VISION_DEPENDENCE, required(vision))?,
        cast: ctx.read_input(&cast::CAST, required(cast))?,
        group_image: group_image
            .map(|i| ctx.read_input(&group_image::GROUP_IMAGE, i))
            .transpose()?,
        portraits: portraits
            .map(|i| ctx.read_input(&portraits::PORTRAITS, i))
            .transpose()?,
        inputs,
        costs: costs_of(ctx, id, &record_steps())?,
    })
}

/// How scenario `id`'s record is renamed under `anonymize_names`; `None` when it cannot be.
fn renaming(
    ctx: &JobCtx,
    id: &str,
    episode: &str,
    sources: &ScenarioSources,
) -> Result<Option<agentsense::Renaming>, StageFailure> {
    let (Some(anonymization), Some(instances), Some(context)) = (
        read_optional(ctx, &anonymize::ANONYMIZATION, id)?,
        read_optional(ctx, &instantiate::INSTANCES, id)?,
        ctx.find(parse_script::CONTEXT.id(), episode, id)
            .map(|input| ctx.read_input(&parse_script::CONTEXT, input))
            .transpose()?,
    ) else {
        return Ok(None);
    };
    let genders: Vec<_> = sources
        .annotation
        .answer
        .roles
        .iter()
        .map(|role| role.gender)
        .collect();
    Ok(agentsense::Renaming::new(
        &anonymization.answer,
        context,
        &instances,
        &genders,
    ))
}

/// Scenario `id`'s record of `port`, if its stage made one.
fn read_optional<T: serde::de::DeserializeOwned>(
    ctx: &JobCtx,
    port: &Port<T>,
    id: &str,
) -> Result<Option<T>, StageFailure> {
    ctx.find(port.id(), id, "")
        .map(|input| ctx.read_input(port, input))
        .transpose()
        .map_err(StageFailure::from)
}

/// The episode-level check of `annotate`'s answers, which no scenario's validator can make: a
/// character whose gender, age or occupation differs between the scenes of an episode (see
/// [`annotate::answer::episode_inconsistencies`], scenes in script order). Each is a flag for a
/// person to check: the script may say the character changed, and no single answer is wrong on
/// its own to be re-asked.
fn inconsistent_characters(scenarios: &[ScenarioSources]) -> Vec<String> {
    let mut by_episode: BTreeMap<&str, Vec<(&str, &annotate::answer::Annotation)>> =
        BTreeMap::new();
    let mut in_script_order: Vec<&ScenarioSources> = scenarios.iter().collect();
    in_script_order.sort_by_key(|sources| sources.scenario.unit.scene_index);
    for sources in in_script_order {
        let id = sources.scenario.id.as_str();
        by_episode
            .entry(Level::Episode.ancestor_of(id))
            .or_default()
            .push((id, &sources.annotation.answer));
    }
    by_episode
        .into_iter()
        .flat_map(|(episode, annotations)| {
            annotate::answer::episode_inconsistencies(&annotations)
                .into_iter()
                .map(move |problem| format!("episode {episode}: {problem}"))
        })
        .collect()
}

#[async_trait::async_trait]
impl Stage<Env> for Export {
    fn level(&self) -> Level {
        Level::Benchmark
    }

    fn inputs(&self) -> Vec<PortId> {
        let costs = record_steps()
            .into_iter()
            .chain(template_steps())
            .map(|stage| llm_step::answers_cost(stage).id());
        [
            ingest::EPISODE.id(),
            parse_script::SCENARIO.id(),
            align::SPAN.id(),
            annotate::ANNOTATION.id(),
            describe::DESCRIPTION.id(),
            balance::PROFILE.id(),
            bdi_risk::BDI_RISK.id(),
            tasks::TASKS.id(),
            affect::AFFECT.id(),
            vision_dependence::VISION_DEPENDENCE.id(),
            cast::CAST.id(),
            // The images are read with their records so that the lock lists them.
            group_image::GROUP_IMAGE.id(),
            group_image::GROUP_IMAGE_PNG.id(),
            portraits::PORTRAITS.id(),
            portraits::PORTRAIT_PNG.id(),
            template::TEMPLATE.id(),
            instantiate::INSTANCES.id(),
            anonymize::ANONYMIZATION.id(),
            parse_script::CONTEXT.id(),
            script_prediction::PREDICTION.id(),
            blind_test::BLIND.id(),
        ]
        .into_iter()
        .chain(costs)
        .collect()
    }

    fn outputs(&self) -> Vec<PortId> {
        [TABLE.id(), FILES.id(), FILE.id(), COST.id()].into()
    }

    /// A scenario whose records failed is left out (and counted), not holding the rest.
    fn partial_aggregate(&self) -> bool {
        true
    }

    fn reads_added(&self) -> &'static [&'static str] {
        &[
            "cast",
            "template",
            "instantiate",
            "script_prediction",
            "blind_test",
            "anonymize",
            // What the answers cost, stored beside each step's record.
            "profiles",
            "goals",
            "private_info",
            "relationships",
        ]
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let scenario_port = parse_script::SCENARIO.id();
        let scenario_ids: BTreeSet<String> = ctx
            .inputs_of(scenario_port)
            .filter_map(|i| i.name.strip_prefix(&scenario_port.output_name("")))
            .map(str::to_string)
            .collect();
        let mut scenarios = Vec::with_capacity(scenario_ids.len());
        let mut renamings = BTreeMap::new();
        let mut left_out = LeftOut {
            flagged_kept: self.0.include_flagged,
            names_anonymised: self.0.anonymize_names,
            ..LeftOut::default()
        };
        for id in &scenario_ids {
            let episode = Level::Episode.ancestor_of(id);
            let sources = match scenario_sources(ctx, id, episode) {
                Ok(sources) => sources,
                // Something it needs failed (or was blocked): a partial aggregate goes on.
                Err(ExportStageError::Missing { .. }) => {
                    left_out.incomplete.push(id.clone());
                    continue;
                }
                Err(failure) => return Err(failure.into()),
            };
            let mut rejected = false;
            for (stage, mark) in sources.reviews() {
                let counts = left_out.reviewed.entry(stage.to_string()).or_default();
                counts.reviewed += 1;
                match mark.verdict {
                    ReviewOutcome::Accepted => counts.accepted += 1,
                    ReviewOutcome::Edited => counts.edited += 1,
                    ReviewOutcome::Rejected => {
                        counts.rejected += 1;
                        rejected = true;
                    }
                }
            }
            if rejected {
                left_out.rejected.push(id.clone());
                continue;
            }
            let problems = sources.problems();
            for problem in &problems {
                *left_out
                    .flagged_kinds
                    .entry(problem.stage.clone())
                    .or_default()
                    .entry(problem.kind.clone())
                    .or_default() += 1;
            }
            if !problems.is_empty() {
                left_out.flagged.push(id.clone());
                if !self.0.include_flagged {
                    continue;
                }
            }
            if self.0.anonymize_names {
                match renaming(ctx, id, episode, &sources)? {
                    Some(renaming) => {
                        renamings.insert(id.clone(), renaming);
                    }
                    None => {
                        left_out.not_anonymised.push(id.clone());
                        continue;
                    }
                }
            }
            scenarios.push(sources);
        }
        let mut agentsense = Vec::new();
        for id in &scenario_ids {
            let Some(input) = ctx.find(template::TEMPLATE.id(), id, "") else {
                continue;
            };
            let template = ctx.read_input(&template::TEMPLATE, input)?;
            agentsense.push(agentsense::AgentSenseSources {
                scenario: id.clone(),
                template,
                instances: read_optional(ctx, &instantiate::INSTANCES, id)?,
                prediction: read_optional(ctx, &script_prediction::PREDICTION, id)?,
                blind: read_optional(ctx, &blind_test::BLIND, id)?,
                costs: costs_of(ctx, id, &template_steps())?,
            });
        }
        let flags = inconsistent_characters(&scenarios);
        let license = self.0.license.clone();
        // The images' bytes, for the Hugging Face view that embeds them.
        let mut pngs = BTreeMap::new();
        for hash in scenarios.iter().flat_map(ScenarioSources::image_hashes) {
            if let std::collections::btree_map::Entry::Vacant(slot) = pngs.entry(hash) {
                slot.insert(ctx.store().get_blob(&hash)?);
            }
        }
        let mut episodes = BTreeMap::new();
        for input in ctx.inputs_of(ingest::EPISODE.id()) {
            episodes.insert(input.item.clone(), ctx.read_input(&ingest::EPISODE, input)?);
        }
        let AssembledDataset {
            records,
            files,
            images,
            cost,
        } = ctx
            .cpu(move || {
                let renamed = dataset::Renamed(renamings);
                assemble_dataset(
                    scenarios, &renamed, agentsense, episodes, &license, &pngs, &left_out,
                )
            })
            .await
            .map_err(ExportStageError::from)?;
        let mut outputs = Outputs {
            flags,
            ..Outputs::default()
        };
        outputs.put(ctx, &TABLE, &records)?;
        outputs.put(ctx, &COST, &cost)?;
        let mut placed: BTreeMap<String, ContentHash> = images
            .into_iter()
            .map(|image| (image.path, image.png))
            .collect();
        for (name, bytes) in files {
            let hash = outputs.put_bytes(ctx, &FILE, name, &bytes)?;
            placed.insert(name.to_string(), hash);
        }
        outputs.put(ctx, &FILES, &DatasetFiles { files: placed })?;
        Ok(outputs)
    }
}

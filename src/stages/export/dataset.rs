//! Assembling the dataset's files (all but the images) from the scenario stages' records: what
//! the `export` stage stores, so the dataset is cached like any other result. Writing it into a
//! directory is [`crate::export::write_dataset`].

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::card::{CardContext, Costs, Reasks, render_card};
use super::huggingface;
use super::lock::{DatasetLock, LOCK_FILE, LOCK_VERSION, ScenarioLock};
use super::record::{BenchmarkRecord, PlacedImage, RecordError, ScenarioSources};
use crate::hash::ContentHash;
use crate::manifest::EpisodeSource;
use viss_parquet::{ParquetError, column_types, write_parquet};

pub const DATA_JSONL: &str = "data.jsonl";
pub const DATA_PARQUET: &str = "data.parquet";
pub const CARD_FILE: &str = "README.md";

/// The stage that assembles the dataset.
pub const EXPORT_STAGE: &str = "export";

#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error(
        "there is no scenario to export: no episode produced a scenario that went through every \
         stage"
    )]
    Empty,
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("data.parquet: {0}")]
    Parquet(#[from] ParquetError),
}

/// What the `export` stage stores about the dataset it assembled: every file's place and
/// blob, images included. Writing a dataset is copying these blobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DatasetFiles {
    pub files: BTreeMap<String, ContentHash>,
}

/// The dataset's files as bytes (all but the images, which are already blobs in the store).
pub struct AssembledDataset {
    pub records: Vec<BenchmarkRecord>,
    /// data.jsonl, data.parquet, README.md, viss.lock, and scenarios.parquet when there are
    /// images.
    pub files: Vec<(&'static str, Vec<u8>)>,
    pub images: Vec<PlacedImage>,
    /// What the answers behind the records cost, as the card totals it.
    pub cost: crate::dag::cost::Cost,
}

/// Assembles the dataset from every scenario's records and the ingested episodes (by episode
/// id, `show/episode`). Deterministic: equal inputs give equal bytes in every file.
/// What the export left out, and the flagged answers it found, for the card.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeftOut {
    /// Scenarios without all their records: something they need failed (`viss status`).
    pub incomplete: Vec<String>,
    /// Scenarios with a flagged answer (left out unless `flagged_kept`).
    pub flagged: Vec<String>,
    /// Every flagged answer's problems, counted per stage and problem kind.
    pub flagged_kinds: BTreeMap<String, BTreeMap<String, u64>>,
    /// `include_flagged`: the flagged scenarios are in the dataset, with their problems.
    pub flagged_kept: bool,
    /// Scenarios a reviewer rejected an answer of (`viss review`): always left out.
    pub rejected: Vec<String>,
    /// The reviewed answers of every scenario considered, per stage.
    pub reviewed: BTreeMap<String, ReviewCounts>,
    /// `anonymize_names`: the records are written with anonymised names.
    pub names_anonymised: bool,
    /// Scenarios `anonymize_names` could not rename (no clean synthetic cast that fits).
    pub not_anonymised: Vec<String>,
}

/// The scenarios whose records are written with anonymised names, and how.
#[derive(Default)]
pub struct Renamed(pub BTreeMap<String, super::agentsense::Renaming>);

/// How many answers of a stage a person reviewed, and what they said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReviewCounts {
    pub reviewed: u64,
    pub accepted: u64,
    pub edited: u64,
    pub rejected: u64,
}

pub fn assemble_dataset(
    mut scenarios: Vec<ScenarioSources>,
    renamed: &Renamed,
    agentsense: Vec<super::agentsense::AgentSenseSources>,
    episodes: BTreeMap<String, EpisodeSource>,
    license: &str,
    pngs: &BTreeMap<ContentHash, Vec<u8>>,
    left_out: &LeftOut,
) -> Result<AssembledDataset, DatasetError> {
    if scenarios.is_empty() {
        return Err(DatasetError::Empty);
    }
    // Script order, which a reader of the dataset expects; ids (hashes of opening lines) break
    // no ties in a real script but keep the order total.
    scenarios.sort_by(|a, b| {
        let place = |s: &ScenarioSources| {
            (
                s.scenario.episode.clone(),
                s.scenario.unit.source_line_start,
                s.scenario.id.clone(),
            )
        };
        place(a).cmp(&place(b))
    });
    let schema: Value = super::record::record_schema();
    let mut records = Vec::with_capacity(scenarios.len());
    let mut images = Vec::new();
    let mut jsonl = String::new();
    let mut scenario_locks = BTreeMap::new();
    let mut models: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut reasks: BTreeMap<String, Reasks> = BTreeMap::new();
    let mut costs = Costs::default();
    for sources in &scenarios {
        let (record, placed) = sources.assemble(&episodes)?;
        let record = match renamed.0.get(&record.id) {
            Some(renaming) => renaming.record(record),
            None => record,
        };
        let line = serde_json::to_string(&record).expect("records serialize");
        scenario_locks.insert(
            record.id.clone(),
            ScenarioLock {
                record: ContentHash::of(line.as_bytes()),
                inputs: sources.inputs.clone(),
            },
        );
        jsonl.push_str(&line);
        jsonl.push('\n');
        costs.add_stages(&sources.costs);
        for (stage, model, rejected) in sources.steps() {
            models
                .entry(stage.to_string())
                .or_default()
                .insert(model.to_string());
            let stage = reasks.entry(stage.to_string()).or_default();
            stage.scenarios += 1;
            stage.answers += rejected.len();
            crate::annotation::check::count_refusals(rejected.iter(), &mut stage.reasons);
        }
        records.push(record);
        images.extend(placed);
    }
    let rows: Vec<Value> = records
        .iter()
        .map(|r| serde_json::to_value(r).expect("records serialize"))
        .collect();
    let parquet = write_parquet(&rows, &schema)?;
    // Only episodes that contributed a scenario: the card describes this benchmark's sources.
    let used: BTreeSet<&str> = records.iter().map(|r| r.episode.as_str()).collect();
    let sources: Vec<EpisodeSource> = episodes
        .iter()
        .filter(|(id, _)| used.contains(id.as_str()))
        .map(|(_, e)| e.clone())
        .collect();
    let columns = column_types(&schema)?;
    let agentsense = super::agentsense::assemble(agentsense, left_out.flagged_kept)?;
    if let Some(set) = &agentsense {
        costs.add_stages(&set.counts.costs.0);
    }
    let card = render_card(
        &records,
        &CardContext {
            episodes: &sources,
            models: &models,
            reasks: &reasks,
            costs: &costs,
            schema: &schema,
            parquet_columns: &columns,
            license,
            left_out,
        },
    );
    let mut card = card;
    if let Some(set) = &agentsense {
        for (name, file) in &set.configs {
            card = huggingface::with_config(&card, name, file)
                .expect("the card rendered above has its metadata block");
        }
        card.push_str(&super::agentsense::card_section(&set.counts));
    }
    let mut files = vec![
        (DATA_JSONL, jsonl.into_bytes()),
        (DATA_PARQUET, parquet),
        (CARD_FILE, card.into_bytes()),
    ];
    if !images.is_empty() {
        let placed: BTreeMap<&str, &ContentHash> = images
            .iter()
            .map(|image| (image.path.as_str(), &image.png))
            .collect();
        let png = |path: &str| placed.get(path).and_then(|hash| pngs.get(*hash)).cloned();
        let hf_rows: Vec<Value> = rows
            .iter()
            .map(|row| huggingface::scenarios_row(row, &png))
            .collect();
        let hf_schema = huggingface::scenarios_schema(&schema);
        files.push((
            huggingface::SCENARIOS_PARQUET,
            write_parquet(&hf_rows, &hf_schema)?,
        ));
    }
    files.extend(agentsense.into_iter().flat_map(|set| set.files));
    let mut hashes: BTreeMap<String, ContentHash> = files
        .iter()
        .map(|(name, bytes)| (name.to_string(), ContentHash::of(bytes)))
        .collect();
    hashes.extend(images.iter().map(|image| (image.path.clone(), image.png)));
    let lock = DatasetLock {
        version: LOCK_VERSION,
        files: hashes,
        scenarios: scenario_locks,
    };
    files.push((LOCK_FILE, lock.render().into_bytes()));
    Ok(AssembledDataset {
        records,
        files,
        images,
        cost: costs.total(),
    })
}

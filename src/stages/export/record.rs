//! The benchmark record: one scenario with everything the construction stages said about it,
//! flattened into the shape a researcher loads (one JSON line, one Parquet row). Its JSON
//! schema is derived from the types here ([`record_schema`]; a copy for readers without viss
//! is `src/stages/export/benchmark-record.schema.json`); the export's tests hold every record
//! to it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::annotation::{
    ConflictCharacteristic, ConflictIntensity, DialogueType, Emotion, ExpressionStyle, Gender,
    VisionDependenceClass, VisualChannel,
};
use crate::hash::ContentHash;
use crate::manifest::EpisodeSource;
use crate::stages::affect::answer::Affect;
use crate::stages::align::AlignedScenario;
use crate::stages::annotate::answer::Annotation;
use crate::stages::bdi_risk::answer::BdiRisk;
use crate::stages::cast::{Cast, CastError};
use crate::stages::describe::answer::Description;
use crate::stages::llm_step::{ProfileRecord, Provenance, StepRecord};
use crate::stages::parse_script::ScenarioRecord;
use crate::stages::tasks::answer::Tasks;
use crate::stages::vision_dependence::answer::VisionDependence;
use crate::vision::synthetic::{GroupImageRecord, PortraitsRecord, SyntheticImage};

/// One line of `data.jsonl`. Fields are never skipped: unknown is `null`. Its JSON schema
/// ([`record_schema`]) is derived from these types: each field's `description` is its meaning
/// for the dataset's readers (the card's field table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "viss benchmark record",
    description = "One scenario of a benchmark exported by `viss export`: one line of \
     data.jsonl, one row of data.parquet. Every field is always present; a value that is not \
     known is null, never a default."
)]
pub struct BenchmarkRecord {
    #[schemars(
        description = "Scenario id, `show/episode/scNNN`: stable across builds.",
        regex(pattern = r"^[A-Za-z0-9._-]+/[A-Za-z0-9._-]+/[A-Za-z0-9._-]+$")
    )]
    pub id: String,
    #[schemars(description = "Show id (the manifest's file name).", length(min = 1))]
    pub show: String,
    #[schemars(description = "Show title from its manifest.")]
    #[schemars(required, schema_with = "nullable::<String>")]
    pub show_title: Option<String>,
    #[schemars(description = "Source episode id, `show/episode`.", length(min = 1))]
    pub episode: String,
    #[schemars(description = "Episode title from the show manifest.")]
    #[schemars(required, schema_with = "nullable::<String>")]
    pub episode_title: Option<String>,
    #[schemars(description = "The script's heading of the scene the scenario comes from.")]
    #[schemars(required, schema_with = "nullable::<String>")]
    pub scene_heading: Option<String>,
    #[schemars(
        description = "The episode's script, relative to the project's raw/ (not redistributed).",
        length(min = 1)
    )]
    pub script_file: String,
    #[schemars(
        description = "First line of the scenario in the script file (1-based).",
        range(min = 0)
    )]
    pub script_line_start: usize,
    #[schemars(
        description = "Last line of the scenario in the script file (1-based, inclusive).",
        range(min = 0)
    )]
    pub script_line_end: usize,
    #[schemars(
        description = "Start of the scenario in the episode's video, in milliseconds, from its \
         aligned subtitles; null when no line could be aligned.",
        range(min = 0),
        required,
        schema_with = "nullable::<u64>"
    )]
    pub start_ms: Option<u64>,
    #[schemars(
        description = "End of the scenario in the episode's video, in milliseconds; null when no \
         line could be aligned.",
        range(min = 0),
        required,
        schema_with = "nullable::<u64>"
    )]
    pub end_ms: Option<u64>,
    #[schemars(
        description = "Mean confidence (0 to 1) of the script-to-subtitle matches that set the \
         time range; null when the scenario had no line to align.",
        range(min = 0, max = 1),
        required,
        schema_with = "nullable::<f64>"
    )]
    pub alignment_confidence: Option<f64>,
    #[schemars(
        description = "The alignment was unsure (few or weak matches, long gaps): check the time \
         range before using it."
    )]
    pub alignment_flagged: bool,
    #[schemars(description = "Dialogue lines of the source scenario.", range(min = 0))]
    pub turns: usize,
    #[schemars(description = "What the conversation is mainly for (Walton's dialogue types).")]
    pub dialogue_type: DialogueType,
    #[schemars(
        description = "high: every role competes; medium: some do; low: none does. Balanced \
         across the benchmark."
    )]
    pub conflict_intensity: ConflictIntensity,
    #[schemars(
        description = "What the characters know and where they are before the scenario starts."
    )]
    pub background: String,
    #[schemars(
        description = "The scenario description (as revised with the roles' beliefs, desires, \
         intentions and risks)."
    )]
    pub description: String,
    #[schemars(
        description = "The synthetic group image G; null when the image stages were not built.",
        required,
        schema_with = "nullable::<ImageRef>"
    )]
    pub group_image: Option<ImageRef>,
    #[schemars(
        description = "The scenario's roles, in order of their first line.",
        length(min = 1)
    )]
    pub roles: Vec<BenchmarkRole>,
    #[schemars(
        description = "The quality gates this scenario's answers still fail (empty: none); the \
         export holds a scenario with any only when `include_flagged = true` in \
         stages/export.toml."
    )]
    pub problems: Vec<FlaggedProblem>,
}

/// A problem of one of a scenario's flagged answers, with the stage that gave the answer.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "problem")]
pub struct FlaggedProblem {
    #[schemars(description = "The stage whose answer fails the gate.")]
    pub stage: String,
    #[schemars(description = "The participant at fault; null for the scene's own fields.")]
    #[schemars(required, schema_with = "nullable::<String>")]
    pub role: Option<String>,
    #[schemars(description = "The field at fault, where the problem names one.")]
    #[schemars(required, schema_with = "nullable::<String>")]
    pub field: Option<String>,
    #[schemars(
        description = "The problem without what is particular to this answer, for counting."
    )]
    pub kind: String,
    #[schemars(description = "The problem as the model was shown it.")]
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "role")]
pub struct BenchmarkRole {
    #[schemars(
        description = "The character's name as the script spells it.",
        length(min = 1)
    )]
    pub name: String,
    #[schemars(description = "As far as the dialogue tells.")]
    pub gender: Gender,
    #[schemars(description = "A range or rough age (`30s`), or `unknown`.")]
    pub age: String,
    #[schemars(description = "Or `unknown`.")]
    pub occupation: String,
    #[schemars(description = "A short profile of the character in this scenario.")]
    pub profile: String,
    #[schemars(description = "How the role lets its inner state show.")]
    pub expression_style: ExpressionStyle,
    #[schemars(
        description = "How the role handles the conflict (Thomas-Kilmann), after balancing: what \
         the role plays."
    )]
    pub conflict_characteristic: ConflictCharacteristic,
    #[schemars(
        description = "What the annotator read in the scene, before balancing moved it to meet \
         the benchmark's intensity quotas."
    )]
    pub natural_conflict_characteristic: ConflictCharacteristic,
    #[schemars(description = "BDI-Risk: what the role believes about the situation.")]
    pub belief: String,
    #[schemars(description = "BDI-Risk: what the role wants.")]
    pub desire: String,
    #[schemars(description = "BDI-Risk: what the role means to do.")]
    pub intention: String,
    #[schemars(description = "BDI-Risk: what the role risks if it fails.")]
    pub risk_if_failed: String,
    #[schemars(description = "Initial affect: the role's emotion as the scenario opens.")]
    pub emotion: Emotion,
    #[schemars(description = "Initial affect: facial expression.")]
    pub facial_expression: String,
    #[schemars(description = "Initial affect: body action.")]
    pub body_action: String,
    #[schemars(description = "Task: what the role must express.")]
    pub expression_task: String,
    #[schemars(description = "Task: how the role must act its conflict characteristic.")]
    pub characteristic_task: String,
    #[schemars(description = "Task: how the role must steer the interaction.")]
    pub interaction_regulation_task: String,
    #[schemars(
        description = "Task: the observable outcome the role must reach with another character."
    )]
    pub interaction_outcome_task: String,
    #[schemars(
        description = "Whether judging the interaction-outcome task needs vision: strongly (only \
         from a visible cue) or weakly (the words suffice)."
    )]
    pub vision_dependence: VisionDependenceClass,
    #[schemars(
        description = "The visible cues a strongly vision-dependent outcome turns on; empty when \
         weakly."
    )]
    pub visual_channels: Vec<VisualChannel>,
    #[schemars(description = "Why, in one sentence.")]
    pub vision_dependence_reason: String,
    #[schemars(
        description = "The role's synthetic portrait; null when the image stages were not built \
         or no face was matched to the role.",
        required,
        schema_with = "nullable::<ImageRef>"
    )]
    pub portrait: Option<ImageRef>,
    #[schemars(
        description = "Why there is no portrait, when the portraits were built but this role has \
         none.",
        required,
        schema_with = "nullable::<String>"
    )]
    pub portrait_missing_reason: Option<String>,
}

/// A synthetic image as the dataset ships it: where it lies in the dataset directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "image")]
pub struct ImageRef {
    #[schemars(
        description = "The PNG, relative to the dataset directory.",
        regex(pattern = r"^images/.+\.png$")
    )]
    pub path: String,
    #[schemars(
        description = "blake3 of the PNG's bytes (as in viss.lock).",
        with = "String",
        regex(pattern = r"^[0-9a-f]{64}$")
    )]
    pub blake3: ContentHash,
    #[schemars(description = "Pixels.", range(min = 1))]
    pub width: u32,
    #[schemars(description = "Pixels.", range(min = 1))]
    pub height: u32,
    #[schemars(
        description = "Always true: viss made the image; it is not a frame of the source.",
        schema_with = "always_true"
    )]
    pub synthetic: bool,
    #[schemars(
        description = "What made it: `local:<filter>/<version>`, or `ENDPOINT:MODEL` of an image \
         endpoint."
    )]
    pub backend: String,
}

/// The record's fields that no LLM step's answer fills, with the stage each comes from (the
/// LLM steps declare theirs in their descriptors, [`crate::stages::descriptor::Exported`]).
const SCENARIO_FIELDS_OF_STAGES: &[(&str, &str)] = &[
    ("id", "parse_script"),
    ("show", "ingest"),
    ("show_title", "ingest"),
    ("episode", "ingest"),
    ("episode_title", "ingest"),
    ("scene_heading", "parse_script"),
    ("script_file", "parse_script"),
    ("script_line_start", "parse_script"),
    ("script_line_end", "parse_script"),
    ("start_ms", "align"),
    ("end_ms", "align"),
    ("alignment_confidence", "align"),
    ("alignment_flagged", "align"),
    ("turns", "parse_script"),
    ("conflict_intensity", "balance"),
    ("group_image", "group_image"),
    ("problems", "export"),
    ("roles", "cast"),
];
const ROLE_FIELDS_OF_STAGES: &[(&str, &str)] = &[
    ("name", "parse_script"),
    ("conflict_characteristic", "balance"),
    ("portrait", "portraits"),
    ("portrait_missing_reason", "portraits"),
];

/// The stage each field of the benchmark record comes from: of the scenario, and of a role.
#[derive(Debug, Default, PartialEq)]
pub struct FieldSources {
    pub scenario: BTreeMap<&'static str, Vec<&'static str>>,
    pub role: BTreeMap<&'static str, Vec<&'static str>>,
}

/// Where each field of the benchmark record comes from, from the LLM steps' descriptors and the
/// other stages' fields above. A field is named by one stage; a second one is a mistake the
/// export's test reports.
pub fn field_sources() -> FieldSources {
    let mut sources = FieldSources::default();
    let mut add = |fields: &[&'static str], of_role: bool, stage: &'static str| {
        let map = if of_role {
            &mut sources.role
        } else {
            &mut sources.scenario
        };
        for field in fields {
            map.entry(*field).or_default().push(stage);
        }
    };
    for (field, stage) in SCENARIO_FIELDS_OF_STAGES {
        add(&[field], false, stage);
    }
    for (field, stage) in ROLE_FIELDS_OF_STAGES {
        add(&[field], true, stage);
    }
    for step in crate::stages::STEPS {
        if let crate::stages::descriptor::Exported::Fields { scenario, role } = step.exported {
            add(scenario, false, step.stage());
            add(role, true, step.stage());
        }
    }
    sources
}

/// A field that is always there and may be null: `T`'s schema or null.
fn nullable<T: schemars::JsonSchema>(
    generator: &mut schemars::SchemaGenerator,
) -> schemars::Schema {
    generator.subschema_for::<Option<T>>()
}

/// The schema of a field that is always `true`.
fn always_true(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "const": true })
}

/// The JSON schema every line of data.jsonl satisfies, derived from [`BenchmarkRecord`]:
/// draft 2020-12, every field required, nothing else allowed; integers carry their bounds
/// rather than Rust's formats.
pub fn record_schema() -> serde_json::Value {
    schema_of::<BenchmarkRecord>("benchmark-record")
}

/// The JSON schema of the dataset's rows of type `T` (as [`record_schema`]), `$id` named
/// after `name`.
pub fn schema_of<T: schemars::JsonSchema>(name: &str) -> serde_json::Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).expect("a schema serializes");
    drop_formats(&mut schema);
    // The types' own doc comments are for Rust readers; the dataset's readers get the fields'.
    if let Some(defs) = schema.get_mut("$defs").and_then(|d| d.as_object_mut()) {
        for def in defs.values_mut().filter_map(|d| d.as_object_mut()) {
            def.remove("description");
        }
    }
    let root = schema
        .as_object_mut()
        .expect("a record schema is an object");
    root.insert(
        "$id".into(),
        format!("https://viss.invalid/schemas/{name}.schema.json").into(),
    );
    schema
}

/// Removes schemars's `format` annotations (`uint64`, `double`): the bounds say what holds.
fn drop_formats(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.remove("format");
            map.values_mut().for_each(drop_formats);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_formats),
        _ => {}
    }
}

impl ImageRef {
    fn placed(image: &SyntheticImage, path: String) -> Self {
        Self {
            path,
            blake3: image.png,
            width: image.width,
            height: image.height,
            synthetic: image.synthetic,
            backend: image.backend.clone(),
        }
    }
}

/// Everything the stages made for one scenario, as the export stage read it.
#[derive(Debug, Clone)]
pub struct ScenarioSources {
    pub scenario: ScenarioRecord,
    /// `None` when `align` found no dialogue line of the scenario to align.
    pub span: Option<AlignedScenario>,
    pub annotation: StepRecord<Annotation>,
    pub description: StepRecord<Description>,
    pub profiles: ProfileRecord,
    pub bdi: StepRecord<BdiRisk>,
    pub tasks: StepRecord<Tasks>,
    pub affect: StepRecord<Affect>,
    pub vision: StepRecord<VisionDependence>,
    pub cast: Cast,
    /// `None` when the project's DAG has no image stages.
    pub group_image: Option<GroupImageRecord>,
    pub portraits: Option<PortraitsRecord>,
    /// The artifact hash of every record above, by the stage that made it: what the lock lists
    /// so that two builds can be compared record by record.
    pub inputs: BTreeMap<String, ContentHash>,
    /// What the answers behind the LLM steps' records cost, by stage.
    pub costs: BTreeMap<String, crate::dag::cost::AnswersCost>,
}

/// One LLM step's record behind a benchmark record: its stage, model and rejected answers.
pub type StepSource<'a> = (
    &'static str,
    &'a str,
    &'a [crate::annotation::check::Refusal],
);

impl ScenarioSources {
    /// The LLM steps' records behind the scenario's benchmark record, in pipeline order.
    pub fn steps(&self) -> [StepSource<'_>; 7] {
        let profiles = &self.profiles;
        [
            step("annotate", &self.annotation),
            step("describe", &self.description),
            ("profiles", &profiles.model, &profiles.rejected),
            step("bdi_risk", &self.bdi),
            step("tasks", &self.tasks),
            step("affect", &self.affect),
            step("vision_dependence", &self.vision),
        ]
    }
}

fn step<'a, T>(stage: &'static str, record: &'a StepRecord<T>) -> StepSource<'a> {
    (stage, &record.model, &record.rejected)
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RecordError {
    #[error(transparent)]
    Role(#[from] CastError),
    #[error(
        "{scenario}: the cast has {cast} roles but the scenario has {participants} \
         participants; rebuild `cast` (`viss build`)"
    )]
    CastOfOtherRoles {
        scenario: String,
        cast: usize,
        participants: usize,
    },
    #[error("{scenario}: stage `{stage}` made a record for {found}, not for this scenario")]
    WrongScenario {
        scenario: String,
        stage: &'static str,
        found: String,
    },
    #[error("{scenario}: no ingested episode {episode}; rebuild `ingest`")]
    NoEpisode { scenario: String, episode: String },
    #[error(
        "{scenario}: the group image is marked as not synthetic; viss only ships images it made"
    )]
    NotSynthetic { scenario: String },
}

/// One synthetic image's place in the dataset directory, to be copied there from the store.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PlacedImage {
    pub path: String,
    pub png: ContentHash,
}

/// Where a scenario's images go: `images/<scenario id>/`.
pub fn image_dir(scenario: &str) -> String {
    format!("images/{scenario}")
}

/// The file name of a role's portrait: the name with anything but ASCII letters, digits, `-`
/// and `_` replaced by `_` (names are spelled by scripts: "Mr. Heckles", "Zoë"). A name that
/// collides with an earlier role's gets its position appended, so every role has its own file.
pub fn portrait_file_names(roles: &[String]) -> Vec<String> {
    let mut used = std::collections::BTreeSet::new();
    roles
        .iter()
        .enumerate()
        .map(|(index, name)| {
            let mut stem: String = name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            // `G` is the group image's name in the same directory.
            if stem.is_empty()
                || stem.eq_ignore_ascii_case("G")
                || used.contains(&stem.to_ascii_lowercase())
            {
                stem = format!("{stem}-{}", index + 1);
            }
            used.insert(stem.to_ascii_lowercase());
            format!("{stem}.png")
        })
        .collect()
}

/// Confidence as the dataset gives it: three decimals are all an alignment score means.
fn rounded(confidence: f32) -> f64 {
    (f64::from(confidence) * 1000.0).round() / 1000.0
}

impl ScenarioSources {
    /// Each LLM step's record behind the scenario, by the step's stage.
    fn step_records(&self) -> [(&'static str, Provenance<'_>); 7] {
        use crate::stages::{
            affect, annotate, bdi_risk, describe, profiles, tasks, vision_dependence,
        };
        [
            (annotate::STEP.stage(), self.annotation.provenance()),
            (describe::STEP.stage(), self.description.provenance()),
            (profiles::STEP.stage(), self.profiles.provenance()),
            (bdi_risk::STEP.stage(), self.bdi.provenance()),
            (tasks::STEP.stage(), self.tasks.provenance()),
            (affect::STEP.stage(), self.affect.provenance()),
            (vision_dependence::STEP.stage(), self.vision.provenance()),
        ]
    }

    /// Every problem of the scenario's flagged answers, by the stage that gave the answer.
    pub fn problems(&self) -> Vec<FlaggedProblem> {
        self.step_records()
            .into_iter()
            .flat_map(|(stage, record)| {
                record.problems.iter().map(move |problem| FlaggedProblem {
                    stage: stage.to_string(),
                    role: problem.role.clone(),
                    field: problem.field.clone(),
                    kind: problem.kind.clone(),
                    message: problem.message.clone(),
                })
            })
            .collect()
    }

    /// What a person said of the scenario's answers, by the stage that gave the answer.
    pub fn reviews(&self) -> Vec<(&'static str, &crate::stages::llm_step::ReviewMark)> {
        self.step_records()
            .into_iter()
            .filter_map(|(stage, record)| record.review.map(|mark| (stage, mark)))
            .collect()
    }

    fn check_scenario(&self) -> Result<(), RecordError> {
        let id = &self.scenario.id;
        let made_for = self
            .step_records()
            .map(|(stage, record)| (stage, record.scenario))
            .into_iter()
            .chain([(crate::stages::cast::NAME, self.cast.scenario.as_str())]);
        let images = [
            self.group_image
                .as_ref()
                .map(|g| ("group_image", g.scenario.as_str())),
            self.portraits
                .as_ref()
                .map(|p| ("portraits", p.scenario.as_str())),
            self.span.as_ref().map(|s| ("align", s.scenario.as_str())),
        ];
        for (stage, found) in made_for.chain(images.into_iter().flatten()) {
            if found != id {
                return Err(RecordError::WrongScenario {
                    scenario: id.clone(),
                    stage,
                    found: found.to_string(),
                });
            }
        }
        Ok(())
    }

    /// The scenario's benchmark record and the images it ships, placed under
    /// `images/<scenario id>/` as `G.png` and one `<role>.png` per role with a portrait.
    /// The PNGs the scenario's record places (G and the portraits), by content hash.
    pub fn image_hashes(&self) -> Vec<ContentHash> {
        let group = self.group_image.iter().map(|record| record.image.png);
        let portraits = self
            .portraits
            .iter()
            .flat_map(|record| record.roles.iter().filter_map(|r| r.image.as_ref()))
            .map(|image| image.png);
        group.chain(portraits).collect()
    }

    pub fn assemble(
        &self,
        episodes: &BTreeMap<String, EpisodeSource>,
    ) -> Result<(BenchmarkRecord, Vec<PlacedImage>), RecordError> {
        self.check_scenario()?;
        let scenario = &self.scenario;
        let id = scenario.id.as_str();
        let episode = episodes
            .get(&scenario.episode)
            .ok_or_else(|| RecordError::NoEpisode {
                scenario: id.to_string(),
                episode: scenario.episode.clone(),
            })?;
        let dir = image_dir(id);
        let mut placed = Vec::new();
        let group_image = match &self.group_image {
            Some(record) if !record.image.synthetic => {
                return Err(RecordError::NotSynthetic {
                    scenario: id.to_string(),
                });
            }
            Some(record) => {
                let path = format!("{dir}/G.png");
                placed.push(PlacedImage {
                    path: path.clone(),
                    png: record.image.png,
                });
                Some(ImageRef::placed(&record.image, path))
            }
            None => None,
        };
        let cast = &self.cast;
        if cast.roles.len() != scenario.unit.participants.len() {
            return Err(RecordError::CastOfOtherRoles {
                scenario: id.to_string(),
                cast: cast.roles.len(),
                participants: scenario.unit.participants.len(),
            });
        }
        let names: Vec<String> = cast.roles.iter().map(|sheet| sheet.name.clone()).collect();
        let file_names = portrait_file_names(&names);
        let mut roles = Vec::with_capacity(names.len());
        for (sheet, file_name) in cast.roles.iter().zip(file_names) {
            let role = sheet.id;
            let bdi = cast.entry(&self.bdi.answer.roles, role, "bdi_risk")?;
            let tasks = cast.entry(&self.tasks.answer.roles, role, "tasks")?;
            let affect = cast.entry(&self.affect.answer.roles, role, "affect")?;
            let vision = cast.entry(&self.vision.answer.roles, role, "vision_dependence")?;
            let (portrait, portrait_missing_reason) = match &self.portraits {
                None => (None, None),
                Some(record) => {
                    let entry = cast.entry(&record.roles, role, "portraits")?;
                    match &entry.image {
                        Some(image) if !image.synthetic => {
                            return Err(RecordError::NotSynthetic {
                                scenario: id.to_string(),
                            });
                        }
                        Some(image) => {
                            let path = format!("{dir}/{file_name}");
                            placed.push(PlacedImage {
                                path: path.clone(),
                                png: image.png,
                            });
                            (Some(ImageRef::placed(image, path)), None)
                        }
                        None => (None, entry.missing_reason.clone()),
                    }
                }
            };
            roles.push(BenchmarkRole {
                name: sheet.name.clone(),
                gender: sheet.gender,
                age: sheet.age.clone(),
                occupation: sheet.occupation.clone(),
                profile: sheet.profile.clone(),
                expression_style: sheet.expression_style,
                conflict_characteristic: sheet.conflict_characteristic,
                natural_conflict_characteristic: sheet.natural_conflict_characteristic,
                belief: bdi.belief.clone(),
                desire: bdi.desire.clone(),
                intention: bdi.intention.clone(),
                risk_if_failed: bdi.risk_if_failed.clone(),
                emotion: affect.emotion,
                facial_expression: affect.facial_expression.clone(),
                body_action: affect.body_action.clone(),
                expression_task: tasks.expression_task.clone(),
                characteristic_task: tasks.characteristic_task.clone(),
                interaction_regulation_task: tasks.interaction_regulation_task.clone(),
                interaction_outcome_task: tasks.interaction_outcome_task.clone(),
                vision_dependence: vision.dependence,
                visual_channels: vision.channels.clone(),
                vision_dependence_reason: vision.reason.clone(),
                portrait,
                portrait_missing_reason,
            });
        }
        let span = self.span.as_ref().map(|s| &s.span);
        let record = BenchmarkRecord {
            id: id.to_string(),
            show: scenario.show.clone(),
            show_title: episode.show_title.clone(),
            episode: scenario.episode.clone(),
            episode_title: episode.title.clone(),
            scene_heading: scenario.unit.scene_heading.clone(),
            script_file: scenario.script_file.clone(),
            script_line_start: scenario.unit.source_line_start,
            script_line_end: scenario.unit.source_line_end,
            start_ms: span.and_then(|s| s.start_ms),
            end_ms: span.and_then(|s| s.end_ms),
            alignment_confidence: span.map(|s| rounded(s.confidence)),
            alignment_flagged: span.is_none_or(|s| s.flagged),
            turns: scenario.unit.dialogue_line_count,
            dialogue_type: self.annotation.answer.dialogue_type,
            conflict_intensity: self.profiles.profiles.conflict_intensity,
            background: self.description.answer.background.clone(),
            description: self.bdi.answer.revised_description.clone(),
            group_image,
            roles,
            problems: self.problems(),
        };
        Ok((record, placed))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::text::scenario::ScenarioUnit;
    use crate::vision::synthetic::RolePortrait;

    fn step<T: serde::de::DeserializeOwned>(answer: serde_json::Value) -> StepRecord<T> {
        StepRecord {
            scenario: "van/e1/sc001".into(),
            model: "mock:m".into(),
            answer: serde_json::from_value(answer).unwrap(),
            rejected: Vec::new(),
            problems: Vec::new(),
            flagged_upstream: Vec::new(),
            review: None,
        }
    }

    fn image(seed: &str) -> SyntheticImage {
        SyntheticImage {
            png: ContentHash::of(seed.as_bytes()),
            width: 64,
            height: 48,
            synthetic: true,
            backend: "local:test/1".into(),
        }
    }

    /// One scenario of Ada and Mr. Heckles, every stage's record filled in.
    fn sources() -> ScenarioSources {
        let names = ["Ada", "Mr. Heckles"];
        let roles = |make: &dyn Fn(&str) -> serde_json::Value| {
            serde_json::Value::Array(names.iter().map(|n| make(n)).collect())
        };
        let profiles = json!({
            "scenario": "van/e1/sc001", "model": "mock:m", "natural_intensity": "high",
            "explanation": "kept",
            "profiles": {"conflict_intensity": "high", "roles": roles(&|n| json!({
                "name": n, "profile": format!("{n} lives upstairs."),
                "expression_style": "deception", "conflict_characteristic": "competing",
                "natural_conflict_characteristic": "avoiding"}))}
        });
        let scenario = ScenarioRecord {
            id: "van/e1/sc001".into(),
            episode: "van/e1".into(),
            show: "van".into(),
            script_file: "van/e1.txt".into(),
            unit: ScenarioUnit {
                id: "sc001".into(),
                scene_index: 0,
                scene_heading: Some("The stairs".into()),
                participants: names.map(String::from).to_vec(),
                dialogue_line_count: 11,
                source_line_start: 2,
                source_line_end: 14,
                lines: Vec::new(),
            },
        };
        let annotation: StepRecord<Annotation> = step(
            json!({"dialogue_type": "eristic", "roles": roles(&|n| json!({
                "name": n, "gender": "male", "age": "60s", "occupation": "unknown"
            }))}),
        );
        let profiles: ProfileRecord = serde_json::from_value(profiles).unwrap();
        let cast = crate::stages::cast::cast_of(
            &scenario.context(),
            &annotation.answer,
            &profiles.profiles,
        )
        .unwrap();
        ScenarioSources {
            scenario,
            span: None,
            annotation,
            description: step(
                json!({"background": "Neighbours.", "description": "A noise complaint."}),
            ),
            profiles,
            bdi: step(json!({
                "revised_description": "A noise complaint, revised.",
                "roles": roles(&|n| json!({
                    "name": n, "belief": "b", "desire": "d", "intention": "i",
                    "risk_if_failed": "r"
                })),
            })),
            tasks: step(json!({"roles": roles(&|n| json!({
                "name": n, "expression_task": format!("{n} e."), "characteristic_task": "c.",
                "interaction_regulation_task": "r.", "interaction_outcome_task": "o."
            }))})),
            affect: step(json!({"roles": roles(&|n| json!({
                "name": n, "emotion": "anger", "facial_expression": "f", "body_action": "a"
            }))})),
            vision: step(json!({"roles": roles(&|n| json!({
                "name": n, "dependence": "weakly", "channels": [], "reason": "words"
            }))})),
            cast,
            group_image: Some(GroupImageRecord {
                scenario: "van/e1/sc001".into(),
                image: image("G"),
                source_frame_seconds: 3.5,
            }),
            portraits: Some(PortraitsRecord {
                scenario: "van/e1/sc001".into(),
                roles: vec![
                    RolePortrait {
                        name: "Ada".into(),
                        image: Some(image("ada")),
                        missing_reason: None,
                    },
                    RolePortrait {
                        name: "Mr. Heckles".into(),
                        image: None,
                        missing_reason: Some("no face matched".into()),
                    },
                ],
            }),
            inputs: BTreeMap::new(),
            costs: BTreeMap::new(),
        }
    }

    fn episodes() -> BTreeMap<String, EpisodeSource> {
        let episode: EpisodeSource = serde_json::from_value(json!({
            "show": "van", "episode": "e1", "show_title": "The Van", "title": "Fuel",
            "license": "test", "manifest": "manifests/shows/van.toml",
            "script_format": null, "subtitles_format": null, "files": {}, "characters": [],
            "places": []
        }))
        .unwrap();
        [("van/e1".to_string(), episode)].into()
    }

    #[test]
    fn images_are_placed_under_the_scenario_and_joined_to_their_roles() {
        let (record, placed) = sources().assemble(&episodes()).unwrap();
        assert_eq!(record.description, "A noise complaint, revised.");
        assert_eq!(
            (
                record.show_title.as_deref(),
                record.episode_title.as_deref()
            ),
            (Some("The Van"), Some("Fuel"))
        );
        assert_eq!(
            (
                record.start_ms,
                record.alignment_confidence,
                record.alignment_flagged
            ),
            (None, None, true)
        );
        let group = record.group_image.as_ref().unwrap();
        assert_eq!(
            (
                group.path.as_str(),
                group.blake3,
                group.width,
                group.synthetic
            ),
            ("images/van/e1/sc001/G.png", ContentHash::of(b"G"), 64, true)
        );
        let ada = &record.roles[0];
        assert_eq!(
            ada.portrait.as_ref().unwrap().path,
            "images/van/e1/sc001/Ada.png"
        );
        let heckles = &record.roles[1];
        assert_eq!(
            (
                heckles.portrait.as_ref(),
                heckles.portrait_missing_reason.as_deref()
            ),
            (None, Some("no face matched"))
        );
        assert_eq!(heckles.expression_style, ExpressionStyle::Deception);
        assert_eq!(
            placed,
            vec![
                PlacedImage {
                    path: "images/van/e1/sc001/G.png".into(),
                    png: ContentHash::of(b"G")
                },
                PlacedImage {
                    path: "images/van/e1/sc001/Ada.png".into(),
                    png: ContentHash::of(b"ada")
                },
            ]
        );

        // Without the image stages: no images, no reasons.
        let mut bare = sources();
        bare.group_image = None;
        bare.portraits = None;
        let (record, placed) = bare.assemble(&episodes()).unwrap();
        assert!(placed.is_empty() && record.group_image.is_none());
        assert!(
            record
                .roles
                .iter()
                .all(|r| r.portrait.is_none() && r.portrait_missing_reason.is_none())
        );
    }

    #[test]
    fn a_role_missing_from_a_stage_or_a_record_of_another_scenario_is_an_error_naming_it() {
        let mut missing = sources();
        missing.tasks.answer.roles.remove(1);
        assert_eq!(
            missing.assemble(&episodes()).unwrap_err(),
            RecordError::Role(CastError::OtherRoles {
                scenario: "van/e1/sc001".into(),
                stage: "tasks",
                entries: 1,
                roles: 2,
            })
        );
        let mut other = sources();
        other.affect.scenario = "van/e1/sc002".into();
        let error = other.assemble(&episodes()).unwrap_err().to_string();
        assert!(
            error.contains("`affect` made a record for van/e1/sc002"),
            "{error}"
        );
    }

    /// A role is its place in the scenario: a cast that shows the roles under other names (as
    /// an anonymised or re-cast scenario does) still gets each role its own answers.
    #[test]
    fn roles_are_joined_by_id_not_by_the_name_they_are_shown_as() {
        let mut renamed = sources();
        renamed.cast.roles[0].name = "Slot A".into();
        renamed.cast.roles[1].name = "Slot B".into();
        let (record, _) = renamed.assemble(&episodes()).unwrap();
        let names: Vec<&str> = record.roles.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["Slot A", "Slot B"]);
        assert_eq!(record.roles[0].expression_task, "Ada e.");
        assert_eq!(record.roles[1].expression_task, "Mr. Heckles e.");
        assert!(record.roles[0].portrait.is_some());
        assert_eq!(
            record.roles[1].portrait_missing_reason.as_deref(),
            Some("no face matched")
        );
    }

    /// `benchmark-record.schema.json` beside this file is the derived schema, for people and
    /// tools that read the dataset without viss; `VISS_BLESS=1 cargo test --lib
    /// record_schema` rewrites it after a change to the record's types.
    #[test]
    fn the_checked_in_record_schema_is_the_derived_one() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/stages/export/benchmark-record.schema.json");
        let derived = record_schema();
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        if written != derived && std::env::var_os("VISS_BLESS").is_some_and(|v| v == "1") {
            let text = serde_json::to_string_pretty(&derived).unwrap() + "\n";
            std::fs::write(&path, text).unwrap();
            return;
        }
        assert_eq!(
            written,
            derived,
            "{} is not the derived schema; VISS_BLESS=1 cargo test --lib record_schema rewrites it",
            path.display()
        );
    }

    #[test]
    fn every_field_of_the_record_comes_from_exactly_one_named_stage() {
        let schema = record_schema();
        let required = |object: &serde_json::Value| -> Vec<String> {
            object["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap().to_string())
                .collect()
        };
        let sources = field_sources();
        let stages: std::collections::BTreeSet<&str> = crate::stages::BUILTIN
            .iter()
            .map(|kind| kind.name)
            .collect();
        for (object, claimed) in [
            (&schema, &sources.scenario),
            (&schema["$defs"]["role"], &sources.role),
        ] {
            let mut fields = required(object);
            fields.sort();
            let named: Vec<String> = claimed.keys().map(|f| f.to_string()).collect();
            assert_eq!(
                named, fields,
                "fields named by the stages vs. the record's schema"
            );
            for (field, by) in claimed {
                assert_eq!(by.len(), 1, "`{field}` is named by {by:?}");
                assert!(stages.contains(by[0]), "`{field}`: no stage {}", by[0]);
            }
        }
    }

    #[test]
    fn portrait_file_names_are_safe_and_distinct() {
        let names: Vec<String> = ["Ada", "Mr. Heckles", "Mr_ Heckles", "G", "Zoë", "ada"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            portrait_file_names(&names),
            [
                "Ada.png",
                "Mr__Heckles.png",
                "Mr__Heckles-3.png",
                "G-4.png",
                "Zo_.png",
                "ada-6.png"
            ]
        );
    }
}

//! `align`: every transcript line of an episode is matched to the subtitle cues that carry it,
//! and so to video time, by one monotone dynamic program over the whole episode that allows the
//! ways broadcast subtitles differ from fan transcripts (lines split over cues, lines merged into
//! one cue, transcript lines cut, subtitle-only cues). Pairs are scored by
//! `alpha * semantic + (1 - alpha) * lexical`: cosine similarity of sentence embeddings over a
//! window of dialogue (AgentViSS used BGE-M3 with alpha = 0.8) and BM25 over the lines. Each
//! scenario unit gets the time range of its matched lines and a confidence; units that are
//! unmatched, sparse or unsure are flagged for a person, never silently guessed. Each scenario
//! also gets its lines with their speakers and times (`lines@<scenario>`), so a later stage can
//! look at the screen while a character speaks.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{Env, JobCtx, JobError, Level, Outputs, Stage, StageFailure};
use crate::hash::ContentHash;
use crate::models::{ModelCache, ModelError, TextEmbedderFiles};
use crate::stages::parse_script::{self, ScenarioRecord};
use crate::stages::parse_subtitles::{CUES, CueTrack};
use crate::text::align::{
    AlignCue, AlignError, AlignParams, Alignment, ScenarioSpan, ScriptDialogue, align_lines,
    char_prefix, cue_contexts, line_contexts, script_dialogue, unit_line_ranges, unit_spans,
};
use crate::text::embed::{
    self as embed, EmbedError, EmbeddingCache, SentenceEmbedder, SentenceEmbedderOptions,
    embed_cached,
};
use crate::text::scenario::ScenarioUnit;

/// Where each scenario is in the video, with the matched cues' text, per scenario.
pub const SPAN: Port<AlignedScenario> = Port::child(NAME, "span");
/// The part of a scenario's place in the video that the video stages depend on, per scenario.
pub const TIME_RANGE: Port<ScenarioTimeRange> = Port::child(NAME, "time_range");
/// Each scenario's lines with their speakers and times, per scenario.
pub const LINES: Port<ScenarioLines> = Port::child(NAME, "lines");
/// The whole episode's line-level alignment, for episode-level consumers and inspection.
pub const ALIGNMENT: Port<EpisodeAlignment> = Port::private(NAME, "alignment");

const NAME: &str = "align";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "transcript lines -> subtitle cues -> scenario time ranges",
    // 2: each scenario also gets `time_range@<scenario>` (for frames) and `lines@<scenario>`
    // (its lines with speakers and times, for match_roles). 3: `alignment@` no longer says how
    // many texts the run embedded (a run statistic now, shown by `viss status` and `viss show`).
    // 4: a line's run of cues is trimmed of end cues that score below
    // `continuation_min_score`; spans with long unmatched stretches or an early start are
    // flagged.
    version: 4,
    prompts: &[],
    defaults: Defaults::of::<AlignStageParams>(),
    load: load_stage::<AlignStageParams, Align>,
};

/// align: each transcript line -> the subtitle cues that carry it -> video time; each scenario
/// unit -> a time range with a confidence. One monotone dynamic program over the whole episode.
/// Scores fuse semantic similarity of sentence embeddings over a window of dialogue (the model
/// is [models.text_embedder] in viss.toml) with BM25 over the lines: alpha * semantic + (1 -
/// alpha) * lexical, each min-max normalised per line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct AlignStageParams(pub AlignParams);

impl crate::range::Validate for AlignStageParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        crate::range::Validate::validate(&self.0)
    }
}

impl From<AlignStageParams> for Align {
    fn from(params: AlignStageParams) -> Self {
        Self::from(params.0)
    }
}

pub struct Align {
    params: AlignParams,
    /// The embedder's files and identity, found when the build starts (see `models`) without
    /// loading the model, so a build with nothing to align does not pay for it.
    embedder_files: OnceLock<(TextEmbedderFiles, SentenceEmbedderOptions, String)>,
    /// Loaded by the first episode that aligns, shared by the rest.
    embedder: Mutex<Option<Arc<dyn SentenceEmbedder>>>,
}

impl From<AlignParams> for Align {
    fn from(params: AlignParams) -> Self {
        Self {
            params,
            embedder_files: OnceLock::new(),
            embedder: Mutex::new(None),
        }
    }
}

/// The whole episode's line-level alignment (for episode-level consumers and inspection).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EpisodeAlignment {
    pub episode: String,
    /// `None` when alpha is 0 (lexical only).
    pub embedder: Option<String>,
    pub alignment: Alignment,
}

/// Where one scenario is in the video: what `frames` decodes.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AlignedScenario {
    pub scenario: String,
    pub episode: String,
    pub span: ScenarioSpan,
    /// The matched cues' text, in order, for a person checking the range.
    pub cue_texts: Vec<String>,
}

/// The part of a scenario's alignment that the video stages depend on. Unlike
/// [`AlignedScenario`] (line numbers, a confidence from episode-wide BM25 statistics) it changes
/// only when the scenario's own place in the video does, so a scene added elsewhere in the
/// episode does not make the other scenarios decode their video again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScenarioTimeRange {
    pub scenario: String,
    pub episode: String,
    pub start_ms: Option<u64>,
    pub end_ms: Option<u64>,
    /// Why align found no range, when it found none.
    pub missing_reason: Option<String>,
}

impl ScenarioTimeRange {
    fn of(aligned: &AlignedScenario) -> Self {
        let span = &aligned.span;
        let found = span.start_ms.is_some() && span.end_ms.is_some();
        Self {
            scenario: aligned.scenario.clone(),
            episode: aligned.episode.clone(),
            start_ms: span.start_ms,
            end_ms: span.end_ms,
            missing_reason: if found { None } else { span.reason.clone() },
        }
    }
}

/// When each of one scenario's dialogue lines is spoken and by whom: what `match_roles` samples
/// to see who is on screen while a character speaks (its reference bootstrap). Like
/// [`ScenarioTimeRange`] it holds nothing that depends on the rest of the episode (no line
/// numbers, no confidences), so a scene added elsewhere does not re-run its readers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScenarioLines {
    pub scenario: String,
    /// The scenario's dialogue lines in script order.
    pub lines: Vec<TimedLine>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimedLine {
    /// Everyone the script says speaks it (`Noor and Mila` both).
    pub speakers: Vec<String>,
    /// Start of its first and end of its last cue; `None` when the line was not found in the
    /// subtitles.
    pub start_ms: Option<u64>,
    pub end_ms: Option<u64>,
}

/// The timed lines of `unit` (dialogue positions `range`) from the episode's alignment.
fn timed_lines(
    alignment: &Alignment,
    dialogue: &ScriptDialogue,
    unit: &ScenarioUnit,
    range: (usize, usize),
) -> Vec<TimedLine> {
    let speakers_at: BTreeMap<usize, &[String]> = unit
        .lines
        .iter()
        .filter_map(|line| Some((line.source_line_start, line.dialogue()?.speakers.as_slice())))
        .collect();
    alignment
        .lines
        .iter()
        .filter(|matched| (range.0..=range.1).contains(&matched.line))
        .map(|matched| TimedLine {
            speakers: dialogue
                .source_line_of_line
                .get(matched.line)
                .and_then(|source| speakers_at.get(source))
                .map_or_else(Vec::new, |speakers| speakers.to_vec()),
            start_ms: matched.start_ms,
            end_ms: matched.end_ms,
        })
        .collect()
}

/// The cues to align, and every line and cue text cut to `max_chars` characters (see
/// [`AlignParams::max_text_chars`]), with a description of each text that was cut.
fn capped_texts(
    dialogue: &mut ScriptDialogue,
    track: &CueTrack,
    max_chars: usize,
) -> (Vec<AlignCue>, Vec<String>) {
    let mut cut = Vec::new();
    for (line, source_line) in dialogue.lines.iter_mut().zip(&dialogue.source_line_of_line) {
        if let Some((prefix, chars)) = char_prefix(&line.text, max_chars) {
            line.text = prefix.to_string();
            cut.push(format!("script line {source_line} ({chars} characters)"));
        }
    }
    let cues = track
        .cues
        .iter()
        .map(|c| {
            let text = match char_prefix(&c.text, max_chars) {
                Some((prefix, chars)) => {
                    let at = c.start_ms as f64 / 1000.0;
                    cut.push(format!(
                        "the subtitle cue at {at:.3} s ({chars} characters)"
                    ));
                    prefix.to_string()
                }
                None => c.text.clone(),
            };
            AlignCue {
                index: c.index,
                start_ms: c.start_ms,
                end_ms: c.end_ms,
                text,
            }
        })
        .collect();
    (cues, cut)
}

/// The flag of an episode whose texts were cut: how many, and the first few.
fn cut_texts_flag(cut: &[String], max_chars: usize) -> String {
    const LISTED: usize = 5;
    let mut listed = cut
        .iter()
        .take(LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if cut.len() > LISTED {
        listed.push_str(&format!(" and {} more", cut.len() - LISTED));
    }
    format!(
        "{} text(s) longer than max_text_chars = {max_chars} were cut to their first {max_chars} \
         characters before scoring: {listed}; check the script and subtitle files (or raise \
         max_text_chars in stages/align.toml)",
        cut.len()
    )
}

#[derive(Debug, thiserror::Error)]
pub enum AlignStageError {
    #[error(transparent)]
    Align(#[from] AlignError),
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Job(#[from] JobError),
    #[error(
        "the sentence embedder's files were not found before the build ran; this is a bug in viss"
    )]
    EmbedderNotPrepared,
}

/// Embeddings memoised in the artifact store, so no text is embedded twice across builds. What
/// it counts goes into the run's statistics, never into a record: the record is the same
/// whether its embeddings were computed now or read back.
struct StoreEmbeddingCache<'a> {
    store: &'a Store,
    stored: std::sync::atomic::AtomicUsize,
    found: std::sync::atomic::AtomicUsize,
}

impl<'a> StoreEmbeddingCache<'a> {
    fn new(store: &'a Store) -> Self {
        Self {
            store,
            stored: Default::default(),
            found: Default::default(),
        }
    }
}

impl EmbeddingCache for StoreEmbeddingCache<'_> {
    fn get(&self, key: &ContentHash) -> Option<Vec<f32>> {
        let bytes = self.store.memo_get(key).ok().flatten()?;
        self.found
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }

    fn put(&self, key: &ContentHash, vector: &[f32]) {
        let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.stored
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Err(error) = self.store.memo_put(key, &bytes) {
            tracing::warn!("could not memoise an embedding: {error}");
        }
    }
}

impl Align {
    /// The sentence embedder, loaded on first use; `None` when alpha is 0 (lexical only).
    fn embedder(&self) -> Result<Option<Arc<dyn SentenceEmbedder>>, AlignStageError> {
        if self.params.alpha <= 0.0 {
            return Ok(None);
        }
        let (files, options, identity) = self
            .embedder_files
            .get()
            .ok_or(AlignStageError::EmbedderNotPrepared)?;
        let mut loaded = self
            .embedder
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if loaded.is_none() {
            let started = std::time::Instant::now();
            *loaded = Some(embed::load(files, options.clone(), Some(identity.clone()))?);
            tracing::info!(
                "loaded the text embedder {} in {:.1} s",
                files.model_onnx.display(),
                started.elapsed().as_secs_f64()
            );
        }
        Ok(loaded.clone())
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Align {
    fn level(&self) -> Level {
        Level::Episode
    }

    /// The scenario contexts are not used, but have always been in align's cache key: kept, so
    /// an upgrade does not re-align every episode.
    fn inputs(&self) -> Vec<PortId> {
        [
            parse_script::SCENARIO.id(),
            parse_script::CONTEXT.id(),
            parse_script::SCRIPT.id(),
            CUES.id(),
        ]
        .into()
    }

    fn outputs(&self) -> Vec<PortId> {
        [SPAN.id(), TIME_RANGE.id(), LINES.id(), ALIGNMENT.id()].into()
    }

    fn models(
        &self,
        Env { project, .. }: &Env,
        _store: &Store,
    ) -> Result<BTreeMap<String, String>, StageFailure> {
        if self.params.alpha <= 0.0 {
            return Ok(BTreeMap::new());
        }
        let config = &project.config.models.text_embedder;
        if self.embedder_files.get().is_none() {
            let mut files = config.files.clone();
            for path in [
                &mut files.model_onnx,
                &mut files.tokenizer_json,
                &mut files.onnx_runtime_library,
            ]
            .into_iter()
            .flatten()
            {
                *path = project.root.join(&*path);
            }
            let files = files.resolve(&ModelCache::from_env()?)?;
            let identity =
                embed::identity_of(&files, &config.options).map_err(AlignStageError::from)?;
            let _ = self
                .embedder_files
                .set((files, config.options.clone(), identity));
        }
        let (_, _, identity) = self.embedder_files.get().expect("set above");
        Ok([("text_embedder".to_string(), identity.clone())].into())
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let parsed = ctx.read(&parse_script::SCRIPT)?;
        // parse_subtitles flagged an episode without subtitles; its scenarios get no time range,
        // and the video stages skip them.
        let Some(track) = ctx.read_optional(&CUES)? else {
            return Ok(Outputs::default());
        };
        let mut units = Vec::with_capacity(parsed.scenarios.len());
        for id in &parsed.scenarios {
            let record: ScenarioRecord = ctx.read_child(&parse_script::SCENARIO, id)?;
            units.push(record);
        }
        let embedder = self.embedder()?;
        let identity = embedder.as_ref().map(|embedder| embedder.identity());
        let params = self.params.clone();
        let resources = ctx.resources().clone();
        let unit_list: Vec<_> = units.iter().map(|r| r.unit.clone()).collect();
        let (alignment, spans, unit_lines, cues, (embedded, from_memo), cut) = ctx
            .cpu(move || -> Result<_, AlignStageError> {
                let mut dialogue = script_dialogue(&parsed.script);
                let (cues, cut) = capped_texts(&mut dialogue, &track, params.max_text_chars);
                let cache = StoreEmbeddingCache::new(&resources.store);
                let embeddings = match &embedder {
                    Some(embedder) => {
                        let line_texts = line_contexts(&dialogue.lines, params.window);
                        let cue_texts = cue_contexts(&cues, params.window);
                        let line_vecs = embed_cached(embedder.as_ref(), &cache, &line_texts)?;
                        let cue_vecs = embed_cached(embedder.as_ref(), &cache, &cue_texts)?;
                        Some((line_vecs, cue_vecs))
                    }
                    None => None,
                };
                let alignment = align_lines(
                    &dialogue.lines,
                    &cues,
                    embeddings
                        .as_ref()
                        .map(|(l, c)| (l.as_slice(), c.as_slice())),
                    &params,
                )?;
                let ranges = unit_line_ranges(&dialogue, &unit_list);
                let spans = unit_spans(&alignment, &cues, &ranges, &params);
                let unit_lines: Vec<Vec<TimedLine>> = ranges
                    .iter()
                    .zip(&unit_list)
                    .map(|(range, unit)| {
                        range.map_or_else(Vec::new, |r| timed_lines(&alignment, &dialogue, unit, r))
                    })
                    .collect();
                let counts = (cache.stored.into_inner(), cache.found.into_inner());
                Ok((alignment, spans, unit_lines, cues, counts, cut))
            })
            .await?;

        let mut outputs = Outputs::default();
        if !cut.is_empty() {
            outputs
                .flags
                .push(cut_texts_flag(&cut, self.params.max_text_chars));
        }
        for ((record, span), lines) in units.iter().zip(spans).zip(unit_lines) {
            let Some(span) = span else {
                outputs
                    .flags
                    .push(format!("{}: has no dialogue line to align", record.id));
                continue;
            };
            if let Some(reason) = span.reason.as_ref().filter(|_| span.flagged) {
                outputs.flags.push(format!("{}: {reason}", record.unit.id));
            }
            let cue_texts = span
                .cue_indices
                .iter()
                .filter_map(|i| cues.iter().find(|c| c.index == *i).map(|c| c.text.clone()))
                .collect();
            let aligned = AlignedScenario {
                scenario: record.id.clone(),
                episode: ctx.item.clone(),
                span,
                cue_texts,
            };
            let range = ScenarioTimeRange::of(&aligned);
            let lines = ScenarioLines {
                scenario: record.id.clone(),
                lines,
            };
            outputs.put_child(ctx, &SPAN, &record.id, &aligned)?;
            outputs.put_child(ctx, &TIME_RANGE, &record.id, &range)?;
            outputs.put_child(ctx, &LINES, &record.id, &lines)?;
        }
        if identity.is_some() {
            ctx.count("texts_embedded", embedded as u64);
            ctx.count("embeddings_from_memo", from_memo as u64);
        }
        let episode = EpisodeAlignment {
            episode: ctx.item.clone(),
            embedder: identity,
            alignment,
        };
        outputs.put(ctx, &ALIGNMENT, &episode)?;
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Stands in for the ONNX model: a vector from the text's hash, counting what it embeds.
    struct CountingEmbedder(AtomicUsize);

    impl SentenceEmbedder for CountingEmbedder {
        fn identity(&self) -> String {
            "counting".to_string()
        }
        fn dim(&self) -> usize {
            4
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.0.fetch_add(texts.len(), Ordering::Relaxed);
            let vector = |text: &str| {
                ContentHash::of(text.as_bytes()).as_bytes()[..4]
                    .iter()
                    .map(|&b| b as f32)
                    .collect()
            };
            Ok(texts.iter().map(|text| vector(text)).collect())
        }
    }

    /// Issue 16: embeddings were memoised in the index, so a damaged index lost them all. They
    /// are files now: after the index is cut and repaired, nothing is embedded again.
    #[test]
    fn embeddings_survive_a_damaged_index_and_its_repair() {
        let temp = tempfile::tempdir().unwrap();
        let artifacts = temp.path().join("artifacts");
        let texts: Vec<String> = (0..50).map(|i| format!("line {i}")).collect();
        let embedder = CountingEmbedder(AtomicUsize::new(0));
        let first = {
            let store = Store::open(&artifacts).unwrap();
            let cache = StoreEmbeddingCache::new(&store);
            let vectors = embed_cached(&embedder, &cache, &texts).unwrap();
            assert_eq!(cache.stored.into_inner(), 50);
            store.index().flush().unwrap();
            vectors
        };
        let db = artifacts.join(format!("v{}/index/db", crate::dag::store::LAYOUT_VERSION));
        let used = std::fs::read(&db)
            .unwrap()
            .iter()
            .rposition(|&b| b != 0)
            .unwrap()
            + 1;
        let file = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
        file.set_len(used as u64 / 2).unwrap();
        assert!(Store::open(&artifacts).is_err(), "the damage is found");

        let (store, repair) = Store::open_repairing(&artifacts).unwrap();
        assert!(repair.is_some());
        let cache = StoreEmbeddingCache::new(&store);
        let again = embed_cached(&embedder, &cache, &texts).unwrap();
        assert_eq!(
            embedder.0.load(Ordering::Relaxed),
            50,
            "nothing was embedded again"
        );
        assert_eq!(again, first);
    }
}

//! `viss bench align`: the aligner against the Python reference
//! (`crates/dev/src/bench/reference/align_reference.py`: rank_bm25 + onnxruntime + numpy, the same
//! model, fusion and dynamic program) on one episode-sized input: the original test episode (about
//! 400 dialogue lines) with broadcast subtitles derived from it, whose true line-to-cue mapping is
//! known. Reports accuracy for both and the time ratio. Model loading is excluded on both sides;
//! embedding starts from an empty cache on both sides.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde::Serialize;

use crate::broadcast::{BroadcastParams, GroundTruth, derive_broadcast_subtitles};
use viss_models::{ModelCache, ModelError};
use viss_text::align::{
    AlignCue, AlignParams, Alignment, BoundaryErrors, LineAccuracy, ScenarioSpan, ScriptDialogue,
    align_lines, boundary_errors, cue_contexts, line_accuracy, line_contexts, scenario_spans,
    script_dialogue, truth_alignment, unit_line_ranges,
};
use viss_text::embed::{self, MemoryEmbeddingCache, SentenceEmbedderOptions, embed_cached};
use viss_text::scenario::{ScenarioParams, build_scenarios};
use viss_text::script::{ParseOptions, Script, parse_script};

/// The benchmark episode: the fixture transcript of about 400 dialogue lines.
pub const EPISODE: &str = include_str!("../../../../tests/fixtures/align/episode.txt");

#[derive(Debug, thiserror::Error)]
pub enum AlignBenchError {
    #[error("the benchmark episode does not parse: {0}")]
    Fixture(String),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("the Rust aligner failed: {0}")]
    Rust(String),
    #[error("cannot run the Python reference `{python} {script}`: {message}")]
    Python {
        python: String,
        script: String,
        message: String,
    },
    #[error(
        "the Python reference failed (it needs `pip install numpy rank_bm25 onnxruntime==1.31.1 \
         tokenizers`):\n{stderr}"
    )]
    Reference { stderr: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Debug, Serialize)]
pub struct Side {
    /// Cold: every text embedded.
    pub seconds: f64,
    /// Re-run with every embedding already cached (what a re-run after a param change costs);
    /// `None` for the reference, which has no cache.
    pub warm_seconds: Option<f64>,
    pub embedding_seconds: f64,
    pub accuracy: serde_json::Value,
    pub boundary_errors: serde_json::Value,
}

#[derive(Debug, Serialize)]
pub struct AlignBenchReport {
    pub lines: usize,
    pub cues: usize,
    pub scenarios: usize,
    pub threads: usize,
    pub rust: Side,
    pub python: Side,
    /// Python time / Rust time, end to end (embedding + scoring + dynamic program), cold.
    pub speedup: f64,
    /// Python time / Rust time with embeddings cached (a re-run).
    pub speedup_warm: f64,
}

pub struct AlignBenchOptions {
    pub seed: u64,
    pub python: String,
    pub reference_script: PathBuf,
    pub threads: usize,
}

/// The benchmark episode parsed, with its broadcast subtitles derived for `seed` and their truth.
fn derived_episode(
    seed: u64,
) -> Result<(Script, ScriptDialogue, Vec<AlignCue>, GroundTruth), AlignBenchError> {
    let script = parse_script(EPISODE, "episode.txt", &ParseOptions::default())
        .map_err(|e| AlignBenchError::Fixture(e.to_string()))?;
    let dialogue = script_dialogue(&script);
    let (cues, truth) = derive_broadcast_subtitles(
        &dialogue.lines,
        &dialogue.scene_of_line,
        seed,
        &BroadcastParams::default(),
    )
    .map_err(|e| AlignBenchError::Fixture(e.to_string()))?;
    Ok((script, dialogue, cues, truth))
}

/// The benchmark episode with its derived subtitles and what is true of them.
pub(crate) struct BenchEpisode {
    pub dialogue: ScriptDialogue,
    pub cues: Vec<AlignCue>,
    pub truth: GroundTruth,
    /// Each scenario's dialogue line range.
    pub ranges: Vec<(usize, usize)>,
    pub truth_lines: Alignment,
    pub truth_spans: Vec<ScenarioSpan>,
}

impl BenchEpisode {
    pub(crate) fn derive(seed: u64) -> Result<Self, AlignBenchError> {
        let (script, dialogue, cues, truth) = derived_episode(seed)?;
        let units = build_scenarios(&script, &ScenarioParams::default())
            .map_err(|e| AlignBenchError::Fixture(e.to_string()))?;
        let ranges: Vec<(usize, usize)> = unit_line_ranges(&dialogue, &units)
            .into_iter()
            .flatten()
            .collect();
        let truth_lines = truth_alignment(&dialogue.lines, &cues, &truth.line_cues)
            .map_err(|e| AlignBenchError::Rust(e.to_string()))?;
        let truth_spans = scenario_spans(&truth_lines, &cues, &ranges, &AlignParams::default());
        Ok(Self {
            dialogue,
            cues,
            truth,
            ranges,
            truth_lines,
            truth_spans,
        })
    }
}

/// The benchmark episode's derived subtitles for `seed`, as an SRT file: what both aligners read.
pub fn episode_subtitles(seed: u64) -> Result<String, AlignBenchError> {
    let (_, _, cues, _) = derived_episode(seed)?;
    Ok(crate::broadcast::to_srt(&cues))
}

/// Runs both aligners on the same derived episode.
pub fn run_align_bench(
    options: &AlignBenchOptions,
    work_dir: &Path,
) -> Result<AlignBenchReport, AlignBenchError> {
    let BenchEpisode {
        dialogue,
        cues,
        truth,
        ranges,
        truth_lines,
        truth_spans,
    } = BenchEpisode::derive(options.seed)?;
    let params = AlignParams::default();
    let rust_error = |e: &dyn std::fmt::Display| AlignBenchError::Rust(e.to_string());

    let files = ModelCache::from_env()?.ensure_text_embedder()?;
    let embedder_options = SentenceEmbedderOptions {
        intra_threads: options.threads,
        ..SentenceEmbedderOptions::default()
    };
    let embedder = embed::load(&files, embedder_options, None).map_err(|e| rust_error(&e))?;
    let embedder = embedder.as_ref();

    let started = Instant::now();
    let cache = MemoryEmbeddingCache::default();
    let line_texts = line_contexts(&dialogue.lines, params.window);
    let cue_texts = cue_contexts(&cues, params.window);
    let line_vecs = embed_cached(embedder, &cache, &line_texts).map_err(|e| rust_error(&e))?;
    let cue_vecs = embed_cached(embedder, &cache, &cue_texts).map_err(|e| rust_error(&e))?;
    let embedding_seconds = started.elapsed().as_secs_f64();
    let alignment = align_lines(
        &dialogue.lines,
        &cues,
        Some((&line_vecs, &cue_vecs)),
        &params,
    )
    .map_err(|e| rust_error(&e))?;
    let spans = scenario_spans(&alignment, &cues, &ranges, &params);
    let rust_seconds = started.elapsed().as_secs_f64();
    let warm_started = Instant::now();
    let warm_line_vecs = embed_cached(embedder, &cache, &line_texts).map_err(|e| rust_error(&e))?;
    let warm_cue_vecs = embed_cached(embedder, &cache, &cue_texts).map_err(|e| rust_error(&e))?;
    let warm = align_lines(
        &dialogue.lines,
        &cues,
        Some((&warm_line_vecs, &warm_cue_vecs)),
        &params,
    )
    .map_err(|e| rust_error(&e))?;
    let _ = scenario_spans(&warm, &cues, &ranges, &params);
    let warm_seconds = warm_started.elapsed().as_secs_f64();
    assert_eq!(
        warm, alignment,
        "cached embeddings must give the same alignment"
    );
    let accuracy: LineAccuracy =
        line_accuracy(&alignment, &truth_lines).map_err(|e| rust_error(&e))?;
    let boundaries: BoundaryErrors =
        boundary_errors(&spans, &truth_spans).map_err(|e| rust_error(&e))?;

    let input = serde_json::json!({
        "lines": dialogue.lines,
        "cues": cues,
        "params": params,
        "truth": truth.line_cues,
        "units": ranges,
    });
    let input_path = work_dir.join("align_bench_input.json");
    let output_path = work_dir.join("align_bench_output.json");
    std::fs::write(&input_path, serde_json::to_vec(&input).expect("json")).map_err(|source| {
        AlignBenchError::Io {
            path: input_path.clone(),
            source,
        }
    })?;
    let python_error = |message: String| AlignBenchError::Python {
        python: options.python.clone(),
        script: options.reference_script.display().to_string(),
        message,
    };
    let output = Command::new(&options.python)
        .arg(&options.reference_script)
        .arg(&input_path)
        .arg(&output_path)
        .arg("--onnx")
        .arg(&files.model_onnx)
        .arg("--tokenizer")
        .arg(&files.tokenizer_json)
        .arg("--threads")
        .arg(options.threads.to_string())
        .output()
        .map_err(|e| python_error(e.to_string()))?;
    if !output.status.success() {
        return Err(AlignBenchError::Reference {
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    let reference: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&output_path).map_err(|source| {
            AlignBenchError::Io {
                path: output_path.clone(),
                source,
            }
        })?)
        .map_err(|e| python_error(format!("unreadable output: {e}")))?;
    let python_seconds = reference["timings_s"]["total"].as_f64().unwrap_or(f64::NAN);
    Ok(AlignBenchReport {
        lines: dialogue.lines.len(),
        cues: cues.len(),
        scenarios: ranges.len(),
        threads: options.threads,
        rust: Side {
            seconds: rust_seconds,
            warm_seconds: Some(warm_seconds),
            embedding_seconds,
            accuracy: serde_json::to_value(&accuracy).expect("json"),
            boundary_errors: serde_json::to_value(&boundaries).expect("json"),
        },
        python: Side {
            seconds: python_seconds,
            warm_seconds: None,
            embedding_seconds: reference["timings_s"]["embedding"]
                .as_f64()
                .unwrap_or(f64::NAN),
            accuracy: reference["accuracy"].clone(),
            boundary_errors: reference["boundary_errors"].clone(),
        },
        speedup: python_seconds / rust_seconds,
        speedup_warm: python_seconds / warm_seconds,
    })
}

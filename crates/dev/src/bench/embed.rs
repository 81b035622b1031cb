//! `viss bench embed`: the default text embedder (fastembed) side by side with viss's own loop
//! over `ort` (the embedder align used before), in one run on the same files and threads: the
//! align benchmark's texts (its episode's line and cue contexts) embedded cold by each, the best
//! of `repeat` rounds timed, the two libraries' vectors compared text by text, and the alignment
//! each gives scored against the episode's known truth.

use std::time::Instant;

use serde::Serialize;

use viss_models::ModelCache;
use viss_text::align::{
    AlignParams, Alignment, BoundaryErrors, LineAccuracy, align_lines, boundary_errors,
    cue_contexts, line_accuracy, line_contexts, scenario_spans,
};
use viss_text::embed::{self, EmbedderLibrary, SentenceEmbedderOptions, cosine};

use super::align::{AlignBenchError, BenchEpisode};

pub struct EmbedBenchOptions {
    pub seed: u64,
    pub threads: usize,
    /// Rounds per library; the fastest round counts.
    pub repeat: usize,
}

#[derive(Debug, Serialize)]
pub struct EmbedderSide {
    pub library: String,
    pub identity: String,
    pub load_seconds: f64,
    /// The fastest round's time to embed every text.
    pub seconds: f64,
    pub accuracy: LineAccuracy,
    pub boundary_errors: BoundaryErrors,
}

#[derive(Debug, Serialize)]
pub struct EmbedBenchReport {
    /// Texts per round (line contexts + cue contexts; repeats are embedded once).
    pub texts: usize,
    pub threads: usize,
    pub repeat: usize,
    pub fastembed: EmbedderSide,
    pub ort: EmbedderSide,
    /// fastembed's time / ort's time: below 1 is faster.
    pub time_ratio: f64,
    /// The lowest cosine between the two libraries' vectors of one text.
    pub min_cosine: f32,
    /// Lines whose matched cues differ between the two alignments.
    pub lines_aligned_differently: usize,
}

impl EmbedBenchReport {
    /// The summary `viss bench` prints after the JSON report.
    pub fn summary(&self) -> String {
        format!(
            "embed {} texts, {} thread(s), best of {}: fastembed {:.3} s vs ort {:.3} s \
                 (ratio {:.2}); vectors agree to cosine >= {:.6}; exact line accuracy fastembed \
                 {:.4} vs ort {:.4}, {} line(s) aligned differently",
            self.texts,
            self.threads,
            self.repeat,
            self.fastembed.seconds,
            self.ort.seconds,
            self.time_ratio,
            self.min_cosine,
            self.fastembed.accuracy.exact_rate,
            self.ort.accuracy.exact_rate,
            self.lines_aligned_differently
        )
    }
}

struct Embedded {
    side: EmbedderSide,
    vectors: Vec<Vec<f32>>,
}

pub fn run_embed_bench(options: &EmbedBenchOptions) -> Result<EmbedBenchReport, AlignBenchError> {
    let episode = BenchEpisode::derive(options.seed)?;
    let params = AlignParams::default();
    let line_texts = line_contexts(&episode.dialogue.lines, params.window);
    let cue_texts = cue_contexts(&episode.cues, params.window);
    let texts: Vec<&str> = line_texts
        .iter()
        .chain(&cue_texts)
        .map(String::as_str)
        .collect();
    let files = ModelCache::from_env()?.ensure_text_embedder()?;
    let rust_error = |e: &dyn std::fmt::Display| AlignBenchError::Rust(e.to_string());

    let mut loaded = Vec::new();
    for library in [EmbedderLibrary::Ort, EmbedderLibrary::Fastembed] {
        let embedder_options = SentenceEmbedderOptions {
            library,
            intra_threads: options.threads,
            ..SentenceEmbedderOptions::default()
        };
        let started = Instant::now();
        let embedder = embed::load(&files, embedder_options, None).map_err(|e| rust_error(&e))?;
        loaded.push((library, embedder, started.elapsed().as_secs_f64()));
    }
    // Rounds alternate between the libraries, so neither gets a warmer machine.
    let mut best = vec![f64::INFINITY; loaded.len()];
    let mut vectors = vec![Vec::new(); loaded.len()];
    for _ in 0..options.repeat.max(1) {
        for (index, (_, embedder, _)) in loaded.iter().enumerate() {
            let started = Instant::now();
            vectors[index] = embedder.embed(&texts).map_err(|e| rust_error(&e))?;
            best[index] = best[index].min(started.elapsed().as_secs_f64());
        }
    }

    let mut sides = Vec::new();
    for (((library, embedder, load_seconds), seconds), vectors) in
        loaded.into_iter().zip(best).zip(vectors)
    {
        let (line_vecs, cue_vecs) = vectors.split_at(line_texts.len());
        let alignment = align_lines(
            &episode.dialogue.lines,
            &episode.cues,
            Some((line_vecs, cue_vecs)),
            &params,
        )
        .map_err(|e| rust_error(&e))?;
        let spans = scenario_spans(&alignment, &episode.cues, &episode.ranges, &params);
        let side = EmbedderSide {
            library: library.to_string(),
            identity: embedder.identity(),
            load_seconds,
            seconds,
            accuracy: line_accuracy(&alignment, &episode.truth_lines)
                .map_err(|e| rust_error(&e))?,
            boundary_errors: boundary_errors(&spans, &episode.truth_spans)
                .map_err(|e| rust_error(&e))?,
        };
        sides.push((Embedded { side, vectors }, alignment));
    }
    let (fastembed, fastembed_alignment) = sides.pop().expect("two libraries");
    let (ort, ort_alignment) = sides.pop().expect("two libraries");
    Ok(EmbedBenchReport {
        texts: texts.len(),
        threads: options.threads,
        repeat: options.repeat.max(1),
        time_ratio: fastembed.side.seconds / ort.side.seconds,
        min_cosine: fastembed
            .vectors
            .iter()
            .zip(&ort.vectors)
            .map(|(a, b)| cosine(a, b))
            .fold(f32::INFINITY, f32::min),
        lines_aligned_differently: lines_differing(&fastembed_alignment, &ort_alignment),
        fastembed: fastembed.side,
        ort: ort.side,
    })
}

fn lines_differing(left: &Alignment, right: &Alignment) -> usize {
    left.lines
        .iter()
        .zip(&right.lines)
        .filter(|(a, b)| a.cues != b.cues)
        .count()
}

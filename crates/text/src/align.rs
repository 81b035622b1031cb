//! Transcript lines -> subtitle cues (and so -> video time), monotonically.
//!
//! Fan transcripts are uncut and typed by ear; broadcast subtitles follow the
//! aired cut, split long lines over several cues, merge short exchanges into
//! one two-speaker cue and reword freely. This module scores every (line,
//! cue) pair and then finds the best monotone alignment with a dynamic
//! program that allows all four of those edits.
//!
//! # Scores
//!
//! - **Lexical**: Okapi BM25 ([`crate::bm25`]) with the line's tokens
//!   as the query and each cue as a document.
//! - **Semantic**: cosine similarity between embeddings of a context window
//!   of lines around line `i` ([`line_contexts`]) and a window of cues
//!   around cue `j` ([`cue_contexts`]); the caller embeds those texts.
//! - **Fused**: `alpha * semantic + (1 - alpha) * lexical`
//!   ([`fuse_scores`]); lexical only when there is no semantic matrix.
//!
//! Both raw matrices are normalised **per line, min-max to [0, 1]**
//! ([`ScoreNormalisation::RowMinMax`]): the best cue for a line scores 1,
//! the worst 0, and a line whose scores are all equal (no token shared with
//! any cue) gets a row of zeros. Raw BM25 grows with query length and cosine
//! levels depend on the model, so neither is comparable across lines as is;
//! after this rescaling one match threshold works for both. For BM25 the row
//! minimum is almost always 0 (some cue shares no token), so this equals
//! dividing by the row maximum.
//!
//! # Measured choices
//!
//! Defaults were chosen by grid search on subtitles derived from the
//! fixtures (`tests/fixtures/align/`, [`crate::broadcast`], seeds 1-3;
//! exact cue-set accuracy per line, all-MiniLM-L6-v2 int8 embeddings made by
//! `crates/dev/src/bench/reference/align_reference.py`):
//!
//! - min-max over the whole matrix aligned far worse (lexical only 0.97 at
//!   best, and 0.23 with fused scores): long lines own the top of the range
//!   and short ones ("Yeah.") never clear the threshold. Per-line
//!   mean-to-max ([`ScoreNormalisation::RowMeanMax`]) tied with min-max.
//! - `window`: with alpha = 0.8, MiniLM contexts of 0 / 1 / 2 neighbours
//!   each side gave 0.98 / 0.87 / 0.81. A window makes the cues next to the
//!   true one almost as similar as the true one (they share most of the
//!   context text), so the path absorbs neighbours and misplaces split
//!   halves. Windows remain available for subtitles reworded so heavily that
//!   single lines stop matching.
//! - `alpha` (window 0, the 418-line episode, seeds 1-6): 0 / 0.2 / 0.5 /
//!   0.8 / 1.0 gave 0.980 / 0.976 / 0.974 / 0.940 / 0.913. These derived
//!   subtitles reword lightly, so words alone nearly suffice; semantic
//!   scores are there for real broadcasts that paraphrase more. The default
//!   stays at the specified 0.8; lower it where subtitles are close to
//!   verbatim.
//! - confidence: on those runs, lines with confidence >= 0.5 (about 80% of
//!   them) were right 95-98% of the time, the rest 76-88%.
//!
//! # Alignment
//!
//! A *match* is a cell `(i, j)`: cue `j` carries (part of) line `i`. The
//! matched cells form a chain that never goes back in either lines or cues.
//! Between two consecutive matches the path may take
//!
//! - a diagonal step, `(i, j) -> (i + 1, j + 1)` (one line, one cue);
//! - a *split* step, `(i, j) -> (i, j + 1)`, costing `split_penalty`: one
//!   line spoken over consecutive cues;
//! - a *merge* step, `(i, j) -> (i + 1, j)`, costing `merge_penalty`: lines
//!   sharing one cue;
//! - a jump over skipped lines and cues, `line_skip_penalty` per line (cut
//!   material) and `cue_skip_penalty` per cue (subtitle-only text).
//!
//! Each match earns `fused(i, j) - match_threshold`. Because skip costs are
//! linear, the best prefix score `prefix(i, j)` (lines `< i` and cues `< j`
//! all decided) obeys `prefix(i, j) = max(match(i, j), prefix(i-1, j) -
//! line_skip, prefix(i, j-1) - cue_skip)`, which makes the whole program
//! `O(lines x cues)` in time and memory (two `f32` and two `u8` arrays).
//!
//! # Confidence
//!
//! The same program run on the reversed problem gives, for every cell, the
//! best score of a *complete* alignment that matches that cell (forward +
//! backward - the cell itself), and for every line the best complete
//! alignment that leaves it unmatched. A line's *margin* is the optimum minus
//! the best complete alignment that assigns the line differently: any cue
//! outside its chosen set, or no cue when it has one (or, for an unmatched
//! line, any cue at all). Confidence is `1 - exp(-margin /
//! confidence_scale)`: 0 when another assignment is exactly as good, about
//! 0.63 when the runner-up is one `confidence_scale` behind. Margins are in
//! units of fused score, so `confidence_scale = 0.25` means "a quarter of a
//! perfect match".

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::bm25::{Bm25Error, Bm25Index, Bm25Params, tokenize};
use super::scenario::ScenarioUnit;
use super::script::Script;
use viss_engine::range::{BadSetting, Range, UNIT, Validate, check};

/// One transcript dialogue line, in script order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlignLine {
    /// Caller's id for the line; strictly increasing along the input.
    pub index: usize,
    pub speaker: Option<String>,
    pub text: String,
}

/// One subtitle cue; inputs are sorted by start time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlignCue {
    /// Caller's id for the cue (e.g. [`crate::subtitles::Cue::index`]).
    pub index: usize,
    pub start_ms: u64,
    pub end_ms: u64,
    pub text: String,
}

impl From<&crate::subtitles::Cue> for AlignCue {
    fn from(cue: &crate::subtitles::Cue) -> Self {
        AlignCue {
            index: cue.index,
            start_ms: cue.start_ms,
            end_ms: cue.end_ms,
            text: cue.text.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AlignParams {
    /// Weight of the semantic score in the fused score, 0 to 1 (the paper's fusion weight is
    /// 0.8); 0 = lexical only (no embedding model).
    pub alpha: f32,
    /// BM25 term-frequency saturation, above 0 and at most 100.
    pub k1: f64,
    /// BM25 length normalisation, 0 to 1.
    pub b: f64,
    /// Lines (cues) on each side of a line (cue) in its semantic context, 0 to 50.
    /// 0 (the line alone) aligned best; see the module docs. Wider windows blur neighbouring
    /// cues together: 0.98 / 0.87 / 0.81 exact for 0 / 1 / 2.
    pub window: usize,
    /// How raw lexical and semantic scores are brought to [0, 1]: row_min_max, row_mean_max or
    /// matrix_min_max.
    pub normalisation: ScoreNormalisation,
    /// A match earns `fused - match_threshold`: cells below it only join
    /// the path when skipping around them costs more. 0 to 1 (fused scores are).
    pub match_threshold: f32,
    /// Cost of leaving a transcript line unmatched (cut from the broadcast), 0 to 100.
    pub line_skip_penalty: f32,
    /// Cost of leaving a cue unmatched (subtitle-only text), 0 to 100.
    pub cue_skip_penalty: f32,
    /// Cost of a line continuing onto the next cue, 0 to 100. Raising it did not help on the
    /// download-like fixture (exact 95.0% at 0, 94.5% at 0.05-0.2, 92.6% at 0.3):
    /// `continuation_min_score` is what keeps lines from stretching over cues they do not carry.
    pub split_penalty: f32,
    /// A line's first or last cue of several is dropped from it when its fused score for the
    /// line is below this, 0 to 1: it only joined because continuing costs nothing. Measured
    /// (tests/fixtures/align, MiniLM): 0.3 raised exact line accuracy from 93.5% to 95.0% fused
    /// and kept lexical-only at 98.3%; 0.4 and 0.5 cost lexical-only 0.5-0.7 points.
    pub continuation_min_score: f32,
    /// Cost of the next line sharing the current cue, 0 to 100.
    pub merge_penalty: f32,
    /// Margin (in fused-score units) at which confidence reaches 1 - 1/e; above 0 and at
    /// most 100.
    pub confidence_scale: f32,
    /// Scenario spans whose mean line confidence is lower are flagged; 0 to 1.
    pub min_confidence: f32,
    /// Matched lines less confident than this do not set a span's time
    /// range: near 0 another placement is about as good, and such coin
    /// flips are typically cut lines pulled onto a neighbouring scene's cue. 0 to 1.
    pub span_line_min_confidence: f32,
    /// Scenario spans with a smaller share of matched lines are flagged; 0 to 1.
    pub min_matched_fraction: f32,
    /// Scenario spans with a longer silence between consecutive matched
    /// lines are flagged: a jump that long inside one scene is more likely
    /// a wrong match than a pause. 0 to 86,400,000 (a day).
    pub max_gap_ms: u64,
    /// Scenario spans holding a longer run of consecutive cues that match no line are flagged
    /// (0 to 1,000): subtitle-only remarks come one or two at a time, a recap or a song in many.
    pub max_unmatched_cues: usize,
    /// Scenario spans that start more than this before their first line matched with at least
    /// `min_confidence` are flagged; 0 to 86,400,000 (a day).
    pub max_lead_ms: u64,
    /// Longer transcript lines and subtitle cues are cut to this many characters before they
    /// are scored (BM25 and the embedder), and the episode is flagged; 100 to 1,000,000. What
    /// a text costs grows with its length (one 50 MB cue took about 4 GB), a subtitle cue is
    /// two short lines and a transcript line rarely passes 1,000 characters, and the embedder
    /// reads only its first `max_tokens` tokens (256 by default, about 1,000 characters)
    /// anyway.
    pub max_text_chars: usize,
}

/// The default [`AlignParams::max_text_chars`]: ten times a long transcript line, more than
/// either embedder reads of a text (MiniLM 512 tokens, BGE-M3 8192 at most).
pub const DEFAULT_MAX_TEXT_CHARS: usize = 10_000;

impl Default for AlignParams {
    fn default() -> Self {
        AlignParams {
            alpha: 0.8,
            k1: 1.5,
            b: 0.75,
            window: 0,
            normalisation: ScoreNormalisation::default(),
            match_threshold: 0.5,
            line_skip_penalty: 0.05,
            cue_skip_penalty: 0.3,
            split_penalty: 0.0,
            continuation_min_score: 0.3,
            merge_penalty: 0.4,
            confidence_scale: 0.25,
            min_confidence: 0.5,
            span_line_min_confidence: 0.05,
            min_matched_fraction: 0.5,
            max_gap_ms: 30_000,
            max_unmatched_cues: 3,
            max_lead_ms: 10_000,
            max_text_chars: DEFAULT_MAX_TEXT_CHARS,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Error)]
pub enum AlignError {
    #[error(
        "there are no subtitle cues to align against; check that the subtitle file parsed and is \
         for this episode"
    )]
    NoCues,
    #[error("align params (stages/align.toml [params]): {0}")]
    InvalidParam(Box<BadSetting>),
    #[error(
        "transcript line ids must increase along the input: line at position {position} has id \
         {index} after id {previous}; pass lines in script order"
    )]
    LinesOutOfOrder {
        position: usize,
        previous: usize,
        index: usize,
    },
    #[error(
        "cues must be sorted by start time: cue at position {position} starts at {start_ms} ms \
         after one starting at {previous_ms} ms; sort them first"
    )]
    CuesOutOfOrder {
        position: usize,
        previous_ms: u64,
        start_ms: u64,
    },
    #[error(
        "cue at position {position} ends at {end_ms} ms before it starts at {start_ms} ms; fix its \
         timing"
    )]
    CueEndsBeforeStart {
        position: usize,
        start_ms: u64,
        end_ms: u64,
    },
    #[error(
        "{what} has {found} {unit} but {expected} were expected; compute it from the same lines \
         and cues"
    )]
    ShapeMismatch {
        what: &'static str,
        unit: &'static str,
        expected: usize,
        found: usize,
    },
    #[error(
        "embedding {position} of the {side} has {found} dimensions but the first has {expected}; \
         embed every context with the same model"
    )]
    EmbeddingWidth {
        side: &'static str,
        position: usize,
        expected: usize,
        found: usize,
    },
    #[error(
        "score at line {line}, cue {cue} is {value}, not a finite number; check the embeddings for \
         NaN"
    )]
    NonFiniteScore { line: usize, cue: usize, value: f32 },
    #[error(
        "no cue text has a word in it, so BM25 has nothing to index; check the subtitles' text \
         survived parsing"
    )]
    CuesHaveNoWords,
    #[error("BM25: {0}")]
    Bm25(Bm25Error),
}

impl From<Bm25Error> for AlignError {
    fn from(error: Bm25Error) -> Self {
        match error {
            Bm25Error::EmptyCorpus => AlignError::NoCues,
            Bm25Error::NoTokens => AlignError::CuesHaveNoWords,
            other => AlignError::Bm25(other),
        }
    }
}

impl Validate for AlignParams {
    fn validate(&self) -> Result<(), BadSetting> {
        check("alpha", self.alpha, UNIT)?;
        check("k1", self.k1, Range::above(0.0, 100.0))?;
        check("b", self.b, UNIT)?;
        check("window", self.window, Range::new(0.0, 50.0))?;
        check("match_threshold", self.match_threshold, UNIT)?;
        check("continuation_min_score", self.continuation_min_score, UNIT)?;
        for (key, penalty) in [
            ("line_skip_penalty", self.line_skip_penalty),
            ("cue_skip_penalty", self.cue_skip_penalty),
            ("split_penalty", self.split_penalty),
            ("merge_penalty", self.merge_penalty),
        ] {
            check(key, penalty, Range::new(0.0, 100.0))?;
        }
        check(
            "confidence_scale",
            self.confidence_scale,
            Range::above(0.0, 100.0),
        )?;
        check("min_confidence", self.min_confidence, UNIT)?;
        check(
            "span_line_min_confidence",
            self.span_line_min_confidence,
            UNIT,
        )?;
        check("min_matched_fraction", self.min_matched_fraction, UNIT)?;
        check("max_gap_ms", self.max_gap_ms, Range::new(0.0, 86_400_000.0))?;
        check(
            "max_unmatched_cues",
            self.max_unmatched_cues,
            Range::new(0.0, 1000.0),
        )?;
        check(
            "max_lead_ms",
            self.max_lead_ms,
            Range::new(0.0, 86_400_000.0),
        )?;
        check(
            "max_text_chars",
            self.max_text_chars,
            Range::new(100.0, 1e6),
        )
    }
}

impl AlignParams {
    pub fn validate(&self) -> Result<(), AlignError> {
        Validate::validate(self).map_err(|bad| AlignError::InvalidParam(Box::new(bad)))
    }

    fn bm25(&self) -> Bm25Params {
        Bm25Params {
            k1: self.k1,
            b: self.b,
            ..Bm25Params::default()
        }
    }
}

/// How a raw score matrix is rescaled to [0, 1] before fusion.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ScoreNormalisation {
    /// Per line: `(s - row min) / (row max - row min)`.
    #[default]
    RowMinMax,
    /// Per line: `(s - row mean) / (row max - row mean)`, negatives to 0.
    /// Cells no better than the line's average cue score 0, so a dense
    /// matrix (cosines are rarely near 0) looks as sparse as BM25.
    RowMeanMax,
    /// One min and max over the whole matrix.
    MatrixMinMax,
}

/// Dense row-major scores: one row per line, one column per cue.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreMatrix {
    rows: usize,
    cols: usize,
    values: Vec<f32>,
}

impl ScoreMatrix {
    pub fn zeros(rows: usize, cols: usize) -> Self {
        ScoreMatrix {
            rows,
            cols,
            values: vec![0.0; rows * cols],
        }
    }

    /// Builds a matrix from row-major values (`rows * cols` of them).
    pub fn from_values(rows: usize, cols: usize, values: Vec<f32>) -> Result<Self, AlignError> {
        if values.len() != rows * cols {
            return Err(AlignError::ShapeMismatch {
                what: "the score matrix",
                unit: "values",
                expected: rows * cols,
                found: values.len(),
            });
        }
        Ok(ScoreMatrix { rows, cols, values })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn get(&self, row: usize, col: usize) -> f32 {
        self.values[row * self.cols + col]
    }

    pub fn row(&self, row: usize) -> &[f32] {
        &self.values[row * self.cols..(row + 1) * self.cols]
    }

    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// Rescales to [0, 1] (see the module docs); a constant row (or
    /// matrix), which says nothing about where a line is, becomes zeros.
    fn normalise(&mut self, how: ScoreNormalisation) {
        if self.cols == 0 || self.rows == 0 {
            return;
        }
        let rescale = |values: &mut [f32], low: f32, high: f32| {
            let spread = high - low;
            if spread > 0.0 {
                let scale = 1.0 / spread;
                for value in values.iter_mut() {
                    *value = ((*value - low) * scale).max(0.0);
                }
            } else {
                values.fill(0.0);
            }
        };
        match how {
            ScoreNormalisation::MatrixMinMax => {
                let (low, high) = min_max(&self.values);
                rescale(&mut self.values, low, high);
            }
            ScoreNormalisation::RowMinMax => {
                for row in self.values.chunks_mut(self.cols) {
                    let (low, high) = min_max(row);
                    rescale(row, low, high);
                }
            }
            ScoreNormalisation::RowMeanMax => {
                for row in self.values.chunks_mut(self.cols) {
                    let (_, high) = min_max(row);
                    let mean = row.iter().sum::<f32>() / row.len() as f32;
                    rescale(row, mean, high);
                }
            }
        }
    }

    fn check_finite(&self) -> Result<(), AlignError> {
        match self.values.iter().position(|v| !v.is_finite()) {
            None => Ok(()),
            Some(at) => Err(AlignError::NonFiniteScore {
                line: at / self.cols.max(1),
                cue: at % self.cols.max(1),
                value: self.values[at],
            }),
        }
    }
}

fn min_max(values: &[f32]) -> (f32, f32) {
    values
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}

fn validate_inputs(lines: &[AlignLine], cues: &[AlignCue]) -> Result<(), AlignError> {
    for (position, pair) in lines.windows(2).enumerate() {
        if pair[1].index <= pair[0].index {
            return Err(AlignError::LinesOutOfOrder {
                position: position + 1,
                previous: pair[0].index,
                index: pair[1].index,
            });
        }
    }
    for (position, cue) in cues.iter().enumerate() {
        if cue.end_ms < cue.start_ms {
            return Err(AlignError::CueEndsBeforeStart {
                position,
                start_ms: cue.start_ms,
                end_ms: cue.end_ms,
            });
        }
        if position > 0 && cue.start_ms < cues[position - 1].start_ms {
            return Err(AlignError::CuesOutOfOrder {
                position,
                previous_ms: cues[position - 1].start_ms,
                start_ms: cue.start_ms,
            });
        }
    }
    Ok(())
}

/// BM25 of every line (query) against every cue (document), row-normalised.
///
/// Tokens are [`tokenize`]'s, unchanged. Writing contractions out on both
/// sides ("it's" -> "it is", "gonna" -> "going to") was tried and aligned
/// worse (0.988 against 0.993 on the derived subtitles): the expansions add
/// frequent words ("is", "not", "am") that make short lines overlap by
/// accident, which costs more than the reworded pairs it recovers.
pub fn lexical_scores(
    lines: &[AlignLine],
    cues: &[AlignCue],
    params: &AlignParams,
) -> Result<ScoreMatrix, AlignError> {
    params.validate()?;
    if cues.is_empty() {
        return Err(AlignError::NoCues);
    }
    let documents = cues.iter().map(|cue| tokenize(&cue.text)).collect();
    let index = Bm25Index::new(documents, params.bm25())?;
    let mut matrix = ScoreMatrix::zeros(lines.len(), cues.len());
    for (row, line) in lines.iter().enumerate() {
        let scores = index.score(&tokenize(&line.text));
        for (cell, score) in matrix.values[row * cues.len()..(row + 1) * cues.len()]
            .iter_mut()
            .zip(scores)
        {
            *cell = score as f32;
        }
    }
    matrix.normalise(params.normalisation);
    Ok(matrix)
}

/// Joins the texts at `window` positions either side of each position.
fn windowed<'a>(
    texts: impl ExactSizeIterator<Item = &'a str> + Clone,
    window: usize,
) -> Vec<String> {
    let texts: Vec<&str> = texts.collect();
    (0..texts.len())
        .map(|centre| {
            let first = centre.saturating_sub(window);
            let last = (centre + window).min(texts.len() - 1);
            texts[first..=last]
                .iter()
                .map(|t| t.trim())
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// The text to embed for each line: its words and those of `window` lines
/// either side, speaker names dropped (subtitles rarely name speakers, so
/// names would only pull the two sides apart).
pub fn line_contexts(lines: &[AlignLine], window: usize) -> Vec<String> {
    windowed(lines.iter().map(|l| l.text.as_str()), window)
}

/// The first `max_chars` characters of `text` and how many it has, when it has more
/// (see [`AlignParams::max_text_chars`]); `None` when it is no longer.
pub fn char_prefix(text: &str, max_chars: usize) -> Option<(&str, usize)> {
    let (cut, _) = text.char_indices().nth(max_chars)?;
    Some((&text[..cut], max_chars + text[cut..].chars().count()))
}

/// The text to embed for each cue: its words and those of `window` cues
/// either side.
pub fn cue_contexts(cues: &[AlignCue], window: usize) -> Vec<String> {
    windowed(cues.iter().map(|c| c.text.as_str()), window)
}

fn unit_vectors(
    vectors: &[Vec<f32>],
    side: &'static str,
    width: usize,
) -> Result<Vec<f32>, AlignError> {
    let mut flat = Vec::with_capacity(vectors.len() * width);
    for (position, vector) in vectors.iter().enumerate() {
        if vector.len() != width {
            return Err(AlignError::EmbeddingWidth {
                side,
                position,
                expected: width,
                found: vector.len(),
            });
        }
        let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
        // A zero vector (empty context) has no direction: cosine 0 to all.
        let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
        flat.extend(vector.iter().map(|v| v * scale));
    }
    Ok(flat)
}

/// Dot product written as eight independent sums so the compiler can keep
/// them in one SIMD register instead of a serial chain.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (a_chunks, a_rest) = a.as_chunks::<8>();
    let (b_chunks, b_rest) = b.as_chunks::<8>();
    for (x, y) in a_chunks.iter().zip(b_chunks) {
        for lane in 0..8 {
            lanes[lane] += x[lane] * y[lane];
        }
    }
    let tail: f32 = a_rest.iter().zip(b_rest).map(|(x, y)| x * y).sum();
    lanes.iter().sum::<f32>() + tail
}

/// Cosine similarity of every line context embedding against every cue
/// context embedding, row-normalised like [`lexical_scores`].
pub fn semantic_scores(
    line_vecs: &[Vec<f32>],
    cue_vecs: &[Vec<f32>],
    normalisation: ScoreNormalisation,
) -> Result<ScoreMatrix, AlignError> {
    let width = line_vecs.first().or(cue_vecs.first()).map_or(0, Vec::len);
    let lines = unit_vectors(line_vecs, "line contexts", width)?;
    let cues = unit_vectors(cue_vecs, "cue contexts", width)?;
    let mut matrix = ScoreMatrix::zeros(line_vecs.len(), cue_vecs.len());
    if width > 0 && !cue_vecs.is_empty() {
        for (row, line) in matrix
            .values
            .chunks_mut(cue_vecs.len())
            .zip(lines.chunks(width))
        {
            for (cell, cue) in row.iter_mut().zip(cues.chunks(width)) {
                *cell = dot(line, cue);
            }
        }
    }
    matrix.check_finite()?;
    matrix.normalise(normalisation);
    Ok(matrix)
}

/// `alpha * semantic + (1 - alpha) * lexical`; lexical alone without a
/// semantic matrix.
pub fn fuse_scores(
    semantic: Option<&ScoreMatrix>,
    lexical: &ScoreMatrix,
    alpha: f32,
) -> Result<ScoreMatrix, AlignError> {
    let Some(semantic) = semantic else {
        return Ok(lexical.clone());
    };
    if semantic.rows != lexical.rows {
        return Err(AlignError::ShapeMismatch {
            what: "the semantic score matrix",
            unit: "rows (lines)",
            expected: lexical.rows,
            found: semantic.rows,
        });
    }
    if semantic.cols != lexical.cols {
        return Err(AlignError::ShapeMismatch {
            what: "the semantic score matrix",
            unit: "columns (cues)",
            expected: lexical.cols,
            found: semantic.cols,
        });
    }
    let values = semantic
        .values
        .iter()
        .zip(&lexical.values)
        .map(|(s, l)| alpha * s + (1.0 - alpha) * l)
        .collect();
    Ok(ScoreMatrix {
        rows: lexical.rows,
        cols: lexical.cols,
        values,
    })
}

/// Where one transcript line ended up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LineMatch {
    /// [`AlignLine::index`].
    pub line: usize,
    /// [`AlignCue::index`] of the cues carrying the line, in order; empty
    /// when the line was not found in the subtitles.
    pub cues: Vec<usize>,
    /// Start of the first and end of the last matched cue.
    pub start_ms: Option<u64>,
    pub end_ms: Option<u64>,
    /// Mean fused score over the matched cues (0 when unmatched).
    pub score: f32,
    /// See the module docs; for an unmatched line, how sure it is absent.
    pub confidence: f32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Alignment {
    pub lines: Vec<LineMatch>,
    /// [`AlignCue::index`] of cues that carry no transcript line.
    pub unmatched_cues: Vec<usize>,
    /// Objective value of the optimal path.
    pub total_score: f32,
}

/// Embeddings of [`line_contexts`] and of [`cue_contexts`], in that order.
pub type ContextEmbeddings<'a> = (&'a [Vec<f32>], &'a [Vec<f32>]);

/// Scores and aligns in one call: lexical scores always, semantic ones when
/// the caller passes embeddings of [`line_contexts`] and [`cue_contexts`].
pub fn align_lines(
    lines: &[AlignLine],
    cues: &[AlignCue],
    embeddings: Option<ContextEmbeddings<'_>>,
    params: &AlignParams,
) -> Result<Alignment, AlignError> {
    params.validate()?;
    validate_inputs(lines, cues)?;
    if lines.is_empty() {
        return Ok(Alignment {
            lines: Vec::new(),
            unmatched_cues: cues.iter().map(|c| c.index).collect(),
            total_score: 0.0,
        });
    }
    let lexical = lexical_scores(lines, cues, params)?;
    let semantic = match embeddings {
        Some((line_vecs, cue_vecs)) => {
            check_count(
                "line context embeddings",
                "rows",
                lines.len(),
                line_vecs.len(),
            )?;
            check_count("cue context embeddings", "rows", cues.len(), cue_vecs.len())?;
            Some(semantic_scores(line_vecs, cue_vecs, params.normalisation)?)
        }
        None => None,
    };
    let fused = fuse_scores(semantic.as_ref(), &lexical, params.alpha)?;
    align_scores(lines, cues, &fused, params)
}

fn check_count(
    what: &'static str,
    unit: &'static str,
    expected: usize,
    found: usize,
) -> Result<(), AlignError> {
    if expected == found {
        Ok(())
    } else {
        Err(AlignError::ShapeMismatch {
            what,
            unit,
            expected,
            found,
        })
    }
}

/// The dynamic program on a precomputed fused matrix (rows = `lines`,
/// columns = `cues`). No lines gives an empty alignment; no cues is an
/// error, since then nothing can be placed in time.
pub fn align_scores(
    lines: &[AlignLine],
    cues: &[AlignCue],
    fused: &ScoreMatrix,
    params: &AlignParams,
) -> Result<Alignment, AlignError> {
    params.validate()?;
    validate_inputs(lines, cues)?;
    check_count(
        "the fused score matrix",
        "rows (lines)",
        lines.len(),
        fused.rows,
    )?;
    check_count(
        "the fused score matrix",
        "columns (cues)",
        cues.len(),
        fused.cols,
    )?;
    if lines.is_empty() {
        return Ok(Alignment {
            lines: Vec::new(),
            unmatched_cues: cues.iter().map(|c| c.index).collect(),
            total_score: 0.0,
        });
    }
    if cues.is_empty() {
        return Err(AlignError::NoCues);
    }
    fused.check_finite()?;

    let (n, m) = (lines.len(), cues.len());
    let threshold = params.match_threshold;
    let forward = Lattice::run(n, m, params, true, |i, j| fused.get(i, j) - threshold);
    let backward = Lattice::run(n, m, params, false, |i, j| {
        fused.get(n - 1 - i, m - 1 - j) - threshold
    });
    let spans = forward.best_path();
    let optimum = forward.prefix[forward.at(n, m)];

    let mut matches = Vec::with_capacity(n);
    let mut covered = vec![false; m];
    for (i, span) in spans.iter().enumerate() {
        // Best complete alignment through cell (i, j), for every j.
        let through = |j: usize| {
            forward.matched[forward.at(i + 1, j + 1)] + backward.matched[backward.at(n - i, m - j)]
                - (fused.get(i, j) - threshold)
        };
        let skipping_line = (0..=m)
            .map(|c| {
                forward.prefix[forward.at(i, c)] + backward.prefix[backward.at(n - 1 - i, m - c)]
            })
            .fold(f32::NEG_INFINITY, f32::max)
            - params.line_skip_penalty;
        let runner_up = match span {
            Some((first, last)) => (0..m)
                .filter(|j| j < first || j > last)
                .map(through)
                .fold(skipping_line, f32::max),
            None => (0..m).map(through).fold(f32::NEG_INFINITY, f32::max),
        };
        let margin = (optimum - runner_up).max(0.0);
        let confidence = if margin.is_finite() {
            1.0 - (-margin / params.confidence_scale).exp()
        } else {
            1.0
        };
        let trimmed = span
            .map(|(first, last)| trim_run(fused, i, first, last, params.continuation_min_score));
        let line_match = match trimmed {
            Some((first, last)) => {
                covered[first..=last].fill(true);
                let score = (first..=last).map(|j| fused.get(i, j)).sum::<f32>()
                    / (last - first + 1) as f32;
                LineMatch {
                    line: lines[i].index,
                    cues: cues[first..=last].iter().map(|c| c.index).collect(),
                    start_ms: Some(cues[first].start_ms),
                    end_ms: Some(
                        cues[first..=last]
                            .iter()
                            .map(|c| c.end_ms)
                            .max()
                            .unwrap_or(0),
                    ),
                    score,
                    confidence,
                }
            }
            None => LineMatch {
                line: lines[i].index,
                cues: Vec::new(),
                start_ms: None,
                end_ms: None,
                score: 0.0,
                confidence,
            },
        };
        matches.push(line_match);
    }
    Ok(Alignment {
        lines: matches,
        unmatched_cues: cues
            .iter()
            .zip(&covered)
            .filter(|(_, covered)| !**covered)
            .map(|(c, _)| c.index)
            .collect(),
        total_score: optimum,
    })
}

/// A line's run of cues `first..=last` without the cues at either end that score below
/// `threshold` for it (`continuation_min_score`): they joined only because continuing a line
/// costs less than skipping a cue, which is how a recap, a song or an unscripted remark next to
/// a line would otherwise stretch its time (and its scenario's span). A run of one cue is kept.
fn trim_run(
    fused: &ScoreMatrix,
    line: usize,
    mut first: usize,
    mut last: usize,
    threshold: f32,
) -> (usize, usize) {
    while first < last && fused.get(line, first) < threshold {
        first += 1;
    }
    while last > first && fused.get(line, last) < threshold {
        last -= 1;
    }
    (first, last)
}

/// How the best score of a cell was reached (for the backtrace).
const FROM_PREFIX: u8 = 0;
const FROM_SPLIT: u8 = 1;
const FROM_MERGE: u8 = 2;
/// How the best prefix score was reached.
const PREFIX_MATCH: u8 = 0;
const PREFIX_SKIP_LINE: u8 = 1;
const PREFIX_SKIP_CUE: u8 = 2;

/// The DP tables, padded by one row and column for the empty prefix:
/// entry `(i, j)` concerns lines `< i` and cues `< j`, and `matched(i, j)`
/// is the best score whose last match is line `i - 1` with cue `j - 1`.
struct Lattice {
    width: usize,
    rows: usize,
    matched: Vec<f32>,
    prefix: Vec<f32>,
    matched_from: Vec<u8>,
    prefix_from: Vec<u8>,
}

impl Lattice {
    fn at(&self, i: usize, j: usize) -> usize {
        i * self.width + j
    }

    fn run(
        n: usize,
        m: usize,
        params: &AlignParams,
        keep_backtrace: bool,
        gain: impl Fn(usize, usize) -> f32,
    ) -> Lattice {
        let width = m + 1;
        let cells = (n + 1) * width;
        let mut matched = vec![f32::NEG_INFINITY; cells];
        let mut prefix = vec![0.0f32; cells];
        let backtrace_cells = if keep_backtrace { cells } else { 0 };
        let mut matched_from = vec![FROM_PREFIX; backtrace_cells];
        let mut prefix_from = vec![PREFIX_MATCH; backtrace_cells];
        let line_skip = params.line_skip_penalty;
        let cue_skip = params.cue_skip_penalty;
        for j in 1..=m {
            prefix[j] = prefix[j - 1] - cue_skip;
            if keep_backtrace {
                prefix_from[j] = PREFIX_SKIP_CUE;
            }
        }
        for i in 1..=n {
            let row = i * width;
            let above = row - width;
            prefix[row] = prefix[above] - line_skip;
            if keep_backtrace {
                prefix_from[row] = PREFIX_SKIP_LINE;
            }
            for j in 1..=m {
                let mut best = prefix[above + j - 1];
                let mut from = FROM_PREFIX;
                let split = matched[row + j - 1] - params.split_penalty;
                if split > best {
                    best = split;
                    from = FROM_SPLIT;
                }
                let merge = matched[above + j] - params.merge_penalty;
                if merge > best {
                    best = merge;
                    from = FROM_MERGE;
                }
                let here = best + gain(i - 1, j - 1);
                matched[row + j] = here;

                let mut best_prefix = here;
                let mut prefix_step = PREFIX_MATCH;
                let skip_line = prefix[above + j] - line_skip;
                if skip_line > best_prefix {
                    best_prefix = skip_line;
                    prefix_step = PREFIX_SKIP_LINE;
                }
                let skip_cue = prefix[row + j - 1] - cue_skip;
                if skip_cue > best_prefix {
                    best_prefix = skip_cue;
                    prefix_step = PREFIX_SKIP_CUE;
                }
                prefix[row + j] = best_prefix;
                if keep_backtrace {
                    matched_from[row + j] = from;
                    prefix_from[row + j] = prefix_step;
                }
            }
        }
        Lattice {
            width,
            rows: n + 1,
            matched,
            prefix,
            matched_from,
            prefix_from,
        }
    }

    /// Per line, the first and last matched cue position of the best path.
    fn best_path(&self) -> Vec<Option<(usize, usize)>> {
        let n = self.rows - 1;
        let mut spans: Vec<Option<(usize, usize)>> = vec![None; n];
        let (mut i, mut j) = (n, self.width - 1);
        let mut in_match = false;
        while i > 0 || j > 0 {
            if in_match {
                let span = &mut spans[i - 1];
                *span = Some(match *span {
                    Some((_, last)) => (j - 1, last),
                    None => (j - 1, j - 1),
                });
                match self.matched_from[self.at(i, j)] {
                    FROM_SPLIT => j -= 1,
                    FROM_MERGE => i -= 1,
                    _ => {
                        i -= 1;
                        j -= 1;
                        in_match = false;
                    }
                }
            } else {
                match self.prefix_from[self.at(i, j)] {
                    PREFIX_MATCH => in_match = true,
                    PREFIX_SKIP_LINE => i -= 1,
                    _ => j -= 1,
                }
            }
        }
        spans
    }
}

/// Time range of one scenario unit in the broadcast.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScenarioSpan {
    /// The unit's first and last [`AlignLine::index`], as given.
    pub first_line: usize,
    pub last_line: usize,
    /// Start of the earliest and end of the latest cue of its matched
    /// lines (those at least `span_line_min_confidence` sure); `None` when
    /// there are none (never guessed).
    pub start_ms: Option<u64>,
    pub end_ms: Option<u64>,
    /// Cues carrying those lines, ascending, without repeats.
    pub cue_indices: Vec<usize>,
    pub lines: usize,
    pub matched_lines: usize,
    /// Mean confidence of its matched lines (0 when none matched).
    pub confidence: f32,
    pub flagged: bool,
    /// Why it is flagged, for a person to check.
    pub reason: Option<String>,
}

/// The broadcast time range of each unit, given as inclusive ranges of
/// [`AlignLine::index`]. Unmatched lines, and matches less confident than
/// `span_line_min_confidence`, do not set the range; a unit is flagged when
/// none or too few of its lines matched, when its mean line confidence is
/// below `min_confidence`, or when consecutive matched lines are more than
/// `max_gap_ms` apart.
pub fn scenario_spans(
    alignment: &Alignment,
    cues: &[AlignCue],
    units: &[(usize, usize)],
    params: &AlignParams,
) -> Vec<ScenarioSpan> {
    let unmatched: HashSet<usize> = alignment.unmatched_cues.iter().copied().collect();
    units
        .iter()
        .map(|&(first_line, last_line)| {
            let from = alignment.lines.partition_point(|l| l.line < first_line);
            let to = alignment.lines.partition_point(|l| l.line <= last_line);
            let members = if from <= to {
                &alignment.lines[from..to]
            } else {
                &[][..]
            };
            let mut span = span_of(first_line, last_line, members, params);
            flag_unmatched_stretches(&mut span, members, cues, &unmatched, params);
            span
        })
        .collect()
}

/// [`scenario_spans`] for the ranges [`unit_line_ranges`] gives, one call for them all: `None`
/// where a unit has no dialogue line.
pub fn unit_spans(
    alignment: &Alignment,
    cues: &[AlignCue],
    ranges: &[Option<(usize, usize)>],
    params: &AlignParams,
) -> Vec<Option<ScenarioSpan>> {
    let present: Vec<(usize, usize)> = ranges.iter().flatten().copied().collect();
    let mut spans = scenario_spans(alignment, cues, &present, params).into_iter();
    ranges
        .iter()
        .map(|range| range.and_then(|_| spans.next()))
        .collect()
}

/// Flags a span that holds a long stretch of cues matching none of the episode's lines, or that
/// starts well before its first confidently matched line: both mean the span took in something
/// that is not its dialogue (a recap, a song, another scene's lines that were not recognised).
fn flag_unmatched_stretches(
    span: &mut ScenarioSpan,
    members: &[LineMatch],
    cues: &[AlignCue],
    unmatched: &HashSet<usize>,
    params: &AlignParams,
) {
    let (Some(start), Some(end)) = (span.start_ms, span.end_ms) else {
        return;
    };
    let mut reasons = Vec::new();
    let inside = cues
        .iter()
        .filter(|c| c.start_ms >= start && c.end_ms <= end);
    let mut longest: Option<(usize, &AlignCue, &AlignCue)> = None;
    let mut current: Option<(usize, &AlignCue, &AlignCue)> = None;
    for cue in inside {
        if unmatched.contains(&cue.index) {
            current = Some(match current {
                Some((count, first, _)) => (count + 1, first, cue),
                None => (1, cue, cue),
            });
            if current.map(|c| c.0) > longest.map(|l| l.0) {
                longest = current;
            }
        } else {
            current = None;
        }
    }
    if let Some((count, first, last)) = longest.filter(|l| l.0 > params.max_unmatched_cues) {
        reasons.push(format!(
            "{count} cues in a row inside it ({} to {}) match none of the script's lines; the \
             span may have taken in material that is not this scene",
            crate::subtitles::format_timestamp(first.start_ms),
            crate::subtitles::format_timestamp(last.end_ms)
        ));
    }
    let first_sure = members
        .iter()
        .filter(|l| !l.cues.is_empty() && l.confidence >= params.min_confidence)
        .find_map(|l| Some((l.line, l.start_ms?)));
    if let Some((line, sure_start)) = first_sure
        && sure_start.saturating_sub(start) > params.max_lead_ms
    {
        reasons.push(format!(
            "it starts {:.1} s before line {line}, its first confidently matched line",
            (sure_start - start) as f64 / 1000.0
        ));
    }
    if !reasons.is_empty() {
        span.flagged = true;
        let mut all: Vec<String> = span.reason.take().into_iter().collect();
        all.extend(reasons);
        span.reason = Some(all.join("; "));
    }
}

fn span_of(
    first_line: usize,
    last_line: usize,
    members: &[LineMatch],
    params: &AlignParams,
) -> ScenarioSpan {
    let matched: Vec<&LineMatch> = members.iter().filter(|l| !l.cues.is_empty()).collect();
    let anchors: Vec<&LineMatch> = matched
        .iter()
        .copied()
        .filter(|l| l.confidence >= params.span_line_min_confidence)
        .collect();
    let mut reasons = Vec::new();
    if first_line > last_line {
        reasons.push(format!(
            "the unit's first line {first_line} comes after its last line {last_line}"
        ));
    } else if members.is_empty() {
        reasons.push(format!(
            "no transcript line has an index in {first_line}..={last_line}"
        ));
    } else if matched.is_empty() {
        reasons.push(format!(
            "none of its {} lines was found in the subtitles: it may be cut from this broadcast, \
             or the subtitles belong to another version",
            members.len()
        ));
    } else if anchors.is_empty() {
        reasons.push(format!(
            "none of its {} lines was found in the subtitles with confidence (the {} matched are \
             coin flips below {:.2}); it is probably cut from this broadcast",
            members.len(),
            matched.len(),
            params.span_line_min_confidence
        ));
    }
    let confidence = if matched.is_empty() {
        0.0
    } else {
        matched.iter().map(|l| l.confidence).sum::<f32>() / matched.len() as f32
    };
    if !anchors.is_empty() {
        let fraction = matched.len() as f32 / members.len() as f32;
        if fraction < params.min_matched_fraction {
            reasons.push(format!(
                "only {} of its {} lines were found in the subtitles",
                matched.len(),
                members.len()
            ));
        }
        if confidence < params.min_confidence {
            reasons.push(format!(
                "mean line confidence {confidence:.2} is below {:.2}",
                params.min_confidence
            ));
        }
        for pair in anchors.windows(2) {
            let (end, start) = (pair[0].end_ms.unwrap_or(0), pair[1].start_ms.unwrap_or(0));
            let gap = start.saturating_sub(end);
            if gap > params.max_gap_ms {
                reasons.push(format!(
                    "{:.1} s pass between lines {} and {}; one of them is probably matched to the \
                     wrong cue",
                    gap as f64 / 1000.0,
                    pair[0].line,
                    pair[1].line
                ));
                break;
            }
        }
    }
    let mut cue_indices: Vec<usize> = anchors
        .iter()
        .flat_map(|l| l.cues.iter().copied())
        .collect();
    cue_indices.sort_unstable();
    cue_indices.dedup();
    ScenarioSpan {
        first_line,
        last_line,
        start_ms: anchors.iter().filter_map(|l| l.start_ms).min(),
        end_ms: anchors.iter().filter_map(|l| l.end_ms).max(),
        cue_indices,
        lines: members.len(),
        matched_lines: matched.len(),
        confidence,
        flagged: !reasons.is_empty(),
        reason: (!reasons.is_empty()).then(|| reasons.join("; ")),
    }
}

/// The dialogue lines of a script in order, ready for [`align_lines`], with
/// each line's scene and first source line (to map scenario units back).
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptDialogue {
    /// `index` is the position in this list.
    pub lines: Vec<AlignLine>,
    pub scene_of_line: Vec<usize>,
    pub source_line_of_line: Vec<usize>,
}

/// Collects dialogue with words in it (a speaker with only a stage
/// direction says nothing a subtitle could carry). The first listed
/// speaker stands for a shared line.
pub fn script_dialogue(script: &Script) -> ScriptDialogue {
    let mut dialogue = ScriptDialogue {
        lines: Vec::new(),
        scene_of_line: Vec::new(),
        source_line_of_line: Vec::new(),
    };
    for scene in &script.scenes {
        for line in &scene.lines {
            let Some(spoken) = line.dialogue() else {
                continue;
            };
            if spoken.text.trim().is_empty() {
                continue;
            }
            dialogue.lines.push(AlignLine {
                index: dialogue.lines.len(),
                speaker: spoken.speakers.first().cloned(),
                text: spoken.text.clone(),
            });
            dialogue.scene_of_line.push(scene.index);
            dialogue.source_line_of_line.push(line.source_line_start);
        }
    }
    dialogue
}

/// Each unit as an inclusive range of [`ScriptDialogue`] line indices, for
/// [`scenario_spans`]; `None` for a unit with no dialogue in the list.
pub fn unit_line_ranges(
    dialogue: &ScriptDialogue,
    units: &[ScenarioUnit],
) -> Vec<Option<(usize, usize)>> {
    units
        .iter()
        .map(|unit| {
            let starts: HashSet<usize> = unit
                .lines
                .iter()
                .filter(|l| l.dialogue().is_some())
                .map(|l| l.source_line_start)
                .collect();
            let mut inside = dialogue
                .source_line_of_line
                .iter()
                .enumerate()
                .filter(|(_, source)| starts.contains(source))
                .map(|(position, _)| position);
            let first = inside.next()?;
            Some((first, inside.next_back().unwrap_or(first)))
        })
        .collect()
}

/// Builds the alignment a ground truth describes (`truth[k]` = positions in
/// `cues` carrying `lines[k]`), with confidence 1, so truth and prediction
/// go through the same [`scenario_spans`].
pub fn truth_alignment(
    lines: &[AlignLine],
    cues: &[AlignCue],
    truth: &[Vec<usize>],
) -> Result<Alignment, AlignError> {
    check_count("the ground truth", "lines", lines.len(), truth.len())?;
    let mut covered = vec![false; cues.len()];
    let mut matches = Vec::with_capacity(lines.len());
    for (line, carried_by) in lines.iter().zip(truth) {
        let mut positions = carried_by.clone();
        positions.sort_unstable();
        for &position in &positions {
            if position >= cues.len() {
                return Err(AlignError::ShapeMismatch {
                    what: "the ground truth",
                    unit: "cues",
                    expected: cues.len(),
                    found: position + 1,
                });
            }
            covered[position] = true;
        }
        matches.push(LineMatch {
            line: line.index,
            cues: positions.iter().map(|&p| cues[p].index).collect(),
            start_ms: positions.iter().map(|&p| cues[p].start_ms).min(),
            end_ms: positions.iter().map(|&p| cues[p].end_ms).max(),
            score: if positions.is_empty() { 0.0 } else { 1.0 },
            confidence: 1.0,
        });
    }
    Ok(Alignment {
        lines: matches,
        unmatched_cues: cues
            .iter()
            .zip(&covered)
            .filter(|(_, covered)| !**covered)
            .map(|(c, _)| c.index)
            .collect(),
        total_score: 0.0,
    })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineAccuracy {
    pub lines: usize,
    /// Lines whose matched cue set equals the truth (both empty counts).
    pub exact: usize,
    /// Lines whose matched set shares a cue with the truth, or both empty.
    pub overlapping: usize,
    pub exact_rate: f64,
    pub overlap_rate: f64,
    /// Lines absent from the subtitles, and how many of them were left
    /// unmatched.
    pub absent: usize,
    pub absent_unmatched: usize,
    /// Lines present in the subtitles but left unmatched.
    pub missed: usize,
}

/// Compares per-line cue sets line by line; both alignments must list the
/// same lines in the same order.
pub fn line_accuracy(predicted: &Alignment, truth: &Alignment) -> Result<LineAccuracy, AlignError> {
    check_count(
        "the predicted alignment",
        "lines",
        truth.lines.len(),
        predicted.lines.len(),
    )?;
    let mut accuracy = LineAccuracy {
        lines: truth.lines.len(),
        exact: 0,
        overlapping: 0,
        exact_rate: 0.0,
        overlap_rate: 0.0,
        absent: 0,
        absent_unmatched: 0,
        missed: 0,
    };
    for (ours, expected) in predicted.lines.iter().zip(&truth.lines) {
        let exact = ours.cues == expected.cues;
        let overlaps = exact || ours.cues.iter().any(|c| expected.cues.contains(c));
        accuracy.exact += usize::from(exact);
        accuracy.overlapping += usize::from(overlaps);
        if expected.cues.is_empty() {
            accuracy.absent += 1;
            accuracy.absent_unmatched += usize::from(ours.cues.is_empty());
        } else if ours.cues.is_empty() {
            accuracy.missed += 1;
        }
    }
    if accuracy.lines > 0 {
        accuracy.exact_rate = accuracy.exact as f64 / accuracy.lines as f64;
        accuracy.overlap_rate = accuracy.overlapping as f64 / accuracy.lines as f64;
    }
    Ok(accuracy)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoundaryErrors {
    /// Units with a range in both predicted and true spans.
    pub compared: usize,
    /// Units with a true range but no predicted one.
    pub missing: usize,
    pub mean_start_error_s: f64,
    pub max_start_error_s: f64,
    pub mean_end_error_s: f64,
    pub max_end_error_s: f64,
}

/// |start - true start| and |end - true end| in seconds over units that
/// have both ranges.
pub fn boundary_errors(
    predicted: &[ScenarioSpan],
    truth: &[ScenarioSpan],
) -> Result<BoundaryErrors, AlignError> {
    check_count("the predicted spans", "units", truth.len(), predicted.len())?;
    let mut errors = BoundaryErrors {
        compared: 0,
        missing: 0,
        mean_start_error_s: 0.0,
        max_start_error_s: 0.0,
        mean_end_error_s: 0.0,
        max_end_error_s: 0.0,
    };
    let seconds = |a: u64, b: u64| a.abs_diff(b) as f64 / 1000.0;
    for (ours, expected) in predicted.iter().zip(truth) {
        let (Some(true_start), Some(true_end)) = (expected.start_ms, expected.end_ms) else {
            continue;
        };
        let (Some(start), Some(end)) = (ours.start_ms, ours.end_ms) else {
            errors.missing += 1;
            continue;
        };
        let (start_error, end_error) = (seconds(start, true_start), seconds(end, true_end));
        errors.compared += 1;
        errors.mean_start_error_s += start_error;
        errors.mean_end_error_s += end_error;
        errors.max_start_error_s = errors.max_start_error_s.max(start_error);
        errors.max_end_error_s = errors.max_end_error_s.max(end_error);
    }
    if errors.compared > 0 {
        errors.mean_start_error_s /= errors.compared as f64;
        errors.mean_end_error_s /= errors.compared as f64;
    }
    Ok(errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(index: usize, text: &str) -> AlignLine {
        AlignLine {
            index,
            speaker: None,
            text: text.to_string(),
        }
    }

    fn cue(index: usize, start_s: u64, text: &str) -> AlignCue {
        AlignCue {
            index,
            start_ms: start_s * 1000,
            end_ms: start_s * 1000 + 1500,
            text: text.to_string(),
        }
    }

    /// A fused matrix from rows of scores (lines x cues).
    fn matrix(rows: &[&[f32]]) -> ScoreMatrix {
        let values = rows.iter().flat_map(|r| r.iter().copied()).collect();
        ScoreMatrix::from_values(rows.len(), rows[0].len(), values).unwrap()
    }

    #[test]
    fn a_line_does_not_stretch_over_neighbouring_cues_it_does_not_carry() {
        let lines = [line(0, "a"), line(1, "b")];
        let cues: Vec<AlignCue> = (0..4).map(|j| cue(j, 2 * j as u64, "x")).collect();
        // Cue 1 scores 0.25 for line 0: cheaper to absorb (split costs 0) than to skip (0.3),
        // but not carried by the line.
        let fused = matrix(&[&[1.0, 0.25, 0.0, 0.0], &[0.0, 0.0, 1.0, 0.9]]);
        let alignment = align_scores(&lines, &cues, &fused, &AlignParams::default()).unwrap();
        assert_eq!(alignment.lines[0].cues, [0]);
        assert_eq!(alignment.lines[0].end_ms, Some(1500));
        assert_eq!(alignment.lines[1].cues, [2, 3], "a real continuation stays");
        assert_eq!(alignment.unmatched_cues, [1]);
        let kept = AlignParams {
            continuation_min_score: 0.0,
            ..AlignParams::default()
        };
        let untrimmed = align_scores(&lines, &cues, &fused, &kept).unwrap();
        assert_eq!(untrimmed.lines[0].cues, [0, 1]);
    }

    #[test]
    fn a_span_with_a_long_unmatched_stretch_or_an_early_start_says_why() {
        let cues: Vec<AlignCue> = (0..8).map(|j| cue(j, 3 * j as u64, "x")).collect();
        let matched = |line: usize, cue: usize, confidence: f32| LineMatch {
            line,
            cues: vec![cue],
            start_ms: Some(cues[cue].start_ms),
            end_ms: Some(cues[cue].end_ms),
            score: 1.0,
            confidence,
        };
        // Line 0 is an unsure match at 0 s; lines 1 and 2 sure ones at 15 s and 21 s, with four
        // unmatched cues between the first two.
        let alignment = Alignment {
            lines: vec![matched(0, 0, 0.1), matched(1, 5, 0.9), matched(2, 7, 0.9)],
            unmatched_cues: vec![1, 2, 3, 4, 6],
            total_score: 0.0,
        };
        let params = AlignParams::default();
        let span = scenario_spans(&alignment, &cues, &[(0, 2)], &params).remove(0);
        assert!(span.flagged);
        let reason = span.reason.unwrap();
        assert!(
            reason.contains("4 cues in a row inside it (00:00:03,000 to 00:00:13,500)"),
            "{reason}"
        );
        assert!(
            reason.contains("it starts 15.0 s before line 1, its first confidently matched line"),
            "{reason}"
        );
        // The same lines without the unsure first match: nothing to flag.
        let sure = Alignment {
            lines: alignment.lines[1..].to_vec(),
            unmatched_cues: vec![0, 1, 2, 3, 4, 6],
            total_score: 0.0,
        };
        let span = scenario_spans(&sure, &cues, &[(1, 2)], &params).remove(0);
        assert!(!span.flagged, "{span:?}");
    }

    #[test]
    fn handles_splits_merges_cut_lines_and_extra_cues() {
        let lines = vec![
            line(0, "Where did you put the watering can?"),
            line(
                1,
                "Behind the shed, next to the broken wheelbarrow, where it always is, obviously.",
            ),
            line(2, "Thanks."),
            line(3, "Sure."),
            line(
                4,
                "This sentence about penguins was cut from the broadcast.",
            ),
            line(5, "Now the tomatoes need tying up before the storm."),
        ];
        let cues = vec![
            cue(0, 1, "Where did you put the watering can?"),
            cue(1, 3, "Behind the shed,\nnext to the broken wheelbarrow,"),
            cue(2, 5, "where it always is, obviously."),
            cue(3, 7, "- Thanks.\n- Sure."),
            cue(4, 9, "[door slams]"),
            cue(5, 11, "The tomatoes need tying up\nbefore the storm."),
        ];
        let alignment = align_lines(&lines, &cues, None, &AlignParams::default()).unwrap();
        let matched: Vec<Vec<usize>> = alignment.lines.iter().map(|l| l.cues.clone()).collect();
        assert_eq!(
            matched,
            vec![vec![0], vec![1, 2], vec![3], vec![3], vec![], vec![5]]
        );
        assert_eq!(alignment.unmatched_cues, vec![4]);
        assert_eq!(alignment.lines[1].start_ms, Some(3000));
        assert_eq!(alignment.lines[1].end_ms, Some(6500));
        assert!(
            alignment.lines[5].confidence > 0.5,
            "{:?}",
            alignment.lines[5]
        );
    }

    #[test]
    fn empty_inputs_give_an_empty_alignment_or_a_clear_error() {
        let params = AlignParams::default();
        let lines = vec![line(0, "Hello there.")];
        let cues = vec![cue(0, 1, "Hello there.")];
        let no_lines = align_lines(&[], &cues, None, &params).unwrap();
        assert!(no_lines.lines.is_empty());
        assert_eq!(no_lines.unmatched_cues, vec![0]);
        assert_eq!(
            align_lines(&lines, &[], None, &params).unwrap_err(),
            AlignError::NoCues
        );
        assert_eq!(
            align_scores(&lines, &[], &ScoreMatrix::zeros(1, 0), &params).unwrap_err(),
            AlignError::NoCues
        );
        let silent = vec![cue(0, 1, "...")];
        assert_eq!(
            align_lines(&lines, &silent, None, &params).unwrap_err(),
            AlignError::CuesHaveNoWords
        );
        assert!(
            AlignError::NoCues
                .to_string()
                .contains("check that the subtitle file")
        );
    }

    #[test]
    fn rejects_misordered_inputs_bad_shapes_and_bad_params() {
        let params = AlignParams::default();
        let lines = vec![line(3, "a b"), line(2, "c d")];
        let cues = vec![cue(0, 1, "a b"), cue(1, 5, "c d")];
        assert!(matches!(
            align_lines(&lines, &cues, None, &params),
            Err(AlignError::LinesOutOfOrder { position: 1, .. })
        ));
        let lines = vec![line(0, "a b"), line(1, "c d")];
        let backwards = vec![cue(0, 5, "a b"), cue(1, 1, "c d")];
        assert!(matches!(
            align_lines(&lines, &backwards, None, &params),
            Err(AlignError::CuesOutOfOrder { position: 1, .. })
        ));
        let line_vecs = vec![vec![1.0, 0.0], vec![0.0, 1.0]];
        let cue_vecs = vec![vec![1.0, 0.0], vec![0.0, 1.0, 0.0]];
        assert!(matches!(
            semantic_scores(&line_vecs, &cue_vecs, ScoreNormalisation::RowMinMax),
            Err(AlignError::EmbeddingWidth { position: 1, .. })
        ));
        assert!(matches!(
            align_lines(&lines, &cues, Some((&line_vecs[..1], &line_vecs)), &params),
            Err(AlignError::ShapeMismatch { .. })
        ));
        let bad = AlignParams {
            alpha: 1.5,
            ..AlignParams::default()
        };
        assert!(matches!(
            align_lines(&lines, &cues, None, &bad),
            Err(AlignError::InvalidParam(bad)) if bad.key == "alpha"
        ));
        let parsed: AlignParams = serde_json::from_str(r#"{"alpha": 0.5, "window": 2}"#).unwrap();
        assert_eq!(parsed.alpha, 0.5);
        assert_eq!(parsed.window, 2);
        assert_eq!(parsed.k1, 1.5);
        assert!(serde_json::from_str::<AlignParams>(r#"{"alpah": 0.5}"#).is_err());
    }

    #[test]
    fn long_texts_are_cut_at_a_character_boundary() {
        assert_eq!(char_prefix("short", 10), None);
        assert_eq!(char_prefix("exactly10!", 10), None);
        assert_eq!(char_prefix("ééééé", 3), Some(("ééé", 5)));
        let huge = "word ".repeat(1_000_000);
        let (prefix, chars) = char_prefix(&huge, DEFAULT_MAX_TEXT_CHARS).unwrap();
        assert_eq!((prefix.len(), chars), (DEFAULT_MAX_TEXT_CHARS, 5_000_000));
    }

    #[test]
    fn params_out_of_range_name_the_key_and_range() {
        let params = AlignParams {
            max_text_chars: 0,
            ..AlignParams::default()
        };
        let bad = Validate::validate(&params).unwrap_err();
        assert_eq!(bad.key, "max_text_chars");
        assert_eq!(bad.expected, "an integer from 100 to 1000000");
        let params = AlignParams {
            k1: f64::INFINITY,
            ..AlignParams::default()
        };
        assert_eq!(Validate::validate(&params).unwrap_err().key, "k1");
        let params = AlignParams {
            window: 1_000_000,
            ..AlignParams::default()
        };
        assert_eq!(Validate::validate(&params).unwrap_err().key, "window");
    }

    #[test]
    fn scores_are_row_normalised_and_fused_linearly() {
        let lines = vec![line(0, "red door"), line(1, "nothing shared")];
        let cues = vec![
            cue(0, 1, "red door"),
            cue(1, 2, "blue door"),
            cue(2, 3, "green"),
        ];
        let lexical = lexical_scores(&lines, &cues, &AlignParams::default()).unwrap();
        assert_eq!(lexical.row(0)[0], 1.0);
        assert_eq!(lexical.row(0)[2], 0.0);
        assert!(lexical.row(0)[1] > 0.0 && lexical.row(0)[1] < 1.0);
        assert_eq!(lexical.row(1), &[0.0, 0.0, 0.0]);

        let semantic = semantic_scores(
            &[vec![1.0, 0.0], vec![0.0, 2.0]],
            &[vec![2.0, 0.0], vec![1.0, 1.0], vec![0.0, 1.0]],
            ScoreNormalisation::RowMinMax,
        )
        .unwrap();
        assert_eq!(
            semantic.row(0),
            &[1.0, std::f32::consts::FRAC_1_SQRT_2, 0.0]
        );
        let fused = fuse_scores(Some(&semantic), &lexical, 0.8).unwrap();
        assert!((fused.get(0, 0) - 1.0).abs() < 1e-6);
        assert!((fused.get(1, 2) - 0.8).abs() < 1e-6);
        assert!(fuse_scores(Some(&ScoreMatrix::zeros(1, 3)), &lexical, 0.8).is_err());
    }

    #[test]
    fn contexts_join_neighbours_without_speakers() {
        let lines = vec![
            AlignLine {
                index: 0,
                speaker: Some("Odile".into()),
                text: "One.".into(),
            },
            line(1, "Two."),
            line(2, "Three."),
        ];
        assert_eq!(
            line_contexts(&lines, 1),
            vec!["One. Two.", "One. Two. Three.", "Two. Three."]
        );
        assert_eq!(line_contexts(&lines, 0), vec!["One.", "Two.", "Three."]);
        let cues = vec![cue(0, 1, "a"), cue(1, 2, "b")];
        assert_eq!(cue_contexts(&cues, 5), vec!["a b", "a b"]);
    }
}

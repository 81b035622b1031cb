//! Broadcast-style subtitles derived from a transcript, with ground truth.
//!
//! Real episode subtitles cannot ship with the repository, and hand-labelled
//! line-to-cue truth is expensive, so the aligner is measured on subtitles
//! derived from a transcript the way broadcasters' subtitles differ from fan
//! transcripts:
//!
//! - the uncut material is missing: some lines, sometimes two or three in a
//!   row, and optionally whole scenes ([`BroadcastParams::cut_scenes`]);
//! - wording is trimmed: leading fillers ("Oh,", "Well,", "You know,") and
//!   stutters go, full forms become contractions ("do not" -> "don't") and
//!   casual forms become standard ones ("gonna" -> "going to");
//! - a cue holds at most two rows of about 42 characters, so long lines
//!   are split over two or three cues, preferably at sentence ends;
//! - short exchanges are merged into one `- A.` / `- B.` two-speaker cue;
//! - durations follow reading speed (15-17 characters per second, 1 to 6
//!   seconds), with short gaps between cues and longer ones at scene
//!   changes;
//! - a few cues carry text the transcript lacks (`[door slams]`, "Hey.").
//!
//! Everything is driven by a seeded splitmix64 generator, so a seed always
//! gives the same subtitles.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use viss_text::align::{AlignCue, AlignLine};
use viss_text::subtitles::format_timestamp;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BroadcastParams {
    /// Share of transcript lines missing from the broadcast (in runs of 1-3).
    pub drop_rate: f64,
    /// Scenes (by the caller's scene number) cut from the broadcast entirely.
    pub cut_scenes: Vec<usize>,
    /// Characters per subtitle row; a cue holds at most two rows.
    pub row_chars: usize,
    /// Chance that a line fitting one cue is still split in two.
    pub voluntary_split_rate: f64,
    /// Chance that two short consecutive lines share a two-speaker cue.
    pub merge_rate: f64,
    /// Longest line (characters) that may be merged with another.
    pub merge_max_chars: usize,
    /// Chance that each filler, stutter or tag is removed.
    pub trim_rate: f64,
    /// Chance that each contractible or casual phrase is rewritten.
    pub contraction_rate: f64,
    /// Reading speed range, characters per second.
    pub min_chars_per_second: f64,
    pub max_chars_per_second: f64,
    pub min_duration_ms: u64,
    pub max_duration_ms: u64,
    /// Gap range between cues within a scene.
    pub min_gap_ms: u64,
    pub max_gap_ms: u64,
    /// Gap range at a scene change.
    pub min_scene_gap_ms: u64,
    pub max_scene_gap_ms: u64,
    /// Chance, after each cue, of a cue the transcript does not have.
    pub extra_cue_rate: f64,
}

impl Default for BroadcastParams {
    fn default() -> Self {
        BroadcastParams {
            drop_rate: 0.06,
            cut_scenes: Vec::new(),
            row_chars: 42,
            voluntary_split_rate: 0.2,
            merge_rate: 0.35,
            merge_max_chars: 30,
            trim_rate: 0.7,
            contraction_rate: 0.8,
            min_chars_per_second: 15.0,
            max_chars_per_second: 17.0,
            min_duration_ms: 1_000,
            max_duration_ms: 6_000,
            min_gap_ms: 80,
            max_gap_ms: 400,
            min_scene_gap_ms: 2_000,
            max_scene_gap_ms: 6_000,
            extra_cue_rate: 0.03,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Error)]
pub enum BroadcastError {
    #[error(
        "{lines} lines but {scenes} scene numbers; pass one scene number per line \
         (ScriptDialogue::scene_of_line)"
    )]
    SceneCountMismatch { lines: usize, scenes: usize },
    #[error("broadcast params: {name} must be {expected}; remove it to use the default")]
    InvalidParam {
        name: &'static str,
        expected: &'static str,
    },
}

impl BroadcastParams {
    pub fn validate(&self) -> Result<(), BroadcastError> {
        let rates = [
            ("drop_rate", self.drop_rate),
            ("voluntary_split_rate", self.voluntary_split_rate),
            ("merge_rate", self.merge_rate),
            ("trim_rate", self.trim_rate),
            ("contraction_rate", self.contraction_rate),
            ("extra_cue_rate", self.extra_cue_rate),
        ];
        for (name, rate) in rates {
            if !(0.0..=1.0).contains(&rate) {
                return Err(BroadcastError::InvalidParam {
                    name,
                    expected: "a probability in [0, 1]",
                });
            }
        }
        let invalid = |name, expected| Err(BroadcastError::InvalidParam { name, expected });
        if self.row_chars < 10 {
            return invalid("row_chars", "at least 10");
        }
        if !(self.min_chars_per_second > 0.0
            && self.min_chars_per_second <= self.max_chars_per_second
            && self.max_chars_per_second.is_finite())
        {
            return invalid(
                "min_chars_per_second",
                "> 0 and no more than max_chars_per_second",
            );
        }
        if self.min_duration_ms == 0 || self.min_duration_ms > self.max_duration_ms {
            return invalid("min_duration_ms", "> 0 and no more than max_duration_ms");
        }
        if self.min_gap_ms > self.max_gap_ms {
            return invalid("min_gap_ms", "no more than max_gap_ms");
        }
        if self.min_scene_gap_ms > self.max_scene_gap_ms {
            return invalid("min_scene_gap_ms", "no more than max_scene_gap_ms");
        }
        Ok(())
    }
}

/// Which cues carry which transcript line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroundTruth {
    /// Per input line (by position), the positions of the cues carrying it,
    /// ascending; empty when the line is not in the broadcast.
    pub line_cues: Vec<Vec<usize>>,
    /// Cues with text the transcript does not have.
    pub extra_cues: Vec<usize>,
}

/// splitmix64 (Steele, Lea & Flood 2014): tiny, fast and good enough for
/// choosing edits; not for anything cryptographic.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) from the top 53 bits.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn chance(&mut self, probability: f64) -> bool {
        self.unit() < probability
    }

    /// Uniform in `low..=high`.
    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low + 1)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next_u64() % items.len() as u64) as usize]
    }
}

/// What one generated cue will hold before timing is assigned.
struct PendingCue {
    text: String,
    /// Input line positions the cue carries.
    carries: Vec<usize>,
    scene: usize,
}

/// Derives broadcast subtitles for `lines` (in script order; `scene_of_line`
/// gives each line's scene) and the truth of which cues carry which line.
/// Cue `index` equals its position.
pub fn derive_broadcast_subtitles(
    lines: &[AlignLine],
    scene_of_line: &[usize],
    seed: u64,
    params: &BroadcastParams,
) -> Result<(Vec<AlignCue>, GroundTruth), BroadcastError> {
    params.validate()?;
    if lines.len() != scene_of_line.len() {
        return Err(BroadcastError::SceneCountMismatch {
            lines: lines.len(),
            scenes: scene_of_line.len(),
        });
    }
    let mut rng = SplitMix64(seed);

    // 1. Which lines survive the cut.
    let mut kept = vec![true; lines.len()];
    let mut position = 0;
    while position < lines.len() {
        if params.cut_scenes.contains(&scene_of_line[position]) {
            kept[position] = false;
            position += 1;
            continue;
        }
        // Runs average two lines, so start them at half the target rate.
        if rng.chance(params.drop_rate / 2.0) {
            let run = rng.between(1, 3) as usize;
            let scene = scene_of_line[position];
            for k in position..(position + run).min(lines.len()) {
                if scene_of_line[k] == scene {
                    kept[k] = false;
                }
            }
            position += run;
        } else {
            position += 1;
        }
    }

    // 2. Reword, then cut into cue-sized pieces or pair up short lines.
    let cue_chars = params.row_chars * 2;
    let mut pending: Vec<PendingCue> = Vec::new();
    let mut waiting_to_merge: Option<(usize, String)> = None;
    for (position, line) in lines.iter().enumerate() {
        if !kept[position] {
            flush(
                &mut waiting_to_merge,
                &mut pending,
                scene_of_line,
                params.row_chars,
            );
            continue;
        }
        let text = reword(&line.text, &mut rng, params);
        if text.is_empty() {
            flush(
                &mut waiting_to_merge,
                &mut pending,
                scene_of_line,
                params.row_chars,
            );
            continue;
        }
        let scene = scene_of_line[position];
        let short = text.chars().count() <= params.merge_max_chars;
        if let Some((previous, previous_text)) = waiting_to_merge.take() {
            let same_scene = scene_of_line[previous] == scene;
            let other_speaker = lines[previous].speaker != line.speaker;
            if short && same_scene && other_speaker && rng.chance(params.merge_rate) {
                pending.push(PendingCue {
                    text: format!("- {previous_text}\n- {text}"),
                    carries: vec![previous, position],
                    scene,
                });
                continue;
            }
            pending.push(single_cue(
                previous,
                previous_text,
                scene_of_line,
                params.row_chars,
            ));
        }
        let length = text.chars().count();
        let pieces = if length > cue_chars {
            length.div_ceil(cue_chars)
        } else if length > params.row_chars && rng.chance(params.voluntary_split_rate) {
            2
        } else {
            1
        };
        if pieces == 1 && short {
            waiting_to_merge = Some((position, text));
            continue;
        }
        for piece in split_text(&text, pieces) {
            pending.push(PendingCue {
                text: wrap_rows(&piece, params.row_chars),
                carries: vec![position],
                scene,
            });
        }
    }
    flush(
        &mut waiting_to_merge,
        &mut pending,
        scene_of_line,
        params.row_chars,
    );

    // 3. Timing, plus cues the transcript does not have.
    let mut cues: Vec<AlignCue> = Vec::new();
    let mut truth = GroundTruth {
        line_cues: vec![Vec::new(); lines.len()],
        extra_cues: Vec::new(),
    };
    let mut clock_ms = rng.between(1_000, 4_000);
    let mut previous_scene: Option<usize> = None;
    let mut pending = pending.into_iter().peekable();
    while let Some(cue) = pending.next() {
        // Nothing is inserted between the pieces of one split line.
        let line_continues = pending
            .peek()
            .is_some_and(|next| next.carries.iter().any(|l| cue.carries.contains(l)));
        if previous_scene.is_some_and(|s| s != cue.scene) {
            clock_ms += rng.between(params.min_scene_gap_ms, params.max_scene_gap_ms);
            if rng.chance(0.5) {
                let text = *rng.pick(&["♪ ♪", "[upbeat music]", "[music playing]"]);
                push_extra(&mut cues, &mut truth, &mut clock_ms, text, &mut rng, params);
            }
        }
        previous_scene = Some(cue.scene);
        let position = cues.len();
        let start_ms = clock_ms;
        let end_ms = start_ms + reading_time(&cue.text, &mut rng, params);
        cues.push(AlignCue {
            index: position,
            start_ms,
            end_ms,
            text: cue.text,
        });
        for line in cue.carries {
            truth.line_cues[line].push(position);
        }
        clock_ms = end_ms + rng.between(params.min_gap_ms, params.max_gap_ms);
        if !line_continues && rng.chance(params.extra_cue_rate) {
            let text = *rng.pick(&[
                "[door closes]",
                "[phone ringing]",
                "[laughs]",
                "[sighs]",
                "Hey.",
                "Thanks.",
                "What?",
                "Come on.",
                "Okay.",
            ]);
            push_extra(&mut cues, &mut truth, &mut clock_ms, text, &mut rng, params);
        }
    }
    Ok((cues, truth))
}

fn single_cue(
    position: usize,
    text: String,
    scene_of_line: &[usize],
    row_chars: usize,
) -> PendingCue {
    PendingCue {
        text: wrap_rows(&text, row_chars),
        carries: vec![position],
        scene: scene_of_line[position],
    }
}

/// Emits a short line held back in the hope of merging it with the next.
fn flush(
    waiting: &mut Option<(usize, String)>,
    pending: &mut Vec<PendingCue>,
    scene_of_line: &[usize],
    row_chars: usize,
) {
    if let Some((position, text)) = waiting.take() {
        pending.push(single_cue(position, text, scene_of_line, row_chars));
    }
}

fn push_extra(
    cues: &mut Vec<AlignCue>,
    truth: &mut GroundTruth,
    clock_ms: &mut u64,
    text: &str,
    rng: &mut SplitMix64,
    params: &BroadcastParams,
) {
    let position = cues.len();
    let end_ms = *clock_ms + reading_time(text, rng, params);
    cues.push(AlignCue {
        index: position,
        start_ms: *clock_ms,
        end_ms,
        text: text.to_string(),
    });
    truth.extra_cues.push(position);
    *clock_ms = end_ms + rng.between(params.min_gap_ms, params.max_gap_ms);
}

fn reading_time(text: &str, rng: &mut SplitMix64, params: &BroadcastParams) -> u64 {
    let speed = params.min_chars_per_second
        + rng.unit() * (params.max_chars_per_second - params.min_chars_per_second);
    let characters = text.chars().filter(|c| *c != '\n').count() as f64;
    ((characters / speed * 1000.0).round() as u64)
        .clamp(params.min_duration_ms, params.max_duration_ms)
}

/// Lowercase letters and apostrophes of a word, for comparing.
fn bare(word: &str) -> String {
    word.chars()
        .filter(|c| c.is_alphanumeric() || *c == '\'')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Trailing punctuation of a word ("it," -> ",").
fn trailing_punctuation(word: &str) -> &str {
    let keep = word.trim_end_matches(|c: char| !c.is_alphanumeric()).len();
    &word[keep..]
}

fn capitalise(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn starts_upper(word: &str) -> bool {
    word.chars().next().is_some_and(char::is_uppercase)
}

/// Two-word phrases subtitles contract, and casual forms they spell out.
const CONTRACTIONS: &[(&str, &str, &str)] = &[
    ("it", "is", "it's"),
    ("that", "is", "that's"),
    ("what", "is", "what's"),
    ("there", "is", "there's"),
    ("do", "not", "don't"),
    ("does", "not", "doesn't"),
    ("did", "not", "didn't"),
    ("is", "not", "isn't"),
    ("are", "not", "aren't"),
    ("was", "not", "wasn't"),
    ("have", "not", "haven't"),
    ("will", "not", "won't"),
    ("can", "not", "can't"),
    ("i", "am", "I'm"),
    ("i", "will", "I'll"),
    ("i", "have", "I've"),
    ("i", "would", "I'd"),
    ("you", "are", "you're"),
    ("we", "are", "we're"),
    ("they", "are", "they're"),
    ("let", "us", "let's"),
];

const CASUAL_FORMS: &[(&str, &str)] = &[
    ("gonna", "going to"),
    ("wanna", "want to"),
    ("gotta", "have to"),
    ("kinda", "kind of"),
    ("cannot", "can't"),
    ("'cause", "because"),
];

/// Leading fillers (matched on bare words) that subtitles drop.
const LEADING_FILLERS: &[&[&str]] = &[
    &["oh"],
    &["well"],
    &["um"],
    &["uh"],
    &["so"],
    &["look"],
    &["okay", "so"],
    &["you", "know"],
    &["i", "mean"],
];

/// Inline fillers, set off by commas, that subtitles drop.
const INLINE_FILLERS: &[&[&str]] = &[
    &["you", "know"],
    &["i", "mean"],
    &["like"],
    &["um"],
    &["uh"],
];

fn reword(text: &str, rng: &mut SplitMix64, params: &BroadcastParams) -> String {
    let mut words: Vec<String> = text.split_whitespace().map(str::to_string).collect();

    // Leading filler ending in a comma: "Oh, I see" -> "I see".
    for filler in LEADING_FILLERS {
        if words.len() > filler.len()
            && filler.iter().zip(&words).all(|(f, w)| bare(w) == *f)
            && words[filler.len() - 1].ends_with(',')
            && rng.chance(params.trim_rate)
        {
            words.drain(..filler.len());
            words[0] = capitalise(&words[0]);
            break;
        }
    }

    let mut out: Vec<String> = Vec::with_capacity(words.len());
    let mut k = 0;
    while k < words.len() {
        let word = &words[k];
        // ", you know," -> ","
        let inline = INLINE_FILLERS.iter().find(|filler| {
            k > 0
                && out.last().is_some_and(|w| w.ends_with(','))
                && k + filler.len() <= words.len()
                && filler.iter().zip(&words[k..]).all(|(f, w)| bare(w) == *f)
                && words[k + filler.len() - 1].ends_with(',')
        });
        if let Some(filler) = inline
            && rng.chance(params.trim_rate)
        {
            k += filler.len();
            continue;
        }
        // Stutters and repeats: "No, no, no." -> "No." ; "I- I" -> "I".
        if let Some(previous) = out.last()
            && bare(previous) == bare(word)
            && !bare(word).is_empty()
            && rng.chance(params.trim_rate)
        {
            let punctuation = trailing_punctuation(word).to_string();
            let previous = out.last_mut().expect("checked above");
            let kept = previous
                .trim_end_matches(|c: char| !c.is_alphanumeric())
                .to_string();
            *previous = kept + &punctuation;
            k += 1;
            continue;
        }
        if let Some(next) = words.get(k + 1)
            && trailing_punctuation(word).is_empty()
            && let Some((_, _, contracted)) = CONTRACTIONS
                .iter()
                .find(|(a, b, _)| bare(word) == *a && bare(next) == *b)
            && rng.chance(params.contraction_rate)
        {
            let mut joined = if starts_upper(word) {
                capitalise(contracted)
            } else {
                contracted.to_string()
            };
            joined.push_str(trailing_punctuation(next));
            out.push(joined);
            k += 2;
            continue;
        }
        if let Some((_, standard)) = CASUAL_FORMS
            .iter()
            .find(|(casual, _)| bare(word) == *casual)
            && rng.chance(params.contraction_rate)
        {
            let mut replaced = if starts_upper(word) {
                capitalise(standard)
            } else {
                standard.to_string()
            };
            replaced.push_str(trailing_punctuation(word));
            out.push(replaced);
            k += 1;
            continue;
        }
        out.push(word.clone());
        k += 1;
    }

    // Tag questions on long lines: "..., right?" -> "...?"
    if out.len() > 8 {
        let last = bare(out.last().expect("more than eight words"));
        let before = &out[out.len() - 2];
        if ["right", "okay", "huh", "yeah"].contains(&last.as_str())
            && before.ends_with(',')
            && rng.chance(params.trim_rate)
        {
            let mark = trailing_punctuation(out.last().expect("checked")).to_string();
            out.pop();
            let before = out.last_mut().expect("more than seven words");
            before.pop();
            before.push_str(if mark.is_empty() { "." } else { &mark });
        }
    }
    out.join(" ")
}

/// Cuts `text` into `pieces` parts near equal length, preferring sentence
/// ends, then commas and dashes, then any space.
fn split_text(text: &str, pieces: usize) -> Vec<String> {
    if pieces <= 1 {
        return vec![text.to_string()];
    }
    let chars: Vec<char> = text.chars().collect();
    // Candidate cut positions: index of a space after which a piece starts,
    // with a cost for its kind.
    let candidates: Vec<(usize, usize)> = (1..chars.len())
        .filter(|&k| chars[k] == ' ')
        .map(|k| {
            let cost = match chars[k - 1] {
                '.' | '?' | '!' => 0,
                ',' | ';' | ':' | '-' | '\u{2014}' => 8,
                _ => 20,
            };
            (k, cost)
        })
        .collect();
    let mut cuts = Vec::new();
    let mut from = 0;
    for piece in 1..pieces {
        let target = chars.len() * piece / pieces;
        let best = candidates
            .iter()
            .filter(|(k, _)| *k > from)
            .min_by_key(|(k, cost)| k.abs_diff(target) + cost);
        if let Some(&(k, _)) = best {
            cuts.push(k);
            from = k;
        }
    }
    let mut parts = Vec::new();
    let mut start = 0;
    for cut in cuts {
        parts.push(
            chars[start..cut]
                .iter()
                .collect::<String>()
                .trim()
                .to_string(),
        );
        start = cut + 1;
    }
    parts.push(chars[start..].iter().collect::<String>().trim().to_string());
    parts.retain(|p| !p.is_empty());
    parts
}

/// Breaks a piece into two rows at the space nearest its middle when it is
/// longer than one row.
fn wrap_rows(text: &str, row_chars: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= row_chars {
        return text.to_string();
    }
    let middle = chars.len() / 2;
    match (0..chars.len())
        .filter(|&k| chars[k] == ' ')
        .min_by_key(|k| k.abs_diff(middle))
    {
        Some(k) => {
            let first: String = chars[..k].iter().collect();
            let second: String = chars[k + 1..].iter().collect();
            format!("{first}\n{second}")
        }
        None => text.to_string(),
    }
}

/// Renders cues as SRT (1-based numbers, `HH:MM:SS,mmm`).
pub fn to_srt(cues: &[AlignCue]) -> String {
    let mut out = String::new();
    for (number, cue) in cues.iter().enumerate() {
        out.push_str(&format!(
            "{}\n{} --> {}\n{}\n\n",
            number + 1,
            format_timestamp(cue.start_ms),
            format_timestamp(cue.end_ms),
            cue.text
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use viss_text::align::{
        AlignParams, Alignment, ScriptDialogue, align_lines, boundary_errors, cue_contexts,
        line_accuracy, line_contexts, scenario_spans, script_dialogue, truth_alignment,
        unit_line_ranges,
    };
    use viss_text::bm25::tokenize;
    use viss_text::scenario::{ScenarioParams, build_scenarios};
    use viss_text::script::{ParseOptions, ScriptFormat, parse_script};
    use viss_text::subtitles::{SubtitleFormat, parse_subtitles};

    fn fixture(name: &str) -> ScriptDialogue {
        let text = match name {
            "short" => include_str!("../../../tests/fixtures/align/short.txt"),
            _ => include_str!("../../../tests/fixtures/align/episode.txt"),
        };
        let options = ParseOptions {
            format: Some(ScriptFormat::FriendsTranscript),
            ..ParseOptions::default()
        };
        script_dialogue(&parse_script(text, name, &options).expect("fixture parses"))
    }

    fn derive(
        dialogue: &ScriptDialogue,
        seed: u64,
        params: &BroadcastParams,
    ) -> (Vec<AlignCue>, GroundTruth) {
        derive_broadcast_subtitles(&dialogue.lines, &dialogue.scene_of_line, seed, params).unwrap()
    }

    #[test]
    fn fixtures_have_the_intended_size() {
        let short = fixture("short");
        assert_eq!(short.lines.len(), 60);
        assert_eq!(short.scene_of_line.last(), Some(&2));
        let episode = fixture("episode");
        assert_eq!(episode.lines.len(), 418);
        assert_eq!(episode.scene_of_line.last(), Some(&11));
        let speakers: std::collections::BTreeSet<_> = episode
            .lines
            .iter()
            .filter_map(|l| l.speaker.clone())
            .collect();
        assert_eq!(speakers.len(), 6, "{speakers:?}");
    }

    #[test]
    fn same_seed_same_subtitles_other_seed_other_subtitles() {
        let dialogue = fixture("episode");
        let params = BroadcastParams::default();
        assert_eq!(derive(&dialogue, 5, &params), derive(&dialogue, 5, &params));
        assert_ne!(
            derive(&dialogue, 5, &params).0,
            derive(&dialogue, 6, &params).0
        );
    }

    #[test]
    fn truth_and_timing_are_consistent() {
        let dialogue = fixture("episode");
        let params = BroadcastParams::default();
        for seed in 1..=5 {
            let (cues, truth) = derive(&dialogue, seed, &params);
            assert_eq!(truth.line_cues.len(), dialogue.lines.len());
            let mut carried = vec![0usize; cues.len()];
            for positions in &truth.line_cues {
                for pair in positions.windows(2) {
                    assert_eq!(pair[1], pair[0] + 1, "a line's cues are consecutive");
                }
                for &p in positions {
                    carried[p] += 1;
                }
            }
            for (position, cue) in cues.iter().enumerate() {
                assert_eq!(cue.index, position);
                let extra = truth.extra_cues.contains(&position);
                assert_eq!(
                    carried[position] == 0,
                    extra,
                    "cue {position}: {:?}",
                    cue.text
                );
                assert!(carried[position] <= 2);
                let duration = cue.end_ms - cue.start_ms;
                assert!((1_000..=6_000).contains(&duration), "{cue:?}");
                assert!(cue.text.lines().count() <= 2, "{cue:?}");
                if position > 0 {
                    assert!(cue.start_ms >= cues[position - 1].end_ms + params.min_gap_ms);
                }
            }
            // The uncut material: a few percent of lines, never most.
            let dropped = truth.line_cues.iter().filter(|c| c.is_empty()).count();
            let share = dropped as f64 / dialogue.lines.len() as f64;
            assert!(
                (0.02..=0.12).contains(&share),
                "seed {seed}: {dropped} dropped"
            );
            // Splits and two-speaker merges both occur.
            assert!(truth.line_cues.iter().any(|c| c.len() >= 2));
            assert!(cues.iter().any(|c| c.text.starts_with("- ")));
            // Scene changes leave a longer gap before the next scene's first cue.
            for pair in dialogue
                .scene_of_line
                .windows(2)
                .enumerate()
                .filter(|(_, s)| s[0] != s[1])
            {
                let (last_of_scene, first_of_next) = (pair.0, pair.0 + 1);
                if let (Some(&a), Some(&b)) = (
                    truth.line_cues[last_of_scene].last(),
                    truth.line_cues[first_of_next].first(),
                ) {
                    assert!(cues[b].start_ms - cues[a].end_ms >= params.min_scene_gap_ms);
                }
            }
        }
    }

    #[test]
    fn cut_scenes_leave_no_cue() {
        let dialogue = fixture("short");
        let params = BroadcastParams {
            cut_scenes: vec![1],
            ..BroadcastParams::default()
        };
        let (_, truth) = derive(&dialogue, 9, &params);
        for (positions, scene) in truth.line_cues.iter().zip(&dialogue.scene_of_line) {
            assert_eq!(positions.is_empty(), *scene == 1 || positions.is_empty());
            if *scene == 1 {
                assert!(positions.is_empty());
            }
        }
    }

    #[test]
    fn rewording_trims_fillers_stutters_and_contracts() {
        let always = BroadcastParams {
            trim_rate: 1.0,
            contraction_rate: 1.0,
            ..BroadcastParams::default()
        };
        let mut rng = SplitMix64(1);
        let mut reword = |text: &str| reword(text, &mut rng, &always);
        assert_eq!(
            reword("Oh, it is not the boiler. I do not know."),
            "It's not the boiler. I don't know."
        );
        assert_eq!(reword("No, no, no. I- I cannot."), "No. I can't.");
        assert_eq!(
            reword("We are gonna be late, you know, again."),
            "We're going to be late, again."
        );
        assert_eq!(
            reword("You left the gate open again last night and the fox got in, right?"),
            "You left the gate open again last night and the fox got in?"
        );
        let never = BroadcastParams {
            trim_rate: 0.0,
            contraction_rate: 0.0,
            ..BroadcastParams::default()
        };
        let text = "Oh, it is not the boiler, you know, it is gonna be fine.";
        assert_eq!(super::reword(text, &mut SplitMix64(1), &never), text);
    }

    #[test]
    fn long_lines_split_at_sentence_ends_and_wrap_into_two_rows() {
        let text = "I told him we would take pictures this time. So he cannot pretend it went away \
                    on its own, like last winter.";
        let parts = split_text(text, 2);
        assert_eq!(parts[0], "I told him we would take pictures this time.");
        assert_eq!(parts.concat().len() + 1, text.len());
        let wrapped = wrap_rows("So he cannot pretend it went away on its own.", 42);
        assert_eq!(wrapped, "So he cannot pretend it\nwent away on its own.");
        assert_eq!(wrap_rows("Short one.", 42), "Short one.");
    }

    #[test]
    fn srt_output_parses_back_to_the_same_cues() {
        let dialogue = fixture("short");
        let (cues, _) = derive(&dialogue, 4, &BroadcastParams::default());
        let parsed =
            parse_subtitles(&to_srt(&cues), "derived.srt", Some(SubtitleFormat::Srt)).unwrap();
        assert_eq!(parsed.cues.len(), cues.len());
        for (ours, theirs) in cues.iter().zip(&parsed.cues) {
            assert_eq!(
                (ours.start_ms, ours.end_ms),
                (theirs.start_ms, theirs.end_ms)
            );
            assert_eq!(ours.text.replace('\n', " "), theirs.text);
            if ours.text.starts_with("- ") && ours.text.contains("\n- ") {
                assert_eq!(theirs.turns.len(), 2, "{theirs:?}");
            }
        }
    }

    #[test]
    fn rejects_bad_params_and_mismatched_scenes() {
        let dialogue = fixture("short");
        let bad = BroadcastParams {
            drop_rate: 1.5,
            ..BroadcastParams::default()
        };
        assert!(matches!(
            derive_broadcast_subtitles(&dialogue.lines, &dialogue.scene_of_line, 1, &bad),
            Err(BroadcastError::InvalidParam {
                name: "drop_rate",
                ..
            })
        ));
        assert_eq!(
            derive_broadcast_subtitles(&dialogue.lines, &[0], 1, &BroadcastParams::default()),
            Err(BroadcastError::SceneCountMismatch {
                lines: 60,
                scenes: 1
            })
        );
        let parsed: BroadcastParams = serde_json::from_str(r#"{"drop_rate": 0.1}"#).unwrap();
        assert_eq!(parsed.drop_rate, 0.1);
        assert!(serde_json::from_str::<BroadcastParams>(r#"{"drop": 0.1}"#).is_err());
    }

    // The aligner on subtitles derived from the fixtures with a known truth.
    const SHORT: &str = include_str!("../../../tests/fixtures/align/short.txt");
    const EPISODE: &str = include_str!("../../../tests/fixtures/align/episode.txt");

    /// A deterministic LEXICAL stand-in for sentence embeddings: hashed
    /// bag-of-words counts (FNV-1a into 256 buckets). It only lets the tests
    /// exercise the semantic code path without a model; it knows nothing
    /// about meaning.
    fn hashed_bag_of_words(text: &str) -> Vec<f32> {
        let mut vector = vec![0.0f32; 256];
        for token in tokenize(text) {
            let hash = token.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            vector[(hash % 256) as usize] += 1.0;
        }
        vector
    }

    struct Episode {
        dialogue: ScriptDialogue,
        units: Vec<(usize, usize)>,
        cues: Vec<AlignCue>,
        truth: Alignment,
    }

    fn episode(text: &str, seed: u64, broadcast: &BroadcastParams, min_lines: usize) -> Episode {
        let options = ParseOptions {
            format: Some(ScriptFormat::FriendsTranscript),
            ..ParseOptions::default()
        };
        let script = parse_script(text, "fixture.txt", &options).expect("fixture parses");
        let dialogue = script_dialogue(&script);
        let scenario_params = ScenarioParams {
            min_lines,
            ..ScenarioParams::default()
        };
        let units = build_scenarios(&script, &scenario_params).expect("default params are valid");
        let units = unit_line_ranges(&dialogue, &units)
            .into_iter()
            .flatten()
            .collect();
        let (cues, truth) =
            derive_broadcast_subtitles(&dialogue.lines, &dialogue.scene_of_line, seed, broadcast)
                .expect("default broadcast params are valid");
        let truth = truth_alignment(&dialogue.lines, &cues, &truth.line_cues).unwrap();
        Episode {
            dialogue,
            units,
            cues,
            truth,
        }
    }

    fn stand_in_embeddings(ep: &Episode, window: usize) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        let lines = line_contexts(&ep.dialogue.lines, window)
            .iter()
            .map(|t| hashed_bag_of_words(t))
            .collect();
        let cues = cue_contexts(&ep.cues, window)
            .iter()
            .map(|t| hashed_bag_of_words(t))
            .collect();
        (lines, cues)
    }

    fn assert_monotone(alignment: &Alignment, cues: &[AlignCue]) {
        let position = |index: usize| cues.iter().position(|c| c.index == index).unwrap();
        let mut last_seen = 0;
        for line in &alignment.lines {
            let positions: Vec<usize> = line.cues.iter().map(|&c| position(c)).collect();
            for pair in positions.windows(2) {
                assert_eq!(
                    pair[1],
                    pair[0] + 1,
                    "line {} spans non-consecutive cues",
                    line.line
                );
            }
            if let Some(&first) = positions.first() {
                assert!(first >= last_seen, "line {} goes back in time", line.line);
                last_seen = *positions.last().unwrap();
            }
            assert!((0.0..=1.0).contains(&line.confidence));
        }
    }

    #[test]
    fn short_fixture_lexical_only_aligns_monotonically_and_accurately() {
        let params = AlignParams::default();
        for seed in 1..=5 {
            let ep = episode(SHORT, seed, &BroadcastParams::default(), 5);
            assert_eq!(ep.dialogue.lines.len(), 60);
            let alignment = align_lines(&ep.dialogue.lines, &ep.cues, None, &params).unwrap();
            assert_monotone(&alignment, &ep.cues);
            let accuracy = line_accuracy(&alignment, &ep.truth).unwrap();
            assert!(accuracy.exact_rate >= 0.9, "seed {seed}: {accuracy:?}");
            assert!(accuracy.overlap_rate >= accuracy.exact_rate);

            let predicted = scenario_spans(&alignment, &ep.cues, &ep.units, &params);
            let expected = scenario_spans(&ep.truth, &ep.cues, &ep.units, &params);
            let errors = boundary_errors(&predicted, &expected).unwrap();
            assert_eq!(errors.missing, 0);
            assert!(errors.compared >= 3, "{errors:?}");
            assert!(
                errors.mean_start_error_s < 1.0 && errors.mean_end_error_s < 1.0,
                "seed {seed}: {errors:?}"
            );
            assert!(
                errors.max_start_error_s < 6.0 && errors.max_end_error_s < 6.0,
                "seed {seed}: {errors:?}"
            );
        }
    }

    #[test]
    fn short_fixture_with_lexical_stand_in_for_embeddings() {
        let params = AlignParams::default();
        for seed in 1..=5 {
            let ep = episode(SHORT, seed, &BroadcastParams::default(), 5);
            let (line_vecs, cue_vecs) = stand_in_embeddings(&ep, params.window);
            let alignment = align_lines(
                &ep.dialogue.lines,
                &ep.cues,
                Some((&line_vecs, &cue_vecs)),
                &params,
            )
            .unwrap();
            assert_monotone(&alignment, &ep.cues);
            let accuracy = line_accuracy(&alignment, &ep.truth).unwrap();
            assert!(accuracy.exact_rate >= 0.9, "seed {seed}: {accuracy:?}");
            let predicted = scenario_spans(&alignment, &ep.cues, &ep.units, &params);
            let expected = scenario_spans(&ep.truth, &ep.cues, &ep.units, &params);
            let errors = boundary_errors(&predicted, &expected).unwrap();
            assert!(
                errors.mean_start_error_s < 1.0 && errors.mean_end_error_s < 1.0,
                "seed {seed}: {errors:?}"
            );
        }
    }

    #[test]
    fn episode_fixture_accuracy_floor() {
        let params = AlignParams::default();
        let ep = episode(EPISODE, 7, &BroadcastParams::default(), 10);
        assert!(
            ep.dialogue.lines.len() >= 380,
            "{}",
            ep.dialogue.lines.len()
        );
        let alignment = align_lines(&ep.dialogue.lines, &ep.cues, None, &params).unwrap();
        assert_monotone(&alignment, &ep.cues);
        let accuracy = line_accuracy(&alignment, &ep.truth).unwrap();
        assert!(accuracy.exact_rate >= 0.85, "{accuracy:?}");
    }

    #[test]
    fn lines_missing_from_the_subtitles_are_unmatched() {
        let broadcast = BroadcastParams {
            drop_rate: 0.1,
            ..BroadcastParams::default()
        };
        let (mut absent, mut absent_unmatched) = (0, 0);
        for seed in 1..=5 {
            let ep = episode(SHORT, seed, &broadcast, 5);
            let alignment =
                align_lines(&ep.dialogue.lines, &ep.cues, None, &AlignParams::default()).unwrap();
            let accuracy = line_accuracy(&alignment, &ep.truth).unwrap();
            absent += accuracy.absent;
            absent_unmatched += accuracy.absent_unmatched;
        }
        assert!(absent >= 10, "{absent}");
        // Cheap line skips and dear cue skips favour matching (splits need
        // that); a cut line next to a subtitle-only cue is the usual miss.
        assert!(
            absent_unmatched as f64 >= 0.7 * absent as f64,
            "{absent_unmatched} of {absent}"
        );
    }

    #[test]
    fn units_with_no_line_in_the_broadcast_are_flagged_without_a_range() {
        let broadcast = BroadcastParams {
            cut_scenes: vec![1],
            ..BroadcastParams::default()
        };
        let ep = episode(SHORT, 2, &broadcast, 5);
        let params = AlignParams::default();
        let alignment = align_lines(&ep.dialogue.lines, &ep.cues, None, &params).unwrap();
        let spans = scenario_spans(&alignment, &ep.cues, &ep.units, &params);
        let mut cut_units = 0;
        for (span, &(first, _)) in spans.iter().zip(&ep.units) {
            if ep.dialogue.scene_of_line[first] == 1 {
                cut_units += 1;
                assert!(span.flagged, "{span:?}");
                assert_eq!((span.start_ms, span.end_ms), (None, None), "{span:?}");
                assert!(
                    span.reason.as_deref().unwrap().starts_with("none of its"),
                    "{span:?}"
                );
            } else {
                assert!(span.start_ms.is_some(), "{span:?}");
            }
        }
        assert!(cut_units >= 1);
        // A range that names no line is flagged too, never given a time.
        let empty = scenario_spans(&alignment, &ep.cues, &[(10_000, 10_010), (5, 2)], &params);
        assert!(empty.iter().all(|s| s.flagged && s.start_ms.is_none()));
    }
}

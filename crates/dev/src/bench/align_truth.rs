//! `viss bench align --truth FILE`: how well the aligner does on a user's own episode, given
//! what is true of it.
//!
//! The truth file (TOML, paths relative to it) names a script and a subtitle file, and says for
//! each dialogue line which cues carry it, for each scenario where it is, and which cues carry
//! no dialogue. Cues are named by their number: their 1-based position in the subtitle file (the
//! counter of a well-formed SRT file). The harness runs what `viss build --until align` runs on
//! them (script parsing, scenario cutting, subtitle parsing and screening, embedding, the
//! dynamic program) and reports:
//!
//! - line accuracy: the share of lines whose predicted cues are exactly the true ones, start at
//!   the true first cue, or share any cue with the true ones (a line absent from the subtitles
//!   is right when it is left unmatched);
//! - span accuracy: the share of scenarios whose start and end are both within 1 s, and within
//!   2 s, of the truth (a scenario given no span is wrong);
//! - how many spans were flagged, and how many hold a cue the truth says is not dialogue;
//! - how many of those cues the screen kept out, and which dialogue cues it kept out wrongly.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use viss_models::{ModelCache, ModelError};
use viss_text::align::{
    AlignCue, AlignParams, Alignment, ScenarioSpan, align_lines, cue_contexts, line_contexts,
    script_dialogue, unit_line_ranges, unit_spans,
};
use viss_text::embed::{self, MemoryEmbeddingCache, SentenceEmbedderOptions, embed_cached};
use viss_text::scenario::{ScenarioParams, build_scenarios};
use viss_text::script::{ParseOptions, ScriptFormat, parse_script};
use viss_text::subtitles::non_dialogue::{NonDialogue, ScreenOptions, Screened, screen_cues};
use viss_text::subtitles::{Cue, parse_timestamp, read_subtitles};

/// What is true of one episode's alignment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlignTruth {
    /// The transcript, relative to the truth file.
    pub script: PathBuf,
    /// `None`: detected from the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script_format: Option<ScriptFormat>,
    /// The subtitle file (SRT, WebVTT or ASS), relative to the truth file.
    pub subtitles: PathBuf,
    /// Title cards of the show (its title, for one), as `stages/parse_subtitles.toml` takes them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub title_cards: Vec<String>,
    /// Per dialogue line, the cues carrying it.
    pub lines: Vec<LineTruth>,
    /// Per scenario, where it is.
    #[serde(default)]
    pub scenarios: Vec<ScenarioTruth>,
    /// Cues that carry no dialogue of the episode.
    #[serde(default)]
    pub not_dialogue: Vec<NonDialogueTruth>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineTruth {
    /// The 1-based line of the script where the dialogue line starts.
    pub script_line: usize,
    /// Cue numbers carrying it, ascending; empty when the line is not in the subtitles.
    pub cues: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioTruth {
    /// The scenario's id within its episode (`sc` and hex digits, as `viss status` shows it).
    pub id: String,
    /// `HH:MM:SS,mmm` (or `MM:SS.mmm`): the start of its first and the end of its last cue.
    pub start: String,
    pub end: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NonDialogueTruth {
    pub cue: usize,
    pub kind: NonDialogue,
}

#[derive(Debug, thiserror::Error)]
pub enum AlignTruthError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("aligning {path}: {message}")]
    Align { path: PathBuf, message: String },
}

/// How the aligner did against the truth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlignTruthReport {
    pub truth: PathBuf,
    /// The embedder, or `None` when alpha is 0 (lexical only).
    pub embedder: Option<String>,
    pub lines: usize,
    /// Lines the truth says are not in the subtitles.
    pub absent_lines: usize,
    pub exact: Rate,
    pub first_cue: Rate,
    pub any_cue: Rate,
    pub scenarios: usize,
    pub spans_within_1s: Rate,
    pub spans_within_2s: Rate,
    pub flagged: usize,
    /// Scenario spans that took in a cue the truth says is not dialogue: it lies inside the
    /// predicted span but outside the true one.
    pub spans_with_non_dialogue: usize,
    /// Cues the truth says are not dialogue, and how many of them the screen kept out.
    pub non_dialogue_cues: usize,
    pub non_dialogue_kept_out: usize,
    /// Per scenario: its id, predicted and true span in seconds, and the flag's reason.
    pub per_scenario: Vec<ScenarioOutcome>,
    /// Dialogue cues the screen kept out (the truth says they carry a line), by number.
    pub dialogue_kept_out: Vec<usize>,
    /// Lines whose predicted cues are not exactly the true ones.
    pub wrong_lines: Vec<WrongLine>,
}

impl AlignTruthReport {
    /// The summary `viss bench` prints after the JSON report.
    pub fn summary(&self) -> String {
        let percent = |rate: &Rate| {
            format!(
                "{:.1}% ({}/{})",
                rate.rate * 100.0,
                rate.correct,
                rate.total
            )
        };
        format!(
            "align on {}: lines exact {}, first cue {}, any cue {}; spans within 1 s {}, \
             within 2 s {}; {} flagged, {} taking in a non-dialogue cue; {} of {} non-dialogue \
             cues kept out",
            self.truth.display(),
            percent(&self.exact),
            percent(&self.first_cue),
            percent(&self.any_cue),
            percent(&self.spans_within_1s),
            percent(&self.spans_within_2s),
            self.flagged,
            self.spans_with_non_dialogue,
            self.non_dialogue_kept_out,
            self.non_dialogue_cues
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WrongLine {
    pub script_line: usize,
    pub predicted: Vec<usize>,
    pub expected: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    pub correct: usize,
    pub total: usize,
    pub rate: f64,
}

impl Rate {
    fn of(correct: usize, total: usize) -> Self {
        Self {
            correct,
            total,
            rate: if total == 0 {
                0.0
            } else {
                correct as f64 / total as f64
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioOutcome {
    pub id: String,
    pub predicted_s: Option<(f64, f64)>,
    pub true_s: (f64, f64),
    pub flag: Option<String>,
}

/// Reads a truth file.
pub fn read_truth(path: &Path) -> Result<AlignTruth, AlignTruthError> {
    let text = std::fs::read_to_string(path).map_err(|source| AlignTruthError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|error| AlignTruthError::Invalid {
        path: path.to_path_buf(),
        message: error.to_string(),
    })
}

/// Runs the aligner on the truth file's episode with `params` and scores it; `screen` false
/// keeps every cue in (what `screen_non_dialogue = false` in stages/parse_subtitles.toml does).
pub fn evaluate_alignment(
    truth_path: &Path,
    params: &AlignParams,
    screen: bool,
) -> Result<AlignTruthReport, AlignTruthError> {
    let truth = read_truth(truth_path)?;
    let dir = truth_path.parent().unwrap_or(Path::new("."));
    let invalid = |message: String| AlignTruthError::Invalid {
        path: truth_path.to_path_buf(),
        message,
    };
    let read = |relative: &Path| {
        let path = dir.join(relative);
        std::fs::read(&path).map_err(|source| AlignTruthError::Io { path, source })
    };

    let script_bytes = read(&truth.script)?;
    let script_text = String::from_utf8_lossy(&script_bytes);
    let script_label = truth.script.display().to_string();
    let options = ParseOptions {
        format: truth.script_format,
        ..ParseOptions::default()
    };
    let script = parse_script(&script_text, &script_label, &options)
        .map_err(|error| invalid(error.to_string()))?;
    let units = build_scenarios(&script, &ScenarioParams::default())
        .map_err(|error| invalid(error.to_string()))?;
    let dialogue = script_dialogue(&script);

    let subtitle_label = truth.subtitles.display().to_string();
    let (subtitles, _) = read_subtitles(read(&truth.subtitles)?, &subtitle_label, None)
        .map_err(|error| invalid(error.to_string()))?;
    let number_of = cue_numbers(&subtitles.cues);
    let screened = if !screen {
        Screened::unscreened(subtitles.cues.clone())
    } else {
        screen_cues(
            subtitles.cues.clone(),
            &ScreenOptions {
                titles: truth.title_cards.clone(),
            },
        )
    };
    let cues: Vec<AlignCue> = screened.dialogue.iter().map(AlignCue::from).collect();

    let align_error = |message: String| AlignTruthError::Align {
        path: truth_path.to_path_buf(),
        message,
    };
    let (embeddings, embedder) = if params.alpha > 0.0 {
        let files = ModelCache::from_env()?.ensure_text_embedder()?;
        let embedder = embed::load(&files, SentenceEmbedderOptions::default(), None)
            .map_err(|error| align_error(error.to_string()))?;
        let cache = MemoryEmbeddingCache::default();
        let line_vecs = embed_cached(
            embedder.as_ref(),
            &cache,
            &line_contexts(&dialogue.lines, params.window),
        )
        .map_err(|error| align_error(error.to_string()))?;
        let cue_vecs = embed_cached(
            embedder.as_ref(),
            &cache,
            &cue_contexts(&cues, params.window),
        )
        .map_err(|error| align_error(error.to_string()))?;
        (Some((line_vecs, cue_vecs)), Some(embedder.identity()))
    } else {
        (None, None)
    };
    let alignment = align_lines(
        &dialogue.lines,
        &cues,
        embeddings
            .as_ref()
            .map(|(lines, cues)| (lines.as_slice(), cues.as_slice())),
        params,
    )
    .map_err(|error| align_error(error.to_string()))?;

    let mut report = AlignTruthReport {
        truth: truth_path.to_path_buf(),
        embedder,
        lines: 0,
        absent_lines: 0,
        exact: Rate::of(0, 0),
        first_cue: Rate::of(0, 0),
        any_cue: Rate::of(0, 0),
        scenarios: 0,
        spans_within_1s: Rate::of(0, 0),
        spans_within_2s: Rate::of(0, 0),
        flagged: 0,
        spans_with_non_dialogue: 0,
        non_dialogue_cues: truth.not_dialogue.len(),
        non_dialogue_kept_out: 0,
        per_scenario: Vec::new(),
        dialogue_kept_out: Vec::new(),
        wrong_lines: Vec::new(),
    };
    score_lines(
        &truth,
        &dialogue.source_line_of_line,
        &alignment,
        &number_of,
        &mut report,
    )
    .map_err(invalid)?;

    let ranges = unit_line_ranges(&dialogue, &units);
    let span_of_unit: HashMap<&str, ScenarioSpan> = units
        .iter()
        .zip(unit_spans(&alignment, &cues, &ranges, params))
        .filter_map(|(unit, span)| Some((unit.id.as_str(), span?)))
        .collect();
    report.flagged = span_of_unit.values().filter(|span| span.flagged).count();
    let not_dialogue_times: Vec<(u64, u64)> = truth
        .not_dialogue
        .iter()
        .filter_map(|n| {
            let index = number_of.iter().position(|&number| number == n.cue)?;
            let cue = subtitles.cues.iter().find(|c| c.index == index)?;
            Some((cue.start_ms, cue.end_ms))
        })
        .collect();
    let (mut within_1, mut within_2) = (0, 0);
    for scenario in &truth.scenarios {
        let start = parse_timestamp(&scenario.start).ok_or_else(|| {
            invalid(format!(
                "scenario {}: start {:?} is not a time",
                scenario.id, scenario.start
            ))
        })?;
        let end = parse_timestamp(&scenario.end).ok_or_else(|| {
            invalid(format!(
                "scenario {}: end {:?} is not a time",
                scenario.id, scenario.end
            ))
        })?;
        let span = span_of_unit.get(scenario.id.as_str()).ok_or_else(|| {
            invalid(format!(
                "scenario {} is not one of the script's scenarios ({})",
                scenario.id,
                units
                    .iter()
                    .map(|u| u.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let predicted = span.start_ms.zip(span.end_ms);
        if let Some((p_start, p_end)) = predicted {
            let error = p_start.abs_diff(start).max(p_end.abs_diff(end));
            within_1 += usize::from(error <= 1000);
            within_2 += usize::from(error <= 2000);
            // A sound cue inside a scene is inside its span by right; one the span took in
            // beyond the scene's true edges is what a recap, a song or an advert does to it.
            let taken_in =
                |&&(s, e): &&(u64, u64)| s >= p_start && e <= p_end && !(s >= start && e <= end);
            if not_dialogue_times.iter().any(|time| taken_in(&time)) {
                report.spans_with_non_dialogue += 1;
            }
        }
        report.per_scenario.push(ScenarioOutcome {
            id: scenario.id.clone(),
            predicted_s: predicted.map(|(s, e)| (s as f64 / 1000.0, e as f64 / 1000.0)),
            true_s: (start as f64 / 1000.0, end as f64 / 1000.0),
            flag: span.reason.clone().filter(|_| span.flagged),
        });
    }
    report.scenarios = truth.scenarios.len();
    report.spans_within_1s = Rate::of(within_1, report.scenarios);
    report.spans_within_2s = Rate::of(within_2, report.scenarios);

    let kept_out: BTreeSet<usize> = screened
        .excluded
        .iter()
        .map(|cue| number_of[cue.index])
        .collect();
    report.non_dialogue_kept_out = truth
        .not_dialogue
        .iter()
        .filter(|n| kept_out.contains(&n.cue))
        .count();
    let carrying: BTreeSet<usize> = truth
        .lines
        .iter()
        .flat_map(|l| l.cues.iter().copied())
        .collect();
    report.dialogue_kept_out = kept_out.intersection(&carrying).copied().collect();
    Ok(report)
}

/// Each cue's number (1-based position in the file), by [`Cue::index`].
fn cue_numbers(cues: &[Cue]) -> Vec<usize> {
    let mut by_file: Vec<&Cue> = cues.iter().collect();
    by_file.sort_by_key(|cue| cue.source_line);
    let mut numbers = vec![0; cues.len()];
    for (position, cue) in by_file.iter().enumerate() {
        numbers[cue.index] = position + 1;
    }
    numbers
}

fn score_lines(
    truth: &AlignTruth,
    source_line_of_line: &[usize],
    alignment: &Alignment,
    number_of: &[usize],
    report: &mut AlignTruthReport,
) -> Result<(), String> {
    let predicted: BTreeMap<usize, Vec<usize>> = alignment
        .lines
        .iter()
        .map(|line| {
            let cues = line.cues.iter().map(|&index| number_of[index]).collect();
            (source_line_of_line[line.line], cues)
        })
        .collect();
    let (mut exact, mut first, mut any) = (0, 0, 0);
    for line in &truth.lines {
        let ours = predicted.get(&line.script_line).ok_or_else(|| {
            format!(
                "script line {} is not the first line of a dialogue line of the script",
                line.script_line
            )
        })?;
        let mut expected = line.cues.clone();
        expected.sort_unstable();
        report.absent_lines += usize::from(expected.is_empty());
        exact += usize::from(*ours == expected);
        if *ours != expected {
            report.wrong_lines.push(WrongLine {
                script_line: line.script_line,
                predicted: ours.clone(),
                expected: expected.clone(),
            });
        }
        first += usize::from(ours.first() == expected.first());
        any += usize::from(
            (ours.is_empty() && expected.is_empty()) || ours.iter().any(|c| expected.contains(c)),
        );
    }
    report.lines = truth.lines.len();
    report.exact = Rate::of(exact, report.lines);
    report.first_cue = Rate::of(first, report.lines);
    report.any_cue = Rate::of(any, report.lines);
    Ok(())
}

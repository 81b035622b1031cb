//! The paper's tables from whatever runs are judged (AgentViSS, tables 2, 4, 5, 9, 10, 13-14 and
//! 16, figures 5 and 6), each cell with its number of tasks and scenarios and a bootstrap
//! interval over scenarios, plus what the paper leaves out: paired model comparisons with
//! Holm's correction and each judge's own labels. A cell with too few scenarios says so
//! instead of giving an interval that would mislead.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::eval::agreement::{
    AgreementCounts, JudgeLabels, fleiss_kappa, judge_labels, krippendorff_alpha_ordinal,
};
use crate::eval::interval::{Bootstrap, Interval, Unit, holm};
use crate::eval::judgement::Task;
use crate::eval::label::Label;
use crate::eval::score::Tally;
use crate::eval::sotopia::Dimension;
use crate::stages::evaluate::Evaluation;

/// How the tables are computed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TableSettings {
    pub bootstrap: Bootstrap,
    /// Scenarios a cell needs for an interval or a comparison.
    pub min_scenarios: usize,
}

/// What the cells of the score tables hold.
pub const SCORE_MEASURE: &str = "score 0-100";

/// What the intervals resample, as every table states it.
pub const RESAMPLING_UNIT: &str = "scenarios (a scenario's runs and tasks are drawn together)";

/// One judged task of one character in one run: the unit the tables count.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub run: String,
    pub scenario: String,
    /// The model that played the character.
    pub model: String,
    pub mode: String,
    pub task: Task,
    /// The panel's label; `None`: unscored.
    pub label: Option<Label>,
    pub dialogue_type: String,
    pub group_size: usize,
    /// How far the character's outcome task depends on vision ("strongly" / "weakly").
    pub outcome_vision: String,
    /// The character's public message characters in the run.
    pub message_chars: usize,
    pub rounds: usize,
    /// Every run of a single model (not cross-play, no person in a role).
    pub self_play: bool,
}

/// The tasks of `evaluations` as observations.
pub fn observations(evaluations: &[(String, Evaluation)]) -> Vec<Observation> {
    let mut out = Vec::new();
    for (run, evaluation) in evaluations {
        let models: BTreeSet<&str> = evaluation.cast.iter().map(|(_, m)| m.as_str()).collect();
        for task in &evaluation.tasks {
            let index = task.role.index();
            if index >= evaluation.cast.len() {
                continue;
            }
            out.push(Observation {
                run: run.clone(),
                scenario: evaluation.scenario.clone(),
                model: evaluation.cast[index].1.clone(),
                mode: evaluation.mode.to_string(),
                task: task.task,
                label: task.verdict.label(),
                dialogue_type: evaluation.dialogue_type.to_string(),
                group_size: evaluation.cast.len(),
                outcome_vision: evaluation
                    .outcome_vision
                    .get(index)
                    .map_or("unknown".to_string(), ToString::to_string),
                message_chars: evaluation.message_chars.get(index).copied().unwrap_or(0),
                rounds: evaluation.rounds,
                self_play: models.len() == 1,
            });
        }
    }
    out
}

/// A table cell: a number with its interval, what it was computed from, or why it has none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub value: Option<f64>,
    pub interval: Option<Interval>,
    /// The tasks counted (scored and unscored).
    pub tally: Tally,
    /// Rubric cells (SOTOPIA-EVAL): the characters rated and those left unrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rated: Option<Rated>,
    pub scenarios: usize,
    /// Paired comparisons: the bootstrap p-value and its Holm-adjusted value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p_holm: Option<f64>,
    /// Why the value or the interval is absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What a cell counts when it is neither tasks nor rated characters (AgentSense's goals,
    /// answers, templates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted: Option<Counted>,
}

/// What a cell counted: `n` of `of`, and how many of them had no answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counted {
    pub n: usize,
    pub missing: usize,
    /// What is counted: `goals`, `answers`, `templates`.
    pub of: String,
}

/// How many characters a rubric cell averages, and how many it could not (too few judges).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rated {
    pub rated: usize,
    pub unrated: usize,
}

impl Cell {
    pub(crate) fn empty() -> Cell {
        Cell {
            value: None,
            interval: None,
            tally: Tally::default(),
            rated: None,
            scenarios: 0,
            p_value: None,
            p_holm: None,
            note: Some("no such tasks".to_string()),
            counted: None,
        }
    }
}

/// A table: rows of labelled cells under named columns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Table {
    /// File stem: `by_task`, `by_dialogue_type`, ...
    pub id: String,
    pub title: String,
    /// What a cell's number is.
    pub measure: String,
    /// The names of the row label columns (`model`, `mode`).
    pub row_header: Vec<String>,
    pub columns: Vec<String>,
    pub rows: Vec<Row>,
    pub resampling_unit: String,
    /// What a table without rows lacks.
    pub when_empty: String,
    /// Whether the report draws its cells as bars (not for p-values or agreement).
    #[serde(default = "drawn")]
    pub chart: bool,
}

fn drawn() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub label: Vec<String>,
    pub cells: Vec<Cell>,
}

/// Agreement among the judges over a set of tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgreementRow {
    pub scope: String,
    /// Tasks every judge labelled (Fleiss' kappa and the rates use these).
    pub complete_tasks: usize,
    /// Tasks with two or more labels (Krippendorff's alpha uses these).
    pub tasks: usize,
    pub fleiss_kappa: Option<f64>,
    pub all_agree: Option<f64>,
    pub all_differ: Option<f64>,
    pub krippendorff_alpha: Option<f64>,
    /// Why a coefficient is absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One judge's labels over every task it was given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeRow {
    /// Its place on the panel (1-based) and model.
    pub judge: usize,
    pub model: String,
    pub labels: JudgeLabels,
}

/// Every table of the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tables {
    pub runs: usize,
    pub scenarios: usize,
    pub settings: TableSettings,
    pub scores: Vec<Table>,
    pub agreement: Vec<AgreementRow>,
    pub judges: Vec<JudgeRow>,
    /// Tables the runs cannot fill, with why (e.g. one round count only).
    pub not_shown: Vec<String>,
    /// AgentSense runs judged (`evaluate_sense`) and the templates they come from.
    #[serde(default)]
    pub sense_runs: usize,
    #[serde(default)]
    pub sense_templates: usize,
}

/// The arms of the score tables: (model, mode) pairs of self-play runs, in order.
fn arms(observations: &[Observation]) -> Vec<(String, String)> {
    let set: BTreeSet<(String, String)> = observations
        .iter()
        .filter(|o| o.self_play)
        .map(|o| (o.model.clone(), o.mode.clone()))
        .collect();
    set.into_iter().collect()
}

/// Per scenario, what `observations` add to a ratio, and the cell's tally.
fn units(
    observations: &[&Observation],
    unit: impl Fn(&Observation) -> Unit,
) -> (BTreeMap<String, Unit>, Tally) {
    let mut by_scenario: BTreeMap<String, Unit> = BTreeMap::new();
    let mut tally = Tally::default();
    for observation in observations {
        tally.add(observation.label);
        let add = unit(observation);
        let entry = by_scenario
            .entry(observation.scenario.clone())
            .or_insert(Unit {
                numerator: 0.0,
                denominator: 0.0,
            });
        entry.numerator += add.numerator;
        entry.denominator += add.denominator;
    }
    (by_scenario, tally)
}

/// A task's share of a score: its points x 100 over 2, for a labelled task.
fn score_unit(observation: &Observation) -> Unit {
    Unit::of_tally(&Tally::of([observation.label]))
}

/// A task's share of communication efficiency: its score over its role's thousands of public
/// message characters.
fn efficiency_unit(observation: &Observation) -> Unit {
    match observation.label {
        Some(label) => Unit {
            numerator: label.points() / 2.0 * 100.0,
            denominator: observation.message_chars as f64 / 1000.0,
        },
        None => Unit {
            numerator: 0.0,
            denominator: 0.0,
        },
    }
}

fn cell(
    settings: &TableSettings,
    observations: &[&Observation],
    unit: impl Fn(&Observation) -> Unit,
) -> Cell {
    if observations.is_empty() {
        return Cell::empty();
    }
    let (by_scenario, tally) = units(observations, unit);
    let mut cell = estimate(settings, by_scenario, "every task unscored", "scenario");
    cell.tally = tally;
    cell
}

/// A cell's value and interval from its units (`unit`: what they are, `scenario` or
/// `template`); `none_rated` says why there is no value when no unit carries any.
pub(crate) fn estimate(
    settings: &TableSettings,
    by_unit: BTreeMap<String, Unit>,
    none_rated: &str,
    unit: &str,
) -> Cell {
    let units: Vec<Unit> = by_unit.into_values().collect();
    let scored_scenarios = units.iter().filter(|u| u.denominator > 0.0).count();
    let interval = settings.bootstrap.ratio(&units);
    let mut cell = Cell {
        value: interval.map(|i| i.estimate),
        interval,
        tally: Tally::default(),
        rated: None,
        scenarios: scored_scenarios,
        p_value: None,
        p_holm: None,
        note: None,
        counted: None,
    };
    if cell.value.is_none() {
        cell.note = Some(none_rated.to_string());
    } else if scored_scenarios < settings.min_scenarios {
        cell.interval = None;
        cell.note = Some(format!(
            "{scored_scenarios} {unit}(s): too few for an interval (needs {})",
            settings.min_scenarios
        ));
    }
    cell
}

/// A score table of `arms` by `columns`, each column selecting observations.
fn score_table(
    settings: &TableSettings,
    observations: &[Observation],
    head: (&str, &str, &str),
    columns: &[Column<'_>],
    unit: &dyn Fn(&Observation) -> Unit,
) -> Table {
    let (id, title, measure) = head;
    let rows = arms(observations)
        .into_iter()
        .map(|(model, mode)| {
            let cells = columns
                .iter()
                .map(|(_, keep)| {
                    let selected: Vec<&Observation> = observations
                        .iter()
                        .filter(|o| o.self_play && o.model == model && o.mode == mode && keep(o))
                        .collect();
                    cell(settings, &selected, unit)
                })
                .collect();
            Row {
                label: vec![model, mode],
                cells,
            }
        })
        .collect();
    Table {
        id: id.to_string(),
        title: title.to_string(),
        measure: measure.to_string(),
        row_header: vec!["model".to_string(), "mode".to_string()],
        columns: columns.iter().map(|(name, _)| name.clone()).collect(),
        rows,
        resampling_unit: RESAMPLING_UNIT.to_string(),
        when_empty: "no judged run with every role played by one model".to_string(),
        chart: true,
    }
}

type Column<'a> = (String, Box<dyn Fn(&Observation) -> bool + 'a>);

fn task_columns<'a>() -> Vec<Column<'a>> {
    let mut columns: Vec<Column<'a>> = Task::ALL
        .iter()
        .map(|&task| {
            let keep: Box<dyn Fn(&Observation) -> bool> = Box::new(move |o| o.task == task);
            (task.as_str().to_string(), keep)
        })
        .collect();
    columns.push(("avg".to_string(), Box::new(|_| true)));
    columns
}

/// Columns for each distinct value of `key`, in order.
fn value_columns<'a, K: Ord + ToString + Clone + 'a>(
    observations: &[Observation],
    key: impl Fn(&Observation) -> K + Copy + 'a,
) -> Vec<Column<'a>> {
    let values: BTreeSet<K> = observations.iter().map(key).collect();
    values
        .into_iter()
        .map(|value| {
            let name = value.to_string();
            let keep: Box<dyn Fn(&Observation) -> bool> = Box::new(move |o| key(o) == value);
            (name, keep)
        })
        .collect()
}

/// Every table from `evaluations`.
pub fn tables(evaluations: &[(String, Evaluation)], settings: &TableSettings) -> Tables {
    let observations = observations(evaluations);
    let mut scores = Vec::new();
    let mut not_shown = Vec::new();
    let score = &score_unit as &dyn Fn(&Observation) -> Unit;
    scores.push(score_table(
        settings,
        &observations,
        (
            "by_task",
            "Task scores by model and mode (AgentViSS table 2)",
            SCORE_MEASURE,
        ),
        &task_columns(),
        score,
    ));
    scores.push(score_table(
        settings,
        &observations,
        (
            "by_dialogue_type",
            "Scores by dialogue type, all tasks (table 4)",
            SCORE_MEASURE,
        ),
        &value_columns(&observations, |o| o.dialogue_type.clone()),
        score,
    ));
    scores.push(score_table(
        settings,
        &observations,
        (
            "by_group_size",
            "Scores by number of characters, all tasks (table 5)",
            SCORE_MEASURE,
        ),
        &value_columns(&observations, |o| o.group_size),
        score,
    ));
    let outcome_columns: Vec<Column<'_>> = ["strongly", "weakly"]
        .into_iter()
        .map(|class| {
            let keep: Box<dyn Fn(&Observation) -> bool> =
                Box::new(move |o| o.task == Task::InteractionOutcome && o.outcome_vision == class);
            (format!("{class} vision-dependent"), keep)
        })
        .collect();
    scores.push(score_table(
        settings,
        &observations,
        (
            "by_vision_dependence",
            "Outcome task scores, strongly vs weakly vision-dependent (figure 5)",
            SCORE_MEASURE,
        ),
        &outcome_columns,
        score,
    ));
    scores.push(score_table(
        settings,
        &observations,
        (
            "efficiency",
            "Communication efficiency (tables 13-14)",
            "score per 1,000 characters of the role's public messages",
        ),
        &task_columns(),
        &efficiency_unit,
    ));
    let rounds: BTreeSet<usize> = observations.iter().map(|o| o.rounds).collect();
    if rounds.len() > 1 {
        scores.push(score_table(
            settings,
            &observations,
            (
                "by_rounds",
                "Scores by number of rounds, all tasks (table 16)",
                SCORE_MEASURE,
            ),
            &value_columns(&observations, |o| o.rounds),
            score,
        ));
    } else {
        not_shown.push(format!(
            "by number of rounds (table 16): every run has {} round(s); set several `rounds` \
             to compare",
            rounds.first().copied().unwrap_or(0)
        ));
    }
    scores.push(gaps_to_text(settings, &observations));
    scores.push(model_comparisons(settings, &observations));
    match sotopia_table(settings, evaluations) {
        Some(table) => scores.push(table),
        None => not_shown.push(
            "SOTOPIA-EVAL: no run was rated with the rubric; set `sotopia = true` in \
             stages/evaluate.toml"
                .to_string(),
        ),
    }
    let scenarios: BTreeSet<&str> = observations.iter().map(|o| o.scenario.as_str()).collect();
    let largest_panel = evaluations
        .iter()
        .map(|(_, e)| e.judges.len())
        .max()
        .unwrap_or(0);
    let agreement = if largest_panel >= 2 {
        agreement(evaluations)
    } else {
        not_shown.push(
            "judge agreement (tables 9 and 10): the panel has one judge; list two or more \
             models in `judges` of [llm.roles]"
                .to_string(),
        );
        Vec::new()
    };
    Tables {
        runs: evaluations.len(),
        scenarios: scenarios.len(),
        settings: *settings,
        scores,
        agreement,
        judges: judges(evaluations),
        not_shown,
        sense_runs: 0,
        sense_templates: 0,
    }
}

/// Per scenario of a paired comparison: the first arm's unit and the second's.
fn paired(first: &BTreeMap<String, Unit>, second: &BTreeMap<String, Unit>) -> Vec<(Unit, Unit)> {
    first
        .iter()
        .filter_map(|(scenario, a)| second.get(scenario).map(|b| (*a, *b)))
        .collect()
}

fn comparison_cell(
    settings: &TableSettings,
    first: &[&Observation],
    second: &[&Observation],
) -> Cell {
    let (first_units, first_tally) = units(first, score_unit);
    let (second_units, second_tally) = units(second, score_unit);
    let pairs = paired(&first_units, &second_units);
    let mut tally = first_tally;
    tally.merge(second_tally);
    let usable = pairs
        .iter()
        .filter(|(a, b)| a.denominator > 0.0 && b.denominator > 0.0)
        .count();
    let mut cell = Cell {
        value: None,
        interval: None,
        tally,
        rated: None,
        scenarios: usable,
        p_value: None,
        p_holm: None,
        note: None,
        counted: None,
    };
    if usable < settings.min_scenarios {
        cell.note = Some(format!(
            "{usable} shared scenario(s): too few to compare (needs {})",
            settings.min_scenarios
        ));
        return cell;
    }
    if let Some(comparison) = settings.bootstrap.paired_difference(&pairs) {
        cell.value = Some(comparison.difference.estimate);
        cell.interval = Some(comparison.difference);
        cell.p_value = Some(comparison.p_value);
    }
    cell
}

/// The SOTOPIA-EVAL table's columns: the seven dimensions, then SOTOPIA's overall.
fn sotopia_columns() -> Vec<String> {
    let mut columns: Vec<String> = Dimension::ALL.iter().map(|d| d.to_string()).collect();
    columns.push(SOTOPIA_OVERALL.to_string());
    columns
}

const SOTOPIA_OVERALL: &str = "overall (SOTOPIA: mean of the seven)";

/// SOTOPIA-EVAL by model and mode, over self-play runs rated with the rubric: per dimension
/// the mean of the characters' panel means; overall, the mean of each character's overall.
/// `None` when no run was rated.
fn sotopia_table(settings: &TableSettings, evaluations: &[(String, Evaluation)]) -> Option<Table> {
    let rated: Vec<&Evaluation> = evaluations
        .iter()
        .map(|(_, e)| e)
        .filter(|e| !e.sotopia.is_empty())
        .collect();
    if rated.is_empty() {
        return None;
    }
    let self_play = |e: &Evaluation| {
        e.cast
            .first()
            .map(|(_, model)| (model.clone(), e.mode.to_string()))
            .filter(|(model, _)| e.cast.iter().all(|(_, m)| m == model))
    };
    let arms: BTreeSet<(String, String)> = rated.iter().filter_map(|e| self_play(e)).collect();
    let rows = arms
        .into_iter()
        .map(|arm| {
            let runs: Vec<&&Evaluation> = rated
                .iter()
                .filter(|e| self_play(e).as_ref() == Some(&arm))
                .collect();
            let cells = (0..=Dimension::ALL.len())
                .map(|column| {
                    let mut by_scenario: BTreeMap<String, Unit> = BTreeMap::new();
                    let mut counted = Rated {
                        rated: 0,
                        unrated: 0,
                    };
                    for run in &runs {
                        for character in &run.sotopia {
                            let value = match character.mean.get(column) {
                                Some(mean) => *mean,
                                None => {
                                    let means: Option<Vec<f64>> =
                                        character.mean.iter().copied().collect();
                                    means.and_then(|m| crate::eval::sotopia::overall(&m))
                                }
                            };
                            let unit = by_scenario.entry(run.scenario.clone()).or_insert(Unit {
                                numerator: 0.0,
                                denominator: 0.0,
                            });
                            match value {
                                Some(value) => {
                                    counted.rated += 1;
                                    unit.numerator += value;
                                    unit.denominator += 1.0;
                                }
                                None => counted.unrated += 1,
                            }
                        }
                    }
                    let mut cell =
                        estimate(settings, by_scenario, "every character unrated", "scenario");
                    cell.rated = Some(counted);
                    cell
                })
                .collect();
            Row {
                label: vec![arm.0, arm.1],
                cells,
            }
        })
        .collect();
    Some(Table {
        id: "sotopia".to_string(),
        title: "SOTOPIA-EVAL by model and mode (optional rubric)".to_string(),
        measure: "mean rating per character; each dimension on its own range (believability, \
                  knowledge, goal 0 to 10; relationship, financial and material benefits -5 to \
                  5; secret, social rules -10 to 0)"
            .to_string(),
        row_header: vec!["model".to_string(), "mode".to_string()],
        columns: sotopia_columns(),
        rows,
        resampling_unit: RESAMPLING_UNIT.to_string(),
        when_empty: "no rated run with every role played by one model".to_string(),
        chart: true,
    })
}

/// Each mode's score minus text-only's, per model, on the same scenarios (figure 6).
fn gaps_to_text(settings: &TableSettings, observations: &[Observation]) -> Table {
    let of = |model: &str, mode: &str| -> Vec<&Observation> {
        observations
            .iter()
            .filter(|o| o.self_play && o.model == model && o.mode == mode)
            .collect()
    };
    let rows = arms(observations)
        .into_iter()
        .filter(|(_, mode)| mode != "text")
        .map(|(model, mode)| {
            let text = of(&model, "text");
            let cell = if text.is_empty() {
                Cell {
                    note: Some("no text-only runs of this model".to_string()),
                    ..Cell::empty()
                }
            } else {
                comparison_cell(settings, &of(&model, &mode), &text)
            };
            Row {
                label: vec![model, mode],
                cells: vec![cell],
            }
        })
        .collect();
    Table {
        id: "gap_to_text".to_string(),
        title: "Gap to text-only on the same scenarios, all tasks (figure 6)".to_string(),
        measure: "score difference (mode - text), paired bootstrap".to_string(),
        row_header: vec!["model".to_string(), "mode".to_string()],
        columns: vec!["gap".to_string()],
        rows,
        resampling_unit: RESAMPLING_UNIT.to_string(),
        when_empty: "no judged runs in a mode other than text".to_string(),
        chart: true,
    }
}

/// Every pair of models in each mode on their shared scenarios, Holm-corrected over all pairs.
fn model_comparisons(settings: &TableSettings, observations: &[Observation]) -> Table {
    let arms = arms(observations);
    let mut rows = Vec::new();
    for (first_index, (first, mode)) in arms.iter().enumerate() {
        for (second, second_mode) in &arms[first_index + 1..] {
            if second_mode != mode {
                continue;
            }
            let of = |model: &str| -> Vec<&Observation> {
                observations
                    .iter()
                    .filter(|o| o.self_play && o.model == model && &o.mode == mode)
                    .collect()
            };
            rows.push(Row {
                label: vec![format!("{first} - {second}"), mode.clone()],
                cells: vec![comparison_cell(settings, &of(first), &of(second))],
            });
        }
    }
    let tested: Vec<(usize, f64)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, row)| row.cells[0].p_value.map(|p| (i, p)))
        .collect();
    let adjusted = holm(&tested.iter().map(|&(_, p)| p).collect::<Vec<_>>());
    for (&(row, _), p) in tested.iter().zip(adjusted) {
        rows[row].cells[0].p_holm = Some(p);
    }
    Table {
        id: "model_comparisons".to_string(),
        title: "Paired model comparisons on shared scenarios, all tasks".to_string(),
        measure: "score difference (first - second), paired bootstrap; p Holm-adjusted over \
                  all pairs"
            .to_string(),
        row_header: vec!["models".to_string(), "mode".to_string()],
        columns: vec!["difference".to_string()],
        rows,
        resampling_unit: RESAMPLING_UNIT.to_string(),
        when_empty: "a comparison needs two or more agent models judged in one mode (`agents` \
                     in [llm.roles])"
            .to_string(),
        chart: true,
    }
}

/// The judges' labels per task of `evaluations` whose run and task `keep` selects.
fn panel_labels(
    evaluations: &[(String, Evaluation)],
    keep: impl Fn(&Evaluation, Task) -> bool,
) -> Vec<Vec<Option<Label>>> {
    evaluations
        .iter()
        .flat_map(|(_, evaluation)| {
            evaluation
                .labels()
                .filter(|(task, _)| keep(evaluation, task.task))
                .map(|(_, labels)| labels)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn agreement_row(scope: String, tasks: &[Vec<Option<Label>>]) -> AgreementRow {
    let complete: Vec<Vec<Label>> = tasks
        .iter()
        .filter_map(|labels| labels.iter().copied().collect::<Option<Vec<Label>>>())
        .collect();
    let counts = AgreementCounts::of(&complete);
    let kappa = fleiss_kappa(&complete);
    let alpha = krippendorff_alpha_ordinal(tasks);
    let note = match (&kappa, &alpha) {
        (Err(problem), _) | (_, Err(problem)) => Some(problem.to_string()),
        _ => None,
    };
    AgreementRow {
        scope,
        complete_tasks: complete.len(),
        tasks: tasks
            .iter()
            .filter(|labels| labels.iter().flatten().count() >= 2)
            .count(),
        fleiss_kappa: kappa.ok(),
        all_agree: counts.all_agree_rate(),
        all_differ: counts.all_differ_rate(),
        krippendorff_alpha: alpha.ok(),
        note,
    }
}

/// Agreement overall, per mode and per task (tables 9 and 10).
fn agreement(evaluations: &[(String, Evaluation)]) -> Vec<AgreementRow> {
    let mut rows = vec![agreement_row(
        "all tasks".to_string(),
        &panel_labels(evaluations, |_, _| true),
    )];
    let modes: BTreeSet<String> = evaluations
        .iter()
        .map(|(_, e)| e.mode.to_string())
        .collect();
    for mode in modes {
        let labels = panel_labels(evaluations, |e, _| e.mode.to_string() == mode);
        rows.push(agreement_row(format!("mode {mode}"), &labels));
    }
    for task in Task::ALL {
        let labels = panel_labels(evaluations, |_, t| t == task);
        rows.push(agreement_row(format!("task {task}"), &labels));
    }
    rows
}

/// Each judge's labels, by its place on the panel.
fn judges(evaluations: &[(String, Evaluation)]) -> Vec<JudgeRow> {
    let panel: Vec<String> = evaluations
        .first()
        .map(|(_, e)| e.judges.iter().map(|j| j.model.clone()).collect())
        .unwrap_or_default();
    let same_panel: Vec<&(String, Evaluation)> = evaluations
        .iter()
        .filter(|(_, e)| e.judges.iter().map(|j| &j.model).eq(panel.iter()))
        .collect();
    let tasks: Vec<Vec<Option<Label>>> = same_panel
        .iter()
        .flat_map(|(_, e)| e.labels().map(|(_, labels)| labels).collect::<Vec<_>>())
        .collect();
    judge_labels(&tasks, panel.len())
        .into_iter()
        .zip(panel)
        .enumerate()
        .map(|(index, (labels, model))| JudgeRow {
            judge: index + 1,
            model,
            labels,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotation::vocab::{DialogueType, VisionDependenceClass};
    use crate::eval::judgement::Grade;
    use crate::eval::label::{Label::*, vote};
    use crate::sim::mode::ObservationMode;
    use crate::stages::evaluate::{JudgeRecord, TaskJudgement};

    /// A run of `scenario` by `model` in `mode`, two characters, every task given `labels` by
    /// a panel of three (per task the three judges' labels).
    fn run(
        scenario: &str,
        model: &str,
        mode: ObservationMode,
        labels: [Option<Label>; 3],
    ) -> (String, Evaluation) {
        let cast = vec![
            ("Ada".to_string(), model.to_string()),
            ("Ben".to_string(), model.to_string()),
        ];
        let tasks = cast
            .iter()
            .enumerate()
            .flat_map(|(index, (name, _))| {
                Task::ALL.map(|task| TaskJudgement {
                    role: crate::text::role::RoleId::at(index),
                    character: name.clone(),
                    task,
                    grades: labels
                        .iter()
                        .map(|l| {
                            l.map(|label| Grade {
                                label,
                                reason: None,
                            })
                        })
                        .collect(),
                    verdict: vote(&labels),
                })
            })
            .collect();
        let evaluation = Evaluation {
            scenario: scenario.to_string(),
            mode,
            cast,
            message_chars: vec![500, 1500],
            dialogue_type: DialogueType::Persuasion,
            outcome_vision: vec![
                VisionDependenceClass::Strongly,
                VisionDependenceClass::Weakly,
            ],
            rounds: 15,
            judges: ["j1", "j2", "j3"]
                .map(|model| JudgeRecord {
                    model: model.to_string(),
                    answers: Vec::new(),
                })
                .to_vec(),
            tasks,
            sotopia: Vec::new(),
        };
        (format!("{scenario}/sim/{mode}/{model}/r0"), evaluation)
    }

    fn settings() -> TableSettings {
        TableSettings::default()
    }

    fn by_id<'a>(tables: &'a Tables, id: &str) -> &'a Table {
        tables.scores.iter().find(|t| t.id == id).unwrap()
    }

    #[test]
    fn cells_score_the_verdicts_count_unscored_tasks_and_need_five_scenarios_for_an_interval() {
        let mut runs = Vec::new();
        for index in 0..6 {
            // Scenarios 0-2 all achieved, 3-5 partially (three different labels).
            let labels = if index < 3 {
                [Some(Achieved), Some(Achieved), Some(NotAchieved)]
            } else {
                [Some(Achieved), Some(PartiallyAchieved), Some(NotAchieved)]
            };
            runs.push(run(
                &format!("s/e/sc{index}"),
                "m1",
                ObservationMode::Text,
                labels,
            ));
        }
        // Two scenarios in vv_oracle, one of them with a single judge answering: unscored.
        runs.push(run(
            "s/e/sc0",
            "m1",
            ObservationMode::VvOracle,
            [Some(Achieved), None, None],
        ));
        runs.push(run(
            "s/e/sc1",
            "m1",
            ObservationMode::VvOracle,
            [Some(NotAchieved); 3],
        ));
        let tables = tables(&runs, &settings());
        assert_eq!((tables.runs, tables.scenarios), (8, 6));
        let by_task = by_id(&tables, "by_task");
        assert_eq!(by_task.columns.last().unwrap(), "avg");
        let text = &by_task
            .rows
            .iter()
            .find(|r| r.label == ["m1", "text"])
            .unwrap()
            .cells;
        // Per task: 6 achieved (scenarios 0-2, two characters) and 6 partially: (12 + 3) / 24.
        let expression = &text[0];
        assert_eq!(expression.tally.scored(), 12);
        assert!((expression.value.unwrap() - 62.5).abs() < 1e-9);
        let interval = expression.interval.unwrap();
        assert!(interval.low < 62.5 && 62.5 < interval.high && interval.high <= 100.0);
        assert_eq!(expression.scenarios, 6);
        assert_eq!(text[4].tally.scored(), 48);
        let oracle = &by_task
            .rows
            .iter()
            .find(|r| r.label == ["m1", "vv_oracle"])
            .unwrap()
            .cells;
        assert_eq!(
            oracle[0].tally.missing, 2,
            "the single judge's run is unscored"
        );
        assert_eq!(oracle[0].value, Some(0.0));
        assert_eq!(oracle[0].interval, None);
        assert_eq!(
            oracle[0].note.as_deref(),
            Some("1 scenario(s): too few for an interval (needs 5)")
        );
        // Efficiency: Ada's expression over 0.5 thousand characters, Ben's over 1.5.
        let efficiency = by_id(&tables, "efficiency");
        let text_efficiency = &efficiency.rows[0].cells[0];
        // Achieved tasks add 100, partial 25: (3 x 100 + 3 x 25) x 2 characters over
        // 6 x (0.5 + 1.5) thousand characters.
        assert!((text_efficiency.value.unwrap() - 750.0 / 12.0).abs() < 1e-9);
        // The outcome tasks split by their vision dependence: Ada's strongly, Ben's weakly.
        let vision = by_id(&tables, "by_vision_dependence");
        assert_eq!(vision.rows[0].cells[0].tally.scored(), 6);
        assert!(tables.not_shown[0].contains("every run has 15 round(s)"));
        // vv_oracle minus text on the two shared scenarios: too few to compare.
        let gap = by_id(&tables, "gap_to_text");
        assert_eq!(gap.rows[0].label, ["m1", "vv_oracle"]);
        assert!(
            gap.rows[0].cells[0]
                .note
                .as_deref()
                .unwrap()
                .contains("too few to compare")
        );
    }

    #[test]
    fn model_comparisons_pair_shared_scenarios_and_adjust_by_holm() {
        let mut runs = Vec::new();
        for index in 0..8 {
            let scenario = format!("s/e/sc{index}");
            let good = [Some(Achieved), Some(Achieved), Some(PartiallyAchieved)];
            let weak = if index % 2 == 0 {
                [Some(NotAchieved); 3]
            } else {
                [Some(PartiallyAchieved); 3]
            };
            runs.push(run(&scenario, "strong", ObservationMode::Text, good));
            runs.push(run(&scenario, "weak", ObservationMode::Text, weak));
            runs.push(run(
                &scenario,
                "weaker",
                ObservationMode::Text,
                [Some(NotAchieved); 3],
            ));
        }
        let tables = tables(&runs, &settings());
        let comparisons = by_id(&tables, "model_comparisons");
        let labels: Vec<&str> = comparisons
            .rows
            .iter()
            .map(|r| r.label[0].as_str())
            .collect();
        assert_eq!(
            labels,
            ["strong - weak", "strong - weaker", "weak - weaker"]
        );
        let strong_weaker = &comparisons.rows[1].cells[0];
        assert_eq!(strong_weaker.value, Some(100.0));
        assert_eq!(strong_weaker.scenarios, 8);
        let p = strong_weaker.p_value.unwrap();
        let adjusted = strong_weaker.p_holm.unwrap();
        assert!(p < 0.01 && adjusted >= p && adjusted <= 1.0);
        // Reproducible: the same seed gives the same tables.
        assert_eq!(tables, super::tables(&runs, &settings()));
    }

    #[test]
    fn agreement_is_measured_over_complete_panels_and_each_judge_is_counted() {
        let runs = vec![
            run(
                "s/e/sc0",
                "m",
                ObservationMode::Text,
                [Some(Achieved), Some(Achieved), Some(NotAchieved)],
            ),
            run(
                "s/e/sc1",
                "m",
                ObservationMode::Text,
                [Some(Achieved), None, Some(NotAchieved)],
            ),
        ];
        let tables = tables(&runs, &settings());
        let all = &tables.agreement[0];
        assert_eq!(all.scope, "all tasks");
        assert_eq!((all.complete_tasks, all.tasks), (8, 16));
        assert_eq!(all.all_agree, Some(0.0));
        assert!(all.fleiss_kappa.is_some() && all.krippendorff_alpha.is_some());
        assert!(
            tables
                .agreement
                .iter()
                .any(|row| row.scope == "task interaction_outcome")
        );
        let counts: Vec<[usize; 3]> = tables.judges.iter().map(|j| j.labels.counts).collect();
        assert_eq!(counts, [[0, 0, 16], [0, 0, 8], [16, 0, 0]]);
        assert_eq!(tables.judges[1].labels.missing, 8);
        // A panel of one has no agreement to measure, and the report says so.
        let mut alone = runs.clone();
        for (_, evaluation) in &mut alone {
            evaluation.judges.truncate(1);
        }
        let tables = super::tables(&alone, &settings());
        assert!(tables.agreement.is_empty());
        assert!(
            tables
                .not_shown
                .iter()
                .any(|why| why.contains("the panel has one judge"))
        );
    }
}

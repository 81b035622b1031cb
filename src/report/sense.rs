//! AgentSense's numbers from the stored `evaluate_sense` records (AgentSense, section 4): goal
//! completion per model from the three perspectives, by ERG class, goal category and domain;
//! multiple-choice accuracy on private information beside the blind baseline; PSI (how far a
//! model's goal completion swings across the instances of one template) with a bootstrap
//! interval; the chi-square variance test per template and model with the abnormal
//! templates; and how far self, others and judges agree. Intervals resample templates: an
//! instance's runs and goals share its template.

use std::collections::{BTreeMap, BTreeSet};

use crate::eval::agreement::{cohen_kappa, fleiss_kappa_of};
use crate::eval::goal::GoalVerdict;
use crate::eval::interval::Unit;
use crate::eval::psi::{population_variance, psi, variance_test};
use crate::stages::blind_test::BlindTest;
use crate::stages::evaluate_sense::SenseEvaluation;

use super::tables::{Cell, Counted, Row, Table, TableSettings, estimate};

/// What the AgentSense intervals resample.
pub const TEMPLATE_UNIT: &str =
    "templates (a template's instances, runs and goals are drawn together)";

/// The significance level of the variance test (AgentSense: 0.05).
pub const SIGNIFICANCE: f64 = 0.05;

/// One goal of one run, from every perspective.
#[derive(Debug, Clone, PartialEq)]
struct GoalObservation {
    template: String,
    instance: String,
    model: String,
    category: String,
    erg: String,
    domain: String,
    by_self: Option<bool>,
    others: Option<f64>,
    judge_mean: Option<f64>,
    judge_majority: Option<bool>,
}

fn goal_observations(evaluations: &[(String, SenseEvaluation)]) -> Vec<GoalObservation> {
    let mut out = Vec::new();
    for (_, evaluation) in evaluations {
        for goal in &evaluation.goals {
            out.push(GoalObservation {
                template: evaluation.template_id.clone(),
                instance: evaluation.instance_id.clone(),
                model: evaluation.model(),
                category: goal.category.clone(),
                erg: goal.erg.clone(),
                domain: evaluation.domain.clone(),
                by_self: goal.self_achieved(),
                others: goal.others_share(),
                judge_mean: goal.judge_share(),
                judge_majority: goal.judge_majority(),
            });
        }
    }
    out
}

fn as_share(value: Option<bool>) -> Option<f64> {
    value.map(|v| if v { 1.0 } else { 0.0 })
}

/// A percentage cell: each `(template, value in 0..1 or missing)` counted, the value the mean
/// over the given ones x 100, its interval over templates.
fn share_cell(settings: &TableSettings, values: &[(String, Option<f64>)], of: &str) -> Cell {
    if values.is_empty() {
        return Cell {
            note: Some(format!("no {of}")),
            ..Cell::empty()
        };
    }
    let mut by_template: BTreeMap<String, Unit> = BTreeMap::new();
    let mut counted = Counted {
        n: 0,
        missing: 0,
        of: of.to_string(),
    };
    for (template, value) in values {
        let unit = by_template.entry(template.clone()).or_insert(Unit {
            numerator: 0.0,
            denominator: 0.0,
        });
        match value {
            Some(value) => {
                counted.n += 1;
                unit.numerator += value * 100.0;
                unit.denominator += 1.0;
            }
            None => counted.missing += 1,
        }
    }
    let mut cell = estimate(settings, by_template, "every one missing", "template");
    cell.counted = Some(counted);
    cell
}

fn sense_table(
    id: &str,
    title: &str,
    measure: &str,
    columns: Vec<String>,
    rows: Vec<Row>,
) -> Table {
    Table {
        id: id.to_string(),
        title: title.to_string(),
        measure: measure.to_string(),
        row_header: vec!["model".to_string()],
        columns,
        rows,
        resampling_unit: TEMPLATE_UNIT.to_string(),
        when_empty: "no AgentSense run judged (`evaluate_sense`)".to_string(),
        chart: true,
    }
}

const COMPLETION: &str = "goals reached, % (judged after the run)";

/// The tables of `evaluations` (and the blind baseline of `blind`), each a [`Table`] the
/// report renders as it renders the AgentViSS ones; what cannot be shown, with why.
pub fn tables(
    evaluations: &[(String, SenseEvaluation)],
    blind: &[BlindTest],
    settings: &TableSettings,
) -> (Vec<Table>, Vec<String>) {
    let mut not_shown = Vec::new();
    let (self_play, cross_play): (Vec<_>, Vec<_>) = evaluations
        .iter()
        .cloned()
        .partition(|(_, e)| e.self_play());
    let evaluations = &self_play[..];
    let goals = goal_observations(evaluations);
    let models: BTreeSet<String> = evaluations.iter().map(|(_, e)| e.model()).collect();
    let mut tables = Vec::new();

    type Pick = fn(&GoalObservation) -> Option<f64>;
    let perspectives: [(&str, Pick); 4] = [
        ("self", |g| as_share(g.by_self)),
        ("others", |g| g.others),
        ("judges (mean)", |g| g.judge_mean),
        ("judges (majority)", |g| as_share(g.judge_majority)),
    ];
    let rows = models
        .iter()
        .map(|model| Row {
            label: vec![model.clone()],
            cells: perspectives
                .iter()
                .map(|(_, pick)| {
                    let values: Vec<(String, Option<f64>)> = goals
                        .iter()
                        .filter(|g| &g.model == model)
                        .map(|g| (g.template.clone(), pick(g)))
                        .collect();
                    share_cell(settings, &values, "goals")
                })
                .collect(),
        })
        .collect();
    tables.push(sense_table(
        "sense_goal_completion",
        "AgentSense: goal completion by perspective",
        COMPLETION,
        perspectives
            .iter()
            .map(|(name, _)| name.to_string())
            .collect(),
        rows,
    ));

    // The breakdowns use the panel's verdict, as AgentViSS's tables do.
    let breakdown = |key: fn(&GoalObservation) -> &str| -> (Vec<String>, Vec<Row>) {
        let values: BTreeSet<&str> = goals.iter().map(key).collect();
        let columns: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        let rows = models
            .iter()
            .map(|model| Row {
                label: vec![model.clone()],
                cells: columns
                    .iter()
                    .map(|column| {
                        let picked: Vec<(String, Option<f64>)> = goals
                            .iter()
                            .filter(|g| &g.model == model && key(g) == column)
                            .map(|g| (g.template.clone(), as_share(g.judge_majority)))
                            .collect();
                        share_cell(settings, &picked, "goals")
                    })
                    .collect(),
            })
            .collect();
        (columns, rows)
    };
    let by_panel = "goals reached, % (the judges' majority)";
    for (id, title, key) in [
        (
            "sense_by_erg",
            "AgentSense: goal completion by ERG class",
            (|g: &GoalObservation| g.erg.as_str()) as fn(&GoalObservation) -> &str,
        ),
        (
            "sense_by_category",
            "AgentSense: goal completion by goal category",
            |g: &GoalObservation| g.category.as_str(),
        ),
        (
            "sense_by_domain",
            "AgentSense: goal completion by domain",
            |g: &GoalObservation| g.domain.as_str(),
        ),
    ] {
        let (columns, rows) = breakdown(key);
        tables.push(sense_table(id, title, by_panel, columns, rows));
    }

    tables.push(choice_table(evaluations, blind, &models, settings));

    let (psi_table, variance_table, h0) = sensitivity(&goals, &models, settings);
    tables.push(psi_table);
    match variance_table {
        Some(table) => tables.push(table),
        None => not_shown.push(
            "AgentSense variance test: no template has two instances the judges decided a goal \
             of, for any model (`instances` of plan_sense_runs; the judges' majority needs a \
             quorum)"
                .to_string(),
        ),
    }
    if let Some(h0) = h0 {
        not_shown.push(h0);
    }
    tables.push(agreement_table(evaluations, &models));
    if cross_play.is_empty() {
        not_shown.push(
            "AgentSense cross-play: no judged run pairs two models (`cross_play` of \
             plan_sense_runs, two `agents`)"
                .to_string(),
        );
    } else {
        tables.push(cross_play_table(&cross_play, settings));
    }
    (tables, not_shown)
}

/// Cross-play: per ordered pair of models, the goal completion (the judges' majority) of the
/// character the focal model played and of the characters its partner played.
fn cross_play_table(evaluations: &[(String, SenseEvaluation)], settings: &TableSettings) -> Table {
    // (focal, partner) -> (focal's goals, partner's goals), each (template, value).
    type Values = Vec<(String, Option<f64>)>;
    let mut pairs: BTreeMap<(String, String), (Values, Values)> = BTreeMap::new();
    for (_, evaluation) in evaluations {
        let Some(focal_slot) = &evaluation.focal else {
            continue;
        };
        let Some(focal) = evaluation.model_of(focal_slot) else {
            continue;
        };
        let partner = evaluation
            .cast
            .iter()
            .find(|seat| &seat.slot != focal_slot)
            .map_or(String::new(), |seat| seat.model.clone());
        let entry = pairs.entry((focal.to_string(), partner)).or_default();
        for goal in &evaluation.goals {
            let value = (
                evaluation.template_id.clone(),
                as_share(goal.judge_majority()),
            );
            if &goal.holder == focal_slot {
                entry.0.push(value);
            } else {
                entry.1.push(value);
            }
        }
    }
    let rows = pairs
        .into_iter()
        .map(|((focal, partner), (own, theirs))| Row {
            label: vec![focal, partner],
            cells: vec![
                share_cell(settings, &own, "goals"),
                share_cell(settings, &theirs, "goals"),
            ],
        })
        .collect();
    Table {
        row_header: vec!["focal model".to_string(), "partner model".to_string()],
        ..sense_table(
            "sense_cross_play",
            "AgentSense: cross-play, goal completion of the focal character and of its partners",
            "goals reached, % (the judges' majority)",
            vec![
                "focal character's goals".to_string(),
                "partners' goals".to_string(),
            ],
            rows,
        )
    }
}

/// Multiple-choice accuracy per model after the run, beside the blind baseline (the same
/// questions answered from the template alone, before any interaction).
fn choice_table(
    evaluations: &[(String, SenseEvaluation)],
    blind: &[BlindTest],
    models: &BTreeSet<String>,
    settings: &TableSettings,
) -> Table {
    let template_of: BTreeMap<&str, &str> = evaluations
        .iter()
        .map(|(_, e)| (e.scenario.as_str(), e.template_id.as_str()))
        .collect();
    let baseline: Vec<(String, Option<f64>)> = blind
        .iter()
        .filter_map(|test| Some((template_of.get(test.scenario.as_str())?, test)))
        .flat_map(|(template, test)| {
            test.answers
                .iter()
                .map(|a| (template.to_string(), Some(f64::from(u8::from(a.correct())))))
        })
        .collect();
    let rows = models
        .iter()
        .map(|model| {
            let answers: Vec<(String, Option<f64>)> = evaluations
                .iter()
                .filter(|(_, e)| &e.model() == model)
                .flat_map(|(_, e)| {
                    e.questions.iter().flat_map(move |q| {
                        q.answers.iter().map(move |choice| {
                            (
                                e.template_id.clone(),
                                choice.chosen.map(|c| f64::from(u8::from(c == q.right))),
                            )
                        })
                    })
                })
                .collect();
            Row {
                label: vec![model.clone()],
                cells: vec![
                    share_cell(settings, &answers, "answers"),
                    if baseline.is_empty() {
                        Cell {
                            note: Some(
                                "no blind-test answer for these templates (`blind_test`)"
                                    .to_string(),
                            ),
                            ..Cell::empty()
                        }
                    } else {
                        share_cell(settings, &baseline, "answers")
                    },
                ],
            }
        })
        .collect();
    sense_table(
        "sense_choice_accuracy",
        "AgentSense: private-information questions answered right",
        "accuracy, % (chance: 25)",
        vec![
            "after the run".to_string(),
            "blind baseline (template only)".to_string(),
        ],
        rows,
    )
}

/// Per model: per template, the goal completion of each instance (the judges' majority over
/// its goals in all its runs).
fn instance_scores(goals: &[GoalObservation], model: &str) -> BTreeMap<String, Vec<f64>> {
    let mut by_instance: BTreeMap<(String, String), (f64, usize)> = BTreeMap::new();
    for goal in goals.iter().filter(|g| g.model == model) {
        if let Some(share) = as_share(goal.judge_majority) {
            let entry = by_instance
                .entry((goal.template.clone(), goal.instance.clone()))
                .or_default();
            entry.0 += share * 100.0;
            entry.1 += 1;
        }
    }
    let mut by_template: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for ((template, _), (sum, n)) in by_instance {
        by_template
            .entry(template)
            .or_default()
            .push(sum / n as f64);
    }
    by_template
}

/// The PSI table, the variance test per template and model (`None` without a template of two
/// instances), and the share of templates in which H0 holds, as a sentence.
fn sensitivity(
    goals: &[GoalObservation],
    models: &BTreeSet<String>,
    settings: &TableSettings,
) -> (Table, Option<Table>, Option<String>) {
    let mut psi_rows = Vec::new();
    // Per template, per model: the test's p-value and whether it rejects H0.
    let mut tests: BTreeMap<String, BTreeMap<String, (f64, bool)>> = BTreeMap::new();
    for model in models {
        let by_template = instance_scores(goals, model);
        let spreads: BTreeMap<String, Unit> = by_template
            .iter()
            .filter(|(_, values)| values.len() >= 2)
            .map(|(template, values)| {
                let unit = Unit {
                    numerator: population_variance(values).sqrt(),
                    denominator: 1.0,
                };
                (template.clone(), unit)
            })
            .collect();
        let templates: Vec<Vec<f64>> = by_template.values().cloned().collect();
        let summary = psi(&templates);
        let mut cell = estimate(
            settings,
            spreads,
            "no template has two instances the judges decided a goal of",
            "template",
        );
        debug_assert_eq!(
            cell.value.map(|v| (v * 1e9).round()),
            summary.map(|p| (p.value * 1e9).round())
        );
        cell.counted = Some(Counted {
            n: summary.map_or(0, |p| p.templates),
            missing: 0,
            of: "templates".to_string(),
        });
        psi_rows.push(Row {
            label: vec![model.clone()],
            cells: vec![cell],
        });
        let all: Vec<f64> = by_template.values().flatten().copied().collect();
        let population = population_variance(&all);
        for (template, values) in &by_template {
            if let Some(test) = variance_test(values, population, SIGNIFICANCE) {
                tests
                    .entry(template.clone())
                    .or_default()
                    .insert(model.clone(), (test.p_value, test.abnormal));
            }
        }
    }
    let psi_table = sense_table(
        "sense_psi",
        "AgentSense: profile sensitivity (PSI) of goal completion",
        "PSI: the standard deviation of goal completion (% points, the judges' majority) \
         across a template's instances, averaged over templates",
        vec!["PSI".to_string()],
        psi_rows,
    );
    if tests.is_empty() {
        return (psi_table, None, None);
    }
    let mut abnormal = 0;
    let rows: Vec<Row> = tests
        .iter()
        .map(|(template, by_model)| {
            let rejected = by_model.values().filter(|(_, r)| *r).count();
            let is_abnormal = rejected * 2 > by_model.len();
            abnormal += usize::from(is_abnormal);
            Row {
                label: vec![
                    template.clone(),
                    if is_abnormal { "abnormal" } else { "normal" }.to_string(),
                ],
                cells: models
                    .iter()
                    .map(|model| match by_model.get(model) {
                        Some(&(p, rejected)) => Cell {
                            value: Some(p),
                            note: rejected.then(|| format!("H0 rejected (p < {SIGNIFICANCE})")),
                            ..Cell::empty()
                        },
                        None => Cell {
                            note: Some("fewer than two judged instances".to_string()),
                            ..Cell::empty()
                        },
                    })
                    .collect(),
            }
        })
        .collect();
    let share = (tests.len() - abnormal) as f64 / tests.len() as f64 * 100.0;
    let sentence = format!(
        "AgentSense variance test: H0 (the template's instances vary as the population does) \
         holds in {share:.1}% of {} template(s); {abnormal} abnormal (rejected for more than half \
         the models). AgentSense reports 92.6%, 18 abnormal of 245.",
        tests.len()
    );
    let table = Table {
        row_header: vec!["template".to_string(), "verdict".to_string()],
        chart: false,
        ..sense_table(
            "sense_variance_test",
            "AgentSense: chi-square variance test per template and model",
            "p-value of the template's sample variance against the model's population variance",
            models.iter().cloned().collect(),
            rows,
        )
    };
    (psi_table, Some(table), Some(sentence))
}

/// A kappa over `n` goals (`missing` left out for want of a verdict), or why there is none.
fn kappa_cell(kappa: Result<f64, String>, n: usize, missing: usize) -> Cell {
    let (value, note) = match kappa {
        Ok(kappa) => (Some(kappa), None),
        Err(problem) => (None, Some(problem)),
    };
    Cell {
        value,
        note,
        counted: Some(Counted {
            n,
            missing,
            of: "goals".to_string(),
        }),
        ..Cell::empty()
    }
}

/// Cohen's kappa between perspectives on the goals both decided, and Fleiss' kappa among the
/// judges over the goals every judge answered; each with its number of goals.
fn agreement_table(evaluations: &[(String, SenseEvaluation)], models: &BTreeSet<String>) -> Table {
    let goals: Vec<_> = evaluations.iter().flat_map(|(_, e)| &e.goals).collect();
    let pairs =
        |first: &dyn Fn(&&crate::stages::evaluate_sense::GoalJudgement) -> Option<bool>,
         second: &dyn Fn(&&crate::stages::evaluate_sense::GoalJudgement) -> Option<bool>|
         -> Vec<(bool, bool)> {
            goals
                .iter()
                .filter_map(|g| Some((first(g)?, second(g)?)))
                .collect()
        };
    let cohen = |pairs: Vec<(bool, bool)>| -> Cell {
        let kappa = if pairs.is_empty() {
            Err("no goal has a verdict from both".to_string())
        } else {
            cohen_kappa(&pairs).map_err(|problem| problem.to_string())
        };
        kappa_cell(kappa, pairs.len(), 0)
    };
    let mut rows = vec![
        (
            "self vs judges (majority)",
            cohen(pairs(&|g| g.self_achieved(), &|g| g.judge_majority())),
        ),
        (
            "others (majority) vs judges (majority)",
            cohen(pairs(&|g| g.others_majority(), &|g| g.judge_majority())),
        ),
        (
            "self vs others (majority)",
            cohen(pairs(&|g| g.self_achieved(), &|g| g.others_majority())),
        ),
    ];
    let complete: Vec<Vec<bool>> = goals
        .iter()
        .filter_map(|g| {
            g.judge_verdicts()
                .into_iter()
                .collect::<Option<Vec<bool>>>()
        })
        .collect();
    let panel = goals.iter().map(|g| g.by_judges.len()).max().unwrap_or(0);
    let among = if panel < 2 || complete.is_empty() {
        Cell {
            note: Some(if panel < 2 {
                format!("the panel has {panel} judge(s); agreement needs two")
            } else {
                "no goal has every judge's verdict (a judge is missing)".to_string()
            }),
            ..Cell::empty()
        }
    } else {
        kappa_cell(
            fleiss_kappa_of(&complete).map_err(|problem| problem.to_string()),
            complete.len(),
            goals.len() - complete.len(),
        )
    };
    rows.push(("judges among themselves (Fleiss)", among));
    Table {
        row_header: vec!["between".to_string()],
        chart: false,
        resampling_unit: "none: agreement is over every goal judged, without an interval"
            .to_string(),
        ..sense_table(
            "sense_agreement",
            &format!(
                "AgentSense: agreement on goal completion ({} model(s))",
                models.len()
            ),
            "kappa (1: full agreement, 0: chance)",
            vec!["kappa".to_string()],
            rows.into_iter()
                .map(|(label, cell)| Row {
                    label: vec![label.to_string()],
                    cells: vec![cell],
                })
                .collect(),
        )
    }
}

/// One row per run x goal x perspective (self, each other character, each judge), for
/// pandas, R or polars: `sense_goals.jsonl` and `.parquet` of the report.
pub fn goal_rows(evaluations: &[(String, SenseEvaluation)]) -> Vec<serde_json::Value> {
    let mut rows = Vec::new();
    for (run, evaluation) in evaluations {
        let model_of = |slot: &str| evaluation.model_of(slot).unwrap_or_default().to_string();
        for goal in &evaluation.goals {
            let mut row =
                |perspective: &str, by: String, model: String, verdict: Option<&GoalVerdict>| {
                    rows.push(serde_json::json!({
                        "run": run,
                        "scenario": evaluation.scenario,
                        "template_id": evaluation.template_id,
                        "instance_id": evaluation.instance_id,
                        "replicate": evaluation.replicate,
                        "agent_model": evaluation.model(),
                        "holder": goal.holder,
                        "goal": goal.goal,
                        "category": goal.category,
                        "erg": goal.erg,
                        "domain": evaluation.domain,
                        "perspective": perspective,
                        "by": by,
                        "by_model": model,
                        "achieved": verdict.map(|v| v.achieved),
                        "reason": verdict.map(|v| v.reason.clone()),
                    }));
                };
            row(
                "self",
                goal.holder.clone(),
                model_of(&goal.holder),
                goal.by_self.as_ref(),
            );
            for other in &goal.by_others {
                row(
                    "other",
                    other.slot.clone(),
                    model_of(&other.slot),
                    other.verdict.as_ref(),
                );
            }
            for (index, verdict) in goal.by_judges.iter().enumerate() {
                let judge = evaluation.judges.get(index);
                row(
                    "judge",
                    judge.map_or(format!("judge{}", index + 1), |j| j.who.clone()),
                    judge.map_or(String::new(), |j| j.model.clone()),
                    verdict.as_ref(),
                );
            }
        }
    }
    rows
}

/// The JSON schema of [`goal_rows`], for the Parquet file's columns.
pub fn goal_row_schema() -> serde_json::Value {
    let text = serde_json::json!({"type": "string"});
    serde_json::json!({
        "type": "object",
        "properties": {
            "run": text, "scenario": text, "template_id": text, "instance_id": text,
            "replicate": {"type": "integer"}, "agent_model": text, "holder": text, "goal": text,
            "category": text, "erg": text, "domain": text, "perspective": text, "by": text,
            "by_model": text,
            "achieved": {"type": ["boolean", "null"]},
            "reason": {"type": ["string", "null"]},
        },
        "required": ["run", "scenario", "template_id", "instance_id", "replicate",
                     "agent_model", "holder", "goal", "category", "erg", "domain",
                     "perspective", "by", "by_model", "achieved", "reason"],
    })
}

/// One row per run x question x character asked: `sense_questions.jsonl` and `.parquet`.
pub fn question_rows(evaluations: &[(String, SenseEvaluation)]) -> Vec<serde_json::Value> {
    let mut rows = Vec::new();
    for (run, evaluation) in evaluations {
        for question in &evaluation.questions {
            for choice in &question.answers {
                rows.push(serde_json::json!({
                    "run": run,
                    "scenario": evaluation.scenario,
                    "template_id": evaluation.template_id,
                    "instance_id": evaluation.instance_id,
                    "replicate": evaluation.replicate,
                    "agent_model": evaluation.model(),
                    "about": question.about,
                    "question": question.question,
                    "asked": choice.slot,
                    "chosen": choice.chosen.map(String::from),
                    "right": question.right.to_string(),
                    "correct": choice.chosen.map(|c| c == question.right),
                }));
            }
        }
    }
    rows
}

/// The JSON schema of [`question_rows`].
pub fn question_row_schema() -> serde_json::Value {
    let text = serde_json::json!({"type": "string"});
    serde_json::json!({
        "type": "object",
        "properties": {
            "run": text, "scenario": text, "template_id": text, "instance_id": text,
            "replicate": {"type": "integer"}, "agent_model": text, "about": text,
            "question": text, "asked": text,
            "chosen": {"type": ["string", "null"]},
            "right": text,
            "correct": {"type": ["boolean", "null"]},
        },
        "required": ["run", "scenario", "template_id", "instance_id", "replicate",
                     "agent_model", "about", "question", "asked", "chosen", "right", "correct"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::evaluate_sense::{
        AskedRecord, Choice, GoalJudgement, OtherVerdict, QuestionJudgement,
    };
    use crate::stages::simulate_sense::SenseSeat;

    fn verdict(achieved: bool) -> Option<GoalVerdict> {
        Some(GoalVerdict {
            reason: "Turn 3.".to_string(),
            achieved,
        })
    }

    /// A run of instance `instance` of `template` by model `m`: r1 holds two goals (existence,
    /// growth) which the one judge and r1 itself call `reached`, r2 the opposite; r2 answers
    /// the one question about r1 right on instance 0 and is missing on the others.
    fn run(template: usize, instance: usize, reached: [bool; 2]) -> (String, SenseEvaluation) {
        let seat = |slot: &str| SenseSeat {
            slot: slot.to_string(),
            name: slot.to_uppercase(),
            model: "m".to_string(),
        };
        let asked = |who: &str| AskedRecord {
            who: who.to_string(),
            model: "m".to_string(),
            answer: crate::stages::llm_step::AnswerRecord {
                failed: None,
                rejected: Vec::new(),
                request_key: None,
                prompt_tokens: 0,
                completion_tokens: 0,
            },
        };
        let goals = reached
            .iter()
            .zip([
                ("information_exchange", "existence"),
                ("cooperation", "growth"),
            ])
            .map(|(&reached, (category, erg))| GoalJudgement {
                holder: "r1".to_string(),
                goal: "To learn where the van went.".to_string(),
                category: category.to_string(),
                erg: erg.to_string(),
                by_self: verdict(reached),
                by_others: vec![OtherVerdict {
                    slot: "r2".to_string(),
                    verdict: verdict(!reached),
                }],
                by_judges: vec![verdict(reached)],
            })
            .collect();
        let evaluation = SenseEvaluation {
            scenario: format!("s{template}"),
            instance_id: format!("t{template}-i{instance}"),
            template_id: format!("t{template}"),
            domain: "personal_domain".to_string(),
            replicate: 0,
            cast: vec![seat("r1"), seat("r2")],
            focal: None,
            turns: 4,
            interviews: vec![asked("r1"), asked("r2")],
            judges: vec![asked("judge1")],
            goals,
            questions: vec![QuestionJudgement {
                about: "r1".to_string(),
                question: "Where did the van go?".to_string(),
                options: ["a", "b", "c", "d"].map(String::from).to_vec(),
                right: 'A',
                answers: vec![Choice {
                    slot: "r2".to_string(),
                    chosen: (instance == 0).then_some('A'),
                }],
            }],
        };
        (format!("s{template}/sense/i{instance}/m/r0"), evaluation)
    }

    fn table<'a>(tables: &'a [Table], id: &str) -> &'a Table {
        tables.iter().find(|t| t.id == id).unwrap()
    }

    /// Six templates of two instances: the first swings from every goal reached to none, the
    /// other five reach one goal of two in every instance. Goal completion, the breakdowns,
    /// the accuracy, PSI, the variance test and the agreement are checked by hand.
    #[test]
    fn agentsense_tables_count_each_perspective_and_test_each_templates_variance() {
        let mut evaluations = vec![run(0, 0, [true, true]), run(0, 1, [false, false])];
        for template in 1..6 {
            for instance in 0..2 {
                evaluations.push(run(template, instance, [true, false]));
            }
        }
        let settings = TableSettings::default();
        let (tables, not_shown) = tables(&evaluations, &[], &settings);
        let completion = table(&tables, "sense_goal_completion");
        assert_eq!(completion.rows.len(), 1);
        for cell in &completion.rows[0].cells {
            assert_eq!(cell.value, Some(50.0));
            assert_eq!(cell.counted.as_ref().unwrap().n, 24);
            assert!(cell.interval.is_some(), "six templates make an interval");
        }
        let erg = table(&tables, "sense_by_erg");
        assert_eq!(erg.columns, ["existence", "growth"]);
        let values: Vec<f64> = erg.rows[0].cells.iter().map(|c| c.value.unwrap()).collect();
        assert!((values[0] - 1100.0 / 12.0).abs() < 1e-9, "{values:?}");
        assert!((values[1] - 100.0 / 12.0).abs() < 1e-9, "{values:?}");

        let accuracy = &table(&tables, "sense_choice_accuracy").rows[0].cells;
        assert_eq!(accuracy[0].value, Some(100.0));
        let counted = accuracy[0].counted.as_ref().unwrap();
        assert_eq!(
            (counted.n, counted.missing),
            (6, 6),
            "a missing answer is not wrong"
        );
        assert_eq!(accuracy[1].value, None, "no blind test stored");

        // Instance scores: template 0 is 100 and 0 (sd 50), the others 50 and 50 (sd 0).
        let psi = &table(&tables, "sense_psi").rows[0].cells[0];
        assert!((psi.value.unwrap() - 50.0 / 6.0).abs() < 1e-9, "{psi:?}");
        assert_eq!(psi.counted.as_ref().unwrap().n, 6);
        // Population variance of the twelve instance scores (50 but one 100 and one 0): 5000/12.
        // Template 0: sample variance 5000, statistic 1 x 5000 / (5000/12) = 12 on one degree of
        // freedom, p = 2 (1 - Phi(sqrt 12)) = 0.000532: abnormal. The others: statistic 0, p 1.
        let variance = table(&tables, "sense_variance_test");
        assert_eq!(variance.rows[0].label, ["t0", "abnormal"]);
        let p = variance.rows[0].cells[0].value.unwrap();
        assert!((p - 0.000532).abs() < 1e-5, "{p}");
        assert_eq!(variance.rows[1].label, ["t1", "normal"]);
        assert_eq!(variance.rows[1].cells[0].value, Some(1.0));
        assert!(
            not_shown
                .iter()
                .any(|s| s.contains("holds in 83.3% of 6 template(s); 1 abnormal")),
            "{not_shown:?}"
        );

        // Self always agrees with the judge, the other always disagrees.
        let agreement = table(&tables, "sense_agreement");
        assert_eq!(agreement.rows[0].cells[0].value, Some(1.0));
        assert_eq!(agreement.rows[1].cells[0].value, Some(-1.0));
        assert!(
            not_shown
                .iter()
                .any(|s| s.contains("cross-play: no judged run"))
        );
        assert!(
            agreement.rows[3].cells[0]
                .note
                .as_ref()
                .unwrap()
                .contains("1 judge(s)")
        );
    }

    /// A cross-play run counts in its own table only: the focal model's character against its
    /// partner's, never in the self-play tables.
    #[test]
    fn cross_play_runs_are_tabled_apart_by_focal_model() {
        let mut evaluations = vec![run(0, 0, [true, true])];
        let (run_id, mut crossed) = run(0, 1, [true, false]);
        crossed.cast[1].model = "n".to_string();
        crossed.focal = Some("r1".to_string());
        evaluations.push((run_id.replace("/m/", "/m_vs_n_as_r1/"), crossed));
        let (tables, _) = tables(&evaluations, &[], &TableSettings::default());
        let completion = table(&tables, "sense_goal_completion");
        assert_eq!(completion.rows.len(), 1, "self-play of m only");
        assert_eq!(completion.rows[0].cells[3].value, Some(100.0));
        let cross = table(&tables, "sense_cross_play");
        assert_eq!(cross.rows.len(), 1);
        assert_eq!(cross.rows[0].label, ["m", "n"]);
        // r1 (m, focal) holds both goals, one reached; the partner holds none.
        assert_eq!(cross.rows[0].cells[0].value, Some(50.0));
        assert_eq!(cross.rows[0].cells[1].value, None);
    }
}

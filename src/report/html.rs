//! The report as pages a person reads in a browser: `index.html` with every table, its chart
//! and the list of runs, and one transcript page per run under `runs/`. The pages are
//! self-contained (styles inline, charts as inline SVG, portraits as data URLs): they open
//! from a file or an archive with no network.

use base64::Engine as _;
use minijinja::Environment;
use serde::Serialize;
use serde_json::json;

use crate::eval::label::Verdict;
use crate::eval::score::Tally;
use crate::eval::sotopia::Dimension;
use crate::sim::trace::Trace;
use crate::sim::turn::ActionType;
use crate::stages::evaluate::Evaluation;

use super::charts::{ChartError, score_chart};
use super::render::{agreement_cells, cell_parts, judge_cells};
use super::tables::Tables;

#[derive(Debug, thiserror::Error)]
pub enum HtmlError {
    #[error(transparent)]
    Chart(#[from] ChartError),
    #[error("cannot render the report page {page}: {source}")]
    Template {
        page: String,
        source: minijinja::Error,
    },
}

/// The pages, as file names relative to the report's directory, and their text.
pub struct Pages {
    pub index: String,
    pub runs: Vec<(String, String)>,
}

/// The directory of the run pages, in the report's directory.
pub const RUN_PAGES: &str = "runs";

const INDEX: &str = "index.html.j2";
const RUN: &str = "run.html.j2";

/// `text` HTML-escaped, with its Markdown code spans (the settings "Not shown" names, written
/// for tables.md too) as `<code>`.
fn code_spans(text: &str) -> minijinja::Value {
    let escaped = minijinja::HtmlEscape(text).to_string();
    if escaped.matches('`').count() % 2 == 1 {
        // An unpaired backtick is a literal one.
        return minijinja::Value::from_safe_string(escaped);
    }
    let html: String = escaped
        .split('`')
        .enumerate()
        .map(|(index, part)| {
            if index % 2 == 1 {
                format!("<code>{part}</code>")
            } else {
                part.to_string()
            }
        })
        .collect();
    minijinja::Value::from_safe_string(html)
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.add_filter("code_spans", |text: String| code_spans(&text));
    for (name, source) in [
        (INDEX, include_str!("index.html.j2")),
        (RUN, include_str!("run.html.j2")),
        ("style.css", include_str!("style.css")),
    ] {
        env.add_template(name, source)
            .expect("the report's templates parse (a unit test renders them)");
    }
    env
}

fn render(
    env: &Environment<'_>,
    name: &str,
    page: &str,
    context: serde_json::Value,
) -> Result<String, HtmlError> {
    env.get_template(name)
        .and_then(|template| {
            template.render(minijinja::Value::from(minijinja::value::Serde(&context)))
        })
        .map_err(|source| HtmlError::Template {
            page: page.to_string(),
            source,
        })
}

/// A run's page, relative to the report's directory: its id with every character a file
/// name may not hold replaced, and a short hash of the id so that two ids never share a page.
pub fn run_page_path(run: &str) -> String {
    let readable: String = run
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let hash = crate::hash::ContentHash::of(run.as_bytes()).to_hex();
    format!("{RUN_PAGES}/{readable}-{}.html", &hash[..8])
}

fn verdict_text(verdict: &Verdict, panel: usize) -> String {
    match verdict {
        Verdict::Unanimous { label } if panel == 1 => label.as_str().to_string(),
        Verdict::Unanimous { label } => format!("{} (unanimous)", label.as_str()),
        Verdict::Plurality { label } => format!("{} (most judges)", label.as_str()),
        Verdict::Split => "Partially Achieved (every judge differed)".to_string(),
        Verdict::Unscored { answered, needed } => {
            format!("unscored: {answered} judge(s) answered, {needed} needed")
        }
    }
}

fn run_score(evaluation: &Evaluation) -> String {
    let tally = Tally::of(evaluation.tasks.iter().map(|task| task.verdict.label()));
    let mut text = match tally.score() {
        Some(score) => format!("{score:.1} (n={})", tally.scored()),
        None => "- (no task scored)".to_string(),
    };
    if tally.missing > 0 {
        text.push_str(&format!(", {} unscored", tally.missing));
    }
    text
}

#[derive(Serialize)]
struct PortraitView {
    name: String,
    src: Option<String>,
    why: Option<String>,
    changed: bool,
}

#[derive(Serialize)]
struct TurnView {
    round: usize,
    speaker: String,
    human: bool,
    emotion: &'static str,
    emotion_description: String,
    face: String,
    body: String,
    action: Option<&'static str>,
    message: String,
    thought: String,
    rejected: Vec<crate::annotation::check::Refusal>,
    prompt_tokens: u64,
    completion_tokens: u64,
    portrait_note: Option<String>,
    /// Every portrait after this turn, when one of them changed in it (or it is the first
    /// turn that shows any).
    portraits: Vec<PortraitView>,
}

/// A run's transcript page. `portrait` reads a portrait's PNG by its hash.
fn run_page(
    env: &Environment<'_>,
    run: &str,
    trace: &Trace,
    evaluation: Option<&Evaluation>,
    portrait: &dyn Fn(&str) -> Result<Vec<u8>, String>,
) -> Result<String, HtmlError> {
    let settings = &trace.settings;
    let name = |index: usize| {
        settings
            .cast
            .get(index)
            .map_or_else(|| format!("participant {index}"), |(name, _)| name.clone())
    };
    let mut shown: Vec<Option<String>> = Vec::new();
    let mut turns = Vec::new();
    for record in &trace.turns {
        let turn = &record.turn;
        let changed = record.portraits_after != shown;
        let portraits = if changed && !record.portraits_after.is_empty() {
            record
                .portraits_after
                .iter()
                .enumerate()
                .map(|(index, hash)| {
                    let before = shown.get(index).cloned().flatten();
                    let (src, why) = match hash {
                        None => (None, Some("no portrait".to_string())),
                        Some(hash) => match portrait(hash) {
                            Ok(png) => (
                                Some(format!(
                                    "data:image/png;base64,{}",
                                    base64::engine::general_purpose::STANDARD.encode(png)
                                )),
                                None,
                            ),
                            Err(why) => (None, Some(why)),
                        },
                    };
                    PortraitView {
                        name: name(index),
                        src,
                        why,
                        changed: !shown.is_empty() && before != *hash,
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        shown.clone_from(&record.portraits_after);
        turns.push(TurnView {
            round: record.round,
            speaker: name(record.speaker),
            human: record.human,
            emotion: turn.emotion.as_str(),
            emotion_description: turn.emotion_description.clone(),
            face: turn.facial_expression.clone(),
            body: turn.body_actions.clone(),
            action: match turn.action_type {
                None | Some(ActionType::Speak) => None,
                Some(action) => Some(action.as_str()),
            },
            message: turn.message.clone(),
            thought: turn.inner_thought.clone(),
            rejected: record.rejected.clone(),
            prompt_tokens: record.prompt_tokens,
            completion_tokens: record.completion_tokens,
            portrait_note: record.portrait_note.clone(),
            portraits,
        });
    }
    let judgement = evaluation.map(|evaluation| {
        let tasks: Vec<_> = evaluation
            .tasks
            .iter()
            .map(|task| {
                let grades: Vec<String> = task
                    .grades
                    .iter()
                    .map(|grade| match grade {
                        None => "missing".to_string(),
                        Some(grade) => match &grade.reason {
                            Some(reason) => format!("{}: {reason}", grade.label.as_str()),
                            None => grade.label.as_str().to_string(),
                        },
                    })
                    .collect();
                json!({
                    "character": task.character,
                    "task": task.task.as_str(),
                    "verdict": verdict_text(&task.verdict, evaluation.judges.len()),
                    "unscored": task.verdict.label().is_none(),
                    "grades": grades,
                })
            })
            .collect();
        let missing: Vec<String> = evaluation
            .judges
            .iter()
            .enumerate()
            .flat_map(|(index, judge)| {
                judge.answers.iter().filter_map(move |answer| {
                    let why = answer.failed()?;
                    Some(format!(
                        "judge {} ({}), {}: {}",
                        index + 1,
                        judge.model,
                        answer.question,
                        crate::redact::redact(why)
                    ))
                })
            })
            .collect();
        let judges: Vec<&str> = evaluation.judges.iter().map(|j| j.model.as_str()).collect();
        // Per character and dimension: the panel's mean, then each judge's score and reasoning.
        let sotopia: Vec<_> = evaluation
            .sotopia
            .iter()
            .flat_map(|character| {
                Dimension::ALL.iter().enumerate().map(|(at, dimension)| {
                    let (low, high) = dimension.range();
                    let ratings: Vec<String> = character
                        .ratings
                        .iter()
                        .map(|by_judge| match by_judge {
                            Some(ratings) => {
                                format!("{}: {}", ratings[at].score, ratings[at].reasoning)
                            }
                            None => "missing".to_string(),
                        })
                        .collect();
                    json!({
                        "character": character.character,
                        "dimension": format!("{dimension} ({low} to {high})"),
                        "mean": character.mean[at]
                            .map_or("unrated".to_string(), |mean| format!("{mean:.1}")),
                        "ratings": ratings,
                    })
                })
            })
            .collect();
        json!({ "tasks": tasks, "missing": missing, "judges": judges, "sotopia": sotopia })
    });
    render(
        env,
        RUN,
        run,
        json!({
            "run": run,
            "scenario": settings.scenario,
            "mode": settings.mode.as_str(),
            "replicate": settings.replicate,
            "seed": settings.seed,
            "rounds": settings.rounds,
            "end": format!("ended {}", trace.end),
            "cast": settings.cast,
            "scene": trace.scene,
            "turns": turns,
            "judgement": judgement,
            "not_judged": "the run has no stored evaluation (see `viss status`)",
            "version": env!("CARGO_PKG_VERSION"),
        }),
    )
}

/// The report's pages: the tables with their charts, and a page per run that has a trace
/// (`evaluations` gives the grades of those judged). `left_out` lists failed runs; `portrait`
/// reads a portrait's PNG by its hash.
pub fn pages(
    tables: &Tables,
    traces: &[(String, Trace)],
    evaluations: &[(String, Evaluation)],
    left_out: &[String],
    portrait: &dyn Fn(&str) -> Result<Vec<u8>, String>,
) -> Result<Pages, HtmlError> {
    let env = environment();
    let mut table_views = Vec::new();
    for table in &tables.scores {
        let rows: Vec<_> = table
            .rows
            .iter()
            .map(|row| {
                let cells: Vec<_> = row
                    .cells
                    .iter()
                    .map(|cell| {
                        let (value, counts, note) = cell_parts(cell);
                        json!({
                            "value": value,
                            "counts": counts,
                            "note": note,
                            "empty": cell.value.is_none(),
                        })
                    })
                    .collect();
                json!({ "label": row.label, "cells": cells })
            })
            .collect();
        let header: Vec<&String> = table.row_header.iter().chain(&table.columns).collect();
        table_views.push(json!({
            "id": table.id,
            "title": table.title,
            "measure": table.measure,
            "resampling_unit": table.resampling_unit,
            "when_empty": table.when_empty,
            "header": header,
            "rows": rows,
            "chart": if table.chart { score_chart(table)? } else { None },
        }));
    }
    let agreement: Vec<[String; 7]> = tables.agreement.iter().map(agreement_cells).collect();
    let judges: Vec<[String; 6]> = tables.judges.iter().map(judge_cells).collect();
    let evaluation_of: std::collections::BTreeMap<&str, &Evaluation> = evaluations
        .iter()
        .map(|(run, evaluation)| (run.as_str(), evaluation))
        .collect();
    let mut runs = Vec::new();
    let mut run_links = Vec::new();
    for (run, trace) in traces {
        let evaluation = evaluation_of.get(run.as_str()).copied();
        let path = run_page_path(run);
        runs.push((
            path.clone(),
            run_page(&env, run, trace, evaluation, portrait)?,
        ));
        let cast: Vec<String> = trace
            .settings
            .cast
            .iter()
            .map(|(name, model)| format!("{name} ({model})"))
            .collect();
        run_links.push(json!({
            "href": path,
            "run": run,
            "mode": trace.settings.mode.as_str(),
            "cast": cast.join(", "),
            "turns": trace.turns.len(),
            "end": trace.end.to_string(),
            "score": evaluation.map_or_else(|| "not judged".to_string(), run_score),
        }));
    }
    let left_out: Vec<String> = left_out
        .iter()
        .map(|why| crate::redact::redact(why).into_owned())
        .collect();
    let settings = &tables.settings;
    let index = render(
        &env,
        INDEX,
        "index.html",
        json!({
            "runs": tables.runs,
            "scenarios": tables.scenarios,
            "sense_runs": tables.sense_runs,
            "sense_templates": tables.sense_templates,
            "level": format!("{:.0}", settings.bootstrap.level * 100.0),
            "resamples": settings.bootstrap.resamples,
            "seed": settings.bootstrap.seed,
            "min_scenarios": settings.min_scenarios,
            "unit": super::tables::RESAMPLING_UNIT,
            "tables": table_views,
            "agreement": agreement,
            "judges": judges,
            "not_shown": tables.not_shown,
            "run_links": run_links,
            "left_out": left_out,
            "version": env!("CARGO_PKG_VERSION"),
        }),
    )?;
    Ok(Pages { index, runs })
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn turn_record(speaker: usize, portraits: [Option<&str>; 2], edited: bool) -> Value {
        json!({
            "round": 1,
            "speaker": speaker,
            "shown": {"texts": [], "image_hashes": []},
            "turn": {
                "inner_thought": format!("thought {speaker} <b>"),
                "emotion": "Anger",
                "emotion_description": "cross",
                "image_edit": edited,
                "facial_expression": "a frown",
                "body_actions": "arms folded",
                "next_speaker": "uncertain",
                "next_speaker_index": null,
                "message": "Move the bike.",
            },
            "rejected": [],
            "request_key": "k",
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "portrait_edited": edited,
            "portrait_note": null,
            "portraits_after": portraits,
        })
    }

    /// Portraits are shown after the first turn and after a turn that changed one, marked, and
    /// not repeated when nothing changed; one that cannot be read says why; text is escaped.
    #[test]
    fn a_run_page_shows_the_portraits_when_they_change() {
        let trace: Trace = serde_json::from_value(json!({
            "settings": {
                "scenario": "s/e/sc1", "mode": "dv", "cast": [["Ada", "m"], ["Ben", "m"]],
                "replicate": 0, "seed": 7, "rounds": 3, "temperature": 0.7,
                "speaker_policy": "round_robin", "message_budget_words": null,
            },
            "turns": [
                turn_record(0, [Some("aa"), Some("bb")], false),
                turn_record(1, [Some("aa"), Some("bb")], false),
                turn_record(0, [Some("cc"), Some("bb")], true),
                turn_record(1, [Some("cc"), Some("gone")], true),
            ],
            "end": {"reason": "rounds_done"},
        }))
        .unwrap();
        let read = |hash: &str| match hash {
            "gone" => Err("portrait gone is not in the store".to_string()),
            other => Ok(other.as_bytes().to_vec()),
        };
        let page = run_page(&environment(), "s/e/sc1/sim/dv/m/r0", &trace, None, &read)
            .unwrap()
            .replace("&#x2f;", "/");
        let data = |hash: &str| {
            format!(
                "data:image/png;base64,{}",
                base64::engine::general_purpose::STANDARD.encode(hash)
            )
        };
        // Turn 1 shows both, turn 2 none, turn 3 Ada's new one and Ben's, turn 4 Ben's reason.
        assert_eq!(page.matches(&data("aa")).count(), 1, "{page}");
        assert_eq!(page.matches(&data("bb")).count(), 2, "{page}");
        assert_eq!(page.matches(&data("cc")).count(), 2, "{page}");
        assert_eq!(page.matches("Ada (changed)").count(), 1, "{page}");
        assert_eq!(page.matches("Ben (changed)").count(), 1, "{page}");
        assert!(page.contains("portrait gone is not in the store"));
        assert!(page.contains("thought 0 &lt;b&gt;") && !page.contains("<b>"));
        assert!(page.contains("Not judged: the run has no stored evaluation"));
    }

    #[test]
    fn code_spans_become_code_and_text_stays_escaped() {
        assert_eq!(
            code_spans("set `sotopia = true` in <stages/evaluate.toml>").to_string(),
            "set <code>sotopia = true</code> in &lt;stages&#x2f;evaluate.toml&gt;"
        );
        assert_eq!(code_spans("a ` b").to_string(), "a ` b");
    }
}

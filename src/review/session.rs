//! A review session at the terminal: each answer of the queue is shown (the scene's lines, the
//! answer field by field, its problems, where its pictures were written) and the person types
//! `a` (accept), `r` (reject), `e` (edit a field), `s` (skip) or `q` (quit). Every verdict is
//! written to the reviewer's file as it is given, so quitting loses nothing. It reads lines,
//! so a script can drive it through a pipe (as `viss play` can be).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::ReviewError;
use super::overlay::{check_field_against_schema, set_field};
use super::queue::{ReviewItem, field_label, fields, parse_field_path};
use super::verdicts::{self, Reviews, VerdictKind};
use crate::annotation::context::ContextLineKind;
use crate::dag::store::Store;
use crate::redact::for_terminal;
use crate::stages::{group_image, parse_script, portraits};

/// Where a session writes verdicts and pictures.
pub struct SessionPaths {
    /// `manifests/reviews`.
    pub reviews: PathBuf,
    /// Where an item's pictures are written for the person to open.
    pub pictures: PathBuf,
}

/// What a session did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SessionCounts {
    pub accepted: usize,
    pub rejected: usize,
    pub edited: usize,
    pub skipped: usize,
}

struct Terminal<'a> {
    input: &'a mut dyn BufRead,
    output: &'a mut dyn Write,
}

impl Terminal<'_> {
    fn say(&mut self, text: &str) -> Result<(), ReviewError> {
        self.output
            .write_all(text.as_bytes())
            .and_then(|()| self.output.flush())
            .map_err(ReviewError::Terminal)
    }

    /// The next line typed, trimmed; `None` when the input ended.
    fn ask(&mut self, question: &str) -> Result<Option<String>, ReviewError> {
        self.say(question)?;
        let mut line = String::new();
        match self
            .input
            .read_line(&mut line)
            .map_err(ReviewError::Terminal)?
        {
            0 => Ok(None),
            _ => Ok(Some(line.trim_end_matches(['\n', '\r']).trim().to_string())),
        }
    }
}

/// Reviews `queue` as `reviewer`, reading from `input` and writing to `output`.
pub fn run(
    store: &Store,
    queue: &[ReviewItem],
    reviews: &Reviews,
    reviewer: &str,
    paths: &SessionPaths,
    input: &mut dyn BufRead,
    output: &mut dyn Write,
) -> Result<SessionCounts, ReviewError> {
    verdicts::check_reviewer(reviewer)?;
    let mut terminal = Terminal { input, output };
    let mut counts = SessionCounts::default();
    if queue.is_empty() {
        terminal.say("nothing to review: every answer selected has your verdict\n")?;
        return Ok(counts);
    }
    'items: for (at, item) in queue.iter().enumerate() {
        terminal.say(&describe_item(
            store,
            item,
            reviews,
            at,
            queue.len(),
            paths,
        )?)?;
        let mut answer = item.shown.clone();
        let mut edited = false;
        loop {
            let prompt = if edited {
                "[a]ccept the rest  [r]eject  [e]dit another field  [n]ext  [q]uit > "
            } else {
                "[a]ccept  [r]eject  [e]dit a field  [s]kip  [q]uit > "
            };
            let Some(choice) = terminal.ask(prompt)? else {
                break 'items;
            };
            let kind = match choice.to_ascii_lowercase().as_str() {
                "a" | "accept" => VerdictKind::Accept,
                "r" | "reject" => VerdictKind::Reject,
                "e" | "edit" => VerdictKind::Edit,
                "s" | "skip" | "n" | "next" => {
                    if !edited {
                        counts.skipped += 1;
                    }
                    continue 'items;
                }
                "q" | "quit" => break 'items,
                other => {
                    terminal.say(&format!(
                        "`{}` is none of a, r, e, s, q\n",
                        for_terminal(other)
                    ))?;
                    continue;
                }
            };
            let mut edit = None;
            if kind == VerdictKind::Edit && !item.editable() {
                terminal.say("a synthetic cast is accepted or rejected as a whole\n")?;
                continue;
            }
            if kind == VerdictKind::Edit {
                let Some((role, field, value)) = ask_edit(&mut terminal, item, &answer)? else {
                    continue;
                };
                set_field(&mut answer, role.as_deref(), &field, value.clone())
                    .expect("checked by ask_edit");
                edit = Some((role, field, value));
            }
            let Some(comment) = terminal.ask("comment (enter: none) > ")? else {
                break 'items;
            };
            let mut verdict = item.verdict(kind, (!comment.is_empty()).then_some(comment));
            if let Some((role, field, value)) = edit {
                verdict.role = role;
                verdict.field = Some(field);
                verdict.value = Some(value);
            }
            verdicts::append(&paths.reviews, reviewer, &verdict)?;
            match kind {
                VerdictKind::Accept => counts.accepted += 1,
                VerdictKind::Reject => counts.rejected += 1,
                VerdictKind::Edit => {
                    if !edited {
                        counts.edited += 1;
                    }
                    edited = true;
                    terminal.say("edit kept\n")?;
                    continue;
                }
            }
            continue 'items;
        }
    }
    terminal.say(&format!(
        "{} accepted, {} rejected, {} edited, {} skipped; verdicts in {}\n",
        counts.accepted,
        counts.rejected,
        counts.edited,
        counts.skipped,
        paths.reviews.join(format!("{reviewer}.jsonl")).display()
    ))?;
    Ok(counts)
}

/// Asks which field and its new value until they make an answer that fits the stage's schema;
/// `None` when the person gives up (an empty field name).
fn ask_edit(
    terminal: &mut Terminal<'_>,
    item: &ReviewItem,
    answer: &Value,
) -> Result<Option<(Option<String>, String, Value)>, ReviewError> {
    loop {
        let Some(path) = terminal.ask("field (e.g. background or Ada.age; enter: back) > ")? else {
            return Ok(None);
        };
        if path.is_empty() {
            return Ok(None);
        }
        let (role, field) = match parse_field_path(answer, &path) {
            Ok(found) => found,
            Err(problem) => {
                terminal.say(&format!("{}\n", for_terminal(&problem)))?;
                continue;
            }
        };
        let current = fields(answer)
            .into_iter()
            .find(|(r, f, _)| *r == role && *f == field)
            .map(|(_, _, value)| value)
            .unwrap_or(Value::Null);
        let Some(typed) = ask_value(terminal, &current)? else {
            return Ok(None);
        };
        let value = if current.is_string() {
            Value::String(typed)
        } else {
            match serde_json::from_str(&typed) {
                Ok(value) => value,
                Err(e) => {
                    terminal.say(&format!(
                        "{} holds JSON ({}); {}\n",
                        field_label(role.as_deref(), &field),
                        compact(&current),
                        e
                    ))?;
                    continue;
                }
            }
        };
        let fits = check_field_against_schema(item.reviewable, role.as_deref(), &field, &value);
        match fits {
            Ok(()) => return Ok(Some((role, field, value))),
            Err(problem) => terminal.say(&format!("{}\n", for_terminal(&problem)))?,
        }
    }
}

/// The new value, typed on one line or, when the line is empty and `$EDITOR` is set, written
/// in the editor (starting from the current value).
fn ask_value(terminal: &mut Terminal<'_>, current: &Value) -> Result<Option<String>, ReviewError> {
    let editor = std::env::var("EDITOR")
        .ok()
        .filter(|e| !e.trim().is_empty());
    let question = if editor.is_some() {
        "new value (enter: open $EDITOR) > "
    } else {
        "new value > "
    };
    let Some(typed) = terminal.ask(question)? else {
        return Ok(None);
    };
    match editor {
        Some(editor) if typed.is_empty() => {
            let start = current
                .as_str()
                .map_or_else(|| compact(current), str::to_string);
            edit_in(&editor, &start).map(Some)
        }
        _ if typed.is_empty() => Ok(None),
        _ => Ok(Some(typed)),
    }
}

fn edit_in(editor: &str, start: &str) -> Result<String, ReviewError> {
    let file = tempfile::Builder::new()
        .prefix("viss-review-")
        .suffix(".txt")
        .tempfile()
        .map_err(ReviewError::Terminal)?;
    std::fs::write(file.path(), start).map_err(ReviewError::Terminal)?;
    let mut words = editor.split_whitespace();
    let program = words.next().unwrap_or(editor);
    let status = std::process::Command::new(program)
        .args(words)
        .arg(file.path())
        .status()
        .map_err(ReviewError::Terminal)?;
    if !status.success() {
        return Err(ReviewError::Terminal(std::io::Error::other(format!(
            "{editor} exited with {status}"
        ))));
    }
    let text = std::fs::read_to_string(file.path()).map_err(ReviewError::Terminal)?;
    Ok(text.trim_end().to_string())
}

fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The text shown for `item`: where it is in the queue, its scene, its pictures, the answer
/// and its problems, and any verdict that went stale.
fn describe_item(
    store: &Store,
    item: &ReviewItem,
    reviews: &Reviews,
    at: usize,
    total: usize,
    paths: &SessionPaths,
) -> Result<String, ReviewError> {
    let mut out = format!(
        "\n[{}/{}] {} {}{}\n",
        at + 1,
        total,
        item.stage(),
        item.item,
        if item.flagged() {
            format!(" (flagged: {} problem(s))", item.problems().len())
        } else {
            String::new()
        }
    );
    out.push_str(&scene_text(store, &item.scenario)?);
    for picture in write_pictures(store, &item.scenario, &paths.pictures)? {
        out.push_str(&format!("picture: {}\n", picture.display()));
    }
    out.push_str("answer:\n");
    for (role, field, value) in fields(&item.shown) {
        let shown = value
            .as_str()
            .map_or_else(|| compact(&value), str::to_string);
        out.push_str(&format!(
            "  {}: {}\n",
            field_label(role.as_deref(), &field),
            for_terminal(&shown)
        ));
    }
    if item.flagged() {
        out.push_str("problems:\n");
        // A gate's message names the role and the field itself.
        for problem in item.problems() {
            out.push_str(&format!("  - {}\n", for_terminal(&problem.message)));
        }
    }
    for (reviewer, verdict) in item.stale(reviews) {
        out.push_str(&format!(
            "stale: {reviewer} gave `{}` at {} on an earlier answer ({})\n",
            verdict.verdict.as_str(),
            verdict.time,
            verdict.answer.short()
        ));
    }
    Ok(out)
}

/// The scene's heading and lines, as the script has them.
pub fn scene_text(store: &Store, scenario: &str) -> Result<String, ReviewError> {
    let episode = crate::dag::Level::Episode.ancestor_of(scenario);
    let port = parse_script::SCENARIO.id();
    let output = port.output_name(scenario);
    let Some(record) = store.index().get(port.stage, episode)? else {
        return Ok("(the scene's script is not in the store)\n".to_string());
    };
    let Some(hash) = record.outputs.get(&output) else {
        return Ok("(the scene's script is not in the store)\n".to_string());
    };
    let scenario_record: parse_script::ScenarioRecord =
        serde_json::from_slice(&store.get_blob(hash)?).map_err(|e| ReviewError::BadRecord {
            stage: port.stage.to_string(),
            item: scenario.to_string(),
            message: e.to_string(),
        })?;
    let context = scenario_record.context();
    let mut out = String::from("scene:\n");
    if let Some(heading) = &context.heading {
        out.push_str(&format!("  {}\n", for_terminal(heading)));
    }
    for line in &context.lines {
        let text = for_terminal(&line.text);
        match (&line.kind, &line.speaker) {
            (ContextLineKind::Dialogue, Some(speaker)) => {
                out.push_str(&format!("  {}: {text}\n", for_terminal(speaker)));
            }
            _ => out.push_str(&format!("  ({text})\n")),
        }
    }
    Ok(out)
}

/// The scenario's group image and portraits, written under `dir` (named after the scenario)
/// for the person to open; their paths.
pub fn write_pictures(
    store: &Store,
    scenario: &str,
    dir: &Path,
) -> Result<Vec<PathBuf>, ReviewError> {
    let mut written = Vec::new();
    let folder = dir.join(scenario.replace('/', "-"));
    for port in [
        group_image::GROUP_IMAGE_PNG.id(),
        portraits::PORTRAIT_PNG.id(),
    ] {
        let Some(record) = store.index().get(port.stage, scenario)? else {
            continue;
        };
        for (name, hash) in &record.outputs {
            if !port.matches(name) {
                continue;
            }
            let file = if name.ends_with(".png") {
                name.clone()
            } else {
                format!("{}.png", name.replace(':', "-").replace(".png", ""))
            };
            let path = folder.join(sanitize(&file));
            let io = |source| ReviewError::Io {
                path: path.clone(),
                source,
            };
            std::fs::create_dir_all(&folder).map_err(io)?;
            std::fs::write(&path, store.get_blob(hash)?).map_err(io)?;
            written.push(path);
        }
    }
    Ok(written)
}

/// A file name from an output name: what is not a letter, digit, `-`, `_` or `.` becomes `_`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

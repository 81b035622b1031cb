//! Prompt templates (Jinja, rendered with minijinja) -> chat messages.
//!
//! # Template format
//!
//! A template is one file holding both messages. A line that is exactly `[system]` starts the
//! system message and a line that is exactly `[user]` starts the user message (surrounding
//! spaces are ignored). `[user]` is required, `[system]` optional; each appears at most once,
//! the system part first, both at the top level of the template (not inside `{% if %}` or
//! `{% for %}`), and nothing but `{# comments #}` and blank lines comes before the first one.
//! Markers are found in the template's source, so dialogue text that happens to read
//! `[user]` cannot split a message.
//!
//! Rendering is strict: an undefined variable or field is an error, never an empty string, so a
//! renamed context field fails loudly instead of silently dropping part of a prompt. Blocks
//! swallow their own line (`trim_blocks` and `lstrip_blocks`), trailing spaces are cut, runs of
//! blank lines become one, and each message is trimmed, so templates can be laid out for
//! reading. Nothing is HTML-escaped. The `tojson` filter is available.

use std::path::Path;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Serde, Value};
use minijinja::{AutoEscape, Environment, ErrorKind, UndefinedBehavior};
use serde::Serialize;

use super::request::Message;

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error(
        "cannot read prompt template {template}: {source}; check the path in the stage's config, \
         or run `viss init` to write the default prompts"
    )]
    Read {
        template: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {problem}", location(.template, *.line))]
    Render {
        template: String,
        line: Option<usize>,
        problem: String,
    },
    #[error("{}: {problem}", location(.template, *.line))]
    Markers {
        template: String,
        line: Option<usize>,
        problem: String,
    },
    #[error(
        "prompt template {template}: the context cannot be turned into template values: {detail}"
    )]
    Context { template: String, detail: String },
}

fn location(template: &str, line: Option<usize>) -> String {
    match line {
        Some(line) => format!("{template}:{line}"),
        None => template.to_string(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    System,
    User,
}

impl Section {
    fn marker(self) -> &'static str {
        match self {
            Section::System => "[system]",
            Section::User => "[user]",
        }
    }

    /// What a marker line becomes before rendering: control characters no script text holds,
    /// so the rendered output can be cut exactly where the markers were.
    fn sentinel(self) -> &'static str {
        match self {
            Section::System => "\u{1}viss-prompt-section:system\u{1}",
            Section::User => "\u{1}viss-prompt-section:user\u{1}",
        }
    }
}

/// Renders the template at `template_path` with `context` into a system message (when the
/// template has one) followed by a user message.
pub fn render_prompt(
    template_path: &Path,
    context: &impl Serialize,
) -> Result<Vec<Message>, PromptError> {
    let template = template_path.display().to_string();
    let source = std::fs::read_to_string(template_path).map_err(|source| PromptError::Read {
        template: template.clone(),
        source,
    })?;
    render_prompt_source(&template, &source, context)
}

/// [`render_prompt`] for a template already in memory; `template` names it in errors.
pub fn render_prompt_source(
    template: &str,
    source: &str,
    context: &impl Serialize,
) -> Result<Vec<Message>, PromptError> {
    let markers = find_markers(template, source)?;
    let marked_source = replace_markers(source, &markers);

    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_debug(true);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_syntax(
        SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .expect("default delimiters are valid"),
    );
    let compiled = env
        .template_from_named_str(template, &marked_source)
        .map_err(|e| render_error(template, source, context, &e))?;
    let value = Value::from(Serde(context));
    let rendered = compiled
        .render(value)
        .map_err(|e| render_error(template, source, context, &e))?;

    split_sections(template, &rendered, &markers)
}

/// Marker lines in source order, with their 1-based line numbers, checked for order and count.
fn find_markers(template: &str, source: &str) -> Result<Vec<(Section, usize)>, PromptError> {
    let mut markers = Vec::new();
    for (index, line) in source.lines().enumerate() {
        let section = match line.trim() {
            "[system]" => Section::System,
            "[user]" => Section::User,
            _ => continue,
        };
        let line = index + 1;
        if let Some((_, first)) = markers.iter().find(|(s, _)| *s == section) {
            return Err(markers_error(
                template,
                line,
                format!(
                    "a second {} line (the first is line {first}); use each marker once",
                    section.marker()
                ),
            ));
        }
        if section == Section::System && !markers.is_empty() {
            return Err(markers_error(
                template,
                line,
                "[system] comes after [user]; put the system part first".to_string(),
            ));
        }
        markers.push((section, line));
    }
    if !markers.iter().any(|(s, _)| *s == Section::User) {
        return Err(PromptError::Markers {
            template: template.to_string(),
            line: None,
            problem: "no [user] line; start the user message with a line that is exactly [user] \
                      (and the system message, if any, with [system])"
                .to_string(),
        });
    }
    Ok(markers)
}

fn markers_error(template: &str, line: usize, problem: String) -> PromptError {
    PromptError::Markers {
        template: template.to_string(),
        line: Some(line),
        problem,
    }
}

/// The source with each marker line's text swapped for its sentinel, line count unchanged so
/// that minijinja's line numbers stay those of the file.
fn replace_markers(source: &str, markers: &[(Section, usize)]) -> String {
    let mut out = String::with_capacity(source.len() + 64);
    for (index, line) in source.split_inclusive('\n').enumerate() {
        match markers.iter().find(|(_, at)| *at == index + 1) {
            Some((section, _)) => {
                out.push_str(section.sentinel());
                let ending = &line[line.trim_end_matches(['\r', '\n']).len()..];
                out.push_str(ending);
            }
            None => out.push_str(line),
        }
    }
    out
}

fn split_sections(
    template: &str,
    rendered: &str,
    markers: &[(Section, usize)],
) -> Result<Vec<Message>, PromptError> {
    let mut pieces: Vec<(Option<Section>, &str)> = Vec::new();
    let mut rest = rendered;
    let mut current = None;
    loop {
        let next = [Section::System, Section::User]
            .into_iter()
            .filter_map(|s| rest.find(s.sentinel()).map(|at| (at, s)))
            .min_by_key(|(at, _)| *at);
        match next {
            Some((at, section)) => {
                pieces.push((current, &rest[..at]));
                rest = &rest[at + section.sentinel().len()..];
                current = Some(section);
            }
            None => {
                pieces.push((current, rest));
                break;
            }
        }
    }
    let found: Vec<Section> = pieces.iter().filter_map(|(s, _)| *s).collect();
    let expected: Vec<Section> = markers.iter().map(|(s, _)| *s).collect();
    if found != expected {
        return Err(PromptError::Markers {
            template: template.to_string(),
            line: markers.first().map(|(_, line)| *line),
            problem: "the marker lines did not come out once each in the rendered text; keep \
                      [system] and [user] at the top level, outside {% if %}, {% for %} and \
                      macros"
                .to_string(),
        });
    }
    let mut messages = Vec::new();
    for (section, text) in pieces {
        let text = tidy(text);
        match section {
            None if !text.is_empty() => {
                let line = markers.first().map(|(_, line)| *line);
                return Err(PromptError::Markers {
                    template: template.to_string(),
                    line,
                    problem: format!(
                        "text before the first marker line would belong to no message: \"{}\"; \
                         move it below [system] or [user], or make it a {{# comment #}}",
                        truncate(&text, 60)
                    ),
                });
            }
            None => {}
            Some(section) if text.is_empty() => {
                let line = markers
                    .iter()
                    .find(|(s, _)| *s == section)
                    .map(|(_, line)| *line);
                return Err(PromptError::Markers {
                    template: template.to_string(),
                    line,
                    problem: format!(
                        "the {} message renders to nothing; write its text below the marker, or \
                         remove the marker",
                        section.marker()
                    ),
                });
            }
            Some(Section::System) => messages.push(Message::system(text)),
            Some(Section::User) => messages.push(Message::user(text)),
        }
    }
    Ok(messages)
}

/// Trailing spaces cut, runs of blank lines made one, the whole trimmed.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank_run = false;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            if !blank_run && !out.is_empty() {
                out.push('\n');
            }
            blank_run = true;
            continue;
        }
        blank_run = false;
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_string()
}

fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_string(),
    }
}

fn render_error(
    template: &str,
    source: &str,
    context: &impl Serialize,
    error: &minijinja::Error,
) -> PromptError {
    let line = error.line();
    let snippet = error
        .range()
        .and_then(|range| source.get(range))
        .or_else(|| line.and_then(|l| source.lines().nth(l - 1)))
        .map(|s| truncate(s.trim(), 80));
    let at = snippet.map(|s| format!(" in `{s}`")).unwrap_or_default();
    let detail = error
        .detail()
        .map(|d| format!(" ({d})"))
        .unwrap_or_default();
    let problem = match error.kind() {
        ErrorKind::UndefinedError => format!(
            "undefined variable or field{at}{detail}; the context's fields are {}. Fix the name in \
             the template, or test optional parts with {{% if name %}}",
            context_fields(context)
        ),
        ErrorKind::SyntaxError => format!("template syntax error{at}{detail}; fix the template"),
        kind => format!("{kind}{at}{detail}; fix the template or the values it is given"),
    };
    PromptError::Render {
        template: template.to_string(),
        line,
        problem,
    }
}

fn context_fields(context: &impl Serialize) -> String {
    match serde_json::to_value(context) {
        Ok(serde_json::Value::Object(map)) => map
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        _ => "(not an object)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::request::{Part, Role};

    fn text_of(message: &Message) -> &str {
        match &message.content[..] {
            [Part::Text(text)] => text,
            other => panic!("expected one text part, got {other:?}"),
        }
    }

    #[test]
    fn splits_system_and_user_at_marker_lines() {
        let source = "{# a comment #}\n[system]\nYou label {{ what }}.\n\n\n\n[user]\n{% for x in \
                      items %}\n- {{ x }}   \n{% endfor %}\nDone.\n";
        let messages = render_prompt_source(
            "t.j2",
            source,
            &json!({"what": "scenes", "items": ["a", "[user]"]}),
        )
        .unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].role, Role::System);
        assert_eq!(text_of(&messages[0]), "You label scenes.");
        assert_eq!(messages[1].role, Role::User);
        assert_eq!(text_of(&messages[1]), "- a\n- [user]\nDone.");
    }

    #[test]
    fn user_only_templates_give_one_message() {
        let messages =
            render_prompt_source("t.j2", "[user]\nHi {{ name }}", &json!({"name": "Ross"}))
                .unwrap();
        assert_eq!(messages, vec![Message::user("Hi Ross")]);
    }

    #[test]
    fn undefined_variables_name_the_file_and_line() {
        let source = "[system]\nok\n[user]\nline four\n{{ scenario.nme }}\n";
        let error =
            render_prompt_source("prompts/x.j2", source, &json!({"scenario": {"name": "a"}}))
                .unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, PromptError::Render { line: Some(5), .. }),
            "{message}"
        );
        assert!(
            message.starts_with("prompts/x.j2:5: undefined"),
            "{message}"
        );
        assert!(
            message.contains("scenario.nme") && message.contains("fields are scenario"),
            "{message}"
        );
        let error =
            render_prompt_source("x.j2", "[user]\n{% if missing %}x{% endif %}", &json!({}))
                .unwrap_err();
        assert!(
            error.to_string().starts_with("x.j2:2: undefined"),
            "{error}"
        );
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let error =
            render_prompt_source("x.j2", "[user]\nfine\n{% if %}\n", &json!({})).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("x.j2:3: template syntax error"),
            "{error}"
        );
    }

    #[test]
    fn marker_mistakes_are_explained() {
        let cases = [
            ("no markers at all", "no [user] line"),
            (
                "[user]\na\n[user]\nb",
                "x.j2:3: a second [user] line (the first is line 1)",
            ),
            (
                "[user]\na\n[system]\nb",
                "x.j2:3: [system] comes after [user]",
            ),
            ("stray\n[user]\na", "text before the first marker line"),
            (
                "[system]\n{{ '' }}\n[user]\na",
                "x.j2:1: the [system] message renders to nothing",
            ),
            (
                "{% if false %}\n[system]\n{% endif %}\n[user]\na",
                "did not come out once each",
            ),
            (
                "{% for i in [1, 2] %}\n[system]\n{% endfor %}\n[user]\na",
                "did not come out once each",
            ),
        ];
        for (source, expected) in cases {
            let result = render_prompt_source("x.j2", source, &json!({}));
            let error = result.unwrap_err().to_string();
            assert!(error.contains(expected), "{source}: {error}");
        }
    }

    #[test]
    fn reads_templates_from_files_and_names_missing_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.j2");
        std::fs::write(&path, "[system]\nS\n[user]\n{{ items | tojson }}\n").unwrap();
        let messages = render_prompt(&path, &json!({"items": [1, 2]})).unwrap();
        assert_eq!(text_of(&messages[1]), "[1, 2]");
        let missing = dir.path().join("missing.j2");
        let error = render_prompt(&missing, &json!({})).unwrap_err().to_string();
        assert!(
            error.contains("missing.j2") && error.contains("viss init"),
            "{error}"
        );
    }
}

//! Builders for the answers' JSON schemas.
//!
//! The schemas go to servers in two dialects at once: OpenAI's strict structured outputs
//! (every object closed with `additionalProperties: false` and every property required) and
//! llama.cpp's `json_schema_to_grammar` (which handles only a core of keywords). [`object`]
//! makes every object strict by construction, and the builders here emit nothing beyond
//! `type`, `properties`, `required`, `enum`, `items`, `minItems`, `maxItems`, `minLength`,
//! `pattern` and `description`.

use serde_json::{Map, Value, json};

use super::vocab::Vocabulary;

/// A closed object: every listed property is required and no other is allowed.
pub fn object(description: &str, properties: &[(&str, Value)]) -> Value {
    let mut props = Map::new();
    for (name, schema) in properties {
        props.insert((*name).to_string(), schema.clone());
    }
    let required: Vec<&str> = properties.iter().map(|(name, _)| *name).collect();
    json!({
        "type": "object",
        "description": description,
        "properties": props,
        "required": required,
        "additionalProperties": false,
    })
}

/// A non-empty string.
pub fn text(description: &str) -> Value {
    json!({ "type": "string", "minLength": 1, "description": description })
}

/// Longest one-sentence field a schema allows. A task is a short instruction; a bound also stops
/// a small model that loops inside a string.
pub const MAX_SENTENCE_CHARS: usize = 240;

/// Exactly one sentence: text without sentence-ending punctuation, closed by one `.`, `!` or `?`.
/// Stricter than [`super::check::sentence_count`] (no abbreviations such as "Dr."), so whatever
/// a constrained decoder writes also passes the validator.
pub fn sentence(description: &str) -> Value {
    json!({ "type": "string", "pattern": sentence_pattern(), "description": description })
}

/// `min` to `max` sentences of [`sentence`]'s kind, one space between them: a paragraph whose
/// length a decoder that follows patterns cannot run past (a small model otherwise retells the
/// whole dialogue in one field, until the local string cap cuts it mid-sentence).
pub fn sentences(description: &str, min: usize, max: usize) -> Value {
    let most = MAX_SENTENCE_CHARS - 1;
    let one = format!("{SENTENCE_CHAR}{{8,{most}}}{SENTENCE_END}");
    let more = (min.max(1) - 1, max.max(1) - 1);
    json!({
        "type": "string",
        "pattern": format!("^{one}( {one}){{{},{}}}$", more.0, more.1),
        "description": description,
    })
}

/// One sentence of [`sentence`]'s kind in the infinitive: "To", a space and a lowercase word
/// first (a goal). With `may_be_empty`, the empty string too (a goal dropped).
pub fn infinitive_sentence(description: &str, may_be_empty: bool) -> Value {
    let most = MAX_SENTENCE_CHARS - 5;
    let one = format!("To [a-z]{SENTENCE_CHAR}{{4,{most}}}{SENTENCE_END}");
    let pattern = if may_be_empty {
        format!("^({one})?$")
    } else {
        format!("^{one}$")
    };
    json!({ "type": "string", "pattern": pattern, "description": description })
}

fn sentence_pattern() -> String {
    let most = MAX_SENTENCE_CHARS - 1;
    format!("^{SENTENCE_CHAR}{{8,{most}}}{SENTENCE_END}$")
}

/// The pattern of one sentence that opens with `subject` and, when `mentioning` is not empty,
/// names one of them too: what a task must look like, for decoders that follow patterns. Each
/// name stands as a word (no letter or digit joined to it: "Noor's" names Noor, "Noors" does
/// not), as the validator's [`super::check::mentions`] reads it. A name a decoder cannot write
/// into a JSON string as it stands (see [`writable_raw`]) is left out: such a subject gets the
/// plain one-sentence pattern, and only the other names are offered to mention.
pub fn sentence_about_pattern(subject: &str, mentioning: &[String]) -> String {
    if !writable_raw(subject) {
        return sentence_pattern();
    }
    let subject = regex_literal(subject);
    let (lead, tail) = (TASK_LEAD_CHARS, TASK_TAIL_CHARS);
    let names: Vec<String> = mentioning
        .iter()
        .filter(|name| writable_raw(name))
        .map(|name| regex_literal(name))
        .collect();
    if names.is_empty() {
        return format!("^{subject}{WORD_BREAK}{SENTENCE_CHAR}{{7,{tail}}}{SENTENCE_END}$");
    }
    format!(
        "^{subject}{WORD_BREAK}({SENTENCE_CHAR}{{0,{lead}}}{WORD_BREAK})?({})\
         ({WORD_BREAK}{SENTENCE_CHAR}{{0,{tail}}})?{SENTENCE_END}$",
        names.join("|")
    )
}

/// Most characters [`sentence_about_pattern`] allows between the subject and the name it must
/// mention: a task names the other participant early ("Noor gets Theo to ...").
pub const TASK_LEAD_CHARS: usize = MAX_SENTENCE_CHARS / 2;

/// Most characters [`sentence_about_pattern`] allows after the subject, or after the name it
/// mentions: as many as a plain sentence holds. At 120 the default model ran into the limit in
/// most tasks of the demo, and the decoder ended them mid-word ("... every box with 'b.").
pub const TASK_TAIL_CHARS: usize = MAX_SENTENCE_CHARS - 1;

/// Which of [`sentence_about_pattern`]'s length limits a task sentence ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskCap {
    /// [`TASK_LEAD_CHARS`] before an offered name: the sentence went on without naming one of
    /// them, and a decoder that follows the pattern then had to write a name wherever it was
    /// ("... and he will lose the plant and a Mila and Noor.").
    BeforeName,
    /// [`TASK_TAIL_CHARS`] after the subject or the last offered name: a decoder then has to
    /// end wherever it is ("... to avoid the v.").
    Length,
}

/// Whether a task sentence ran into [`sentence_about_pattern`]'s length limits: a stretch before
/// an offered name of exactly [`TASK_LEAD_CHARS`], or one after the subject or the last offered
/// name of exactly [`TASK_TAIL_CHARS`]. Exactly, not "at least": an endpoint, which is not held
/// to the pattern, may write a longer sentence on purpose.
pub fn task_cap_reached(text: &str, subject: &str, mentioning: &[String]) -> Option<TaskCap> {
    let body = text.trim_end();
    let body = body.strip_suffix(['.', '!', '?']).unwrap_or(body);
    if !writable_raw(subject) {
        return (body.chars().count() == MAX_SENTENCE_CHARS - 1).then_some(TaskCap::Length);
    }
    let lower = body.to_lowercase();
    // The pattern opens with the subject; after that only the names it offers end a stretch.
    let subject = subject.to_lowercase();
    let mut spans: Vec<(usize, usize)> = word_spans(&lower, &subject)
        .into_iter()
        .filter(|(start, _)| *start == 0)
        .chain(
            mentioning
                .iter()
                .flat_map(|name| word_spans(&lower, &name.to_lowercase())),
        )
        .collect();
    spans.sort_unstable();
    let mut from = 0;
    for (start, end) in spans {
        if start >= from {
            // The word break beside each name belongs to the pattern, not to the stretch.
            let chars = lower[from..start].chars().count();
            if from > 0 && chars.saturating_sub(2) == TASK_LEAD_CHARS {
                return Some(TaskCap::BeforeName);
            }
            from = end;
        }
    }
    let after = lower[from..].chars().count();
    (after.saturating_sub(usize::from(from > 0)) == TASK_TAIL_CHARS).then_some(TaskCap::Length)
}

/// Where `needle` occurs in `haystack` as a whole word (byte ranges), as the pattern's
/// [`WORD_BREAK`]s around a name require.
fn word_spans(haystack: &str, needle: &str) -> Vec<(usize, usize)> {
    if needle.is_empty() {
        return Vec::new();
    }
    haystack
        .match_indices(needle)
        .filter(|(start, _)| {
            let end = start + needle.len();
            !haystack[..*start]
                .chars()
                .next_back()
                .is_some_and(char::is_alphanumeric)
                && !haystack[end..]
                    .chars()
                    .next()
                    .is_some_and(char::is_alphanumeric)
        })
        .map(|(start, _)| (start, start + needle.len()))
        .collect()
}

/// A sentence character that is not part of a word: what must stand between a name and the
/// words around it. Listed rather than "not a letter": the validator's `mentions` counts every
/// Unicode letter as part of a word, and a class of "not ASCII letters" let the default model
/// write "způsobíVemt".
const WORD_BREAK: &str = r#"[ ,;:'()/-]"#;

/// A character inside a sentence. The class also leaves out the quote, the backslash and line
/// breaks: llama.cpp copies a pattern's characters into the JSON string unescaped.
const SENTENCE_CHAR: &str = r#"[^.!?"\\\n\r\t]"#;
const SENTENCE_END: &str = "[.!?]";

/// Whether a pattern may hold `text` literally. llama.cpp copies a pattern's characters into
/// the JSON string unescaped, so a quote, a backslash or a control character in a name (a
/// Fountain cue may be `"BIG" JOE`) would make the decoder end the string early or write
/// invalid JSON, and every answer of the local model would fail.
fn writable_raw(text: &str) -> bool {
    !text.chars().any(|c| c == '"' || c == '\\' || c < ' ')
}

/// `text` as a regular expression that matches exactly it.
fn regex_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\^$.|?*+()[]{}".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One label of a vocabulary.
pub fn label<V: Vocabulary>(description: &str) -> Value {
    labels_of(description, V::ALL)
}

/// One label out of a subset of a vocabulary.
pub fn labels_of<V: Vocabulary>(description: &str, allowed: &[V]) -> Value {
    let names: Vec<&str> = allowed.iter().map(|v| v.as_str()).collect();
    json!({ "type": "string", "enum": names, "description": description })
}

pub fn array(
    description: &str,
    items: Value,
    min_items: Option<usize>,
    max_items: Option<usize>,
) -> Value {
    let mut schema = json!({ "type": "array", "description": description, "items": items });
    if let Some(min) = min_items {
        schema["minItems"] = json!(min);
    }
    if let Some(max) = max_items {
        schema["maxItems"] = json!(max);
    }
    schema
}

/// The per-role list every step answers with: one object per participant, each naming its role
/// in `name` first (so a model writing left to right commits to the role before describing it).
pub fn roles(description: &str, role_properties: &[(&str, Value)]) -> Value {
    let mut properties = vec![(
        "name",
        text("The participant's name, spelled exactly as listed in the prompt."),
    )];
    properties.extend(role_properties.iter().cloned());
    array(
        description,
        object("One participant.", &properties),
        Some(1),
        None,
    )
}

/// Walks a schema and names every place that breaks strict mode or uses a keyword outside the
/// core both dialects understand; empty when the schema is fine.
#[cfg(test)]
pub fn strictness_problems(schema: &Value) -> Vec<String> {
    const ALLOWED: &[&str] = &[
        "type",
        "properties",
        "required",
        "enum",
        "items",
        "minItems",
        "maxItems",
        "minLength",
        "pattern",
        "description",
        "additionalProperties",
    ];
    let mut problems = Vec::new();
    walk(schema, "$", &mut problems, ALLOWED);
    problems
}

#[cfg(test)]
fn walk(schema: &Value, path: &str, problems: &mut Vec<String>, allowed: &[&str]) {
    let Some(map) = schema.as_object() else {
        problems.push(format!("{path}: not an object"));
        return;
    };
    for key in map.keys() {
        if !allowed.contains(&key.as_str()) {
            problems.push(format!(
                "{path}: keyword {key} is outside the supported core"
            ));
        }
    }
    match map.get("type").and_then(Value::as_str) {
        Some("object") => {
            if map.get("additionalProperties") != Some(&Value::Bool(false)) {
                problems.push(format!("{path}: additionalProperties is not false"));
            }
            let properties = map.get("properties").and_then(Value::as_object);
            let mut keys: Vec<&str> = properties
                .map(|p| p.keys().map(String::as_str).collect())
                .unwrap_or_default();
            let mut required: Vec<&str> = map
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            keys.sort_unstable();
            required.sort_unstable();
            if keys != required {
                problems.push(format!(
                    "{path}: required {required:?} differs from properties {keys:?}"
                ));
            }
            for (key, property) in properties.into_iter().flatten() {
                walk(property, &format!("{path}.{key}"), problems, allowed);
            }
        }
        Some("array") => match map.get("items") {
            Some(items) => walk(items, &format!("{path}[]"), problems, allowed),
            None => problems.push(format!("{path}: array without items")),
        },
        Some("string" | "integer" | "number" | "boolean") => {}
        other => problems.push(format!("{path}: unexpected type {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_reaches_a_model_with_its_properties_in_the_order_written() {
        // A model writes the properties in the order the schema lists them: a task's draft
        // before its rewrite, the behaviour tasks before the outcome. Sorted keys would undo it.
        let tasks = crate::stages::tasks::answer::schema();
        let wire = tasks.to_string();
        let at = |key: &str| wire.find(&format!("\"{key}\":")).unwrap();
        assert!(at("name") < at("expression_task"), "{wire}");
        assert!(at("interaction_regulation_task") < at("interaction_outcome_task"));
        let goals = crate::stages::goals::answer::schema().to_string();
        let at = |key: &str| goals.find(&format!("\"{key}\":")).unwrap();
        assert!(
            at("draft") < at("issue") && at("issue") < at("goal") && at("goal") < at("category")
        );
    }

    #[test]
    fn a_task_stretch_of_exactly_the_pattern_limit_is_cut() {
        let (lead, tail) = (TASK_LEAD_CHARS, TASK_TAIL_CHARS);
        let stretch = |n: usize| "a".repeat(n);
        let others = ["Theo".to_string()];
        // After the subject and its word break, with no name offered.
        let cut = format!("Noor {}.", stretch(tail));
        assert_eq!(task_cap_reached(&cut, "Noor", &[]), Some(TaskCap::Length));
        assert!(task_cap_reached(&format!("Noor {}.", stretch(tail - 1)), "Noor", &[]).is_none());
        // An endpoint's longer sentence is its choice.
        assert!(task_cap_reached(&format!("Noor {}.", stretch(tail + 9)), "Noor", &[]).is_none());
        // Before and after an offered name; a later mention of the subject ends nothing.
        let before = format!("Noor {} Theo agrees.", stretch(lead));
        assert_eq!(
            task_cap_reached(&before, "Noor", &others),
            Some(TaskCap::BeforeName)
        );
        assert!(
            task_cap_reached(
                &format!("Noor {} Theo agrees.", stretch(tail)),
                "Noor",
                &others
            )
            .is_none()
        );
        let after = format!("Noor gets Theo {}.", stretch(tail));
        assert_eq!(
            task_cap_reached(&after, "Noor", &others),
            Some(TaskCap::Length)
        );
        let subject_again = format!("Noor gets Theo {} for Noor.", stretch(tail - 9));
        assert_eq!(
            task_cap_reached(&subject_again, "Noor", &others),
            Some(TaskCap::Length)
        );
        // Each cut above is what the pattern itself allows at most.
        let pattern = regex::Regex::new(&sentence_about_pattern("Noor", &others)).unwrap();
        assert!(pattern.is_match(&after), "{after}");
        assert!(pattern.is_match(&before), "{before}");
        assert!(!pattern.is_match(&format!("Noor gets Theo {}.", stretch(tail + 1))));
        assert!(!pattern.is_match(&format!("Noor {} Theo agrees.", stretch(lead + 1))));
    }

    #[test]
    fn a_paragraph_holds_from_min_to_max_sentences() {
        let schema = sentences("d", 2, 4);
        let pattern = schema["pattern"].as_str().unwrap();
        assert!(matches(pattern, "Noor tapes a box. Theo sits on the sofa."));
        assert!(!matches(pattern, "Noor tapes a box shut in the flat."));
        let five =
            "Noor tapes it. Theo sits down. Mila waits there. Bruno stamps it. Dennis drives.";
        assert!(!matches(pattern, five));
        assert!(matches(pattern, five.trim_end_matches(" Dennis drives.")));
        assert!(!matches(pattern, "Noor tapes a box. Theo sits on the sofa"));
        llama_cpp_2::json_schema_to_grammar(&schema.to_string()).unwrap();
    }

    /// Whether `text` matches `pattern` as a JSON-schema validator reads it.
    fn matches(pattern: &str, text: &str) -> bool {
        jsonschema::is_valid(&json!({"type": "string", "pattern": pattern}), &json!(text))
    }

    #[test]
    fn a_task_pattern_takes_the_names_as_words_as_the_validator_does() {
        let others = ["Theo".to_string(), "Mila".to_string()];
        let outcome = sentence_about_pattern("Noor", &others);
        for text in [
            "Noor gets Theo to pay for the dent.",
            "Noor's message reaches Theo.",
            "Noor, with Mila's help, wins.",
            "Noor and Theo agree on a price!",
        ] {
            assert!(matches(&outcome, text), "{text}");
            assert!(super::super::check::mentions(text, "Noor"), "{text}");
        }
        for text in [
            "Noors gets Theo to pay.",
            "Noor gets Theodora to pay.",
            "Noor gets a deal from XTheo.",
            "Noor gets Theo to pay. Then he leaves.",
            "Theo gets Noor to pay.",
        ] {
            assert!(!matches(&outcome, text), "{text}");
        }
        let expression = sentence_about_pattern("Noor", &[]);
        assert!(matches(
            &expression,
            "Noor says what the deposit means to her."
        ));
        assert!(!matches(&expression, "Noorah says what she wants."));
        assert!(!matches(&expression, "Noor sighs"));
    }

    /// Issue 16 fuzz work: a name with a quote or a backslash went into the pattern as it stood,
    /// and llama.cpp's grammar then made the local model write it unescaped, ending the JSON
    /// string early. Such names are left out of the pattern; the validator still asks for them.
    #[test]
    fn names_a_decoder_cannot_write_raw_are_left_out() {
        let quoted = sentence_about_pattern("\"Big\" Joe", &["Ann".to_string()]);
        assert_eq!(quoted, sentence_pattern());
        let outcome = sentence_about_pattern("Noor", &["C:\\Bo".to_string(), "Theo".to_string()]);
        assert!(
            outcome.contains("(Theo)") && !outcome.contains("Bo"),
            "{outcome}"
        );
        assert!(matches(&outcome, "Noor gets Theo to pay."));
        let alone = sentence_about_pattern("Noor", &["Tab\tBo".to_string()]);
        assert_eq!(alone, sentence_about_pattern("Noor", &[]));
    }

    #[test]
    fn walker_flags_open_objects_and_missing_required() {
        let open =
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": []});
        let problems = strictness_problems(&open);
        assert_eq!(problems.len(), 2, "{problems:?}");
        let fancy = json!({"type": "string", "format": "email"});
        assert_eq!(strictness_problems(&fancy).len(), 1);
        let fine = object(
            "x",
            &[
                ("a", text("a")),
                ("b", array("b", text("b"), Some(1), Some(3))),
            ],
        );
        assert!(strictness_problems(&fine).is_empty());
    }

    /// The embedded model under these schemas' grammar (the model is fetched as in every test
    /// that needs it).
    #[test]
    fn the_embedded_model_follows_the_one_sentence_schemas() {
        use crate::annotation::check::{mentions, sentence_count};
        use crate::annotation::schema;
        use crate::llm::Message;
        use crate::llm::local::{LocalBackend, LocalConfig};
        use crate::models::ModelCache;
        let gguf = ModelCache::from_env()
            .and_then(|cache| cache.ensure_local_llm())
            .expect("fetch the local LLM");
        let config = LocalConfig {
            context_tokens: 2048,
            max_tokens: 256,
            ..LocalConfig::new(gguf)
        };
        let backend = LocalBackend::load(&config).expect("load the local LLM");
        let task_schema = schema::object(
            "Tasks.",
            &[
                ("coaxing_task", schema::sentence("One sentence about Mary.")),
                (
                    "outcome_task",
                    schema::sentence("One sentence about Mary and Tom."),
                ),
            ],
        );
        // Asking for several sentences: the grammar, not the model's obedience, keeps it to one.
        let conversation = vec![
            Message::system("You write role-play instructions. Answer with JSON only."),
            Message::user(
                "Mary wants her brother Tom to move out of her flat. Write, in three or four \
                 sentences each, how Mary should coax him and what she must get Tom to do.",
            ),
        ];
        let answer = backend
            .generate(&conversation, Some(&task_schema), 0.0, None, None)
            .unwrap();
        let value: Value =
            serde_json::from_str(&answer.text).unwrap_or_else(|e| panic!("{e}: {}", answer.text));
        for field in ["coaxing_task", "outcome_task"] {
            let text = value[field].as_str().unwrap();
            assert_eq!(sentence_count(text), 1, "{field}: {text}");
            assert!(
                text.len() >= 9 && text.len() <= schema::MAX_SENTENCE_CHARS,
                "{text}"
            );
        }

        // A pattern that names who the sentence is about and whom it must mention is followed
        // to the letter, with names no model would write unprompted.
        let mut about = json!({"type": "string"});
        about["pattern"] = Value::from(schema::sentence_about_pattern(
            "Zorbl",
            &["Quixa".into(), "Vemt".into()],
        ));
        let task_schema = schema::object("Tasks.", &[("outcome_task", about)]);
        let answer = backend
            .generate(&conversation, Some(&task_schema), 0.0, None, None)
            .unwrap();
        let value: Value =
            serde_json::from_str(&answer.text).unwrap_or_else(|e| panic!("{e}: {}", answer.text));
        let text = value["outcome_task"].as_str().unwrap();
        assert!(text.starts_with("Zorbl"), "{text}");
        assert!(mentions(text, "Zorbl"), "{text}");
        assert!(mentions(text, "Quixa") || mentions(text, "Vemt"), "{text}");
        assert_eq!(sentence_count(text), 1, "{text}");
    }
}

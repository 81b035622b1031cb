//! Words: how the gates and the context split text into words, and the phrases of a step's
//! prompt that an answer must not copy.

use serde_json::Value;

/// The lowercased words of `text`: runs of letters and digits (with inner apostrophes and
/// hyphens), a possessive "'s" dropped.
pub fn words(text: &str) -> Vec<String> {
    marked_words(text)
        .into_iter()
        .map(|(word, _)| word)
        .collect()
}

/// [`words`], each with whether a possessive "'s" was dropped from it.
pub fn marked_words(text: &str) -> Vec<(String, bool)> {
    let is_apostrophe = |c: char| c == '\'' || c == '\u{2019}';
    text.split(|c: char| !(c.is_alphanumeric() || is_apostrophe(c) || c == '-'))
        .map(|word| word.trim_matches(|c: char| is_apostrophe(c) || c == '-'))
        .map(|word| {
            let word = word.to_lowercase();
            match word
                .strip_suffix("'s")
                .or_else(|| word.strip_suffix("\u{2019}s"))
            {
                Some(stem) => (stem.to_string(), true),
                None => (word, false),
            }
        })
        .filter(|(word, _)| !word.is_empty())
        .collect()
}

/// The literal text a step's prompt shows the model, as runs of words a field must not copy:
/// the template's text outside its tags (and the string literals inside them), and the
/// descriptions in the step's schema. Runs break at line ends, quotes, `<placeholders>` and
/// `...`, so that an example's pieces ("<name> feels better.") are runs of their own. Empty
/// (nothing to copy) for a context read from the store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Instructions {
    runs: Vec<Vec<String>>,
}

impl Instructions {
    /// From the template's source (minijinja syntax) and the step's answer schema.
    pub fn from_prompt(template: &str, schema: &Value) -> Instructions {
        let mut pieces = Vec::new();
        let mut rest = template;
        while !rest.is_empty() {
            let Some(open) = rest
                .find('{')
                .filter(|&i| matches!(rest[i + 1..].chars().next(), Some('{' | '%' | '#')))
            else {
                pieces.push(rest.to_string());
                break;
            };
            pieces.push(rest[..open].to_string());
            let closer = match &rest[open + 1..open + 2] {
                "{" => "}}",
                "%" => "%}",
                _ => "#}",
            };
            let tag_end = rest[open + 2..]
                .find(closer)
                .map_or(rest.len(), |i| open + 2 + i + closer.len());
            let tag = &rest[open..tag_end];
            if closer != "#}" {
                pieces.extend(string_literals(tag));
            }
            rest = &rest[tag_end..];
        }
        let mut descriptions = Vec::new();
        collect_descriptions(schema, &mut descriptions);
        pieces.extend(descriptions);
        let runs = pieces
            .iter()
            .flat_map(|piece| split_runs(piece))
            .filter(|run| !run.is_empty())
            .collect();
        Instructions { runs }
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The runs of words, each a phrase of the prompt a field must not copy.
    pub fn runs(&self) -> &[Vec<String>] {
        &self.runs
    }
}

/// The string literals in a template tag (`{{ ", following their style" if x else "" }}`).
fn string_literals(tag: &str) -> Vec<String> {
    let mut literals = Vec::new();
    let mut chars = tag.chars();
    while let Some(c) = chars.next() {
        if c == '"' || c == '\'' {
            let literal: String = chars.by_ref().take_while(|&d| d != c).collect();
            literals.push(literal);
        }
    }
    literals
}

fn collect_descriptions(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                match inner {
                    Value::String(text) if key == "description" => into.push(text.clone()),
                    _ => collect_descriptions(inner, into),
                }
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|item| collect_descriptions(item, into)),
        _ => {}
    }
}

/// The runs of words of one piece of prompt text, split at line ends, quotes, `<...>` and `...`.
fn split_runs(piece: &str) -> Vec<Vec<String>> {
    let mut runs = Vec::new();
    for line in piece.lines() {
        let line = line.replace("...", "\"");
        let mut current = String::new();
        let mut in_placeholder = false;
        for c in line.chars() {
            match c {
                '<' => {
                    in_placeholder = true;
                    runs.push(words(&std::mem::take(&mut current)));
                }
                '>' if in_placeholder => in_placeholder = false,
                '"' | '\u{201c}' | '\u{201d}' => runs.push(words(&std::mem::take(&mut current))),
                _ if in_placeholder => {}
                _ => current.push(c),
            }
        }
        runs.push(words(&current));
    }
    runs
}

//! Finding the JSON value in a model's answer when the server does not constrain its format:
//! models wrap JSON in ``` fences or prose. Truncated or malformed JSON is an error (the caller
//! re-asks), never repaired by guessing.

use serde_json::Value;

/// How many candidate openings (`{` / `[`) are tried before giving up: bounds the work on
/// long prose answers.
const MAX_CANDIDATES: usize = 32;

/// The JSON value in `text`: the whole text, else the body of the first ``` fence, else the
/// first balanced `{...}` / `[...]` that parses. The error says why none was found, in words
/// fit to send back to the model.
pub fn parse_json_tolerant(text: &str) -> Result<Value, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("the answer was empty; it must be a JSON value".to_string());
    }
    let whole_error = match serde_json::from_str::<Value>(trimmed) {
        Ok(value) => return Ok(value),
        Err(error) => error,
    };
    if let Some(fenced) = first_fence_body(trimmed)
        && let Ok(value) = serde_json::from_str::<Value>(fenced.trim())
    {
        return Ok(value);
    }
    let mut found_balanced = false;
    for (start, _) in trimmed
        .char_indices()
        .filter(|(_, c)| *c == '{' || *c == '[')
        .take(MAX_CANDIDATES)
    {
        if let Some(end) = balanced_end(&trimmed[start..]) {
            found_balanced = true;
            if let Ok(value) = serde_json::from_str::<Value>(&trimmed[start..start + end]) {
                return Ok(value);
            }
        }
    }
    if found_balanced {
        Err(format!("the answer is not valid JSON: {whole_error}"))
    } else {
        Err(format!(
            "the answer contains no complete JSON object or array (it may be truncated): \
             {whole_error}"
        ))
    }
}

/// The text between the first ``` line and the next ```, without the language tag.
fn first_fence_body(text: &str) -> Option<&str> {
    let open = text.find("```")?;
    let after_open = &text[open + 3..];
    // Skip a language tag such as `json` up to the end of the line.
    let body_start = after_open
        .find('\n')
        .map(|newline| newline + 1)
        .unwrap_or(0);
    let body = &after_open[body_start..];
    let close = body.find("```")?;
    Some(&body[..close])
}

/// Length of the balanced bracket group that starts `text` (which begins with `{` or `[`),
/// skipping brackets inside strings; `None` when it never closes (truncated output).
fn balanced_end(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (index, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(index + 1);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_json_parses() {
        assert_eq!(
            parse_json_tolerant(" {\"a\": 1} ").unwrap(),
            json!({"a": 1})
        );
        assert_eq!(parse_json_tolerant("[1,2]").unwrap(), json!([1, 2]));
    }

    #[test]
    fn fenced_json_is_extracted() {
        let text = "Here you go:\n```json\n{\"label\": \"joy\", \"n\": [1]}\n```\nHope it helps.";
        assert_eq!(
            parse_json_tolerant(text).unwrap(),
            json!({"label": "joy", "n": [1]})
        );
    }

    #[test]
    fn first_balanced_object_in_prose_is_extracted_and_brackets_in_strings_are_ignored() {
        let text =
            r#"Sure! The answer is {"text": "a } tricky \" [ string", "ok": true} and that's it {"#;
        assert_eq!(
            parse_json_tolerant(text).unwrap(),
            json!({"text": "a } tricky \" [ string", "ok": true})
        );
    }

    #[test]
    fn truncated_json_is_an_error_not_a_guess() {
        let problem = parse_json_tolerant("{\"label\": \"jo").unwrap_err();
        assert!(problem.contains("truncated"), "{problem}");
        assert!(parse_json_tolerant("").unwrap_err().contains("empty"));
    }

    #[test]
    fn malformed_json_is_an_error() {
        let problem = parse_json_tolerant("{\"a\": 1,, }").unwrap_err();
        assert!(problem.contains("not valid JSON"), "{problem}");
    }
}

//! What viss stores or prints never holds an API key, and what it prints for people never holds
//! raw control characters.
//!
//! One registry of secrets serves everything: the values of the environment variables that the
//! project's endpoints name in `api_key_env` (the app registers them when it opens the project)
//! and any key a backend was given (registered when it is made). [`redact`] blanks them out of a
//! text; [`for_terminal`] does that and escapes control characters, for human-readable output.
//! The registry is process-wide on purpose: the secrets come from the process's environment, and
//! what must not show them is everything the process writes.
//!
//! Values shorter than [`MIN_SECRET_CHARS`] are not secrets here: no real key is that short,
//! and blanking every `local` or `none` out of the output would garble it (servers that need
//! no key are often given a placeholder such as `ollama`).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::RwLock;

/// What stands where a secret was.
pub const REDACTED: &str = "<redacted>";

/// Shorter values are never treated as secrets (see the module docs).
pub const MIN_SECRET_CHARS: usize = 8;

/// Longest first, so a secret that contains another is blanked whole.
static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Adds `secret` (trimmed, as backends send it) to what is never stored or printed.
pub fn register_secret(secret: &str) {
    let secret = secret.trim();
    if secret.chars().count() < MIN_SECRET_CHARS {
        return;
    }
    let mut secrets = SECRETS
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !secrets.iter().any(|known| known == secret) {
        secrets.push(secret.to_string());
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    }
}

/// `text` with every registered secret replaced by [`REDACTED`].
pub fn redact(text: &str) -> Cow<'_, str> {
    let secrets = SECRETS
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut out = Cow::Borrowed(text);
    for secret in secrets.iter() {
        if out.contains(secret.as_str()) {
            out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
        }
    }
    out
}

/// [`redact`] for a `String` that is kept: no copy when nothing is redacted.
pub fn redact_owned(text: String) -> String {
    match redact(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(redacted) => redacted,
    }
}

/// [`redact`] for bytes that are UTF-8 text (JSON); other bytes are returned as they are (a
/// secret is text, and blanking it inside an image would only corrupt the image).
pub fn redact_bytes(bytes: Vec<u8>) -> Vec<u8> {
    match std::str::from_utf8(&bytes) {
        Ok(text) => match redact(text) {
            Cow::Borrowed(_) => bytes,
            Cow::Owned(redacted) => redacted.into_bytes(),
        },
        Err(_) => bytes,
    }
}

/// Untrusted text (a server's words, a file name, a stored error) as it may be shown to a
/// person: secrets redacted, and every control character (NUL, BEL, ESC, CR, newline, tab, C1
/// controls) and bidirectional-override character written as a JSON escape (`\n`, `\u001b`),
/// so that it can neither drive the terminal nor fake lines of output. The escapes are JSON's so
/// that a JSON document shown line by line stays JSON. JSON output needs only [`redact`]: serde
/// escapes control characters in strings.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    let redacted = redact(text);
    if !redacted.chars().any(needs_escape) {
        return redacted;
    }
    let mut out = String::with_capacity(redacted.len() + 8);
    for c in redacted.chars() {
        if needs_escape(c) {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                // Every character escaped is in the Basic Multilingual Plane.
                other => {
                    let _ = write!(out, "\\u{:04x}", u32::from(other));
                }
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    // U+202A..U+202E and U+2066..U+2069 reorder the text shown after them.
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_secrets_are_blanked_out_longest_first() {
        register_secret("  redact-test-secret-0001  ");
        register_secret("redact-test-secret-0001-and-more");
        let text = "key redact-test-secret-0001-and-more, then redact-test-secret-0001.";
        assert_eq!(redact(text), "key <redacted>, then <redacted>.");
        assert!(matches!(redact("nothing secret here"), Cow::Borrowed(_)));
        let bytes = redact_bytes(b"{\"k\": \"redact-test-secret-0001\"}".to_vec());
        assert_eq!(bytes, b"{\"k\": \"<redacted>\"}");
        assert_eq!(
            redact_bytes(vec![0xff, 0xfe]),
            vec![0xff, 0xfe],
            "not text: kept"
        );
    }

    #[test]
    fn short_values_are_not_secrets() {
        register_secret("ollama");
        assert_eq!(redact("ollama:qwen2.5"), "ollama:qwen2.5");
    }

    #[test]
    fn terminal_text_has_control_characters_escaped_and_secrets_redacted() {
        register_secret("redact-test-terminal-key");
        let hostile = "a\0b\x07c\x1b[2Jd\re\nf\u{9b}g\u{202e}h redact-test-terminal-key";
        let shown = for_terminal(hostile);
        assert_eq!(
            shown,
            "a\\u0000b\\u0007c\\u001b[2Jd\\re\\nf\\u009bg\\u202eh <redacted>"
        );
        assert!(!shown.chars().any(needs_escape));
        assert!(matches!(
            for_terminal("plain text, ünïcode"),
            Cow::Borrowed(_)
        ));
        // A line of JSON stays JSON, with the same value.
        let json = "{\"a\": \"x\u{9b}\u{202e}y\"}";
        let shown: serde_json::Value = serde_json::from_str(&for_terminal(json)).unwrap();
        assert_eq!(
            shown,
            serde_json::from_str::<serde_json::Value>(json).unwrap()
        );
    }
}

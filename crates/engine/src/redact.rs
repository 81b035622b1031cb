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

/// `text` with every registered secret replaced by [`REDACTED`], however it is spelled: as it
/// is, or with any of its characters escaped as JSON allows (`\/`, `\u0041`, a surrogate pair),
/// escaped again inside an escaped string (`\\u0041`), percent-encoded as in a URL (`%2F`), or
/// written as an HTML character reference (`&#47;`, `&#x2F;`). A server echoing the key it was
/// sent may spell it any of these ways, and what viss stores of the server's words is the raw
/// text as well as the decoded JSON.
pub fn redact(text: &str) -> Cow<'_, str> {
    let secrets = SECRETS
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut out = Cow::Borrowed(text);
    let escapes = text.contains(['\\', '%', '&']);
    for secret in secrets.iter() {
        if escapes {
            if let Some(blanked) = blank_spellings(&out, secret) {
                out = Cow::Owned(blanked);
            }
        } else if out.contains(secret.as_str()) {
            out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
        }
    }
    out
}

/// A writer that passes bytes through to `out` and notes whether any spelling of a registered
/// secret (see [`redact`]) went by, across the boundaries of the writes too: for records
/// streamed to the store, which are kept only when [`SecretWatch::saw_secret`] is false.
pub struct SecretWatch<W> {
    out: W,
    secrets: Vec<String>,
    /// The last bytes written, where a spelling that the next write completes may begin.
    tail: Vec<u8>,
    window: usize,
    seen: bool,
}

impl<W: std::io::Write> SecretWatch<W> {
    pub fn new(out: W) -> Self {
        let secrets = SECRETS
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        // Longest spelling followed: a run of backslashes and a surrogate pair per character.
        let window = secrets
            .iter()
            .map(|s| s.chars().count() * 32)
            .max()
            .unwrap_or(0);
        Self {
            out,
            secrets,
            tail: Vec::new(),
            window,
            seen: false,
        }
    }

    pub fn saw_secret(&self) -> bool {
        self.seen
    }
}

impl<W: std::io::Write> std::io::Write for SecretWatch<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let written = self.out.write(bytes)?;
        if self.secrets.is_empty() || self.seen {
            return Ok(written);
        }
        self.tail.extend_from_slice(&bytes[..written]);
        self.seen = self.secrets.iter().any(|secret| {
            (0..self.tail.len()).any(|at| spelling_at(&self.tail, at, secret).is_some())
        });
        let keep = self.tail.len().saturating_sub(self.window);
        self.tail.drain(..keep);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// `text` with every spelling of `secret` (see [`redact`]) blanked, or `None` when it has none.
fn blank_spellings(text: &str, secret: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = String::new();
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        match spelling_at(bytes, at, secret) {
            Some(end) => {
                out.push_str(&text[copied..at]);
                out.push_str(REDACTED);
                copied = end;
                at = end;
            }
            None => at += 1,
        }
    }
    (copied > 0).then(|| {
        out.push_str(&text[copied..]);
        out
    })
}

/// Where a spelling of `secret` that starts at byte `at` of `text` ends.
fn spelling_at(text: &[u8], at: usize, secret: &str) -> Option<usize> {
    let mut position = at;
    for c in secret.chars() {
        position = char_spelled_at(text, position, c)?;
    }
    Some(position)
}

/// Where one spelling of `c` starting at byte `at` ends: the character itself, or one of the
/// escapes [`redact`] lists.
fn char_spelled_at(text: &[u8], at: usize, c: char) -> Option<usize> {
    let mut utf8 = [0u8; 4];
    let literal = c.encode_utf8(&mut utf8).as_bytes();
    let rest = text.get(at..)?;
    if rest.starts_with(literal) {
        return Some(at + literal.len());
    }
    match rest.first()? {
        b'\\' => {
            let slashes = rest.iter().take_while(|&&b| b == b'\\').count();
            let after = &rest[slashes..];
            if after.starts_with(literal) {
                return Some(at + slashes + literal.len());
            }
            let unit = |from: &[u8]| {
                let digits = from.strip_prefix(b"u")?.get(..4)?;
                u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
            };
            let first = unit(after)?;
            let code = u32::from(c);
            if first == code {
                return Some(at + slashes + 5);
            }
            // A character outside the Basic Multilingual Plane as a surrogate pair.
            if code > 0xffff && (0xd800..0xdc00).contains(&first) {
                let low_at = at + slashes + 5;
                let low_slashes = text[low_at..].iter().take_while(|&&b| b == b'\\').count();
                let low = unit(&text[low_at + low_slashes..])?;
                let pair = 0x10000 + ((first - 0xd800) << 10) + low.checked_sub(0xdc00)?;
                return (low < 0xe000 && pair == code).then_some(low_at + low_slashes + 5);
            }
            None
        }
        b'%' => {
            let mut position = at;
            for &byte in literal {
                let digits = text.get(position..position + 3)?.strip_prefix(b"%")?;
                let value = u8::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()?;
                if value != byte {
                    return None;
                }
                position += 3;
            }
            Some(position)
        }
        b'&' => {
            let reference = rest.strip_prefix(b"&#")?;
            let end = reference.iter().position(|&b| b == b';')?;
            let digits = std::str::from_utf8(&reference[..end]).ok()?;
            let value = match digits.strip_prefix(['x', 'X']) {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => digits.parse().ok()?,
            };
            (value == u32::from(c)).then_some(at + 2 + end + 1)
        }
        _ => None,
    }
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

/// [`for_terminal`] for an error message that may end in a gutter block (see
/// [`crate::toml_error`]): a new line followed by spaces, an optional line number and ` |` is
/// kept as a line; every other control character, new lines included, is escaped as
/// [`for_terminal`] does, so no file name or server text can start a line of its own.
pub fn for_terminal_message(text: &str) -> Cow<'_, str> {
    if !text.contains('\n') {
        return for_terminal(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut lines = text.split('\n');
    out.push_str(&for_terminal(lines.next().unwrap_or_default()));
    for line in lines {
        if is_gutter_line(line) {
            out.push('\n');
        } else {
            out.push_str("\\n");
        }
        out.push_str(&for_terminal(line));
    }
    Cow::Owned(out)
}

/// ` 12 | text` or `    |`: spaces, digits, a space and a bar.
fn is_gutter_line(line: &str) -> bool {
    let rest = line.trim_start_matches(' ');
    rest.len() < line.len()
        && rest
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .trim_start_matches(' ')
            .starts_with('|')
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
    fn every_spelling_of_a_secret_is_blanked() {
        register_secret("sk-redact/spelt+key");
        for spelt in [
            r"sk-redact\/spelt+key",
            r"sk-redact\\\/spelt+key",
            r"\u0073k-redact/spelt\u002Bkey",
            r"\\u0073k-redact\\u002fspelt+key",
            "sk-redact%2Fspelt%2bkey",
            "sk-redact&#47;spelt&#x2B;key",
        ] {
            let text = format!("{{\"echo\": \"{spelt}\"}} and again {spelt}.");
            assert_eq!(
                redact(&text),
                "{\"echo\": \"<redacted>\"} and again <redacted>.",
                "{spelt}"
            );
        }
        // Near misses are left alone, escapes or not.
        for near in [
            r"sk-redact\/spelt-key",
            "sk-redact%2Fspelt",
            r"\u0073k-redact",
        ] {
            assert_eq!(redact(near), near);
        }
        register_secret("redact-test-\u{1F600}-astral");
        assert_eq!(redact(r"x redact-test-\ud83d\ude00-astral"), "x <redacted>");
    }

    #[test]
    fn a_secret_written_across_many_writes_is_seen_and_other_text_is_not() {
        use std::io::Write;
        register_secret("sk-redact-watch/0123456789");
        let spelt = br"sk-redact-watch\/0123456789";
        let mut out = Vec::new();
        let mut watch = SecretWatch::new(&mut out);
        watch.write_all(&[b'x'; 10_000]).unwrap();
        for piece in spelt.chunks(3) {
            watch.write_all(piece).unwrap();
        }
        assert!(watch.saw_secret());
        assert_eq!(out.len(), 10_000 + spelt.len(), "everything passed through");
        let mut watch = SecretWatch::new(Vec::new());
        watch
            .write_all(b"sk-redact-watch/012345678 and 0123456789")
            .unwrap();
        assert!(!watch.saw_secret());
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

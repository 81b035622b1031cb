//! Case-insensitive matching that reports offsets into the text it was given.
//!
//! `text.to_lowercase()` can change a string's length (`İ` is 2 bytes, its lower case `i̇` is
//! 3; `ﬅ` upper-cases to `ST`), so an offset found in a case-mapped copy must never be used to
//! slice the original: it lands on the wrong character, or inside one and panics. These helpers
//! compare character by character instead and only return offsets of the original text.

use std::ops::Range;

/// Whether two characters are equal ignoring case: the same character, or the same lower case
/// (`İ` and `i` differ: the lower case of `İ` is `i̇`).
pub fn chars_eq_ignore_case(a: char, b: char) -> bool {
    a == b || a.to_lowercase().eq(b.to_lowercase())
}

/// The byte range of the first occurrence of `needle` in `haystack`, compared character by
/// character ignoring case. An empty needle is never found.
pub fn find_ignore_case(haystack: &str, needle: &str) -> Option<Range<usize>> {
    if needle.is_empty() {
        return None;
    }
    haystack.char_indices().find_map(|(start, _)| {
        let mut rest = haystack[start..].char_indices();
        for expected in needle.chars() {
            let (_, c) = rest.next()?;
            if !chars_eq_ignore_case(c, expected) {
                return None;
            }
        }
        let end = rest.next().map_or(haystack.len(), |(at, _)| start + at);
        Some(start..end)
    })
}

/// `text` without `prefix`, compared character by character ignoring case.
pub fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let mut rest = text.char_indices();
    for expected in prefix.chars() {
        let (_, c) = rest.next()?;
        if !chars_eq_ignore_case(c, expected) {
            return None;
        }
    }
    Some(rest.next().map_or("", |(at, _)| &text[at..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_ascii_separators_after_length_changing_characters() {
        let text = "İlker AND Émile";
        let at = find_ignore_case(text, " and ").unwrap();
        assert_eq!(&text[at.clone()], " AND ");
        assert_eq!(&text[..at.start], "İlker");
        assert_eq!(&text[at.end..], "Émile");
        assert_eq!(find_ignore_case("İLKER & ÉMILE", " & "), Some(6..9));
        assert_eq!(find_ignore_case("Bob", " and "), None);
        assert_eq!(find_ignore_case("Bob", ""), None);
        assert_eq!(find_ignore_case("ab", "b"), Some(1..2));
    }

    #[test]
    fn unicode_letters_match_their_own_case_only() {
        assert_eq!(find_ignore_case("ÉMILE", "émile"), Some(0..6));
        assert_eq!(find_ignore_case("STRASSE", "straße"), None);
        // Dotted capital I lower-cases to two characters, so it equals neither `i` nor `ı`.
        assert!(!chars_eq_ignore_case('İ', 'i'));
        assert!(!chars_eq_ignore_case('I', 'ı'));
        assert!(chars_eq_ignore_case('Σ', 'σ'));
    }

    #[test]
    fn strips_prefixes_by_characters() {
        assert_eq!(strip_prefix_ignore_case("SCENE: x", "scene"), Some(": x"));
        assert_eq!(strip_prefix_ignore_case("Scene", "scene"), Some(""));
        assert_eq!(strip_prefix_ignore_case("Sc", "scene"), None);
        // `ﬅ` upper-cases to `ST` but is one character, not the two of the prefix.
        assert_eq!(strip_prefix_ignore_case("Eﬅ. HALL", "est"), None);
        assert_eq!(strip_prefix_ignore_case("ıNT. HALL", "int"), None);
    }
}

//! Speaker cues: recognising `Name:` prefixes, splitting `A and B`, and
//! normalising case so one character is one name.

use super::super::caseless::{find_ignore_case, strip_prefix_ignore_case};
use super::super::markup::{collapse_whitespace, tidy_spacing};

const MAX_NAME_CHARS: usize = 40;
const MAX_NAME_WORDS: usize = 6;

/// Lower-case words allowed inside a mixed-case name (`Guy at the Door`).
/// Any other lower-case word means the colon ended a sentence, not a cue.
const NAME_CONNECTORS: &[&str] = &[
    "and", "or", "of", "the", "on", "in", "at", "with", "to", "from", "de", "da", "del", "von",
    "van", "der", "le", "la", "du", "y",
];

const GROUP_NAMES: &[&str] = &[
    "all",
    "everyone",
    "everybody",
    "both",
    "together",
    "all three",
    "all four",
    "all five",
    "all six",
    "the others",
    "others",
    "crowd",
    "the crowd",
    "the gang",
    "group",
    "everyone else",
    "all of them",
    "the guys",
    "the girls",
];

/// A `Name: text` line split into the raw cue (which may still hold a
/// parenthetical, e.g. `Rachel (on phone)`) and the rest of the line.
pub(crate) fn split_speaker_prefix(line: &str) -> Option<(&str, &str)> {
    let colon = line.find(':')?;
    let cue = line[..colon].trim();
    let rest = &line[colon + 1..];
    if rest.starts_with("//") || rest.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    if looks_like_speaker_cue(cue) {
        Some((cue, rest.trim()))
    } else {
        None
    }
}

fn looks_like_speaker_cue(cue: &str) -> bool {
    let (name, _) = split_cue_parenthetical(cue);
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return false;
    }
    if !name.chars().next().is_some_and(|c| c.is_uppercase()) {
        return false;
    }
    let allowed = |c: char| c.is_alphanumeric() || " .'\u{2019}-,&/#".contains(c);
    if !name.chars().all(allowed) {
        return false;
    }
    let words: Vec<&str> = name.split_whitespace().collect();
    if words.len() > MAX_NAME_WORDS {
        return false;
    }
    words.iter().all(|word| {
        let first = word.chars().next().unwrap_or(' ');
        first.is_uppercase()
            || first.is_ascii_digit()
            || first == '#'
            || first == '&'
            || NAME_CONNECTORS.contains(&word.to_lowercase().trim_end_matches(','))
    })
}

/// `Rachel (on phone)` -> (`Rachel`, [`on phone`]).
pub(crate) fn split_cue_parenthetical(cue: &str) -> (String, Vec<String>) {
    let (spoken, directions) = extract_directions(cue);
    (spoken, directions)
}

/// Credit lines at the top of transcripts look exactly like dialogue
/// (`Written by: ...`), so they are recognised by their wording.
pub(crate) fn is_credit_cue(cue: &str) -> bool {
    let lower = cue.trim().to_lowercase();
    lower.ends_with(" by") || lower == "credits" || lower == "title"
}

pub(crate) fn is_note_cue(cue: &str) -> bool {
    matches!(
        cue.trim().to_lowercase().as_str(),
        "note" | "notes" | "author's note" | "transcriber's note" | "disclaimer"
    )
}

pub fn is_group_speaker(name: &str) -> bool {
    GROUP_NAMES.contains(&name.trim().to_lowercase().as_str())
}

/// Splits `Monica and Rachel`, `Joey, Chandler, and Ross`, `Ross & Rachel`
/// and `Ross/Rachel` into names. A bare honorific borrows the surname of the
/// last name: `Mr. and Mrs. Geller` -> `Mr. Geller`, `Mrs. Geller`.
pub fn split_speaker_names(cue: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for comma_part in cue.split([',', '/']) {
        let mut rest = comma_part.trim();
        loop {
            // Offsets come from the cue itself: a lower-cased copy can be longer (`İ`).
            let separator = [" and ", " & "]
                .iter()
                .filter_map(|sep| find_ignore_case(rest, sep))
                .min_by_key(|range| range.start);
            match separator {
                Some(range) => {
                    parts.push(rest[..range.start].trim().to_string());
                    rest = rest[range.end..].trim();
                }
                None => {
                    parts.push(rest.to_string());
                    break;
                }
            }
        }
    }
    let mut names: Vec<String> = parts
        .into_iter()
        .map(|p| {
            let p = strip_prefix_ignore_case(&p, "and ").map_or(p.as_str(), str::trim);
            strip_prefix_ignore_case(p, "& ")
                .map_or(p, str::trim)
                .to_string()
        })
        .filter(|p| !p.is_empty())
        .collect();
    if let Some(last) = names.last().cloned() {
        let words: Vec<&str> = last.split_whitespace().collect();
        if words.len() >= 2 {
            let surname = words[words.len() - 1];
            for name in names.iter_mut() {
                if is_bare_honorific(name) {
                    *name = format!("{name} {surname}");
                }
            }
        }
    }
    names
}

fn is_bare_honorific(name: &str) -> bool {
    matches!(
        name.trim().to_lowercase().as_str(),
        "mr." | "mrs." | "ms." | "dr." | "mr" | "mrs" | "ms" | "dr" | "miss"
    )
}

/// Trims, collapses whitespace, straightens apostrophes and title-cases names
/// written in a single case (`MONICA`, `monica` -> `Monica`; `JOEY'S MOM` ->
/// `Joey's Mom`; `O'BRIEN` -> `O'Brien`). Mixed-case names are kept as written,
/// since their capitals (`McKay`) are deliberate.
pub fn normalise_speaker(raw: &str) -> String {
    let cleaned = collapse_whitespace(&raw.replace('\u{2019}', "'"));
    let cleaned = cleaned.trim_end_matches(':').trim().to_string();
    let has_upper = cleaned.chars().any(char::is_uppercase);
    let has_lower = cleaned.chars().any(char::is_lowercase);
    if has_upper && has_lower {
        return cleaned;
    }
    let mut out = String::with_capacity(cleaned.len());
    let mut word_len = 0;
    let mut previous: Option<char> = None;
    for c in cleaned.chars() {
        let starts_word = match previous {
            None => true,
            Some(p) if p.is_whitespace() || "-.(\"/".contains(p) => true,
            Some('\'') => word_len == 2,
            _ => false,
        };
        if starts_word {
            out.extend(c.to_uppercase());
        } else {
            out.extend(c.to_lowercase());
        }
        word_len = if c.is_whitespace() || c == '-' {
            0
        } else {
            word_len + 1
        };
        previous = Some(c);
    }
    out
}

/// Pulls `(stage directions)` and `[bracketed actions]` out of a line.
/// Returns the remaining words, tidied, and the directions in order. An
/// unclosed parenthesis swallows the rest of the line, which is what a
/// transcriber who forgot the `)` meant.
pub(crate) fn extract_directions(text: &str) -> (String, Vec<String>) {
    let mut spoken = String::new();
    let mut directions = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' | '[' => {
                if depth > 0 {
                    current.push(c);
                } else {
                    spoken.push(' ');
                }
                depth += 1;
            }
            ')' | ']' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    let direction = collapse_whitespace(&current);
                    if !direction.is_empty() {
                        directions.push(direction);
                    }
                    current.clear();
                    spoken.push(' ');
                } else {
                    current.push(c);
                }
            }
            ')' | ']' => {}
            _ if depth > 0 => current.push(c),
            _ => spoken.push(c),
        }
    }
    let unclosed = collapse_whitespace(&current);
    if !unclosed.is_empty() {
        directions.push(unclosed);
    }
    (tidy_spacing(&spoken), directions)
}

/// Net parenthesis depth after `text`, used to tell whether the next
/// physical line continues an open stage direction.
pub(crate) fn paren_balance(text: &str) -> i64 {
    text.chars().fold(0, |depth, c| match c {
        '(' => depth + 1,
        ')' => depth - 1,
        _ => depth,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_speaker_prefixes() {
        assert_eq!(
            split_speaker_prefix("Monica: There's nothing to tell!"),
            Some(("Monica", "There's nothing to tell!"))
        );
        assert_eq!(
            split_speaker_prefix("Guy #1: Hey."),
            Some(("Guy #1", "Hey."))
        );
        assert_eq!(
            split_speaker_prefix("Rachel (on phone): Hi."),
            Some(("Rachel (on phone)", "Hi."))
        );
        assert_eq!(
            split_speaker_prefix("Mr. and Mrs. Geller: Hello!"),
            Some(("Mr. and Mrs. Geller", "Hello!"))
        );
        assert_eq!(split_speaker_prefix("Joey:"), Some(("Joey", "")));
    }

    #[test]
    fn rejects_sentences_times_and_urls() {
        assert_eq!(split_speaker_prefix("Then he said: hello"), None);
        assert_eq!(split_speaker_prefix("It is 10:30 now"), None);
        assert_eq!(split_speaker_prefix("See http://example.org"), None);
        assert_eq!(split_speaker_prefix("Wait! Listen: now"), None);
        assert_eq!(split_speaker_prefix("no colon here"), None);
    }

    #[test]
    fn normalises_case() {
        assert_eq!(normalise_speaker("MONICA"), "Monica");
        assert_eq!(normalise_speaker("  monica "), "Monica");
        assert_eq!(normalise_speaker("DR. GREEN"), "Dr. Green");
        assert_eq!(normalise_speaker("JOEY\u{2019}S MOM"), "Joey's Mom");
        assert_eq!(normalise_speaker("O'BRIEN"), "O'Brien");
        assert_eq!(normalise_speaker("MARY-ANN"), "Mary-Ann");
        assert_eq!(normalise_speaker("McKay"), "McKay");
        assert_eq!(normalise_speaker("GUY #1"), "Guy #1");
    }

    #[test]
    fn splits_multiple_speakers() {
        assert_eq!(
            split_speaker_names("Monica and Rachel"),
            vec!["Monica", "Rachel"]
        );
        assert_eq!(
            split_speaker_names("Joey, Chandler, and Ross"),
            vec!["Joey", "Chandler", "Ross"]
        );
        assert_eq!(split_speaker_names("Ross & Rachel"), vec!["Ross", "Rachel"]);
        assert_eq!(split_speaker_names("Ross/Rachel"), vec!["Ross", "Rachel"]);
        assert_eq!(
            split_speaker_names("Mr. and Mrs. Geller"),
            vec!["Mr. Geller", "Mrs. Geller"]
        );
        assert_eq!(split_speaker_names("Monica"), vec!["Monica"]);
    }

    /// Issue 16: offsets found in a lower-cased copy were used on the cue, which panicked on
    /// `İlker and Émile` and cut `İlker and Bob` into `İlker` and `Ob`.
    #[test]
    fn splits_names_whose_lower_case_is_longer() {
        assert_eq!(
            split_speaker_names("İlker and Émile"),
            vec!["İlker", "Émile"]
        );
        assert_eq!(split_speaker_names("İlker and Bob"), vec!["İlker", "Bob"]);
        assert_eq!(split_speaker_names("İLKER & ÉMILE"), vec!["İLKER", "ÉMILE"]);
        assert_eq!(
            split_speaker_names("İlker, Ömer AND Işıl"),
            vec!["İlker", "Ömer", "Işıl"]
        );
        assert_eq!(split_speaker_names("Ann, and İpek"), vec!["Ann", "İpek"]);
        assert_eq!(
            split_speaker_prefix("İlker and Émile: Hello there."),
            Some(("İlker and Émile", "Hello there."))
        );
    }

    #[test]
    fn groups() {
        assert!(is_group_speaker("All"));
        assert!(is_group_speaker("EVERYONE"));
        assert!(!is_group_speaker("Alley"));
    }

    #[test]
    fn extracts_directions() {
        assert_eq!(
            extract_directions("(to Ross) Come on , sit down (sits) please."),
            (
                "Come on, sit down please.".to_string(),
                vec!["to Ross".to_string(), "sits".to_string()]
            )
        );
        assert_eq!(
            extract_directions("Fine [slams door] whatever (still angry"),
            (
                "Fine whatever".to_string(),
                vec!["slams door".to_string(), "still angry".to_string()]
            )
        );
        assert_eq!(
            extract_directions("(nested (really)) ok"),
            ("ok".to_string(), vec!["nested (really)".to_string()])
        );
    }
}

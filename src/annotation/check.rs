//! Checks the schemas cannot express, shared by every step's validator.
//!
//! A validator's problems go back to the model verbatim on a re-ask, so every message names
//! the role and field at fault and says what to write instead, and all problems of an answer
//! are reported together: one re-ask can fix them all. Each problem is made as a value (role,
//! field, kind, message) where it is found; the re-ask, the flagged record, the review queue
//! and the dataset card read its parts, never its text.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde_json::Value;
pub use viss_problem::{Checked, Found, Problems, Refusal, Rejection};

use super::context::{ScenarioContext, TITLES};

/// The version of the checks and gates every LLM step's validator shares (this module, `gates`
/// and `words`): raise it when a change makes them accept or reject other answers, and every
/// step that uses them re-checks its stored answers, with no step's own version raised. Also
/// raised when the problems they make change form, so that no store holds problems of two
/// forms (2: each problem's kind is the name of its check).
pub const ANSWER_CHECKS_VERSION: u32 = 2;

/// Counts each problem of `refusals` by its kind.
pub fn count_refusals<'a>(
    refusals: impl IntoIterator<Item = &'a Refusal>,
    into: &mut BTreeMap<String, u64>,
) {
    for problem in refusals.into_iter().flat_map(|refusal| &refusal.problems) {
        *into.entry(problem.kind.clone()).or_default() += 1;
    }
}

/// A per-role answer object, which names the role it is about.
pub trait NamedRole {
    fn name(&self) -> &str;
    fn set_name(&mut self, name: String);
}

macro_rules! named_role {
    ($($role:ty),+ $(,)?) => {
        $(impl $crate::annotation::check::NamedRole for $role {
            fn name(&self) -> &str {
                &self.name
            }
            fn set_name(&mut self, name: String) {
                self.name = name;
            }
        })+
    };
}
pub(crate) use named_role;

/// Deserialises an answer whose per-role objects sit in `roles`. Serde's own message does not
/// say which role broke, so on failure each role object is tried alone to point at it.
pub fn deserialize_answer<Answer: DeserializeOwned, Role: DeserializeOwned>(
    value: &Value,
) -> Result<Answer, Rejection> {
    let whole_error = match serde_json::from_value::<Answer>(value.clone()) {
        Ok(answer) => return Ok(answer),
        Err(error) => error,
    };
    if let Some(roles) = value.get("roles").and_then(Value::as_array) {
        let mut problems = Problems::new();
        for (index, role) in roles.iter().enumerate() {
            if let Err(error) = serde_json::from_value::<Role>(role.clone()) {
                let who = match role.get("name").and_then(Value::as_str) {
                    Some(name) => format!("roles[{index}] ({name})"),
                    None => format!("roles[{index}]"),
                };
                problems.unusable_entry("entry_shape", index, format!("{who}: {error}"));
            }
        }
        // Some role failed on its own: that names the role. Otherwise the fault is elsewhere.
        problems.finish()?;
    }
    Err(shape_rejection(whole_error))
}

/// Deserialises an answer that has no per-role objects.
pub fn deserialize_whole<Answer: DeserializeOwned>(value: &Value) -> Result<Answer, Rejection> {
    serde_json::from_value(value.clone()).map_err(shape_rejection)
}

/// The rejection of an answer that does not have the schema's shape.
fn shape_rejection(error: serde_json::Error) -> Rejection {
    Rejection::whole(
        "answer_shape",
        format!("it does not match the required JSON shape: {error}"),
    )
}

/// Puts the roles in the participants' order with the participants' spelling, reporting names
/// that are not participants, participants named twice and participants left out.
pub fn match_roles<R: NamedRole>(
    roles: Vec<R>,
    ctx: &ScenarioContext,
    problems: &mut Problems,
) -> Vec<R> {
    let listed = ctx.participants.join(", ");
    let mut slots: Vec<Option<R>> = ctx.participants.iter().map(|_| None).collect();
    for mut role in roles {
        let Some(participant) = ctx.participant_named(role.name()) else {
            problems.unusable(
                "not_a_participant",
                None,
                "roles",
                format!(
                    "roles: \"{}\" is not a participant of this scene; the participants are \
                     {listed}. Give one entry per participant, spelled as listed",
                    role.name()
                ),
            );
            continue;
        };
        let index = ctx
            .participants
            .iter()
            .position(|p| p == participant)
            .expect("participant_named returns a participant");
        if slots[index].is_some() {
            problems.unusable(
                "role_twice",
                None,
                "roles",
                format!(
                    "roles: {participant} has more than one entry; give exactly one entry per \
                     participant"
                ),
            );
            continue;
        }
        role.set_name(participant.to_string());
        slots[index] = Some(role);
    }
    for (participant, slot) in ctx.participants.iter().zip(&slots) {
        if slot.is_none() {
            problems.unusable(
                "role_missing",
                None,
                "roles",
                format!(
                    "roles: there is no entry for {participant}; add one (the participants are \
                     {listed})"
                ),
            );
        }
    }
    slots.into_iter().flatten().collect()
}

/// Reports an empty field, or one with no word in it (a small model copies the `"..."` of the
/// answer's shape). `who` is the role, or `None` for a scenario-level field.
pub fn require_text(problems: &mut Problems, who: Option<&str>, field: &str, text: &str) -> bool {
    if text.trim().is_empty() {
        problems.unusable(
            "empty",
            who,
            field,
            format!("{}{field} is empty; write it", prefix(who)),
        );
        return false;
    }
    if !text.chars().any(char::is_alphanumeric) {
        problems.unusable(
            "placeholder",
            who,
            field,
            format!(
                "{}{field} is only \"{}\", a placeholder; write it",
                prefix(who),
                text.trim()
            ),
        );
        return false;
    }
    true
}

/// [`require_text`] for prose, which also must not be cut off: the embedded model's grammar
/// closes a free string at [`LOCAL_MAX_STRING_CHARS`] characters, wherever the sentence is, and
/// the next field may then go on with the rest of it. A shorter text without a full stop is a
/// phrase the model chose to write, not a cut.
///
/// [`LOCAL_MAX_STRING_CHARS`]: crate::llm::local::LOCAL_MAX_STRING_CHARS
pub fn require_prose(problems: &mut Problems, who: Option<&str>, field: &str, text: &str) -> bool {
    if !require_text(problems, who, field, text) {
        return false;
    }
    let limit = crate::llm::local::LOCAL_MAX_STRING_CHARS as usize;
    let end = text
        .trim_end()
        .trim_end_matches(['"', '\'', '\u{201d}', '\u{2019}', ')']);
    if text.chars().count() < limit || end.ends_with(['.', '!', '?', '\u{2026}']) {
        return true;
    }
    problems.gate(
        "cut_off",
        who,
        field,
        format!(
            "{}{field} was cut off at the {limit}-character limit (\"... {}\"); write less, and \
             end every sentence",
            prefix(who),
            closing_words(end, 4)
        ),
    );
    false
}

/// The last `n` words of `text`, to show where a cut-off field ends.
pub fn closing_words(text: &str, n: usize) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    words[words.len().saturating_sub(n)..].join(" ")
}

/// A task sentence: non-empty, one sentence, and naming the character it is for.
pub fn require_task_sentence(problems: &mut Problems, who: &str, field: &str, text: &str) {
    if !require_text(problems, Some(who), field, text) {
        return;
    }
    let sentences = sentence_count(text);
    if sentences > 1 {
        problems.gate(
            "several_sentences",
            Some(who),
            field,
            format!("{who}: {field} has {sentences} sentences; write it as exactly one sentence"),
        );
    }
    if !mentions(text, who) {
        problems.gate(
            "own_name_missing",
            Some(who),
            field,
            format!(
                "{who}: {field} does not name {who}; write it about {who} by name (e.g. \"{who} \
                 ...\")"
            ),
        );
    }
}

/// Reports cast members who are not in the scene but appear in `text`.
pub fn forbid_absent_cast(
    problems: &mut Problems,
    who: Option<&str>,
    field: &str,
    text: &str,
    ctx: &ScenarioContext,
) {
    let names = absent_cast_mentioned(text, ctx);
    if !names.is_empty() {
        problems.gate(
            "absent_cast",
            who,
            field,
            format!(
                "{}{field} mentions {}, who {} not in this scene; mention only the participants \
                 ({})",
                prefix(who),
                names.join(", "),
                if names.len() == 1 { "is" } else { "are" },
                ctx.participants.join(", ")
            ),
        );
    }
}

fn prefix(who: Option<&str>) -> String {
    who.map(|w| format!("{w}: ")).unwrap_or_default()
}

/// The absent cast members' names found in `text`, leaving out a name that is only found as
/// part of a longer one also found ("Monica" inside "Monica Geller").
pub fn absent_cast_mentioned(text: &str, ctx: &ScenarioContext) -> Vec<String> {
    let found: Vec<String> = ctx
        .absent_cast_names()
        .into_iter()
        .filter(|name| contains_word(text, name))
        .collect();
    found
        .iter()
        .filter(|name| {
            !found
                .iter()
                .any(|longer| longer.len() > name.len() && contains_word(longer, name))
        })
        .cloned()
        .collect()
}

/// Whether `text` refers to the character `name`: the whole name, or a distinctive word of it
/// ("Heckles" for "Mr. Heckles"), as a whole word, ignoring case.
pub fn mentions(text: &str, name: &str) -> bool {
    if contains_word(text, name) {
        return true;
    }
    name.split_whitespace()
        .filter(|word| {
            word.chars().count() >= 3
                && !TITLES.contains(&word.trim_end_matches('.').to_lowercase().as_str())
        })
        .any(|word| contains_word(text, word))
}

/// Whether `needle` occurs in `haystack` ignoring case, with no letter or digit right before
/// or after it ("Ross's" contains "Ross"; "Rossini" does not).
pub fn contains_word(haystack: &str, needle: &str) -> bool {
    let needle = needle.trim().to_lowercase();
    if needle.is_empty() {
        return false;
    }
    let haystack = haystack.to_lowercase();
    let mut from = 0;
    while let Some(offset) = haystack[from..].find(&needle) {
        let start = from + offset;
        let end = start + needle.len();
        let before = haystack[..start].chars().next_back();
        let after = haystack[end..].chars().next();
        if !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric) {
            return true;
        }
        from = start + haystack[start..].chars().next().map_or(1, char::len_utf8);
    }
    false
}

/// `text` with every occurrence of `needle` that [`contains_word`] would find (ignoring case,
/// no letter or digit right before or after it) replaced by `with`.
pub fn replace_word(text: &str, needle: &str, with: &str) -> String {
    let needle: Vec<char> = needle.trim().chars().collect();
    if needle.is_empty() {
        return text.to_string();
    }
    let same = |a: char, b: char| a == b || a.to_lowercase().eq(b.to_lowercase());
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < chars.len() {
        let fits = at + needle.len() <= chars.len()
            && chars[at..at + needle.len()]
                .iter()
                .zip(&needle)
                .all(|(&a, &b)| same(a, b))
            && !at
                .checked_sub(1)
                .is_some_and(|before| chars[before].is_alphanumeric())
            && !chars
                .get(at + needle.len())
                .is_some_and(|after| after.is_alphanumeric());
        if fits {
            out.push_str(with);
            at += needle.len();
        } else {
            out.push(chars[at]);
            at += 1;
        }
    }
    out
}

/// Abbreviations whose full stop does not end a sentence.
const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "vs", "etc", "e.g", "i.e", "approx", "no",
];

/// How many sentences `text` holds (see [`sentences`]).
pub fn sentence_count(text: &str) -> usize {
    sentences(text).len()
}

/// The sentences of `text`, trimmed. A sentence ends at `.`, `!` or `?` (with any closing
/// quotes or brackets) followed by white space and a capital letter or digit, unless the full
/// stop closes an abbreviation or an initial; a line break between non-empty lines also ends
/// one.
pub fn sentences(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .flat_map(|line| {
            let chars: Vec<char> = line.chars().collect();
            let mut starts = vec![0];
            starts.extend(sentence_starts_in_line(&chars));
            starts.push(chars.len());
            starts
                .windows(2)
                .map(|w| {
                    chars[w[0]..w[1]]
                        .iter()
                        .collect::<String>()
                        .trim()
                        .to_string()
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Where each sentence after the first starts in `chars`, one line.
fn sentence_starts_in_line(chars: &[char]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if matches!(chars[i], '.' | '!' | '?') {
            let terminator = i;
            let mut j = i + 1;
            while j < chars.len()
                && matches!(
                    chars[j],
                    '.' | '!' | '?' | '"' | '\'' | ')' | '\u{201d}' | '\u{2019}'
                )
            {
                j += 1;
            }
            let spaced = j < chars.len() && chars[j].is_whitespace();
            let mut k = j;
            while k < chars.len() && chars[k].is_whitespace() {
                k += 1;
            }
            let mut next = k;
            while next < chars.len()
                && matches!(chars[next], '"' | '\'' | '(' | '\u{201c}' | '\u{2018}')
            {
                next += 1;
            }
            let starts_sentence =
                next < chars.len() && (chars[next].is_uppercase() || chars[next].is_ascii_digit());
            if spaced
                && starts_sentence
                && !(chars[terminator] == '.' && closes_abbreviation(&chars[..terminator]))
            {
                starts.push(k);
            }
            i = j;
        } else {
            i += 1;
        }
    }
    starts
}

fn closes_abbreviation(before: &[char]) -> bool {
    let word: String = before
        .iter()
        .rev()
        .take_while(|c| c.is_alphanumeric() || **c == '.')
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let word = word.to_lowercase();
    let single_letter_initial = word.chars().count() == 1 && word.chars().all(char::is_alphabetic);
    single_letter_initial || ABBREVIATIONS.contains(&word.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::fixture;

    #[test]
    fn prose_cut_off_at_the_local_limit_is_a_problem_naming_its_last_words() {
        let mut problems = Problems::new();
        let limit = crate::llm::local::LOCAL_MAX_STRING_CHARS as usize;
        let long = |end: &str| format!("{}{end}", "Noor tapes a box shut and ".repeat(limit / 20));
        for kept in [
            "Retired teacher who blocks the landing with her bicycle".to_string(),
            "Will Theo pay?".to_string(),
            long("Mila says \"no.\""),
            long("(They argue.)"),
        ] {
            assert!(
                require_prose(&mut problems, None, "profile", &kept),
                "{kept}"
            );
        }
        assert!(problems.finish().is_ok());
        let mut problems = Problems::new();
        let cut = long("Noor has been helping Theo with his move and has been ");
        assert!(!require_prose(&mut problems, Some("Noor"), "belief", &cut));
        let rejection = problems.finish().unwrap_err();
        assert_eq!(rejection.kinds(), ["cut_off"]);
        let problem = &rejection.found()[0].problem;
        assert_eq!(
            (problem.role.as_deref(), problem.field.as_deref()),
            (Some("Noor"), Some("belief"))
        );
        let problem = rejection.message();
        assert!(
            problem.contains("Noor: belief was cut off at the 600-character limit")
                && problem.contains("\"... move and has been\""),
            "{problem}"
        );
    }

    #[test]
    fn refusals_are_counted_by_the_kind_of_each_problem_whoever_it_names() {
        let mut problems = Problems::new();
        problems.gate(
            "outcome_acts_on_itself",
            Some("Noor"),
            "task",
            "Noor: on Noor".into(),
        );
        problems.gate(
            "outcome_acts_on_itself",
            Some("Theo"),
            "task",
            "Theo: on Theo".into(),
        );
        problems.gate("looks_or_clothing", None, "description", "jacket".into());
        let rejection = problems.finish().unwrap_err();
        let refusals = [
            Refusal::of(&rejection, rejection.message()),
            Refusal::whole("not_json", "the answer is not JSON".into()),
        ];
        let mut counts = BTreeMap::new();
        count_refusals(&refusals, &mut counts);
        let counts: Vec<(&str, u64)> = counts.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            counts,
            [
                ("looks_or_clothing", 1),
                ("not_json", 1),
                ("outcome_acts_on_itself", 2)
            ]
        );
    }

    #[test]
    fn counts_sentences_around_abbreviations_and_initials() {
        assert_eq!(
            sentence_count("Ross convinces Rachel to tell Monica tonight."),
            1
        );
        assert_eq!(
            sentence_count("Ross asks Mr. Heckles to lower the music."),
            1
        );
        assert_eq!(
            sentence_count("Ross talks to J. R. Ewing about the deal!"),
            1
        );
        assert_eq!(sentence_count("Ross wins. Rachel gives in."), 2);
        assert_eq!(sentence_count("Ross asks \"Why?\" Then he leaves."), 2);
        assert_eq!(sentence_count("Ross wins\nRachel gives in"), 2);
        assert_eq!(sentence_count("Ross wins... and then, who knows?"), 1);
        assert_eq!(sentence_count(""), 0);
        assert_eq!(
            sentences("Ross wins. Rachel asks \"Why?\" Then\nshe leaves."),
            ["Ross wins.", "Rachel asks \"Why?\"", "Then", "she leaves."]
        );
    }

    #[test]
    fn finds_names_as_whole_words() {
        assert!(mentions("Ross's plan works", "Ross"));
        assert!(!mentions("Rossini plays", "Ross"));
        assert!(mentions("Heckles complains", "Mr. Heckles"));
        assert!(!mentions("Mr. Geller complains", "Mr. Heckles"));
        assert!(contains_word("tell MONICA now", "Monica"));
    }

    #[test]
    fn absent_cast_mentions_prefer_the_longest_name() {
        let ctx = fixture::context();
        assert_eq!(
            absent_cast_mentioned("Monica Geller waits outside.", &ctx),
            ["Monica Geller"]
        );
        assert_eq!(absent_cast_mentioned("Joey and Ross talk.", &ctx), ["Joey"]);
        assert!(absent_cast_mentioned("Ross and Rachel talk.", &ctx).is_empty());
    }

    /// A kind is what a person filters and counts by: every kind the checks make is one the
    /// reference page explains, and the page names none that no check makes.
    #[test]
    fn every_problem_kind_is_documented_and_every_documented_kind_is_made() {
        let sources = [
            include_str!("check.rs"),
            include_str!("gates.rs"),
            include_str!("../stages/llm_step.rs"),
            include_str!("../stages/affect/answer.rs"),
            include_str!("../stages/annotate/answer.rs"),
            include_str!("../stages/bdi_risk/answer.rs"),
            include_str!("../stages/describe/answer.rs"),
            include_str!("../stages/goals/answer.rs"),
            include_str!("../stages/private_info/answer.rs"),
            include_str!("../stages/anonymize/answer.rs"),
            include_str!("../stages/relationships/answer.rs"),
            include_str!("../stages/profiles/answer.rs"),
            include_str!("../stages/tasks/answer.rs"),
            include_str!("../stages/vision_dependence/answer.rs"),
            include_str!("../stages/instantiate/answer.rs"),
            include_str!("../stages/blind_test/mod.rs"),
            include_str!("../stages/simulate/pictures.rs"),
            include_str!("../stages/simulate_sense/mod.rs"),
            include_str!("../../crates/sim/src/turn.rs"),
            include_str!("../../crates/eval/src/goal.rs"),
            include_str!("../../crates/eval/src/judgement.rs"),
            include_str!("../../crates/eval/src/sotopia.rs"),
            include_str!("../../crates/llm/src/backend.rs"),
        ];
        // `refuse` is the judges' checks' shorthand for `unusable` with the character's name.
        let makers = "gate|review|unusable|unusable_whole|unusable_entry|whole|refuse";
        let made_by =
            regex::Regex::new(&format!(r#"(?:\.|::|\b)(?:{makers})\(\s*"([a-z_]+)""#)).unwrap();
        let made: std::collections::BTreeSet<&str> = sources
            .iter()
            .flat_map(|source| made_by.captures_iter(source))
            .map(|found| found.get(1).unwrap().as_str())
            // This test's own examples.
            .filter(|kind| !["first", "second"].contains(kind))
            .collect();
        let page = include_str!("../../docs/language-models.md");
        let table = page
            .lines()
            .skip_while(|line| !line.starts_with("| kinds |"))
            .take_while(|line| line.starts_with('|'));
        let documented: std::collections::BTreeSet<&str> = table
            .flat_map(|line| line.split('|').nth(1).unwrap_or_default().split(','))
            .filter_map(|kind| kind.trim().strip_prefix('`')?.strip_suffix('`'))
            .collect();
        assert!(made.len() > 30, "{made:?}");
        assert_eq!(made, documented);
    }

    #[test]
    fn problems_are_listed_together() {
        let mut problems = Problems::new();
        assert!(Problems::new().finish().is_ok());
        problems.gate("first", Some("Noor"), "belief", "Noor: a".to_string());
        problems.unusable("second", None, "background", "b".to_string());
        let rejection = problems.finish().unwrap_err();
        assert_eq!(
            rejection.message(),
            "Fix these problems in your answer:\n- Noor: a\n- b"
        );
        assert_eq!(rejection.kinds(), ["first", "second"]);
        let mut one = Problems::new();
        one.gate("first", None, "background", "a".to_string());
        assert_eq!(
            one.finish().unwrap_err().message(),
            "Fix this in your answer: a"
        );
    }
}

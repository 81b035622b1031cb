//! Relationships the scene's own texts state: "his brother Theo" in a heading, "Ross's sister
//! Monica" in an action line, "my wife Carol" said by Ross. A model that reads such a pair as
//! friends gives the synthetic cast the wrong rules (family keeps ages and genders), so the
//! decoder is held to what the text states and the check flags an answer against it.

use regex::Regex;

use crate::annotation::context::{ContextLineKind, ScenarioContext};
use crate::stages::relationships::answer::Relationship;

/// A pair of participants the texts relate, with the relationships the words allow.
#[derive(Debug, Clone, PartialEq)]
pub struct StatedRelation {
    pub first: String,
    pub second: String,
    pub allowed: &'static [Relationship],
    /// The words that state it, as the text has them ("his younger brother Theo").
    pub evidence: String,
}

impl StatedRelation {
    /// Whether this relation is between `one` and `other`, in either order.
    pub fn relates(&self, one: &str, other: &str) -> bool {
        (self.first == one && self.second == other) || (self.first == other && self.second == one)
    }

    /// The relationships the words allow, as the answers write them.
    pub fn allowed_labels(&self) -> Vec<&'static str> {
        self.allowed.iter().map(|r| r.as_str()).collect()
    }
}

const FAMILY: &[Relationship] = &[Relationship::Family];
const SPOUSE: &[Relationship] = &[Relationship::Family, Relationship::Romantic];
const PARTNER: &[Relationship] = &[Relationship::Romantic];

/// Words for a relative or partner, and what they allow. A spouse is family or romantic, as
/// annotators differ on it.
const KIN_WORDS: &[(&str, &[Relationship])] = &[
    ("brother", FAMILY),
    ("sister", FAMILY),
    ("sibling", FAMILY),
    ("twin", FAMILY),
    ("mother", FAMILY),
    ("father", FAMILY),
    ("mum", FAMILY),
    ("mom", FAMILY),
    ("dad", FAMILY),
    ("son", FAMILY),
    ("daughter", FAMILY),
    ("cousin", FAMILY),
    ("aunt", FAMILY),
    ("uncle", FAMILY),
    ("niece", FAMILY),
    ("nephew", FAMILY),
    ("grandmother", FAMILY),
    ("grandfather", FAMILY),
    ("grandma", FAMILY),
    ("grandpa", FAMILY),
    ("grandson", FAMILY),
    ("granddaughter", FAMILY),
    ("stepbrother", FAMILY),
    ("stepsister", FAMILY),
    ("stepmother", FAMILY),
    ("stepfather", FAMILY),
    ("half-brother", FAMILY),
    ("half-sister", FAMILY),
    ("husband", SPOUSE),
    ("wife", SPOUSE),
    ("girlfriend", PARTNER),
    ("boyfriend", PARTNER),
    ("fiance", PARTNER),
    ("fiancee", PARTNER),
    ("fiancé", PARTNER),
    ("fiancée", PARTNER),
];

/// Words between a possessive and the kin word ("his younger brother").
const KIN_ADJECTIVES: &str = "younger|older|elder|little|big|baby|kid|twin";

/// What a kin word allows between the two it links ("brother": family), or `None` for a word
/// that names no relative or partner. `word` is lowercase.
pub fn kin_relations(word: &str) -> Option<&'static [Relationship]> {
    KIN_WORDS
        .iter()
        .find(|(w, _)| *w == word)
        .map(|(_, allowed)| *allowed)
}

/// Every relation the scene's heading and lines state between two participants, each pair once
/// (the first statement found). Three forms: "A's brother B"; "his brother B" (with A the
/// participant named last before it in the same sentence); "my brother B" said by A.
pub fn stated_relations(ctx: &ScenarioContext) -> Vec<StatedRelation> {
    let names: Vec<(String, String)> = ctx
        .participants
        .iter()
        .flat_map(|p| ctx.names_of(p).into_iter().map(move |n| (n, p.clone())))
        .collect();
    let narration = ctx.heading.iter().map(String::as_str).chain(
        ctx.lines
            .iter()
            .filter(|l| l.kind == ContextLineKind::Action)
            .map(|l| l.text.as_str()),
    );
    let said = ctx
        .lines
        .iter()
        .filter(|l| l.kind == ContextLineKind::Dialogue)
        .filter_map(|l| {
            let speaker = l
                .speaker
                .as_deref()
                .and_then(|s| ctx.participant_named(s))?;
            Some((speaker, l.text.as_str()))
        });
    relations_in(&names, narration, said)
}

/// [`stated_relations`] read off plain text, such as a prompt that shows a scene, naming
/// `participants` by their names alone: a line `Name: ...` is what that participant says, any
/// other line narration.
pub fn stated_in_text(text: &str, participants: &[String]) -> Vec<StatedRelation> {
    let names: Vec<(String, String)> = participants
        .iter()
        .map(|p| (p.clone(), p.clone()))
        .collect();
    let narration = text
        .lines()
        .filter(|line| spoken(line, participants).is_none());
    let said = text.lines().filter_map(|line| spoken(line, participants));
    relations_in(&names, narration, said)
}

/// A line `Name: words` of one of `participants`, as (name, words).
fn spoken<'a>(line: &'a str, participants: &'a [String]) -> Option<(&'a str, &'a str)> {
    let (speaker, said) = line.split_once(": ")?;
    let speaker = participants.iter().find(|p| p.as_str() == speaker)?;
    Some((speaker.as_str(), said))
}

/// The relations `narration` states and each speaker states in `said`, between the
/// participants `names` name (each name with the participant it names).
fn relations_in<'a>(
    names: &[(String, String)],
    narration: impl Iterator<Item = &'a str>,
    said: impl Iterator<Item = (&'a str, &'a str)>,
) -> Vec<StatedRelation> {
    let names: Vec<&(String, String)> = names
        .iter()
        .filter(|(name, _)| !name.trim().is_empty())
        .collect();
    let participants: std::collections::BTreeSet<&str> =
        names.iter().map(|(_, p)| p.as_str()).collect();
    if participants.len() < 2 {
        return Vec::new();
    }
    let mut alternatives: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
    // Longest first, so "Ross Geller" is read before "Ross".
    alternatives.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let name_group = alternatives
        .iter()
        .map(|n| regex::escape(n))
        .collect::<Vec<_>>()
        .join("|");
    let kin_group = KIN_WORDS
        .iter()
        .map(|(w, _)| regex::escape(w))
        .collect::<Vec<_>>()
        .join("|");
    let kin = format!(r"(?i:(?:(?:{KIN_ADJECTIVES})\s+)?(?P<kin>{kin_group})s?)");
    let named = format!(r"\s*,?\s+(?P<b>{name_group})\b");
    let pattern = |text: String| Regex::new(&text).expect("escaped names make a valid pattern");
    let possessive = pattern(format!(r"\b(?P<a>{name_group})['’]s\s+{kin}{named}"));
    let pronoun = pattern(format!(r"\b(?i:his|her|their)\s+{kin}{named}"));
    let own = pattern(format!(r"\b(?i:my)\s+{kin}{named}"));
    let any_name = pattern(format!(r"\b(?:{name_group})\b"));
    let participant = |name: &str| {
        names
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.clone())
    };
    let allowed = |word: &str| kin_relations(&word.to_lowercase());

    let mut found: Vec<StatedRelation> = Vec::new();
    let mut add = |first: Option<String>, second: Option<String>, kin: &str, evidence: &str| {
        let (Some(first), Some(second), Some(allowed)) = (first, second, allowed(kin)) else {
            return;
        };
        if first == second || found.iter().any(|r| r.relates(&first, &second)) {
            return;
        }
        found.push(StatedRelation {
            first,
            second,
            allowed,
            evidence: evidence.trim().to_string(),
        });
    };
    for text in narration {
        for caps in possessive.captures_iter(text) {
            add(
                participant(&caps["a"]),
                participant(&caps["b"]),
                &caps["kin"],
                &caps[0],
            );
        }
        for caps in pronoun.captures_iter(text) {
            let at = caps.get(0).map_or(0, |m| m.start());
            let sentence_start = text[..at].rfind(['.', '!', '?']).map_or(0, |i| i + 1);
            let antecedent = any_name
                .find_iter(&text[sentence_start..at])
                .last()
                .and_then(|m| participant(m.as_str()));
            add(antecedent, participant(&caps["b"]), &caps["kin"], &caps[0]);
        }
    }
    for (speaker, text) in said {
        for caps in own.captures_iter(text) {
            add(
                Some(speaker.to_string()),
                participant(&caps["b"]),
                &caps["kin"],
                &caps[0],
            );
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotation::context::ContextLine;
    use crate::stages::fixture;

    fn scene(heading: &str, participants: &[&str], lines: Vec<ContextLine>) -> ScenarioContext {
        let mut ctx = fixture::context();
        ctx.heading = Some(heading.to_string());
        ctx.participants = participants.iter().map(|p| p.to_string()).collect();
        ctx.lines = lines;
        ctx
    }

    fn line(kind: ContextLineKind, speaker: Option<&str>, text: &str) -> ContextLine {
        ContextLine {
            kind,
            speaker: speaker.map(str::to_string),
            text: text.to_string(),
            directions: Vec::new(),
        }
    }

    fn pairs(found: &[StatedRelation]) -> Vec<(String, String, String)> {
        found
            .iter()
            .map(|r| (r.first.clone(), r.second.clone(), r.evidence.clone()))
            .collect()
    }

    #[test]
    fn a_heading_pronoun_takes_the_participant_named_last_before_it() {
        let ctx = scene(
            "The street. Mila, the retired teacher in her sixties, carries a box for Noor, \
             the nurse in his thirties, and his brother Theo, the student.",
            &["Mila", "Theo", "Noor"],
            Vec::new(),
        );
        let found = stated_relations(&ctx);
        assert_eq!(
            pairs(&found),
            vec![(
                "Noor".to_string(),
                "Theo".to_string(),
                "his brother Theo".to_string()
            )]
        );
        assert_eq!(found[0].allowed, &[Relationship::Family]);
    }

    #[test]
    fn possessives_adjectives_aliases_and_what_a_speaker_says_of_their_own() {
        let ctx = scene(
            "Monica's apartment.",
            &["Ross", "Monica", "Rachel"],
            vec![
                line(
                    ContextLineKind::Action,
                    None,
                    "Ross Geller's little sister Monica hands him a plate.",
                ),
                line(
                    ContextLineKind::Dialogue,
                    Some("Ross"),
                    "This is my girlfriend, Rachel.",
                ),
            ],
        );
        let found = stated_relations(&ctx);
        assert_eq!(
            pairs(&found),
            vec![
                (
                    "Ross".to_string(),
                    "Monica".to_string(),
                    "Ross Geller's little sister Monica".to_string()
                ),
                (
                    "Ross".to_string(),
                    "Rachel".to_string(),
                    "my girlfriend, Rachel".to_string()
                ),
            ]
        );
        assert_eq!(found[1].allowed, &[Relationship::Romantic]);
    }

    #[test]
    fn plain_text_such_as_a_prompt_is_read_by_its_lines() {
        let prompt = "Scene heading: The stairwell. Noor, the nurse, and his brother Theo.\n\
                      Participants: Mila, Theo, Noor\nTheo: Her brother Mila.\nMila: My son, Theo!";
        let names = ["Mila", "Theo", "Noor"].map(String::from);
        // Theo's line is his, not narration that names him before "Her"; what Mila says of her
        // son is hers.
        assert_eq!(
            pairs(&stated_in_text(prompt, &names)),
            vec![
                (
                    "Noor".to_string(),
                    "Theo".to_string(),
                    "his brother Theo".to_string()
                ),
                (
                    "Mila".to_string(),
                    "Theo".to_string(),
                    "My son, Theo".to_string()
                )
            ]
        );
    }

    #[test]
    fn no_relation_without_two_participants_or_a_name_after_the_kin_word() {
        let ctx = scene(
            "Noor's brother is late. Theo carries her sister's bag. His brother Sam waits.",
            &["Noor", "Theo"],
            vec![line(
                ContextLineKind::Dialogue,
                Some("Theo"),
                "My mum Noor...",
            )],
        );
        // "my mum Noor" said by Theo is the only statement between two participants.
        assert_eq!(
            pairs(&stated_relations(&ctx)),
            vec![(
                "Theo".to_string(),
                "Noor".to_string(),
                "My mum Noor".to_string()
            )]
        );
        let alone = scene("Her brother Theo sleeps.", &["Theo"], Vec::new());
        assert!(stated_relations(&alone).is_empty());
        let no_antecedent = scene("Her brother Theo sleeps.", &["Theo", "Noor"], Vec::new());
        assert!(stated_relations(&no_antecedent).is_empty());
    }
}

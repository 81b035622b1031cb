//! What an annotation step knows about a scenario: the record's dialogue in the shape the
//! prompt templates read, and the answers of the earlier steps it reads.
//!
//! The struct serialises as the template context: the scenario's fields, then each earlier
//! answer the step declares under its name (see [`PromptAnswer`]). Every declared name is
//! present (an absent answer is `null`, never missing), so templates can test
//! `{% if description %}` under minijinja's strict undefined behaviour, and a misspelt name is
//! still an error. Which answers a step reads is its stage's declaration, not this module's:
//! it knows no step.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::words::Instructions;
use viss_engine::port::Port;
use viss_text::role::RoleId;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScenarioContext {
    pub scenario_id: String,
    pub show: String,
    pub episode: String,
    /// The scene heading as the script wrote it (often the place, sometimes who is present).
    pub heading: Option<String>,
    /// Individual speakers in order of their first line: the roles every step answers for.
    pub participants: Vec<String>,
    /// Dialogue and action lines in script order.
    pub lines: Vec<ContextLine>,
    /// The show's characters (from its manifest), so validators can spot a description that
    /// brings in someone who is not in the scene. Empty: no such check.
    pub cast: Vec<CastMember>,
    /// The show's named places (its manifest's `places`), which an anonymised template must
    /// not hold.
    pub places: Vec<String>,
    /// What the group image shows, in words (a verbalised-vision caption), when the step reads
    /// one (under [`VISUAL_EVIDENCE`]); present, as `null`, for every step.
    pub visual_evidence: Option<String>,
    /// The earlier answers the step reads, by name.
    #[serde(flatten)]
    pub earlier: EarlierAnswers,
    /// The literal text of the step's prompt, which no answer may copy (see
    /// [`Instructions`]); set by the step before it validates, never part of what a template
    /// sees or what is stored (empty: nothing to copy).
    #[serde(skip)]
    pub instructions: Instructions,
}

/// The name of the scenario's visual evidence, which every step's context has.
pub const VISUAL_EVIDENCE: &str = "visual_evidence";

/// The earlier answers of a context, by the names the templates use, as JSON (`null`: the step
/// reads it but its producer wrote none for this scenario).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct EarlierAnswers(BTreeMap<String, Value>);

/// The record of an earlier step's port as later steps see it: under which name their prompts
/// and validators know it, and what of it they see (the step's answer). A port's name is the
/// same in every step that reads it.
pub trait PromptAnswer: DeserializeOwned {
    /// The template name (`bdi` for `bdi_risk`'s answer: `{{ bdi.revised_description }}`).
    const NAME: &'static str;
    type Answer: Serialize + DeserializeOwned;
    fn answer(self) -> Self::Answer;
    /// The steps whose flagged answers this record rests on: its own stage's (`own`) when it
    /// is flagged itself, and those it read that were (see `StepRecord::flagged_upstream`).
    fn flagged(&self, _own: &str) -> Vec<String> {
        Vec::new()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContextLineKind {
    Dialogue,
    Action,
}

/// One line as the prompts show it. Action lines have no speaker and no directions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContextLine {
    pub kind: ContextLineKind,
    /// `Ross`, `Monica and Rachel`, or a crowd cue such as `All`.
    pub speaker: Option<String>,
    pub text: String,
    pub directions: Vec<String>,
}

/// Joins the speakers of a line said together into its `speaker` (`Monica and Rachel`).
pub const JOINT_SPEAKERS: &str = " and ";

impl ContextLine {
    /// Whether `name` says this line, alone or together with others.
    pub fn spoken_by(&self, name: &str) -> bool {
        self.speaker
            .as_deref()
            .is_some_and(|speaker| speaker.split(JOINT_SPEAKERS).any(|one| one == name))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CastMember {
    pub name: String,
    pub aliases: Vec<String>,
}

impl CastMember {
    /// Its name, then its aliases.
    pub fn names(&self) -> impl Iterator<Item = &String> + Clone {
        std::iter::once(&self.name).chain(&self.aliases)
    }

    /// Whether it goes by `name` (one of its names, ignoring case and surrounding spaces).
    pub fn goes_by(&self, name: &str) -> bool {
        let name = name.trim().to_lowercase();
        self.names().any(|own| own.trim().to_lowercase() == name)
    }
}

impl ScenarioContext {
    /// The text of each line `name` says (alone or with others), in script order.
    pub fn own_lines(&self, name: &str) -> Vec<&str> {
        self.lines
            .iter()
            .filter(|line| line.spoken_by(name))
            .map(|line| line.text.as_str())
            .collect()
    }

    /// Each mention of a participant in `words` (see [`crate::annotation::words::words`]), by
    /// word position, in order: a word of its name that is not a title; a name's several words
    /// in a row are one mention.
    pub fn mentions(&self, words: &[String]) -> Vec<(usize, &str)> {
        let mut named: Vec<(usize, &str)> = Vec::new();
        for (at, word) in words.iter().enumerate() {
            if TITLES.contains(&word.as_str()) {
                continue;
            }
            let Some(participant) = self
                .participants
                .iter()
                .find(|p| crate::annotation::words::words(p).contains(word))
            else {
                continue;
            };
            match named.last_mut() {
                Some((last, p)) if *p == participant.as_str() && *last + 1 == at => *last = at,
                _ => named.push((at, participant)),
            }
        }
        named
    }

    /// The earlier answer of `port`'s step, typed; `None` when this step does not read it or
    /// its producer wrote none for this scenario.
    pub fn earlier<R: PromptAnswer>(&self, _port: &Port<R>) -> Option<R::Answer> {
        let value = self.earlier_json(R::NAME);
        // Put there by `set_earlier` from the same type, so it reads back.
        serde_json::from_value(value).ok()
    }

    /// Sets the earlier answer of `port`'s step (`None`: read but absent).
    pub fn set_earlier<R: PromptAnswer>(&mut self, _port: &Port<R>, answer: Option<R::Answer>) {
        let value = serde_json::to_value(answer).expect("an answer serialises to JSON");
        self.set_earlier_json(R::NAME, value);
    }

    /// The earlier answer under template name `name` as JSON; `null` when absent.
    pub fn earlier_json(&self, name: &str) -> Value {
        if name == VISUAL_EVIDENCE {
            return self
                .visual_evidence
                .clone()
                .map_or(Value::Null, Value::String);
        }
        self.earlier.0.get(name).cloned().unwrap_or(Value::Null)
    }

    /// Sets the earlier answer under template name `name` (`null`: read but absent).
    pub fn set_earlier_json(&mut self, name: &str, value: Value) {
        if name == VISUAL_EVIDENCE {
            self.visual_evidence = value.as_str().map(str::to_string);
        } else {
            self.earlier.0.insert(name.to_string(), value);
        }
    }

    /// The scenario alone, as before any step's answer is added.
    pub fn without_earlier(mut self) -> ScenarioContext {
        self.visual_evidence = None;
        self.instructions = Instructions::default();
        self.earlier = EarlierAnswers::default();
        self
    }

    pub fn with_cast(mut self, cast: Vec<CastMember>) -> ScenarioContext {
        self.cast = cast;
        self
    }

    pub fn with_places(mut self, places: Vec<String>) -> ScenarioContext {
        self.places = places;
        self
    }

    /// The scenario's roles: each participant with its id, in order of first line.
    pub fn roles(&self) -> impl Iterator<Item = (RoleId, &str)> + '_ {
        RoleId::all(self.participants.len()).zip(self.participants.iter().map(String::as_str))
    }

    /// The role a participant's name (as the participants spell it) belongs to: where a
    /// model's answer, which names roles, meets the records, which know them by id.
    pub fn role_named(&self, name: &str) -> Option<RoleId> {
        self.participants
            .iter()
            .position(|p| p == name)
            .map(RoleId::at)
    }

    /// The participant a name refers to, matched case-insensitively, in the participant's
    /// own spelling.
    pub fn participant_named(&self, name: &str) -> Option<&str> {
        let name = name.trim().to_lowercase();
        self.participants
            .iter()
            .find(|p| p.to_lowercase() == name)
            .map(String::as_str)
    }

    /// Every name `participant` goes by: its own, and every name of each cast member that goes
    /// by it.
    pub fn names_of(&self, participant: &str) -> Vec<String> {
        let mut names = vec![participant.to_string()];
        for member in self
            .cast
            .iter()
            .filter(|member| member.goes_by(participant))
        {
            names.extend(member.names().cloned());
        }
        names
    }

    /// Names that refer to cast members who are not participants, as a description must not
    /// mention them. A cast member counts as a participant when its name or an alias is a
    /// participant's name. Besides names and aliases, the first word of a multi-word name
    /// counts ("Joey" for "Joey Tribbiani") unless it is a title or a participant's word.
    pub fn absent_cast_names(&self) -> Vec<String> {
        let participant_words: Vec<String> = self
            .participants
            .iter()
            .flat_map(|p| p.split_whitespace())
            .map(str::to_lowercase)
            .collect();
        let is_participant = |name: &str| self.participant_named(name).is_some();
        let mut names: Vec<String> = Vec::new();
        for member in &self.cast {
            let all_names = member.names();
            if all_names.clone().any(|n| is_participant(n)) {
                continue;
            }
            for name in all_names {
                let name = name.trim();
                if name.is_empty() || is_participant(name) {
                    continue;
                }
                names.push(name.to_string());
                let mut words = name.split_whitespace();
                if let (Some(first), Some(_)) = (words.next(), words.next()) {
                    let lower = first.trim_end_matches('.').to_lowercase();
                    if first.chars().count() >= 3
                        && !TITLES.contains(&lower.as_str())
                        && !participant_words.contains(&first.to_lowercase())
                    {
                        names.push(first.to_string());
                    }
                }
            }
        }
        names.sort();
        names.dedup();
        names
    }
}

/// The words of a name of several words that identify its bearer on their own: each
/// capitalised word of three letters or more, a trailing full stop cut, that is not a title
/// ("Monica" and "Geller" of "Monica Geller", "Heckles" of "Mr. Heckles"); none for a name of
/// one word. An alias that describes ("the clerk") has none: "clerk" alone is anyone's word,
/// and a template that made every clerk its slot read "{r1}, a rental {r1}".
pub fn distinctive_words(name: &str) -> Vec<&str> {
    if name.split_whitespace().count() < 2 {
        return Vec::new();
    }
    name.split_whitespace()
        .map(|word| word.trim_end_matches('.'))
        .filter(|word| word.chars().next().is_some_and(char::is_uppercase))
        .filter(|word| word.chars().count() >= 3 && !TITLES.contains(&word.to_lowercase().as_str()))
        .collect()
}

/// Words that start a name without identifying anyone.
pub(crate) const TITLES: &[&str] = &[
    "mr",
    "mrs",
    "ms",
    "miss",
    "dr",
    "prof",
    "professor",
    "sir",
    "lady",
    "lord",
    "uncle",
    "aunt",
    "the",
];

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn context() -> ScenarioContext {
        ScenarioContext {
            scenario_id: "s/e/sc001".to_string(),
            show: "s".to_string(),
            episode: "s/e".to_string(),
            heading: None,
            participants: vec!["Ross".to_string(), "Rachel".to_string()],
            lines: Vec::new(),
            cast: vec![
                CastMember {
                    name: "Ross Geller".to_string(),
                    aliases: vec!["Ross".to_string()],
                },
                CastMember {
                    name: "Monica Geller".to_string(),
                    aliases: vec!["Monica".to_string()],
                },
                CastMember {
                    name: "Joey Tribbiani".to_string(),
                    aliases: Vec::new(),
                },
                CastMember {
                    name: "Dr. Richard Burke".to_string(),
                    aliases: Vec::new(),
                },
            ],
            places: Vec::new(),
            visual_evidence: None,
            earlier: EarlierAnswers::default(),
            instructions: Instructions::default(),
        }
    }

    /// A record some step writes, whose answer later prompts call `note`.
    #[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
    struct NoteRecord {
        scenario: String,
        note: Note,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
    struct Note {
        text: String,
    }

    impl PromptAnswer for NoteRecord {
        const NAME: &'static str = "note";
        type Answer = Note;
        fn answer(self) -> Note {
            self.note
        }
    }

    const NOTE: Port<NoteRecord> = Port::item("noter", "note");

    #[test]
    fn absent_cast_excludes_participants_and_adds_first_names() {
        let names = context().absent_cast_names();
        let expected = [
            "Dr. Richard Burke",
            "Joey",
            "Joey Tribbiani",
            "Monica",
            "Monica Geller",
        ];
        assert_eq!(names, expected);
    }

    #[test]
    fn participant_lookup_is_case_insensitive() {
        let ctx = context();
        assert_eq!(ctx.participant_named(" rOSS "), Some("Ross"));
        assert_eq!(ctx.participant_named("Joey"), None);
    }

    #[test]
    fn an_earlier_answer_is_read_back_typed_by_its_port_and_serialises_under_its_name() {
        let mut ctx = context();
        assert_eq!(ctx.earlier(&NOTE), None, "not read");
        assert!(
            !serde_json::to_value(&ctx)
                .unwrap()
                .as_object()
                .unwrap()
                .contains_key("note")
        );

        ctx.set_earlier(&NOTE, None);
        assert_eq!(ctx.earlier(&NOTE), None, "read, absent");
        let value = serde_json::to_value(&ctx).unwrap();
        assert!(value["note"].is_null() && value.as_object().unwrap().contains_key("note"));
        assert!(value["visual_evidence"].is_null());

        let note = Note {
            text: "A secret.".to_string(),
        };
        ctx.set_earlier(&NOTE, Some(note));
        assert_eq!(ctx.earlier(&NOTE).unwrap().text, "A secret.");
        let value = serde_json::to_value(&ctx).unwrap();
        assert_eq!(value["note"], json!({"text": "A secret."}));
        let back: ScenarioContext = serde_json::from_value(value).unwrap();
        assert_eq!(back, ctx);
        assert_eq!(back.clone().without_earlier(), context());
    }

    #[test]
    fn visual_evidence_is_a_field_every_context_has() {
        let mut ctx = context();
        ctx.set_earlier_json(VISUAL_EVIDENCE, json!("Two people at a counter."));
        assert_eq!(
            ctx.visual_evidence.as_deref(),
            Some("Two people at a counter.")
        );
        assert_eq!(
            ctx.earlier_json(VISUAL_EVIDENCE),
            json!("Two people at a counter.")
        );
        let value = serde_json::to_value(&ctx).unwrap();
        assert_eq!(value.as_object().unwrap().len(), 9, "{value}");
    }
}

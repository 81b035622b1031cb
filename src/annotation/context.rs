//! What an annotation step knows about a scenario: the record's dialogue in the shape the
//! prompt templates read, and the answers of the steps before it.
//!
//! The struct serialises as the template context. Every field is always present (an absent
//! earlier answer is `null`, never missing), so templates can test `{% if description %}`
//! under minijinja's strict undefined behaviour, and a misspelt field is still an error.

use serde::{Deserialize, Serialize};

use crate::stages::annotate::answer::Annotation;
use crate::stages::bdi_risk::answer::BdiRisk;
use crate::stages::describe::answer::Description;
use crate::stages::parse_script::ScenarioRecord;
use crate::stages::profiles::answer::ScenarioProfiles;
use crate::stages::tasks::answer::Tasks;
use crate::text::script::LineKind;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    pub annotation: Option<Annotation>,
    pub description: Option<Description>,
    pub profiles: Option<ScenarioProfiles>,
    pub bdi: Option<BdiRisk>,
    pub tasks: Option<Tasks>,
    /// What the group image shows, in words (a verbalised-vision caption), when there is one.
    pub visual_evidence: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextLineKind {
    Dialogue,
    Action,
}

/// One line as the prompts show it. Action lines have no speaker and no directions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextLine {
    pub kind: ContextLineKind,
    /// `Ross`, `Monica and Rachel`, or a crowd cue such as `All`.
    pub speaker: Option<String>,
    pub text: String,
    pub directions: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CastMember {
    pub name: String,
    pub aliases: Vec<String>,
}

impl ScenarioContext {
    /// The context of a scenario before any annotation step has run.
    pub fn from_record(record: &ScenarioRecord) -> ScenarioContext {
        let unit = &record.unit;
        let lines = unit
            .lines
            .iter()
            .filter_map(|line| context_line(&line.kind))
            .collect();
        ScenarioContext {
            scenario_id: record.id.clone(),
            show: record.show.clone(),
            episode: record.episode.clone(),
            heading: unit.scene_heading.clone(),
            participants: unit.participants.clone(),
            lines,
            cast: Vec::new(),
            annotation: None,
            description: None,
            profiles: None,
            bdi: None,
            tasks: None,
            visual_evidence: None,
        }
    }

    pub fn with_cast(mut self, cast: Vec<CastMember>) -> ScenarioContext {
        self.cast = cast;
        self
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
            let all_names = std::iter::once(&member.name).chain(&member.aliases);
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

fn context_line(kind: &LineKind) -> Option<ContextLine> {
    match kind {
        LineKind::Dialogue(dialogue) => {
            let speaker = if dialogue.group || dialogue.speakers.is_empty() {
                dialogue.raw_speaker.trim().to_string()
            } else {
                dialogue.speakers.join(" and ")
            };
            Some(ContextLine {
                kind: ContextLineKind::Dialogue,
                speaker: Some(speaker),
                text: dialogue.text.clone(),
                directions: dialogue.directions.clone(),
            })
        }
        LineKind::Action { text } => Some(ContextLine {
            kind: ContextLineKind::Action,
            speaker: None,
            text: text.clone(),
            directions: Vec::new(),
        }),
        // Transitions, credits, notes and lyrics outside dialogue say nothing about the
        // interaction and would only distract a small model.
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod fixture {
    //! A small hand-written scenario every annotation test starts from.

    use super::*;
    use crate::text::scenario::ScenarioUnit;
    use crate::text::script::{Dialogue, ScriptLine};

    fn say(speaker: &str, text: &str, directions: &[&str]) -> ScriptLine {
        ScriptLine {
            kind: LineKind::Dialogue(Dialogue {
                speakers: vec![speaker.to_string()],
                raw_speaker: speaker.to_string(),
                group: false,
                text: text.to_string(),
                directions: directions.iter().map(|d| d.to_string()).collect(),
                extensions: Vec::new(),
                dual: false,
                lyric: false,
            }),
            source_line_start: 1,
            source_line_end: 1,
            uncut: false,
        }
    }

    fn action(text: &str) -> ScriptLine {
        ScriptLine {
            kind: LineKind::Action {
                text: text.to_string(),
            },
            source_line_start: 1,
            source_line_end: 1,
            uncut: false,
        }
    }

    pub fn record() -> ScenarioRecord {
        let lines = vec![
            action("Ross and Rachel are alone in the coffee house, closing up."),
            say("Ross", "You said you'd tell her before the party.", &[]),
            say(
                "Rachel",
                "I said I'd think about it.",
                &["wiping the counter"],
            ),
            say(
                "Ross",
                "Joey already knows. Everybody knows but Monica.",
                &[],
            ),
            say(
                "Rachel",
                "Then maybe somebody else should tell her.",
                &["not looking up"],
            ),
            say("Ross", "It's your secret, not mine.", &["to Rachel"]),
        ];
        ScenarioRecord {
            id: "friends/s01e01/sc001".to_string(),
            episode: "friends/s01e01".to_string(),
            show: "friends".to_string(),
            script_file: "friends/s01e01.txt".to_string(),
            unit: ScenarioUnit {
                id: "sc001".to_string(),
                scene_index: 0,
                scene_heading: Some("Central Perk, late evening".to_string()),
                participants: vec!["Ross".to_string(), "Rachel".to_string()],
                dialogue_line_count: 5,
                source_line_start: 1,
                source_line_end: 6,
                lines,
            },
        }
    }

    pub fn context() -> ScenarioContext {
        ScenarioContext::from_record(&record()).with_cast(vec![
            CastMember {
                name: "Ross Geller".to_string(),
                aliases: vec!["Ross".to_string()],
            },
            CastMember {
                name: "Rachel Green".to_string(),
                aliases: vec!["Rachel".to_string()],
            },
            CastMember {
                name: "Monica Geller".to_string(),
                aliases: vec!["Monica".to_string()],
            },
            CastMember {
                name: "Joey Tribbiani".to_string(),
                aliases: Vec::new(),
            },
        ])
    }

    /// The fixture with every earlier step's answer filled in, as the last step sees it.
    pub fn filled_context() -> ScenarioContext {
        use serde_json::json;

        use crate::annotation::balance_conflict_intensity;
        use crate::stages::annotate::answer as annotate;
        use crate::stages::bdi_risk::answer as bdi_risk;
        use crate::stages::describe::answer as describe;
        use crate::stages::profiles::answer as profiles;
        use crate::stages::tasks::answer as tasks;
        let mut ctx = context();
        ctx.annotation = Some(
            annotate::validate(
                &json!({"dialogue_type": "persuasion", "roles": [
                    {"name": "Ross", "gender": "male", "age": "20s", "occupation": "unknown"},
                    {"name": "Rachel", "gender": "female", "age": "20s",
                     "occupation": "waitress"}]}),
                &ctx,
            )
            .unwrap(),
        );
        ctx.description = Some(describe::Description {
            background: "Ross and Rachel share a secret.".to_string(),
            description: "At closing time Ross asks Rachel to reveal it.".to_string(),
        });
        let suggestions = profiles::validate(
            &json!({"roles": [
                {"name": "Ross", "profile": "A friend who wants the truth out.",
                 "expression_style": "honest_signaling",
                 "conflict_characteristic": "competing",
                 "non_competing_alternative": "compromising"},
                {"name": "Rachel", "profile": "Keeps the secret.",
                 "expression_style": "suppression",
                 "conflict_characteristic": "avoiding", "non_competing_alternative": "avoiding"}]}),
            &ctx,
        )
        .unwrap();
        let balanced =
            balance_conflict_intensity(&[suggestions.to_suggestion(&ctx.scenario_id)], 0).unwrap();
        ctx.profiles =
            Some(profiles::ScenarioProfiles::from_balanced(&suggestions, &balanced[0]).unwrap());
        ctx.bdi = Some(
            bdi_risk::validate(
                &json!({"roles": [
                    {"name": "Ross", "belief": "Rachel promised.", "desire": "The truth out.",
                     "intention": "Press her.", "risk_if_failed": "Blame."},
                    {"name": "Rachel", "belief": "It can wait.", "desire": "Time.",
                     "intention": "Stall.", "risk_if_failed": "Trust."}],
                    "revised_description": "REVISED: Ross presses Rachel at closing time."}),
                &ctx,
            )
            .unwrap(),
        );
        ctx.tasks = Some(
            tasks::validate(
                &json!({"roles": [
                    {"name": "Ross", "expression_task": "Ross says he is tired of the secret.",
                     "characteristic_task": "Ross insists.",
                     "interaction_regulation_task": "Ross steers back to the party.",
                     "interaction_outcome_task": "Ross gets Rachel to set a time."},
                    {"name": "Rachel", "expression_task": "Rachel hides her worry.",
                     "characteristic_task": "Rachel sidesteps.",
                     "interaction_regulation_task": "Rachel keeps answers short.",
                     "interaction_outcome_task": "Rachel gets Ross to drop it."}]}),
                &ctx,
            )
            .unwrap(),
        );
        ctx.visual_evidence = Some("Two people behind a coffee-house counter.".to_string());
        ctx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_record_keeps_dialogue_actions_and_participants() {
        let ctx = fixture::context();
        assert_eq!(ctx.participants, ["Ross", "Rachel"]);
        assert_eq!(ctx.lines.len(), 6);
        assert_eq!(ctx.lines[0].kind, ContextLineKind::Action);
        assert_eq!(ctx.lines[0].speaker, None);
        assert_eq!(ctx.lines[2].speaker.as_deref(), Some("Rachel"));
        assert_eq!(ctx.lines[2].directions, ["wiping the counter"]);
        assert_eq!(ctx.heading.as_deref(), Some("Central Perk, late evening"));
    }

    #[test]
    fn absent_cast_excludes_participants_and_adds_first_names() {
        let names = fixture::context().absent_cast_names();
        assert_eq!(names, ["Joey", "Joey Tribbiani", "Monica", "Monica Geller"]);
    }

    #[test]
    fn serialises_absent_answers_as_null() {
        let value = serde_json::to_value(fixture::context()).unwrap();
        assert!(value["description"].is_null());
        assert!(value.as_object().unwrap().contains_key("visual_evidence"));
    }

    #[test]
    fn participant_lookup_is_case_insensitive() {
        let ctx = fixture::context();
        assert_eq!(ctx.participant_named(" rOSS "), Some("Ross"));
        assert_eq!(ctx.participant_named("Joey"), None);
    }
}

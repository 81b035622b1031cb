//! The trace of one run: its settings, every turn with what the agent was shown and answered,
//! and how the run ended. It is what `evaluate` judges and what a person reads
//! ([`Trace::transcript`]).

use serde::{Deserialize, Serialize};

use crate::mode::ObservationMode;
use crate::policy::SpeakerPolicy;
use crate::turn::{ActionType, Turn};

/// How a run was set up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunSettings {
    pub scenario: String,
    pub mode: ObservationMode,
    /// Per participant, in order: its name and the model playing it.
    pub cast: Vec<(String, String)>,
    pub replicate: u32,
    pub seed: u64,
    pub rounds: usize,
    pub temperature: f32,
    pub speaker_policy: SpeakerPolicy,
    pub message_budget_words: Option<usize>,
}

/// What an agent was shown for one turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Shown {
    /// The observation's texts (a verbalization in `vv` and `vv_oracle`, none in `text`).
    pub texts: Vec<String>,
    /// Content hashes of the images attached (`dv`: the group image, then the collage).
    pub image_hashes: Vec<String>,
    /// `vv`: content hashes of the pictures the describer saw to write `texts`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub described_images: Vec<String>,
}

/// One turn as it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TurnRecord {
    /// 1-based.
    pub round: usize,
    /// Participant index.
    pub speaker: usize,
    /// Whether a person answered this turn (`viss play`) rather than a model.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub human: bool,
    pub shown: Shown,
    pub turn: Turn,
    /// The answers refused before this one, with why.
    pub rejected: Vec<viss_problem::Refusal>,
    /// The request cache key of the accepted answer.
    pub request_key: String,
    /// What the answer cost when it was asked (the same when a resumed run reads it back),
    /// re-asked answers included.
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// In US dollars, when the endpoint's config prices the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Whether the speaker's portrait was edited, and why not when it asked for it.
    pub portrait_edited: bool,
    pub portrait_note: Option<String>,
    /// `vv` and `dv`: every participant's portrait hash after the turn, in order (`None`: it
    /// has no portrait). Empty in the modes that show no pictures.
    pub portraits_after: Vec<Option<String>>,
}

/// Why a run stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum RunEnd {
    /// Every round was played.
    RoundsDone,
    /// Fewer than two roles remain (a role may leave where action types are on).
    TooFewRoles { remaining: usize },
    /// Several turns in a row did nothing (action type none).
    Idle { turns: usize },
}

/// How a transcript, the report and `viss show` say why a run stopped.
impl std::fmt::Display for RunEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunEnd::RoundsDone => f.write_str("after every round"),
            RunEnd::TooFewRoles { remaining } => {
                write!(f, "early, with {remaining} role(s) left in the scene")
            }
            RunEnd::Idle { turns } => {
                write!(f, "early, after {turns} turns in a row that did nothing")
            }
        }
    }
}

/// Turns in a row that do nothing (action type none) after which a run ends, as SOTOPIA's do.
pub const IDLE_TURNS_TO_END: usize = 3;

/// Who is still in a run and whether it ends: a role that leaves is never drawn again, and a
/// run ends when fewer than two roles remain or after [`IDLE_TURNS_TO_END`] turns of none.
#[derive(Debug, Clone, PartialEq)]
pub struct Presence {
    present: Vec<bool>,
    idle_turns: usize,
}

impl Presence {
    /// Every one of `roles` present.
    pub fn new(roles: usize) -> Self {
        Self {
            present: vec![true; roles],
            idle_turns: 0,
        }
    }

    /// Per role, whether it is still in the run.
    pub fn present(&self) -> &[bool] {
        &self.present
    }

    /// Records `speaker`'s turn (`action`: its type, where action types are on) and says how
    /// the run ends when this turn ends it.
    pub fn after_turn(&mut self, speaker: usize, action: Option<ActionType>) -> Option<RunEnd> {
        if action == Some(ActionType::Leave) {
            self.present[speaker] = false;
        }
        self.idle_turns = if action == Some(ActionType::None) {
            self.idle_turns + 1
        } else {
            0
        };
        let remaining = self.present.iter().filter(|&&here| here).count();
        if remaining < 2 {
            return Some(RunEnd::TooFewRoles { remaining });
        }
        (self.idle_turns >= IDLE_TURNS_TO_END).then_some(RunEnd::Idle {
            turns: self.idle_turns,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Trace {
    pub settings: RunSettings,
    /// `vv`: the describer's words for the group image, shown to every agent of the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scene: Vec<String>,
    pub turns: Vec<TurnRecord>,
    pub end: RunEnd,
}

impl Trace {
    /// The run as a person reads it: who said what, with the feeling and gesture beside it and
    /// the inner thought below, then how it ended.
    pub fn transcript(&self) -> String {
        let name = |index: usize| {
            self.settings
                .cast
                .get(index)
                .map_or("?", |(name, _)| name.as_str())
        };
        let mut out = format!(
            "{} ({} mode, replicate {}, seed {}, {} rounds)\n",
            self.settings.scenario,
            self.settings.mode,
            self.settings.replicate,
            self.settings.seed,
            self.settings.rounds
        );
        for (name, model) in &self.settings.cast {
            out.push_str(&format!("  {name}: {model}\n"));
        }
        for line in &self.scene {
            out.push_str(&format!("  seen: {line}\n"));
        }
        for record in &self.turns {
            let turn = &record.turn;
            let action = match turn.action_type {
                None | Some(ActionType::Speak) => String::new(),
                Some(action) => format!(" [{}]", action.as_str()),
            };
            out.push_str(&format!(
                "\n[{}] {}{} ({}; {}; {}){action}: {}\n    thinks: {}\n",
                record.round,
                name(record.speaker),
                if record.human { " (a person)" } else { "" },
                turn.emotion.as_str(),
                turn.facial_expression,
                turn.body_actions,
                turn.message,
                turn.inner_thought
            ));
            out.push_str(&format!(
                "    ({} prompt + {} answer tokens{})\n",
                record.prompt_tokens,
                record.completion_tokens,
                record
                    .cost_usd
                    .map_or(String::new(), |cost| format!(", ${cost:.4}"))
            ));
            if record.portrait_edited {
                out.push_str("    (portrait redrawn)\n");
            }
            if !record.rejected.is_empty() {
                out.push_str(&format!(
                    "    ({} answer(s) refused first)\n",
                    record.rejected.len()
                ));
            }
        }
        let (prompt, answer) = self.turns.iter().fold((0, 0), |(p, a), t| {
            (p + t.prompt_tokens, a + t.completion_tokens)
        });
        let cost: Option<f64> = self.turns.iter().map(|t| t.cost_usd).sum();
        out.push_str(&format!(
            "\n{} turns, {prompt} prompt + {answer} answer tokens, cost {}\n",
            self.turns.len(),
            cost.map_or("unknown (no price configured)".to_string(), |c| format!(
                "${c:.4}"
            ))
        ));
        out.push_str(&format!("\nended {}\n", self.end));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::turn::Emotion;

    #[test]
    fn the_transcript_reads_as_a_scene() {
        let trace = Trace {
            settings: RunSettings {
                scenario: "demo/s01e01/scd51d".to_string(),
                mode: ObservationMode::Text,
                cast: vec![
                    ("Noor".to_string(), "qwen".to_string()),
                    ("Theo".to_string(), "qwen".to_string()),
                ],
                replicate: 0,
                seed: 7,
                rounds: 1,
                temperature: 0.8,
                speaker_policy: SpeakerPolicy::SuggestedFair,
                message_budget_words: None,
            },
            scene: Vec::new(),
            turns: vec![TurnRecord {
                round: 1,
                speaker: 1,
                human: false,
                shown: Shown {
                    texts: Vec::new(),
                    image_hashes: Vec::new(),
                    described_images: Vec::new(),
                },
                turn: Turn {
                    inner_thought: "He will not let this go.".to_string(),
                    emotion: Emotion::Fear,
                    emotion_description: "Nervous.".to_string(),
                    image_edit: false,
                    facial_expression: "eyes down".to_string(),
                    body_actions: "shifts a box".to_string(),
                    next_speaker: "Noor".to_string(),
                    next_speaker_index: Some(0),
                    action_type: None,
                    message: "I can pay half.".to_string(),
                },
                rejected: vec![viss_problem::Refusal::whole(
                    "not_an_emotion",
                    "emotion is \"Worry\"".to_string(),
                )],
                request_key: "k".to_string(),
                prompt_tokens: 10,
                completion_tokens: 5,
                cost_usd: Some(0.0025),
                portrait_edited: false,
                portrait_note: None,
                portraits_after: Vec::new(),
            }],
            end: RunEnd::RoundsDone,
        };
        let text = trace.transcript();
        assert!(
            text.contains("[1] Theo (Fear; eyes down; shifts a box): I can pay half.\n"),
            "{text}"
        );
        assert!(text.contains("thinks: He will not let this go."));
        assert!(text.contains("(1 answer(s) refused first)"));
        assert!(
            text.contains("    (10 prompt + 5 answer tokens, $0.0025)\n"),
            "{text}"
        );
        assert!(text.contains("\n1 turns, 10 prompt + 5 answer tokens, cost $0.0025\n"));
        assert!(text.ends_with("ended after every round\n"));
        let json = serde_json::to_value(&trace).unwrap();
        assert_eq!(json["end"]["reason"], "rounds_done");
        assert_eq!(serde_json::from_value::<Trace>(json).unwrap(), trace);
    }

    #[test]
    fn a_run_ends_when_fewer_than_two_remain_or_after_three_idle_turns() {
        let mut three = Presence::new(3);
        assert_eq!(three.after_turn(0, Some(ActionType::Leave)), None);
        assert_eq!(three.present(), [false, true, true]);
        assert_eq!(three.after_turn(1, Some(ActionType::None)), None);
        assert_eq!(three.after_turn(2, Some(ActionType::None)), None);
        // A turn that acts resets the count.
        assert_eq!(three.after_turn(1, Some(ActionType::Speak)), None);
        assert_eq!(three.after_turn(2, Some(ActionType::None)), None);
        assert_eq!(
            three.after_turn(1, None),
            None,
            "action types off: no idle count"
        );
        for _ in 0..2 {
            assert_eq!(three.after_turn(2, Some(ActionType::None)), None);
        }
        assert_eq!(
            three.after_turn(1, Some(ActionType::None)),
            Some(RunEnd::Idle { turns: 3 })
        );
        let mut two = Presence::new(2);
        assert_eq!(
            two.after_turn(1, Some(ActionType::Leave)),
            Some(RunEnd::TooFewRoles { remaining: 1 })
        );
        assert_eq!(two.present(), [true, false]);
    }
}

//! One agent's turn: what it must hold (the paper's output fields, appendix J.2), the JSON
//! schema a model is asked to follow, and the check that refuses a turn with the reason the model
//! is re-asked with. A turn that fails the check is never repaired or filled in.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use viss_problem::{Problems, Rejection};

/// The emotion vocabulary of the turn (the paper's seven).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Emotion {
    Joy,
    Sadness,
    Fear,
    Anger,
    Surprise,
    Disgust,
    Neutral,
}

impl Emotion {
    pub const ALL: [Emotion; 7] = [
        Emotion::Joy,
        Emotion::Sadness,
        Emotion::Fear,
        Emotion::Anger,
        Emotion::Surprise,
        Emotion::Disgust,
        Emotion::Neutral,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Emotion::Joy => "Joy",
            Emotion::Sadness => "Sadness",
            Emotion::Fear => "Fear",
            Emotion::Anger => "Anger",
            Emotion::Surprise => "Surprise",
            Emotion::Disgust => "Disgust",
            Emotion::Neutral => "Neutral",
        }
    }

    fn parse(text: &str) -> Option<Emotion> {
        Emotion::ALL.into_iter().find(|e| e.as_str() == text)
    }

    /// How a face showing it is described ("looks angry").
    pub fn adjective(self) -> &'static str {
        match self {
            Emotion::Joy => "happy",
            Emotion::Sadness => "sad",
            Emotion::Fear => "afraid",
            Emotion::Anger => "angry",
            Emotion::Surprise => "surprised",
            Emotion::Disgust => "disgusted",
            Emotion::Neutral => "calm",
        }
    }

    /// The emotion named `text` in any case: how another vocabulary of the same seven (the
    /// annotation's lower-case labels) is read.
    pub fn from_name(text: &str) -> Option<Emotion> {
        Emotion::ALL
            .into_iter()
            .find(|e| e.as_str().eq_ignore_ascii_case(text.trim()))
    }
}

/// What a turn does, when a run plays with SOTOPIA's action types: the message is then what is
/// said (speak), the gesture or expression meant to be read (non-verbal), the deed (physical
/// action), the parting words (leave), or empty (none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionType {
    Speak,
    NonVerbal,
    PhysicalAction,
    Leave,
    None,
}

impl ActionType {
    pub const ALL: [ActionType; 5] = [
        ActionType::Speak,
        ActionType::NonVerbal,
        ActionType::PhysicalAction,
        ActionType::Leave,
        ActionType::None,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActionType::Speak => "speak",
            ActionType::NonVerbal => "non_verbal",
            ActionType::PhysicalAction => "physical_action",
            ActionType::Leave => "leave",
            ActionType::None => "none",
        }
    }

    fn parse(text: &str) -> Option<ActionType> {
        ActionType::ALL.into_iter().find(|a| a.as_str() == text)
    }
}

/// What a run asks of every turn beyond the paper's fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnRules {
    /// The message's words at most.
    pub message_budget_words: Option<usize>,
    /// Each turn names its [`ActionType`].
    pub action_types: bool,
    /// Participants who have left (by index): not to be handed the turn.
    pub gone: Vec<usize>,
}

/// What the next speaker field may say besides a name.
pub const UNCERTAIN: &str = "uncertain";

/// An inner thought shorter than this many words may recur in the message by chance ("Fine.");
/// from this length on, finding it there word for word means the thought was spoken aloud.
pub const SPOKEN_THOUGHT_MIN_WORDS: usize = 4;

/// One agent's turn, as checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Turn {
    pub inner_thought: String,
    pub emotion: Emotion,
    pub emotion_description: String,
    /// Whether the speaker's portrait should change to show the new state.
    pub image_edit: bool,
    pub facial_expression: String,
    pub body_actions: String,
    /// As the model wrote it: another participant's name or [`UNCERTAIN`].
    pub next_speaker: String,
    /// The participant it names, by index; `None` for [`UNCERTAIN`].
    pub next_speaker_index: Option<usize>,
    /// With action types on, what the turn does; the message is then empty for `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_type: Option<ActionType>,
    pub message: String,
}

/// The fields of a turn, in the order a model is asked to write them.
const TEXT_FIELDS: [&str; 5] = [
    "inner_thought",
    "emotion_description",
    "facial_expression",
    "body_actions",
    "message",
];

/// The schema of `speaker`'s turn among `participants`.
pub fn schema(participants: &[String], speaker: usize, rules: &TurnRules) -> Value {
    let mut next: Vec<Value> = participants
        .iter()
        .enumerate()
        .filter(|&(index, _)| index != speaker && !rules.gone.contains(&index))
        .map(|(_, name)| json!(name))
        .collect();
    next.push(json!(UNCERTAIN));
    let text =
        |description: &str| json!({"type": "string", "minLength": 1, "description": description});
    let mut schema = json!({
        "type": "object",
        "properties": {
            "inner_thought": text("What the character thinks and plans, unheard by the others."),
            "emotion": {
                "type": "string",
                "enum": Emotion::ALL.iter().map(|e| e.as_str()).collect::<Vec<_>>(),
            },
            "emotion_description": text("What the character feels, in a sentence."),
            "image_edit": {"type": "boolean"},
            "facial_expression": text("What the character's face shows now."),
            "body_actions": text("What the character's body does now."),
            "next_speaker": {"type": "string", "enum": next},
            "message": text("What the character says aloud to the others."),
        },
        "required": [
            "inner_thought", "emotion", "emotion_description", "image_edit",
            "facial_expression", "body_actions", "next_speaker", "message",
        ],
        "additionalProperties": false,
    });
    if rules.action_types {
        schema["properties"]["action_type"] = json!({
            "type": "string",
            "enum": ActionType::ALL.map(ActionType::as_str),
        });
        schema["properties"]["message"] = json!({
            "type": "string",
            "description": "What the character says, shows or does; empty for none.",
        });
        schema["required"]
            .as_array_mut()
            .expect("required is a list")
            .insert(7, json!("action_type"));
    }
    schema
}

/// [`schema`] for a decoder that follows patterns: besides, the message cannot open with a
/// speaker's label ("Noor: ..."), having no colon among its first characters (the longest
/// name's and three more, for spaces). Shown the conversation as a transcript, the 1.5B model
/// went on writing it as the next line of another character's ("Noor: ...") through all six
/// answers of a turn, in two runs of one demo. A colon later on ("the photo says 9:14") is
/// free. As in every pattern the local decoder follows, no quote, backslash or line break:
/// llama.cpp would copy them into the JSON string unescaped. `max_chars`: the most characters
/// the decoder writes into any free-text string (a pattern takes the place of its length cap).
pub fn decoder_schema(
    participants: &[String],
    speaker: usize,
    rules: &TurnRules,
    max_chars: usize,
) -> Value {
    let mut schema = schema(participants, speaker, rules);
    let lead = participants
        .iter()
        .map(|name| name.chars().count())
        .max()
        .unwrap_or(0)
        + 3;
    let rest = max_chars.saturating_sub(lead).max(1);
    let least = usize::from(!rules.action_types);
    let any = r#"[^"\\\n\r\t]"#;
    let no_colon = r#"[^:"\\\n\r\t]"#;
    schema["properties"]["message"]["pattern"] = Value::from(format!(
        "^({no_colon}{{{least},{lead}}}|{no_colon}{{{lead}}}{any}{{1,{rest}}})$"
    ));
    schema
}

/// Checks `value` as `speaker`'s turn among `participants` under `rules`; the error says what
/// to fix, in words a model can act on.
pub fn check_turn(
    value: &Value,
    participants: &[String],
    speaker: usize,
    rules: &TurnRules,
) -> Result<Turn, Rejection> {
    let Some(object) = value.as_object() else {
        let message = "the answer must be one JSON object with the turn's fields".to_string();
        return Err(Rejection::whole("answer_shape", message));
    };
    let mut problems = Problems::new();
    let text = |field: &str, problems: &mut Problems| -> String {
        match object.get(field).and_then(Value::as_str).map(str::trim) {
            Some(text) if !text.is_empty() => text.to_string(),
            Some(_) => {
                problems.unusable("empty", None, field, format!("{field} is empty; write it"));
                String::new()
            }
            None => {
                let message = format!("{field} is missing; add it as a string");
                problems.unusable("missing", None, field, message);
                String::new()
            }
        }
    };
    let action_type = if rules.action_types {
        match object.get("action_type").and_then(Value::as_str) {
            Some(name) => ActionType::parse(name.trim()).or_else(|| {
                let message = format!(
                    "action_type is \"{name}\"; it must be exactly one of {}",
                    ActionType::ALL.map(ActionType::as_str).join(", ")
                );
                problems.unusable("not_an_action_type", None, "action_type", message);
                None
            }),
            None => {
                let message = format!(
                    "action_type is missing; give one of {}",
                    ActionType::ALL.map(ActionType::as_str).join(", ")
                );
                problems.unusable("missing", None, "action_type", message);
                None
            }
        }
    } else {
        None
    };
    let doing_nothing = action_type == Some(ActionType::None);
    let [
        inner_thought,
        emotion_description,
        facial_expression,
        body_actions,
        message,
    ] = TEXT_FIELDS.map(|field| {
        if field == "message" && doing_nothing {
            let said = object.get(field).and_then(Value::as_str).map(str::trim);
            if said.is_some_and(|said| !said.is_empty()) {
                let message = "action_type is none but the message says something; leave the \
                               message empty, or choose the action it is"
                    .to_string();
                problems.unusable("none_with_words", None, "message", message);
            }
            return String::new();
        }
        text(field, &mut problems)
    });
    // "Noor: I can pay half." from Noor is how a transcript writes what she says, not part of
    // it: the label is taken off. Another participant's label is refused ([`check_novel`]).
    let message = participants
        .get(speaker)
        .and_then(|name| own_label_removed(&message, name))
        .unwrap_or(message);
    let emotion = match object.get("emotion").and_then(Value::as_str) {
        Some(name) => Emotion::parse(name.trim()).or_else(|| {
            let message = format!(
                "emotion is \"{name}\"; it must be exactly one of {}",
                emotion_list()
            );
            problems.unusable("not_an_emotion", None, "emotion", message);
            None
        }),
        None => {
            let message = format!("emotion is missing; give one of {}", emotion_list());
            problems.unusable("missing", None, "emotion", message);
            None
        }
    };
    let image_edit = object.get("image_edit").and_then(Value::as_bool);
    if image_edit.is_none() {
        let message = "image_edit is missing; give true or false".to_string();
        problems.unusable("missing", None, "image_edit", message);
    }
    let others: Vec<&str> = participants
        .iter()
        .enumerate()
        .filter(|&(index, _)| index != speaker && !rules.gone.contains(&index))
        .map(|(_, name)| name.as_str())
        .collect();
    let next_speaker = object
        .get("next_speaker")
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or_default()
        .to_string();
    let next_speaker_index = if next_speaker.eq_ignore_ascii_case(UNCERTAIN) {
        None
    } else {
        match participants
            .iter()
            .position(|name| name.eq_ignore_ascii_case(&next_speaker))
        {
            Some(index) if index != speaker && !rules.gone.contains(&index) => Some(index),
            _ => {
                let message = format!(
                    "next_speaker is \"{next_speaker}\"; it must be one of {} or \"{UNCERTAIN}\"",
                    others.join(", ")
                );
                problems.unusable("not_a_listener", None, "next_speaker", message);
                None
            }
        }
    };
    if !inner_thought.is_empty() && !message.is_empty() && speaks_thought(&inner_thought, &message)
    {
        let message = "the message repeats the inner thought word for word; the thought stays \
                       private, so say aloud only what the character would say to the others"
            .to_string();
        problems.unusable("thought_spoken", None, "message", message);
    }
    if let Some(budget) = rules.message_budget_words {
        let words = message.split_whitespace().count();
        if words > budget {
            let message = format!("the message has {words} words; keep it within {budget}");
            problems.unusable("too_long", None, "message", message);
        }
    }
    problems.finish()?;
    match (emotion, image_edit) {
        (Some(emotion), Some(image_edit)) => Ok(Turn {
            action_type,
            inner_thought,
            emotion,
            emotion_description,
            image_edit,
            facial_expression,
            body_actions,
            next_speaker,
            next_speaker_index,
            message,
        }),
        // Both were recorded as problems above, so `finish` has returned already.
        _ => unreachable!("a turn without its emotion or image_edit has problems"),
    }
}

/// Refuses a turn whose message says nothing new: one that repeats an earlier message of the
/// run word for word (`history`, oldest first, as (speaker, message)), or that opens with
/// another participant's label ("Theo: ..." from Noor) instead of the words said. Small models
/// fall into both, and a run of them is no conversation to judge.
pub fn check_novel(
    turn: &Turn,
    participants: &[String],
    history: &[(usize, String)],
) -> Result<(), Rejection> {
    check_message_novel(&turn.message, participants, history)
}

/// [`check_novel`] of a message alone (a turn of any protocol).
pub fn check_message_novel(
    said: &str,
    participants: &[String],
    history: &[(usize, String)],
) -> Result<(), Rejection> {
    let message = words(said);
    if message.is_empty() {
        // A turn that does nothing (action type none) has no message to repeat.
        return Ok(());
    }
    if let Some((at, (speaker, _))) = history
        .iter()
        .enumerate()
        .find(|(_, (_, said))| words(said) == message)
    {
        let who = participants.get(*speaker).map_or("someone", String::as_str);
        let message = format!(
            "the message repeats word for word what {who} said at turn {}; say something new \
             that moves the conversation on",
            at + 1
        );
        return Err(Rejection::unusable(
            "repeated_message",
            None,
            "message",
            message,
        ));
    }
    if let Some(name) = participants.iter().find(|name| {
        said.trim_start()
            .strip_prefix(name.as_str())
            .is_some_and(|rest| rest.trim_start().starts_with(':'))
    }) {
        let message = format!(
            "the message begins with the label \"{name}:\"; write only the words said aloud"
        );
        return Err(Rejection::unusable(
            "label_in_message",
            None,
            "message",
            message,
        ));
    }
    Ok(())
}

fn emotion_list() -> String {
    Emotion::ALL.map(Emotion::as_str).join(", ")
}

/// Whether the message holds the whole inner thought word for word (ignoring case, spacing and
/// punctuation), for thoughts of at least [`SPOKEN_THOUGHT_MIN_WORDS`] words.
fn speaks_thought(thought: &str, message: &str) -> bool {
    let (thought, message) = (words(thought), words(message));
    thought.len() >= SPOKEN_THOUGHT_MIN_WORDS
        && message
            .windows(thought.len())
            .any(|window| window == thought.as_slice())
}

/// `message` without a leading "NAME:" label of `name`, when it has one and says more.
fn own_label_removed(message: &str, name: &str) -> Option<String> {
    let rest = message.trim_start().strip_prefix(name)?.trim_start();
    let said = rest.strip_prefix(':')?.trim();
    (!said.is_empty()).then(|| said.to_string())
}

/// `text`'s words in lower case, without punctuation.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_or_labelled_message_is_refused_with_what_to_do() {
        let turn = check_turn(&good(), &cast(), 0, &TurnRules::default()).unwrap();
        let history = vec![(1, "Fine. I will call the landlord.".to_string())];
        assert_eq!(check_novel(&turn, &cast(), &history), Ok(()));
        let mut copied = turn.clone();
        copied.message = "fine, I will call the LANDLORD".to_string();
        let error = check_novel(&copied, &cast(), &history)
            .unwrap_err()
            .message();
        assert!(error.contains("what Theo said at turn 1"), "{error}");
        let mut labelled = turn;
        labelled.message = "Theo : You pay for the dent.".to_string();
        let error = check_novel(&labelled, &cast(), &[]).unwrap_err().message();
        assert!(error.contains("label \"Theo:\""), "{error}");
    }

    #[test]
    fn the_speakers_own_label_is_taken_off_the_message() {
        let mut answer = good();
        answer["message"] = json!("Noor: Pay for the dent, Theo.");
        let turn = check_turn(&answer, &cast(), 0, &TurnRules::default()).unwrap();
        assert_eq!(turn.message, "Pay for the dent, Theo.");
        answer["message"] = json!("Noor:");
        let error = check_turn(&answer, &cast(), 0, &TurnRules::default());
        assert!(
            error.is_ok_and(|t| t.message == "Noor:"),
            "nothing else said: kept as is"
        );
    }

    fn cast() -> Vec<String> {
        ["Noor", "Theo", "Mila"].map(str::to_string).to_vec()
    }

    fn good() -> Value {
        json!({
            "inner_thought": "If I press him now he will fold and pay for the dent.",
            "emotion": "Anger",
            "emotion_description": "Irritated that the deposit is at risk.",
            "image_edit": true,
            "facial_expression": "Tight jaw, narrowed eyes.",
            "body_actions": "Sets the tape down hard on the box.",
            "next_speaker": "Theo",
            "message": "That is my deposit, Theo. You drove the van.",
        })
    }

    #[test]
    fn a_complete_turn_passes_and_names_the_next_speaker_by_index() {
        let turn = check_turn(&good(), &cast(), 0, &TurnRules::default()).unwrap();
        assert_eq!(turn.emotion, Emotion::Anger);
        assert_eq!(turn.next_speaker_index, Some(1));
        let mut uncertain = good();
        uncertain["next_speaker"] = json!("uncertain");
        let turn = check_turn(&uncertain, &cast(), 0, &TurnRules::default()).unwrap();
        assert_eq!(turn.next_speaker_index, None);
    }

    #[test]
    fn an_emotion_outside_the_seven_is_refused_naming_them() {
        let mut value = good();
        value["emotion"] = json!("Frustration");
        let error = check_turn(&value, &cast(), 0, &TurnRules::default())
            .unwrap_err()
            .message();
        assert!(
            error.contains(
                "emotion is \"Frustration\"; it must be exactly one of Joy, Sadness, \
                 Fear, Anger, Surprise, Disgust, Neutral"
            ),
            "{error}"
        );
    }

    #[test]
    fn a_thought_spoken_aloud_is_refused() {
        let mut value = good();
        value["message"] =
            json!("Listen. If I press him now, he will fold and pay for the dent! Right?");
        let error = check_turn(&value, &cast(), 0, &TurnRules::default())
            .unwrap_err()
            .message();
        assert!(
            error.contains("repeats the inner thought word for word"),
            "{error}"
        );
        // A short thought may recur by chance.
        value["inner_thought"] = json!("Fine.");
        value["message"] = json!("Fine. Pay half then.");
        assert!(check_turn(&value, &cast(), 0, &TurnRules::default()).is_ok());
    }

    #[test]
    fn missing_fields_a_bad_next_speaker_and_a_long_message_are_each_named() {
        let mut value = good();
        value.as_object_mut().unwrap().remove("body_actions");
        value["facial_expression"] = json!("  ");
        value["next_speaker"] = json!("Noor");
        let error = check_turn(
            &value,
            &cast(),
            0,
            &TurnRules {
                message_budget_words: Some(5),
                ..TurnRules::default()
            },
        )
        .unwrap_err()
        .message();
        for part in [
            "body_actions is missing",
            "facial_expression is empty",
            "next_speaker is \"Noor\"; it must be one of Theo, Mila or \"uncertain\"",
            "the message has 9 words; keep it within 5",
        ] {
            assert!(error.contains(part), "{part}: {error}");
        }
        assert!(
            check_turn(
                &json!(["not", "an", "object"]),
                &cast(),
                0,
                &TurnRules::default()
            )
            .is_err()
        );
    }

    #[test]
    fn the_decoder_schema_keeps_a_speakers_label_out_of_the_message() {
        let pattern = |rules: &TurnRules| {
            let schema = decoder_schema(&cast(), 1, rules, 600);
            let pattern = schema["properties"]["message"]["pattern"].as_str().unwrap();
            regex::Regex::new(pattern).unwrap()
        };
        let message = pattern(&TurnRules::default());
        for said in [
            "That is my deposit, Theo.",
            "Look at the photo: it was there yesterday.",
            "Yesterday at 9:14, outside our building.",
        ] {
            assert!(message.is_match(said), "{said}");
        }
        for label in [
            "Noor: Pay for the dent.",
            "Mila : no.",
            "  Theo:",
            "",
            "a \"b\"",
        ] {
            assert!(!message.is_match(label), "{label}");
        }
        // With action types a turn may say nothing.
        let rules = TurnRules {
            action_types: true,
            ..TurnRules::default()
        };
        assert!(pattern(&rules).is_match(""));
        // Everything else is the schema every backend gets.
        let mut plain = decoder_schema(&cast(), 1, &rules, 600);
        plain["properties"]["message"]
            .as_object_mut()
            .unwrap()
            .remove("pattern");
        assert_eq!(plain, schema(&cast(), 1, &rules));
    }

    #[test]
    fn the_schema_offers_only_the_others_and_uncertain_as_next_speaker() {
        let schema = schema(&cast(), 1, &TurnRules::default());
        assert_eq!(
            schema["properties"]["next_speaker"]["enum"],
            json!(["Noor", "Mila", "uncertain"])
        );
        assert_eq!(
            schema["properties"]["emotion"]["enum"]
                .as_array()
                .unwrap()
                .len(),
            7
        );
        assert_eq!(schema["required"].as_array().unwrap().len(), 8);
    }

    #[test]
    fn with_action_types_a_turn_names_its_action_and_doing_nothing_says_nothing() {
        let rules = TurnRules {
            action_types: true,
            gone: vec![2],
            ..TurnRules::default()
        };
        let schema = schema(&cast(), 0, &rules);
        assert_eq!(
            schema["properties"]["next_speaker"]["enum"],
            json!(["Theo", "uncertain"]),
            "Mila has left"
        );
        assert_eq!(schema["properties"]["action_type"]["enum"][1], "non_verbal");
        assert!(
            schema["required"]
                .as_array()
                .unwrap()
                .contains(&json!("action_type"))
        );

        let mut leave = good();
        leave["action_type"] = json!("leave");
        let turn = check_turn(&leave, &cast(), 0, &rules).unwrap();
        assert_eq!(turn.action_type, Some(ActionType::Leave));
        let error = check_turn(&good(), &cast(), 0, &rules)
            .unwrap_err()
            .message();
        assert!(error.contains("action_type is missing"), "{error}");
        let mut to_the_gone = leave.clone();
        to_the_gone["next_speaker"] = json!("Mila");
        let error = check_turn(&to_the_gone, &cast(), 0, &rules)
            .unwrap_err()
            .message();
        assert!(
            error.contains("must be one of Theo or \"uncertain\""),
            "{error}"
        );

        let mut idle = good();
        idle["action_type"] = json!("none");
        let error = check_turn(&idle, &cast(), 0, &rules).unwrap_err().message();
        assert!(error.contains("leave the message empty"), "{error}");
        idle["message"] = json!("");
        let turn = check_turn(&idle, &cast(), 0, &rules).unwrap();
        assert_eq!(
            (turn.action_type, turn.message.as_str()),
            (Some(ActionType::None), "")
        );
        let history = vec![(1, String::new())];
        assert_eq!(check_novel(&turn, &cast(), &history), Ok(()));

        let off = check_turn(&leave, &cast(), 0, &TurnRules::default()).unwrap();
        assert_eq!(
            off.action_type, None,
            "ignored when the run has no action types"
        );
        assert!(!serde_json::to_string(&off).unwrap().contains("action_type"));
    }
}

//! AgentSense's questions after a run (AgentSense, section 3.4): was each social goal reached,
//! answered yes or no with a reason by the agent that held it, by the other agents and by each
//! judge, and which option of a four-option question about another character's private
//! information is right. Answers are strict JSON: a verdict is a JSON boolean (prose such as
//! "Yes, but no" is refused, never read as yes), a choice is an option's letter or its whole
//! text. Goals and questions are keyed (`g1`, `q1`, ...) so the answer names what it answers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use viss_problem::{Problems, Rejection};

/// The option letters, in the order the options are shown.
pub const LETTERS: [char; 4] = ['A', 'B', 'C', 'D'];

/// One verdict on one goal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GoalVerdict {
    pub reason: String,
    pub achieved: bool,
}

/// A question as asked: its key and its options, in the stored order.
#[derive(Debug, Clone, PartialEq, Eq, schemars::JsonSchema)]
pub struct Asked<'a> {
    pub key: &'a str,
    pub options: &'a [String],
}

fn verdict_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "reason": {"type": "string", "minLength": 1,
                       "description": "One sentence naming what in the conversation decides it."},
            "achieved": {"type": "boolean"},
        },
        "required": ["reason", "achieved"],
        "additionalProperties": false,
    })
}

/// The schema of an answer with a verdict per goal key and, when `questions` is not empty, a
/// choice per question key. With `letters_only` (the constrained decoder) a choice is one of
/// the letters; otherwise any text, which [`check`] reads as a letter or an option's text.
pub fn schema(goal_keys: &[String], questions: &[Asked<'_>], letters_only: bool) -> Value {
    let goals: serde_json::Map<String, Value> = goal_keys
        .iter()
        .map(|key| (key.clone(), verdict_schema()))
        .collect();
    let mut properties = json!({
        "goals": {
            "type": "object",
            "properties": goals,
            "required": goal_keys,
            "additionalProperties": false,
        }
    });
    let mut required = vec!["goals"];
    if !questions.is_empty() {
        let choice = if letters_only {
            json!({"type": "string", "enum": LETTERS.map(String::from)})
        } else {
            json!({"type": "string", "minLength": 1})
        };
        let choices: serde_json::Map<String, Value> = questions
            .iter()
            .map(|q| (q.key.to_string(), choice.clone()))
            .collect();
        let keys: Vec<&str> = questions.iter().map(|q| q.key).collect();
        properties["questions"] = json!({
            "type": "object",
            "properties": choices,
            "required": keys,
            "additionalProperties": false,
        });
        required.push("questions");
    }
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// What one answer said: a verdict per goal key and a letter per question key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Answered {
    pub goals: BTreeMap<String, GoalVerdict>,
    pub choices: BTreeMap<String, char>,
}

/// Reads an answer to [`schema`]: every goal key once with a reason and a boolean, every
/// question key once with a letter or an option's whole text (case and outer spaces aside),
/// nothing else. Returns every problem found, in words a model can act on when re-asked.
pub fn check(
    value: &Value,
    goal_keys: &[String],
    questions: &[Asked<'_>],
) -> Result<Answered, Rejection> {
    let mut problems = Problems::new();
    let Some(object) = value.as_object() else {
        let message = "the answer must be a JSON object with \"goals\"".to_string();
        return Err(Rejection::whole("answer_shape", message));
    };
    let expected = |key: &str| key == "goals" || (key == "questions" && !questions.is_empty());
    for key in object.keys().filter(|key| !expected(key)) {
        let message = format!("{key:?} is not asked for; leave it out");
        problems.unusable("not_asked_for", None, key, message);
    }
    let mut answered = Answered::default();
    match object.get("goals").and_then(Value::as_object) {
        None => problems.unusable(
            "answer_shape",
            None,
            "goals",
            "\"goals\" must be an object with one entry per goal".to_string(),
        ),
        Some(goals) => {
            for key in goals.keys().filter(|key| !goal_keys.contains(key)) {
                let message = format!(
                    "goal {key:?} is not one of those asked about ({})",
                    goal_keys.join(", ")
                );
                problems.unusable("goal_not_asked", None, "goals", message);
            }
            for key in goal_keys {
                match goals.get(key) {
                    None => {
                        let message = format!("goal {key} is not answered");
                        problems.unusable("goal_unanswered", None, "goals", message);
                    }
                    Some(given) => {
                        if let Some(verdict) = verdict_of(given, key, &mut problems) {
                            answered.goals.insert(key.clone(), verdict);
                        }
                    }
                }
            }
        }
    }
    if !questions.is_empty() {
        match object.get("questions").and_then(Value::as_object) {
            None => problems.unusable(
                "answer_shape",
                None,
                "questions",
                "\"questions\" must be an object with one entry per question".to_string(),
            ),
            Some(choices) => {
                for key in choices
                    .keys()
                    .filter(|key| !questions.iter().any(|q| q.key == key.as_str()))
                {
                    let message = format!("question {key:?} was not asked");
                    problems.unusable("question_not_asked", None, "questions", message);
                }
                for question in questions {
                    match choices.get(question.key) {
                        None => {
                            let message = format!("question {} is not answered", question.key);
                            problems.unusable("question_unanswered", None, "questions", message);
                        }
                        Some(chosen) => match choice_of(chosen, question.options) {
                            Ok(letter) => {
                                answered.choices.insert(question.key.to_string(), letter);
                            }
                            Err(problem) => {
                                let message = format!("question {}: {problem}", question.key);
                                problems.unusable("not_a_choice", None, "questions", message);
                            }
                        },
                    }
                }
            }
        }
    }
    problems.finish().map(|()| answered)
}

/// Goal `key`'s verdict, or `None` with its problems recorded.
fn verdict_of(value: &Value, key: &str, problems: &mut Problems) -> Option<GoalVerdict> {
    let achieved = match value.get("achieved") {
        Some(Value::Bool(achieved)) => Some(*achieved),
        Some(other) => {
            let message = format!(
                "goal {key}: \"achieved\" must be true or false, not {other}; give the reason in \
                 \"reason\""
            );
            problems.unusable("verdict_not_boolean", None, "goals", message);
            None
        }
        None => {
            let message = format!("goal {key}: \"achieved\" (true or false) is missing");
            problems.unusable("verdict_missing", None, "goals", message);
            None
        }
    };
    let reason = value
        .get("reason")
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or_default();
    if reason.is_empty() {
        let message = format!("goal {key}: \"reason\" must say in one sentence what decides it");
        problems.unusable("reason_missing", None, "goals", message);
    }
    if let Some(extra) = value
        .as_object()
        .and_then(|o| o.keys().find(|k| *k != "reason" && *k != "achieved"))
    {
        let message = format!("goal {key}: {extra:?} is not asked for");
        problems.unusable("not_asked_for", None, "goals", message);
    }
    let achieved = achieved?;
    (!reason.is_empty()).then(|| GoalVerdict {
        reason: reason.to_string(),
        achieved,
    })
}

/// The letter `value` chooses among `options`: a letter (`"b"`, `"B."`, `"(B)"`) or the whole
/// text of one option; anything else, such as a letter with words after it, is no choice.
pub fn choice_of(value: &Value, options: &[String]) -> Result<char, String> {
    let Some(text) = value.as_str() else {
        return Err(format!("answer with a letter, not {value}"));
    };
    let text = text.trim();
    let bare = text
        .trim_start_matches('(')
        .trim_end_matches([')', '.', ':'])
        .trim();
    let letters = &LETTERS[..options.len().min(LETTERS.len())];
    if let Some(letter) = letters
        .iter()
        .find(|l| bare.len() == 1 && bare.eq_ignore_ascii_case(&l.to_string()))
    {
        return Ok(*letter);
    }
    let normalized = |s: &str| s.trim().trim_end_matches('.').to_lowercase();
    if let Some(index) = options
        .iter()
        .position(|option| normalized(option) == normalized(text))
    {
        return Ok(LETTERS[index]);
    }
    Err(format!(
        "{text:?} is neither a letter ({}) nor one option's text",
        letters
            .iter()
            .map(char::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The panel's verdict on a goal from each judge's (`None`: missing): yes when more judges
/// that answered say yes than no, no when more say no; `None` on a tie or below the panel's
/// quorum ([`crate::label::quorum`]), never a guess.
pub fn majority(verdicts: &[Option<bool>]) -> Option<bool> {
    let given: Vec<bool> = verdicts.iter().flatten().copied().collect();
    if given.is_empty() || given.len() < crate::label::quorum(verdicts.len()) {
        return None;
    }
    let yes = given.iter().filter(|&&v| v).count();
    let no = given.len() - yes;
    match yes.cmp(&no) {
        std::cmp::Ordering::Greater => Some(true),
        std::cmp::Ordering::Less => Some(false),
        std::cmp::Ordering::Equal => None,
    }
}

/// The share of yes among the verdicts given (`None`: no verdict given).
pub fn share(verdicts: &[Option<bool>]) -> Option<f64> {
    let given: Vec<bool> = verdicts.iter().flatten().copied().collect();
    (!given.is_empty()).then(|| given.iter().filter(|&&v| v).count() as f64 / given.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("g{i}")).collect()
    }

    fn options() -> Vec<String> {
        [
            "to the airport",
            "to his cousin's party",
            "to a shift",
            "to the coast",
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn a_verdict_is_a_boolean_with_a_reason_and_prose_is_refused() {
        let goal_keys = keys(2);
        let good = json!({"goals": {
            "g1": {"reason": "Ben agreed to pay in turn 4.", "achieved": true},
            "g2": {"reason": "Ada stayed angry.", "achieved": false}
        }});
        let answered = check(&good, &goal_keys, &[]).unwrap();
        assert!(answered.goals["g1"].achieved);
        assert!(!answered.goals["g2"].achieved);
        for (answer, why) in [
            (
                json!({"goals": {"g1": {"reason": "Hm.", "achieved": "Yes, but no"},
                                  "g2": {"reason": "x", "achieved": false}}}),
                "goal g1: \"achieved\" must be true or false",
            ),
            (
                json!({"goals": {"g1": {"reason": "Hm.", "achieved": "yes"},
                                  "g2": {"reason": "x", "achieved": false}}}),
                "must be true or false",
            ),
            (
                json!({"goals": {"g1": {"reason": " ", "achieved": true},
                                  "g2": {"reason": "x", "achieved": false}}}),
                "goal g1: \"reason\"",
            ),
            (
                json!({"goals": {"g1": {"reason": "x", "achieved": true}}}),
                "goal g2 is not answered",
            ),
            (
                json!({"goals": {"g1": {"reason": "x", "achieved": true},
                                  "g2": {"reason": "x", "achieved": true},
                                  "g3": {"reason": "x", "achieved": true}}}),
                "goal \"g3\" is not one of those asked about",
            ),
            (json!("Yes, but no"), "must be a JSON object"),
        ] {
            let problem = check(&answer, &goal_keys, &[]).unwrap_err().message();
            assert!(problem.contains(why), "{answer}: {problem}");
        }
    }

    #[test]
    fn a_choice_is_a_letter_or_an_options_whole_text() {
        let options = options();
        for (given, letter) in [
            ("B", 'B'),
            ("b", 'B'),
            (" (C) ", 'C'),
            ("D.", 'D'),
            ("to his cousin's party", 'B'),
            ("To the coast.", 'D'),
        ] {
            assert_eq!(
                choice_of(&json!(given), &options).unwrap(),
                letter,
                "{given}"
            );
        }
        for given in [
            json!("B, to his cousin's party"),
            json!("E"),
            json!("the party"),
            json!(""),
            json!(2),
        ] {
            assert!(choice_of(&given, &options).is_err(), "{given}");
        }
        let asked = [Asked {
            key: "q1",
            options: &options,
        }];
        let answer = json!({"goals": {"g1": {"reason": "x", "achieved": true}},
                            "questions": {"q1": "to the airport"}});
        assert_eq!(check(&answer, &keys(1), &asked).unwrap().choices["q1"], 'A');
        let unanswered = json!({"goals": {"g1": {"reason": "x", "achieved": true}},
                                "questions": {}});
        let problem = check(&unanswered, &keys(1), &asked).unwrap_err();
        assert_eq!(problem.kinds(), ["question_unanswered"]);
        let problem = problem.message();
        assert!(problem.contains("question q1 is not answered"), "{problem}");
        let stray = json!({"goals": {"g1": {"reason": "x", "achieved": true}},
                           "questions": {"q1": "A"}});
        assert!(
            check(&stray, &keys(1), &[])
                .unwrap_err()
                .message()
                .contains("not asked for")
        );
    }

    #[test]
    fn the_panels_majority_needs_a_quorum_and_a_tie_is_no_verdict() {
        assert_eq!(majority(&[Some(true), Some(true), Some(false)]), Some(true));
        assert_eq!(majority(&[Some(false), None, Some(false)]), Some(false));
        assert_eq!(majority(&[Some(true), None, None]), None);
        assert_eq!(majority(&[Some(true), Some(false)]), None);
        assert_eq!(majority(&[Some(true)]), Some(true));
        assert_eq!(majority(&[None]), None);
        assert_eq!(share(&[Some(true), None, Some(false)]), Some(0.5));
        assert_eq!(share(&[None, None]), None);
    }

    #[test]
    fn the_decoder_schema_fixes_every_key_and_the_letters() {
        let options = options();
        let asked = [Asked {
            key: "q1",
            options: &options,
        }];
        let schema = schema(&keys(2), &asked, true);
        assert_eq!(schema["required"], json!(["goals", "questions"]));
        assert_eq!(
            schema["properties"]["goals"]["required"],
            json!(["g1", "g2"])
        );
        assert_eq!(
            schema["properties"]["questions"]["properties"]["q1"]["enum"],
            json!(["A", "B", "C", "D"])
        );
        let portable = super::schema(&keys(1), &[], false);
        assert!(portable["properties"].get("questions").is_none());
    }
}

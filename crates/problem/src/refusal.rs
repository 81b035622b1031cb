//! Why an answer of a call was not used, as the store and the LLM cache keep it.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Problem, Rejection};

/// One answer that could not be used: what the model was told about it and each problem that
/// told it (an answer that is not JSON, or is cut off, is one problem of the answer as a
/// whole). A record keeps one per answer before the accepted one, in order; the scorecard and
/// the card count them by [`Problem::kind`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Refusal {
    /// As sent back to the model on the re-ask.
    pub message: String,
    pub problems: Vec<Problem>,
}

impl Refusal {
    /// The refusal of an answer a validator rejected, told to the model as `message`.
    pub fn of(rejection: &Rejection, message: String) -> Refusal {
        Refusal {
            message,
            problems: rejection.problems().cloned().collect(),
        }
    }

    /// The refusal of an answer no field can be blamed for (it is not JSON): one problem.
    pub fn whole(kind: &str, message: String) -> Refusal {
        Refusal {
            problems: vec![Problem {
                role: None,
                field: None,
                kind: kind.to_string(),
                message: message.clone(),
            }],
            message,
        }
    }

    /// The refusal with every text passed through `edit` (a redaction); kinds are left as they
    /// are, since they hold no text of an answer.
    pub fn map_text(mut self, edit: impl Fn(String) -> String) -> Refusal {
        self.message = edit(self.message);
        for problem in &mut self.problems {
            problem.message = edit(std::mem::take(&mut problem.message));
        }
        self
    }

    /// A refusal as a store or cache of an earlier viss kept it, as its text alone. Its
    /// problems are read back from the text ("Fix these problems in your answer:\n- a\n- b"),
    /// each with a kind made from its words; no role or field can be told from them.
    pub fn from_text(message: String) -> Refusal {
        let problems = problem_lines(&message)
            .into_iter()
            .map(|line| Problem {
                role: None,
                field: None,
                kind: kind_of_words(line),
                message: line.to_string(),
            })
            .collect();
        Refusal { message, problems }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

/// Reading a refusal kept as JSON by this viss or an earlier one, which kept its text alone
/// (read back by [`Refusal::from_text`]): the LLM cache's paid answers stay usable, and a
/// record's history reads the same whichever viss wrote it. For `deserialize_with`.
pub mod stored {
    use serde::{Deserialize, Deserializer};

    use super::Refusal;

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Typed(Refusal),
        Text(String),
    }

    impl From<Stored> for Refusal {
        fn from(stored: Stored) -> Refusal {
            match stored {
                Stored::Typed(refusal) => refusal,
                Stored::Text(text) => Refusal::from_text(text),
            }
        }
    }

    pub fn one<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Refusal, D::Error> {
        Stored::deserialize(deserializer).map(Refusal::from)
    }

    pub fn many<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Refusal>, D::Error> {
        let stored = Vec::<Stored>::deserialize(deserializer)?;
        Ok(stored.into_iter().map(Refusal::from).collect())
    }
}

/// The problems a message of [`Rejection::message`]'s form names, one each; a message in
/// another form is one problem, its first line.
fn problem_lines(message: &str) -> Vec<&str> {
    const ONE: &str = "Fix this in your answer: ";
    const MANY: &str = "Fix these problems in your answer:";
    if let Some(at) = message.find(ONE) {
        let rest = &message[at + ONE.len()..];
        vec![rest.lines().next().unwrap_or(rest)]
    } else if let Some(at) = message.find(MANY) {
        message[at + MANY.len()..]
            .lines()
            .filter_map(|line| line.trim().strip_prefix("- "))
            .collect()
    } else {
        vec![message.lines().next().unwrap_or(message)]
    }
}

/// A problem's words without what is particular to one answer: the advice after the first
/// `;`, a leading `Name: `, quoted and parenthesised words (as `...`) and capitalised names (as
/// `X`), so that the same problem of two participants counts as one.
fn kind_of_words(problem: &str) -> String {
    let head = problem.split("; ").next().unwrap_or(problem).trim();
    let head = match head.split_once(": ") {
        Some((who, rest))
            if who.starts_with(char::is_uppercase)
                && !who.contains('_')
                && who.split_whitespace().count() <= 3 =>
        {
            rest
        }
        _ => head,
    };
    let mut kind = String::new();
    let mut chars = head.chars().peekable();
    let mut word_start = true;
    while let Some(c) = chars.next() {
        match c {
            '"' | '\u{201c}' => {
                for d in chars.by_ref() {
                    if d == '"' || d == '\u{201d}' {
                        break;
                    }
                }
                kind.push_str("...");
                word_start = false;
            }
            '(' => {
                for d in chars.by_ref() {
                    if d == ')' {
                        break;
                    }
                }
                kind.push_str("(...)");
                word_start = false;
            }
            c if word_start && c.is_uppercase() => {
                let mut word = String::from(c);
                while let Some(d) = chars.next_if(|d| d.is_alphanumeric() || *d == '-') {
                    word.push(d);
                }
                // A name stands for anyone; an acronym ("JSON") is part of the problem.
                let acronym = word.len() > 1 && !word.chars().any(char::is_lowercase);
                kind.push_str(if acronym { &word } else { "X" });
                word_start = false;
            }
            c => {
                word_start = !(c.is_alphanumeric() || c == '_' || c == '\'');
                kind.push(c);
            }
        }
    }
    kind
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Problems;

    #[test]
    fn a_refusal_keeps_each_problem_of_its_rejection_with_role_field_and_kind() {
        let mut problems = Problems::new();
        problems.unusable(
            "missing_field",
            Some("Noor"),
            "belief",
            "Noor: no belief".into(),
        );
        problems.gate("copies_prompt", None, "description", "copied".into());
        let rejection = problems.finish().unwrap_err();
        let refusal = Refusal::of(&rejection, format!("the JSON: {}", rejection.message()));
        assert_eq!(
            refusal.message,
            format!("the JSON: {}", rejection.message())
        );
        let kinds: Vec<&str> = refusal.problems.iter().map(|p| p.kind.as_str()).collect();
        assert_eq!(kinds, ["missing_field", "copies_prompt"]);
        assert_eq!(refusal.problems[0].role.as_deref(), Some("Noor"));
        assert_eq!(refusal.problems[0].field.as_deref(), Some("belief"));
    }

    #[test]
    fn an_earlier_stores_text_is_read_back_one_problem_per_line_kinds_without_names() {
        let many = Refusal::from_text(
            "the JSON does not meet the requirements: Fix these problems in your answer:\n- \
             Noor: interaction_outcome_task has Noor act on Noor; name another participant\n- \
             description describes looks or clothing (jacket, tall); leave appearance out"
                .to_string(),
        );
        let kinds: Vec<&str> = many.problems.iter().map(|p| p.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "interaction_outcome_task has X act on X",
                "description describes looks or clothing (...)"
            ]
        );
        let one = Refusal::from_text(
            "Fix this in your answer: Mila: expression_task copies \"what they feel\"".into(),
        );
        assert_eq!(one.problems[0].kind, "expression_task copies ...");
        let other = Refusal::from_text("the answer is not JSON: expected value\nat line 1".into());
        assert_eq!(
            other.problems[0].kind,
            "the answer is not JSON: expected value"
        );
    }

    #[test]
    fn map_text_edits_every_message_and_no_kind() {
        let refusal = Refusal::whole("not_json", "key sk-1 leaked".into())
            .map_text(|text| text.replace("sk-1", "[redacted]"));
        assert_eq!(refusal.message, "key [redacted] leaked");
        assert_eq!(refusal.problems[0].message, "key [redacted] leaked");
        assert_eq!(refusal.problems[0].kind, "not_json");
    }
}

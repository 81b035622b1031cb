//! What is wrong with an LLM's answer, as values rather than lines to parse.
//!
//! A [`Problem`] names the role and field at fault, its kind (the problem without what is
//! particular to one answer, for counting) and the message the model is shown. A validator
//! collects an answer's problems in [`Problems`]; those that leave it unusable reject it, and
//! the [`Rejection`] is what a re-ask sends back, every problem at once. An answer that only
//! fails quality gates can be kept, flagged ([`Checked`]), so a build goes on and a person can
//! review it.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod refusal;
pub use refusal::{Refusal, stored};

// No `skip_serializing_if`: store records are postcard, which is not self-describing.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub struct Problem {
    /// The participant whose entry is at fault; `None` for the scene's own fields.
    #[serde(default)]
    pub role: Option<String>,
    /// The field at fault, where one is named.
    #[serde(default)]
    pub field: Option<String>,
    /// The problem without the names, quotes and numbers of one answer ("X: belief states X's
    /// feeling ..."), so that the same problem of two answers counts once.
    pub kind: String,
    pub message: String,
}

/// One problem of an answer as found: the problem, whether it leaves the answer unusable, and,
/// for an entry of `roles` that is not a participant's (it does not parse), its position.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub problem: Problem,
    pub unusable: bool,
    pub entry: Option<usize>,
}

impl Found {
    /// Whether the problem is one of the scene's own fields: it names no role, no entry and
    /// not the list of roles.
    pub fn is_scene(&self) -> bool {
        self.problem.role.is_none()
            && self.entry.is_none()
            && self.problem.field.as_deref() != Some("roles")
    }

    /// Whether the problem is about the participant `name`, whose entry is at `position` of
    /// `roles`.
    pub fn is_about(&self, name: &str, position: usize) -> bool {
        self.problem.role.as_deref() == Some(name) || self.entry == Some(position)
    }
}

/// The problems found in one answer: those that leave it unusable (a role left out, a field
/// empty: [`Problems::unusable`]) and those of the quality gates ([`Problems::gate`]).
/// Both go back to the model on a re-ask, together; an answer that only fails gates after its
/// re-asks can still be kept, flagged ([`Checked`]). Besides them, what a person should look at
/// and the model is not asked about ([`Problems::review`]).
#[derive(Debug, Default)]
pub struct Problems {
    /// In the order found.
    found: Vec<Found>,
    reviews: Vec<Problem>,
}

/// Why an answer cannot be taken as it stands: every problem found in it, in the order found
/// (never none). Its [`Rejection::message`] is what a re-ask sends the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    found: Vec<Found>,
}

impl Rejection {
    /// A rejection for one problem of `who`'s `field` (`who` `None`: a field of the answer's
    /// own), as [`Problems::unusable`] records it.
    pub fn unusable(kind: &str, who: Option<&str>, field: &str, message: String) -> Rejection {
        let mut problems = Problems::new();
        problems.unusable(kind, who, field, message);
        Rejection {
            found: problems.found,
        }
    }

    /// A rejection for one problem of the answer as a whole, which no field can be blamed for.
    pub fn whole(kind: &str, message: String) -> Rejection {
        let mut problems = Problems::new();
        problems.unusable_whole(kind, message);
        Rejection {
            found: problems.found,
        }
    }

    /// The message of a re-ask naming every problem.
    pub fn message(&self) -> String {
        let messages: Vec<&str> = self
            .found
            .iter()
            .map(|found| found.problem.message.as_str())
            .collect();
        match messages.as_slice() {
            [one] => format!("Fix this in your answer: {one}"),
            _ => format!(
                "Fix these problems in your answer:\n- {}",
                messages.join("\n- ")
            ),
        }
    }

    pub fn found(&self) -> &[Found] {
        &self.found
    }

    pub fn problems(&self) -> impl Iterator<Item = &Problem> {
        self.found.iter().map(|found| &found.problem)
    }

    /// The kinds of the problems, in order: what a test asserts.
    pub fn kinds(&self) -> Vec<&str> {
        self.problems()
            .map(|problem| problem.kind.as_str())
            .collect()
    }

    /// The rejection cut down to the problems `keep` keeps; none kept: no rejection.
    pub fn keeping(self, keep: impl Fn(&Found) -> bool) -> Result<(), Rejection> {
        let found: Vec<Found> = self.found.into_iter().filter(|found| keep(found)).collect();
        Rejection::of(found)
    }

    fn of(found: Vec<Found>) -> Result<(), Rejection> {
        if found.is_empty() {
            Ok(())
        } else {
            Err(Rejection { found })
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

/// An answer that is usable, with the quality gates it fails (none: a clean answer) and what a
/// person should review in it ([`Problems::review`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Checked<T> {
    pub answer: T,
    pub gates: Vec<Problem>,
    pub reviews: Vec<Problem>,
}

impl<T> Checked<T> {
    /// A clean answer as it stands, or its gate problems as a rejection. What is for review
    /// does not keep an answer from being clean.
    pub fn clean(self) -> Result<T, Rejection> {
        self.passed().map(|checked| checked.answer)
    }

    /// [`Checked::clean`], keeping what is for review with the answer.
    pub fn passed(self) -> Result<Checked<T>, Rejection> {
        if self.gates.is_empty() {
            return Ok(self);
        }
        let found = self
            .gates
            .into_iter()
            .map(|problem| Found {
                problem,
                unusable: false,
                entry: None,
            })
            .collect();
        Err(Rejection { found })
    }

    /// The answer and everything it is flagged with: the gates it fails, then what is for
    /// review.
    pub fn into_flagged(self) -> (T, Vec<Problem>) {
        let mut flags = self.gates;
        flags.extend(self.reviews);
        (self.answer, flags)
    }

    /// An answer with no quality gate to fail: what a check with only usability problems
    /// makes of an answer it accepts.
    pub fn without_gates(answer: T) -> Checked<T> {
        Checked {
            answer,
            gates: Vec::new(),
            reviews: Vec::new(),
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Checked<U> {
        Checked {
            answer: f(self.answer),
            gates: self.gates,
            reviews: self.reviews,
        }
    }
}

impl Problems {
    pub fn new() -> Problems {
        Problems::default()
    }

    /// A quality gate's problem of `who`'s `field` (`who` `None`: a field of the scene's own):
    /// the answer is usable, but not as it should be. `kind` names the gate, the same for
    /// every answer; `message` is what the model is told.
    pub fn gate(&mut self, kind: &str, who: Option<&str>, field: &str, message: String) {
        self.push(kind, who, Some(field), message, false);
    }

    /// Something in `who`'s `field` for a person to look at, which the model is not re-asked
    /// about: a check the code cannot be sure of (a heuristic that may be wrong), whose answer
    /// a re-ask would push the model to change either way. The answer is kept, flagged with it.
    pub fn review(&mut self, kind: &str, who: Option<&str>, field: &str, message: String) {
        self.reviews.push(Problem {
            role: who.map(str::to_string),
            field: Some(field.to_string()),
            kind: kind.to_string(),
            message,
        });
    }

    /// A problem of `who`'s `field` that leaves the answer unusable: it can never be kept,
    /// flagged or not.
    pub fn unusable(&mut self, kind: &str, who: Option<&str>, field: &str, message: String) {
        self.push(kind, who, Some(field), message, true);
    }

    /// An unusable problem of the answer as a whole, which no field can be blamed for.
    pub fn unusable_whole(&mut self, kind: &str, message: String) {
        self.push(kind, None, None, message, true);
    }

    /// An unusable entry of `roles`, at `index`, that names no participant it could be pinned
    /// on (it does not parse).
    pub fn unusable_entry(&mut self, kind: &str, index: usize, message: String) {
        self.push(kind, None, Some("roles"), message, true).entry = Some(index);
    }

    fn push(
        &mut self,
        kind: &str,
        who: Option<&str>,
        field: Option<&str>,
        message: String,
        unusable: bool,
    ) -> &mut Found {
        self.found.push(Found {
            problem: Problem {
                role: who.map(str::to_string),
                field: field.map(str::to_string),
                kind: kind.to_string(),
                message,
            },
            unusable,
            entry: None,
        });
        self.found.last_mut().expect("just pushed")
    }

    /// Whether a problem found so far is about the participant `name`.
    pub fn any_about(&self, name: &str) -> bool {
        self.found
            .iter()
            .any(|found| found.problem.role.as_deref() == Some(name))
    }

    /// Every problem as one rejection (what is only for review aside).
    pub fn finish(self) -> Result<(), Rejection> {
        Rejection::of(self.found)
    }

    /// `answer` with its gate problems and what is for review, or, when any problem leaves it
    /// unusable, every problem as one rejection.
    pub fn finish_checked<T>(self, answer: T) -> Result<Checked<T>, Rejection> {
        if self.found.iter().any(|found| found.unusable) {
            return Err(Rejection { found: self.found });
        }
        Ok(Checked {
            answer,
            gates: self.found.into_iter().map(|found| found.problem).collect(),
            reviews: self.reviews,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_for_review_keeps_an_answer_clean_and_flags_it() {
        let mut problems = Problems::new();
        problems.review("unsure", Some("Noor"), "goals", "look at this".to_string());
        let checked = problems.finish_checked("answer").unwrap();
        let (answer, flags) = checked.clone().passed().unwrap().into_flagged();
        assert_eq!(answer, "answer");
        assert_eq!(flags.len(), 1);
        assert_eq!(
            (flags[0].role.as_deref(), flags[0].kind.as_str()),
            (Some("Noor"), "unsure")
        );
        assert_eq!(checked.clean(), Ok("answer"));

        // A gate still rejects the answer, and its re-ask names only the gate.
        let mut problems = Problems::new();
        problems.review("unsure", Some("Noor"), "goals", "look at this".to_string());
        problems.gate(
            "copy",
            Some("Noor"),
            "goals",
            "copies the dialogue".to_string(),
        );
        let checked = problems.finish_checked("answer").unwrap();
        let (_, flags) = checked.clone().into_flagged();
        assert_eq!(flags.len(), 2, "the gate, then what is for review");
        let rejection = checked.passed().unwrap_err();
        assert_eq!(rejection.kinds(), ["copy"]);
        assert!(!rejection.message().contains("look at this"));
    }
}

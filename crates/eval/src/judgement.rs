//! What a judge is asked of one run and what its answer must hold (AgentViSS, section 4 and
//! appendix J.3): two questions, each grading two of every character's four tasks, every
//! character once, every task with one of the three labels (and a reason where asked).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use viss_problem::{Problems, Rejection};

use crate::label::Label;

/// A role's four tasks.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    /// Expression: how the role puts things (spoken behaviour that carries out a strategy).
    Expression,
    /// Characteristic: how the role handles conflict, in what it says.
    Characteristic,
    /// Interaction regulation: noticing another's signal, reading it, adapting.
    InteractionRegulation,
    /// Interaction outcome: a result among several participants the role helped bring about.
    InteractionOutcome,
}

impl Task {
    pub const ALL: [Task; 4] = [
        Task::Expression,
        Task::Characteristic,
        Task::InteractionRegulation,
        Task::InteractionOutcome,
    ];

    /// The task's key in a judge's answer and in the tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Task::Expression => "expression",
            Task::Characteristic => "characteristic",
            Task::InteractionRegulation => "interaction_regulation",
            Task::InteractionOutcome => "interaction_outcome",
        }
    }

    /// The question that grades it.
    pub fn question(self) -> Question {
        match self {
            Task::Expression | Task::Characteristic => Question::RoleEnactment,
            Task::InteractionRegulation | Task::InteractionOutcome => {
                Question::InteractionManagement
            }
        }
    }
}

impl std::fmt::Display for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One of a judge's two questions about a run.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Question {
    /// Did each character enact its role: expression and characteristic tasks.
    RoleEnactment,
    /// Did each character manage the interaction: regulation and outcome tasks.
    InteractionManagement,
}

impl Question {
    pub const ALL: [Question; 2] = [Question::RoleEnactment, Question::InteractionManagement];

    pub fn as_str(self) -> &'static str {
        match self {
            Question::RoleEnactment => "role_enactment",
            Question::InteractionManagement => "interaction_management",
        }
    }

    /// The two tasks it grades, in the answer's order.
    pub fn tasks(self) -> [Task; 2] {
        match self {
            Question::RoleEnactment => [Task::Expression, Task::Characteristic],
            Question::InteractionManagement => {
                [Task::InteractionRegulation, Task::InteractionOutcome]
            }
        }
    }
}

impl std::fmt::Display for Question {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A judge's label for one task, with its reason when reasons are asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Grade {
    pub label: Label,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A judge's grades for one character: the question's two tasks, in [`Question::tasks`] order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CharacterGrades {
    pub name: String,
    pub grades: [Grade; 2],
}

/// The JSON schema of an answer to `question` about `characters` (in the run's cast order), as
/// an endpoint is given it: a list of graded characters, as many as there are.
pub fn schema(question: Question, characters: &[String], reasons: bool) -> Value {
    json!({
        "type": "object",
        "properties": {
            "characters": {
                "type": "array",
                "items": entry_schema(question, characters, reasons),
                "minItems": characters.len(),
                "maxItems": characters.len(),
            },
        },
        "required": ["characters"],
        "additionalProperties": false,
    })
}

/// [`schema`] for a constrained decoder (the embedded model): every character once, in order,
/// so the grammar cannot leave one out or grade one twice.
pub fn decoder_schema(question: Question, characters: &[String], reasons: bool) -> Value {
    let mut schema = schema(question, characters, reasons);
    let entries: Vec<Value> = characters
        .iter()
        .map(|name| entry_schema(question, std::slice::from_ref(name), reasons))
        .collect();
    schema["properties"]["characters"]["prefixItems"] = Value::from(entries);
    schema
}

/// One graded character, its name one of `names`.
fn entry_schema(question: Question, names: &[String], reasons: bool) -> Value {
    let mut grade = json!({
        "type": "object",
        "properties": {
            "label": {
                "type": "string",
                "enum": Label::ALL.map(Label::as_str),
            },
        },
        "required": ["label"],
        "additionalProperties": false,
    });
    if reasons {
        grade["properties"]["reason"] = json!({
            "type": "string",
            "minLength": 1,
            "description": "One sentence naming the turn that decided the label.",
        });
        grade["required"] = json!(["label", "reason"]);
    }
    let [first, second] = question.tasks().map(Task::as_str);
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "enum": names},
            first: grade,
            second: grade,
        },
        "required": ["name", first, second],
        "additionalProperties": false,
    })
}

/// Reads a judge's answer about `characters`: a `"characters"` list with one entry per
/// character, each named. `read` turns an entry into its parts, or records the problems with
/// them as the character's, worded `"{name}'s {part}: {problem}"`, and gives `None`; `verb` is
/// what the judge does to a character (`grade`, `rate`). Returns the parts in `characters`
/// order, or every problem found, in words the judge can act on when re-asked.
pub(crate) fn per_character<T>(
    value: &Value,
    characters: &[String],
    verb: &str,
    read: impl Fn(&str, &Value, &mut Problems) -> Option<T>,
) -> Result<Vec<T>, Rejection> {
    let Some(entries) = value.get("characters").and_then(Value::as_array) else {
        let message = "the answer must be an object whose \"characters\" is a list, one entry \
                       per character"
            .to_string();
        return Err(Rejection::whole("answer_shape", message));
    };
    let mut problems = Problems::new();
    let mut found: Vec<Option<T>> = characters.iter().map(|_| None).collect();
    for (position, entry) in entries.iter().enumerate() {
        let Some(name) = entry.get("name").and_then(Value::as_str) else {
            let message = format!("entry {} has no \"name\"", position + 1);
            problems.unusable("entry_shape", None, "characters", message);
            continue;
        };
        let Some(index) = characters.iter().position(|c| c == name.trim()) else {
            let message = format!(
                "{name:?} is not a character of this scene (the characters: {})",
                characters.join(", ")
            );
            problems.unusable("not_a_participant", None, "characters", message);
            continue;
        };
        if found[index].is_some() {
            let message = format!("{name} is {verb}d twice; {verb} each character once");
            problems.unusable("role_twice", Some(name), "characters", message);
            continue;
        }
        found[index] = read(&characters[index], entry, &mut problems);
    }
    let absent: Vec<&str> = characters
        .iter()
        .zip(&found)
        .filter(|(name, parts)| parts.is_none() && !problems.any_about(name))
        .map(|(name, _)| name.as_str())
        .collect();
    if !absent.is_empty() {
        let message = format!("missing: {}; {verb} every character", absent.join(", "));
        problems.unusable("role_missing", None, "characters", message);
    }
    problems
        .finish()
        .map(|()| found.into_iter().flatten().collect())
}

/// Checks a judge's answer to `question` about `characters`; returns each character's grades
/// in `characters` order, or every problem found, in words the judge can act on when re-asked.
pub fn check(
    value: &Value,
    question: Question,
    characters: &[String],
    reasons: bool,
) -> Result<Vec<CharacterGrades>, Rejection> {
    per_character(value, characters, "grade", |name, entry, problems| {
        let grades: Vec<Option<Grade>> = question
            .tasks()
            .into_iter()
            .map(|task| {
                grade_of(
                    entry.get(task.as_str()),
                    name,
                    task.as_str(),
                    reasons,
                    problems,
                )
            })
            .collect();
        let grades: Vec<Grade> = grades.into_iter().collect::<Option<_>>()?;
        Some(CharacterGrades {
            name: name.to_string(),
            grades: <[Grade; 2]>::try_from(grades).ok()?,
        })
    })
}

/// `name`'s grade on `task`, or `None` with its problem recorded.
fn grade_of(
    value: Option<&Value>,
    name: &str,
    task: &str,
    reasons: bool,
    problems: &mut Problems,
) -> Option<Grade> {
    let mut refuse = |kind: &str, problem: &str| {
        let message = format!("{name}'s {task}: {problem}");
        problems.unusable(kind, Some(name), task, message);
        None
    };
    let Some(value) = value else {
        return refuse("not_graded", "not graded");
    };
    let Some(written) = value.get("label").and_then(Value::as_str) else {
        return refuse("missing", "no \"label\"");
    };
    let Some(label) = Label::from_name(written) else {
        return refuse(
            "not_a_label",
            &format!(
                "the label {written:?} is not one of \"Achieved\", \"Partially Achieved\", \
                 \"Not Achieved\""
            ),
        );
    };
    let reason = value
        .get("reason")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|reason| !reason.is_empty())
        .map(str::to_string);
    if reasons && reason.is_none() {
        return refuse(
            "reason_missing",
            "no \"reason\": give one sentence naming the turn that decided it",
        );
    }
    Some(Grade {
        label,
        reason: if reasons { reason } else { None },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cast() -> Vec<String> {
        vec!["Noor".to_string(), "Theo".to_string()]
    }

    fn graded(name: &str, first: &str, second: &str) -> Value {
        json!({
            "name": name,
            "expression": {"label": first, "reason": "Turn 2."},
            "characteristic": {"label": second, "reason": "Turn 3."},
        })
    }

    #[test]
    fn an_answer_grading_everyone_reads_in_cast_order() {
        let answer = json!({"characters": [
            graded("Theo", "Not Achieved", "achieved"),
            graded("Noor", "Achieved", "Partially Achieved"),
        ]});
        let grades = check(&answer, Question::RoleEnactment, &cast(), true).unwrap();
        assert_eq!(grades[0].name, "Noor");
        assert_eq!(grades[0].grades[0].label, Label::Achieved);
        assert_eq!(grades[1].grades[1].label, Label::Achieved);
        assert_eq!(grades[1].grades[0].reason.as_deref(), Some("Turn 2."));
    }

    #[test]
    fn a_missing_extra_or_doubled_character_is_refused_with_its_name() {
        let missing = json!({"characters": [graded("Noor", "Achieved", "Achieved")]});
        let problem = check(&missing, Question::RoleEnactment, &cast(), true)
            .unwrap_err()
            .message();
        assert_eq!(
            problem,
            "Fix this in your answer: missing: Theo; grade every character"
        );
        let extra = json!({"characters": [
            graded("Noor", "Achieved", "Achieved"),
            graded("Theo", "Achieved", "Achieved"),
            graded("Bruno", "Achieved", "Achieved"),
        ]});
        let problem = check(&extra, Question::RoleEnactment, &cast(), true)
            .unwrap_err()
            .message();
        assert!(
            problem.contains("\"Bruno\" is not a character"),
            "{problem}"
        );
        let twice = json!({"characters": [
            graded("Noor", "Achieved", "Achieved"),
            graded("Noor", "Achieved", "Achieved"),
        ]});
        let problem = check(&twice, Question::RoleEnactment, &cast(), true)
            .unwrap_err()
            .message();
        assert!(problem.contains("Noor is graded twice"), "{problem}");
        assert!(problem.contains("missing: Theo"), "{problem}");
    }

    #[test]
    fn a_missing_task_an_unknown_label_or_a_missing_reason_is_refused() {
        let answer = json!({"characters": [
            {"name": "Noor", "expression": {"label": "Achieved", "reason": "Turn 1."}},
            graded("Theo", "Mostly", "Achieved"),
        ]});
        let problem = check(&answer, Question::RoleEnactment, &cast(), true)
            .unwrap_err()
            .message();
        assert!(
            problem.contains("Noor's characteristic: not graded"),
            "{problem}"
        );
        assert!(
            problem.contains("Theo's expression: the label \"Mostly\""),
            "{problem}"
        );
        assert!(!problem.contains("missing:"), "{problem}");
        let no_reason = json!({"characters": [
            {"name": "Noor", "expression": {"label": "Achieved"},
             "characteristic": {"label": "Achieved"}},
            graded("Theo", "Achieved", "Achieved"),
        ]});
        let problem = check(&no_reason, Question::RoleEnactment, &cast(), true)
            .unwrap_err()
            .message();
        assert!(
            problem.contains("\n- Noor's expression: no \"reason\""),
            "{problem}"
        );
        // Without reasons asked for, the same answer passes and any reason is dropped.
        let grades = check(&no_reason, Question::RoleEnactment, &cast(), false).unwrap();
        assert_eq!(grades[1].grades[0].reason, None);
    }

    #[test]
    fn the_interaction_question_grades_regulation_and_outcome() {
        let answer = json!({"characters": [
            {"name": "Noor", "interaction_regulation": {"label": "Achieved"},
             "interaction_outcome": {"label": "Not Achieved"}},
            {"name": "Theo", "interaction_regulation": {"label": "Not Achieved"},
             "interaction_outcome": {"label": "Partially Achieved"}},
        ]});
        let grades = check(&answer, Question::InteractionManagement, &cast(), false).unwrap();
        assert_eq!(grades[0].grades[1].label, Label::NotAchieved);
        let portable = schema(Question::InteractionManagement, &cast(), false);
        let names = &portable["properties"]["characters"]["items"]["properties"]["name"];
        assert_eq!(names["enum"], json!(["Noor", "Theo"]));
        let schema = decoder_schema(Question::InteractionManagement, &cast(), false);
        let entries = &schema["properties"]["characters"]["prefixItems"];
        assert_eq!(entries[1]["properties"]["name"]["enum"], json!(["Theo"]));
        assert_eq!(
            entries[0]["required"],
            json!(["name", "interaction_regulation", "interaction_outcome"])
        );
        assert_eq!(schema["properties"]["characters"]["maxItems"], 2);
    }
}

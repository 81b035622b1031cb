//! Step `annotate`: what kind of dialogue the scenario is, and who its participants are
//! (gender, age, occupation) as far as the dialogue tells.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::annotation::check::{
    Problems, deserialize_answer, match_roles, named_role, require_text,
};
use crate::annotation::context::ScenarioContext;
use crate::annotation::schema;
use crate::annotation::vocab::{DialogueType, Gender};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Annotation {
    pub dialogue_type: DialogueType,
    pub roles: Vec<RoleAnnotation>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleAnnotation {
    pub name: String,
    pub gender: Gender,
    /// A range ("25-30") or rough age ("30s", "teenager"), or "unknown".
    pub age: String,
    /// Or "unknown" when the dialogue gives no clue.
    pub occupation: String,
}

named_role!(RoleAnnotation);

pub type Answer = Annotation;

pub fn schema() -> Value {
    schema::object(
        "The dialogue type of the scene and what the dialogue reveals about each participant.",
        &[
            (
                "dialogue_type",
                schema::label::<DialogueType>("What the conversation is mainly for."),
            ),
            (
                "roles",
                schema::roles(
                    "One entry per participant.",
                    &[
                        (
                            "gender",
                            schema::label::<Gender>("unknown when the dialogue gives no clue."),
                        ),
                        (
                            "age",
                            schema::text(
                                "An age range like 25-30, a rough age like 30s, or unknown.",
                            ),
                        ),
                        (
                            "occupation",
                            schema::text(
                                "A short job title, or unknown when the dialogue gives no clue.",
                            ),
                        ),
                    ],
                ),
            ),
        ],
    )
}

/// Decades written as words, and the decade each starts.
pub const DECADE_WORDS: [(&str, u32); 8] = [
    ("twenties", 20),
    ("thirties", 30),
    ("forties", 40),
    ("fifties", 50),
    ("sixties", 60),
    ("seventies", 70),
    ("eighties", 80),
    ("nineties", 90),
];

/// Words that give a rough age without a number (besides [`DECADE_WORDS`]).
const AGE_WORDS: &[&str] = &[
    "unknown",
    "child",
    "kid",
    "teen",
    "teenager",
    "teenage",
    "adolescent",
    "young",
    "adult",
    "middle-aged",
    "middle aged",
    "elderly",
    "old",
    "senior",
    "late",
    "early",
    "mid",
];

/// Longer than this and an "age" or "occupation" is a sentence, not a label.
const MAX_LABEL_CHARS: usize = 60;

pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<Annotation, String> {
    let answer: Annotation = deserialize_answer::<Annotation, RoleAnnotation>(value)?;
    let mut problems = Problems::new();
    let roles = match_roles(answer.roles, ctx, &mut problems);
    for role in &roles {
        let who = Some(role.name.as_str());
        if require_text(&mut problems, who, "age", &role.age) && !is_rough_age(&role.age) {
            problems.push(format!(
                "{}: age \"{}\" is not an age; write a range like 25-30, a decade like 30s, a \
                 rough age like teenager, or unknown",
                role.name, role.age
            ));
        }
        if require_text(&mut problems, who, "occupation", &role.occupation)
            && role.occupation.chars().count() > MAX_LABEL_CHARS
        {
            problems.push(format!(
                "{}: occupation is too long; write a short job title (a few words) or unknown",
                role.name
            ));
        }
    }
    problems.finish()?;
    Ok(Annotation {
        dialogue_type: answer.dialogue_type,
        roles,
    })
}

fn is_rough_age(age: &str) -> bool {
    let age = age.trim().to_lowercase();
    if age.chars().count() > MAX_LABEL_CHARS {
        return false;
    }
    // "25s" reads as no decade (the scorecard, like a reader, cannot place it).
    let odd_decade = age
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter_map(|word| word.strip_suffix('s'))
        .filter_map(|digits| digits.parse::<u32>().ok())
        .any(|number| !number.is_multiple_of(10));
    !odd_decade
        && (age.chars().any(|c| c.is_ascii_digit())
            || AGE_WORDS.iter().any(|word| age.contains(word))
            || DECADE_WORDS.iter().any(|(word, _)| age.contains(word)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::annotation::schema::strictness_problems;
    use crate::stages::fixture;

    fn good() -> Value {
        json!({
            "dialogue_type": "persuasion",
            "roles": [
                {"name": "rachel", "gender": "female", "age": "20s", "occupation": "waitress"},
                {"name": "Ross", "gender": "male", "age": "25-30", "occupation": "unknown"},
            ]
        })
    }

    #[test]
    fn decades_in_words_are_ages() {
        assert!(is_rough_age("fifties"));
        assert!(is_rough_age("in his thirties"));
        assert!(!is_rough_age("he seems nice"));
        assert!(is_rough_age("late 20s") && is_rough_age("25-30"));
        assert!(!is_rough_age("25s"), "a decade starts at a multiple of ten");
    }

    #[test]
    fn schema_is_strict() {
        assert_eq!(strictness_problems(&schema()), Vec::<String>::new());
    }

    #[test]
    fn accepts_a_good_answer_and_normalises_names_and_order() {
        let answer = validate(&good(), &fixture::context()).unwrap();
        assert_eq!(answer.dialogue_type, DialogueType::Persuasion);
        let names: Vec<&str> = answer.roles.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["Ross", "Rachel"]);
    }

    #[test]
    fn rejects_unknown_labels_naming_the_role() {
        let mut value = good();
        value["roles"][1]["gender"] = json!("man");
        let error = validate(&value, &fixture::context()).unwrap_err();
        assert!(
            error.contains("roles[1] (Ross)") && error.contains("man"),
            "{error}"
        );
        let mut value = good();
        value["dialogue_type"] = json!("argument");
        let error = validate(&value, &fixture::context()).unwrap_err();
        assert!(error.contains("argument"), "{error}");
    }

    #[test]
    fn rejects_wrong_participants() {
        let mut value = good();
        value["roles"][0]["name"] = json!("Monica");
        let error = validate(&value, &fixture::context()).unwrap_err();
        assert!(
            error.contains("\"Monica\" is not a participant")
                && error.contains("no entry for Rachel"),
            "{error}"
        );
        let mut value = good();
        value["roles"][0]["name"] = json!("Ross");
        let error = validate(&value, &fixture::context()).unwrap_err();
        assert!(error.contains("Ross has more than one entry"), "{error}");
    }

    #[test]
    fn rejects_empty_and_malformed_fields() {
        let mut value = good();
        value["roles"][0]["occupation"] = json!(" ");
        value["roles"][1]["age"] = json!("he seems to be");
        let error = validate(&value, &fixture::context()).unwrap_err();
        assert!(error.contains("Rachel: occupation is empty"), "{error}");
        assert!(
            error.contains("Ross: age \"he seems to be\" is not an age"),
            "{error}"
        );
        let mut value = good();
        value["extra"] = json!(1);
        assert!(
            validate(&value, &fixture::context())
                .unwrap_err()
                .contains("unknown field `extra`")
        );
    }
}

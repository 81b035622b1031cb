//! Step `annotate`: what kind of dialogue the scenario is, and who its participants are
//! (gender, age, occupation) as far as the dialogue tells.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::annotation::check::{
    Checked, Problems, Rejection, contains_word, deserialize_answer, match_roles, mentions,
    named_role, require_text, sentences,
};
use crate::annotation::context::{ContextLineKind, ScenarioContext};
use crate::annotation::schema;
use crate::annotation::vocab::{DialogueType, Gender};
use crate::stages::llm_step::SceneFields;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Annotation {
    pub dialogue_type: DialogueType,
    pub roles: Vec<RoleAnnotation>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
const DECADE_WORDS: [(&str, u32); 8] = [
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

/// Words that give away a person's gender to a reader of a sentence that names them.
#[rustfmt::skip]
const GENDER_CUES: &[&str] = &[
    "he", "him", "his", "himself", "she", "her", "hers", "herself", "man", "woman", "boy", "girl",
    "brother", "sister", "mother", "father", "son", "daughter", "husband", "wife", "boyfriend",
    "girlfriend", "uncle", "aunt", "nephew", "niece", "grandfather", "grandmother", "mr", "mrs",
    "ms", "miss", "lady", "gentleman",
];

/// Words that give a person's age to a reader of a sentence that names them, besides the
/// [`DECADE_WORDS`] ("in his thirties") and a number of years ("a 40-year-old", "12 years old").
const AGE_CUES: &[&str] = &[
    "teenager",
    "teenage",
    "toddler",
    "baby",
    "middle-aged",
    "elderly",
];

/// The sentences of the scene's own description of it: the heading and the action lines, not
/// what characters say of each other.
fn described_sentences(ctx: &ScenarioContext) -> impl Iterator<Item = String> + '_ {
    ctx.heading
        .iter()
        .map(String::as_str)
        .chain(
            ctx.lines
                .iter()
                .filter(|line| line.kind == ContextLineKind::Action)
                .map(|line| line.text.as_str()),
        )
        .flat_map(sentences)
}

/// The first of the [`described_sentences`] that names `name` and holds one of `cue`'s words.
fn cue_sentence(ctx: &ScenarioContext, name: &str, cue: impl Fn(&str) -> bool) -> Option<String> {
    described_sentences(ctx).find(|sentence| mentions(sentence, name) && cue(sentence))
}

fn says_an_age(sentence: &str) -> bool {
    let lower = sentence.to_lowercase();
    DECADE_WORDS
        .iter()
        .any(|(word, _)| contains_word(&lower, word))
        || AGE_CUES.iter().any(|word| contains_word(&lower, word))
        || lower.contains("year-old")
        || lower.contains("years old")
}

fn says_a_gender(sentence: &str) -> bool {
    GENDER_CUES.iter().any(|word| contains_word(sentence, word))
}

/// Reports "unknown" where the scene says: the paper's annotators read gender and age from the
/// script, and a scene heading that writes "a nurse in his thirties" leaves nothing unknown.
fn forbid_unknown_where_the_scene_says(
    problems: &mut Problems,
    role: &RoleAnnotation,
    ctx: &ScenarioContext,
) {
    let name = &role.name;
    if role.gender == Gender::Unknown
        && let Some(sentence) = cue_sentence(ctx, name, says_a_gender)
    {
        problems.gate(
            "unknown_gender_where_stated",
            Some(name.as_str()),
            "gender",
            format!(
                "{name}: gender is unknown, but the scene says \"{sentence}\"; give the gender it \
             shows for {name}"
            ),
        );
    }
    if role.age.trim().eq_ignore_ascii_case("unknown")
        && let Some(sentence) = cue_sentence(ctx, name, says_an_age)
    {
        problems.gate(
            "unknown_age_where_stated",
            Some(name.as_str()),
            "age",
            format!(
                "{name}: age is unknown, but the scene says \"{sentence}\"; give the age it shows \
             for {name}"
            ),
        );
    }
}

/// The gender the scene's own description gives `name` in an apposition: the name followed by
/// a comma, and before the next participant's name or the clause's end, "in his/her" and a
/// decade word ("Noor, the nurse in his thirties, ...") or "a man"/"a woman" ("Bruno, the
/// rental clerk, a man in his fifties"). Only these forms: a bare pronoun after a name may be
/// someone else's ("Ross, angry, hands her the phone"). With the sentence that says it.
fn stated_gender(ctx: &ScenarioContext, name: &str) -> Option<(Gender, String)> {
    gender_in_apposition(described_sentences(ctx), &ctx.participants, name)
}

/// [`stated_gender`] in any `sentences` about `participants`: what the scripted mock model
/// reads off a prompt, as the gate reads the scene.
pub fn gender_in_apposition(
    sentences: impl IntoIterator<Item = String>,
    participants: &[String],
    name: &str,
) -> Option<(Gender, String)> {
    let other_names: Vec<String> = participants
        .iter()
        .filter(|p| p.as_str() != name)
        .map(|p| p.to_lowercase())
        .collect();
    let name = name.to_lowercase();
    for sentence in sentences {
        let lower = sentence.to_lowercase();
        for (at, _) in lower.match_indices(&name) {
            let before_ok = lower[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !c.is_alphanumeric());
            let Some(after) = lower[at + name.len()..].strip_prefix(',') else {
                continue;
            };
            if !before_ok {
                continue;
            }
            let end = other_names
                .iter()
                .filter_map(|other| after.find(other.as_str()))
                .chain(after.find(';'))
                .min()
                .unwrap_or(after.len());
            let window: Vec<&str> = after[..end]
                .split(|c: char| !c.is_alphanumeric() && c != '-')
                .filter(|w| !w.is_empty())
                .collect();
            let said = window.windows(3).find_map(|w| {
                let decade = DECADE_WORDS.iter().any(|(word, _)| *word == w[2]);
                match (w[0], w[1]) {
                    ("in", "his") if decade => Some(Gender::Male),
                    ("in", "her") if decade => Some(Gender::Female),
                    _ => None,
                }
            });
            let said = said.or_else(|| {
                window.windows(2).find_map(|w| match (w[0], w[1]) {
                    ("a" | "the", "man") => Some(Gender::Male),
                    ("a" | "the", "woman") => Some(Gender::Female),
                    _ => None,
                })
            });
            if let Some(gender) = said {
                return Some((gender, sentence.to_string()));
            }
        }
    }
    None
}

/// Narrows a role's gender for the embedded model's decoder to the one the scene's own
/// description states ([`stated_gender`]), where it does: told the scene's sentence through
/// five re-asks, the 1.5B model still wrote "female" for the Noor of "Noor, the nurse in his
/// thirties" (the name's pull beat the heading). Endpoints get the whole list and the
/// validator ([`forbid_gender_against_the_scene`]).
pub fn narrow_role_for_decoder(
    role: &mut Value,
    name: &str,
    _others: &[String],
    context: &ScenarioContext,
    _: Option<&SceneFields>,
) {
    if let Some((gender, _)) = stated_gender(context, name)
        && let Some(field) = role.pointer_mut("/properties/gender")
    {
        *field = schema::labels_of("As the scene states it.", &[gender]);
    }
}

/// Reports a gender the scene's own description contradicts ([`stated_gender`]): the 1.5B
/// model called Noor "female" in the one scene whose heading says "the nurse in his thirties".
fn forbid_gender_against_the_scene(
    problems: &mut Problems,
    role: &RoleAnnotation,
    ctx: &ScenarioContext,
) {
    if role.gender == Gender::Unknown {
        return;
    }
    if let Some((stated, sentence)) = stated_gender(ctx, &role.name)
        && stated != role.gender
    {
        problems.gate("gender_against_scene", Some(role.name.as_str()), "gender", format!(
            "{}: gender is {}, but the scene says \"{sentence}\"; give the gender it shows for {}",
            role.name,
            role.gender.as_str(),
            role.name
        ));
    }
}

/// Longer than this and an "age" or "occupation" is a sentence, not a label.
const MAX_LABEL_CHARS: usize = 60;

/// The answer, usable or not: an error names what leaves it unusable (with every other
/// problem, for the re-ask); a usable answer carries the quality gates it fails.
pub fn check(value: &Value, ctx: &ScenarioContext) -> Result<Checked<Annotation>, Rejection> {
    let answer: Annotation = deserialize_answer::<Annotation, RoleAnnotation>(value)?;
    let mut problems = Problems::new();
    let roles = match_roles(answer.roles, ctx, &mut problems);
    for role in &roles {
        let who = Some(role.name.as_str());
        if require_text(&mut problems, who, "age", &role.age) && !is_rough_age(&role.age) {
            problems.gate(
                "not_an_age",
                who,
                "age",
                format!(
                    "{}: age \"{}\" is not an age; write a range like 25-30, a decade like 30s, a \
                 rough age like teenager, or unknown",
                    role.name, role.age
                ),
            );
        }
        forbid_unknown_where_the_scene_says(&mut problems, role, ctx);
        forbid_gender_against_the_scene(&mut problems, role, ctx);
        if require_text(&mut problems, who, "occupation", &role.occupation)
            && role.occupation.chars().count() > MAX_LABEL_CHARS
        {
            problems.gate(
                "occupation_too_long",
                who,
                "occupation",
                format!(
                    "{}: occupation is too long; write a short job title (a few words) or unknown",
                    role.name
                ),
            );
        }
    }
    problems.finish_checked(Annotation {
        dialogue_type: answer.dialogue_type,
        roles,
    })
}

/// [`check`] for a clean answer: any problem is an error.
pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<Annotation, Rejection> {
    check(value, ctx).and_then(Checked::clean)
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
            || age_range(&age).is_some())
}

/// An age as a range of years, `None` for "unknown" or an age that says no number: "30s" and
/// "thirties" are 30 to 39, "late 30s" 36 to 39, "25-30" 25 to 30, "teenager" 13 to 19. The one
/// reading of an age: the validator, the episode consistency check and the scorecard use it.
pub fn age_range(age: &str) -> Option<(u32, u32)> {
    let age = age.trim().to_lowercase();
    let numbers: Vec<u32> = age
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let decade = match numbers.as_slice() {
        [n] if age.contains(&format!("{n}s")) && n % 10 == 0 => Some(*n),
        [] => DECADE_WORDS
            .iter()
            .find(|(word, _)| age.contains(word))
            .map(|(_, decade)| *decade),
        _ => None,
    };
    if let Some(n) = decade {
        return Some(if age.contains("early") {
            (n, n + 3)
        } else if age.contains("mid") {
            (n + 3, n + 6)
        } else if age.contains("late") {
            (n + 6, n + 9)
        } else {
            (n, n + 9)
        });
    }
    match numbers.as_slice() {
        [n] => Some((*n, *n)),
        [low, high, ..] => Some((*low.min(high), *low.max(high))),
        [] => {
            // The first word that gives a range, most specific first.
            const WORDS: &[(&str, (u32, u32))] = &[
                ("young adult", (18, 29)),
                ("middle", (40, 60)),
                ("teen", (13, 19)),
                ("adolescent", (13, 19)),
                ("child", (0, 12)),
                ("kid", (0, 12)),
                ("elderly", (60, 120)),
                ("senior", (60, 120)),
                ("old", (60, 120)),
                ("young", (18, 35)),
                ("adult", (18, 120)),
            ];
            WORDS
                .iter()
                .find(|(word, _)| age.contains(word))
                .map(|(_, range)| *range)
        }
    }
}

/// Where the annotations of one character in the scenarios of an episode contradict each other:
/// two genders (neither unknown), two ages whose ranges do not overlap ([`age_range`]), or two
/// occupations (neither unknown) that share no content word. `annotations` are the episode's
/// scenarios' annotations with their scenario ids; a character is a participant name, which is
/// the script's speaker name in every scene. Each problem names the character, the field and
/// the scenarios that disagree.
pub fn episode_inconsistencies(annotations: &[(&str, &Annotation)]) -> Vec<String> {
    use std::collections::{BTreeMap, HashSet};

    use crate::annotation::gates::content_words;
    let mut by_character: BTreeMap<&str, Vec<(&str, &RoleAnnotation)>> = BTreeMap::new();
    for (scenario, annotation) in annotations {
        for role in &annotation.roles {
            by_character
                .entry(role.name.as_str())
                .or_default()
                .push((scenario, role));
        }
    }
    let no_names = HashSet::new();
    let mut problems = Vec::new();
    for (character, seen) in by_character {
        let mut first_contradiction =
            |field: &str,
             differ: &dyn Fn(&RoleAnnotation, &RoleAnnotation) -> bool,
             show: &dyn Fn(&RoleAnnotation) -> String| {
                for (index, (scenario, role)) in seen.iter().enumerate() {
                    if let Some((other_scenario, other)) =
                        seen[..index].iter().find(|(_, other)| differ(other, role))
                    {
                        problems.push(format!(
                            "{character}: {field} is {} in {other_scenario} but {} in {scenario}; \
                             a character's {field} is the same in every scene of an episode \
                             unless the script says otherwise",
                            show(other),
                            show(role)
                        ));
                        return;
                    }
                }
            };
        first_contradiction(
            "gender",
            &|a, b| a.gender != b.gender && ![a.gender, b.gender].contains(&Gender::Unknown),
            &|r| format!("\"{}\"", r.gender.as_str()),
        );
        first_contradiction(
            "age",
            &|a, b| match (age_range(&a.age), age_range(&b.age)) {
                (Some((a_low, a_high)), Some((b_low, b_high))) => a_high < b_low || b_high < a_low,
                _ => false,
            },
            &|r| format!("\"{}\"", r.age),
        );
        let known = |occupation: &str| !occupation.trim().eq_ignore_ascii_case("unknown");
        first_contradiction(
            "occupation",
            &|a, b| {
                known(&a.occupation)
                    && known(&b.occupation)
                    && content_words(&a.occupation, &no_names)
                        .is_disjoint(&content_words(&b.occupation, &no_names))
            },
            &|r| format!("\"{}\"", r.occupation),
        );
    }
    problems
}

/// An answer the checks keep clean for a plain scene between `scene.names` (see
/// [`crate::stages::descriptor::StepDescriptor::example`]).
pub fn example(scene: &crate::stages::descriptor::Example<'_>) -> Value {
    json!({
        "dialogue_type": "persuasion",
        "roles": scene.roles(&|name, _| json!({
            "name": name, "gender": (scene.gender)(name), "age": "30s", "occupation": "mover"
        })),
    })
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
    fn unknown_is_rejected_where_the_scene_says_and_kept_where_it_does_not() {
        let mut value = good();
        value["roles"][1]["gender"] = json!("unknown");
        value["roles"][1]["age"] = json!("unknown");
        // The fixture's scene says nothing of Ross's gender or age.
        validate(&value, &fixture::context()).unwrap();
        let mut ctx = fixture::context();
        ctx.lines.insert(
            0,
            crate::annotation::context::ContextLine {
                kind: ContextLineKind::Action,
                speaker: None,
                text: "The coffee house. Ross, a palaeontologist in his thirties, waits. Rachel \
                       is 25 years old."
                    .to_string(),
                directions: Vec::new(),
            },
        );
        let error = validate(&value, &ctx).unwrap_err().message();
        assert!(
            error.contains(
                "Ross: gender is unknown, but the scene says \"Ross, a palaeontologist in his \
                 thirties, waits.\"; give the gender it shows for Ross"
            ),
            "{error}"
        );
        assert!(
            error.contains("Ross: age is unknown, but the scene says"),
            "{error}"
        );
        // Rachel's sentence gives an age, not a gender: her "unknown" gender stands.
        let mut value = good();
        value["roles"][0]["gender"] = json!("unknown");
        validate(&value, &ctx).unwrap();
    }

    #[test]
    fn a_gender_the_scene_states_in_an_apposition_is_held_and_a_bare_pronoun_is_not() {
        let mut ctx = fixture::context();
        ctx.lines.insert(
            0,
            crate::annotation::context::ContextLine {
                kind: ContextLineKind::Action,
                speaker: None,
                text: "The coffee house. Ross, a palaeontologist in his thirties, and Rachel, \
                       holding his coffee, come in."
                    .to_string(),
                directions: Vec::new(),
            },
        );
        let mut value = good();
        value["roles"][1]["gender"] = json!("female");
        let error = validate(&value, &ctx).unwrap_err().message();
        assert!(
            error.contains(
                "Ross: gender is female, but the scene says \"Ross, a palaeontologist in his \
                 thirties, and Rachel, holding his coffee, come in.\"; give the gender it \
                 shows for Ross"
            ),
            "{error}"
        );
        // Rachel's apposition has "his", not "in his <decade>": it says nothing of her.
        let mut value = good();
        value["roles"][0]["gender"] = json!("female");
        value["roles"][1]["gender"] = json!("male");
        validate(&value, &ctx).unwrap();
        value["roles"][0]["gender"] = json!("male");
        validate(&value, &ctx).unwrap();
        // "a man" in the apposition says it too, and agreeing with it passes.
        assert_eq!(
            stated_gender(&ctx, "Ross").map(|(g, _)| g),
            Some(Gender::Male)
        );
        ctx.lines[0].text = "Bruno, the rental clerk, a man in his fifties, waits.".to_string();
        assert_eq!(
            stated_gender(&ctx, "Bruno").map(|(g, _)| g),
            Some(Gender::Male)
        );
        ctx.lines[0].text = "Mila, the neighbour, a retired teacher in her sixties.".to_string();
        assert_eq!(
            stated_gender(&ctx, "Mila").map(|(g, _)| g),
            Some(Gender::Female)
        );
        // Not an apposition, or another participant's words: nothing stated.
        ctx.lines[0].text = "Rachel hands Ross a man's coat in his thirties.".to_string();
        assert_eq!(stated_gender(&ctx, "Rachel"), None);
    }

    #[test]
    fn the_decoder_can_write_only_the_gender_the_scene_states() {
        let mut ctx = fixture::context();
        ctx.heading = Some("Ross, a palaeontologist in his thirties, waits.".to_string());
        let bound = crate::stages::llm_step::bind_roles(
            "annotate",
            schema(),
            &ctx,
            narrow_role_for_decoder,
        );
        let decoder = bound.decoder.unwrap();
        let roles = decoder["properties"]["roles"]["prefixItems"]
            .as_array()
            .unwrap();
        let gender_of = |index: usize| roles[index]["properties"]["gender"]["enum"].clone();
        let ross = ctx.participants.iter().position(|p| p == "Ross").unwrap();
        assert_eq!(gender_of(ross), json!(["male"]));
        // Rachel's gender the scene does not state: every label stays open.
        assert_eq!(gender_of(1 - ross).as_array().unwrap().len(), 4);
        // Endpoints get the whole list.
        let portable = &bound.portable["properties"]["roles"]["items"]["properties"]["gender"];
        assert_eq!(portable["enum"].as_array().unwrap().len(), 4);
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
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(
            error.contains("roles[1] (Ross)") && error.contains("man"),
            "{error}"
        );
        let mut value = good();
        value["dialogue_type"] = json!("argument");
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(error.contains("argument"), "{error}");
    }

    #[test]
    fn rejects_wrong_participants() {
        let mut value = good();
        value["roles"][0]["name"] = json!("Monica");
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(
            error.contains("\"Monica\" is not a participant")
                && error.contains("no entry for Rachel"),
            "{error}"
        );
        let mut value = good();
        value["roles"][0]["name"] = json!("Ross");
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(error.contains("Ross has more than one entry"), "{error}");
    }

    #[test]
    fn rejects_empty_and_malformed_fields() {
        let mut value = good();
        value["roles"][0]["occupation"] = json!(" ");
        value["roles"][1]["age"] = json!("he seems to be");
        let error = validate(&value, &fixture::context()).unwrap_err().message();
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
                .message()
                .contains("unknown field `extra`")
        );
    }

    #[test]
    fn ages_are_read_as_ranges() {
        assert_eq!(age_range("30s"), Some((30, 39)));
        assert_eq!(age_range("late 30s"), Some((36, 39)));
        assert_eq!(age_range("in his fifties"), Some((50, 59)));
        assert!(is_rough_age("fifties"));
        assert_eq!(age_range("25-30"), Some((25, 30)));
        assert_eq!(age_range("teenager"), Some((13, 19)));
        assert_eq!(age_range("middle-aged"), Some((40, 60)));
        assert_eq!(age_range("unknown"), None);
    }

    fn annotation(gender: &str, age: &str, occupation: &str) -> Annotation {
        serde_json::from_value(json!({
            "dialogue_type": "persuasion",
            "roles": [{"name": "Noor", "gender": gender, "age": age, "occupation": occupation}]
        }))
        .unwrap()
    }

    #[test]
    fn a_character_annotated_differently_across_an_episode_is_reported() {
        let first = annotation("female", "30s", "nurse");
        let consistent = annotation("unknown", "late 30s", "night nurse");
        assert_eq!(
            episode_inconsistencies(&[("e/sc1", &first), ("e/sc2", &consistent)]),
            Vec::<String>::new()
        );
        let contradicting = annotation("male", "60s", "courier");
        let problems = episode_inconsistencies(&[
            ("e/sc1", &first),
            ("e/sc2", &consistent),
            ("e/sc3", &contradicting),
        ]);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems[0].starts_with(
                "Noor: gender is \"female\" in e/sc1 but \"male\" in e/sc3; a character's gender \
                 is the same in every scene"
            ),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with("Noor: age is \"30s\" in e/sc1 but \"60s\" in e/sc3"),
            "{problems:?}"
        );
        assert!(
            problems[2].starts_with("Noor: occupation is \"nurse\" in e/sc1 but \"courier\""),
            "{problems:?}"
        );
    }
}

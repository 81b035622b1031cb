//! The answer of `instantiate`: one synthetic cast for a template's slots, with SOTOPIA's
//! profile fields, checked in code against the rules `relationships` made (a gender, an age
//! range, an occupation to keep, how far apart two ages may be), against the show (no name of
//! its characters or of the scene's participants) and within itself (names unique, pronouns
//! that agree with the gender).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::annotation::check::{
    Checked, Problems, Rejection, contains_word, deserialize_whole, require_text,
};
use crate::annotation::context::ScenarioContext;
use crate::annotation::gates::{forbid_first_person, forbid_foreign_letters};
use crate::annotation::schema;
use crate::annotation::vocab::{Gender, vocabulary};
use crate::stages::anonymize::answer::{first_slot_in, holds_name};
use crate::stages::relationships::answer::{PairConstraint, RoleConstraints};
use crate::text::role::RoleId;

vocabulary! {
    /// The moral foundations SOTOPIA's profiles name.
    MoralValue {
        Care = "care",
        Fairness = "fairness",
        Loyalty = "loyalty",
        Authority = "authority",
        Sanctity = "sanctity",
        Liberty = "liberty",
    }
}

vocabulary! {
    /// SOTOPIA's decision-making styles.
    DecisionStyle {
        Analytical = "analytical",
        Directive = "directive",
        Conceptual = "conceptual",
        Behavioral = "behavioral",
    }
}

vocabulary! {
    /// A Big Five trait's level.
    TraitLevel {
        High = "high",
        Low = "low",
    }
}

/// The Big Five, each high or low (SOTOPIA writes them as one line).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BigFive {
    pub openness: TraitLevel,
    pub conscientiousness: TraitLevel,
    pub extraversion: TraitLevel,
    pub agreeableness: TraitLevel,
    pub neuroticism: TraitLevel,
}

impl BigFive {
    /// SOTOPIA's spelling: "Openness to Experience - High; Conscientiousness - Low; ...".
    pub fn sotopia(&self) -> String {
        let level = |l: TraitLevel| match l {
            TraitLevel::High => "High",
            TraitLevel::Low => "Low",
        };
        format!(
            "Openness to Experience - {}; Conscientiousness - {}; Extraversion - {}; \
             Agreeableness - {}; Neuroticism - {}",
            level(self.openness),
            level(self.conscientiousness),
            level(self.extraversion),
            level(self.agreeableness),
            level(self.neuroticism)
        )
    }
}

/// One synthetic character as the model writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Character {
    /// The slot it fills: `r1`, `r2`, ...
    #[schemars(with = "String")]
    pub slot: RoleId,
    pub first_name: String,
    pub last_name: String,
    pub gender: Gender,
    /// `he/him`, `she/her` or `they/them`.
    pub pronouns: String,
    pub age: u32,
    pub occupation: String,
    pub big_five: BigFive,
    pub moral_values: Vec<MoralValue>,
    pub decision_making_style: DecisionStyle,
    /// What anyone may know of the character.
    pub public_info: String,
    /// What only the character knows of itself.
    pub secret: String,
}

impl Character {
    pub fn full_name(&self) -> String {
        format!("{} {}", self.first_name.trim(), self.last_name.trim())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cast {
    pub characters: Vec<Character>,
}

/// The pronouns a gender takes.
pub fn pronouns_of(gender: Gender) -> Option<&'static str> {
    match gender {
        Gender::Male => Some("he/him"),
        Gender::Female => Some("she/her"),
        Gender::NonBinary => Some("they/them"),
        Gender::Unknown => None,
    }
}

/// The pronouns `text` (written about a character whose pronouns are `pronouns`) uses when it
/// uses only the other binary set, as `she/her` in a text about someone who is he/him; `None`
/// when it uses the character's own set too (it may speak of someone else) or neither, and for
/// they/them, which other people's plurals make ambiguous.
fn text_pronouns_disagree(text: &str, pronouns: &str) -> Option<&'static str> {
    const HE: [&str; 4] = ["he", "him", "his", "himself"];
    const SHE: [&str; 4] = ["she", "her", "hers", "herself"];
    let uses = |set: &[&str]| {
        text.split(|c: char| !c.is_alphanumeric())
            .any(|word| set.iter().any(|p| word.eq_ignore_ascii_case(p)))
    };
    match pronouns {
        "he/him" if uses(&SHE) && !uses(&HE) => Some("she/her"),
        "she/her" if uses(&HE) && !uses(&SHE) => Some("he/him"),
        _ => None,
    }
}

/// The answer's schema for `slots` slots; a decoder gets each slot in order, with a gender the
/// rules fix already chosen.
pub fn schema(constraints: &[RoleConstraints]) -> (Value, Value) {
    let genders: Vec<&str> = [Gender::Male, Gender::Female, Gender::NonBinary]
        .iter()
        .map(|g| g.as_str())
        .collect();
    let character = |slot: Option<&RoleConstraints>| {
        let gender: Vec<&str> = match slot.and_then(|c| c.gender) {
            Some(gender) => vec![gender.as_str()],
            None => genders.clone(),
        };
        let trait_level = schema::label::<TraitLevel>("high or low");
        let mut object = schema::object(
            "One synthetic character.",
            &[
                ("slot", schema::text("The slot it fills: r1, r2, ...")),
                // Gender and age before the name, so the name is written to fit them.
                (
                    "gender",
                    json!({"type": "string", "enum": gender, "description": "The gender."}),
                ),
                (
                    "pronouns",
                    json!({"type": "string", "enum": ["he/him", "she/her", "they/them"],
                           "description": "The pronouns that go with the gender."}),
                ),
                (
                    "age",
                    json!({"type": "integer", "description": "Age in years."}),
                ),
                ("first_name", schema::text("A given name.")),
                ("last_name", schema::text("A family name.")),
                (
                    "occupation",
                    schema::text("What the character does for a living."),
                ),
                (
                    "big_five",
                    schema::object(
                        "The Big Five personality traits, each high or low.",
                        &[
                            ("openness", trait_level.clone()),
                            ("conscientiousness", trait_level.clone()),
                            ("extraversion", trait_level.clone()),
                            ("agreeableness", trait_level.clone()),
                            ("neuroticism", trait_level),
                        ],
                    ),
                ),
                (
                    "moral_values",
                    schema::array(
                        "One or two moral foundations the character holds to most.",
                        schema::label::<MoralValue>("A moral foundation."),
                        Some(1),
                        Some(2),
                    ),
                ),
                (
                    "decision_making_style",
                    schema::label::<DecisionStyle>("How the character decides."),
                ),
                (
                    "public_info",
                    schema::text("One or two sentences anyone may know about the character."),
                ),
                (
                    "secret",
                    schema::text("One sentence only the character knows about itself."),
                ),
            ],
        );
        if let Some(slot) = slot {
            object["properties"]["slot"]["enum"] = json!([slot.role.to_string()]);
            // A fixed gender fixes the pronouns: free, the 1.5B model wrote "she/her" for a
            // male slot in five answers in a row (demo).
            if let Some(pronouns) = slot.gender.and_then(pronouns_of) {
                object["properties"]["pronouns"]["enum"] = json!([pronouns]);
            }
            // Only for the decoder: strict endpoints take no bounds, the check says them.
            object["properties"]["age"]["minimum"] = json!(slot.age.0);
            object["properties"]["age"]["maximum"] = json!(slot.age.1);
        }
        object
    };
    let portable = schema::object(
        "One synthetic character per slot of the template.",
        &[(
            "characters",
            schema::array(
                "One character per slot, in slot order.",
                character(None),
                Some(constraints.len()),
                Some(constraints.len()),
            ),
        )],
    );
    let mut decoder = portable.clone();
    let tuple: Vec<Value> = constraints.iter().map(|c| character(Some(c))).collect();
    let characters = &mut decoder["properties"]["characters"];
    characters["prefixItems"] = Value::from(tuple);
    if let Some(object) = characters.as_object_mut() {
        object.remove("items");
    }
    (portable, decoder)
}

/// The ages a decoder lets each slot (in `constraints`' order) be written with, for the cast
/// drawn with `seed`: its own range, or for a slot that a pair binds to an age gap one age,
/// drawn with the seed among those its range and its partners' allow. A grammar cannot relate
/// one number to another, so this is how a model that decodes under one (the embedded model)
/// keeps friends within their gap at all; the check still says the rule to every model. Rules
/// that contradict each other leave every range as it is (the check names them).
pub fn decoder_ages(
    constraints: &[RoleConstraints],
    pairs: &[PairConstraint],
    seed: u64,
) -> Vec<(u32, u32)> {
    let own: Vec<(u32, u32)> = constraints.iter().map(|c| c.age).collect();
    let index = |role: RoleId| constraints.iter().position(|c| c.role == role);
    let gaps: Vec<(usize, usize, u32)> = pairs
        .iter()
        .filter_map(|pair| Some((index(pair.first)?, index(pair.second)?, pair.max_age_gap?)))
        .collect();
    let mut bound: Vec<usize> = gaps.iter().flat_map(|&(a, b, _)| [a, b]).collect();
    bound.sort_unstable();
    bound.dedup();
    let Some(mut ranges) = within_gaps(own.clone(), &gaps) else {
        return own;
    };
    let mut rng = fastrand::Rng::with_seed(seed);
    for &slot in &bound {
        let (low, high) = ranges[slot];
        let age = rng.u32(low..=high);
        ranges[slot] = (age, age);
        match within_gaps(ranges, &gaps) {
            Some(narrowed) => ranges = narrowed,
            None => return own,
        }
    }
    ranges
}

/// `ranges` with each slot's narrowed to the ages its `gaps` (slot, slot, years) to the others'
/// ranges allow, until none narrows further; `None` when one empties.
fn within_gaps(
    mut ranges: Vec<(u32, u32)>,
    gaps: &[(usize, usize, u32)],
) -> Option<Vec<(u32, u32)>> {
    loop {
        let mut narrowed = false;
        for &(a, b, gap) in gaps {
            for (this, other) in [(a, b), (b, a)] {
                let low = ranges[this].0.max(ranges[other].0.saturating_sub(gap));
                let high = ranges[this].1.min(ranges[other].1 + gap);
                if low > high {
                    return None;
                }
                if (low, high) != ranges[this] {
                    ranges[this] = (low, high);
                    narrowed = true;
                }
            }
        }
        if !narrowed {
            return Some(ranges);
        }
    }
}

/// `decoder` (the second of [`schema`]) with each slot's age bounded by `ages`.
pub fn bound_decoder_ages(decoder: &mut Value, ages: &[(u32, u32)]) {
    let slots = decoder["properties"]["characters"]["prefixItems"].as_array_mut();
    for (slot, (low, high)) in slots.into_iter().flatten().zip(ages) {
        slot["properties"]["age"]["minimum"] = json!(low);
        slot["properties"]["age"]["maximum"] = json!(high);
    }
}

/// The cast, or every rule it breaks, each naming the slot and the rule (with why the rule
/// holds), so a re-ask can fix them all; its texts are held to the letters of `scene`'s script.
pub fn check(
    value: &Value,
    constraints: &[RoleConstraints],
    pairs: &[PairConstraint],
    forbidden_names: &[String],
    scene: &ScenarioContext,
) -> Result<Checked<Cast>, Rejection> {
    let cast: Cast = deserialize_whole(value)?;
    let mut problems = Problems::new();
    let field = "characters";
    if cast.characters.len() != constraints.len()
        || cast
            .characters
            .iter()
            .zip(constraints)
            .any(|(c, rule)| c.slot != rule.role)
    {
        let slots: Vec<String> = constraints.iter().map(|c| c.role.to_string()).collect();
        problems.unusable_whole(
            "slots",
            format!(
                "give exactly one character per slot, in order: {}",
                slots.join(", ")
            ),
        );
        return Err(problems.finish().expect_err("a problem was added"));
    }
    let mut seen_names: Vec<(String, RoleId)> = Vec::new();
    for (character, rule) in cast.characters.iter().zip(constraints) {
        let slot = rule.role.to_string();
        let who = Some(slot.as_str());
        for (name, text) in [
            ("first_name", &character.first_name),
            ("last_name", &character.last_name),
            ("occupation", &character.occupation),
            ("public_info", &character.public_info),
            ("secret", &character.secret),
        ] {
            require_text(&mut problems, who, name, text);
        }
        let why = |rule_text: &str| {
            rule.reasons
                .iter()
                .find(|r| r.starts_with(rule_text))
                .cloned()
                .unwrap_or_default()
        };
        if let Some(gender) = rule.gender
            && character.gender != gender
        {
            problems.gate(
                "gender_rule",
                who,
                field,
                format!(
                    "{slot}: must be {gender}, not {} ({})",
                    character.gender,
                    why("gender")
                ),
            );
        }
        if pronouns_of(character.gender) != Some(character.pronouns.trim()) {
            problems.gate(
                "pronouns_disagree",
                who,
                field,
                format!(
                    "{slot}: the pronouns {} do not go with the gender {}; use {}",
                    character.pronouns,
                    character.gender,
                    pronouns_of(character.gender).unwrap_or("they/them")
                ),
            );
        }
        for (name, text) in [
            ("public_info", &character.public_info),
            ("secret", &character.secret),
        ] {
            forbid_first_person(&mut problems, who, name, text);
            forbid_foreign_letters(&mut problems, who, name, text, scene);
            // The template's slots are for the template; a cast's text names its characters.
            if let Some(placeholder) = first_slot_in(text) {
                problems.gate(
                    "slot_placeholder",
                    who,
                    name,
                    format!(
                        "{slot}: {name} holds the template's slot {placeholder}; call the \
                         characters of this cast by the names you give them"
                    ),
                );
            }
            if let Some(used) = text_pronouns_disagree(text, character.pronouns.trim()) {
                problems.gate(
                    "text_pronouns_disagree",
                    who,
                    name,
                    format!(
                        "{slot}: {name} calls the character {used}, but their pronouns are {}; \
                         write it with {}",
                        character.pronouns, character.pronouns
                    ),
                );
            }
        }
        let (low, high) = rule.age;
        if !(low..=high).contains(&character.age) {
            problems.gate(
                "age_rule",
                who,
                field,
                format!(
                    "{slot}: is {} but must be {low} to {high} years old{}",
                    character.age,
                    Some(why("age"))
                        .filter(|w| !w.is_empty())
                        .or_else(|| Some(why("a student")).filter(|w| !w.is_empty()))
                        .map_or(String::new(), |w| format!(" ({w})"))
                ),
            );
        }
        if let Some(occupation) = &rule.occupation
            && !same_occupation(&character.occupation, occupation)
        {
            problems.gate(
                "occupation_rule",
                who,
                field,
                format!(
                    "{slot}: must be a {occupation}, not a {} (the scene depends on it)",
                    character.occupation.trim()
                ),
            );
        }
        let full = character.full_name();
        let from_source: Vec<&String> = forbidden_names
            .iter()
            .filter(|name| holds_name(&full, name))
            .collect();
        if !from_source.is_empty() {
            problems.gate(
                "name_from_the_source",
                who,
                field,
                format!(
                    "{slot}: the name {full} is taken from the source show ({}); invent a new one",
                    from_source
                        .iter()
                        .map(|n| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        let first = character.first_name.trim().to_lowercase();
        if let Some((_, other)) = seen_names.iter().find(|(name, _)| *name == first) {
            problems.gate(
                "name_twice",
                who,
                field,
                format!(
                    "{slot}: has the first name {} of {other}; every character needs a name of \
                     its own",
                    character.first_name.trim()
                ),
            );
        }
        seen_names.push((first, rule.role));
    }
    for pair in pairs {
        let Some(gap) = pair.max_age_gap else {
            continue;
        };
        let age = |role: RoleId| cast.characters.get(role.index()).map(|c| c.age);
        if let (Some(a), Some(b)) = (age(pair.first), age(pair.second))
            && a.abs_diff(b) > gap
        {
            problems.gate(
                "age_gap_rule",
                Some(&pair.first.to_string()),
                field,
                format!(
                    "{} ({a}) and {} ({b}) are {}, so their ages may be at most {gap} years \
                     apart",
                    pair.first, pair.second, pair.relationship
                ),
            );
        }
    }
    problems.finish_checked(cast)
}

/// Whether `given` is the occupation `kept`: one names the other, ignoring case ("a high-school
/// student" keeps "student").
fn same_occupation(given: &str, kept: &str) -> bool {
    contains_word(given, kept) || contains_word(kept, given.trim())
}

/// An answer the checks keep for `constraints` (what the scripted model answers): a character
/// per slot of the kept gender, with the kept occupation, each as close in age to the middle of
/// the first slot's range as its own range allows (so friends stay close in age).
pub fn example(constraints: &[RoleConstraints], seed: u64) -> Value {
    let target = constraints
        .first()
        .map_or(30, |rule| (rule.age.0 + rule.age.1) / 2);
    const FIRST: [&str; 6] = ["Iris", "Tomas", "Lena", "Omar", "Priya", "Felix"];
    const LAST: [&str; 6] = ["Varga", "Okafor", "Lindqvist", "Haddad", "Moreau", "Tanaka"];
    let characters: Vec<Value> = constraints
        .iter()
        .enumerate()
        .map(|(at, rule)| {
            let gender = rule.gender.unwrap_or(Gender::NonBinary);
            let pick = (seed as usize + at) % FIRST.len();
            json!({
                "slot": rule.role.to_string(),
                "first_name": FIRST[pick],
                "last_name": LAST[(pick + 1) % LAST.len()],
                "gender": gender.as_str(),
                "pronouns": pronouns_of(gender).unwrap_or("they/them"),
                "age": target.clamp(rule.age.0, rule.age.1),
                "occupation": rule.occupation.clone().unwrap_or_else(|| "librarian".into()),
                "big_five": {"openness": "high", "conscientiousness": "low",
                             "extraversion": "high", "agreeableness": "low",
                             "neuroticism": "high"},
                "moral_values": ["fairness"],
                "decision_making_style": "analytical",
                "public_info": "Works long shifts and keeps a small garden.",
                "secret": "Once borrowed money from a friend and never paid it back.",
            })
        })
        .collect();
    json!({ "characters": characters })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotation::context::CastMember;
    use crate::annotation::schema::strictness_problems;
    use crate::stages::fixture;
    use crate::stages::relationships::answer::{FRIENDS_AGE_GAP, Relationship};

    fn rules() -> (Vec<RoleConstraints>, Vec<PairConstraint>) {
        let roles = vec![
            RoleConstraints {
                role: RoleId::at(0),
                gender: Some(Gender::Female),
                age: (12, 14),
                occupation: Some("student".into()),
                reasons: vec![
                    "gender stays female (a family or romantic relation)".into(),
                    "a student stays of school age".into(),
                ],
            },
            RoleConstraints {
                role: RoleId::at(1),
                gender: None,
                age: (18, 80),
                occupation: None,
                reasons: Vec::new(),
            },
        ];
        let pairs = vec![PairConstraint {
            first: RoleId::at(0),
            second: RoleId::at(1),
            relationship: Relationship::Friend,
            max_age_gap: Some(FRIENDS_AGE_GAP),
        }];
        (roles, pairs)
    }

    fn names() -> Vec<String> {
        crate::stages::anonymize::answer::person_names(
            &[CastMember {
                name: "Monica Geller".into(),
                aliases: vec!["Mon".into()],
            }],
            &["Ross".to_string(), "Rachel".to_string()],
        )
    }

    #[test]
    fn a_decoder_gives_friends_ages_within_their_gaps_and_leaves_others_their_range() {
        let slot = |at: usize, age: (u32, u32)| RoleConstraints {
            role: RoleId::at(at),
            gender: None,
            age,
            occupation: None,
            reasons: Vec::new(),
        };
        let friends = |first: usize, second: usize, gap: u32| PairConstraint {
            first: RoleId::at(first),
            second: RoleId::at(second),
            relationship: Relationship::Friend,
            max_age_gap: Some(gap),
        };
        // The demo's three friends, ages as the script fixes them (60s, 20s, 30s), the gaps
        // as relationships' rules make them: one cast only.
        let roles = vec![slot(0, (60, 69)), slot(1, (20, 29)), slot(2, (30, 39))];
        let pairs = vec![friends(0, 1, 31), friends(0, 2, 21), friends(1, 2, 15)];
        assert_eq!(
            decoder_ages(&roles, &pairs, 7),
            [(60, 60), (29, 29), (39, 39)]
        );

        // Wider ranges: an age each, drawn, within its range and its gaps; a fourth slot bound
        // to nobody keeps its range.
        let roles = vec![
            slot(0, (20, 69)),
            slot(1, (18, 80)),
            slot(2, (30, 60)),
            slot(3, (60, 70)),
        ];
        let pairs = vec![
            friends(0, 1, FRIENDS_AGE_GAP),
            friends(2, 0, FRIENDS_AGE_GAP),
        ];
        let mut drawn = std::collections::BTreeSet::new();
        for seed in 0..40 {
            let ages = decoder_ages(&roles, &pairs, seed);
            for (age, rule) in ages[..3].iter().zip(&roles) {
                assert_eq!(age.0, age.1, "{ages:?}");
                assert!(age.0 >= rule.age.0 && age.0 <= rule.age.1, "{ages:?}");
            }
            assert!(ages[0].0.abs_diff(ages[1].0) <= FRIENDS_AGE_GAP, "{ages:?}");
            assert!(ages[0].0.abs_diff(ages[2].0) <= FRIENDS_AGE_GAP, "{ages:?}");
            assert_eq!(ages[3], (60, 70), "{ages:?}");
            drawn.insert(ages[0].0);
            let (_, mut decoder) = schema(&roles);
            bound_decoder_ages(&mut decoder, &ages);
            let age = &decoder["properties"]["characters"]["prefixItems"][1]["properties"]["age"];
            assert_eq!(
                (&age["minimum"], &age["maximum"]),
                (&json!(ages[1].0), &json!(ages[1].1))
            );
        }
        assert!(drawn.len() > 5, "other seeds, other ages: {drawn:?}");

        // Rules that contradict each other leave every range alone: the check names them.
        let roles = vec![slot(0, (60, 69)), slot(1, (20, 29))];
        let pairs = vec![friends(0, 1, FRIENDS_AGE_GAP)];
        assert_eq!(decoder_ages(&roles, &pairs, 1), [(60, 69), (20, 29)]);
    }

    #[test]
    fn the_schemas_are_strict_and_a_decoder_gets_the_fixed_gender_and_its_pronouns() {
        let (rules, _) = rules();
        let (portable, decoder) = schema(&rules);
        assert_eq!(strictness_problems(&portable), Vec::<String>::new());
        let first = &decoder["properties"]["characters"]["prefixItems"][0];
        assert_eq!(first["properties"]["gender"]["enum"], json!(["female"]));
        assert_eq!(first["properties"]["pronouns"]["enum"], json!(["she/her"]));
        let free = &decoder["properties"]["characters"]["prefixItems"][1];
        assert_eq!(
            free["properties"]["pronouns"]["enum"],
            json!(["he/him", "she/her", "they/them"])
        );
        assert_eq!(first["properties"]["slot"]["enum"], json!(["r1"]));
        assert_eq!(first["properties"]["age"]["maximum"], 14);
        // The embedded model's decoder can follow it, bounds included.
        let grammar = llama_cpp_2::json_schema_to_grammar(&decoder.to_string()).unwrap();
        assert!(grammar.contains("age ::= (\"1\" [2-4])"), "{grammar}");
    }

    #[test]
    fn a_casts_texts_are_about_its_characters_from_outside_and_hold_no_slot() {
        let (rules, pairs) = rules();
        let mut cast = example(&rules, 3);
        cast["characters"][0]["secret"] = json!("I am the kindest teacher in town.");
        cast["characters"][1]["public_info"] = json!("A friend of both {r1} and {r3}.");
        cast["characters"][1]["secret"] = json!("Keeps a stash of备用 cash at home.");
        let checked = check(&cast, &rules, &pairs, &names(), &fixture::context()).unwrap();
        let found: Vec<(&str, &str)> = checked
            .gates
            .iter()
            .map(|p| (p.kind.as_str(), p.field.as_deref().unwrap_or_default()))
            .collect();
        assert_eq!(
            found,
            [
                ("first_person", "secret"),
                ("slot_placeholder", "public_info"),
                ("foreign_letters", "secret")
            ]
        );
        assert!(
            checked.gates[1]
                .message
                .contains("holds the template's slot {r1}"),
            "{}",
            checked.gates[1].message
        );
    }

    #[test]
    fn the_example_keeps_every_rule() {
        let (rules, pairs) = rules();
        let example = example(&rules, 3);
        assert_eq!(example["characters"][1]["age"], 18);
        assert_eq!(
            check(&example, &rules, &pairs, &names(), &fixture::context())
                .unwrap()
                .gates,
            []
        );
    }

    #[test]
    fn an_impossible_instance_is_rejected_naming_each_rule() {
        let (rules, pairs) = rules();
        let mut value = example(&rules, 0);
        value["characters"][0]["age"] = json!(50);
        value["characters"][1]["age"] = json!(30);
        let rejection = check(&value, &rules, &pairs, &names(), &fixture::context())
            .and_then(Checked::clean)
            .unwrap_err();
        assert_eq!(rejection.kinds(), ["age_rule", "age_gap_rule"]);
        let message = rejection.message();
        assert!(
            message.contains(
                "r1: is 50 but must be 12 to 14 years old (a student stays of \
                              school age)"
            ),
            "{message}"
        );
        let mut value = example(&rules, 0);
        value["characters"][0]["gender"] = json!("male");
        value["characters"][0]["pronouns"] = json!("he/him");
        value["characters"][0]["occupation"] = json!("plumber");
        value["characters"][1]["first_name"] = json!("Monica");
        let rejection = check(&value, &rules, &pairs, &names(), &fixture::context())
            .and_then(Checked::clean)
            .unwrap_err();
        assert_eq!(
            rejection.kinds(),
            ["gender_rule", "occupation_rule", "name_from_the_source"]
        );
    }

    #[test]
    fn a_cast_that_breaks_a_rule_is_usable_and_kept_flagged_with_it() {
        let (rules, pairs) = rules();
        let mut value = example(&rules, 0);
        value["characters"][0]["age"] = json!(50);
        let checked = check(&value, &rules, &pairs, &names(), &fixture::context()).unwrap();
        assert_eq!(checked.answer.characters[0].age, 50);
        let kinds: Vec<&str> = checked.gates.iter().map(|p| p.kind.as_str()).collect();
        assert_eq!(kinds, ["age_rule", "age_gap_rule"]);
        value["characters"][0]["secret"] = json!(" ");
        let rejection = check(&value, &rules, &pairs, &names(), &fixture::context()).unwrap_err();
        assert!(
            rejection.kinds().contains(&"empty"),
            "{:?}",
            rejection.kinds()
        );
    }

    #[test]
    fn names_are_unique_and_pronouns_agree() {
        let (rules, pairs) = rules();
        let mut value = example(&rules, 0);
        value["characters"][1]["first_name"] = value["characters"][0]["first_name"].clone();
        value["characters"][1]["pronouns"] = json!("she/her");
        let rejection = check(&value, &rules, &pairs, &names(), &fixture::context())
            .and_then(Checked::clean)
            .unwrap_err();
        assert_eq!(rejection.kinds(), ["pronouns_disagree", "name_twice"]);
    }

    /// Seen in the demo: "Avery Johnson, male, he/him: She is a student".
    #[test]
    fn a_text_that_calls_the_character_by_the_other_pronouns_is_a_problem() {
        let disagree = |text, pronouns| text_pronouns_disagree(text, pronouns);
        assert_eq!(disagree("She is a student.", "he/him"), Some("she/her"));
        assert_eq!(
            disagree("Always puts her patients first.", "he/him"),
            Some("she/her")
        );
        assert_eq!(disagree("He failed his test.", "she/her"), Some("he/him"));
        // Someone else's pronouns beside the character's own, or none at all, are fine.
        assert_eq!(
            disagree("He helps his roommate with her rent.", "he/him"),
            None
        );
        assert_eq!(disagree("Sings in a choir.", "he/him"), None);
        assert_eq!(disagree("Theirs, hers and his.", "they/them"), None);
        assert_eq!(disagree("The herald of shepherds.", "he/him"), None);
    }

    #[test]
    fn sotopia_writes_the_big_five_on_one_line() {
        let five = BigFive {
            openness: TraitLevel::High,
            conscientiousness: TraitLevel::Low,
            extraversion: TraitLevel::High,
            agreeableness: TraitLevel::Low,
            neuroticism: TraitLevel::High,
        };
        assert_eq!(
            five.sotopia(),
            "Openness to Experience - High; Conscientiousness - Low; Extraversion - High; \
             Agreeableness - Low; Neuroticism - High"
        );
    }
}

//! Step `relationships` (AgentSense): how the scenario's characters are related (family,
//! friend, romantic, acquaintance, stranger: each pair once, the same read from both sides),
//! and, per character, how freely its age, occupation and gender could change without breaking
//! the scene (almost, maybe, not replaceable). [`constraints`] turns both, with `annotate`'s
//! labels, into the rules a synthetic cast must keep, which `instantiate` checks in code.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::annotation::check::{
    Checked, Problems, Rejection, deserialize_answer, match_roles, named_role,
};
use crate::annotation::context::ScenarioContext;
use crate::annotation::schema;
use crate::annotation::vocab::{Gender, vocabulary};
use crate::stages::annotate::answer::{Annotation, age_range};
use crate::stages::anonymize::answer::Template;
use crate::stages::llm_step::SceneFields;
use crate::stages::relationships::stated::stated_relations;
use crate::text::role::RoleId;

vocabulary! {
    /// How two characters are related (AgentSense's relationship types).
    Relationship {
        Family = "family",
        Friend = "friend",
        Romantic = "romantic",
        Acquaintance = "acquaintance",
        Stranger = "stranger",
    }
}

impl Relationship {
    /// SOTOPIA's `RelationshipType` number (stranger 0, know by name 1, acquaintance 2, friend
    /// 3, romantic 4, family 5).
    pub fn sotopia(self) -> u8 {
        match self {
            Relationship::Stranger => 0,
            Relationship::Acquaintance => 2,
            Relationship::Friend => 3,
            Relationship::Romantic => 4,
            Relationship::Family => 5,
        }
    }
}

vocabulary! {
    /// How freely an attribute of a character could change without breaking the scene.
    Replaceability {
        /// Anything works.
        Almost = "almost",
        /// Some values would work, not all: keep it close.
        Maybe = "maybe",
        /// The scene depends on it: keep it.
        Not = "not",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Relationships {
    pub roles: Vec<RoleRelations>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleRelations {
    pub name: String,
    /// The character's relation to each other participant, in their order.
    pub relationships: Vec<Relation>,
    pub age: Replaceability,
    pub occupation: Replaceability,
    pub gender: Replaceability,
}

named_role!(RoleRelations);

impl RoleRelations {
    /// How this character is related to `other`, if the answer says.
    fn relation_to(&self, other: &str) -> Option<Relationship> {
        self.relationships
            .iter()
            .find(|r| r.other == other)
            .map(|r| r.relationship)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Relation {
    pub other: String,
    pub relationship: Relationship,
}

pub type Answer = Relationships;

pub fn schema() -> Value {
    let replaceable = |attribute: &str| {
        schema::label::<Replaceability>(&format!(
            "Whether the scene would still work with the character's {attribute} changed: \
             almost (any), maybe (a close one), not (it must stay)."
        ))
    };
    schema::object(
        "How the participants are related, and what of each could change.",
        &[(
            "roles",
            schema::roles(
                "One entry per participant.",
                &[
                    (
                        "relationships",
                        schema::array(
                            "The character's relation to each other participant.",
                            schema::object(
                                "The relation to one other participant.",
                                &[
                                    (
                                        "other",
                                        schema::text("The other participant's name, as listed."),
                                    ),
                                    (
                                        "relationship",
                                        schema::label::<Relationship>("How the two are related."),
                                    ),
                                ],
                            ),
                            Some(1),
                            None,
                        ),
                    ),
                    ("age", replaceable("age")),
                    ("occupation", replaceable("occupation")),
                    ("gender", replaceable("gender")),
                ],
            ),
        )],
    )
}

/// Each role lists its relation to every other participant, in order: for a decoder, a tuple
/// naming each of them, with the relationships the scene's texts allow for a pair they relate
/// ([`stated_relations`]).
pub fn narrow_role_for_decoder(
    role: &mut Value,
    name: &str,
    others: &[String],
    ctx: &ScenarioContext,
    _: Option<&SceneFields>,
) {
    let stated = stated_relations(ctx);
    let relations = &mut role["properties"]["relationships"];
    let item = relations["items"].clone();
    let tuple: Vec<Value> = others
        .iter()
        .map(|other| {
            let mut entry = item.clone();
            entry["properties"]["other"]["enum"] = json!([other]);
            if let Some(relation) = stated.iter().find(|r| r.relates(name, other)) {
                entry["properties"]["relationship"]["enum"] = json!(relation.allowed_labels());
            }
            entry
        })
        .collect();
    relations["prefixItems"] = Value::from(tuple);
    relations["minItems"] = json!(others.len());
    relations["maxItems"] = json!(others.len());
    if let Some(object) = relations.as_object_mut() {
        object.remove("items");
    }
}

/// The answer, usable or not: every role relates to every other participant once, and two
/// characters are related the same way from both sides.
pub fn check(value: &Value, ctx: &ScenarioContext) -> Result<Checked<Relationships>, Rejection> {
    let answer: Relationships = deserialize_answer::<Relationships, RoleRelations>(value)?;
    let mut problems = Problems::new();
    let mut roles = match_roles(answer.roles, ctx, &mut problems);
    let field = "relationships";
    for role in &mut roles {
        let who = role.name.clone();
        let mut ordered = Vec::new();
        for other in ctx.participants.iter().filter(|p| **p != who) {
            let found: Vec<&Relation> = role
                .relationships
                .iter()
                .filter(|r| ctx.participant_named(&r.other) == Some(other.as_str()))
                .collect();
            match found.as_slice() {
                [one] => ordered.push(Relation {
                    other: other.clone(),
                    relationship: one.relationship,
                }),
                [] => problems.unusable(
                    "relation_missing",
                    Some(&who),
                    field,
                    format!("{who}: no relationship to {other}; add one"),
                ),
                _ => problems.unusable(
                    "relation_twice",
                    Some(&who),
                    field,
                    format!("{who}: the relationship to {other} is given twice; give it once"),
                ),
            }
        }
        for relation in &role.relationships {
            let known = ctx
                .participant_named(&relation.other)
                .is_some_and(|p| p != who);
            if !known {
                problems.unusable(
                    "relation_to_nobody",
                    Some(&who),
                    field,
                    format!(
                        "{who}: \"{}\" is not another participant; relate {who} only to {}",
                        relation.other,
                        ctx.participants
                            .iter()
                            .filter(|p| **p != who)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
        }
        role.relationships = ordered;
    }
    for (at, role) in roles.iter().enumerate() {
        for later in &roles[at + 1..] {
            if let (Some(one), Some(other)) =
                (role.relation_to(&later.name), later.relation_to(&role.name))
                && one != other
            {
                problems.gate(
                    "relation_disagrees",
                    Some(&role.name),
                    field,
                    format!(
                        "{}: is {one} to {} but {} is {other} to {}; give the pair one \
                         relationship",
                        role.name, later.name, later.name, role.name
                    ),
                );
            }
        }
    }
    for stated in stated_relations(ctx) {
        for (from, to) in [
            (&stated.first, &stated.second),
            (&stated.second, &stated.first),
        ] {
            let given = roles
                .iter()
                .find(|r| &r.name == from)
                .and_then(|r| r.relation_to(to));
            if let Some(given) = given
                && !stated.allowed.contains(&given)
            {
                problems.gate(
                    "relation_against_text",
                    Some(from),
                    field,
                    format!(
                        "{from}: is {given} to {to}, but the scene says \"{}\"; make it {}",
                        stated.evidence,
                        stated.allowed_labels().join(" or ")
                    ),
                );
            }
        }
    }
    problems.finish_checked(Relationships { roles })
}

/// [`check`] for a clean answer: any problem is an error.
pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<Relationships, Rejection> {
    check(value, ctx).and_then(Checked::clean)
}

/// An answer the checks keep clean for a plain scene between `scene.names`: flatmates, who
/// could be anyone.
pub fn example(scene: &crate::stages::descriptor::Example<'_>) -> Value {
    json!({"roles": scene.roles(&|name, _| json!({
        "name": name,
        "relationships": scene.names.iter().filter(|n| *n != name)
            .map(|other| json!({"other": other, "relationship": "friend"}))
            .collect::<Vec<_>>(),
        "age": "maybe", "occupation": "almost", "gender": "almost",
    }))})
}

/// What a synthetic character in a role must keep of the original.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleConstraints {
    #[schemars(with = "String")]
    pub role: RoleId,
    /// The gender to keep; `None`: any.
    pub gender: Option<Gender>,
    /// The ages allowed, in years, inclusive.
    pub age: (u32, u32),
    /// The occupation to keep; `None`: any.
    pub occupation: Option<String>,
    /// Why each rule holds, in words.
    pub reasons: Vec<String>,
}

/// How far apart two characters' ages may be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PairConstraint {
    #[schemars(with = "String")]
    pub first: RoleId,
    #[schemars(with = "String")]
    pub second: RoleId,
    pub relationship: Relationship,
    /// The largest age gap allowed, in years; `None`: any.
    pub max_age_gap: Option<u32>,
}

/// The ages of characters of school age, for a student whose occupation stays.
pub const SCHOOL_AGE: (u32, u32) = (6, 18);
/// The widest ages a character may have.
pub const ANY_AGE: (u32, u32) = (18, 80);
/// Years either side of the original age range a "maybe" age may move.
pub const MAYBE_AGE_MARGIN: u32 = 10;
/// Friends keep ages this close.
pub const FRIENDS_AGE_GAP: u32 = 15;

/// The rules a synthetic cast must keep, from the relationships and `annotate`'s labels:
/// an attribute that is not replaceable stays as the script has it; family keeps ages and
/// genders; romantic partners keep their genders; friends keep similar ages; a student whose
/// occupation stays stays of school age unless the script says older.
pub fn constraints(
    answer: &Relationships,
    annotation: &Annotation,
    template: &Template,
) -> (Vec<RoleConstraints>, Vec<PairConstraint>) {
    let gendered_text = template
        .texts()
        .iter()
        .any(|(_, text)| has_gendered_pronoun(text));
    let related = |name: &str, kinds: &[Relationship]| {
        answer
            .roles
            .iter()
            .find(|r| r.name == name)
            .is_some_and(|r| {
                r.relationships
                    .iter()
                    .any(|rel| kinds.contains(&rel.relationship))
            })
    };
    let roles: Vec<RoleConstraints> = answer
        .roles
        .iter()
        .enumerate()
        .map(|(at, role)| {
            let label = annotation.roles.iter().find(|a| a.name == role.name);
            let mut reasons = Vec::new();
            let script_gender = label.map(|l| l.gender).filter(|g| *g != Gender::Unknown);
            let why_gender = if role.gender == Replaceability::Not {
                Some("the scene depends on it")
            } else if related(&role.name, &[Relationship::Family, Relationship::Romantic]) {
                Some("a family or romantic relation")
            } else if gendered_text {
                Some("the template says he or she")
            } else {
                None
            };
            let gender = script_gender.filter(|_| why_gender.is_some());
            if let (Some(gender), Some(why)) = (gender, why_gender) {
                reasons.push(format!("gender stays {gender} ({why})"));
            }
            let script_age = label.and_then(|l| age_range(&l.age));
            let family = related(&role.name, &[Relationship::Family]);
            let occupation = label
                .map(|l| l.occupation.trim().to_string())
                .filter(|o| !o.is_empty() && o != "unknown")
                .filter(|_| role.occupation == Replaceability::Not);
            let age = match (script_age, role.age) {
                (Some(range), Replaceability::Not) => {
                    reasons.push("age stays as the script has it".to_string());
                    range
                }
                (Some(range), _) if family => {
                    reasons.push("age stays as the script has it (family)".to_string());
                    range
                }
                (Some((low, high)), Replaceability::Maybe) => {
                    reasons.push(format!(
                        "age within {MAYBE_AGE_MARGIN} years of the script's"
                    ));
                    (
                        low.saturating_sub(MAYBE_AGE_MARGIN).max(ANY_AGE.0.min(low)),
                        high + MAYBE_AGE_MARGIN,
                    )
                }
                _ => ANY_AGE,
            };
            let student = occupation.as_deref().is_some_and(|o| {
                ["student", "pupil", "schoolgirl", "schoolboy"]
                    .iter()
                    .any(|w| o.to_lowercase().contains(w))
            });
            let age = if student && script_age.is_none_or(|(_, high)| high <= SCHOOL_AGE.1) {
                reasons.push("a student stays of school age".to_string());
                SCHOOL_AGE
            } else {
                age
            };
            if let Some(occupation) = &occupation {
                reasons.push(format!("occupation stays {occupation}"));
            }
            RoleConstraints {
                role: RoleId::at(at),
                gender,
                age,
                occupation,
                reasons,
            }
        })
        .collect();
    let mut pairs = Vec::new();
    for (at, role) in answer.roles.iter().enumerate() {
        for relation in &role.relationships {
            let Some(other) = answer.roles.iter().position(|r| r.name == relation.other) else {
                continue;
            };
            if other <= at {
                continue;
            }
            // Friends keep similar ages, but never closer than the ages they must keep allow
            // (the script's friends of 60 and 25 stay friends 35 years apart).
            let (a, b) = (roles[at].age, roles[other].age);
            let apart = a.0.saturating_sub(b.1).max(b.0.saturating_sub(a.1));
            pairs.push(PairConstraint {
                first: RoleId::at(at),
                second: RoleId::at(other),
                relationship: relation.relationship,
                max_age_gap: (relation.relationship == Relationship::Friend)
                    .then_some(FRIENDS_AGE_GAP.max(apart)),
            });
        }
    }
    (roles, pairs)
}

/// Whether `text` says he, she or their other forms: a template that does cannot have its
/// characters' genders changed without contradicting itself.
pub fn has_gendered_pronoun(text: &str) -> bool {
    const GENDERED: [&str; 8] = [
        "he", "him", "his", "himself", "she", "her", "hers", "herself",
    ];
    GENDERED
        .iter()
        .any(|pronoun| crate::annotation::check::contains_word(text, pronoun))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotation::schema::strictness_problems;
    use crate::stages::fixture;

    fn good() -> Value {
        json!({"roles": [
            {"name": "Ross", "relationships": [{"other": "Rachel", "relationship": "romantic"}],
             "age": "maybe", "occupation": "almost", "gender": "almost"},
            {"name": "Rachel", "relationships": [{"other": "Ross", "relationship": "romantic"}],
             "age": "not", "occupation": "not", "gender": "maybe"}
        ]})
    }

    fn annotation() -> Annotation {
        serde_json::from_value(json!({"dialogue_type": "persuasion", "roles": [
            {"name": "Ross", "gender": "male", "age": "30s", "occupation": "paleontologist"},
            {"name": "Rachel", "gender": "female", "age": "late 20s", "occupation": "waitress"}
        ]}))
        .unwrap()
    }

    #[test]
    fn schema_is_strict_and_the_decoder_relates_each_role_to_each_other() {
        assert_eq!(strictness_problems(&schema()), Vec::<String>::new());
        let mut role = schema()["properties"]["roles"]["items"].clone();
        narrow_role_for_decoder(
            &mut role,
            "Ross",
            &["Rachel".to_string(), "Monica".to_string()],
            &fixture::context(),
            None,
        );
        let tuple = &role["properties"]["relationships"]["prefixItems"];
        assert_eq!(tuple[1]["properties"]["other"]["enum"], json!(["Monica"]));
        assert_eq!(role["properties"]["relationships"]["maxItems"], 2);
    }

    #[test]
    fn a_pair_is_related_the_same_way_from_both_sides() {
        validate(&good(), &fixture::context()).unwrap();
        let mut value = good();
        value["roles"][1]["relationships"][0]["relationship"] = json!("friend");
        assert_eq!(
            validate(&value, &fixture::context()).unwrap_err().kinds(),
            ["relation_disagrees"]
        );
        // Each side asked on its own can disagree: kept flagged for a person to settle.
        assert_eq!(check(&value, &fixture::context()).unwrap().gates.len(), 1);
        let mut value = good();
        value["roles"][0]["relationships"] = json!([]);
        assert_eq!(
            validate(&value, &fixture::context()).unwrap_err().kinds(),
            ["relation_missing"]
        );
        let mut value = good();
        value["roles"][0]["relationships"][0]["other"] = json!("Monica");
        let rejection = validate(&value, &fixture::context()).unwrap_err();
        assert_eq!(
            rejection.kinds(),
            ["relation_missing", "relation_to_nobody"]
        );
    }

    #[test]
    fn a_relationship_the_scene_states_holds_the_decoder_and_flags_an_answer_against_it() {
        let mut ctx = fixture::context();
        ctx.heading = Some("Central Perk. Rachel waits for her boyfriend Ross.".to_string());
        let mut role = schema()["properties"]["roles"]["items"].clone();
        narrow_role_for_decoder(&mut role, "Ross", &["Rachel".to_string()], &ctx, None);
        let tuple = &role["properties"]["relationships"]["prefixItems"];
        assert_eq!(
            tuple[0]["properties"]["relationship"]["enum"],
            json!(["romantic"])
        );
        validate(&good(), &ctx).unwrap();
        let mut value = good();
        for role in value["roles"].as_array_mut().unwrap() {
            role["relationships"][0]["relationship"] = json!("friend");
        }
        let checked = check(&value, &ctx).unwrap();
        let messages: Vec<&str> = checked
            .gates
            .iter()
            .map(|problem| problem.message.as_str())
            .collect();
        assert_eq!(
            messages,
            [
                "Rachel: is friend to Ross, but the scene says \"her boyfriend Ross\"; make it \
                 romantic",
                "Ross: is friend to Rachel, but the scene says \"her boyfriend Ross\"; make it \
                 romantic",
            ]
        );
    }

    fn template_saying(background: &str) -> Template {
        Template {
            scenario: "s".to_string(),
            background: background.to_string(),
            domain: crate::stages::goals::answer::SocialDomain::PersonalDomain,
            roles: Vec::new(),
        }
    }

    fn neutral_template() -> Template {
        template_saying("{r1} and {r2} meet in a cafe.")
    }

    #[test]
    fn a_template_that_says_he_or_she_keeps_the_scripts_genders() {
        let mut value = good();
        for role in value["roles"].as_array_mut().unwrap() {
            role["relationships"][0]["relationship"] = json!("friend");
        }
        let answer = validate(&value, &fixture::context()).unwrap();
        let template = template_saying("{r1} asks {r2} why she is late.");
        let (roles, _) = constraints(&answer, &annotation(), &template);
        assert_eq!(roles[0].gender, Some(Gender::Male));
        assert_eq!(roles[1].gender, Some(Gender::Female));
        assert!(
            roles[0]
                .reasons
                .contains(&"gender stays male (the template says he or she)".to_string()),
            "{:?}",
            roles[0].reasons
        );
        assert!(!has_gendered_pronoun(
            "{r1} helps the others with their chores."
        ));
        assert!(has_gendered_pronoun("Her keys are gone."));
    }

    #[test]
    fn constraints_keep_what_the_scene_depends_on() {
        let answer = validate(&good(), &fixture::context()).unwrap();
        let (roles, pairs) = constraints(&answer, &annotation(), &neutral_template());
        // Romantic: both keep the script's gender. Ross's age may move ten years.
        assert_eq!(roles[0].gender, Some(Gender::Male));
        assert_eq!(roles[0].age, (20, 49));
        assert_eq!(roles[0].occupation, None);
        // Rachel's age and occupation are not replaceable.
        assert_eq!(roles[1].gender, Some(Gender::Female));
        assert_eq!(roles[1].age, (26, 29));
        assert_eq!(roles[1].occupation.as_deref(), Some("waitress"));
        assert_eq!(pairs.len(), 1);
        assert_eq!(pairs[0].relationship, Relationship::Romantic);
        assert_eq!(pairs[0].max_age_gap, None);
    }

    #[test]
    fn friends_keep_similar_ages_and_a_student_stays_of_school_age() {
        let mut value = good();
        for role in value["roles"].as_array_mut().unwrap() {
            role["relationships"][0]["relationship"] = json!("friend");
        }
        let answer = validate(&value, &fixture::context()).unwrap();
        let mut labels = annotation();
        labels.roles[1].age = "unknown".to_string();
        labels.roles[1].occupation = "student".to_string();
        let (roles, pairs) = constraints(&answer, &labels, &neutral_template());
        assert_eq!(pairs[0].max_age_gap, Some(FRIENDS_AGE_GAP));
        assert_eq!(roles[0].gender, None, "friends may change gender");
        assert_eq!(roles[1].age, SCHOOL_AGE);
        assert!(
            roles[1]
                .reasons
                .contains(&"a student stays of school age".to_string())
        );
        // Friends whose ages stay as the script has them, further apart than the usual gap,
        // may be as far apart as those ages make them, and no further: the rules stay possible.
        let mut value = value.clone();
        for role in value["roles"].as_array_mut().unwrap() {
            role["age"] = json!("not");
        }
        let answer = validate(&value, &fixture::context()).unwrap();
        let mut labels = annotation();
        labels.roles[0].age = "60s".to_string();
        labels.roles[1].age = "20s".to_string();
        let (roles, pairs) = constraints(&answer, &labels, &neutral_template());
        assert_eq!((roles[0].age, roles[1].age), ((60, 69), (20, 29)));
        assert_eq!(pairs[0].max_age_gap, Some(31));
    }
}

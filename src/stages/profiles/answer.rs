//! Step `profiles`: each role's expression style, conflict characteristic and a short profile.
//!
//! The model suggests what fits the scene naturally ([`ProfileSuggestions`]), including which
//! non-competing characteristic a role would take if it must not compete; the benchmark-wide
//! [`balance_conflict_intensity`](crate::annotation::balance::balance_conflict_intensity) then
//! decides the
//! characteristics actually assigned, and [`ScenarioProfiles::from_balanced`] joins the two.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::annotation::balance::{BalancedProfile, RoleSuggestion, ScenarioSuggestion};
use crate::annotation::check::{
    Checked, Problems, Rejection, deserialize_answer, forbid_absent_cast, match_roles, named_role,
    require_prose,
};
use crate::annotation::context::ScenarioContext;
use crate::annotation::gates::{forbid_annotation_terms, gate_free_text};
use crate::annotation::schema;
use crate::annotation::vocab::{
    ConflictCharacteristic, ConflictIntensity, ExpressionStyle, Gender,
};
use crate::annotation::words::words;
use crate::stages::annotate::ANNOTATION;
use crate::stages::annotate::answer::{RoleAnnotation, age_range};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfileSuggestions {
    pub roles: Vec<RoleProfileSuggestion>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleProfileSuggestion {
    pub name: String,
    /// Who the character is, in a sentence or two; it names neither the expression style nor
    /// the conflict characteristic, so it still holds when balancing changes them.
    pub profile: String,
    pub expression_style: ExpressionStyle,
    pub conflict_characteristic: ConflictCharacteristic,
    /// What the role does instead if the benchmark's balance says it must not compete.
    pub non_competing_alternative: ConflictCharacteristic,
}

named_role!(RoleProfileSuggestion);

pub type Answer = ProfileSuggestions;

/// The profiles a scenario ends up with after balancing: what later steps read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScenarioProfiles {
    pub conflict_intensity: ConflictIntensity,
    pub roles: Vec<RoleProfile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RoleProfile {
    pub name: String,
    pub profile: String,
    pub expression_style: ExpressionStyle,
    pub conflict_characteristic: ConflictCharacteristic,
    /// What the model read in the scene before balancing moved it: the label a truth about the
    /// scene is scored against, since balancing answers the benchmark's quotas, not the scene.
    pub natural_conflict_characteristic: ConflictCharacteristic,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ProfilesError {
    #[error(
        "scenario {scenario_id}: the balanced profile has {balanced} roles where the model's \
         suggestions have {suggested}; balance the suggestions of this same answer"
    )]
    RoleMismatch {
        scenario_id: String,
        balanced: usize,
        suggested: usize,
    },
}

impl ProfileSuggestions {
    /// The suggestion the balancer starts from.
    pub fn to_suggestion(&self, scenario_id: &str) -> ScenarioSuggestion {
        ScenarioSuggestion {
            scenario_id: scenario_id.to_string(),
            roles: self
                .roles
                .iter()
                .map(|role| RoleSuggestion {
                    name: role.name.clone(),
                    expression_style: role.expression_style,
                    conflict_characteristic: role.conflict_characteristic,
                    non_competing_alternative: role.non_competing_alternative,
                })
                .collect(),
        }
    }
}

impl ScenarioProfiles {
    /// The balancer's assignment with each role's profile text from the model's suggestions.
    pub fn from_balanced(
        suggestions: &ProfileSuggestions,
        balanced: &BalancedProfile,
    ) -> Result<ScenarioProfiles, ProfilesError> {
        // The balancer keeps the suggestion's roles in their order: role `i` of the one is
        // role `i` of the other.
        if balanced.roles.len() != suggestions.roles.len() {
            return Err(ProfilesError::RoleMismatch {
                scenario_id: balanced.scenario_id.clone(),
                balanced: balanced.roles.len(),
                suggested: suggestions.roles.len(),
            });
        }
        let roles = balanced
            .roles
            .iter()
            .zip(&suggestions.roles)
            .map(|(assigned, suggested)| RoleProfile {
                name: assigned.name.clone(),
                profile: suggested.profile.clone(),
                expression_style: assigned.expression_style,
                conflict_characteristic: assigned.conflict_characteristic,
                natural_conflict_characteristic: suggested.conflict_characteristic,
            })
            .collect();
        Ok(ScenarioProfiles {
            conflict_intensity: balanced.assigned,
            roles,
        })
    }
}

pub fn schema() -> Value {
    schema::object(
        "Each participant's profile as the scene suggests it.",
        &[(
            "roles",
            schema::roles(
                "One entry per participant.",
                &[
                    (
                        "profile",
                        schema::text(
                            "One or two sentences on who the character is in this scene, without \
                             naming a style or conflict mode.",
                        ),
                    ),
                    (
                        "expression_style",
                        schema::label::<ExpressionStyle>(
                            "How the character lets their inner state show.",
                        ),
                    ),
                    (
                        "conflict_characteristic",
                        schema::label::<ConflictCharacteristic>(
                            "How the character handles the conflict.",
                        ),
                    ),
                    (
                        "non_competing_alternative",
                        schema::labels_of(
                            "What the character would do instead if they must not compete.",
                            ConflictCharacteristic::NON_COMPETING,
                        ),
                    ),
                ],
            ),
        )],
    )
}

/// The answer, usable or not: an error names what leaves it unusable (with every other
/// problem, for the re-ask); a usable answer carries the quality gates it fails.
pub fn check(
    value: &Value,
    ctx: &ScenarioContext,
) -> Result<Checked<ProfileSuggestions>, Rejection> {
    let answer: ProfileSuggestions =
        deserialize_answer::<ProfileSuggestions, RoleProfileSuggestion>(value)?;
    let mut problems = Problems::new();
    let roles = match_roles(answer.roles, ctx, &mut problems);
    for role in &roles {
        let who = Some(role.name.as_str());
        if require_prose(&mut problems, who, "profile", &role.profile) {
            forbid_absent_cast(&mut problems, who, "profile", &role.profile, ctx);
            gate_free_text(&mut problems, who, "profile", &role.profile, ctx);
            forbid_annotation_terms(&mut problems, &role.name, "profile", &role.profile);
            let annotated = ctx.role_named(&role.name).and_then(|id| {
                ctx.earlier(&ANNOTATION)
                    .and_then(|a| a.roles.into_iter().nth(id.index()))
            });
            if let Some(annotated) = annotated {
                forbid_contradicting_annotation(&mut problems, &role.profile, &annotated, ctx);
            }
        }
        if role.non_competing_alternative.is_competing() {
            let message = format!(
                "{}: non_competing_alternative cannot be competing; choose one of collaborating, \
                 compromising, avoiding, accommodating",
                role.name
            );
            let who = Some(role.name.as_str());
            problems.gate(
                "competing_alternative",
                who,
                "non_competing_alternative",
                message,
            );
        }
    }
    problems.finish_checked(ProfileSuggestions { roles })
}

const MALE_NOUNS: &[&str] = &[
    "man",
    "boy",
    "gentleman",
    "father",
    "husband",
    "brother",
    "son",
];
const FEMALE_NOUNS: &[&str] = &[
    "woman", "girl", "lady", "mother", "wife", "sister", "daughter",
];

/// Reports a profile that says of its own character a gender or an age the annotation of the
/// scene contradicts (the 1.5B model: "Mila is a nurse, a woman in her 30s" for the retired
/// teacher in her sixties). Only what a sentence says of the character before it names anyone
/// else counts, so "Noor helps Mila, a woman in her sixties" is about Mila.
pub fn forbid_contradicting_annotation(
    problems: &mut Problems,
    profile: &str,
    annotated: &RoleAnnotation,
    ctx: &ScenarioContext,
) {
    let who = annotated.name.as_str();
    let mut claims: Vec<String> = Vec::new();
    for sentence in profile.split_inclusive(['.', '!', '?']) {
        let plain = words(sentence);
        let mentions = ctx.mentions(&plain);
        let Some(&(own_end, first)) = mentions.first() else {
            continue;
        };
        if first != who {
            continue;
        }
        let until = mentions
            .iter()
            .find(|(_, name)| *name != who)
            .map_or(plain.len(), |(end, name)| end + 1 - words(name).len());
        let span = &plain[(own_end + 1).min(until)..until];
        let says = |nouns: &[&str]| {
            span.iter()
                .find(|w| nouns.contains(&w.as_str()))
                .map(|noun| format!("a {noun}"))
        };
        match annotated.gender {
            Gender::Male => claims.extend(says(FEMALE_NOUNS)),
            Gender::Female => claims.extend(says(MALE_NOUNS)),
            Gender::NonBinary | Gender::Unknown => {}
        }
        if let Some((low, high)) = age_range(&annotated.age) {
            let stated = span.windows(3).find_map(|w| {
                (w[0] == "in" && ["his", "her", "their"].contains(&w[1].as_str()))
                    .then(|| age_range(&w[2]).map(|range| (w[2].clone(), range)))
                    .flatten()
            });
            if let Some((said, (said_low, said_high))) = stated
                && (said_high < low || said_low > high)
            {
                claims.push(format!("in their {said}"));
            }
        }
    }
    if !claims.is_empty() {
        problems.gate(
            "profile_against_annotation",
            Some(who),
            "profile",
            format!(
                "{who}: profile says {who} is {} where the scene's annotation has {who} as {}, {}; \
             keep to who {who} is",
                claims.join(", "),
                annotated.gender.as_str(),
                annotated.age
            ),
        );
    }
}

/// [`check`] for a clean answer: any problem is an error.
pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<ProfileSuggestions, Rejection> {
    check(value, ctx).and_then(Checked::clean)
}

/// An answer the checks keep clean for a plain scene between `scene.names` (see
/// [`crate::stages::descriptor::StepDescriptor::example`]).
pub fn example(scene: &crate::stages::descriptor::Example<'_>) -> Value {
    json!({"roles": scene.roles(&|name, _| json!({
        "name": name,
        "profile": format!("{name} is moving house."),
        "expression_style": "honest_signaling",
        "conflict_characteristic": "competing",
        "non_competing_alternative": "compromising",
    }))})
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn annotated(name: &str, gender: Gender, age: &str) -> RoleAnnotation {
        RoleAnnotation {
            name: name.to_string(),
            gender,
            age: age.to_string(),
            occupation: "unknown".to_string(),
        }
    }

    #[test]
    fn a_profile_contradicting_the_annotated_gender_or_age_is_named() {
        let ctx = crate::stages::fixture::context();
        let check = |profile: &str, role: &RoleAnnotation| {
            let mut problems = Problems::new();
            forbid_contradicting_annotation(&mut problems, profile, role, &ctx);
            problems
                .finish()
                .err()
                .map(|rejection| rejection.message())
                .unwrap_or_default()
        };
        let rachel = annotated("Rachel", Gender::Female, "60-69");
        let found = check(
            "Rachel is a nurse, a woman in her 30s, who speaks plainly.",
            &rachel,
        );
        assert!(
            found.contains("Rachel: profile says Rachel is in their 30s"),
            "{found}"
        );
        let ross = annotated("Ross", Gender::Male, "30s");
        let found = check("Ross is a young woman who hides the truth.", &ross);
        assert!(found.contains("Ross is a woman where"), "{found}");
        for fine in [
            "Ross, a nurse in his thirties, gives little ground.",
            // What a sentence says of someone else, after naming them.
            "Ross helps Rachel, a woman in her sixties, and keeps calm.",
            "Ross speaks softly. Rachel is a woman in her twenties.",
            "Ross is Rachel's brother and speaks in his late 30s way.",
        ] {
            let found = check(fine, &ross);
            assert!(found.is_empty(), "{fine}: {found}");
        }
        // No claim where the annotation knows nothing.
        let unknown = annotated("Ross", Gender::Unknown, "unknown");
        assert!(check("Ross is a woman in her 60s.", &unknown).is_empty());
    }
    use crate::annotation::balance::balance_conflict_intensity;
    use crate::annotation::schema::strictness_problems;
    use crate::stages::fixture;

    fn good() -> Value {
        json!({"roles": [
            {"name": "Ross", "profile": "Rachel's old friend, who wants the truth out.",
             "expression_style": "honest_signaling",
             "conflict_characteristic": "competing", "non_competing_alternative": "compromising"},
            {"name": "Rachel", "profile": "Works at the coffee house and keeps a secret.",
             "expression_style": "strategic_withholding",
             "conflict_characteristic": "avoiding", "non_competing_alternative": "avoiding"},
        ]})
    }

    #[test]
    fn schema_is_strict_and_alternatives_exclude_competing() {
        let schema = schema();
        assert_eq!(strictness_problems(&schema), Vec::<String>::new());
        let role_fields = &schema["properties"]["roles"]["items"]["properties"];
        let alternatives = &role_fields["non_competing_alternative"]["enum"];
        assert!(
            !alternatives
                .as_array()
                .unwrap()
                .contains(&json!("competing"))
        );
    }

    #[test]
    fn accepts_and_joins_with_the_balanced_assignment() {
        let answer = validate(&good(), &fixture::context()).unwrap();
        let suggestion = answer.to_suggestion("friends/s01e01/sc001");
        let balanced = balance_conflict_intensity(&[suggestion], 7).unwrap();
        let profiles = ScenarioProfiles::from_balanced(&answer, &balanced[0]).unwrap();
        assert_eq!(profiles.conflict_intensity, balanced[0].assigned);
        assert_eq!(
            profiles.roles[1].profile,
            "Works at the coffee house and keeps a secret."
        );
        // One scenario fills the high quota: Rachel is moved to compete, and the record still
        // says what the model read in the scene.
        let rachel = &profiles.roles[1];
        assert_eq!(
            (
                rachel.conflict_characteristic,
                rachel.natural_conflict_characteristic
            ),
            (
                ConflictCharacteristic::Competing,
                ConflictCharacteristic::Avoiding
            )
        );
    }

    #[test]
    fn rejects_competing_alternative_and_absent_characters() {
        let mut value = good();
        value["roles"][0]["non_competing_alternative"] = json!("competing");
        value["roles"][1]["profile"] = json!("Monica's roommate.");
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(
            error.contains("Ross: non_competing_alternative cannot be competing"),
            "{error}"
        );
        assert!(error.contains("Rachel: profile mentions Monica"), "{error}");
    }

    #[test]
    fn rejects_a_profile_that_copies_the_dialogue_or_repeats_itself() {
        let mut value = good();
        value["roles"][0]["profile"] =
            json!("Ross: You said you'd tell her before the party. It's your secret, not mine.");
        value["roles"][1]["profile"] =
            json!("Rachel keeps a secret. Rachel keeps a secret. Rachel keeps a secret.");
        let error = validate(&value, &fixture::context()).unwrap_err().message();
        assert!(
            error.contains(
                "Ross: profile copies the dialogue (\"you said you'd tell her before the party\")"
            ),
            "{error}"
        );
        assert!(
            error.contains("Rachel: profile says \"rachel keeps a secret\" more than once"),
            "{error}"
        );
    }
}

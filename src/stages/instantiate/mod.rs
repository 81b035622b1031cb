//! `instantiate` (AgentSense): synthetic casts for a scenario template, `instances` of them
//! (AgentSense: five per template). Each instance is asked for on its own, with a seed drawn
//! from the stage's seed and the instance's number, so an instance is the same in every build
//! and raising `instances` asks only for the new ones (the others come back from the request
//! memo unchanged). A cast is checked in code against the rules `relationships` made, against
//! the show's names and within itself; a cast that breaks one is sent back naming the rule and
//! why it holds, at most five times, and then the cast that breaks the fewest is kept, flagged
//! with them (a cast with a field left empty is not usable, and fails the scenario). What each
//! character sees of the others follows their relationship: family, friends and partners all
//! but the secret; acquaintances the name, occupation and pronouns; strangers the pronouns.

pub mod answer;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dag::port::{Port, PortId};
use crate::dag::problem::Problem;
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{Env, JobCtx, Level, Outputs, Stage, StageFailure};
use crate::range::{BadSetting, Range, Validate, check};
use crate::stages::llm_step::{ModelRole, Sampling, StepSchema, ask, model_identity, ranges};
use crate::stages::relationships::answer::{
    PairConstraint, Relationship, RoleConstraints, constraints,
};
use crate::stages::template::TEMPLATE;
use crate::stages::{annotate, goals, parse_script, relationships};
use crate::text::role::RoleId;
use answer::Character;

/// The scenario's instances, per scenario.
pub const INSTANCES: Port<Instances> = Port::item(NAME, "instances");

const NAME: &str = "instantiate";
/// Its prompt template.
pub const PROMPT: &str = "instantiate.j2";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "AgentSense: synthetic casts per template, the relationships' rules checked (LLM)",
    version: 9,
    prompts: &[PROMPT],
    defaults: Defaults::of::<InstantiateParams>(),
    load: load_stage::<InstantiateParams, Instantiate>,
};

/// instantiate: `instances` synthetic casts per scenario template, each asked for with its own
/// seed (from `seed` and the instance's number), SOTOPIA's profile fields per character. The
/// rules of `relationships` (genders, ages, occupations to keep, friends' age gaps), the show's
/// names and unique names are checked in code; a cast that breaks one is asked again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct InstantiateParams {
    /// The model of [llm.roles] in viss.toml: annotator, writer or describer.
    pub role: ModelRole,
    /// Synthetic casts per template, 1 to 100. Raising it asks only for the new ones.
    pub instances: u32,
    /// Where the instances' seeds are drawn from; another seed, other casts. Any 64-bit
    /// unsigned integer.
    pub seed: u64,
    /// Sampling temperature, 0 to 2: above 0, so that instances with other seeds differ.
    pub temperature: f32,
    /// Answer tokens at most, 1 to 131072.
    pub max_tokens: u32,
}

impl Default for InstantiateParams {
    fn default() -> Self {
        Self {
            role: ModelRole::Annotator,
            instances: 5,
            seed: 2025,
            temperature: 0.8,
            max_tokens: 2048,
        }
    }
}

const INSTANCES_RANGE: Range = Range::new(1.0, 100.0);

impl Validate for InstantiateParams {
    fn validate(&self) -> Result<(), BadSetting> {
        check("instances", self.instances, INSTANCES_RANGE)?;
        check("temperature", self.temperature, ranges::TEMPERATURE)?;
        check("max_tokens", self.max_tokens, ranges::MAX_TOKENS)
    }
}

pub struct Instantiate(InstantiateParams);

impl From<InstantiateParams> for Instantiate {
    fn from(params: InstantiateParams) -> Self {
        Self(params)
    }
}

impl Instantiate {
    fn sampling(&self) -> Sampling {
        Sampling {
            role: self.0.role,
            temperature: self.0.temperature,
            max_tokens: self.0.max_tokens,
            ..Sampling::annotator()
        }
    }
}

/// What one character may know of another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Sees {
    /// Family, friends, partners: the whole profile but the secret.
    AllButSecret,
    /// Acquaintances: name, occupation, pronouns.
    NameOccupationPronouns,
    /// Strangers: pronouns only.
    Pronouns,
}

impl Sees {
    pub fn of(relationship: Relationship) -> Sees {
        match relationship {
            Relationship::Family | Relationship::Friend | Relationship::Romantic => {
                Sees::AllButSecret
            }
            Relationship::Acquaintance => Sees::NameOccupationPronouns,
            Relationship::Stranger => Sees::Pronouns,
        }
    }
}

/// What `instantiate` stores for a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Instances {
    pub scenario: String,
    /// The rules every instance keeps.
    pub constraints: Vec<RoleConstraints>,
    pub pairs: Vec<PairConstraint>,
    pub instances: Vec<Instance>,
    /// The stages whose flagged answers the instances rest on (the template's, and
    /// `relationships` when its answer is flagged): not clean until a person reviewed them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flagged_upstream: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Instance {
    /// 0-based; instance `i<index>` of the scenario.
    pub index: u32,
    pub seed: u64,
    pub characters: Vec<Character>,
    /// What each character sees of each other one.
    pub sees: Vec<(RoleId, RoleId, Sees)>,
    /// Why each cast the model gave before this one was rejected.
    pub rejected: Vec<crate::annotation::check::Refusal>,
    /// The rules the kept cast still breaks after its re-asks (an age out of its range, a
    /// name of the show): the instance is flagged and the export leaves it out (export's
    /// `include_flagged` keeps it, with these problems).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
    /// What a person said of this cast (`viss review`): set only in what later stages read,
    /// never in the stage's own stored record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<crate::stages::llm_step::ReviewMark>,
}

impl Instance {
    /// A person rejected this cast (`viss review`): left out of everything.
    pub fn rejected_by_review(&self) -> bool {
        self.review
            .as_ref()
            .is_some_and(|mark| mark.verdict == crate::stages::llm_step::ReviewOutcome::Rejected)
    }

    /// Breaks no rule (or a person accepted it as it is) and no person rejected it.
    pub fn clean(&self) -> bool {
        self.problems.is_empty() && !self.rejected_by_review()
    }
}

/// `text` of a template with every slot (`{r1}`) replaced by the full name of the character
/// who fills it.
pub fn fill_slots(text: &str, characters: &[Character]) -> String {
    characters.iter().fold(text.to_string(), |text, character| {
        text.replace(
            &crate::stages::anonymize::answer::slot(character.slot),
            &character.full_name(),
        )
    })
}

/// The seed of instance `index`: the same for the same stage seed in every build, another for
/// every instance.
pub fn instance_seed(seed: u64, index: u32) -> u64 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&seed.to_le_bytes());
    hasher.update(&index.to_le_bytes());
    u64::from_le_bytes(
        hasher.finalize().as_bytes()[..8]
            .try_into()
            .expect("8 bytes"),
    )
}

#[derive(Debug, thiserror::Error)]
pub enum InstantiateError {
    #[error("{scenario}: instance i{index} could not be cast: {reason}")]
    Instance {
        scenario: String,
        index: u32,
        reason: String,
    },
}

/// What the prompt sees: the template and each slot's rules in words.
#[derive(Serialize)]
struct PromptContext<'a> {
    background: &'a str,
    slots: Vec<SlotView>,
    forbidden_names: &'a [String],
    instance: u32,
}

#[derive(Serialize)]
struct SlotView {
    slot: String,
    goals: Vec<String>,
    rules: Vec<String>,
    relations: Vec<String>,
}

fn slot_views(
    template: &crate::stages::anonymize::answer::Template,
    rules: &[RoleConstraints],
    pairs: &[PairConstraint],
) -> Vec<SlotView> {
    rules
        .iter()
        .map(|rule| {
            let goals = template
                .roles
                .iter()
                .find(|r| r.role == rule.role)
                .map(|r| r.goals.iter().map(|g| g.goal.clone()).collect())
                .unwrap_or_default();
            let (low, high) = rule.age;
            let mut rules = vec![format!("age {low} to {high}")];
            rules.extend(rule.gender.map(|g| format!("gender {g}")));
            rules.extend(rule.occupation.as_ref().map(|o| format!("occupation {o}")));
            let relations = pairs
                .iter()
                .filter_map(|pair| {
                    let other = if pair.first == rule.role {
                        pair.second
                    } else if pair.second == rule.role {
                        pair.first
                    } else {
                        return None;
                    };
                    Some(match pair.max_age_gap {
                        Some(gap) => format!(
                            "{} of {{{other}}}, at most {gap} years apart in age",
                            pair.relationship
                        ),
                        None => format!("{} of {{{other}}}", pair.relationship),
                    })
                })
                .collect();
            SlotView {
                slot: rule.role.to_string(),
                goals,
                rules,
                relations,
            }
        })
        .collect()
}

#[async_trait::async_trait]
impl Stage<Env> for Instantiate {
    fn level(&self) -> Level {
        Level::Scenario
    }

    fn inputs(&self) -> Vec<PortId> {
        vec![
            parse_script::CONTEXT.id(),
            annotate::ANNOTATION.id(),
            goals::GOALS.id(),
            relationships::RELATIONSHIPS.id(),
            TEMPLATE.id(),
        ]
    }

    fn outputs(&self) -> Vec<PortId> {
        vec![
            INSTANCES.id(),
            crate::stages::llm_step::answers_cost(NAME).id(),
        ]
    }

    fn models(
        &self,
        Env { project, .. }: &Env,
        store: &Store,
    ) -> Result<BTreeMap<String, String>, StageFailure> {
        model_identity(&self.sampling(), project, store)
    }

    /// The checks every LLM answer shares, and the schema of a character it asks for.
    fn code(&self) -> BTreeMap<String, String> {
        crate::stages::llm_step::step_code(&answer::schema(&[]).0)
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        if let Some(skipped) = goals::skipped_without_goals(ctx) {
            return Ok(skipped);
        }
        let scenario = ctx.read(&parse_script::CONTEXT)?;
        let annotation = ctx.read(&annotate::ANNOTATION)?.answer;
        let relations = ctx.read(&relationships::RELATIONSHIPS)?;
        let template = ctx.read(&TEMPLATE)?;
        let mut flagged_upstream = template.flagged_upstream;
        if !relations.problems.is_empty() {
            flagged_upstream.push(relationships::RELATIONSHIPS.id().stage.to_string());
        }
        let (relations, template) = (relations.answer, template.template);
        let (rules, pairs) = constraints(&relations, &annotation, &template);
        let forbidden =
            crate::stages::anonymize::answer::person_names(&scenario.cast, &scenario.participants);
        let (portable, decoder) = answer::schema(&rules);
        let sampling = self.sampling();
        let sees: Vec<(RoleId, RoleId, Sees)> = pairs
            .iter()
            .flat_map(|pair| {
                let sees = Sees::of(pair.relationship);
                [
                    (pair.first, pair.second, sees),
                    (pair.second, pair.first, sees),
                ]
            })
            .collect();
        let mut instances = Vec::new();
        for index in 0..self.0.instances {
            let seed = instance_seed(self.0.seed, index);
            let context = PromptContext {
                background: &template.background,
                slots: slot_views(&template, &rules, &pairs),
                forbidden_names: &forbidden,
                instance: index + 1,
            };
            let mut decoder = decoder.clone();
            answer::bound_decoder_ages(&mut decoder, &answer::decoder_ages(&rules, &pairs, seed));
            let schema = StepSchema {
                name: NAME.to_string(),
                portable: portable.clone(),
                decoder: Some(decoder),
                // The embedded model is kept from writing the show's names at all.
                avoid_words: forbidden.clone(),
                avoid_in_own_part: Vec::new(),
                refine_role: None,
            };
            let instance_sampling = Sampling {
                seed: Some(seed),
                ..sampling.clone()
            };
            let checked = |value: &serde_json::Value| {
                answer::check(value, &rules, &pairs, &forbidden, &scenario)
            };
            let cast = ask(
                ctx,
                &instance_sampling,
                PROMPT,
                &context,
                Vec::new(),
                schema,
                checked,
            )
            .await
            .map_err(|failure| InstantiateError::Instance {
                scenario: scenario.scenario_id.clone(),
                index,
                reason: failure.to_string(),
            })?;
            instances.push(Instance {
                index,
                seed,
                characters: cast.answer.characters,
                sees: sees.clone(),
                rejected: cast.rejected,
                problems: cast.problems,
                review: None,
            });
        }
        let record = Instances {
            scenario: scenario.scenario_id.clone(),
            constraints: rules,
            pairs,
            instances,
            flagged_upstream,
        };
        // What `viss status` lists as flagged: each kept cast's broken rules, by instance.
        let problems = record
            .instances
            .iter()
            .flat_map(|instance| {
                instance.problems.iter().map(move |problem| Problem {
                    message: format!("instance i{}: {}", instance.index, problem.message),
                    ..problem.clone()
                })
            })
            .collect();
        let mut outputs = Outputs {
            problems,
            ..Outputs::default()
        };
        outputs.put(ctx, &INSTANCES, &record)?;
        crate::stages::llm_step::put_answers_cost(ctx, &mut outputs, NAME)?;
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instances_seed_depends_on_the_stage_seed_and_its_number_only() {
        assert_eq!(instance_seed(2025, 3), instance_seed(2025, 3));
        assert_ne!(instance_seed(2025, 3), instance_seed(2025, 4));
        assert_ne!(instance_seed(2025, 3), instance_seed(2026, 3));
    }

    #[test]
    fn what_a_character_sees_follows_the_relationship() {
        assert_eq!(Sees::of(Relationship::Romantic), Sees::AllButSecret);
        assert_eq!(
            Sees::of(Relationship::Acquaintance),
            Sees::NameOccupationPronouns
        );
        assert_eq!(Sees::of(Relationship::Stranger), Sees::Pronouns);
    }
}

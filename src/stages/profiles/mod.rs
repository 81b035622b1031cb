//! `profiles`: each role's expression style (honest signaling, strategic withholding,
//! deception, exaggeration, suppression) and conflict characteristic (competing, collaborating,
//! compromising, avoiding, accommodating). A scenario's conflict intensity follows from its
//! roles: high when all compete, low when none does, medium otherwise.
//!
//! The model suggests what each scene suggests naturally, one request per scenario (cached, so
//! adding a scenario asks only about it). The benchmark then balances intensities exactly
//! (a third each; the paper: 80/80/80 of 240), moving as few scenarios as the quotas allow,
//! chosen by a seeded hash of the scenario id. Each scenario's record says why it got what it got.

pub mod answer;

use std::collections::BTreeMap;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use crate::annotation::{BalancedProfile, Quotas, balance_conflict_intensity};
use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{AppCtx, Env, JobCtx, Level, Outputs, Stage, StageFailure};
use crate::stages::annotate::ANNOTATION;
use crate::stages::describe::DESCRIPTION;
use crate::stages::llm_step::{
    Asked, ProfileRecord, PromptRead, Sampling, ask, instructions, model_identity, prompt_context,
};
use crate::stages::parse_script;
use crate::stages::profiles::answer::{self as step, ProfileSuggestions, ScenarioProfiles};

/// Each scenario's balanced profiles, per scenario.
pub const PROFILE: Port<ProfileRecord> = Port::child(NAME, "profile");
/// The benchmark-wide balance: every scenario's natural and assigned intensity.
pub const BALANCE: Port<BalanceSummary> = Port::private(NAME, "balance");

/// The earlier steps' ports this step reads for every scenario, whose answers its prompt sees.
pub const READS: &[&dyn PromptRead] = &[&ANNOTATION, &DESCRIPTION];

const NAME: &str = "profiles";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "expression style + conflict characteristic per role, conflict intensity balanced \
        across the benchmark (LLM)",
    version: 5,
    prompts: &["profiles.j2"],
    defaults: Defaults::of::<ProfilesParams>(),
    load: load_stage::<ProfilesParams, Profiles>,
};

/// profiles: each role's expression style and conflict characteristic, with the scenario's
/// conflict intensity (high: all roles competing; medium: mixed; low: none competing) balanced
/// across the benchmark: exactly a third each (the paper: 80/80/80 of 240; what is left over
/// goes one each to high, then medium). The model first suggests what each scene suggests
/// (prompts/profiles.j2, one cached request per scenario); as few scenarios as the quotas allow
/// are then moved, chosen by a hash of balance_seed and the scenario id. Every scenario's
/// record says why (`viss show profiles benchmark profile@<scenario>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ProfilesParams {
    /// The model of [llm.roles] in viss.toml: annotator, writer or describer.
    pub role: crate::stages::llm_step::ModelRole,
    /// Sampling temperature, 0 to 2.
    pub temperature: f32,
    /// Any 64-bit unsigned integer; unset: the server's choice.
    pub seed: Option<u64>,
    /// Answer tokens at most, 1 to 131072.
    pub max_tokens: u32,
    /// Decides which scenarios move when a quota is full; another seed, another balanced set.
    /// Any 64-bit unsigned integer.
    pub balance_seed: u64,
    /// Scenarios asked about at once (the endpoint's own limits still apply), 1 to 1024.
    pub concurrency: usize,
}

impl crate::range::Validate for ProfilesParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        use crate::range::{Range, check};
        self.sampling().validate()?;
        check("concurrency", self.concurrency, Range::new(1.0, 1024.0))
    }
}

impl Default for ProfilesParams {
    fn default() -> Self {
        let sampling = Sampling::default();
        Self {
            role: sampling.role,
            temperature: sampling.temperature,
            seed: sampling.seed,
            max_tokens: sampling.max_tokens,
            balance_seed: 2025,
            concurrency: 8,
        }
    }
}

pub struct Profiles(ProfilesParams);

impl From<ProfilesParams> for Profiles {
    fn from(params: ProfilesParams) -> Self {
        Self(params)
    }
}

impl ProfilesParams {
    fn sampling(&self) -> Sampling {
        Sampling {
            role: self.role,
            temperature: self.temperature,
            seed: self.seed,
            max_tokens: self.max_tokens,
            attach_group_image: None,
            // Profiles are balanced across roles, so a role's profile is asked with the others.
            per_role: Some(false),
        }
    }
}

impl Profiles {
    fn sampling(&self) -> Sampling {
        self.0.sampling()
    }
}

/// The benchmark-wide view: every scenario's natural and assigned intensity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BalanceSummary {
    pub balance_seed: u64,
    pub quotas: Quotas,
    pub scenarios: Vec<BalancedProfile>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProfilesError {
    #[error("profiles: no scenario has a description yet; run `describe` first")]
    NoScenarios,
}

#[async_trait::async_trait]
impl Stage<Env> for Profiles {
    fn level(&self) -> Level {
        Level::Benchmark
    }

    fn inputs(&self) -> Vec<PortId> {
        let reads = READS.iter().map(|read| read.port());
        std::iter::once(parse_script::CONTEXT.id())
            .chain(reads)
            .collect()
    }

    fn outputs(&self) -> Vec<PortId> {
        [PROFILE.id(), BALANCE.id()].into()
    }

    fn models(
        &self,
        Env { project, .. }: &Env,
        store: &Store,
    ) -> Result<BTreeMap<String, String>, StageFailure> {
        model_identity(&self.sampling(), project, store)
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let scenario_ids: Vec<String> = ctx
            .inputs_of(DESCRIPTION.id())
            .map(|input| input.item.clone())
            .collect();
        if scenario_ids.is_empty() {
            return Err(ProfilesError::NoScenarios.into());
        }
        let sampling = self.sampling();
        let answers: Vec<Result<(String, Asked<ProfileSuggestions>), StageFailure>> =
            futures_util::stream::iter(
                scenario_ids
                    .into_iter()
                    .map(|id| suggest(ctx, &sampling, id)),
            )
            .buffered(self.0.concurrency.max(1))
            .collect()
            .await;
        let answers: Vec<(String, Asked<ProfileSuggestions>)> =
            answers.into_iter().collect::<Result<_, _>>()?;
        let suggestions: Vec<_> = answers
            .iter()
            .map(|(id, asked)| asked.answer.to_suggestion(id))
            .collect();
        let balanced = balance_conflict_intensity(&suggestions, self.0.balance_seed)?;
        let model = sampling.role.model(ctx.llm()).to_string();
        let mut outputs = Outputs::default();
        for ((id, asked), assignment) in answers.iter().zip(&balanced) {
            debug_assert_eq!(id, &assignment.scenario_id);
            let record = ProfileRecord {
                scenario: id.clone(),
                model: model.clone(),
                natural_intensity: assignment.natural,
                explanation: assignment.explanation.clone(),
                profiles: ScenarioProfiles::from_balanced(&asked.answer, assignment)?,
                rejected: asked.rejected.clone(),
            };
            outputs.put_child(ctx, &PROFILE, id, &record)?;
        }
        let summary = BalanceSummary {
            balance_seed: self.0.balance_seed,
            quotas: Quotas::for_count(balanced.len()),
            scenarios: balanced,
        };
        outputs.put(ctx, &BALANCE, &summary)?;
        Ok(outputs)
    }
}

/// The model's natural profile suggestion for one scenario.
async fn suggest(
    ctx: &JobCtx,
    sampling: &Sampling,
    scenario: String,
) -> Result<(String, Asked<ProfileSuggestions>), StageFailure> {
    let scenario = scenario.as_str();
    let context = ctx.read_child(&parse_script::CONTEXT, scenario)?;
    let mut context = prompt_context(context, READS, |read| read.answer_of(ctx, scenario))?;
    let schema = crate::stages::llm_step::bind_roles(
        "profiles",
        step::schema(),
        &context,
        crate::stages::llm_step::same_role_fields,
    );
    context.instructions = instructions(ctx, "profiles.j2", &schema)?;
    let answer = ask(
        ctx,
        sampling,
        "profiles.j2",
        &context,
        Vec::new(),
        schema,
        |value| step::validate(value, &context),
    )
    .await?;
    Ok((scenario.to_string(), answer))
}

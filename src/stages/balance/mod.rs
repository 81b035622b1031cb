//! `balance`: the benchmark's conflict intensities balanced exactly (a third each; the paper:
//! 80/80/80 of 240). A scenario's intensity follows from its roles' characteristics (high when
//! all compete, low when none does, medium otherwise); as few scenarios are moved as the quotas
//! allow, chosen by a seeded hash of the scenario id, and each scenario's record says why it
//! got what it got. It balances the scenarios whose suggestion (`profiles`) is there: one that
//! failed is left out and holds only itself, and one a reviewer rejected keeps its natural
//! intensity and takes no quota.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::annotation::balance::left_out_of_balance;
use crate::annotation::{BalancedProfile, Quotas, balance_conflict_intensity};
use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::{Env, JobCtx, Level, Outputs, Stage, StageFailure};
use crate::stages::llm_step::{ProfileRecord, ReviewOutcome};
use crate::stages::profiles::SUGGESTION;
use crate::stages::profiles::answer::ScenarioProfiles;

/// Each scenario's balanced profiles, per scenario: what later steps read as `profiles`.
pub const PROFILE: Port<ProfileRecord> = Port::child(NAME, "profile");
/// The benchmark-wide balance: every scenario's natural and assigned intensity.
pub const BALANCE: Port<BalanceSummary> = Port::private(NAME, "balance");

const NAME: &str = "balance";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "conflict intensity balanced across the benchmark from the suggested profiles",
    version: 2,
    prompts: &[],
    defaults: Defaults::of::<BalanceParams>(),
    load: load_stage::<BalanceParams, Balance>,
};

/// balance: the scenarios' conflict intensity (high: all roles competing; medium: mixed; low:
/// none competing) balanced across the benchmark: exactly a third each (what is left over goes
/// one each to high, then medium). As few scenarios as the quotas allow are moved, chosen by a
/// hash of balance_seed and the scenario id. Every scenario's record says why
/// (`viss show balance benchmark profile@<scenario>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BalanceParams {
    /// Decides which scenarios move when a quota is full; another seed, another balanced set.
    /// Any 64-bit unsigned integer.
    pub balance_seed: u64,
}

impl Default for BalanceParams {
    fn default() -> Self {
        Self { balance_seed: 2025 }
    }
}

impl crate::range::Validate for BalanceParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        Ok(())
    }
}

pub struct Balance(BalanceParams);

impl From<BalanceParams> for Balance {
    fn from(params: BalanceParams) -> Self {
        Self(params)
    }
}

/// The benchmark-wide view: every scenario's natural and assigned intensity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BalanceSummary {
    pub balance_seed: u64,
    pub quotas: Quotas,
    pub scenarios: Vec<BalancedProfile>,
}

#[derive(Debug, thiserror::Error)]
pub enum BalanceError {
    #[error("balance: no scenario has suggested profiles yet; `profiles` makes them")]
    NoScenarios,
}

#[async_trait::async_trait]
impl Stage<Env> for Balance {
    fn level(&self) -> Level {
        Level::Benchmark
    }

    fn inputs(&self) -> Vec<PortId> {
        vec![SUGGESTION.id()]
    }

    fn outputs(&self) -> Vec<PortId> {
        [PROFILE.id(), BALANCE.id()].into()
    }

    fn partial_aggregate(&self) -> bool {
        true
    }

    /// Balancing was part of `profiles` until the per-scenario suggestion was split from it.
    fn former_name(&self) -> Option<&'static str> {
        Some("profiles")
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let mut suggestions = BTreeMap::new();
        for input in ctx.inputs_of(SUGGESTION.id()) {
            let record = ctx.read_input(&SUGGESTION, input)?;
            suggestions.insert(input.item.clone(), record);
        }
        if suggestions.is_empty() {
            return Err(BalanceError::NoScenarios.into());
        }
        // A suggestion a person rejected stays out of the benchmark, so it takes no quota;
        // its record is still written, so what reads it says it was rejected.
        let (rejected, counted): (Vec<_>, Vec<_>) = suggestions.iter().partition(|(_, record)| {
            record
                .review
                .as_ref()
                .is_some_and(|mark| mark.verdict == ReviewOutcome::Rejected)
        });
        let natural: Vec<_> = counted
            .iter()
            .map(|(id, record)| record.answer.to_suggestion(id))
            .collect();
        let balanced = balance_conflict_intensity(&natural, self.0.balance_seed)?;
        let left_out: Vec<_> = rejected
            .iter()
            .map(|(id, record)| {
                left_out_of_balance(&record.answer.to_suggestion(id), "rejected in review")
            })
            .collect();
        let mut outputs = Outputs::default();
        for assignment in balanced.iter().chain(&left_out) {
            let record = &suggestions[&assignment.scenario_id];
            let profile = ProfileRecord {
                scenario: assignment.scenario_id.clone(),
                model: record.model.clone(),
                natural_intensity: assignment.natural,
                explanation: assignment.explanation.clone(),
                profiles: ScenarioProfiles::from_balanced(&record.answer, assignment)?,
                rejected: record.rejected.clone(),
                problems: record.problems.clone(),
                flagged_upstream: record.flagged_upstream.clone(),
                review: record.review.clone(),
            };
            outputs.put_child(ctx, &PROFILE, &assignment.scenario_id, &profile)?;
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

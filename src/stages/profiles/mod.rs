//! `profiles`: each role's expression style (honest signaling, strategic withholding,
//! deception, exaggeration, suppression) and conflict characteristic (competing, collaborating,
//! compromising, avoiding, accommodating), as the scene suggests them, with a short profile and
//! what the role would do if it must not compete. One request per scenario, so a scenario whose
//! answer fails holds only itself; `balance` then balances the conflict intensities they imply
//! across the benchmark.

pub mod answer;

use crate::dag::port::Port;
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::stages::annotate::ANNOTATION;
use crate::stages::describe::DESCRIPTION;
use crate::stages::descriptor::step_descriptor;
use crate::stages::llm_step::{Sampling, StepAnswer, StepRecord, scenario_step};
use crate::stages::profiles::answer::ProfileSuggestions;

/// Each scenario's suggested profiles, before the benchmark's balance.
pub const SUGGESTION: Port<StepRecord<ProfileSuggestions>> = Port::item(NAME, "suggestion");

const NAME: &str = "profiles";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "expression style + conflict characteristic per role, as the scene suggests them \
        (LLM)",
    version: 7,
    prompts: &["profiles.j2"],
    defaults: Defaults::of::<ProfilesParams>(),
    load: load_stage::<ProfilesParams, Profiles>,
};

step_descriptor!(
    SUGGESTION,
    crate::stages::profiles::answer,
    include_str!("../../../prompts/profiles.j2"),
    crate::stages::descriptor::Exported::Fields {
        scenario: &[],
        role: &[
            "profile",
            "expression_style",
            "natural_conflict_characteristic"
        ],
    },
);

/// profiles: each role's expression style and conflict characteristic as the scene suggests
/// them (prompts/profiles.j2, one cached request per scenario), with a short profile and the
/// role's non-competing alternative; `balance` then balances the benchmark's conflict
/// intensities. The roles are asked about together (per_role = false), since the balance moves
/// a scene's roles together.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ProfilesParams {
    #[serde(flatten)]
    pub sampling: Sampling,
    /// Before `balance` was a stage of its own, its seed was set here: the default is
    /// accepted (projects made then write it out), any other value is refused with where it
    /// goes now.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub balance_seed: Option<u64>,
    /// Before `profiles` asked per scenario, the scenarios asked at once: accepted and unused
    /// (the build's own job limit now decides).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub concurrency: Option<usize>,
}

impl Default for ProfilesParams {
    fn default() -> Self {
        Self {
            sampling: Sampling {
                per_role: Some(false),
                ..Sampling::annotator()
            },
            balance_seed: None,
            concurrency: None,
        }
    }
}

impl crate::range::Validate for ProfilesParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        let default_seed = crate::stages::balance::BalanceParams::default().balance_seed;
        if let Some(seed) = self.balance_seed.filter(|seed| *seed != default_seed) {
            return Err(crate::range::BadSetting {
                key: "balance_seed".to_string(),
                value: seed.to_string(),
                expected: format!("{default_seed} (or absent) here"),
                advice: "the balance is a stage of its own now: move balance_seed to [params] of \
                         stages/balance.toml",
            });
        }
        self.sampling.validate()
    }
}

impl From<ProfilesParams> for Profiles {
    fn from(params: ProfilesParams) -> Self {
        Self::from(params.sampling)
    }
}

scenario_step!(
    Profiles,
    SUGGESTION,
    crate::stages::profiles::answer,
    [&ANNOTATION, &DESCRIPTION]
);

/// The suggestions as a prompt would read them: no later step does; the balanced profiles
/// (`balance`) are what they read as `profiles`.
impl StepAnswer for ProfileSuggestions {
    const NAME: &'static str = "profile_suggestions";
}

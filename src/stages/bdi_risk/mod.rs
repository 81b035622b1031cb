//! `bdi_risk`: for every role, what it believes, wants and intends in this scene and what it
//! risks if it fails (grounded in the scene only: no personality, emotion or physical action),
//! plus the scenario description revised to agree with them.

pub mod answer;

use crate::dag::port::Port;
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::stages::descriptor::step_descriptor;
use crate::stages::llm_step::{StepAnswer, StepRecord, scenario_step};
use crate::stages::step_params::step_params;
use crate::stages::{annotate, balance, describe};

/// Each role's belief, desire, intention and risk, and a revised description.
pub const BDI_RISK: Port<StepRecord<crate::stages::bdi_risk::answer::BdiRisk>> =
    Port::item(NAME, "bdi_risk");

const NAME: &str = "bdi_risk";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "belief, desire, intention, risk_if_failed per role + revised description (LLM)",
    version: 7,
    prompts: &["bdi_risk.j2", crate::stages::llm_step::ONE_PART_PROMPT],
    defaults: Defaults::of::<BdiRiskParams>(),
    load: load_stage::<BdiRiskParams, BdiRisk>,
};

step_descriptor!(
    BDI_RISK,
    crate::stages::bdi_risk::answer,
    include_str!("../../../prompts/bdi_risk.j2"),
    crate::stages::descriptor::Exported::Fields {
        scenario: &["description"],
        role: &["belief", "desire", "intention", "risk_if_failed"],
    },
);

step_params!(
    /// bdi_risk: belief, desire, intention, risk_if_failed per role (scene only) + a revised
    /// description.
    BdiRiskParams for BdiRisk
);

// The embedded model is kept from writing in the first person, which the validator refuses:
// asked with the role's name before its belief, the 1.5B model wrote "I believe ..." as the
// character in most answers and kept doing so when asked again.
scenario_step!(
    BdiRisk,
    BDI_RISK,
    crate::stages::bdi_risk::answer,
    [
        &annotate::ANNOTATION,
        &describe::DESCRIPTION,
        &balance::PROFILE
    ],
    crate::stages::llm_step::same_role_fields,
    &[crate::annotation::gates::FIRST_PERSON_WORDS]
);

/// Later steps' prompts read the answer as `bdi`.
impl StepAnswer for answer::BdiRisk {
    const NAME: &'static str = "bdi";
}

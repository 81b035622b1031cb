//! `bdi_risk`: for every role, what it believes, wants and intends in this scene and what it
//! risks if it fails (grounded in the scene only: no personality, emotion or physical action),
//! plus the scenario description revised to agree with them.

use crate::dag::spec::{StageKind, load_stage};
use crate::stages::llm_step::{Sampling, scenario_step};

pub const KIND: StageKind = StageKind {
    name: "bdi_risk",
    summary: "belief, desire, intention, risk_if_failed per role + revised description (LLM)",
    default_config: include_str!("../../stages/bdi_risk.toml"),
    load: load_stage::<Sampling, BdiRisk>,
};

scenario_step!(BdiRisk, "bdi_risk", "bdi_risk", crate::annotation::bdi_risk);

//! `describe`: the scenario's background and a description of the situation, consistent with
//! the dialogue (and the group image, when one is described): no appearance, no mental states,
//! no characters beyond the participants.

use crate::dag::spec::{StageKind, load_stage};
use crate::stages::llm_step::{Sampling, scenario_step};

pub const KIND: StageKind = StageKind {
    name: "describe",
    summary: "background + scenario description (LLM)",
    default_config: include_str!("../../stages/describe.toml"),
    load: load_stage::<Sampling, Describe>,
};

scenario_step!(Describe, "describe", "description", crate::annotation::describe);

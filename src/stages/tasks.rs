//! `tasks`: the four role-level tasks a simulated agent is judged on. Expression,
//! characteristic and interaction-regulation tasks (one sentence each, naming the character,
//! judgeable from dialogue, inner thought or visible cues), then the interaction-outcome task:
//! a concrete, observable outcome that needs at least one other character.

use crate::dag::spec::{StageKind, load_stage};
use crate::stages::llm_step::{Sampling, scenario_step};

pub const KIND: StageKind = StageKind {
    name: "tasks",
    summary: "expression, characteristic, interaction-regulation, interaction-outcome tasks (LLM)",
    default_config: include_str!("../../stages/tasks.toml"),
    load: load_stage::<Sampling, Tasks>,
};

scenario_step!(
    Tasks,
    "tasks",
    "tasks",
    crate::annotation::tasks,
    crate::annotation::tasks::narrow_role_for_decoder
);

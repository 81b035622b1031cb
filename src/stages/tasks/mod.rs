//! `tasks`: the four role-level tasks a simulated agent is judged on. Expression,
//! characteristic and interaction-regulation tasks (one sentence each, naming the character,
//! judgeable from dialogue, inner thought or visible cues), then the interaction-outcome task:
//! a concrete, observable outcome that needs at least one other character.

pub mod answer;

use crate::dag::port::Port;
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::stages::descriptor::step_descriptor;
use crate::stages::llm_step::{StepAnswer, StepRecord, scenario_step};
use crate::stages::step_params::step_params;
use crate::stages::{annotate, balance, bdi_risk, describe};

/// Each role's four tasks.
pub const TASKS: Port<StepRecord<crate::stages::tasks::answer::Tasks>> = Port::item(NAME, "tasks");

const NAME: &str = "tasks";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "expression, characteristic, interaction-regulation, interaction-outcome tasks (LLM)",
    version: 8,
    prompts: &["tasks.j2", crate::stages::llm_step::ONE_PART_PROMPT],
    defaults: Defaults::of::<TasksParams>(),
    load: load_stage::<TasksParams, Tasks>,
};

step_descriptor!(
    TASKS,
    crate::stages::tasks::answer,
    include_str!("../../../prompts/tasks.j2"),
    crate::stages::descriptor::Exported::Fields {
        scenario: &[],
        role: &[
            "expression_task",
            "characteristic_task",
            "interaction_regulation_task",
            "interaction_outcome_task",
        ],
    },
);

step_params!(
    /// tasks: expression, characteristic, interaction-regulation and interaction-outcome task per
    /// role.
    TasksParams for Tasks
);

scenario_step!(
    Tasks,
    TASKS,
    crate::stages::tasks::answer,
    [
        &annotate::ANNOTATION,
        &describe::DESCRIPTION,
        &balance::PROFILE,
        &bdi_risk::BDI_RISK
    ],
    crate::stages::tasks::answer::narrow_role_for_decoder
);

/// Later steps' prompts read the answer as `tasks`.
impl StepAnswer for answer::Tasks {
    const NAME: &'static str = "tasks";
}

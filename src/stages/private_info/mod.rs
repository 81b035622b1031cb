//! `private_info` (AgentSense): whether the scenario involves information only some of its
//! characters have and, if it does, for each character with goals the questions only that
//! character can answer, each with its answer, the answer retold as the character's private
//! information and three wrong options. An answer the others could read (in the background or in
//! another character's goals) is rejected in code. The four options and the right one's place
//! among them are made by `questions`, balanced across the benchmark.

pub mod answer;

use crate::dag::port::Port;
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::stages::descriptor::step_descriptor;
use crate::stages::llm_step::{StepAnswer, StepRecord, scenario_step};
use crate::stages::step_params::step_params;
use crate::stages::{describe, goals};

/// The scenario's private information and its questions.
pub const PRIVATE_INFO: Port<StepRecord<crate::stages::private_info::answer::PrivateInfo>> =
    Port::item(NAME, "private_info");

const NAME: &str = "private_info";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "AgentSense: private information and the questions only its holder can answer (LLM)",
    version: 1,
    prompts: &["private_info.j2", crate::stages::llm_step::ONE_PART_PROMPT],
    defaults: Defaults::of::<PrivateInfoParams>(),
    load: load_stage::<PrivateInfoParams, PrivateInfo>,
};

step_descriptor!(
    PRIVATE_INFO,
    crate::stages::private_info::answer,
    include_str!("../../../prompts/private_info.j2"),
    crate::stages::descriptor::Exported::AgentSense,
);

step_params!(
    /// private_info (AgentSense): whether the scenario involves private information and, per
    /// character with goals, up to two questions only that character can answer, with the
    /// answer, the answer as the character's private information and three wrong options.
    PrivateInfoParams for PrivateInfo
);

scenario_step!(
    PrivateInfo,
    PRIVATE_INFO,
    crate::stages::private_info::answer,
    [&describe::DESCRIPTION, &goals::GOALS],
    crate::stages::private_info::answer::narrow_role_for_decoder,
    &[],
    crate::stages::goals::without_goals
);

/// Later steps' prompts read the answer as `private_info`.
impl StepAnswer for answer::PrivateInfo {
    const NAME: &'static str = "private_info";
}

//! `describe`: the scenario's background and a description of the situation, consistent with
//! the dialogue (and the group image, when one is described): no appearance, no mental states,
//! no characters beyond the participants.

pub mod answer;

use crate::annotation::gates;
use crate::dag::port::Port;
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::stages::descriptor::step_descriptor;
use crate::stages::llm_step::{StepAnswer, StepRecord, scenario_step};
use crate::stages::step_params::step_params;
use crate::stages::{annotate, match_roles};

/// The scenario's background and description.
pub const DESCRIPTION: Port<StepRecord<crate::stages::describe::answer::Description>> =
    Port::item(NAME, "description");

const NAME: &str = "describe";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "background + scenario description (LLM)",
    version: 4,
    prompts: &["describe.j2"],
    defaults: Defaults::of::<DescribeParams>(),
    load: load_stage::<DescribeParams, Describe>,
};

step_descriptor!(
    DESCRIPTION,
    crate::stages::describe::answer,
    include_str!("../../../prompts/describe.j2"),
    crate::stages::descriptor::Exported::Fields {
        scenario: &["background"],
        role: &[]
    },
);

step_params!(
    /// describe: background + description consistent with the dialogue (and the group image
    /// when described); no appearance, mental states or new characters.
    ///
    /// The prompt gets what the group frame shows in words (match_roles: who is recognised,
    /// where), so the description agrees with the picture even for a model that cannot see it.
    /// A scenario without video has no match_roles record and is asked from the dialogue alone.
    DescribeParams for Describe
);

scenario_step!(
    Describe,
    DESCRIPTION,
    crate::stages::describe::answer,
    [&annotate::ANNOTATION, &match_roles::ROLE_MATCHES],
    crate::stages::llm_step::same_role_fields,
    &[
        gates::APPEARANCE_TERMS,
        gates::FEELING_TERMS,
        gates::THOUGHT_TERMS
    ]
);

/// Later steps' prompts read the answer as `description`.
impl StepAnswer for answer::Description {
    const NAME: &'static str = "description";
}

//! `relationships` (AgentSense): how the scenario's characters are related (family, friend,
//! romantic, acquaintance, stranger; each pair the same read from both sides) and, per
//! character, whether its age, occupation and gender are almost, maybe or not replaceable
//! without breaking the scene. With `annotate`'s labels they become the rules a synthetic cast
//! must keep ([`answer::constraints`]): what is not replaceable stays, family keeps ages and
//! genders, romantic partners keep their genders, friends keep similar ages, a student stays of
//! school age. The relationship also decides what each character sees of the others.

pub mod answer;
pub mod stated;

use crate::dag::port::Port;
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::stages::descriptor::step_descriptor;
use crate::stages::llm_step::{StepAnswer, StepRecord, scenario_step};
use crate::stages::step_params::step_params;
use crate::stages::{annotate, goals};

/// The scenario's relationships and replaceability.
pub const RELATIONSHIPS: Port<StepRecord<crate::stages::relationships::answer::Relationships>> =
    Port::item(NAME, "relationships");

const NAME: &str = "relationships";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "AgentSense: relationships among the characters and what of each may change (LLM)",
    version: 3,
    prompts: &["relationships.j2", crate::stages::llm_step::ONE_PART_PROMPT],
    defaults: Defaults::of::<RelationshipsParams>(),
    load: load_stage::<RelationshipsParams, Relationships>,
};

step_descriptor!(
    RELATIONSHIPS,
    crate::stages::relationships::answer,
    include_str!("../../../prompts/relationships.j2"),
    crate::stages::descriptor::Exported::AgentSense,
);

step_params!(
    /// relationships (AgentSense): how each pair of characters is related, and whether each
    /// character's age, occupation and gender could change without breaking the scene; the
    /// rules a synthetic cast keeps follow from them.
    RelationshipsParams for Relationships
);

scenario_step!(
    Relationships,
    RELATIONSHIPS,
    crate::stages::relationships::answer,
    [&annotate::ANNOTATION, &goals::GOALS],
    crate::stages::relationships::answer::narrow_role_for_decoder,
    &[],
    crate::stages::goals::without_goals
);

/// Later steps' prompts read the answer as `relationships`.
impl StepAnswer for answer::Relationships {
    const NAME: &'static str = "relationships";
}

//! `affect`: each role's state as the scene opens: an emotion (Joy, Sadness, Fear, Anger,
//! Surprise, Disgust or Neutral), a facial expression and a body action.

pub mod answer;

use crate::dag::port::Port;
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::stages::descriptor::step_descriptor;
use crate::stages::llm_step::{StepAnswer, StepRecord, scenario_step};
use crate::stages::step_params::step_params;
use crate::stages::{annotate, balance, bdi_risk, describe};

/// Each role's initial emotion, facial expression and body action.
pub const AFFECT: Port<StepRecord<crate::stages::affect::answer::Affect>> =
    Port::item(NAME, "affect");

const NAME: &str = "affect";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "initial emotion, facial expression, body action per role (LLM)",
    version: 6,
    prompts: &["affect.j2", crate::stages::llm_step::ONE_PART_PROMPT],
    defaults: Defaults::of::<AffectParams>(),
    load: load_stage::<AffectParams, Affect>,
};

step_descriptor!(
    AFFECT,
    crate::stages::affect::answer,
    include_str!("../../../prompts/affect.j2"),
    crate::stages::descriptor::Exported::Fields {
        scenario: &[],
        role: &["emotion", "facial_expression", "body_action"]
    },
);

step_params!(
    /// affect: initial emotion (Joy/Sadness/Fear/Anger/Surprise/Disgust/Neutral), facial
    /// expression, body action per role.
    AffectParams for Affect
);

scenario_step!(
    Affect,
    AFFECT,
    crate::stages::affect::answer,
    [
        &annotate::ANNOTATION,
        &describe::DESCRIPTION,
        &balance::PROFILE,
        &bdi_risk::BDI_RISK
    ]
);

/// Later steps' prompts read the answer as `affect`.
impl StepAnswer for answer::Affect {
    const NAME: &'static str = "affect";
}

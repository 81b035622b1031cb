//! `affect`: each role's state as the scene opens: an emotion (Joy, Sadness, Fear, Anger,
//! Surprise, Disgust or Neutral), a facial expression and a body action.

pub mod answer;

use crate::dag::port::Port;
use crate::dag::spec::{StageKind, load_stage};
use crate::stages::llm_step::{Sampling, StepAnswer, StepRecord, scenario_step};
use crate::stages::{annotate, bdi_risk, describe, profiles};

/// Each role's initial emotion, facial expression and body action.
pub const AFFECT: Port<StepRecord<crate::stages::affect::answer::Affect>> =
    Port::item(NAME, "affect");

const NAME: &str = "affect";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "initial emotion, facial expression, body action per role (LLM)",
    version: 1,
    prompts: &["affect.j2"],
    default_config: include_str!("../../../stages/affect.toml"),
    load: load_stage::<Sampling, Affect>,
};

scenario_step!(
    Affect,
    AFFECT,
    crate::stages::affect::answer,
    [
        &annotate::ANNOTATION,
        &describe::DESCRIPTION,
        &profiles::PROFILE,
        &bdi_risk::BDI_RISK
    ]
);

/// Later steps' prompts read the answer as `affect`.
impl StepAnswer for answer::Affect {
    const NAME: &'static str = "affect";
}

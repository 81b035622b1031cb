//! `affect`: each role's state as the scene opens: an emotion (Joy, Sadness, Fear, Anger,
//! Surprise, Disgust or Neutral), a facial expression and a body action.

use crate::dag::spec::{StageKind, load_stage};
use crate::stages::llm_step::{Sampling, scenario_step};

pub const KIND: StageKind = StageKind {
    name: "affect",
    summary: "initial emotion, facial expression, body action per role (LLM)",
    default_config: include_str!("../../stages/affect.toml"),
    load: load_stage::<Sampling, Affect>,
};

scenario_step!(Affect, "affect", "affect", crate::annotation::affect);

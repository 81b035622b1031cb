//! `vision_dependence`: whether each role's interaction-outcome task can only be judged by
//! seeing the scene (strongly vision-dependent, naming the visual channel: gaze, facial
//! expression, visible emotion, posture...) or also from the words (weakly).

use crate::dag::spec::{StageKind, load_stage};
use crate::stages::llm_step::{Sampling, scenario_step};

pub const KIND: StageKind = StageKind {
    name: "vision_dependence",
    summary: "strongly / weakly vision-dependent outcome tasks (LLM)",
    default_config: include_str!("../../stages/vision_dependence.toml"),
    load: load_stage::<Sampling, VisionDependence>,
};

scenario_step!(
    VisionDependence,
    "vision_dependence",
    "vision_dependence",
    crate::annotation::vision_dependence,
    crate::annotation::vision_dependence::narrow_role_for_decoder
);

//! `vision_dependence`: whether each role's interaction-outcome task can only be judged by
//! seeing the scene (strongly vision-dependent, naming the visual channel: gaze, facial
//! expression, visible emotion, posture...) or also from the words (weakly).

pub mod answer;

use crate::dag::port::Port;
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::stages::descriptor::step_descriptor;
use crate::stages::llm_step::{NotRead, StepAnswer, StepRecord, scenario_step};
use crate::stages::step_params::step_params;
use crate::stages::{bdi_risk, describe, tasks};

/// How strongly each outcome task depends on seeing the scene, and through which channel.
pub const VISION_DEPENDENCE: Port<
    StepRecord<crate::stages::vision_dependence::answer::VisionDependence>,
> = Port::item(NAME, "vision_dependence");

const NAME: &str = "vision_dependence";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "strongly / weakly vision-dependent outcome tasks (LLM)",
    version: 7,
    prompts: &[
        "vision_dependence.j2",
        crate::stages::llm_step::ONE_PART_PROMPT,
    ],
    defaults: Defaults::of::<VisionDependenceParams>(),
    load: load_stage::<VisionDependenceParams, VisionDependence>,
};

step_descriptor!(
    VISION_DEPENDENCE,
    crate::stages::vision_dependence::answer,
    include_str!("../../../prompts/vision_dependence.j2"),
    crate::stages::descriptor::Exported::Fields {
        scenario: &[],
        role: &[
            "vision_dependence",
            "visual_channels",
            "vision_dependence_reason"
        ],
    },
);

step_params!(
    /// vision_dependence: strongly / weakly vision-dependent interaction-outcome tasks, naming the
    /// visual channel.
    VisionDependenceParams for VisionDependence
);

scenario_step!(
    VisionDependence,
    VISION_DEPENDENCE,
    crate::stages::vision_dependence::answer,
    [
        &describe::DESCRIPTION,
        &tasks::TASKS,
        // The template tests `bdi` (the revised description) but this step has never read
        // bdi_risk: reading it would change every scenario's prompt. The name stays, as null.
        &NotRead(bdi_risk::BDI_RISK)
    ],
    crate::stages::vision_dependence::answer::narrow_role_for_decoder
);

/// Later steps' prompts read the answer as `vision_dependence`.
impl StepAnswer for answer::VisionDependence {
    const NAME: &'static str = "vision_dependence";
}

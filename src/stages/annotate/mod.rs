//! `annotate`: what kind of dialogue the scenario is (information-seeking, deliberation,
//! persuasion or eristic) and, for every participant, gender, age and occupation as far as the
//! dialogue tells them.

pub mod answer;

use crate::dag::port::Port;
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::stages::descriptor::step_descriptor;
use crate::stages::llm_step::{StepAnswer, StepRecord, scenario_step};
use crate::stages::step_params::step_params;

/// The dialogue type and each role's gender, age and occupation.
pub const ANNOTATION: Port<StepRecord<crate::stages::annotate::answer::Annotation>> =
    Port::item(NAME, "annotation");

const NAME: &str = "annotate";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "dialogue type; each role's gender, age, occupation (LLM)",
    version: 4,
    prompts: &["annotate.j2", crate::stages::llm_step::ONE_PART_PROMPT],
    defaults: Defaults::of::<AnnotateParams>(),
    load: load_stage::<AnnotateParams, Annotate>,
};

step_descriptor!(
    ANNOTATION,
    crate::stages::annotate::answer,
    include_str!("../../../prompts/annotate.j2"),
    crate::stages::descriptor::Exported::Fields {
        scenario: &["dialogue_type"],
        role: &["gender", "age", "occupation"]
    },
);

step_params!(
    /// annotate: dialogue type (information-seeking / deliberation / persuasion / eristic) and
    /// each role's gender, age, occupation.
    AnnotateParams for Annotate
);

scenario_step!(
    Annotate,
    ANNOTATION,
    crate::stages::annotate::answer,
    [],
    crate::stages::annotate::answer::narrow_role_for_decoder
);

/// Later steps' prompts read the answer as `annotation`.
impl StepAnswer for answer::Annotation {
    const NAME: &'static str = "annotation";
}

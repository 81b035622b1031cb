//! `annotate`: what kind of dialogue the scenario is (information-seeking, deliberation,
//! persuasion or eristic) and, for every participant, gender, age and occupation as far as the
//! dialogue tells them.

use crate::dag::spec::{StageKind, load_stage};
use crate::stages::llm_step::{Sampling, scenario_step};

pub const KIND: StageKind = StageKind {
    name: "annotate",
    summary: "dialogue type; each role's gender, age, occupation (LLM)",
    default_config: include_str!("../../stages/annotate.toml"),
    load: load_stage::<Sampling, Annotate>,
};

scenario_step!(Annotate, "annotate", "annotation", crate::annotation::annotate);

//! `anonymize` (AgentSense): a scenario template. The model lists what in the scenario's
//! background, goals and private information would tell a reader the show or episode (people
//! outside the scene, places, organisations, distinctive events) with a generic stand-in for
//! each; the code applies them, turns the participants into slots (`{r1}`, `{r2}`, ...), and
//! refuses an answer after which any name, alias or place of the show's manifest, or a
//! participant's name, survives anywhere in the template (ignoring case and plural or
//! possessive endings). The record keeps every replacement, original -> revised, so the
//! dataset's owner can audit or reverse it.

pub mod answer;

use crate::dag::port::Port;
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::stages::descriptor::step_descriptor;
use crate::stages::llm_step::{StepAnswer, StepRecord, scenario_step};
use crate::stages::step_params::step_params;
use crate::stages::{goals, private_info};

/// The scenario's replacements, from which its template is made
/// ([`answer::template`]).
pub const ANONYMIZATION: Port<StepRecord<crate::stages::anonymize::answer::Anonymization>> =
    Port::item(NAME, "anonymization");

const NAME: &str = "anonymize";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "AgentSense: the scenario template, what identifies the show replaced, roles as slots \
              (LLM)",
    version: 5,
    prompts: &["anonymize.j2", crate::stages::llm_step::ONE_PART_PROMPT],
    defaults: Defaults::of::<AnonymizeParams>(),
    load: load_stage::<AnonymizeParams, Anonymize>,
};

step_descriptor!(
    ANONYMIZATION,
    crate::stages::anonymize::answer,
    include_str!("../../../prompts/anonymize.j2"),
    crate::stages::descriptor::Exported::AgentSense,
);

step_params!(
    /// anonymize (AgentSense): the entities of the scenario's background, goals and private
    /// information that identify the show, each with a generic stand-in; the participants become
    /// slots. An answer after which a name or place of the show survives is sent back.
    AnonymizeParams for Anonymize
);

scenario_step!(
    Anonymize,
    ANONYMIZATION,
    crate::stages::anonymize::answer,
    [&goals::GOALS, &private_info::PRIVATE_INFO],
    crate::stages::llm_step::same_role_fields,
    &[],
    crate::stages::goals::without_goals,
    crate::stages::llm_step::nothing_barred_in_own_part,
    crate::stages::anonymize::answer::narrow_decoder
);

/// Later steps' prompts read the answer as `anonymization`.
impl StepAnswer for answer::Anonymization {
    const NAME: &'static str = "anonymization";
}

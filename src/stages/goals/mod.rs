//! `goals` (AgentSense): the scenario's background retold so a player needs neither the show nor
//! the dialogue, its social domain, and the social goals of each character who speaks at least
//! twice: every goal's draft, what was wrong with it (an absent character, information the
//! character cannot have, a physical action, too abstract, too subjective, meaningless,
//! dependent on another goal or on chance) and whether it was kept, rewritten or dropped, with
//! its category and ERG class. A scenario with fewer than two such characters is not an
//! AgentSense scenario: it gets no goals, and the item is flagged with why.

pub mod answer;

use crate::dag::port::Port;
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::stages::descriptor::step_descriptor;
use crate::stages::llm_step::{StepAnswer, StepRecord, scenario_step};
use crate::stages::step_params::step_params;
use crate::stages::{annotate, describe};

/// The scenario's goals, background and domain.
pub const GOALS: Port<StepRecord<crate::stages::goals::answer::Goals>> = Port::item(NAME, "goals");

const NAME: &str = "goals";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "AgentSense: self-contained background, domain, social goals per character (LLM)",
    version: 6,
    prompts: &["goals.j2", crate::stages::llm_step::ONE_PART_PROMPT],
    defaults: Defaults::of::<GoalsParams>(),
    load: load_stage::<GoalsParams, Goals>,
};

step_descriptor!(
    GOALS,
    crate::stages::goals::answer,
    include_str!("../../../prompts/goals.j2"),
    crate::stages::descriptor::Exported::AgentSense,
);

step_params!(
    /// goals (AgentSense): the background retold for role-play, the social domain, and one to
    /// three social goals for each character with at least two lines, each with its draft, its
    /// issue (if any), what became of it and its category.
    GoalsParams for Goals
);

scenario_step!(
    Goals,
    GOALS,
    crate::stages::goals::answer,
    [&annotate::ANNOTATION, &describe::DESCRIPTION],
    crate::stages::goals::answer::narrow_role_for_decoder,
    &[],
    crate::stages::goals::answer::not_applicable,
    crate::stages::goals::answer::own_name
);

/// Later steps' prompts read the answer as `goals`.
impl StepAnswer for answer::Goals {
    const NAME: &'static str = "goals";
}

/// The flag of a scenario the AgentSense stages after `goals` skip: `goals` made none for it
/// (and flagged why).
const NO_GOALS: &str = "not an AgentSense scenario: it has no goals (see `goals`)";

/// For an AgentSense step after `goals` (its `not_applicable`): why a scenario gets no answer.
pub fn without_goals(ctx: &crate::annotation::ScenarioContext) -> Option<String> {
    ctx.earlier(&GOALS).is_none().then(|| NO_GOALS.to_string())
}

/// For an AgentSense stage after `goals` that reads it: the outputs of a scenario it skips
/// (none, flagged why), or `None` when the scenario has goals and the stage runs.
pub fn skipped_without_goals(ctx: &crate::dag::JobCtx) -> Option<crate::dag::Outputs> {
    ctx.inputs_of(GOALS.id())
        .next()
        .is_none()
        .then(|| crate::dag::Outputs {
            flags: vec![NO_GOALS.to_string()],
            ..crate::dag::Outputs::default()
        })
}

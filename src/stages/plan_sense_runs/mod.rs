//! `plan_sense_runs` (AgentSense): which role-play runs each synthetic instance gets, one item
//! each (`<scenario>/sense/i<instance>/<model>/r<replicate>`): every clean instance of the
//! scenario's template, for every agent model of `[llm.roles]`, for every replicate. A run's
//! plan holds the instance as the dataset exports it (its background with the characters'
//! names filled in, each character's profile, goals and private information, and what each
//! sees of the others), so `simulate_sense` reads nothing else and an AgentViSS run never
//! depends on an instance. The runs are played in text: a synthetic character has no picture.

use serde::{Deserialize, Serialize};

use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{AppCtx, Env, JobCtx, Level, Outputs, Stage, StageFailure};
use crate::range::{BadSetting, Range, Validate, check, check_some};
use crate::stages::export::agentsense::{InstanceRow, instance_row};
use crate::stages::instantiate::INSTANCES;
use crate::stages::plan_runs::{agent_identities, agents_by_slug, line_ups};
use crate::stages::template::TEMPLATE;

/// One AgentSense run's plan, stored per run.
pub const SENSE_RUN: Port<SenseRunPlan> = Port::child(NAME, "sense_run");

const NAME: &str = "plan_sense_runs";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "AgentSense: role-play runs per synthetic instance x agent model x replicate",
    version: 1,
    prompts: &[],
    defaults: Defaults::of::<PlanSenseRunsParams>(),
    load: load_stage::<PlanSenseRunsParams, PlanSenseRuns>,
};

/// plan_sense_runs: the AgentSense runs of every scenario with a template, one item each
/// (`<scenario>/sense/i<instance>/<model>/r<replicate>`), for every instance `instantiate`
/// made that no rule breaks and no person rejected, every agent model of `agents` in
/// [llm.roles] of viss.toml, and every replicate. The runs are the `simulate_sense` stage's
/// items (stages/simulate_sense.toml sets rounds and sampling).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PlanSenseRunsParams {
    /// Runs per instance and model, each with its own speaker draws and sampling seeds, 1 to
    /// 100.
    pub replicates: u32,
    /// Only the first N clean instances of each template, 1 to 100 (a quick look; AgentSense
    /// plays all five). Unset: every instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(example = 1)]
    pub instances: Option<u32>,
    /// Plan runs for templates that rest on a flagged answer, and for flagged casts, too (as
    /// export's `include_flagged`); by default they wait for a person (`viss review`).
    pub include_flagged: bool,
    /// Cross-play (as AgentSense pairs models): besides each agent model playing every
    /// character, for every ordered pair of agent models a run per character with the first
    /// (the focal model) in that character and the second in all others
    /// (`<focal>_vs_<partner>_as_<slot>` in the run id). Needs two agent models.
    pub cross_play: bool,
}

impl Default for PlanSenseRunsParams {
    fn default() -> Self {
        Self {
            replicates: 1,
            instances: None,
            include_flagged: false,
            cross_play: false,
        }
    }
}

const REPLICATES: Range = Range::new(1.0, 100.0);
const INSTANCES_RUN: Range = Range::new(1.0, 100.0);

impl Validate for PlanSenseRunsParams {
    fn validate(&self) -> Result<(), BadSetting> {
        check("replicates", self.replicates, REPLICATES)?;
        check_some("instances", self.instances, INSTANCES_RUN)
    }
}

impl PlanSenseRunsParams {
    /// The runs it plans for a template with `instances` clean casts, before cross-play: each
    /// instance it takes, agent model and replicate.
    pub fn runs_per_template(&self, instances: u32, agents: usize) -> usize {
        let taken = self
            .instances
            .map_or(instances, |first| first.min(instances));
        taken as usize * agents * self.replicates as usize
    }
}

pub struct PlanSenseRuns(PlanSenseRunsParams);

impl From<PlanSenseRunsParams> for PlanSenseRuns {
    fn from(params: PlanSenseRunsParams) -> Self {
        Self(params)
    }
}

/// One run of a synthetic instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SenseRunPlan {
    /// The source scenario (never shown to the agents).
    pub scenario: String,
    /// The instance as the dataset exports it.
    pub instance: InstanceRow,
    pub replicate: u32,
    /// Per character, in the instance's order, its model as `[llm.roles]` names it.
    pub models: Vec<String>,
    /// In cross-play, the slot of the character the focal model plays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub focal: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanSenseRunsError {
    #[error(
        "cross_play in stages/plan_sense_runs.toml pairs agent models, but [llm.roles] agents in \
         viss.toml names only one; add a second model or set cross_play = false"
    )]
    CrossPlayNeedsTwo,
}

/// The run id of instance `index` of `scenario` played by the model `slug`.
pub fn run_id(scenario: &str, index: u32, slug: &str, replicate: u32) -> String {
    format!("{scenario}/sense/i{index}/{slug}/r{replicate}")
}

#[async_trait::async_trait]
impl Stage<Env> for PlanSenseRuns {
    fn level(&self) -> Level {
        Level::Scenario
    }

    fn inputs(&self) -> Vec<PortId> {
        vec![TEMPLATE.id(), INSTANCES.id()]
    }

    fn outputs(&self) -> Vec<PortId> {
        vec![SENSE_RUN.id()]
    }

    fn spawns(&self) -> Option<Level> {
        Some(Level::Run)
    }

    fn models(
        &self,
        Env { project, .. }: &Env,
        store: &Store,
    ) -> Result<std::collections::BTreeMap<String, String>, StageFailure> {
        agent_identities(project, store)
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let mut outputs = Outputs::default();
        let (Some(template), Some(instances)) = (
            ctx.read_optional(&TEMPLATE)?,
            ctx.read_optional(&INSTANCES)?,
        ) else {
            // Not an AgentSense scenario (or its template failed): nothing to play.
            return Ok(outputs);
        };
        let params = &self.0;
        if !params.include_flagged && !template.flagged_upstream.is_empty() {
            outputs.flags.push(format!(
                "AgentSense runs not planned: the template rests on flagged answers of {}; \
                 review them (`viss review {}`) or set include_flagged",
                template.flagged_upstream.join(", "),
                template.flagged_upstream.join(" ")
            ));
            return Ok(outputs);
        }
        let agents = agents_by_slug(ctx.llm().config())?;
        if params.cross_play && agents.len() < 2 {
            return Err(PlanSenseRunsError::CrossPlayNeedsTwo.into());
        }
        let mut planned = 0;
        for instance in &instances.instances {
            if params.instances.is_some_and(|n| planned >= n) {
                break;
            }
            if instance.rejected_by_review() {
                continue;
            }
            if !params.include_flagged && !instance.problems.is_empty() {
                outputs.flags.push(format!(
                    "instance i{} not planned: its cast breaks {} rule(s); accept it in `viss \
                     review instantiate` or set include_flagged",
                    instance.index,
                    instance.problems.len()
                ));
                continue;
            }
            planned += 1;
            let row = instance_row(&ctx.item, &template, &instances, instance);
            let slots: Vec<String> = row.characters.iter().map(|c| c.slot.clone()).collect();
            for line_up in line_ups(&agents, &slots, params.cross_play) {
                for replicate in 0..params.replicates {
                    let plan = SenseRunPlan {
                        scenario: ctx.item.clone(),
                        instance: row.clone(),
                        replicate,
                        models: line_up.seats.iter().map(ToString::to_string).collect(),
                        focal: line_up.focal.map(|index| slots[index].clone()),
                    };
                    let run = run_id(&ctx.item, instance.index, &line_up.segment, replicate);
                    outputs.put_child(ctx, &SENSE_RUN, &run, &plan)?;
                    outputs.children.push(run);
                }
            }
        }
        Ok(outputs)
    }
}

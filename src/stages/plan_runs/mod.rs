//! `plan_runs`: which simulation runs each scenario gets, one item each (`<scenario>/sim/<mode>/
//! <model>/r<replicate>`): every observation mode the models can play, for every agent model of
//! `[llm.roles]`, for every replicate. A mode the models cannot play (pictures for a model that
//! takes none) is not run and the scenario is flagged with why, so `viss status` lists it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{AppCtx, Env, JobCtx, Level, Outputs, Stage, StageFailure};
use crate::llm::{LlmConfig, ModelRef};
use crate::range::{BadSetting, Range, Validate, check};
use crate::sim::mode::ObservationMode;
use crate::stages::llm_step::model_identity_of;
use crate::stages::parse_script;

/// One run's plan, stored per run: its scenario, mode, replicate and who plays whom.
pub const RUN: Port<RunPlan> = Port::child(NAME, "run");

const NAME: &str = "plan_runs";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "simulation runs per scenario: modes x agent models x replicates",
    version: 1,
    prompts: &[],
    defaults: Defaults::of::<PlanRunsParams>(),
    load: load_stage::<PlanRunsParams, PlanRuns>,
};

/// plan_runs: the simulation runs of every scenario, one item each
/// (`<scenario>/sim/<mode>/<model>/r<replicate>`), for every mode below, every agent model of
/// `agents` in [llm.roles] of viss.toml, and every replicate. The runs themselves are the
/// `simulate` stage's items (stages/simulate.toml sets rounds, sampling and speaker order).
/// A mode that needs pictures is not run with a model that takes none (the embedded model):
/// the scenario is flagged with the reason instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PlanRunsParams {
    /// Observation modes: "text" (dialogue only), "vv_oracle" (the other characters' recorded
    /// expression and posture in words, as an ideal describer would write them). "vv" and "dv"
    /// (a describer model's words for the pictures, the pictures themselves) are not built yet.
    pub modes: Vec<ObservationMode>,
    /// Runs per scenario, mode and model, each with its own speaker draws and sampling seeds,
    /// 1 to 100.
    pub replicates: u32,
    /// Cross-play (as SOTOPIA and AgentSense pair models): besides each agent model playing
    /// every role, for every ordered pair of agent models a run per role with the first (the
    /// focal model) on that role and the second on all others, the focal role rotating over
    /// the roles (`<focal>_vs_<partner>_as_<role>` in the run id). Needs two agent models.
    pub cross_play: bool,
}

impl Default for PlanRunsParams {
    fn default() -> Self {
        Self {
            modes: vec![ObservationMode::Text, ObservationMode::VvOracle],
            replicates: 1,
            cross_play: false,
        }
    }
}

/// Replicates of one run; more is a study of its own rather than a benchmark setting.
const REPLICATES: Range = Range::new(1.0, 100.0);

impl Validate for PlanRunsParams {
    fn validate(&self) -> Result<(), BadSetting> {
        check("replicates", self.replicates, REPLICATES)?;
        let not_built =
            |mode: &&ObservationMode| matches!(mode, ObservationMode::Vv | ObservationMode::Dv);
        if self.modes.is_empty() || self.modes.iter().any(|mode| not_built(&mode)) {
            let names: Vec<String> = self.modes.iter().map(|m| format!("\"{m}\"")).collect();
            return Err(BadSetting {
                key: "modes".to_string(),
                value: format!("[{}]", names.join(", ")),
                expected: "one or more of \"text\" and \"vv_oracle\" (\"vv\" and \"dv\" are \
                           not built yet, issue 20)"
                    .to_string(),
                advice: "change it, or remove it to use the default",
            });
        }
        Ok(())
    }
}

pub struct PlanRuns(PlanRunsParams);

impl From<PlanRunsParams> for PlanRuns {
    fn from(params: PlanRunsParams) -> Self {
        Self(params)
    }
}

/// One participant of a run and the model playing it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Seat {
    pub name: String,
    /// As `[llm.roles]` names it: "local" or "ENDPOINT:MODEL".
    pub model: String,
}

/// One run of a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPlan {
    pub scenario: String,
    pub mode: ObservationMode,
    pub replicate: u32,
    /// Every participant in the scenario's order, with its model.
    pub cast: Vec<Seat>,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanRunsError {
    #[error(
        "agents {first} and {second} in [llm.roles] of viss.toml both give run ids the model \
         segment {slug:?}; list each model once"
    )]
    SameSlug {
        first: String,
        second: String,
        slug: String,
    },
    #[error("[llm.roles] agents in viss.toml is empty: name at least one model, e.g. [\"local\"]")]
    NoAgents,
    #[error(
        "cross_play in stages/plan_runs.toml pairs agent models, but [llm.roles] agents in \
         viss.toml names only one; add a second model or set cross_play = false"
    )]
    CrossPlayNeedsTwo,
}

/// Who plays which role in one line-up: one model throughout, or a focal model on one role.
struct LineUp<'a> {
    /// The run id's model segment.
    segment: String,
    /// Per participant, its model.
    seats: Vec<&'a ModelRef>,
}

/// The line-ups of a scenario with `participants` roles: each agent alone, then with
/// `cross_play` each ordered pair of agents per focal role.
fn line_ups<'a>(
    agents: &[(String, &'a ModelRef)],
    participants: &[String],
    cross_play: bool,
) -> Vec<LineUp<'a>> {
    let mut line_ups: Vec<LineUp<'a>> = agents
        .iter()
        .map(|(slug, agent)| LineUp {
            segment: slug.clone(),
            seats: vec![*agent; participants.len()],
        })
        .collect();
    if !cross_play {
        return line_ups;
    }
    for (focal_slug, focal) in agents {
        for (partner_slug, partner) in agents {
            if focal_slug == partner_slug {
                continue;
            }
            for (role, name) in participants.iter().enumerate() {
                let mut seats = vec![*partner; participants.len()];
                seats[role] = *focal;
                line_ups.push(LineUp {
                    segment: format!("{focal_slug}_vs_{partner_slug}_as_{}", segment_of(name)),
                    seats,
                });
            }
        }
    }
    line_ups
}

/// The model segment of a run id: the local model's name or the endpoint's model name, with
/// every character an item id cannot hold as '-' (OpenRouter's "openai/gpt-4o" is
/// "openai-gpt-4o").
pub fn model_slug(model: &ModelRef, config: &LlmConfig) -> String {
    let name = match model {
        ModelRef::Local => match &config.local.model {
            Some(path) => path
                .file_stem()
                .map(|stem| stem.to_string_lossy().into_owned())
                .unwrap_or_else(|| "local".to_string()),
            None => crate::models::DEFAULT_LOCAL_LLM.name.to_string(),
        },
        ModelRef::Endpoint { model, .. } => model.clone(),
    };
    segment_of(&name)
}

/// `name` as an item id segment: lower case, every character an id cannot hold as '-'.
fn segment_of(name: &str) -> String {
    let slug: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    match slug.trim_matches('.') {
        "" => "x".to_string(),
        trimmed => trimmed.to_string(),
    }
}

/// Every agent model of `[llm.roles]` as a cache key names it (its run id segment and its
/// identity): what `plan_runs` and `simulate` key on, so another agent list or model file
/// re-plans and re-plays.
pub fn agent_identities(
    project: &crate::project::Project,
    store: &Store,
) -> Result<BTreeMap<String, String>, StageFailure> {
    let mut identities = BTreeMap::new();
    for (index, agent) in project.config.llm.roles.agents.iter().enumerate() {
        identities.insert(
            format!("agent{index}"),
            format!(
                "{} {}",
                model_slug(agent, &project.config.llm),
                model_identity_of(agent, project, store)?
            ),
        );
    }
    Ok(identities)
}

/// Why `mode` cannot be played by `model`, if it cannot.
fn cannot_play(mode: ObservationMode, model: &ModelRef) -> Option<String> {
    let takes_no_images = matches!(model, ModelRef::Local);
    (mode.shows_agent_images() && takes_no_images).then(|| {
        format!(
            "{mode} runs of {model} not planned: the embedded model takes no images; point \
             [llm.roles] agents at a vision model to run them"
        )
    })
}

#[async_trait::async_trait]
impl Stage<Env> for PlanRuns {
    fn level(&self) -> Level {
        Level::Scenario
    }

    fn inputs(&self) -> Vec<PortId> {
        vec![parse_script::CONTEXT.id()]
    }

    fn outputs(&self) -> Vec<PortId> {
        vec![RUN.id()]
    }

    fn spawns(&self) -> Option<Level> {
        Some(Level::Run)
    }

    fn models(
        &self,
        Env { project, .. }: &Env,
        store: &Store,
    ) -> Result<BTreeMap<String, String>, StageFailure> {
        // Which models play is in the key: another agent list re-plans every scenario.
        agent_identities(project, store)
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let scenario = ctx.read(&parse_script::CONTEXT)?;
        let config = ctx.llm().config();
        let agents = &config.roles.agents;
        if agents.is_empty() {
            return Err(PlanRunsError::NoAgents.into());
        }
        let mut slugs: BTreeMap<String, &ModelRef> = BTreeMap::new();
        for agent in agents {
            let slug = model_slug(agent, config);
            if let Some(first) = slugs.insert(slug.clone(), agent) {
                return Err(PlanRunsError::SameSlug {
                    first: first.to_string(),
                    second: agent.to_string(),
                    slug,
                }
                .into());
            }
        }
        if self.0.cross_play && slugs.len() < 2 {
            return Err(PlanRunsError::CrossPlayNeedsTwo.into());
        }
        let agents: Vec<(String, &ModelRef)> = slugs.into_iter().collect();
        let line_ups = line_ups(&agents, &scenario.participants, self.0.cross_play);
        let mut outputs = Outputs::default();
        for &mode in &self.0.modes {
            for line_up in &line_ups {
                let unplayable = line_up
                    .seats
                    .iter()
                    .find_map(|model| cannot_play(mode, model));
                if let Some(reason) = unplayable {
                    if !outputs.flags.contains(&reason) {
                        outputs.flags.push(reason);
                    }
                    continue;
                }
                for replicate in 0..self.0.replicates {
                    let run = format!("{}/sim/{mode}/{}/r{replicate}", ctx.item, line_up.segment);
                    let plan = RunPlan {
                        scenario: ctx.item.clone(),
                        mode,
                        replicate,
                        cast: scenario
                            .participants
                            .iter()
                            .zip(&line_up.seats)
                            .map(|(name, model)| Seat {
                                name: name.clone(),
                                model: model.to_string(),
                            })
                            .collect(),
                    };
                    outputs.put_child(ctx, &RUN, &run, &plan)?;
                    outputs.children.push(run);
                }
            }
        }
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_slugs_are_item_id_segments() {
        let config = LlmConfig::default();
        assert_eq!(
            model_slug(&ModelRef::Local, &config),
            crate::models::DEFAULT_LOCAL_LLM.name
        );
        let routed = ModelRef::Endpoint {
            endpoint: "openrouter".to_string(),
            model: "openai/GPT-4o".to_string(),
        };
        assert_eq!(model_slug(&routed, &config), "openai-gpt-4o");
        assert!(Level::Run.fits(&format!(
            "show/ep/sc1/sim/text/{}/r0",
            model_slug(&routed, &config)
        )));
    }

    #[test]
    fn cross_play_puts_the_focal_model_on_each_role_in_turn() {
        let (a, b) = (ModelRef::Local, "mock:big".parse::<ModelRef>().unwrap());
        let agents = [("a".to_string(), &a), ("b".to_string(), &b)];
        let cast = ["Ada".to_string(), "Ben Ng".to_string()];
        assert_eq!(line_ups(&agents, &cast, false).len(), 2);
        let line_ups = line_ups(&agents, &cast, true);
        let shown: Vec<(String, Vec<String>)> = line_ups
            .iter()
            .map(|l| {
                let seats = l.seats.iter().map(|m| m.to_string()).collect();
                (l.segment.clone(), seats)
            })
            .collect();
        let seats = |names: [&str; 2]| names.map(str::to_string).to_vec();
        assert_eq!(
            shown,
            [
                ("a".to_string(), seats(["local", "local"])),
                ("b".to_string(), seats(["mock:big", "mock:big"])),
                ("a_vs_b_as_ada".to_string(), seats(["local", "mock:big"])),
                ("a_vs_b_as_ben-ng".to_string(), seats(["mock:big", "local"])),
                ("b_vs_a_as_ada".to_string(), seats(["mock:big", "local"])),
                ("b_vs_a_as_ben-ng".to_string(), seats(["local", "mock:big"])),
            ]
        );
        assert!(
            line_ups
                .iter()
                .all(|l| Level::Run.fits(&format!("s/e/c/sim/text/{}/r0", l.segment)))
        );
    }

    #[test]
    fn modes_not_built_yet_are_refused_by_name() {
        let params = PlanRunsParams {
            modes: vec![ObservationMode::Text, ObservationMode::Dv],
            ..PlanRunsParams::default()
        };
        let error = params.validate().unwrap_err().to_string();
        assert!(error.contains("\"dv\" are not built yet"), "{error}");
    }
}

//! `plan_runs`: which simulation runs each scenario gets, one item each (`<scenario>/sim/<mode>/
//! <model>/r<replicate>`): every observation mode the models can play, for every agent model of
//! `[llm.roles]`, for every replicate. A mode that cannot be played (pictures for a model that
//! takes none, or a scenario without a group image) is not run and the scenario is flagged with
//! why, so `viss status` lists it. A run that shows pictures names them by hash in its plan, so
//! runs that show none do not depend on them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{AppCtx, Env, JobCtx, Level, Outputs, Stage, StageFailure};
use crate::hash::ContentHash;
use crate::llm::{LlmConfig, ModelRef};
use crate::range::{BadSetting, Range, Validate, check};
use crate::sim::mode::ObservationMode;
use crate::stages::cast::{CastError, entry_of};
use crate::stages::llm_step::model_identity_of;
use crate::stages::{group_image, parse_script, portraits};
use crate::text::role::RoleId;

/// One run's plan, stored per run: its scenario, mode, replicate and who plays whom.
pub const RUN: Port<RunPlan> = Port::child(NAME, "run");

const NAME: &str = "plan_runs";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "simulation runs per scenario: modes x agent models x replicates",
    version: 2,
    prompts: &[],
    defaults: Defaults::of::<PlanRunsParams>(),
    load: load_stage::<PlanRunsParams, PlanRuns>,
};

/// plan_runs: the simulation runs of every scenario, one item each
/// (`<scenario>/sim/<mode>/<model>/r<replicate>`), for every mode below, every agent model of
/// `agents` in [llm.roles] of viss.toml, and every replicate. The runs themselves are the
/// `simulate` stage's items (stages/simulate.toml sets rounds, sampling and speaker order).
/// A mode that needs pictures is not run with a model that takes none (the embedded model), nor
/// for a scenario without a group image: the scenario is flagged with the reason instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PlanRunsParams {
    /// Observation modes: "text" (dialogue only), "vv" (the describer model's words for the
    /// group image and the other characters' current portraits), "dv" (the group image and a
    /// collage of the current portraits themselves), "vv_oracle" (the other characters'
    /// recorded expression and posture in words, as an ideal describer would write them; no
    /// describer needed). Unset: text, vv and dv, and vv_oracle too when the describer of
    /// [llm.roles] takes no images (the embedded model).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(example = &["text", "vv", "dv"])]
    pub modes: Option<Vec<ObservationMode>>,
    /// Runs per scenario, mode and model, each with its own speaker draws and sampling seeds,
    /// 1 to 100.
    pub replicates: u32,
    /// Cross-play (as SOTOPIA and AgentSense pair models): besides each agent model playing
    /// every role, for every ordered pair of agent models a run per role with the first (the
    /// focal model) on that role and the second on all others, the focal role rotating over
    /// the roles (`<focal>_vs_<partner>_as_<role>` in the run id). Needs two agent models.
    pub cross_play: bool,
    /// A person in a role (`viss play` adds these): for each, the run
    /// `<scenario>/sim/<mode>/human-as-<role>/r0`, the other roles played by the first agent
    /// model, the person answering at the terminal of `viss play`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(example = play_example())]
    pub play: Vec<PlaySeat>,
}

/// A person's seat in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlaySeat {
    pub scenario: String,
    pub role: String,
    pub mode: ObservationMode,
}

fn play_example() -> Vec<PlaySeat> {
    vec![PlaySeat {
        scenario: "demo/s01e01/scd51d".to_string(),
        role: "Noor".to_string(),
        mode: ObservationMode::Text,
    }]
}

impl PlaySeat {
    /// The run the seat is in.
    pub fn run_id(&self) -> String {
        format!(
            "{}/sim/{}/human-as-{}/r0",
            self.scenario,
            self.mode,
            segment_of(&self.role)
        )
    }
}

impl Default for PlanRunsParams {
    fn default() -> Self {
        Self {
            modes: None,
            replicates: 1,
            cross_play: false,
            play: Vec::new(),
        }
    }
}

/// Replicates of one run; more is a study of its own rather than a benchmark setting.
const REPLICATES: Range = Range::new(1.0, 100.0);

impl Validate for PlanRunsParams {
    fn validate(&self) -> Result<(), BadSetting> {
        check("replicates", self.replicates, REPLICATES)?;
        if self.modes.as_ref().is_some_and(Vec::is_empty) {
            return Err(BadSetting {
                key: "modes".to_string(),
                value: "[]".to_string(),
                expected: "one or more of \"text\", \"vv\", \"dv\" and \"vv_oracle\"".to_string(),
                advice: "change it, or remove it to use the default",
            });
        }
        Ok(())
    }
}

impl PlanRunsParams {
    /// The runs it plans for a scenario with a group image, before cross-play and a person's
    /// seats: every mode, agent model and replicate.
    pub fn runs_per_scenario(&self, roles: &crate::llm::config::RolesConfig) -> usize {
        self.modes_for(&roles.describer).len() * roles.agents.len() * self.replicates as usize
    }

    /// The modes to plan, in this order, for a project whose describer is `describer`.
    fn modes_for(&self, describer: &ModelRef) -> Vec<ObservationMode> {
        match &self.modes {
            Some(modes) => {
                let mut unique = Vec::new();
                for &mode in modes {
                    if !unique.contains(&mode) {
                        unique.push(mode);
                    }
                }
                unique
            }
            None => {
                let mut modes = vec![ObservationMode::Text];
                if takes_no_images(describer) {
                    modes.push(ObservationMode::VvOracle);
                }
                modes.extend([ObservationMode::Vv, ObservationMode::Dv]);
                modes
            }
        }
    }
}

pub struct PlanRuns(PlanRunsParams);

impl From<PlanRunsParams> for PlanRuns {
    fn from(params: PlanRunsParams) -> Self {
        Self(params)
    }
}

/// One participant of a run and the model playing it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Seat {
    pub name: String,
    /// As `[llm.roles]` names it: "local" or "ENDPOINT:MODEL".
    pub model: String,
}

/// One run of a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunPlan {
    pub scenario: String,
    pub mode: ObservationMode,
    pub replicate: u32,
    /// Every participant in the scenario's order, with its model.
    pub cast: Vec<Seat>,
    /// The pictures a `vv` or `dv` run starts from; none for the modes that show none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pictures: Option<RunPictures>,
}

/// The scenario's pictures as a run starts from them (PNG blobs of `group_image` and
/// `portraits`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunPictures {
    pub group_image: ContentHash,
    /// Per participant in cast order, its portrait, or why it has none.
    pub portraits: Vec<Result<ContentHash, String>>,
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
pub(crate) struct LineUp<'a> {
    /// The run id's model segment.
    pub(crate) segment: String,
    /// Per participant, its model.
    pub(crate) seats: Vec<&'a ModelRef>,
    /// In cross-play, the participant the focal model plays.
    pub(crate) focal: Option<usize>,
}

/// The line-ups of a scenario with `participants` roles: each agent alone, then with
/// `cross_play` each ordered pair of agents per focal role.
pub(crate) fn line_ups<'a>(
    agents: &[(String, &'a ModelRef)],
    participants: &[String],
    cross_play: bool,
) -> Vec<LineUp<'a>> {
    let mut line_ups: Vec<LineUp<'a>> = agents
        .iter()
        .map(|(slug, agent)| LineUp {
            segment: slug.clone(),
            seats: vec![*agent; participants.len()],
            focal: None,
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
                    focal: Some(role),
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
        ModelRef::Human => "human".to_string(),
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

/// The agent models of `[llm.roles]`, each with its run id segment, in the segments' order.
pub fn agents_by_slug(config: &LlmConfig) -> Result<Vec<(String, &ModelRef)>, PlanRunsError> {
    let agents = &config.roles.agents;
    if agents.is_empty() {
        return Err(PlanRunsError::NoAgents);
    }
    let mut slugs: BTreeMap<String, &ModelRef> = BTreeMap::new();
    for agent in agents {
        let slug = model_slug(agent, config);
        if let Some(first) = slugs.insert(slug.clone(), agent) {
            return Err(PlanRunsError::SameSlug {
                first: first.to_string(),
                second: agent.to_string(),
                slug,
            });
        }
    }
    Ok(slugs.into_iter().collect())
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

/// Whether `model` cannot be shown pictures: the embedded model reads text only. An endpoint's
/// model is taken to read them; one that does not fails its first request saying so.
fn takes_no_images(model: &ModelRef) -> bool {
    matches!(model, ModelRef::Local)
}

/// Why `mode` cannot be played by `model` with `describer` describing, if it cannot.
fn cannot_play(mode: ObservationMode, model: &ModelRef, describer: &ModelRef) -> Option<String> {
    if mode.shows_agent_images() && takes_no_images(model) {
        return Some(format!(
            "{mode} runs of {model} not planned: the embedded model takes no images; point \
             [llm.roles] agents at a vision model to run them"
        ));
    }
    (mode.shows_describer_images() && takes_no_images(describer)).then(|| {
        format!(
            "{mode} runs not planned: the describer of [llm.roles] is the embedded model, which \
             takes no images; point describer at a vision model to run them"
        )
    })
}

/// What a run in `mode` starts from of the scenario's `pictures`: none for a mode that uses
/// none, else the pictures, or why the scenario has none.
fn pictures_for(
    mode: ObservationMode,
    pictures: &Result<RunPictures, String>,
) -> Result<Option<RunPictures>, String> {
    if !mode.uses_pictures() {
        return Ok(None);
    }
    pictures.clone().map(Some)
}

/// The pictures a run of the scenario's roles starts from, or why the scenario has none to
/// show. `portraits` has one entry per role, in the roles' order.
fn pictures_of(
    group_image: Option<crate::vision::synthetic::GroupImageRecord>,
    portraits: Option<crate::vision::synthetic::PortraitsRecord>,
    scenario: &str,
    roles: usize,
) -> Result<Result<RunPictures, String>, CastError> {
    let Some(group_image) = group_image else {
        return Ok(Err(
            "the scenario has no group image (no video, or no frame with the cast)".to_string(),
        ));
    };
    let mut pictures = Vec::with_capacity(roles);
    for role in RoleId::all(roles) {
        let entry = match &portraits {
            Some(record) => Some(entry_of(&record.roles, role, "portraits", scenario, roles)?),
            None => None,
        };
        pictures.push(match entry {
            Some(entry) => match &entry.image {
                Some(image) => Ok(image.png),
                None => Err(entry
                    .missing_reason
                    .clone()
                    .unwrap_or_else(|| "no portrait was made".to_string())),
            },
            None => Err("no portrait was made".to_string()),
        });
    }
    Ok(Ok(RunPictures {
        group_image: group_image.image.png,
        portraits: pictures,
    }))
}

#[async_trait::async_trait]
impl Stage<Env> for PlanRuns {
    fn level(&self) -> Level {
        Level::Scenario
    }

    fn inputs(&self) -> Vec<PortId> {
        vec![
            parse_script::CONTEXT.id(),
            group_image::GROUP_IMAGE.id(),
            portraits::PORTRAITS.id(),
        ]
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
        let agents = agents_by_slug(config)?;
        if self.0.cross_play && agents.len() < 2 {
            return Err(PlanRunsError::CrossPlayNeedsTwo.into());
        }
        let line_ups = line_ups(&agents, &scenario.participants, self.0.cross_play);
        let pictures = pictures_of(
            ctx.read_optional(&group_image::GROUP_IMAGE)?,
            ctx.read_optional(&portraits::PORTRAITS)?,
            &ctx.item,
            scenario.participants.len(),
        )?;
        let describer = &config.roles.describer;
        let mut outputs = Outputs::default();
        let mut flag = |reason: String| {
            if !outputs.flags.contains(&reason) {
                outputs.flags.push(reason);
            }
        };
        let mut plans = Vec::new();
        for mode in self.0.modes_for(describer) {
            for line_up in &line_ups {
                let unplayable = line_up
                    .seats
                    .iter()
                    .find_map(|model| cannot_play(mode, model, describer));
                if let Some(reason) = unplayable {
                    flag(reason);
                    continue;
                }
                let run_pictures = match pictures_for(mode, &pictures) {
                    Ok(run_pictures) => run_pictures,
                    Err(why) => {
                        flag(format!("{mode} runs not planned: {why}"));
                        continue;
                    }
                };
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
                        pictures: run_pictures.clone(),
                    };
                    plans.push((run, plan));
                }
            }
        }
        for seat in self.0.play.iter().filter(|seat| seat.scenario == ctx.item) {
            let Some(role) = scenario.participants.iter().position(|n| *n == seat.role) else {
                flag(format!(
                    "play entry for {} not planned: the scene's roles are {}",
                    seat.role,
                    scenario.participants.join(", ")
                ));
                continue;
            };
            let partner = &config.roles.agents[0];
            let pictures = match pictures_for(seat.mode, &pictures) {
                Ok(run_pictures) => run_pictures,
                Err(why) => {
                    flag(format!("{} play not planned: {why}", seat.mode));
                    continue;
                }
            };
            if let Some(reason) = cannot_play(seat.mode, partner, describer) {
                flag(reason);
                continue;
            }
            let cast = scenario
                .participants
                .iter()
                .enumerate()
                .map(|(index, name)| Seat {
                    name: name.clone(),
                    model: if index == role {
                        ModelRef::Human.to_string()
                    } else {
                        partner.to_string()
                    },
                })
                .collect();
            let plan = RunPlan {
                scenario: ctx.item.clone(),
                mode: seat.mode,
                replicate: 0,
                cast,
                pictures,
            };
            plans.push((seat.run_id(), plan));
        }
        for (run, plan) in plans {
            outputs.put_child(ctx, &RUN, &run, &plan)?;
            outputs.children.push(run);
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
    fn unset_modes_are_the_papers_three_and_the_oracle_where_the_describer_is_blind() {
        use ObservationMode::*;
        let params = PlanRunsParams::default();
        assert_eq!(params.modes_for(&ModelRef::Local), [Text, VvOracle, Vv, Dv]);
        let vision = "openai:gpt-4o".parse::<ModelRef>().unwrap();
        assert_eq!(params.modes_for(&vision), [Text, Vv, Dv]);
        let chosen = PlanRunsParams {
            modes: Some(vec![Dv, Text, Dv]),
            ..params
        };
        assert_eq!(chosen.modes_for(&ModelRef::Local), [Dv, Text]);
        let none = PlanRunsParams {
            modes: Some(Vec::new()),
            ..PlanRunsParams::default()
        };
        assert!(none.validate().unwrap_err().to_string().contains("modes"));
    }

    #[test]
    fn pictures_need_a_model_that_sees_them() {
        use ObservationMode::*;
        let vision = "openai:gpt-4o".parse::<ModelRef>().unwrap();
        let local = ModelRef::Local;
        assert!(cannot_play(Dv, &local, &vision).unwrap().contains("agents"));
        assert!(
            cannot_play(Vv, &local, &local)
                .unwrap()
                .contains("describer")
        );
        assert_eq!(cannot_play(Vv, &local, &vision), None);
        assert_eq!(cannot_play(Dv, &vision, &local), None);
        assert_eq!(cannot_play(VvOracle, &local, &local), None);
        assert_eq!(cannot_play(Text, &local, &local), None);
    }
}

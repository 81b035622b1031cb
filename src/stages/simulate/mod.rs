//! `simulate`: one run of a scenario (AgentViSS, section 3 and appendix H). An agent per role
//! takes turns for a fixed number of rounds; each turn the speaker is shown the scene, its own
//! profile, tasks and current state, the conversation so far and its mode's observation, and
//! answers with its thought, feeling, expression, gesture, message and whom it hands the turn
//! to. The run's trace is what `evaluate` judges.

pub mod pictures;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::annotation::vocab::{ConflictCharacteristic, ExpressionStyle, Gender};
use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{AppCtx, Env, JobCtx, Level, Outputs, Stage, StageFailure};
use crate::imagegen::{ImageBackend, ImageEditOptions, LazyBackend, image_edit_models};
use crate::llm::{ChatRequest, ModelRef};
use crate::range::{BadSetting, Validate, check, check_some};
use crate::sim::mode::ObservationMode;
use crate::sim::policy::{SpeakerPolicy, decision_seed, next_speaker};
use crate::sim::trace::{Presence, RunEnd, RunSettings, Shown, Trace, TurnRecord};
use crate::sim::turn::{
    ActionType, Emotion, TurnRules, check_novel, check_turn, decoder_schema, schema,
};
use crate::stages::llm_step::{ask_model, model_identity_of, question};
use crate::stages::plan_runs::{self, RunPlan};
use crate::stages::{affect, cast, describe, parse_script, tasks};
use crate::vision::stylise::StyliseParams;
use pictures::{Describer, Gallery};

/// The run's trace: its settings, every turn, how it ended.
pub const TRACE: Port<Trace> = Port::item(NAME, "trace");
/// A portrait as an image edit redrew it during the run, keyed `t<turn>-<name>`.
pub const EDITED_PORTRAIT_PNG: Port<crate::dag::port::Png> = Port::keyed(NAME, "portrait.png:");

const NAME: &str = "simulate";
/// The template of an agent's turn.
pub const TEMPLATE: &str = "simulate.j2";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "one role-play run of a scenario: agents take turns (LLM)",
    version: 2,
    prompts: &[
        TEMPLATE,
        pictures::SCENE_TEMPLATE,
        pictures::PEOPLE_TEMPLATE,
    ],
    defaults: Defaults::of::<SimulateParams>(),
    load: load_stage::<SimulateParams, Simulate>,
};

/// simulate: each run plan_runs made is played by an agent per role, one turn at a time. Each
/// turn the speaker answers with an inner thought, an emotion (Joy, Sadness, Fear, Anger,
/// Surprise, Disgust or Neutral) and its description, whether its portrait should change, its
/// facial expression and body actions, whom it hands the turn to, and its message. A turn
/// that breaks the protocol (the thought spoken aloud, an emotion outside the seven, an earlier
/// message repeated, a message over budget) is re-asked with the reason at most 5 times; then
/// the run fails. Every turn goes through the request cache with its own seed, so a run that
/// was stopped resumes at the turn it reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SimulateParams {
    /// Turns per run (one speaker each), 1 to 200; the paper plays 15.
    pub rounds: usize,
    /// Agents' sampling temperature, 0 to 2.
    pub temperature: f32,
    /// Answer tokens per turn at most, 1 to 131072.
    pub max_tokens: u32,
    /// The message's words at most, 1 to 1000. Unset: no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(example = 60)]
    pub message_budget_words: Option<usize>,
    /// Who speaks next: "suggested_fair" (the speaker's suggestion, unless a role has been
    /// silent for 4 turns: it goes first), "round_robin", or "random_no_repeat" (AgentSense's
    /// order). All drawn from the seed.
    pub speaker_policy: SpeakerPolicy,
    /// The run's seed: the first speaker, random orders and each turn's sampling seed derive
    /// from it, the replicate and the turn. Any 64-bit unsigned integer.
    pub seed: u64,
    /// The describer's sampling temperature (`vv` runs), 0 to 2; the paper's is 0.2.
    pub describer_temperature: f32,
    /// Pictures (the group image, the portrait collage) are scaled to fit N x N pixels before
    /// a describer or an agent sees them, 16 to 4096.
    pub image_size: u32,
    /// SOTOPIA's action types: each turn also says what it does (speak, non_verbal,
    /// physical_action, leave, or none, with an empty message). A role that leaves is not
    /// handed the turn again; the run ends early when fewer than two roles remain or after 3
    /// turns in a row of none, and the trace says why.
    pub action_types: bool,
}

impl Default for SimulateParams {
    fn default() -> Self {
        Self {
            rounds: 15,
            temperature: 0.8,
            max_tokens: 512,
            message_budget_words: None,
            speaker_policy: SpeakerPolicy::SuggestedFair,
            seed: 7,
            describer_temperature: 0.2,
            image_size: 448,
            action_types: false,
        }
    }
}

mod ranges {
    use crate::range::Range;

    /// Longer runs outgrow a small model's context long before this.
    pub const ROUNDS: Range = Range::new(1.0, 200.0);
    pub const MESSAGE_BUDGET_WORDS: Range = Range::new(1.0, 1000.0);
    pub const IMAGE_SIZE: Range = Range::new(16.0, 4096.0);
}

impl Validate for SimulateParams {
    fn validate(&self) -> Result<(), BadSetting> {
        check("rounds", self.rounds, ranges::ROUNDS)?;
        check(
            "temperature",
            self.temperature,
            crate::stages::llm_step::ranges::TEMPERATURE,
        )?;
        check(
            "max_tokens",
            self.max_tokens,
            crate::stages::llm_step::ranges::MAX_TOKENS,
        )?;
        check(
            "describer_temperature",
            self.describer_temperature,
            crate::stages::llm_step::ranges::TEMPERATURE,
        )?;
        check("image_size", self.image_size, ranges::IMAGE_SIZE)?;
        check_some(
            "message_budget_words",
            self.message_budget_words,
            ranges::MESSAGE_BUDGET_WORDS,
        )
    }
}

pub struct Simulate {
    params: SimulateParams,
    /// The `image_edit` backend that redraws a speaker's portrait, made on first use.
    editor: LazyBackend,
}

impl From<SimulateParams> for Simulate {
    fn from(params: SimulateParams) -> Self {
        Self {
            params,
            editor: LazyBackend::default(),
        }
    }
}

impl Simulate {
    /// The image edit endpoint of `[llm.roles] image_edit`, or `None` without one: the offline
    /// filter cannot change an expression, so portraits then stay as they are.
    fn editor(&self, ctx: &JobCtx) -> Result<Option<Arc<dyn ImageBackend>>, StageFailure> {
        let config = &ctx.project().config.llm;
        if !matches!(config.roles.image_edit, Some(ModelRef::Endpoint { .. })) {
            return Ok(None);
        }
        let backend = self
            .editor
            .get(
                config,
                &StyliseParams::default(),
                &ImageEditOptions::default(),
            )
            .map_err(SimulateError::editor)?;
        Ok(Some(backend))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(
        "affect of {scenario} gives role {role} the opening emotion {emotion:?}, which is not \
         one of the seven"
    )]
    OpeningEmotion {
        scenario: String,
        role: crate::text::role::RoleId,
        emotion: String,
    },
    #[error("the run's model {model:?} is not a model reference: {problem}")]
    Model { model: String, problem: String },
    #[error("turn {round} ({name}): {reason}")]
    Turn {
        round: usize,
        name: String,
        reason: String,
    },
    #[error("the describer, turn {round}: {reason}")]
    Describer { round: usize, reason: String },
    #[error("{what} cannot be shown: {problem}")]
    Picture { what: String, problem: String },
    #[error("the portrait edit by {backend} failed: {problem}")]
    Edit { backend: String, problem: String },
    #[error("a {mode} run needs the scenario's pictures, but its plan has none; rebuild plan_runs")]
    NoPictures { mode: ObservationMode },
    #[error(transparent)]
    Store(#[from] crate::dag::store::StoreError),
}

impl SimulateError {
    /// The `image_edit` backend cannot be made or named.
    fn editor(source: crate::imagegen::ImageGenError) -> Self {
        SimulateError::Edit {
            backend: "image_edit".to_string(),
            problem: source.to_string(),
        }
    }
}

/// A role's state as the others could see it and the role itself knows it (the paper's Z).
#[derive(Debug, Clone, Serialize)]
struct AffectiveState {
    emotion: Emotion,
    /// Unset until the role's first turn.
    emotion_description: Option<String>,
    facial_expression: String,
    body_action: String,
}

/// What stays fixed for a role through the run: who it is and what it is after.
#[derive(Debug, Clone, Serialize)]
struct Persona {
    name: String,
    gender: Gender,
    age: String,
    occupation: String,
    expression_style: ExpressionStyle,
    conflict_characteristic: ConflictCharacteristic,
    expression_task: String,
    characteristic_task: String,
    interaction_regulation_task: String,
    interaction_outcome_task: String,
}

/// One message of the conversation so far.
#[derive(Debug, Clone, Serialize)]
struct Said {
    speaker: String,
    message: String,
    /// With action types on, what the turn did (`speak`, `non_verbal`, ...).
    action: Option<&'static str>,
}

/// What `simulate.j2` sees for one turn: the speaker's view of the scene.
#[derive(Debug, Serialize)]
struct AgentView<'a> {
    show: &'a str,
    heading: Option<&'a str>,
    background: &'a str,
    situation: &'a str,
    me: &'a Persona,
    others: Vec<&'a str>,
    /// Who has left the scene (action types on).
    gone: Vec<&'a str>,
    action_types: bool,
    state: &'a AffectiveState,
    /// `vv`: the describer's words for the group image.
    scene: &'a [String],
    /// The mode's observation, a line per character (none in text mode).
    observation: &'a [String],
    /// `dv`: what the attached pictures are.
    pictures: Option<&'a str>,
    history: &'a [Said],
    round: usize,
    rounds: usize,
    message_budget_words: Option<usize>,
}

/// The roles' fixed personas and opening states, in the run's cast order: seat `i` plays role
/// `r{i+1}`, whose character comes from the scenario's cast and whose tasks and opening state
/// are the steps' entries for the same role.
fn cast_of(
    ctx: &JobCtx,
    plan: &RunPlan,
) -> Result<(Vec<Persona>, Vec<AffectiveState>), StageFailure> {
    let cast = ctx.read(&cast::CAST)?;
    let tasks = ctx.read(&tasks::TASKS)?.answer;
    let affect = ctx.read(&affect::AFFECT)?.answer;
    cast.check_seats(plan.cast.len())?;
    let mut personas = Vec::new();
    let mut states = Vec::new();
    for role in cast.ids() {
        let sheet = cast.sheet(role)?;
        let task = cast.entry(&tasks.roles, role, "tasks")?;
        let opening = cast.entry(&affect.roles, role, "affect")?;
        personas.push(Persona {
            name: sheet.name.clone(),
            gender: sheet.gender,
            age: sheet.age.clone(),
            occupation: sheet.occupation.clone(),
            expression_style: sheet.expression_style,
            conflict_characteristic: sheet.conflict_characteristic,
            expression_task: task.expression_task.clone(),
            characteristic_task: task.characteristic_task.clone(),
            interaction_regulation_task: task.interaction_regulation_task.clone(),
            interaction_outcome_task: task.interaction_outcome_task.clone(),
        });
        let emotion = Emotion::from_name(opening.emotion.as_str()).ok_or_else(|| {
            SimulateError::OpeningEmotion {
                scenario: plan.scenario.clone(),
                role,
                emotion: opening.emotion.as_str().to_string(),
            }
        })?;
        states.push(AffectiveState {
            emotion,
            emotion_description: None,
            facial_expression: opening.facial_expression.clone(),
            body_action: opening.body_action.clone(),
        });
    }
    Ok((personas, states))
}

/// `vv_oracle`'s observation of `others` (cast indices): each as an ideal describer of its
/// current portrait would put it, written from the recorded state instead of from pixels.
fn oracle_view(personas: &[Persona], states: &[AffectiveState], others: &[usize]) -> Vec<String> {
    others
        .iter()
        .map(|&index| (&personas[index], &states[index]))
        .map(|(persona, state)| {
            format!(
                "{} looks {}; face: {}; body: {}",
                persona.name,
                state.emotion.adjective(),
                state.facial_expression.trim_end_matches('.'),
                state.body_action.trim_end_matches('.')
            )
        })
        .collect()
}

/// What a run reads.
fn input_ports() -> Vec<PortId> {
    vec![
        plan_runs::RUN.id(),
        parse_script::CONTEXT.id(),
        describe::DESCRIPTION.id(),
        cast::CAST.id(),
        tasks::TASKS.id(),
        affect::AFFECT.id(),
    ]
}

/// The stages whose records a run reads: what must be built before one run can be played
/// alone (`viss play`).
pub fn stages_read() -> Vec<String> {
    let mut stages: Vec<String> = input_ports()
        .iter()
        .map(|port| port.stage.to_string())
        .collect();
    stages.dedup();
    stages
}

#[async_trait::async_trait]
impl Stage<Env> for Simulate {
    fn level(&self) -> Level {
        Level::Run
    }

    fn inputs(&self) -> Vec<PortId> {
        input_ports()
    }

    fn outputs(&self) -> Vec<PortId> {
        vec![TRACE.id(), EDITED_PORTRAIT_PNG.id()]
    }

    fn models(
        &self,
        Env { project, .. }: &Env,
        store: &Store,
    ) -> Result<BTreeMap<String, String>, StageFailure> {
        let config = &project.config.llm;
        let mut models = plan_runs::agent_identities(project, store)?;
        models.insert(
            "describer".to_string(),
            model_identity_of(&config.roles.describer, project, store)?,
        );
        let editor = image_edit_models(
            config,
            &StyliseParams::default(),
            &ImageEditOptions::default(),
        )
        .map_err(SimulateError::editor)?;
        models.extend(editor);
        Ok(models)
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let params = &self.params;
        let plan = ctx.read(&plan_runs::RUN)?;
        let scenario = ctx.read(&parse_script::CONTEXT)?;
        let description = ctx.read(&describe::DESCRIPTION)?.answer;
        let (personas, mut states) = cast_of(ctx, &plan)?;
        let names: Vec<String> = personas.iter().map(|p| p.name.clone()).collect();
        let mut models = Vec::new();
        for seat in &plan.cast {
            models.push(seat.model.parse::<ModelRef>().map_err(|problem| {
                SimulateError::Model {
                    model: seat.model.clone(),
                    problem,
                }
            })?);
        }
        let mut outputs = Outputs::default();
        let mut gallery = match (&plan.pictures, plan.mode.uses_pictures()) {
            (Some(pictures), true) => Some(Gallery::load(ctx, pictures)?),
            (None, true) => return Err(SimulateError::NoPictures { mode: plan.mode }.into()),
            (_, false) => None,
        };
        let editor = match gallery {
            Some(_) => self.editor(ctx)?,
            None => None,
        };
        let describer_model = &ctx.llm().config().roles.describer;
        let describer = Describer {
            model: describer_model,
            temperature: params.describer_temperature,
            max_tokens: params.max_tokens,
            size: params.image_size,
            replicate: plan.replicate,
        };
        let describer_failed = |round: usize| {
            move |failure: StageFailure| -> StageFailure {
                SimulateError::Describer {
                    round,
                    reason: failure.to_string(),
                }
                .into()
            }
        };
        let scene_view = match (&gallery, plan.mode) {
            (Some(gallery), ObservationMode::Vv) => {
                let context = (
                    scenario.show.as_str(),
                    scenario.heading.as_deref(),
                    names.as_slice(),
                );
                let seed = decision_seed(params.seed, plan.replicate, 0);
                Some(
                    describer
                        .scene(ctx, gallery, context, seed)
                        .await
                        .map_err(describer_failed(0))?,
                )
            }
            _ => None,
        };
        let mut history: Vec<Said> = Vec::new();
        let mut spoken: Vec<usize> = Vec::new();
        let mut said: Vec<(usize, String)> = Vec::new();
        let mut suggestion = None;
        let mut turns = Vec::new();
        let mut presence = Presence::new(names.len());
        let mut end = RunEnd::RoundsDone;
        for round in 1..=params.rounds {
            let present = presence.present();
            let speaker = next_speaker(
                params.speaker_policy,
                present,
                &spoken,
                suggestion,
                params.seed,
                plan.replicate,
            );
            let others: Vec<usize> = (0..names.len())
                .filter(|&i| i != speaker && present[i])
                .collect();
            let gone: Vec<usize> = (0..names.len()).filter(|&i| !present[i]).collect();
            let turn_seed = decision_seed(params.seed, plan.replicate, round);
            let mut shown = Shown {
                texts: Vec::new(),
                image_hashes: Vec::new(),
                described_images: Vec::new(),
            };
            let mut attachments = Vec::new();
            let mut caption = None;
            match (plan.mode, &gallery) {
                (ObservationMode::VvOracle, _) => {
                    shown.texts = oracle_view(&personas, &states, &others);
                }
                (ObservationMode::Vv, Some(gallery)) => {
                    let described = describer
                        .people(ctx, gallery, &others, &names, turn_seed)
                        .await
                        .map_err(describer_failed(round))?;
                    ctx.count(
                        "describer_calls",
                        u64::from(!described.request_key.is_empty()),
                    );
                    shown.texts = described.lines;
                    shown.described_images = described.image_hashes;
                }
                (ObservationMode::Dv, Some(gallery)) => {
                    let in_scene: Vec<usize> = (0..names.len()).filter(|&i| present[i]).collect();
                    let view =
                        pictures::direct_view(gallery, &in_scene, &names, params.image_size)?;
                    attachments = view.parts;
                    shown.image_hashes = view.hashes;
                    caption = Some(view.caption);
                }
                _ => {}
            }
            let scene_lines = scene_view.as_ref().map_or(&[][..], |d| d.lines.as_slice());
            let view = AgentView {
                show: &scenario.show,
                heading: scenario.heading.as_deref(),
                background: &description.background,
                situation: &description.description,
                me: &personas[speaker],
                others: others.iter().map(|&i| names[i].as_str()).collect(),
                gone: gone.iter().map(|&i| names[i].as_str()).collect(),
                action_types: params.action_types,
                state: &states[speaker],
                scene: scene_lines,
                observation: &shown.texts,
                pictures: caption.as_deref(),
                history: &history,
                round,
                rounds: params.rounds,
                message_budget_words: params.message_budget_words,
            };
            let rules = TurnRules {
                message_budget_words: params.message_budget_words,
                action_types: params.action_types,
                gone,
            };
            let turn_schema = schema(&names, speaker, &rules);
            let mut request = ChatRequest::new(question(ctx, TEMPLATE, &view, attachments)?)
                .with_schema("turn", turn_schema.clone());
            request.decoder_schema = Some(decoder_schema(
                &names,
                speaker,
                &rules,
                crate::llm::local::LOCAL_MAX_STRING_CHARS as usize,
            ));
            request.temperature = params.temperature;
            request.seed = Some(turn_seed);
            request.replicate = plan.replicate;
            request.max_tokens = Some(params.max_tokens);
            let validate = |value: &serde_json::Value| {
                let turn = check_turn(value, &names, speaker, &rules)?;
                check_novel(&turn, &names, &said)?;
                Ok(turn)
            };
            let (turn, completion) = ask_model(ctx, &models[speaker], &request, validate)
                .await
                .map_err(|failure| SimulateError::Turn {
                    round,
                    name: names[speaker].clone(),
                    reason: failure.to_string(),
                })?;
            ctx.count("turns", 1);
            ctx.count("refused_answers", completion.rejected.len() as u64);
            states[speaker] = AffectiveState {
                emotion: turn.emotion,
                emotion_description: Some(turn.emotion_description.clone()),
                facial_expression: turn.facial_expression.clone(),
                body_action: turn.body_actions.clone(),
            };
            history.push(Said {
                speaker: names[speaker].clone(),
                message: turn.message.clone(),
                action: turn.action_type.map(ActionType::as_str),
            });
            said.push((speaker, turn.message.clone()));
            spoken.push(speaker);
            suggestion = turn.next_speaker_index;
            let mut portrait_edited = false;
            let portrait_note = match (&mut gallery, &editor) {
                _ if !turn.image_edit => None,
                (None, _) => Some(format!("not edited: {} runs show no portraits", plan.mode)),
                (Some(_), None) => Some(
                    "not edited: no image edit endpoint in [llm.roles] image_edit (the offline \
                     filter cannot change an expression)"
                        .to_string(),
                ),
                (Some(gallery), Some(editor)) => match pictures::editable(gallery, speaker) {
                    Err(why) => Some(format!("not edited: no portrait ({why})")),
                    Ok(()) => {
                        let prompt = pictures::edit_prompt(
                            &names[speaker],
                            turn.emotion,
                            &turn.facial_expression,
                            &turn.body_actions,
                        );
                        let (_, paid) = pictures::edit_portrait(
                            ctx, &**editor, gallery, speaker, &prompt, turn_seed,
                        )
                        .await?;
                        ctx.count("portrait_edits", u64::from(paid));
                        let png = pictures::portrait_png(gallery, speaker).unwrap_or_default();
                        let key = format!("t{round}-{}", names[speaker]);
                        outputs.put_png(ctx, &EDITED_PORTRAIT_PNG, &key, png)?;
                        portrait_edited = true;
                        None
                    }
                },
            };
            turns.push(TurnRecord {
                round,
                speaker,
                human: models[speaker] == ModelRef::Human,
                shown,
                turn,
                rejected: completion.rejected,
                request_key: completion.key.to_hex(),
                prompt_tokens: completion.first_usage.prompt_tokens,
                completion_tokens: completion.first_usage.completion_tokens,
                cost_usd: completion.first_usage.cost_usd,
                portrait_edited,
                portrait_note,
                portraits_after: gallery.as_ref().map(Gallery::hashes).unwrap_or_default(),
            });
            let action = turns.last().and_then(|record| record.turn.action_type);
            if let Some(ended) = presence.after_turn(speaker, action) {
                end = ended;
                break;
            }
        }
        let trace = Trace {
            settings: RunSettings {
                scenario: plan.scenario.clone(),
                mode: plan.mode,
                cast: plan
                    .cast
                    .iter()
                    .map(|seat| (seat.name.clone(), seat.model.clone()))
                    .collect(),
                replicate: plan.replicate,
                seed: params.seed,
                rounds: params.rounds,
                temperature: params.temperature,
                speaker_policy: params.speaker_policy,
                message_budget_words: params.message_budget_words,
            },
            scene: scene_view
                .map(|described| described.lines)
                .unwrap_or_default(),
            turns,
            end,
        };
        outputs.put(ctx, &TRACE, &trace)?;
        Ok(outputs)
    }
}

/// The simulation runs a build holds, for a summary line.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunsSummary {
    /// Runs with a trace, per mode.
    pub runs: BTreeMap<String, usize>,
    pub failed: usize,
    pub turns: usize,
    /// Answers the agents gave: one per turn plus every refused one.
    pub answers: usize,
    pub refused: usize,
    /// Per agent model (as `[llm.roles]` names it), what its turns cost.
    pub by_model: BTreeMap<String, AgentTotals>,
}

/// What one agent model's turns cost over the stored runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AgentTotals {
    pub runs: usize,
    pub turns: usize,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// `None` when some turn's model has no price.
    pub cost_usd: Option<f64>,
}

impl RunsSummary {
    pub fn render(&self) -> String {
        let per_mode: Vec<String> = self
            .runs
            .iter()
            .map(|(mode, count)| format!("{count} {mode}"))
            .collect();
        let mut out = format!(
            "simulation: {} run(s) ({}), {} failed; {} turns, {} agent answers ({} refused and \
             re-asked)\n",
            self.runs.values().sum::<usize>(),
            per_mode.join(", "),
            self.failed,
            self.turns,
            self.answers,
            self.refused
        );
        for (model, totals) in &self.by_model {
            out.push_str(&format!(
                "  {model}: {} turns in {} run(s), {} prompt + {} answer tokens, cost {}\n",
                totals.turns,
                totals.runs,
                totals.prompt_tokens,
                totals.completion_tokens,
                totals
                    .cost_usd
                    .map_or("unknown (no price)".to_string(), |c| format!("${c:.4}"))
            ));
        }
        out
    }
}

/// What `store` holds of `simulate`: `None` when no run was played or tried.
pub fn runs_summary(
    store: &crate::dag::store::Store,
) -> Result<Option<RunsSummary>, SimulateError> {
    let records = store.index().scan_stage(NAME)?;
    if records.is_empty() {
        return Ok(None);
    }
    let mut summary = RunsSummary {
        failed: records.iter().filter(|(_, r)| r.error.is_some()).count(),
        ..RunsSummary::default()
    };
    let traces: Vec<(String, Trace)> = store.outputs(&TRACE, &records)?;
    for (_, trace) in traces {
        *summary
            .runs
            .entry(trace.settings.mode.to_string())
            .or_default() += 1;
        summary.turns += trace.turns.len();
        let mut seated: Vec<&str> = Vec::new();
        for turn in &trace.turns {
            let Some((_, model)) = trace.settings.cast.get(turn.speaker) else {
                continue;
            };
            let totals = summary
                .by_model
                .entry(model.clone())
                .or_insert(AgentTotals {
                    cost_usd: Some(0.0),
                    ..AgentTotals::default()
                });
            if !seated.contains(&model.as_str()) {
                seated.push(model);
                totals.runs += 1;
            }
            totals.turns += 1;
            totals.prompt_tokens += turn.prompt_tokens;
            totals.completion_tokens += turn.completion_tokens;
            totals.cost_usd = totals.cost_usd.zip(turn.cost_usd).map(|(a, b)| a + b);
        }
        let refused: usize = trace.turns.iter().map(|t| t.rejected.len()).sum();
        summary.refused += refused;
        summary.answers += trace.turns.len() + refused;
    }
    Ok(Some(summary))
}

/// Every stored trace in run order. Runs that failed have no trace and are not there.
pub fn traces(store: &crate::dag::store::Store) -> Result<Vec<(String, Trace)>, SimulateError> {
    Ok(store.read_all(&TRACE)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::request::{Part, Role};

    /// llama.cpp takes the turn's decoder schema, with and without action types.
    #[test]
    fn the_embedded_decoder_takes_the_turn_schema() {
        let names = [
            "Noor".to_string(),
            "Theo".to_string(),
            "Mr. Heckles".to_string(),
        ];
        for action_types in [false, true] {
            let rules = TurnRules {
                action_types,
                ..TurnRules::default()
            };
            let schema = decoder_schema(
                &names,
                0,
                &rules,
                crate::llm::local::LOCAL_MAX_STRING_CHARS as usize,
            );
            llama_cpp_2::json_schema_to_grammar(&schema.to_string()).unwrap();
        }
    }

    fn persona(name: &str, outcome: &str) -> Persona {
        Persona {
            name: name.to_string(),
            gender: Gender::Female,
            age: "30s".to_string(),
            occupation: "courier".to_string(),
            expression_style: ExpressionStyle::HonestSignaling,
            conflict_characteristic: ConflictCharacteristic::Competing,
            expression_task: format!("{name} says plainly what the fuel costs."),
            characteristic_task: format!("{name} does not give ground."),
            interaction_regulation_task: format!("{name} keeps the talk on the money."),
            interaction_outcome_task: outcome.to_string(),
        }
    }

    fn state(emotion: Emotion, face: &str, body: &str) -> AffectiveState {
        AffectiveState {
            emotion,
            emotion_description: None,
            facial_expression: face.to_string(),
            body_action: body.to_string(),
        }
    }

    /// What the speaker is told: its own profile and tasks only, how it is now, the others as
    /// the oracle describes them, and the conversation.
    #[test]
    fn an_agent_sees_its_own_tasks_the_others_as_described_and_the_history() {
        let personas = [
            persona("Ada", "Ada gets Ben to pay for the fuel by Friday."),
            persona("Ben", "Ben gets Ada to lend him the van tonight."),
        ];
        let states = [
            state(Emotion::Anger, "a tight frown.", "crosses arms"),
            state(Emotion::Fear, "eyes down", "shifts a box."),
        ];
        let observation = oracle_view(&personas, &states, &[1]);
        assert_eq!(
            observation,
            ["Ben looks afraid; face: eyes down; body: shifts a box"]
        );
        let history = [Said {
            speaker: "Ben".to_string(),
            message: "I left my wallet.".to_string(),
            action: None,
        }];
        let view = AgentView {
            show: "Van",
            heading: Some("A petrol station"),
            background: "Two flatmates share a van.",
            situation: "Ada and Ben argue about who pays for fuel.",
            me: &personas[0],
            others: vec!["Ben"],
            gone: Vec::new(),
            action_types: false,
            state: &states[0],
            scene: &[],
            observation: &observation,
            pictures: None,
            history: &history,
            round: 2,
            rounds: 15,
            message_budget_words: Some(40),
        };
        let template = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts/simulate.j2");
        let messages = crate::llm::render_prompt(&template, &view).unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(
            (messages[0].role, messages[1].role),
            (Role::System, Role::User)
        );
        let [Part::Text(system)] = &messages[0].content[..] else {
            panic!("{messages:?}")
        };
        let [Part::Text(user)] = &messages[1].content[..] else {
            panic!("{messages:?}")
        };
        assert!(system.starts_with("You are Ada, "), "{system}");
        for expected in [
            "The scene (A petrol station): Ada and Ben argue",
            "Ada, female, 30s, courier.",
            "How you put things: honest signaling.",
            "4. Ada gets Ben to pay for the fuel by Friday.",
            "How you are right now: Anger; your face: a tight frown.",
            "- Ben looks afraid; face: eyes down; body: shifts a box\n",
            "The conversation so far, oldest first:\n- Ben said: \"I left my wallet.\"\n",
            "This is turn 2 of 15.",
            "at most 40 words",
        ] {
            assert!(user.contains(expected), "{expected:?} not in:\n{user}");
        }
        assert!(
            !user.contains("lend him the van"),
            "another role's task leaked"
        );

        let text_view = AgentView {
            observation: &[],
            history: &[],
            message_budget_words: None,
            ..view
        };
        let messages = crate::llm::render_prompt(&template, &text_view).unwrap();
        let [Part::Text(user)] = &messages[1].content[..] else {
            panic!("{messages:?}")
        };
        assert!(!user.contains("What you can see of the others"), "{user}");
        assert!(user.contains("Nobody has spoken yet"), "{user}");
        assert!(!user.contains("at most"), "{user}");
    }
}

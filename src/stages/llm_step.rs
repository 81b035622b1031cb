//! What the LLM annotation stages share: which model they ask (a role from viss.toml), how a
//! prompt template becomes a request, and how a validated answer becomes a typed record.
//! A stage file then only says what its step asks and what it keeps.

use std::collections::{BTreeMap, BTreeSet};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::annotation::check::{Checked, Found, Refusal, Rejection};
use crate::annotation::words::Instructions;
use crate::annotation::{ConflictIntensity, PromptAnswer, ScenarioContext, VISUAL_EVIDENCE};
use crate::dag::cost::AnswersCost;
use crate::dag::port::{Port, PortId};
use crate::dag::store::Store;
use crate::dag::{AppCtx, JobCtx, Outputs, StageFailure};
use crate::llm::prompt::render_prompt;
use crate::llm::request::{Part, Role};
use crate::llm::{ChatRequest, LlmPool, ModelRef};
use crate::project::Project;
use crate::range::{BadSetting, Validate, check, check_some};
use crate::stages::match_roles::RoleMatches;
use crate::stages::profiles::answer::ScenarioProfiles;
use crate::stages::{group_image, parse_script};

/// Which configured model a step uses: `[llm.roles]` in viss.toml.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelRole {
    Annotator,
    Writer,
    Describer,
}

impl ModelRole {
    pub fn model(self, pool: &LlmPool) -> &ModelRef {
        self.of(&pool.config().roles)
    }

    /// The model `[llm.roles]` gives this role.
    pub fn of(self, roles: &crate::llm::config::RolesConfig) -> &ModelRef {
        match self {
            ModelRole::Annotator => &roles.annotator,
            ModelRole::Writer => &roles.writer,
            ModelRole::Describer => &roles.describer,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ModelRole::Annotator => "annotator",
            ModelRole::Writer => "writer",
            ModelRole::Describer => "describer",
        }
    }
}

/// An LLM step: it renders its template in prompts/ with the scenario's dialogue and the
/// answers of the earlier steps it reads (see `viss graph`), and asks the model for JSON
/// matching the step's schema. An answer that does not parse or validate is sent back with the
/// problem named, at most 5 times. Then the answer that only fails quality gates, and the fewest,
/// is kept, flagged with them (`viss review`); with none usable the item fails. Nothing is ever
/// filled in by default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Sampling {
    /// The model of [llm.roles] in viss.toml: annotator, writer or describer.
    pub role: ModelRole,
    /// Sampling temperature, 0 to 2.
    pub temperature: f32,
    /// Any 64-bit unsigned integer; unset: the server's choice.
    pub seed: Option<u64>,
    /// Answer tokens at most, 1 to 131072.
    pub max_tokens: u32,
    /// Show the model G itself: attach the scenario's group image G to the question, scaled to
    /// fit N x N pixels (the paper's describer saw it; 448 keeps it cheap), 16 to 4096. The
    /// step then reads group_image too; it needs a model that takes images, e.g. an endpoint's
    /// gpt-4o (the embedded model takes none). Unset: not attached.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(example = 448)]
    pub attach_group_image: Option<u32>,
    /// Ask for one participant's entry at a time (after the scene's own fields), each request
    /// showing the entries already given: a small model then keeps the roles apart instead of
    /// writing one entry for all. Costs a request per participant. Unset: per role for the
    /// embedded model, the whole answer at once from an endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(example = true)]
    pub per_role: Option<bool>,
}

/// The ranges of the sampling settings every LLM step has.
pub mod ranges {
    use crate::range::Range;

    /// OpenAI's range; 0 is the most deterministic.
    pub const TEMPERATURE: Range = Range::new(0.0, 2.0);
    /// Answer tokens; a larger answer than a model's context cannot be generated anyway.
    pub const MAX_TOKENS: Range = Range::new(1.0, 131_072.0);
    pub const ATTACH_GROUP_IMAGE: Range = Range::new(16.0, 4096.0);
}

impl Validate for Sampling {
    fn validate(&self) -> Result<(), BadSetting> {
        check("temperature", self.temperature, ranges::TEMPERATURE)?;
        check("max_tokens", self.max_tokens, ranges::MAX_TOKENS)?;
        check_some(
            "attach_group_image",
            self.attach_group_image,
            ranges::ATTACH_GROUP_IMAGE,
        )
    }
}

impl Default for Sampling {
    fn default() -> Self {
        Self::annotator()
    }
}

impl Sampling {
    pub const fn annotator() -> Self {
        Self {
            role: ModelRole::Annotator,
            temperature: 0.0,
            seed: Some(7),
            max_tokens: 2048,
            attach_group_image: None,
            per_role: None,
        }
    }

    /// Whether answers with roles are asked for one role at a time from `model`.
    pub fn asks_per_role(&self, model: &ModelRef) -> bool {
        self.per_role.unwrap_or(matches!(model, ModelRef::Local))
    }
}

/// The stage's model as its cache key names it (role -> endpoint and model, or the local
/// file's hash), so configuring another model re-runs the stage.
pub fn model_identity(
    sampling: &Sampling,
    project: &Project,
    store: &Store,
) -> Result<BTreeMap<String, String>, StageFailure> {
    let pool = LlmPool::new(project.config.llm.clone(), project.root.clone());
    let model = sampling.role.model(&pool).clone();
    Ok([(
        sampling.role.name().to_string(),
        model_identity_of(&model, project, store)?,
    )]
    .into())
}

/// `model` as a cache key names it: its endpoint's base URL and model, or the local file's hash
/// and sampler settings.
pub fn model_identity_of(
    model: &ModelRef,
    project: &Project,
    store: &Store,
) -> Result<String, StageFailure> {
    let pool = LlmPool::new(project.config.llm.clone(), project.root.clone());
    let identity = pool.identity(model, |path| {
        crate::dag::local_model_fingerprint(store, path)
    })?;
    Ok(format!("{}#{}", identity.base_url, identity.model))
}

/// What [`ask`] got: what the validator made of the accepted answer, and why each answer before
/// it was rejected (redacted), in order.
#[derive(Debug, Clone, PartialEq, schemars::JsonSchema)]
pub struct Asked<T> {
    pub answer: T,
    pub rejected: Vec<Refusal>,
    /// The quality gates the answer still fails: it was kept after its re-asks, flagged
    /// (empty: a clean answer), then what is for a person to review.
    pub problems: Vec<crate::dag::problem::Problem>,
}

impl<T> Asked<T> {
    /// The answer `checked` holds, flagged with its gates and what is for review.
    fn of(checked: Checked<T>, rejected: Vec<Refusal>) -> Asked<T> {
        let (answer, problems) = checked.into_flagged();
        Asked {
            answer,
            rejected,
            problems,
        }
    }
}

/// The literal text of the stage's prompt `template` and of `schema`: what no answer may copy
/// (see [`Instructions`]), read from the template the stage renders.
pub fn instructions(
    ctx: &JobCtx,
    template: &str,
    schema: &StepSchema,
) -> Result<Instructions, StageFailure> {
    let path = ctx.prompt_path(template).ok_or_else(|| {
        StageFailure::from(LlmStepError::UndeclaredPrompt {
            stage: ctx.stage.clone(),
            template: template.to_string(),
        })
    })?;
    let mut source = std::fs::read_to_string(path)?;
    // Asked per role, the question ends with this text too, and an answer copying it is as
    // empty as one copying the step's own instructions.
    if let Some(one_part) = ctx.prompt_path(ONE_PART_PROMPT) {
        source.push('\n');
        source.push_str(&std::fs::read_to_string(one_part)?);
    }
    Ok(Instructions::from_prompt(&source, &schema.portable))
}

/// Renders `template` (declared in the stage's `prompts`) with `context`, asks the stage's model
/// for a JSON value matching `schema` that `validate` accepts, and returns what `validate`
/// made of it, with the reasons the answers before it were rejected. The model is re-asked with
/// the problem named up to five times. When every answer was rejected, the one that only fails
/// quality gates, and the fewest of them, is kept, flagged with them ([`Asked::problems`]);
/// when none is usable the item fails with the last problem. Nothing is ever defaulted.
pub async fn ask<T>(
    ctx: &JobCtx,
    sampling: &Sampling,
    template: &str,
    context: &impl Serialize,
    attachments: Vec<Part>,
    schema: StepSchema,
    validate: impl Fn(&Value) -> Result<Checked<T>, Rejection> + Sync,
) -> Result<Asked<T>, StageFailure> {
    let model = sampling.role.model(ctx.llm());
    let request = step_request(ctx, sampling, template, context, attachments, schema)?;
    let passed = |value: &Value| validate(value).and_then(Checked::passed);
    // An answer that only fails gates is kept below: the same one on every rebuild.
    let usable = |value: &Value| validate(value).is_ok();
    match ask_request_unless_unanswered(ctx, model, &request, passed, Some(&usable)).await? {
        Ok(asked) => Ok(Asked::of(asked.answer, asked.rejected)),
        Err(unanswered) => match kept_flagged(&unanswered, &validate) {
            Some((_, checked)) => Ok(Asked::of(checked, rejected_of(&unanswered))),
            None => Err(failed(ctx, model, unanswered).into()),
        },
    }
}

/// Of the answers a model gave without one passing, the one to keep flagged: usable (it only
/// fails quality gates) with the fewest problems, the latest of those; `None` when no answer
/// was usable.
fn kept_flagged<T>(
    unanswered: &crate::llm::LlmError,
    validate: &(impl Fn(&Value) -> Result<Checked<T>, Rejection> + ?Sized),
) -> Option<(Value, Checked<T>)> {
    let crate::llm::LlmError::InvalidOutput { parsed, .. } = unanswered else {
        return None;
    };
    let mut best: Option<(Value, Checked<T>)> = None;
    for rejected in parsed {
        if let Ok(checked) = validate(&rejected.value)
            && best
                .as_ref()
                .is_none_or(|(_, kept)| checked.gates.len() <= kept.gates.len())
        {
            best = Some((rejected.value.clone(), checked));
        }
    }
    best
}

/// Why each answer of a call that never passed was rejected, redacted, as [`Asked::rejected`]
/// keeps them.
fn rejected_of(unanswered: &crate::llm::LlmError) -> Vec<Refusal> {
    match unanswered {
        crate::llm::LlmError::InvalidOutput {
            parsed,
            last_problem,
            ..
        } => {
            let mut refusals: Vec<Refusal> = parsed
                .iter()
                .map(|rejected| redacted(rejected.refusal.clone()))
                .collect();
            if refusals.is_empty() {
                refusals.push(redacted(last_problem.clone()));
            }
            refusals
        }
        _ => Vec::new(),
    }
}

/// A refusal as a record keeps it: a server may have echoed a secret into what it said.
fn redacted(refusal: Refusal) -> Refusal {
    refusal.map_text(crate::redact::redact_owned)
}

/// The request of a step's question: `template` rendered with `context`, `attachments` added,
/// answered in `schema` with `sampling`'s settings.
fn step_request(
    ctx: &JobCtx,
    sampling: &Sampling,
    template: &str,
    context: &impl Serialize,
    attachments: Vec<Part>,
    schema: StepSchema,
) -> Result<ChatRequest, StageFailure> {
    let mut request = ChatRequest::new(question(ctx, template, context, attachments)?)
        .with_schema(&schema.name, schema.portable);
    request.decoder_schema = schema.decoder;
    request.avoid_words = schema.avoid_words;
    request.temperature = sampling.temperature;
    request.seed = sampling.seed;
    request.max_tokens = Some(sampling.max_tokens);
    Ok(request)
}

async fn ask_request_unless_unanswered<T>(
    ctx: &JobCtx,
    model: &ModelRef,
    request: &ChatRequest,
    validate: impl Fn(&Value) -> Result<T, Rejection> + Sync,
    keep: Option<crate::llm::Keep<'_>>,
) -> Result<Result<Asked<T>, crate::llm::LlmError>, StageFailure> {
    Ok(
        ask_model_unless_unanswered(ctx, model, request, validate, keep)
            .await?
            .map(|(answer, completion)| Asked {
                answer,
                rejected: completion.rejected,
                problems: Vec::new(),
            }),
    )
}

/// The messages of `template` (declared in the stage's `prompts`) rendered with `context`, with
/// `attachments` added to its last user message.
pub fn question(
    ctx: &JobCtx,
    template: &str,
    context: &impl Serialize,
    attachments: Vec<Part>,
) -> Result<Vec<crate::llm::request::Message>, StageFailure> {
    let path = ctx.prompt_path(template).ok_or_else(|| {
        StageFailure::from(LlmStepError::UndeclaredPrompt {
            stage: ctx.stage.clone(),
            template: template.to_string(),
        })
    })?;
    let mut messages = render_prompt(path, context)?;
    if !attachments.is_empty() {
        let question = messages
            .iter_mut()
            .rev()
            .find(|message| message.role == Role::User)
            .ok_or_else(|| LlmStepError::NoUserMessage {
                template: template.to_string(),
            })?;
        question.content.extend(attachments);
    }
    Ok(messages)
}

/// Asks `model` for `request`'s answer that `validate` accepts (re-asked with the problem up
/// to five times, then the item fails), and returns what `validate` made of it with the
/// completion (its cache key, usage, and the redacted reasons earlier answers were rejected).
pub async fn ask_model<T>(
    ctx: &JobCtx,
    model: &ModelRef,
    request: &ChatRequest,
    validate: impl Fn(&Value) -> Result<T, Rejection> + Sync,
) -> Result<(T, crate::llm::Completion), StageFailure> {
    ask_model_unless_unanswered(ctx, model, request, validate, None)
        .await?
        .map_err(|unanswered| failed(ctx, model, unanswered).into())
}

/// [`ask_model`], except that a model that gave no usable answer in all its tries is handed
/// back (`Ok(Err(LlmError::InvalidOutput))`) for the stage to record, rather than failing the
/// item; any other failure (an endpoint down, a prompt too long) still fails it, so a rebuild
/// retries it. With `keep`, an unanswered call the caller keeps an answer of is replayed on a
/// rebuild rather than asked again ([`crate::llm::complete_json_keeping`]).
pub async fn ask_model_unless_unanswered<T>(
    ctx: &JobCtx,
    model: &ModelRef,
    request: &ChatRequest,
    validate: impl Fn(&Value) -> Result<T, Rejection> + Sync,
    keep: Option<crate::llm::Keep<'_>>,
) -> Result<Result<(T, crate::llm::Completion), crate::llm::LlmError>, StageFailure> {
    let mut completion = match ctx
        .ask_llm(model, request, &|value| validate(value).map(|_| ()), keep)
        .await
    {
        Ok(completion) => completion,
        Err(unanswered @ crate::llm::LlmError::InvalidOutput { .. }) => return Ok(Err(unanswered)),
        Err(error) => return Err(failed(ctx, model, error).into()),
    };
    let answer = validate(&completion.value).map_err(|rejection| LlmStepError::Invalid {
        problem: rejection.message(),
    })?;
    completion.rejected = completion.rejected.into_iter().map(redacted).collect();
    Ok(Ok((answer, completion)))
}

/// What became of a question whose model may stay unanswered (a judge, an interviewed agent):
/// its refused answers with why and its cost, or why it counts as missing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AnswerRecord {
    /// Why it counts as missing (no usable answer after the re-asks); `None` when answered.
    pub failed: Option<String>,
    /// The answers refused before the accepted one, with why.
    pub rejected: Vec<Refusal>,
    pub request_key: Option<String>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// [`ask_model_unless_unanswered`] recorded: the answer with its record, or the record of why
/// there is none (counted under `missing` in the stage's counts).
pub async fn ask_recorded<T>(
    ctx: &JobCtx,
    model: &ModelRef,
    request: &ChatRequest,
    validate: impl Fn(&Value) -> Result<T, Rejection> + Sync,
    missing: &str,
) -> Result<(AnswerRecord, Option<T>), StageFailure> {
    Ok(
        match ask_model_unless_unanswered(ctx, model, request, validate, None).await? {
            Ok((answer, completion)) => {
                ctx.count("refused_answers", completion.rejected.len() as u64);
                let record = AnswerRecord {
                    failed: None,
                    rejected: completion.rejected,
                    request_key: Some(completion.key.to_hex()),
                    prompt_tokens: completion.first_usage.prompt_tokens,
                    completion_tokens: completion.first_usage.completion_tokens,
                };
                (record, Some(answer))
            }
            Err(unanswered) => {
                ctx.count(missing, 1);
                let record = AnswerRecord {
                    failed: Some(crate::redact::redact(&unanswered.to_string()).into_owned()),
                    rejected: Vec::new(),
                    request_key: None,
                    prompt_tokens: 0,
                    completion_tokens: 0,
                };
                (record, None)
            }
        },
    )
}

fn failed(ctx: &JobCtx, model: &ModelRef, source: crate::llm::LlmError) -> LlmStepError {
    let (stage, item, model) = (ctx.stage.clone(), ctx.item.clone(), model.to_string());
    match source {
        crate::llm::LlmError::BudgetReached { .. } | crate::llm::LlmError::Unpriced { .. } => {
            LlmStepError::NotAsked {
                stage,
                item,
                model,
                source,
            }
        }
        source => LlmStepError::Failed {
            stage,
            item,
            model,
            source,
        },
    }
}

/// The template of the request for one part of an answer asked per role ([`ask_per_role`]).
pub const ONE_PART_PROMPT: &str = "one_part.j2";

/// What [`ONE_PART_PROMPT`] sees.
#[derive(Debug, Serialize)]
struct OnePart<'a> {
    /// The step asking (its stage's name).
    step: &'a str,
    /// "scene" (the answer's own fields) or "role".
    part: &'static str,
    /// The fields this request asks for.
    fields: Vec<String>,
    /// The participant this request asks about.
    role: Option<&'a str>,
    /// The other participants of the scene (all of them for the scene's part).
    others: Vec<&'a str>,
    /// What the participant asked about says in the scene, line by line (lines spoken together
    /// with others included).
    own_lines: Vec<&'a str>,
    /// The scene's fields as given, as JSON.
    scene: Option<String>,
    /// The entries already given for earlier participants, as JSON, one each.
    earlier: Vec<String>,
}

/// [`ask`], one part at a time: first the answer's fields other than `roles` (if it has any),
/// then each participant's entry, each request showing what is already given (for the
/// free-text steps, the scene's fields and the participant's own lines instead of the other
/// entries: `one_part.j2`). A part is
/// re-asked with the validator's problems that concern it: validating the answer so far, a
/// scene part keeps the problems that name no participant and no role entry, a role's part
/// those that name it first. The whole answer is validated at the end like any other. A step
/// that is not asked per role ([`Sampling::asks_per_role`]), a scene with one participant or an
/// answer without roles is asked whole, by [`ask`].
///
/// A role that never sees the others' entries can be stuck writing one of them again: when a
/// role's part fails, it is asked once more held to its own problems alone, and if that
/// answer passes, the earlier roles it repeats are asked again instead, with it in place (see
/// [`way_out_of_repeats`]).
pub async fn ask_per_role<T>(
    ctx: &JobCtx,
    sampling: &Sampling,
    template: &str,
    context: &ScenarioContext,
    attachments: Vec<Part>,
    schema: StepSchema,
    validate: impl Fn(&Value) -> Result<Checked<T>, Rejection> + Sync,
) -> Result<Asked<T>, StageFailure> {
    let per_role =
        sampling.asks_per_role(sampling.role.model(ctx.llm())) && context.participants.len() > 1;
    let Some(whole) = schema.decoder.clone().filter(|decoder| {
        per_role
            && decoder
                .pointer("/properties/roles/prefixItems")
                .is_some_and(Value::is_array)
    }) else {
        return ask(
            ctx,
            sampling,
            template,
            context,
            attachments,
            schema,
            validate,
        )
        .await;
    };
    let participants = &context.participants;
    let mut role_schemas: Vec<Value> = whole["properties"]["roles"]["prefixItems"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut scene_schema = whole.clone();
    if let Some(properties) = scene_schema["properties"].as_object_mut() {
        properties.remove("roles");
    }
    if let Some(required) = scene_schema["required"].as_array_mut() {
        required.retain(|name| name != "roles");
    }
    let scene_fields = field_names(&scene_schema);
    let asking = (ctx, sampling, template, context, attachments.as_slice());
    let mut rejected = Vec::new();
    let mut scene = serde_json::Map::new();
    if !scene_fields.is_empty() {
        let part = OnePart {
            step: &ctx.stage,
            part: "scene",
            fields: scene_fields,
            role: None,
            others: participants.iter().map(String::as_str).collect(),
            own_lines: Vec::new(),
            scene: None,
            earlier: Vec::new(),
        };
        let check = |value: &Value| {
            let Some(fields) = value.as_object() else {
                let mut problems = crate::annotation::check::Problems::new();
                problems.unusable_whole("not_an_object", "give one JSON object".to_string());
                return problems.finish();
            };
            match validate(&assemble(fields, &[])).and_then(Checked::clean) {
                Ok(_) => Ok(()),
                Err(rejection) => rejection.keeping(Found::is_scene),
            }
        };
        let asked = ask_part(
            asking,
            &part,
            part_schema(&schema, "scene", scene_schema),
            &check,
            None,
        )
        .await?;
        let answer = match asked {
            Ok(asked) => {
                rejected.extend(asked.rejected);
                asked.answer
            }
            // Kept as it is, if anything can be: the whole answer decides below.
            Err(unanswered) => {
                rejected.extend(rejected_of(&unanswered));
                fewest_problems(&unanswered, &check).ok_or_else(|| {
                    StageFailure::from(failed(ctx, sampling.role.model(ctx.llm()), unanswered))
                })?
            }
        };
        scene = answer.as_object().cloned().unwrap_or_default();
        if let Some(refine_role) = schema.refine_role {
            for (role, name) in role_schemas.iter_mut().zip(participants) {
                let others: Vec<String> = participants
                    .iter()
                    .filter(|other| *other != name)
                    .cloned()
                    .collect();
                refine_role(role, name, &others, context, Some(&scene));
            }
        }
    }
    let validate_whole = |value: &Value| validate(value).and_then(Checked::clean).map(|_| ());
    let role_asking = RoleAsking {
        asking,
        schema: &schema,
        role_schemas: &role_schemas,
        scene: &scene,
        validate: &validate_whole,
    };
    let mut roles: Vec<Value> = Vec::new();
    for index in 0..participants.len().min(role_schemas.len()) {
        let answer = match role_asking.ask(index, &roles, &roles, &[]).await? {
            Ok(asked) => {
                rejected.extend(asked.rejected);
                asked.answer
            }
            Err(unanswered) => {
                match way_out_of_repeats(&role_asking, index, &mut roles, unanswered, &mut rejected)
                    .await?
                {
                    Ok(answer) => answer,
                    // The role's best entry stands, if it is usable: the whole answer decides.
                    Err(unanswered) => {
                        let beside_earlier = |value: &Value| {
                            let mut entries = roles.clone();
                            entries.push(value.clone());
                            role_asking.problems_of(index, &entries, roles.len())
                        };
                        fewest_problems(&unanswered, &beside_earlier).ok_or_else(|| {
                            StageFailure::from(failed(
                                ctx,
                                sampling.role.model(ctx.llm()),
                                unanswered,
                            ))
                        })?
                    }
                }
            }
        };
        roles.push(answer);
    }
    let checked =
        validate(&assemble(&scene, &roles)).map_err(|rejection| LlmStepError::PartsDisagree {
            stage: ctx.stage.clone(),
            item: ctx.item.clone(),
            problem: rejection.message(),
        })?;
    Ok(Asked::of(checked, rejected))
}

/// Of a part's answers that never passed, the one `check` finds the fewest problems in (the
/// latest of those), to stand in the whole answer for its validator to judge.
fn fewest_problems(
    unanswered: &crate::llm::LlmError,
    check: &dyn Fn(&Value) -> Result<(), Rejection>,
) -> Option<Value> {
    let crate::llm::LlmError::InvalidOutput { parsed, .. } = unanswered else {
        return None;
    };
    parsed
        .iter()
        .rev()
        .min_by_key(|rejected| check(&rejected.value).err().map_or(0, |r| r.found().len()))
        .map(|rejected| rejected.value.clone())
}

/// The role at `index` failed its part with `unanswered` (every answer it gave rejected),
/// `roles` holding the entries of the roles before it. Per-role asking never shows a role the
/// others' entries, so the small model can write another role's desire or task again through
/// every re-ask, quoted or not. The way out: ask the role once more held to its own problems
/// only (its first answer is the one it gave before, decoded alike); if that passes, ask again
/// each earlier role it repeats, with it in place and the repeat named (the validator reports
/// a repeat across roles on both of them). Returns the role's entry, with `roles` revised, or
/// the entry as it is when it repeats nothing of the earlier roles and passes beside them; the
/// role's own failure stands when its answer has problems of its own or, repeating nothing,
/// fails beside the earlier roles, an earlier role's when that one cannot be asked out of the
/// repeat either.
async fn way_out_of_repeats(
    asking: &RoleAsking<'_>,
    index: usize,
    roles: &mut [Value],
    unanswered: crate::llm::LlmError,
    rejected: &mut Vec<Refusal>,
) -> Result<Result<Value, crate::llm::LlmError>, StageFailure> {
    let (ctx, ..) = asking.asking;
    if let crate::llm::LlmError::InvalidOutput { last_problem, .. } = &unanswered {
        rejected.push(redacted(last_problem.clone()));
    }
    let Ok(alone) = asking.ask(index, &[], roles, &[]).await? else {
        return Ok(Err(unanswered));
    };
    rejected.extend(alone.rejected);
    let repeated: Vec<usize> = (0..roles.len())
        .filter(|&earlier| {
            let pair = [roles[earlier].clone(), alone.answer.clone()];
            asking.problems_of(earlier, &pair, 0).is_err()
        })
        .collect();
    if repeated.is_empty() {
        // Asked apart from the repeat, the role may write an entry that also passes beside the
        // earlier roles' (demo, 28 Nov: Noor wrote Theo's task again through ten answers, then
        // something else once held to its own problems); such an entry is an answer.
        let mut beside = roles.to_vec();
        beside.push(alone.answer.clone());
        return Ok(match asking.problems_of(index, &beside, roles.len()) {
            Ok(()) => Ok(alone.answer),
            Err(_) => Err(unanswered),
        });
    }
    tracing::info!(
        stage = %ctx.stage, item = %ctx.item, role = index, earlier = ?repeated,
        "a role's answer repeats earlier roles' entries: asking those again"
    );
    for earlier in repeated {
        let mut alongside: Vec<Value> = roles
            .iter()
            .enumerate()
            .filter(|(other, _)| *other != earlier)
            .map(|(_, entry)| entry.clone())
            .collect();
        alongside.push(alone.answer.clone());
        let context = asking.asking.3;
        let name = &context.participants[earlier];
        let shared = repeated_words(&roles[earlier], &alone.answer, name, context);
        match asking.ask(earlier, &alongside, &alongside, &shared).await? {
            Ok(asked) => {
                rejected.extend(asked.rejected);
                roles[earlier] = asked.answer;
            }
            // The earlier entry stays; the repeat is the whole answer's problem to flag.
            Err(unanswered) => rejected.extend(rejected_of(&unanswered)),
        }
    }
    Ok(Ok(alone.answer))
}

/// What asking one role's part of an answer needs: the step's question (job, sampling,
/// template, context, attachments), its schema, the roles' schemas in participant order, the
/// scene's fields as given and the whole answer's validator.
struct RoleAsking<'a> {
    asking: (
        &'a JobCtx,
        &'a Sampling,
        &'a str,
        &'a ScenarioContext,
        &'a [Part],
    ),
    schema: &'a StepSchema,
    role_schemas: &'a [Value],
    scene: &'a serde_json::Map<String, Value>,
    validate: &'a (dyn Fn(&Value) -> Result<(), Rejection> + Sync),
}

impl RoleAsking<'_> {
    /// Asks for the entry of the participant at `index`, validated alongside the entries
    /// `alongside` (the problems naming it kept), its request showing `shown` as given before,
    /// the embedded model kept from writing `avoid` as well as the step's own words.
    /// A model that gave no usable answer is handed back, as by [`ask_unless_unanswered`].
    async fn ask(
        &self,
        index: usize,
        alongside: &[Value],
        shown: &[Value],
        avoid: &[String],
    ) -> Result<Result<Asked<Value>, crate::llm::LlmError>, StageFailure> {
        let (ctx, _, _, context, _) = self.asking;
        let name = &context.participants[index];
        let part = OnePart {
            step: &ctx.stage,
            part: "role",
            fields: field_names(&self.role_schemas[index]),
            role: Some(name),
            others: context
                .participants
                .iter()
                .map(String::as_str)
                .filter(|other| *other != name.as_str())
                .collect(),
            own_lines: context.own_lines(name),
            scene: (!self.scene.is_empty()).then(|| Value::Object(self.scene.clone()).to_string()),
            earlier: shown.iter().map(Value::to_string).collect(),
        };
        let mut schema = part_schema(self.schema, "role", self.role_schemas[index].clone());
        schema.avoid_words.extend(avoid.iter().cloned());
        if let Some(own) = self.schema.avoid_in_own_part.get(index) {
            schema.avoid_words.extend(own.iter().cloned());
        }
        let check = |value: &Value| {
            let mut entries = alongside.to_vec();
            entries.push(value.clone());
            self.problems_of(index, &entries, alongside.len())
        };
        // Shown entries it is not checked beside, the same question is another check's.
        let checked_as = (alongside != shown).then(|| {
            format!(
                "beside {} of the {} entries shown",
                alongside.len(),
                shown.len()
            )
        });
        ask_part(self.asking, &part, schema, &check, checked_as).await
    }

    /// The problems of the answer made of `entries` that concern the participant at `index`,
    /// whose entry is `entries[position]`.
    fn problems_of(
        &self,
        index: usize,
        entries: &[Value],
        position: usize,
    ) -> Result<(), Rejection> {
        let name = &self.asking.3.participants[index];
        match (self.validate)(&assemble(self.scene, entries)) {
            Ok(()) => Ok(()),
            Err(rejection) => rejection.keeping(|found| found.is_about(name, position)),
        }
    }
}

/// The words an earlier role's entry `old` shares with the fields of `repeating` that it says
/// nearly the same as, apart from names, stop words and the words of `role`'s own lines: what
/// the repeat is made of and the scene does not put in the role's mouth. Asked again, the
/// 1.5B model quoted a repeat wrote the quoted sentence under its own name through all ten
/// answers ("... is curious about the plant and wants to know more about it."); kept from these
/// words, it has to say something else.
fn repeated_words(
    old: &Value,
    repeating: &Value,
    role: &str,
    context: &ScenarioContext,
) -> Vec<String> {
    use crate::annotation::gates::{content_words, name_words, near_duplicate};
    let names = name_words(context);
    let spoken: BTreeSet<String> = context
        .own_lines(role)
        .iter()
        .flat_map(|line| content_words(line, &names))
        .collect();
    // Each string field but the name, with its content words.
    let texts = |entry: &Value| -> Vec<(String, BTreeSet<String>)> {
        entry
            .as_object()
            .map(|fields| {
                fields
                    .iter()
                    .filter(|(field, _)| field.as_str() != "name")
                    .filter_map(|(_, value)| value.as_str())
                    .map(|text| (text.to_string(), content_words(text, &names)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let repeating = texts(repeating);
    let mut shared = BTreeSet::new();
    for (before, words_before) in texts(old) {
        for (after, words_after) in &repeating {
            if near_duplicate(&before, after, &names) {
                shared.extend(
                    words_before
                        .intersection(words_after)
                        .filter(|word| !spoken.contains(*word))
                        .cloned(),
                );
            }
        }
    }
    shared.into_iter().collect()
}

/// The whole answer made of the scene's fields and the roles' entries.
fn assemble(scene: &serde_json::Map<String, Value>, roles: &[Value]) -> Value {
    let mut answer = scene.clone();
    answer.insert("roles".to_string(), Value::from(roles.to_vec()));
    Value::Object(answer)
}

/// The schema of one part of `schema`'s answer: it binds the decoder too, and bars the words
/// the whole answer bars.
fn part_schema(schema: &StepSchema, part: &str, part_schema: Value) -> StepSchema {
    StepSchema {
        name: format!("{}_{part}", schema.name),
        portable: part_schema.clone(),
        decoder: Some(part_schema),
        avoid_words: schema.avoid_words.clone(),
        avoid_in_own_part: Vec::new(),
        refine_role: None,
    }
}

/// One part of an answer asked per role: the step's question (`asking`: the job, its sampling,
/// template, context and attachments) with `part`'s text at its end, answered in `schema`, which
/// binds the decoder too, and re-asked while `check` names problems. A model that gave no
/// usable answer is handed back, as by [`ask_unless_unanswered`].
async fn ask_part(
    asking: (&JobCtx, &Sampling, &str, &ScenarioContext, &[Part]),
    part: &OnePart<'_>,
    schema: StepSchema,
    check: &(dyn Fn(&Value) -> Result<(), Rejection> + Sync),
    checked_as: Option<String>,
) -> Result<Result<Asked<Value>, crate::llm::LlmError>, StageFailure> {
    let (ctx, sampling, template, context, attachments) = asking;
    let question = one_part_question(ctx, part, attachments)?;
    let mut request = step_request(ctx, sampling, template, context, question, schema)?;
    request.max_reasks = PART_MAX_REASKS;
    request.checked_as = checked_as;
    let model = sampling.role.model(ctx.llm());
    // Whatever part the model gave, one of them stands in the whole answer (see
    // `fewest_problems`): the same one on every rebuild.
    ask_request_unless_unanswered(
        ctx,
        model,
        &request,
        |value| check(value).map(|()| value.clone()),
        Some(&|_| true),
    )
    .await
}

/// The re-asks a part asked per role gets before it fails: more than a whole answer's
/// ([`crate::llm::MAX_REASKS`]), because per-role asking is for small models, and the 1.5B
/// default's six answers to one role's tasks, each warmer than the last, failed the gates in
/// one tasks item of four on the demo (copying an instruction, repeating another role's task);
/// a part is one short entry, so the extra answers cost seconds, and only where it fails.
pub const PART_MAX_REASKS: u32 = 9;

/// The properties a JSON schema object lists, in order.
fn field_names(schema: &Value) -> Vec<String> {
    schema["properties"]
        .as_object()
        .map(|properties| properties.keys().cloned().collect())
        .unwrap_or_default()
}

/// The text of [`ONE_PART_PROMPT`] for `part`, before the step's `attachments`: what goes at the
/// end of the step's question.
fn one_part_question(
    ctx: &JobCtx,
    part: &OnePart<'_>,
    attachments: &[Part],
) -> Result<Vec<Part>, StageFailure> {
    let path = ctx.prompt_path(ONE_PART_PROMPT).ok_or_else(|| {
        StageFailure::from(LlmStepError::UndeclaredPrompt {
            stage: ctx.stage.clone(),
            template: ONE_PART_PROMPT.to_string(),
        })
    })?;
    let mut parts: Vec<Part> = render_prompt(path, part)?
        .into_iter()
        .filter(|message| message.role == Role::User)
        .flat_map(|message| message.content)
        .collect();
    parts.extend(attachments.iter().cloned());
    Ok(parts)
}

#[derive(Debug, thiserror::Error)]
pub enum LlmStepError {
    #[error(
        "stage {stage} renders prompt template {template:?} but does not declare it; add it to \
         `prompts` in stages/{stage}.toml"
    )]
    UndeclaredPrompt { stage: String, template: String },
    #[error("{stage} {item}: the {model} model gave no usable answer")]
    Failed {
        stage: String,
        item: String,
        model: String,
        #[source]
        source: crate::llm::LlmError,
    },
    /// A spending cap kept the request from being sent.
    #[error("{stage} {item}: {model} was not asked")]
    NotAsked {
        stage: String,
        item: String,
        model: String,
        #[source]
        source: crate::llm::LlmError,
    },
    #[error(
        "{stage} {item}: the answer asked one role at a time was accepted part by part but not \
         as a whole: {problem}; set per_role = false in stages/{stage}.toml to ask for it at once"
    )]
    PartsDisagree {
        stage: String,
        item: String,
        problem: String,
    },
    #[error("an answer passed validation once and not the second time: {problem}")]
    Invalid { problem: String },
    #[error("prompt template {template:?} has no [user] message to attach the group image to")]
    NoUserMessage { template: String },
    #[error("{stage} {item}: the group image cannot be attached: {source}")]
    Attachment {
        stage: String,
        item: String,
        #[source]
        source: image::ImageError,
    },
}

/// What a scenario-level LLM step stores: the validated answer, for which scenario, from which
/// configured model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepRecord<T> {
    pub scenario: String,
    pub model: String,
    pub answer: T,
    /// Why each answer the model gave before the accepted one was rejected (the validator's
    /// messages, redacted), in order: what a scorecard counts re-asks by.
    #[serde(default)]
    pub rejected: Vec<Refusal>,
    /// The quality gates the kept answer still fails after its re-asks: the answer is flagged
    /// (later steps run on it; the export leaves it out until a person accepts or edits it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<crate::dag::problem::Problem>,
    /// The earlier steps whose flagged answers this one was made from (theirs or further up).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flagged_upstream: Vec<String>,
    /// What a person said of it (`viss review`); set only in what later stages read, never in
    /// the stage's own stored record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<ReviewMark>,
}

/// What a step's stored record says of its answer besides the answer: the scenario it was made
/// for, the gates it still fails and a person's verdicts. The export reads it alike for every
/// step.
#[derive(Debug, Clone, Copy)]
pub struct Provenance<'a> {
    pub scenario: &'a str,
    pub problems: &'a [crate::dag::problem::Problem],
    pub review: Option<&'a ReviewMark>,
}

impl<T> StepRecord<T> {
    pub fn provenance(&self) -> Provenance<'_> {
        Provenance {
            scenario: &self.scenario,
            problems: &self.problems,
            review: self.review.as_ref(),
        }
    }
}

impl ProfileRecord {
    /// The provenance of the suggestion this record balanced (`profiles`'s answer).
    pub fn provenance(&self) -> Provenance<'_> {
        Provenance {
            scenario: &self.scenario,
            problems: &self.problems,
            review: self.review.as_ref(),
        }
    }
}

/// A person's verdicts on an answer, as the stages that read it see them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReviewMark {
    pub verdict: ReviewOutcome,
    pub reviewers: Vec<String>,
    /// The fields a person replaced (`background`, `Ada.age`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edited: Vec<String>,
    /// The gates' problems the verdicts settled: accepted as they are, or their field edited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resolved: Vec<crate::dag::problem::Problem>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReviewOutcome {
    Accepted,
    /// One field or more replaced (and the rest accepted, or still flagged).
    Edited,
    /// Left out of the export.
    Rejected,
}

/// `own` if `problems` flag an answer of it, then `upstream`: what a record rests on that a
/// person has yet to check.
pub fn flagged_stages(
    own: &str,
    problems: &[crate::dag::problem::Problem],
    upstream: &[String],
) -> Vec<String> {
    let mut stages: Vec<String> = upstream.to_vec();
    if !problems.is_empty() && !stages.iter().any(|stage| stage == own) {
        stages.insert(0, own.to_string());
    }
    stages
}

/// A scenario-level step's answer type, as later steps' prompts and validators know it.
pub trait StepAnswer: Serialize + DeserializeOwned {
    /// The template name of the answer (`{{ description.background }}`).
    const NAME: &'static str;
}

impl<T: StepAnswer> PromptAnswer for StepRecord<T> {
    const NAME: &'static str = T::NAME;
    type Answer = T;
    fn answer(self) -> T {
        self.answer
    }
    fn flagged(&self, own: &str) -> Vec<String> {
        flagged_stages(own, &self.problems, &self.flagged_upstream)
    }
}

impl PromptAnswer for ProfileRecord {
    const NAME: &'static str = "profiles";
    type Answer = ScenarioProfiles;
    fn answer(self) -> ScenarioProfiles {
        self.profiles
    }
    /// Its problems are those of the suggestion it balanced: `profiles`'s answer.
    fn flagged(&self, _own: &str) -> Vec<String> {
        flagged_stages("profiles", &self.problems, &self.flagged_upstream)
    }
}

/// The group frame's role matches as a prompt sees them: in words, for a model that cannot see.
impl PromptAnswer for RoleMatches {
    const NAME: &'static str = VISUAL_EVIDENCE;
    type Answer = String;
    fn answer(self) -> String {
        self.caption()
    }
}

/// One entry of an LLM step's reads: an earlier step's port, whose answer the step's context
/// holds under the port's template name. `&annotate::ANNOTATION` is one; so is
/// [`NotRead`].
pub trait PromptRead: Sync {
    fn port(&self) -> PortId;
    /// The template name ([`PromptAnswer::NAME`]).
    fn name(&self) -> &'static str;
    /// Whether the step reads the port (it is an input, in the cache key).
    fn is_read(&self) -> bool {
        true
    }
    /// The answer for this job's item as JSON, `null` when its producer wrote none.
    fn answer(&self, ctx: &JobCtx) -> Result<Value, StageFailure>;
    /// The answer for scenario `item`, which must be there: how a benchmark-level step reads
    /// each scenario's.
    fn answer_of(&self, ctx: &JobCtx, item: &str) -> Result<Value, StageFailure>;
    /// The flagged steps the record for scenario `item` (this job's item when `None`) rests on
    /// (see [`PromptAnswer::flagged`]).
    fn flagged(&self, _ctx: &JobCtx, _item: Option<&str>) -> Result<Vec<String>, StageFailure> {
        Ok(Vec::new())
    }
}

impl<R: PromptAnswer> PromptRead for Port<R> {
    fn port(&self) -> PortId {
        self.id()
    }

    fn name(&self) -> &'static str {
        R::NAME
    }

    fn answer(&self, ctx: &JobCtx) -> Result<Value, StageFailure> {
        let answer = ctx.read_optional(self)?.map(R::answer);
        Ok(serde_json::to_value(answer)?)
    }

    fn answer_of(&self, ctx: &JobCtx, item: &str) -> Result<Value, StageFailure> {
        let answer = ctx.read_from(self, item, "")?.answer();
        Ok(serde_json::to_value(answer)?)
    }

    fn flagged(&self, ctx: &JobCtx, item: Option<&str>) -> Result<Vec<String>, StageFailure> {
        let record = match item {
            None => ctx.read_optional(self)?,
            Some(item) => Some(ctx.read_from(self, item, "")?),
        };
        Ok(record.map_or_else(Vec::new, |record| record.flagged(self.id().stage)))
    }
}

/// A port's template name without reading the port: the name is `null` in the step's context.
/// For a template that tests a name its stage has never read, so that it still renders and
/// renders as before.
pub struct NotRead<R>(pub Port<R>);

impl<R: PromptAnswer> PromptRead for NotRead<R> {
    fn port(&self) -> PortId {
        self.0.id()
    }

    fn name(&self) -> &'static str {
        R::NAME
    }

    fn is_read(&self) -> bool {
        false
    }

    fn answer(&self, _: &JobCtx) -> Result<Value, StageFailure> {
        Ok(Value::Null)
    }

    fn answer_of(&self, _: &JobCtx, _: &str) -> Result<Value, StageFailure> {
        Ok(Value::Null)
    }
}

/// A step's inputs: its scenario's context, the earlier steps' ports it reads, and G (the
/// record and the picture) when `attach_group_image` is set.
pub fn step_inputs(sampling: &Sampling, reads: &[&dyn PromptRead]) -> Vec<PortId> {
    let mut inputs = vec![parse_script::CONTEXT.id()];
    inputs.extend(reads.iter().filter(|r| r.is_read()).map(|r| r.port()));
    if sampling.attach_group_image.is_some() {
        inputs.extend([
            group_image::GROUP_IMAGE.id(),
            group_image::GROUP_IMAGE_PNG.id(),
        ]);
    }
    inputs
}

/// A step's context for its prompt template and validator: the scenario, and each of `reads`
/// under its template name with the answer `answer` gives for it (`null`: absent). A name the
/// step does not declare is not there, so a template that uses it fails to render.
pub fn prompt_context(
    scenario: ScenarioContext,
    reads: &[&dyn PromptRead],
    mut answer: impl FnMut(&dyn PromptRead) -> Result<Value, StageFailure>,
) -> Result<ScenarioContext, StageFailure> {
    let mut context = scenario.without_earlier();
    for read in reads {
        context.set_earlier_json(read.name(), answer(*read)?);
    }
    Ok(context)
}

/// This job's scenario's context with the answers of `reads` (an answer a step reads is in its
/// cache key).
pub fn load_context(
    ctx: &JobCtx,
    reads: &[&dyn PromptRead],
) -> Result<ScenarioContext, StageFailure> {
    let scenario = ctx.read(&parse_script::CONTEXT)?;
    prompt_context(scenario, reads, |read| read.answer(ctx))
}

/// For a step every scenario gets an answer of.
pub fn applies_to_every_scenario(_: &ScenarioContext) -> Option<String> {
    None
}

/// A scenario-level step as [`scenario_step!`] declares it.
pub struct ScenarioStep<'a, T> {
    /// The stage's name, which is also its template's (`<name>.j2`) and its schema's.
    pub name: &'static str,
    /// The earlier steps' ports whose answers its context holds.
    pub reads: &'a [&'a dyn PromptRead],
    pub schema: Value,
    pub refine_role: RefineRole,
    /// Word lists the answer may not use and the embedded model is kept from writing
    /// ([`ChatRequest::avoid_words`]).
    pub avoid_words: &'a [&'a [&'a str]],
    /// What a role's own part may not use when the answer is asked per role.
    pub barred_in_own_part: BarredInOwnPart,
    /// How the decoder's schema of the whole answer is narrowed for the scenario.
    pub narrow_answer: NarrowAnswer,
    pub validate: fn(&Value, &ScenarioContext) -> Result<Checked<T>, Rejection>,
    /// Why the step does not apply to a scenario (`None`: it does): such a scenario gets no
    /// answer, nothing is asked, and the item is flagged with the reason.
    pub not_applicable: fn(&ScenarioContext) -> Option<String>,
    /// Where the validated answer goes.
    pub output: &'a Port<StepRecord<T>>,
}

/// One scenario-level step: ask, validate, store the answer as `step.output`.
pub async fn run_scenario_step<T: Serialize>(
    ctx: &JobCtx,
    sampling: &Sampling,
    step: ScenarioStep<'_, T>,
) -> Result<Outputs, StageFailure> {
    let ScenarioStep {
        name: step,
        reads,
        schema,
        refine_role,
        avoid_words,
        barred_in_own_part,
        narrow_answer,
        validate,
        not_applicable,
        output,
    } = step;
    let mut context = load_context(ctx, reads)?;
    if let Some(reason) = not_applicable(&context) {
        return Ok(Outputs {
            flags: vec![reason],
            ..Outputs::default()
        });
    }
    let mut schema = bind_roles(step, schema, &context, refine_role);
    let mut decoder = schema
        .decoder
        .take()
        .unwrap_or_else(|| schema.portable.clone());
    narrow_answer(&mut decoder, &context);
    schema.decoder = (decoder != schema.portable).then_some(decoder);
    schema.avoid_words = avoid_words
        .iter()
        .flat_map(|words| words.iter().map(|word| word.to_string()))
        .collect();
    schema.avoid_in_own_part = context
        .participants
        .iter()
        .map(|role| barred_in_own_part(role, &context))
        .collect();
    let template = format!("{step}.j2");
    context.instructions = instructions(ctx, &template, &schema)?;
    let mut flags = Vec::new();
    let attachments = match sampling.attach_group_image {
        None => Vec::new(),
        Some(size) => match ctx.input(group_image::GROUP_IMAGE_PNG.id()) {
            Ok(input) => {
                let png = ctx.store().get_blob(&input.hash)?;
                let part =
                    Part::image_fitted(&png, size).map_err(|source| LlmStepError::Attachment {
                        stage: ctx.stage.clone(),
                        item: ctx.item.clone(),
                        source,
                    })?;
                vec![part]
            }
            Err(_) => {
                flags.push(
                    "asked without a group image although attach_group_image is set: the scenario \
                     has none (no video?)"
                        .to_string(),
                );
                Vec::new()
            }
        },
    };
    let Asked {
        answer,
        rejected,
        problems,
    } = ask_per_role(
        ctx,
        sampling,
        &template,
        &context,
        attachments,
        schema,
        |value| validate(value, &context),
    )
    .await?;
    let mut flagged_upstream = Vec::new();
    for read in reads.iter().filter(|read| read.is_read()) {
        for stage in read.flagged(ctx, None)? {
            if !flagged_upstream.contains(&stage) {
                flagged_upstream.push(stage);
            }
        }
    }
    let record = StepRecord {
        scenario: context.scenario_id.clone(),
        model: sampling.role.model(ctx.llm()).to_string(),
        answer,
        rejected,
        problems: problems.clone(),
        flagged_upstream,
        review: None,
    };
    let mut outputs = Outputs {
        flags,
        problems,
        ..Outputs::default()
    };
    outputs.put(ctx, output, &record)?;
    put_answers_cost(ctx, &mut outputs, step)?;
    Ok(outputs)
}

/// What `profiles` stores for each scenario: the balanced profiles and why they are what they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProfileRecord {
    pub scenario: String,
    pub model: String,
    pub natural_intensity: ConflictIntensity,
    pub explanation: String,
    pub profiles: ScenarioProfiles,
    /// Why each answer before the accepted one was rejected (see [`StepRecord::rejected`]).
    #[serde(default)]
    pub rejected: Vec<Refusal>,
    /// The problems of the suggestion (`profiles`'s answer) this record balanced, when it was
    /// flagged (see [`StepRecord::problems`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<crate::dag::problem::Problem>,
    /// See [`StepRecord::flagged_upstream`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flagged_upstream: Vec<String>,
    /// A person's verdicts on the suggestion (see [`StepRecord::review`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<ReviewMark>,
}

/// What an LLM step's code rests on beyond its version ([`crate::dag::Stage::code`]): the
/// answer checks every step shares, and the answer schema it asks for and stores.
pub fn step_code(schema: &Value) -> BTreeMap<String, String> {
    [
        (
            "answer_checks".to_string(),
            crate::annotation::check::ANSWER_CHECKS_VERSION.to_string(),
        ),
        ("answer_schema".to_string(), schema_hash(schema)),
        ("outputs".to_string(), STEP_OUTPUTS_VERSION.to_string()),
    ]
    .into()
}

/// The version of what LLM steps store besides their answers' records (what the answers cost,
/// [`answers_cost`]): a step stored without it runs again (its answers come from the request
/// cache).
const STEP_OUTPUTS_VERSION: u32 = 2;

/// Where an LLM step keeps what the answers behind its record cost when they were first asked
/// (see [`crate::dag::cost`]), for the dataset card. Apart from the record: a prompt edit that
/// leaves an answer as it was changes what it cost, and the steps that read the answer must
/// stay fresh.
pub const fn answers_cost(stage: &'static str) -> Port<AnswersCost> {
    Port::item(stage, "answers_cost")
}

/// Stores what the answers `ctx`'s run used cost in `stage`'s [`answers_cost`] port.
pub fn put_answers_cost(
    ctx: &JobCtx,
    outputs: &mut Outputs,
    stage: &'static str,
) -> Result<(), StageFailure> {
    outputs.put(ctx, &answers_cost(stage), &ctx.answers_cost())?;
    Ok(())
}

/// A schema's blake3, as a stage's [`crate::dag::Stage::code`] names what it writes or asks
/// for: a change to the types behind it re-runs the stage.
pub fn schema_hash(schema: &Value) -> String {
    let bytes = serde_json::to_vec(schema).expect("a schema serializes");
    crate::hash::ContentHash::of(&bytes).to_string()
}

/// A scenario-level LLM step as a stage: `$stage` asks `$module::schema()`, validates with
/// `$module::validate` and writes the answer to port `$output`. It reads its scenario's context
/// and the earlier steps' ports `$reads` (`&describe::DESCRIPTION`, in that order; each a
/// [`PromptRead`], kept as the module's `READS`), whose answers its template and validator see
/// under their names, and G when its params attach it. Its params are a [`Sampling`].
macro_rules! scenario_step {
    ($stage:ident, $output:ident, $module:path, [$($reads:expr),* $(,)?]) => {
        crate::stages::llm_step::scenario_step!(
            $stage, $output, $module, [$($reads),*], crate::stages::llm_step::same_role_fields
        );
    };
    ($stage:ident, $output:ident, $module:path, [$($reads:expr),* $(,)?], $refine_role:path) => {
        crate::stages::llm_step::scenario_step!(
            $stage, $output, $module, [$($reads),*], $refine_role, &[]
        );
    };
    (
        $stage:ident, $output:ident, $module:path, [$($reads:expr),* $(,)?], $refine_role:path,
        $avoid_words:expr
    ) => {
        crate::stages::llm_step::scenario_step!(
            $stage, $output, $module, [$($reads),*], $refine_role, $avoid_words,
            crate::stages::llm_step::applies_to_every_scenario
        );
    };
    (
        $stage:ident, $output:ident, $module:path, [$($reads:expr),* $(,)?], $refine_role:path,
        $avoid_words:expr, $not_applicable:path
    ) => {
        crate::stages::llm_step::scenario_step!(
            $stage, $output, $module, [$($reads),*], $refine_role, $avoid_words, $not_applicable,
            crate::stages::llm_step::nothing_barred_in_own_part
        );
    };
    (
        $stage:ident, $output:ident, $module:path, [$($reads:expr),* $(,)?], $refine_role:path,
        $avoid_words:expr, $not_applicable:path, $barred_in_own_part:path
    ) => {
        crate::stages::llm_step::scenario_step!(
            $stage, $output, $module, [$($reads),*], $refine_role, $avoid_words, $not_applicable,
            $barred_in_own_part, crate::stages::llm_step::answer_as_is
        );
    };
    (
        $stage:ident, $output:ident, $module:path, [$($reads:expr),* $(,)?], $refine_role:path,
        $avoid_words:expr, $not_applicable:path, $barred_in_own_part:path, $narrow_answer:path
    ) => {
        /// The earlier steps' ports this step reads, whose answers its prompt sees.
        pub const READS: &[&dyn crate::stages::llm_step::PromptRead] = &[$($reads),*];

        /// How this step narrows a role's schema for a grammar-constrained decoder.
        pub const REFINE_ROLE: crate::stages::llm_step::RefineRole = $refine_role;

        pub struct $stage(crate::stages::llm_step::Sampling);

        impl From<crate::stages::llm_step::Sampling> for $stage {
            fn from(sampling: crate::stages::llm_step::Sampling) -> Self {
                Self(sampling)
            }
        }

        #[async_trait::async_trait]
        impl crate::dag::Stage<crate::dag::Env> for $stage {
            fn level(&self) -> crate::dag::Level {
                crate::dag::Level::Scenario
            }

            fn inputs(&self) -> Vec<crate::dag::port::PortId> {
                crate::stages::llm_step::step_inputs(&self.0, READS)
            }

            fn outputs(&self) -> Vec<crate::dag::port::PortId> {
                vec![$output.id(), crate::stages::llm_step::answers_cost(NAME).id()]
            }

            fn models(
                &self,
                crate::dag::Env { project, .. }: &crate::dag::Env,
                store: &crate::dag::store::Store,
            ) -> Result<std::collections::BTreeMap<String, String>, crate::dag::StageFailure> {
                crate::stages::llm_step::model_identity(&self.0, project, store)
            }

            fn code(&self) -> std::collections::BTreeMap<String, String> {
                use $module as step;
                crate::stages::llm_step::step_code(&step::schema())
            }

            async fn run(
                &self,
                ctx: &crate::dag::JobCtx,
            ) -> Result<crate::dag::Outputs, crate::dag::StageFailure> {
                use $module as step;
                let declared = crate::stages::llm_step::ScenarioStep {
                    name: NAME,
                    reads: READS,
                    schema: step::schema(),
                    refine_role: REFINE_ROLE,
                    avoid_words: $avoid_words,
                    barred_in_own_part: $barred_in_own_part,
                    narrow_answer: $narrow_answer,
                    validate: step::check,
                    not_applicable: $not_applicable,
                    output: &$output,
                };
                crate::stages::llm_step::run_scenario_step(ctx, &self.0, declared).await
            }
        }
    };
}

pub(crate) use scenario_step;

/// A step's answer schema bound to one scenario, in the two forms a request carries.
#[derive(Debug, Clone)]
pub struct StepSchema {
    pub name: String,
    /// What endpoints get: the `roles` array holds exactly one entry per participant, each named
    /// by one of the participants (strict structured outputs can say no more).
    pub portable: Value,
    /// What a grammar-constrained decoder gets: `roles` is a tuple of the participants in order,
    /// so the embedded model cannot leave a role out, repeat one or invent one, and each role's
    /// fields may be narrowed further by the step (see [`RefineRole`]).
    pub decoder: Option<Value>,
    /// Words the embedded model is kept from writing (see [`ChatRequest::avoid_words`]).
    pub avoid_words: Vec<String>,
    /// Words it is also kept from writing in one participant's part of an answer asked per
    /// role, by participant (see [`BarredInOwnPart`]); empty when the step bars none.
    pub avoid_in_own_part: Vec<Vec<String>>,
    /// How the decoder's role schemas were narrowed, to narrow them again once the scene's
    /// part is answered; `None` for a schema without roles.
    pub refine_role: Option<RefineRole>,
}

/// Words the embedded model is kept from writing in the part of an answer asked for `role` alone
/// (`(role, scenario)`): goals bar the role's own name, which the 1.5B model otherwise puts
/// after the verb of the role's own goal ("To help Noor" for Noor) answer after answer.
pub type BarredInOwnPart = fn(&str, &ScenarioContext) -> Vec<String>;

/// For steps that bar nothing in a role's own part.
pub fn nothing_barred_in_own_part(_: &str, _: &ScenarioContext) -> Vec<String> {
    Vec::new()
}

/// Narrows the schema of a whole answer for the decoder, for one scenario (after the roles are
/// bound, [`bind_roles`]): what endpoints are asked stays as the step wrote it, and the embedded
/// model may write less (`anonymize` offers only the names its texts hold).
pub type NarrowAnswer = fn(&mut Value, &ScenarioContext);

/// For steps whose decoder takes the whole answer's schema as it is.
pub fn answer_as_is(_: &mut Value, _: &ScenarioContext) {}

/// Narrows one role's object schema for the decoder: `(role object, role, other participants,
/// the scenario with the earlier answers the step reads, the answer's own fields other than
/// its roles once they are given)`. The last is `None` when the schema is bound for the whole
/// answer; asked per role, the roles' schemas are narrowed again after the scene's part is
/// answered, so that a role cannot contradict it (see `private_info`).
pub type RefineRole = fn(&mut Value, &str, &[String], &ScenarioContext, Option<&SceneFields>);

/// An answer's fields other than its roles, as the scene's part of an answer asked per role
/// gave them.
pub type SceneFields = serde_json::Map<String, Value>;

/// For steps whose role fields need no narrowing beyond the role's name.
pub fn same_role_fields(
    _: &mut Value,
    _: &str,
    _: &[String],
    _: &ScenarioContext,
    _: Option<&SceneFields>,
) {
}

/// The step's schema for one scenario (see [`StepSchema`]). A schema without a `roles` array
/// is the same in both forms.
pub fn bind_roles(
    name: &str,
    mut schema: Value,
    context: &ScenarioContext,
    refine_role: RefineRole,
) -> StepSchema {
    let participants = &context.participants;
    let Some(roles) = schema.pointer_mut("/properties/roles") else {
        return StepSchema {
            name: name.to_string(),
            portable: schema,
            decoder: None,
            avoid_words: Vec::new(),
            avoid_in_own_part: Vec::new(),
            refine_role: None,
        };
    };
    let count = Value::from(participants.len());
    roles["minItems"] = count.clone();
    roles["maxItems"] = count;
    if let Some(role_name) = roles.pointer_mut("/items/properties/name") {
        role_name["enum"] = Value::from(participants.to_vec());
    }
    let mut decoder = schema.clone();
    let roles = decoder
        .pointer_mut("/properties/roles")
        .expect("checked above");
    let item = roles
        .as_object_mut()
        .and_then(|r| r.remove("items"))
        .unwrap_or(Value::Null);
    let tuple: Vec<Value> = participants
        .iter()
        .map(|participant| {
            let mut role = item.clone();
            if let Some(role_name) = role.pointer_mut("/properties/name") {
                role_name["enum"] = Value::from(vec![participant.clone()]);
            }
            let others: Vec<String> = participants
                .iter()
                .filter(|p| *p != participant)
                .cloned()
                .collect();
            refine_role(&mut role, participant, &others, context, None);
            role
        })
        .collect();
    roles["prefixItems"] = Value::from(tuple);
    StepSchema {
        name: name.to_string(),
        portable: schema,
        decoder: Some(decoder),
        avoid_words: Vec::new(),
        avoid_in_own_part: Vec::new(),
        refine_role: Some(refine_role),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn participants() -> Vec<String> {
        vec!["Noor".to_string(), "Theo".to_string(), "Mila".to_string()]
    }

    fn scene_of(participants: Vec<String>) -> ScenarioContext {
        let mut context = crate::stages::fixture::context();
        context.participants = participants;
        context
    }

    #[test]
    fn a_repeat_is_barred_by_the_words_it_shares_that_the_role_does_not_say() {
        let mut context = scene_of(participants());
        context.lines.push(crate::annotation::ContextLine {
            kind: crate::annotation::ContextLineKind::Dialogue,
            speaker: Some("Noor".to_string()),
            text: "Is that plant yours?".to_string(),
            directions: Vec::new(),
        });
        let noor = json!({
            "name": "Noor",
            "expression_task": "Noor is curious about the plant and wants to know more.",
            "characteristic_task": "Noor asks Theo who left the crate at the door.",
        });
        let mila = json!({
            "name": "Mila",
            "expression_task": "Mila hides her worry about the rent from Noor.",
            "characteristic_task": "Mila is curious about the plant and wants to know more.",
        });
        let barred = repeated_words(&noor, &mila, "Noor", &context);
        // "plant" is Noor's own word; the fields that differ (crate, rent) bar nothing.
        assert_eq!(barred, ["curious", "know", "wants"]);
        let unrelated = json!({"name": "Mila", "expression_task": "Mila counts the boxes."});
        assert!(repeated_words(&noor, &unrelated, "Noor", &context).is_empty());
    }

    #[test]
    fn endpoints_get_exactly_the_participants_and_decoders_a_tuple_of_them_in_order() {
        let bound = bind_roles(
            "tasks",
            crate::stages::tasks::answer::schema(),
            &scene_of(participants()),
            same_role_fields,
        );
        let roles = &bound.portable["properties"]["roles"];
        assert_eq!(
            (roles["minItems"].as_u64(), roles["maxItems"].as_u64()),
            (Some(3), Some(3))
        );
        assert_eq!(
            roles["items"]["properties"]["name"]["enum"],
            json!(["Noor", "Theo", "Mila"])
        );
        assert!(
            roles.get("prefixItems").is_none(),
            "strict structured outputs take no tuples"
        );

        let decoder = bound.decoder.unwrap();
        let tuple = decoder["properties"]["roles"]["prefixItems"]
            .as_array()
            .unwrap();
        assert!(
            decoder["properties"]["roles"].get("items").is_none(),
            "llama.cpp reads `items` before `prefixItems`"
        );
        let names: Vec<&Value> = tuple
            .iter()
            .map(|role| &role["properties"]["name"]["enum"])
            .collect();
        assert_eq!(
            names,
            [&json!(["Noor"]), &json!(["Theo"]), &json!(["Mila"])]
        );
        assert_eq!(
            tuple[0]["properties"]["expression_task"],
            roles["items"]["properties"]["expression_task"]
        );
    }

    #[test]
    fn tasks_narrow_each_role_to_sentences_about_it_and_outcomes_naming_another() {
        let bound = bind_roles(
            "tasks",
            crate::stages::tasks::answer::schema(),
            &scene_of(participants()),
            crate::stages::tasks::answer::narrow_role_for_decoder,
        );
        let decoder = bound.decoder.unwrap();
        let theo = &decoder["properties"]["roles"]["prefixItems"][1]["properties"];
        let expression = theo["expression_task"]["pattern"].as_str().unwrap();
        assert!(expression.starts_with("^Theo["), "{expression}");
        let outcome = theo["interaction_outcome_task"]["pattern"]
            .as_str()
            .unwrap();
        assert!(
            outcome.starts_with("^Theo[") && outcome.contains("(Noor|Mila)"),
            "{outcome}"
        );
        // The portable schema keeps the plain one-sentence pattern.
        let role = &bound.portable["properties"]["roles"]["items"];
        let portable = &role["properties"]["expression_task"]["pattern"];
        assert!(!portable.as_str().unwrap().contains("Theo"));
    }

    #[test]
    fn the_embedded_model_is_asked_per_role_unless_the_step_says_otherwise() {
        let endpoint = ModelRef::Endpoint {
            endpoint: "openai".to_string(),
            model: "gpt-4o-mini".to_string(),
        };
        let unset = Sampling::annotator();
        assert!(unset.asks_per_role(&ModelRef::Local));
        assert!(!unset.asks_per_role(&endpoint));
        let whole = Sampling {
            per_role: Some(false),
            ..Sampling::annotator()
        };
        assert!(!whole.asks_per_role(&ModelRef::Local));
        let parts = Sampling {
            per_role: Some(true),
            ..Sampling::annotator()
        };
        assert!(parts.asks_per_role(&endpoint));
    }

    fn one_part_text(part: &OnePart<'_>) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("prompts")
            .join(ONE_PART_PROMPT);
        let messages = render_prompt(&path, part).unwrap();
        assert!(
            messages.iter().all(|m| m.role == Role::User),
            "{messages:?}"
        );
        messages
            .iter()
            .flat_map(|m| &m.content)
            .map(|part| match part {
                Part::Text(text) => text.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_part_asks_for_its_fields_and_a_later_role_sees_the_entries_before_it_unless_free_text() {
        let scene = one_part_text(&OnePart {
            step: "annotate",
            part: "scene",
            fields: vec!["dialogue_type".to_string()],
            role: None,
            others: vec!["Noor", "Theo"],
            own_lines: Vec::new(),
            scene: None,
            earlier: Vec::new(),
        });
        assert!(scene.contains("only with the fields about the scene as a whole: dialogue_type"));
        let first = one_part_text(&OnePart {
            step: "annotate",
            part: "role",
            fields: vec!["name".to_string(), "gender".to_string()],
            role: Some("Noor"),
            others: vec!["Theo"],
            own_lines: vec!["Theo, the van."],
            scene: Some(r#"{"dialogue_type":"persuasion"}"#.to_string()),
            earlier: Vec::new(),
        });
        assert!(
            first.contains("the one for Noor, with the fields name, gender"),
            "{first}"
        );
        assert!(
            first.contains(r#"{"dialogue_type":"persuasion"}"#),
            "{first}"
        );
        assert!(!first.contains("already given"), "{first}");
        let later = one_part_text(&OnePart {
            step: "annotate",
            part: "role",
            fields: vec!["name".to_string(), "gender".to_string()],
            role: Some("Theo"),
            others: vec!["Noor"],
            own_lines: vec!["Define \"call.\""],
            scene: None,
            earlier: vec![r#"{"name":"Noor","gender":"male"}"#.to_string()],
        });
        assert!(
            later.contains(r#"{"name":"Noor","gender":"male"}"#),
            "{later}"
        );
        assert!(later.contains("Reply with Theo's entry alone"), "{later}");
        assert!(!later.contains("asked for separately"), "{later}");
        let bdi = one_part_text(&OnePart {
            step: "bdi_risk",
            part: "role",
            fields: vec!["name".to_string(), "desire".to_string()],
            role: Some("Theo"),
            others: vec!["Noor"],
            own_lines: vec!["Define \"call.\"", "Deal."],
            scene: None,
            earlier: vec![r#"{"name":"Noor","desire":"a lift"}"#.to_string()],
        });
        // A free-text step's part does not show the entries before it: the 1.5B model copied
        // them into its own (the gates then rejected most of its BDI answers).
        assert!(!bdi.contains("a lift"), "{bdi}");
        assert!(bdi.contains("from Theo's own side of the scene"), "{bdi}");
        // The role's own lines are there to write its side from; a gender is not read from them.
        assert!(bdi.contains("- Define \"call.\"\n- Deal.\n"), "{bdi}");
        assert!(!later.contains("Define"), "{later}");
        assert!(!later.contains("\n\n\n"), "{later:?}");
        let goals = one_part_text(&OnePart {
            step: "goals",
            part: "role",
            fields: vec!["name".to_string(), "goals".to_string()],
            role: Some("Theo"),
            others: vec!["Noor"],
            own_lines: vec!["Deal."],
            scene: None,
            earlier: vec![r#"{"name":"Noor","goals":[{"goal":"To get a lift."}]}"#.to_string()],
        });
        // Shown the goal before it, the 1.5B model gave every role of a scene the same one.
        assert!(!goals.contains("To get a lift"), "{goals}");
        assert!(goals.contains("- Deal.\n"), "{goals}");
    }

    #[test]
    fn a_schema_without_roles_is_the_same_for_both() {
        let bound = bind_roles(
            "describe",
            crate::stages::describe::answer::schema(),
            &scene_of(participants()),
            same_role_fields,
        );
        assert_eq!(bound.portable, crate::stages::describe::answer::schema());
        assert!(bound.decoder.is_none());
    }
}

//! `evaluate`: a panel of judges grades one simulation run (AgentViSS, section 4, appendix B and
//! J.3). Each judge answers two questions about the run, role enactment (every character's
//! expression and characteristic task) and interaction management (its interaction regulation
//! and outcome task), labelling each task Achieved, Partially Achieved or Not Achieved. The panel
//! votes per task; a judge that never gave a usable answer is recorded as missing, and a task
//! with too few judges left is unscored, never given a label. With the `sotopia` param, each
//! judge also rates every character on SOTOPIA-EVAL's seven dimensions (range-checked).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::annotation::vocab::{DialogueType, VisionDependenceClass};
use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{AppCtx, Env, JobCtx, Level, Outputs, Stage, StageFailure};
use crate::eval::judgement::{self, CharacterGrades, Grade, Question, Task};
use crate::eval::label::{Verdict, quorum, vote};
use crate::eval::sotopia::{self, CharacterRatings, Dimension, Rating};
use crate::llm::{ChatRequest, ModelRef};
use crate::range::{BadSetting, Validate, check};
use crate::sim::mode::ObservationMode;
use crate::sim::trace::Trace;
use crate::sim::turn::ActionType;
use crate::stages::llm_step::{
    AnswerRecord, ask_recorded, model_identity_of, question as prompt_messages,
};
use crate::stages::{annotate, cast, describe, parse_script, simulate, tasks, vision_dependence};
use crate::text::role::RoleId;

/// The panel's grades of one run.
pub const JUDGEMENT: Port<Evaluation> = Port::item(NAME, "judgement");

const NAME: &str = "evaluate";
/// The role enactment question.
pub const ENACTMENT_TEMPLATE: &str = "evaluate_enactment.j2";
/// The interaction management question.
pub const INTERACTION_TEMPLATE: &str = "evaluate_interaction.j2";
/// The optional SOTOPIA-EVAL rubric.
pub const SOTOPIA_TEMPLATE: &str = "evaluate_sotopia.j2";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "a judge panel grades each run's role-level tasks (LLM)",
    version: 2,
    prompts: &[ENACTMENT_TEMPLATE, INTERACTION_TEMPLATE, SOTOPIA_TEMPLATE],
    defaults: Defaults::of::<EvaluateParams>(),
    load: load_stage::<EvaluateParams, Evaluate>,
};

/// evaluate: every judge of `judges` in [llm.roles] reads each simulation run (the turns' words,
/// inner thoughts and shown feelings; the scene only as context) and labels every character's
/// four tasks Achieved, Partially Achieved or Not Achieved, in two questions. An answer that
/// leaves a character or task out, or names another, is re-asked with the problem at most 5
/// times; a judge still without a usable answer counts as missing for that question. Per task
/// the panel's most given label wins (all different: Partially Achieved), from at least two
/// judges (one with a panel of one); otherwise the task is unscored. With `sotopia` on, a third
/// question rates every character on SOTOPIA-EVAL's seven dimensions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EvaluateParams {
    /// Judges' sampling temperature, 0 to 2; the paper judges at 0.
    pub temperature: f32,
    /// Answer tokens per question at most, 1 to 131072.
    pub max_tokens: u32,
    /// Each label comes with a one-sentence reason, kept in the record (the paper's judges gave
    /// labels only).
    pub reasons: bool,
    /// The judges' sampling seed, where the endpoint honours one. Any 64-bit unsigned integer.
    pub seed: u64,
    /// Also ask each judge SOTOPIA-EVAL's rubric: every character scored on believability
    /// (0-10), relationship (-5-5), knowledge (0-10), secret (-10-0), social rules (-10-0),
    /// financial and material benefits (-5-5) and goal (0-10), reasoning first; a score out of
    /// range is re-asked. The report shows each dimension and SOTOPIA's overall (their mean).
    pub sotopia: bool,
    /// Answer tokens of the rubric question at most, 1 to 131072: seven reasoned scores per
    /// character need about three times a task question's.
    pub sotopia_max_tokens: u32,
}

impl Default for EvaluateParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            max_tokens: 1024,
            reasons: true,
            seed: 7,
            sotopia: false,
            sotopia_max_tokens: 3072,
        }
    }
}

impl Validate for EvaluateParams {
    fn validate(&self) -> Result<(), BadSetting> {
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
            "sotopia_max_tokens",
            self.sotopia_max_tokens,
            crate::stages::llm_step::ranges::MAX_TOKENS,
        )
    }
}

pub struct Evaluate(EvaluateParams);

impl From<EvaluateParams> for Evaluate {
    fn from(params: EvaluateParams) -> Self {
        Self(params)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EvaluateError {
    #[error("no judges: list at least one model in `judges` of [llm.roles] in viss.toml")]
    NoJudges,
    #[error(transparent)]
    Store(#[from] crate::dag::store::StoreError),
}

/// The panel's grades of one run: who judged, what each judge answered or why it could not,
/// and per character and task each judge's grade and the panel's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Evaluation {
    pub scenario: String,
    pub mode: ObservationMode,
    /// Per character, in the run's order: its name and the model that played it.
    pub cast: Vec<(String, String)>,
    /// Public message characters per character (for communication efficiency).
    pub message_chars: Vec<usize>,
    /// The scenario's dialogue type (`annotate`), for the tables by type.
    pub dialogue_type: DialogueType,
    /// Per character, how far its outcome task depends on seeing the others
    /// (`vision_dependence`), for the strongly / weakly vision-dependent comparison.
    pub outcome_vision: Vec<VisionDependenceClass>,
    /// The run's turn count as configured (several counts make the table by rounds).
    pub rounds: usize,
    /// The panel, in the order of `judges`.
    pub judges: Vec<JudgeRecord>,
    /// Per character (cast order), then task (expression, characteristic, regulation, outcome).
    pub tasks: Vec<TaskJudgement>,
    /// SOTOPIA-EVAL, when the `sotopia` param is on: per character, in cast order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sotopia: Vec<SotopiaRatings>,
}

/// One character's SOTOPIA-EVAL ratings, by each judge and as the panel's mean.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SotopiaRatings {
    pub character: String,
    /// Per judge, in panel order: its ratings in [`Dimension::ALL`] order; `None` where the
    /// judge is missing.
    pub ratings: Vec<Option<Vec<Rating>>>,
    /// Per dimension, in [`Dimension::ALL`] order: the mean of the judges that answered, when
    /// they make a quorum (as for a vote); `None` (unrated) otherwise.
    pub mean: Vec<Option<f64>>,
}

/// What one judge of the panel did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JudgeRecord {
    pub model: String,
    /// One per question, role enactment first.
    pub answers: Vec<JudgeAnswer>,
}

/// What a judge was asked: one of the two task questions, or the SOTOPIA-EVAL rubric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Asked {
    RoleEnactment,
    InteractionManagement,
    Sotopia,
}

impl From<Question> for Asked {
    fn from(question: Question) -> Self {
        match question {
            Question::RoleEnactment => Asked::RoleEnactment,
            Question::InteractionManagement => Asked::InteractionManagement,
        }
    }
}

impl std::fmt::Display for Asked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Asked::RoleEnactment => "role_enactment",
            Asked::InteractionManagement => "interaction_management",
            Asked::Sotopia => "sotopia",
        })
    }
}

/// One judge's answer to one question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JudgeAnswer {
    pub question: Asked,
    #[serde(flatten)]
    pub answer: AnswerRecord,
}

impl JudgeAnswer {
    /// Why the judge counts as missing for this question; `None` when it answered.
    pub fn failed(&self) -> Option<&str> {
        self.answer.failed.as_deref()
    }
}

/// One task of one character, as each judge graded it and as the panel decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TaskJudgement {
    /// The role the character played (its seat in the run).
    pub role: RoleId,
    pub character: String,
    pub task: Task,
    /// Per judge, in panel order; `None` where it is missing.
    pub grades: Vec<Option<Grade>>,
    pub verdict: Verdict,
}

impl Evaluation {
    /// The model that played `role` in the run.
    pub fn model_of(&self, role: RoleId) -> Option<&str> {
        self.cast.get(role.index()).map(|(_, model)| model.as_str())
    }

    /// Per task, the judges' labels in panel order (`None`: missing), for agreement measures.
    pub fn labels(
        &self,
    ) -> impl Iterator<Item = (&TaskJudgement, Vec<Option<crate::eval::label::Label>>)> {
        self.tasks.iter().map(|task| {
            let labels = task
                .grades
                .iter()
                .map(|grade| grade.as_ref().map(|g| g.label))
                .collect();
            (task, labels)
        })
    }
}

/// A character as the judges are told of it: its name, its style, and the question's tasks.
#[derive(Debug, Serialize)]
struct JudgedCharacter<'a> {
    name: &'a str,
    expression_style: crate::annotation::vocab::ExpressionStyle,
    conflict_characteristic: crate::annotation::vocab::ConflictCharacteristic,
    /// The question's two tasks as (key, text).
    tasks: Vec<(&'static str, &'a str)>,
}

/// One turn as the judges read it.
#[derive(Debug, Serialize)]
struct JudgedTurn<'a> {
    round: usize,
    speaker: &'a str,
    message: &'a str,
    inner_thought: &'a str,
    emotion: &'static str,
    emotion_description: &'a str,
    facial_expression: &'a str,
    body_actions: &'a str,
    /// With action types on, what the turn did, unless it spoke.
    action: Option<&'static str>,
}

/// What a judge's question template sees.
#[derive(Debug, Serialize)]
struct JudgeView<'a> {
    show: &'a str,
    heading: Option<&'a str>,
    situation: &'a str,
    background: &'a str,
    characters: Vec<JudgedCharacter<'a>>,
    turns: &'a [JudgedTurn<'a>],
    reasons: bool,
    task_keys: [&'static str; 2],
    /// The rubric's scales, in answer order (the rubric question only).
    dimensions: Vec<DimensionView>,
}

#[derive(Debug, Serialize)]
struct DimensionView {
    key: &'static str,
    low: i64,
    high: i64,
}

impl DimensionView {
    /// Every dimension with its range, in answer order.
    fn all() -> Vec<DimensionView> {
        Dimension::ALL
            .iter()
            .map(|dimension| {
                let (low, high) = dimension.range();
                DimensionView {
                    key: dimension.as_str(),
                    low,
                    high,
                }
            })
            .collect()
    }
}

/// The panel's mean per dimension of one character, from each judge's ratings (`None`:
/// missing); unrated below the panel's quorum.
fn panel_means(ratings: &[Option<Vec<Rating>>]) -> Vec<Option<f64>> {
    let given: Vec<&Vec<Rating>> = ratings.iter().flatten().collect();
    (0..Dimension::ALL.len())
        .map(|dimension| {
            (!given.is_empty() && given.len() >= quorum(ratings.len())).then(|| {
                given.iter().map(|r| r[dimension].score as f64).sum::<f64>() / given.len() as f64
            })
        })
        .collect()
}

fn template_of(question: Question) -> &'static str {
    match question {
        Question::RoleEnactment => ENACTMENT_TEMPLATE,
        Question::InteractionManagement => INTERACTION_TEMPLATE,
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Evaluate {
    fn level(&self) -> Level {
        Level::Run
    }

    fn inputs(&self) -> Vec<PortId> {
        vec![
            simulate::TRACE.id(),
            parse_script::CONTEXT.id(),
            annotate::ANNOTATION.id(),
            vision_dependence::VISION_DEPENDENCE.id(),
            describe::DESCRIPTION.id(),
            cast::CAST.id(),
            tasks::TASKS.id(),
        ]
    }

    fn outputs(&self) -> Vec<PortId> {
        vec![JUDGEMENT.id()]
    }

    fn models(
        &self,
        Env { project, .. }: &Env,
        store: &Store,
    ) -> Result<BTreeMap<String, String>, StageFailure> {
        let mut identities = BTreeMap::new();
        for (index, judge) in project.config.llm.roles.judges.iter().enumerate() {
            identities.insert(
                format!("judge{index}"),
                model_identity_of(judge, project, store)?,
            );
        }
        Ok(identities)
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let params = &self.0;
        let judges: Vec<ModelRef> = ctx.llm().config().roles.judges.clone();
        if judges.is_empty() {
            return Err(EvaluateError::NoJudges.into());
        }
        let trace: Trace = ctx.read(&simulate::TRACE)?;
        let scenario = ctx.read(&parse_script::CONTEXT)?;
        let description = ctx.read(&describe::DESCRIPTION)?.answer;
        let cast = ctx.read(&cast::CAST)?;
        let role_tasks = ctx.read(&tasks::TASKS)?.answer;
        let dialogue_type = ctx.read(&annotate::ANNOTATION)?.answer.dialogue_type;
        let vision = ctx.read(&vision_dependence::VISION_DEPENDENCE)?.answer;
        let names: Vec<String> = trace.settings.cast.iter().map(|(n, _)| n.clone()).collect();
        cast.check_seats(names.len())?;
        let mut people = Vec::new();
        for role in cast.ids() {
            let sheet = cast.sheet(role)?;
            let task = cast.entry(&role_tasks.roles, role, "tasks")?;
            let dependence = cast
                .entry(&vision.roles, role, "vision_dependence")?
                .dependence;
            people.push((sheet, task, dependence));
        }
        let task_text = |index: usize, task: Task| -> &str {
            let tasks = people[index].1;
            match task {
                Task::Expression => &tasks.expression_task,
                Task::Characteristic => &tasks.characteristic_task,
                Task::InteractionRegulation => &tasks.interaction_regulation_task,
                Task::InteractionOutcome => &tasks.interaction_outcome_task,
            }
        };
        let turns: Vec<JudgedTurn<'_>> = trace
            .turns
            .iter()
            .map(|record| JudgedTurn {
                round: record.round,
                speaker: names.get(record.speaker).map_or("?", String::as_str),
                message: &record.turn.message,
                inner_thought: &record.turn.inner_thought,
                emotion: record.turn.emotion.as_str(),
                emotion_description: &record.turn.emotion_description,
                facial_expression: &record.turn.facial_expression,
                body_actions: &record.turn.body_actions,
                action: record
                    .turn
                    .action_type
                    .filter(|action| *action != ActionType::Speak)
                    .map(ActionType::as_str),
            })
            .collect();
        let characters_with = |tasks: &[Task]| -> Vec<JudgedCharacter<'_>> {
            names
                .iter()
                .enumerate()
                .map(|(i, name)| JudgedCharacter {
                    name,
                    expression_style: people[i].0.expression_style,
                    conflict_characteristic: people[i].0.conflict_characteristic,
                    tasks: tasks
                        .iter()
                        .map(|&task| (task.as_str(), task_text(i, task)))
                        .collect(),
                })
                .collect()
        };
        let view = |tasks: &[Task], task_keys, dimensions| JudgeView {
            show: &scenario.show,
            heading: scenario.heading.as_deref(),
            situation: &description.description,
            background: &description.background,
            characters: characters_with(tasks),
            turns: &turns,
            reasons: params.reasons,
            task_keys,
            dimensions,
        };
        let request = |index: usize, messages, name: &str, schema, decoder_schema| {
            let mut request = ChatRequest::new(messages).with_schema(name, schema);
            request.decoder_schema = Some(decoder_schema);
            request.temperature = params.temperature;
            request.seed = Some(params.seed);
            // The same model twice on a panel is asked twice, not read back from the cache.
            request.replicate = index as u32;
            request.max_tokens = Some(params.max_tokens);
            request
        };
        let mut judge_records = Vec::new();
        // Per judge, per question: the grades, or None where the judge is missing.
        let mut answered: Vec<Vec<Option<Vec<CharacterGrades>>>> = Vec::new();
        // Per judge: its rubric ratings, or None where it is missing (with `sotopia` on).
        let mut rated: Vec<Option<Vec<CharacterRatings>>> = Vec::new();
        for (index, judge) in judges.iter().enumerate() {
            let mut answers = Vec::new();
            let mut grades_by_question = Vec::new();
            for question in Question::ALL {
                let keys = question.tasks().map(Task::as_str);
                let context = view(&question.tasks(), keys, Vec::new());
                let messages = prompt_messages(ctx, template_of(question), &context, Vec::new())?;
                let request = request(
                    index,
                    messages,
                    question.as_str(),
                    judgement::schema(question, &names, params.reasons),
                    judgement::decoder_schema(question, &names, params.reasons),
                );
                let validate = |value: &serde_json::Value| {
                    judgement::check(value, question, &names, params.reasons)
                };
                let (answer, grades) =
                    ask_recorded(ctx, judge, &request, validate, "missing_judgements").await?;
                answers.push(JudgeAnswer {
                    question: question.into(),
                    answer,
                });
                grades_by_question.push(grades);
            }
            if params.sotopia {
                let context = view(&Task::ALL, ["", ""], DimensionView::all());
                let messages = prompt_messages(ctx, SOTOPIA_TEMPLATE, &context, Vec::new())?;
                let mut request = request(
                    index,
                    messages,
                    "sotopia",
                    sotopia::schema(&names),
                    sotopia::decoder_schema(&names),
                );
                request.max_tokens = Some(params.sotopia_max_tokens);
                let validate = |value: &serde_json::Value| sotopia::check(value, &names);
                let (answer, ratings) =
                    ask_recorded(ctx, judge, &request, validate, "missing_judgements").await?;
                answers.push(JudgeAnswer {
                    question: Asked::Sotopia,
                    answer,
                });
                rated.push(ratings);
            }
            judge_records.push(JudgeRecord {
                model: judge.to_string(),
                answers,
            });
            answered.push(grades_by_question);
        }
        let sotopia_ratings: Vec<SotopiaRatings> = if params.sotopia {
            names
                .iter()
                .enumerate()
                .map(|(character, name)| {
                    let ratings: Vec<Option<Vec<Rating>>> = rated
                        .iter()
                        .map(|by_judge| Some(by_judge.as_ref()?[character].ratings.clone()))
                        .collect();
                    let mean = panel_means(&ratings);
                    if mean.iter().any(Option::is_none) {
                        ctx.count("characters_unrated", 1);
                    }
                    SotopiaRatings {
                        character: name.clone(),
                        ratings,
                        mean,
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut task_judgements = Vec::new();
        for (character, name) in names.iter().enumerate() {
            for task in Task::ALL {
                let question = Question::ALL
                    .iter()
                    .position(|&q| q == task.question())
                    .unwrap_or(0);
                let slot = task.question().tasks().iter().position(|&t| t == task);
                let grades: Vec<Option<Grade>> = answered
                    .iter()
                    .map(|by_question| {
                        let grades = by_question[question].as_ref()?;
                        Some(grades[character].grades[slot?].clone())
                    })
                    .collect();
                let labels: Vec<_> = grades.iter().map(|g| g.as_ref().map(|g| g.label)).collect();
                let verdict: Verdict = vote(&labels);
                ctx.count("tasks_judged", 1);
                if verdict.label().is_none() {
                    ctx.count("tasks_unscored", 1);
                }
                task_judgements.push(TaskJudgement {
                    role: RoleId::at(character),
                    character: name.clone(),
                    task,
                    grades,
                    verdict,
                });
            }
        }
        let message_chars = (0..names.len())
            .map(|i| {
                trace
                    .turns
                    .iter()
                    .filter(|t| t.speaker == i)
                    .map(|t| t.turn.message.chars().count())
                    .sum()
            })
            .collect();
        let evaluation = Evaluation {
            scenario: trace.settings.scenario.clone(),
            mode: trace.settings.mode,
            cast: trace.settings.cast.clone(),
            message_chars,
            dialogue_type,
            outcome_vision: people.iter().map(|p| p.2).collect(),
            rounds: trace.settings.rounds,
            judges: judge_records,
            tasks: task_judgements,
            sotopia: sotopia_ratings,
        };
        let mut outputs = Outputs::default();
        outputs.put(ctx, &JUDGEMENT, &evaluation)?;
        Ok(outputs)
    }
}

/// Every stored evaluation with its run id, in run order.
pub fn evaluations(
    store: &crate::dag::store::Store,
) -> Result<Vec<(String, Evaluation)>, EvaluateError> {
    Ok(store.read_all(&JUDGEMENT)?)
}

/// What the judges did over the stored runs, for `viss status` and the demo's summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JudgingSummary {
    pub runs: usize,
    /// Runs whose evaluation failed (an endpoint down, a missing input), to be retried.
    pub failed: usize,
    pub tasks: usize,
    pub unscored: usize,
    /// Judge answers that never came (a judge missing for a question of a run), of `questions`.
    pub missing_answers: usize,
    pub questions: usize,
    /// Per agent model and mode (`model mode`): the tasks' tally.
    pub by_model_mode: BTreeMap<String, crate::eval::score::Tally>,
}

impl JudgingSummary {
    pub fn render(&self) -> String {
        let mut out = format!(
            "evaluation: {} run(s) judged, {} failed; {} tasks, {} unscored; {} of {} judge \
             answers missing\n",
            self.runs, self.failed, self.tasks, self.unscored, self.missing_answers, self.questions
        );
        for (arm, tally) in &self.by_model_mode {
            let score = tally
                .score()
                .map_or("no score".to_string(), |s| format!("score {s:.1}"));
            out.push_str(&format!(
                "  {arm}: {score} over {} task(s){}\n",
                tally.scored(),
                if tally.missing > 0 {
                    format!(", {} unscored", tally.missing)
                } else {
                    String::new()
                }
            ));
        }
        out
    }
}

/// What `store` holds of `evaluate`: `None` when no run was judged or tried.
pub fn judging_summary(
    store: &crate::dag::store::Store,
) -> Result<Option<JudgingSummary>, EvaluateError> {
    let records = store.index().scan_stage(NAME)?;
    if records.is_empty() {
        return Ok(None);
    }
    let mut summary = JudgingSummary {
        failed: records
            .iter()
            .filter(|(_, record)| record.error.is_some())
            .count(),
        ..JudgingSummary::default()
    };
    let evaluations: Vec<(String, Evaluation)> = store.outputs(&JUDGEMENT, &records)?;
    for (_, evaluation) in evaluations {
        summary.runs += 1;
        for judge in &evaluation.judges {
            summary.questions += judge.answers.len();
            summary.missing_answers += judge
                .answers
                .iter()
                .filter(|a| a.failed().is_some())
                .count();
        }
        for task in &evaluation.tasks {
            summary.tasks += 1;
            let label = task.verdict.label();
            summary.unscored += usize::from(label.is_none());
            let model = evaluation.model_of(task.role).unwrap_or("?");
            summary
                .by_model_mode
                .entry(format!("{model} {}", evaluation.mode))
                .or_default()
                .add(label);
        }
    }
    Ok(Some(summary))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::annotation::vocab::{ConflictCharacteristic, ExpressionStyle};
    use crate::llm::prompt::render_prompt;
    use crate::llm::request::Part;

    fn rendered(question: Question, reasons: bool) -> (String, String) {
        render(
            template_of(question),
            &question.tasks(),
            reasons,
            Vec::new(),
        )
    }

    fn render(
        template: &str,
        tasks: &[Task],
        reasons: bool,
        dimensions: Vec<DimensionView>,
    ) -> (String, String) {
        let turns = [JudgedTurn {
            round: 1,
            speaker: "Noor",
            message: "I can pay half.",
            inner_thought: "He will not let this go.",
            emotion: "Fear",
            emotion_description: "Nervous about the deposit.",
            facial_expression: "eyes down",
            body_actions: "shifts a box",
            action: None,
        }];
        let characters = ["Noor", "Theo"]
            .into_iter()
            .map(|name| JudgedCharacter {
                name,
                expression_style: ExpressionStyle::ALL[0],
                conflict_characteristic: ConflictCharacteristic::ALL[0],
                tasks: tasks
                    .iter()
                    .map(|task| (task.as_str(), "Get the other to agree out loud."))
                    .collect(),
            })
            .collect();
        let view = JudgeView {
            show: "Van Life",
            heading: Some("INT. VAN - NIGHT"),
            situation: "Two flatmates argue about a dented van.",
            background: "The deposit is due tomorrow.",
            characters,
            turns: &turns,
            reasons,
            task_keys: [tasks[0].as_str(), tasks[1].as_str()],
            dimensions,
        };
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("prompts")
            .join(template);
        let messages = render_prompt(&path, &view).unwrap();
        let text = |index: usize| match &messages[index].content[..] {
            [Part::Text(text)] => text.clone(),
            other => panic!("{other:?}"),
        };
        (text(0), text(1))
    }

    #[test]
    fn both_questions_show_the_turns_as_evidence_and_the_scene_as_context() {
        for question in Question::ALL {
            let (system, user) = rendered(question, true);
            assert!(system.contains("JSON"), "{system}");
            for expected in [
                "Context only, not evidence: Two flatmates argue about a dented van. The deposit",
                "[1] Noor\n    said: \"I can pay half.\"\n    thought: He will not let this go.",
                "feeling: Fear (Nervous about the deposit.); face: eyes down; body: shifts a box",
                "- Noor",
                "- Theo",
                "and \"reason\": one sentence",
            ] {
                assert!(
                    user.contains(expected),
                    "{question}: {expected:?} not in\n{user}"
                );
            }
            let [first, second] = question.tasks().map(Task::as_str);
            assert!(user.contains(&format!("  {first}: Get the other to agree out loud.")));
            assert!(user.contains(&format!("({first} and {second})")), "{user}");
            let (_, labels_only) = rendered(question, false);
            assert!(!labels_only.contains("\"reason\""), "{labels_only}");
        }
        let (_, enactment) = rendered(Question::RoleEnactment, true);
        assert!(enactment.contains("never its thoughts"));
        let (_, interaction) = rendered(Question::InteractionManagement, true);
        assert!(interaction.contains("AND this character's own turns helped bring it about"));
    }

    /// The rubric shows every task as the character's aims, the turns, and each scale with the
    /// range the check enforces and what it measures.
    #[test]
    fn the_sotopia_rubric_states_each_scale_and_its_range() {
        let (system, user) = render(SOTOPIA_TEMPLATE, &Task::ALL, true, DimensionView::all());
        assert!(system.contains("JSON"), "{system}");
        for expected in [
            "  interaction_outcome: Get the other to agree out loud.",
            "[1] Noor\n    said: \"I can pay half.\"",
            "- believability, a whole number from 0 to 10: does the character",
            "- relationship, a whole number from -5 to 5: ",
            "- secret, a whole number from -10 to 0: ",
            "- social_rules, a whole number from -10 to 0: ",
            "- financial_and_material_benefits, a whole number from -5 to 5: ",
            "- goal, a whole number from 0 to 10: how far did it reach its social goal",
            "\"reasoning\"",
        ] {
            assert!(user.contains(expected), "{expected:?} not in\n{user}");
        }
        // Every scale says what it measures.
        assert_eq!(user.matches(", a whole number from ").count(), 7);
        assert!(!user.contains(": \n"), "{user}");
    }

    fn scores(values: [i64; 7]) -> Option<Vec<Rating>> {
        Some(
            values
                .map(|score| Rating {
                    reasoning: "Turn 1.".to_string(),
                    score,
                })
                .to_vec(),
        )
    }

    /// The panel's mean per dimension over the judges that answered, from a quorum (two of
    /// three, the one of a panel of one); below it the character is unrated, never 0.
    #[test]
    fn rubric_means_need_the_panels_quorum() {
        let two_of_three = [
            scores([8, 2, 5, -1, 0, 1, 7]),
            None,
            scores([6, 0, 3, -3, 0, -1, 4]),
        ];
        assert_eq!(
            panel_means(&two_of_three),
            [7.0, 1.0, 4.0, -2.0, 0.0, 0.0, 5.5].map(Some).to_vec()
        );
        let one_of_three = [scores([8, 2, 5, -1, 0, 1, 7]), None, None];
        assert_eq!(panel_means(&one_of_three), vec![None; 7]);
        assert_eq!(panel_means(&[None]), vec![None; 7]);
        assert_eq!(
            panel_means(&[scores([1, 0, 0, 0, 0, 0, 2])]),
            [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0].map(Some).to_vec()
        );
    }

    /// llama.cpp takes every decoder schema the judges get; the rubric's scores become literal
    /// alternatives, so the embedded model cannot write one out of range.
    #[test]
    fn the_embedded_decoder_takes_every_judge_schema() {
        let names = ["Noor".to_string(), "Theo".to_string()];
        for question in Question::ALL {
            for reasons in [true, false] {
                let schema = judgement::decoder_schema(question, &names, reasons);
                llama_cpp_2::json_schema_to_grammar(&schema.to_string()).unwrap();
            }
        }
        let grammar =
            llama_cpp_2::json_schema_to_grammar(&sotopia::decoder_schema(&names).to_string())
                .unwrap();
        assert!(grammar.contains("\"-10\""), "{grammar}");
    }
}

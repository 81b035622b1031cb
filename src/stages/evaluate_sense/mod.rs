//! `evaluate_sense` (AgentSense): what a run of a synthetic instance reached, asked after the
//! interaction (AgentSense, section 3.4). Every agent is interviewed: did it reach each of its
//! own goals (self), did each other character reach theirs (others), and which option answers
//! each question about what another character alone knew (private-information reasoning).
//! Every judge of `[llm.roles]` answers whether each goal was reached (judges). Each verdict is
//! a JSON boolean with a reason and each choice an option's letter or text, checked in code
//! and re-asked with the problem at most 5 times; an agent or judge still without a usable
//! answer is recorded as missing, never as a no or a wrong choice.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{AppCtx, Env, JobCtx, Level, Outputs, Stage, StageFailure};
use crate::eval::goal::{self, Answered, Asked, GoalVerdict, LETTERS};
use crate::llm::{ChatRequest, ModelRef};
use crate::range::{BadSetting, Validate, check};
use crate::stages::llm_step::{AnswerRecord, ask_recorded, model_identity_of, question};
use crate::stages::plan_sense_runs::{self, SenseRunPlan};
use crate::stages::simulate_sense::{self, SenseSeat, SenseTrace};

/// What the agents and the judges said of one AgentSense run.
pub const SENSE_JUDGEMENT: Port<SenseEvaluation> = Port::item(NAME, "sense_judgement");

const NAME: &str = "evaluate_sense";
/// An agent's interview after the run.
pub const INTERVIEW_TEMPLATE: &str = "evaluate_sense_interview.j2";
/// A judge's question about every goal of the run.
pub const JUDGE_TEMPLATE: &str = "evaluate_sense_judge.j2";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "AgentSense: goal completion (self, others, judges) and private-information \
              questions after each run (LLM)",
    version: 1,
    prompts: &[INTERVIEW_TEMPLATE, JUDGE_TEMPLATE],
    defaults: Defaults::of::<EvaluateSenseParams>(),
    load: load_stage::<EvaluateSenseParams, EvaluateSense>,
};

/// evaluate_sense: after each AgentSense run, every agent (the model that played the
/// character) is interviewed about its own goals, the others' goals and the questions about
/// what the others alone knew, and every judge of `judges` in [llm.roles] says of every goal
/// whether it was reached. One request per agent and per judge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EvaluateSenseParams {
    /// Sampling temperature of the interviews and the judges, 0 to 2.
    pub temperature: f32,
    /// Answer tokens per request at most, 1 to 131072.
    pub max_tokens: u32,
    /// The sampling seed, where the endpoint honours one. Any 64-bit unsigned integer.
    pub seed: u64,
}

impl Default for EvaluateSenseParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            max_tokens: 1024,
            seed: 7,
        }
    }
}

impl Validate for EvaluateSenseParams {
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
        )
    }
}

pub struct EvaluateSense(EvaluateSenseParams);

impl From<EvaluateSenseParams> for EvaluateSense {
    fn from(params: EvaluateSenseParams) -> Self {
        Self(params)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EvaluateSenseError {
    #[error("no judges: list at least one model in `judges` of [llm.roles] in viss.toml")]
    NoJudges,
    #[error("the run's model {model:?} is not a model reference: {problem}")]
    Model { model: String, problem: String },
    #[error("the run has {seats} seat(s) for {characters} character(s); rebuild simulate_sense")]
    Seats { seats: usize, characters: usize },
    #[error(transparent)]
    Store(#[from] crate::dag::store::StoreError),
}

/// One request of the evaluation: an agent's interview or a judge's question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AskedRecord {
    /// The interviewed character's slot (`r1`), or the judge's place on the panel (`judge1`).
    pub who: String,
    pub model: String,
    #[serde(flatten)]
    pub answer: AnswerRecord,
}

/// Another character's verdict on a goal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OtherVerdict {
    pub slot: String,
    /// `None`: that character's interview is missing.
    pub verdict: Option<GoalVerdict>,
}

/// One goal of one character and every verdict on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GoalJudgement {
    /// The holder's slot.
    pub holder: String,
    pub goal: String,
    pub category: String,
    pub erg: String,
    /// The holder's own verdict; `None`: its interview is missing.
    pub by_self: Option<GoalVerdict>,
    /// Every other character's, in cast order.
    pub by_others: Vec<OtherVerdict>,
    /// Each judge's, in panel order; `None` where the judge is missing.
    pub by_judges: Vec<Option<GoalVerdict>>,
}

impl GoalJudgement {
    pub fn self_achieved(&self) -> Option<bool> {
        self.by_self.as_ref().map(|v| v.achieved)
    }

    fn others(&self) -> Vec<Option<bool>> {
        self.by_others
            .iter()
            .map(|other| other.verdict.as_ref().map(|v| v.achieved))
            .collect()
    }

    fn judges(&self) -> Vec<Option<bool>> {
        self.by_judges
            .iter()
            .map(|v| v.as_ref().map(|v| v.achieved))
            .collect()
    }

    /// The share of the other characters that answered who say it was reached.
    pub fn others_share(&self) -> Option<f64> {
        goal::share(&self.others())
    }

    /// The others' majority (none on a tie or below quorum).
    pub fn others_majority(&self) -> Option<bool> {
        goal::majority(&self.others())
    }

    /// The share of the judges that answered who say it was reached.
    pub fn judge_share(&self) -> Option<f64> {
        goal::share(&self.judges())
    }

    /// The panel's verdict: the judges' majority (none on a tie or below quorum).
    pub fn judge_majority(&self) -> Option<bool> {
        goal::majority(&self.judges())
    }

    /// Each judge's verdict, `None` where it is missing.
    pub fn judge_verdicts(&self) -> Vec<Option<bool>> {
        self.judges()
    }
}

/// A character's choice on a question about another's private information.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Choice {
    pub slot: String,
    /// The option's letter; `None`: the character's interview is missing.
    pub chosen: Option<char>,
}

/// One question about what one character alone knew, and every other character's choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QuestionJudgement {
    /// Whose private information it asks about.
    pub about: String,
    pub question: String,
    pub options: Vec<String>,
    pub right: char,
    pub answers: Vec<Choice>,
}

/// What `evaluate_sense` stores for a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SenseEvaluation {
    pub scenario: String,
    pub instance_id: String,
    pub template_id: String,
    pub domain: String,
    pub replicate: u32,
    pub cast: Vec<SenseSeat>,
    /// In cross-play, the slot the focal model played.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub focal: Option<String>,
    pub turns: usize,
    /// One per character, in cast order.
    pub interviews: Vec<AskedRecord>,
    /// One per judge, in panel order.
    pub judges: Vec<AskedRecord>,
    pub goals: Vec<GoalJudgement>,
    pub questions: Vec<QuestionJudgement>,
}

impl SenseEvaluation {
    /// The model of the run: the one that played every character, or the seats' models joined
    /// by `+` when several did (cross-play), each once.
    pub fn model(&self) -> String {
        let mut models: Vec<&str> = self.cast.iter().map(|s| s.model.as_str()).collect();
        models.sort_unstable();
        models.dedup();
        models.join("+")
    }

    /// Whether one model played every character.
    pub fn self_play(&self) -> bool {
        self.cast
            .windows(2)
            .all(|pair| pair[0].model == pair[1].model)
    }

    /// The model that played `slot`.
    pub fn model_of(&self, slot: &str) -> Option<&str> {
        self.cast
            .iter()
            .find(|seat| seat.slot == slot)
            .map(|seat| seat.model.as_str())
    }
}

/// A goal as a prompt lists it.
#[derive(Debug, Serialize)]
struct GoalLine {
    key: String,
    holder: String,
    text: String,
}

/// A question as the interview lists it.
#[derive(Debug, Serialize)]
struct QuestionLine {
    key: String,
    about: String,
    question: String,
    options: Vec<String>,
}

/// What `evaluate_sense_interview.j2` sees.
#[derive(Debug, Serialize)]
struct InterviewView<'a> {
    name: &'a str,
    background: &'a str,
    transcript: &'a [String],
    own_goals: Vec<&'a GoalLine>,
    others_goals: Vec<&'a GoalLine>,
    questions: Vec<&'a QuestionLine>,
}

/// What `evaluate_sense_judge.j2` sees.
#[derive(Debug, Serialize)]
struct JudgeView<'a> {
    background: &'a str,
    characters: &'a [String],
    transcript: &'a [String],
    goals: &'a [GoalLine],
}

#[async_trait::async_trait]
impl Stage<Env> for EvaluateSense {
    fn level(&self) -> Level {
        Level::Run
    }

    fn inputs(&self) -> Vec<PortId> {
        vec![
            plan_sense_runs::SENSE_RUN.id(),
            simulate_sense::SENSE_TRACE.id(),
        ]
    }

    fn outputs(&self) -> Vec<PortId> {
        vec![SENSE_JUDGEMENT.id()]
    }

    fn models(
        &self,
        Env { project, .. }: &Env,
        store: &Store,
    ) -> Result<BTreeMap<String, String>, StageFailure> {
        let mut identities = crate::stages::plan_runs::agent_identities(project, store)?;
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
            return Err(EvaluateSenseError::NoJudges.into());
        }
        let plan: SenseRunPlan = ctx.read(&plan_sense_runs::SENSE_RUN)?;
        let trace: SenseTrace = ctx.read(&simulate_sense::SENSE_TRACE)?;
        let characters = &plan.instance.characters;
        if trace.cast.len() != characters.len() {
            return Err(EvaluateSenseError::Seats {
                seats: trace.cast.len(),
                characters: characters.len(),
            }
            .into());
        }
        let names: Vec<String> = characters
            .iter()
            .map(crate::stages::export::agentsense::CharacterRow::full_name)
            .collect();
        let transcript: Vec<String> = trace.said().iter().map(|s| s.line()).collect();
        let mut goal_lines = Vec::new();
        let mut goal_holders = Vec::new();
        for (holder, character) in characters.iter().enumerate() {
            for row in &character.goals {
                goal_lines.push(GoalLine {
                    key: format!("g{}", goal_lines.len() + 1),
                    holder: names[holder].clone(),
                    text: row.goal.clone(),
                });
                goal_holders.push((holder, row));
            }
        }
        let mut question_lines = Vec::new();
        let mut question_about = Vec::new();
        for (about, character) in characters.iter().enumerate() {
            for row in &character.questions {
                question_lines.push(QuestionLine {
                    key: format!("q{}", question_lines.len() + 1),
                    about: names[about].clone(),
                    question: row.question.clone(),
                    options: LETTERS
                        .iter()
                        .zip(&row.options)
                        .map(|(letter, option)| format!("{letter}. {option}"))
                        .collect(),
                });
                question_about.push((about, row));
            }
        }
        // Every interview and every judge is asked about every goal.
        let keys: Vec<String> = goal_lines.iter().map(|g| g.key.clone()).collect();
        let request = |messages: Vec<crate::llm::request::Message>,
                       decoder: serde_json::Value,
                       portable: serde_json::Value,
                       replicate: u32| {
            let mut request = ChatRequest::new(messages).with_schema(NAME, portable);
            request.decoder_schema = Some(decoder);
            request.temperature = params.temperature;
            request.seed = Some(params.seed);
            request.replicate = replicate;
            request.max_tokens = Some(params.max_tokens);
            request
        };

        // Per character: its interview's answer, or None where it is missing.
        let mut interviews = Vec::new();
        let mut interviewed: Vec<Option<Answered>> = Vec::new();
        for (me, seat) in trace.cast.iter().enumerate() {
            let model: ModelRef =
                seat.model
                    .parse()
                    .map_err(|problem| EvaluateSenseError::Model {
                        model: seat.model.clone(),
                        problem,
                    })?;
            let asked_questions: Vec<usize> = (0..question_lines.len())
                .filter(|&q| question_about[q].0 != me)
                .collect();
            let view = InterviewView {
                name: &names[me],
                background: &plan.instance.background,
                transcript: &transcript,
                own_goals: goal_lines
                    .iter()
                    .zip(&goal_holders)
                    .filter(|(_, (holder, _))| *holder == me)
                    .map(|(line, _)| line)
                    .collect(),
                others_goals: goal_lines
                    .iter()
                    .zip(&goal_holders)
                    .filter(|(_, (holder, _))| *holder != me)
                    .map(|(line, _)| line)
                    .collect(),
                questions: asked_questions
                    .iter()
                    .map(|&q| &question_lines[q])
                    .collect(),
            };
            let asked: Vec<Asked<'_>> = asked_questions
                .iter()
                .map(|&q| Asked {
                    key: &question_lines[q].key,
                    options: &question_about[q].1.options,
                })
                .collect();
            let messages = question(ctx, INTERVIEW_TEMPLATE, &view, Vec::new())?;
            let request = request(
                messages,
                goal::schema(&keys, &asked, true),
                goal::schema(&keys, &asked, false),
                plan.replicate,
            );
            let validate = |value: &serde_json::Value| goal::check(value, &keys, &asked);
            let (record, answer) = ask(ctx, &model, &request, &seat.slot, validate).await?;
            interviews.push(record);
            interviewed.push(answer);
        }

        let mut panel = Vec::new();
        let mut judged: Vec<Option<Answered>> = Vec::new();
        for (index, judge) in judges.iter().enumerate() {
            let view = JudgeView {
                background: &plan.instance.background,
                characters: &names,
                transcript: &transcript,
                goals: &goal_lines,
            };
            let messages = question(ctx, JUDGE_TEMPLATE, &view, Vec::new())?;
            let request = request(
                messages,
                goal::schema(&keys, &[], true),
                goal::schema(&keys, &[], false),
                // The same model twice on a panel is asked twice, not read back from the cache.
                index as u32,
            );
            let validate = |value: &serde_json::Value| goal::check(value, &keys, &[]);
            let who = format!("judge{}", index + 1);
            let (record, answer) = ask(ctx, judge, &request, &who, validate).await?;
            panel.push(record);
            judged.push(answer);
        }

        let verdict = |answer: &Option<Answered>, key: &str| -> Option<GoalVerdict> {
            answer.as_ref().and_then(|a| a.goals.get(key).cloned())
        };
        let goals: Vec<GoalJudgement> = goal_lines
            .iter()
            .zip(&goal_holders)
            .map(|(line, &(holder, row))| GoalJudgement {
                holder: characters[holder].slot.clone(),
                goal: row.goal.clone(),
                category: row.category.clone(),
                erg: row.erg.clone(),
                by_self: verdict(&interviewed[holder], &line.key),
                by_others: (0..characters.len())
                    .filter(|&other| other != holder)
                    .map(|other| OtherVerdict {
                        slot: characters[other].slot.clone(),
                        verdict: verdict(&interviewed[other], &line.key),
                    })
                    .collect(),
                by_judges: judged.iter().map(|a| verdict(a, &line.key)).collect(),
            })
            .collect();
        let questions: Vec<QuestionJudgement> = question_lines
            .iter()
            .zip(&question_about)
            .map(|(line, &(about, row))| QuestionJudgement {
                about: characters[about].slot.clone(),
                question: row.question.clone(),
                options: row.options.clone(),
                right: row.answer.chars().next().unwrap_or('?'),
                answers: (0..characters.len())
                    .filter(|&other| other != about)
                    .map(|other| Choice {
                        slot: characters[other].slot.clone(),
                        chosen: interviewed[other]
                            .as_ref()
                            .and_then(|a| a.choices.get(&line.key).copied()),
                    })
                    .collect(),
            })
            .collect();
        ctx.count("goals", goals.len() as u64);
        ctx.count("questions", questions.len() as u64);
        let evaluation = SenseEvaluation {
            scenario: plan.scenario.clone(),
            instance_id: plan.instance.instance_id.clone(),
            template_id: plan.instance.template_id.clone(),
            domain: plan.instance.domain.clone(),
            replicate: plan.replicate,
            cast: trace.cast.clone(),
            focal: plan.focal.clone(),
            turns: trace.turns.len(),
            interviews,
            judges: panel,
            goals,
            questions,
        };
        let mut outputs = Outputs::default();
        outputs.put(ctx, &SENSE_JUDGEMENT, &evaluation)?;
        Ok(outputs)
    }
}

/// One request's record and its answer, or the record of why it has none (missing).
async fn ask(
    ctx: &JobCtx,
    model: &ModelRef,
    request: &ChatRequest,
    who: &str,
    validate: impl Fn(&serde_json::Value) -> Result<Answered, crate::llm::Rejection> + Sync,
) -> Result<(AskedRecord, Option<Answered>), StageFailure> {
    let (answer, answered) = ask_recorded(ctx, model, request, validate, "missing_answers").await?;
    let record = AskedRecord {
        who: who.to_string(),
        model: model.to_string(),
        answer,
    };
    Ok((record, answered))
}

/// Every stored AgentSense evaluation with its run id, in run order.
pub fn sense_evaluations(
    store: &Store,
) -> Result<Vec<(String, SenseEvaluation)>, EvaluateSenseError> {
    Ok(store.read_all(&SENSE_JUDGEMENT)?)
}

/// What the agents and judges said over the stored AgentSense runs, for the demo's summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SenseJudgingSummary {
    pub runs: usize,
    pub failed: usize,
    pub goals: usize,
    /// Goals the panel said were reached, of those it decided.
    pub reached: usize,
    pub decided: usize,
    /// Questions answered right by the other characters, of the answers given.
    pub right: usize,
    pub answered: usize,
    /// Interviews and judge questions without a usable answer, of all asked.
    pub missing: usize,
    pub asked: usize,
}

impl SenseJudgingSummary {
    pub fn render(&self) -> String {
        let percent = |part: usize, whole: usize| {
            if whole == 0 {
                "-".to_string()
            } else {
                format!("{:.0}%", part as f64 * 100.0 / whole as f64)
            }
        };
        format!(
            "AgentSense evaluation: {} run(s) judged, {} failed; goals reached (judges): {} of \
             {} decided ({}), {} undecided; questions answered right: {} of {} ({}); {} of {} \
             interviews and judge answers missing\n",
            self.runs,
            self.failed,
            self.reached,
            self.decided,
            percent(self.reached, self.decided),
            self.goals - self.decided,
            self.right,
            self.answered,
            percent(self.right, self.answered),
            self.missing,
            self.asked
        )
    }
}

/// What `store` holds of `evaluate_sense`: `None` when no run was judged or tried.
pub fn sense_judging_summary(
    store: &Store,
) -> Result<Option<SenseJudgingSummary>, EvaluateSenseError> {
    let records = store.index().scan_stage(NAME)?;
    if records.is_empty() {
        return Ok(None);
    }
    let mut summary = SenseJudgingSummary {
        failed: records.iter().filter(|(_, r)| r.error.is_some()).count(),
        ..SenseJudgingSummary::default()
    };
    for (_, evaluation) in store.outputs(&SENSE_JUDGEMENT, &records)? {
        summary.runs += 1;
        for record in evaluation.interviews.iter().chain(&evaluation.judges) {
            summary.asked += 1;
            summary.missing += usize::from(record.answer.failed.is_some());
        }
        for goal in &evaluation.goals {
            summary.goals += 1;
            if let Some(reached) = goal.judge_majority() {
                summary.decided += 1;
                summary.reached += usize::from(reached);
            }
        }
        for question in &evaluation.questions {
            for choice in &question.answers {
                if let Some(chosen) = choice.chosen {
                    summary.answered += 1;
                    summary.right += usize::from(chosen == question.right);
                }
            }
        }
    }
    Ok(Some(summary))
}

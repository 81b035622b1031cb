//! `blind_test` (AgentSense): every private-information question of a template answered from
//! the template alone (its background and goals, nothing a role keeps to itself), before any
//! interaction. A question answered right far above chance (one in four) gives its answer away
//! in what every agent reads; the accuracy is the baseline the runs' multiple-choice accuracy
//! is read against (`viss check leakage`, the dataset card). The answer is an option letter,
//! parsed strictly; an answer that is not one is re-asked, never taken as a guess.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::annotation::check::{Checked, Problems, Rejection, deserialize_whole};
use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{AppCtx, Env, JobCtx, Level, Outputs, Stage, StageFailure};
use crate::range::{BadSetting, Validate, check};
use crate::stages::llm_step::{ModelRole, Sampling, StepSchema, ask, model_identity, ranges};
use crate::stages::template::{LETTERS, TEMPLATE, TemplateChoice};
use crate::stages::{goals, parse_script};
use crate::text::role::RoleId;

/// Each question's answer from the template alone, per scenario.
pub const BLIND: Port<BlindTest> = Port::item(NAME, "blind_test");

const NAME: &str = "blind_test";
/// Its prompt template.
pub const PROMPT: &str = "blind_test.j2";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "AgentSense: each private-information question answered from the template alone (LLM)",
    version: 1,
    prompts: &[PROMPT],
    defaults: Defaults::of::<BlindTestParams>(),
    load: load_stage::<BlindTestParams, BlindTestStage>,
};

/// blind_test: the model of `role` answers each four-option question of a template from the
/// template's background and goals alone, one question per request, with the option's letter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BlindTestParams {
    /// The model of [llm.roles] in viss.toml: annotator, writer or describer.
    pub role: ModelRole,
    /// Sampling temperature, 0 to 2.
    pub temperature: f32,
    /// Answer tokens at most, 1 to 131072.
    pub max_tokens: u32,
}

impl Default for BlindTestParams {
    fn default() -> Self {
        Self {
            role: ModelRole::Annotator,
            temperature: 0.0,
            max_tokens: 64,
        }
    }
}

impl Validate for BlindTestParams {
    fn validate(&self) -> Result<(), BadSetting> {
        check("temperature", self.temperature, ranges::TEMPERATURE)?;
        check("max_tokens", self.max_tokens, ranges::MAX_TOKENS)
    }
}

pub struct BlindTestStage(BlindTestParams);

impl From<BlindTestParams> for BlindTestStage {
    fn from(params: BlindTestParams) -> Self {
        Self(params)
    }
}

impl BlindTestStage {
    fn sampling(&self) -> Sampling {
        Sampling {
            role: self.0.role,
            temperature: self.0.temperature,
            max_tokens: self.0.max_tokens,
            ..Sampling::annotator()
        }
    }
}

/// What `blind_test` stores for a scenario: one answer per question, in the template's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BlindTest {
    pub scenario: String,
    pub model: String,
    pub answers: Vec<BlindAnswer>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BlindAnswer {
    /// Whose private information the question asks about.
    pub role: RoleId,
    pub question: String,
    pub chosen: char,
    pub right: char,
    /// Why each answer before the kept one was rejected.
    pub rejected: Vec<crate::annotation::check::Refusal>,
}

impl BlindAnswer {
    pub fn correct(&self) -> bool {
        self.chosen == self.right
    }
}

pub fn answer_schema() -> Value {
    json!({
        "type": "object",
        "description": "The option chosen.",
        "properties": {"answer": {"type": "string", "enum": LETTERS.map(String::from),
                                  "description": "The letter of the option."}},
        "required": ["answer"],
        "additionalProperties": false,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Chosen {
    answer: String,
}

/// The letter `value` chooses, or why it chooses none.
fn check_choice(value: &Value) -> Result<char, Rejection> {
    let chosen: Chosen = deserialize_whole(value)?;
    let letter = chosen.answer.trim();
    match LETTERS
        .iter()
        .find(|l| letter.eq_ignore_ascii_case(&l.to_string()))
    {
        Some(letter) => Ok(*letter),
        None => {
            let mut problems = Problems::new();
            problems.unusable_whole(
                "not_an_option",
                format!("answer {letter:?} is not one of the letters A, B, C, D"),
            );
            Err(problems.finish().expect_err("a problem was added"))
        }
    }
}

/// The scripted model's answer: always the first option.
pub fn example() -> Value {
    json!({"answer": "A"})
}

#[derive(Serialize)]
struct PromptContext<'a> {
    background: &'a str,
    goals: Vec<String>,
    question: &'a str,
    options: Vec<String>,
}

#[async_trait::async_trait]
impl Stage<Env> for BlindTestStage {
    fn level(&self) -> Level {
        Level::Scenario
    }

    fn inputs(&self) -> Vec<PortId> {
        vec![parse_script::CONTEXT.id(), goals::GOALS.id(), TEMPLATE.id()]
    }

    fn outputs(&self) -> Vec<PortId> {
        vec![BLIND.id(), crate::stages::llm_step::answers_cost(NAME).id()]
    }

    fn models(
        &self,
        Env { project, .. }: &Env,
        store: &Store,
    ) -> Result<BTreeMap<String, String>, StageFailure> {
        model_identity(&self.sampling(), project, store)
    }

    fn code(&self) -> BTreeMap<String, String> {
        crate::stages::llm_step::step_code(&answer_schema())
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        if let Some(skipped) = goals::skipped_without_goals(ctx) {
            return Ok(skipped);
        }
        let scenario = ctx.read(&parse_script::CONTEXT)?;
        let record = ctx.read(&TEMPLATE)?;
        let sampling = self.sampling();
        let model = sampling.role.model(ctx.llm()).clone();
        let goals: Vec<String> = record
            .template
            .roles
            .iter()
            .flat_map(|role| {
                role.goals
                    .iter()
                    .map(move |goal| format!("{{{}}}: {}", role.role, goal.goal))
            })
            .collect();
        let mut answers = Vec::new();
        for TemplateChoice {
            role,
            question: asked,
            options,
            answer,
        } in &record.choices
        {
            let context = PromptContext {
                background: &record.template.background,
                goals: goals.clone(),
                question: asked,
                options: LETTERS
                    .iter()
                    .zip(options)
                    .map(|(letter, option)| format!("{letter}. {option}"))
                    .collect(),
            };
            let schema = StepSchema {
                name: NAME.to_string(),
                portable: answer_schema(),
                decoder: None,
                avoid_words: Vec::new(),
                avoid_in_own_part: Vec::new(),
                refine_role: None,
            };
            let checked = |value: &Value| check_choice(value).map(Checked::without_gates);
            let asked_model = ask(
                ctx,
                &sampling,
                PROMPT,
                &context,
                Vec::new(),
                schema,
                checked,
            )
            .await?;
            answers.push(BlindAnswer {
                role: *role,
                question: asked.clone(),
                chosen: asked_model.answer,
                right: *answer,
                rejected: asked_model.rejected,
            });
        }
        let record = BlindTest {
            scenario: scenario.scenario_id.clone(),
            model: model.to_string(),
            answers,
        };
        let mut outputs = Outputs::default();
        outputs.put(ctx, &BLIND, &record)?;
        crate::stages::llm_step::put_answers_cost(ctx, &mut outputs, NAME)?;
        Ok(outputs)
    }
}

/// Questions answered right from the template alone, of all asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct BlindAccuracy {
    pub questions: usize,
    pub correct: usize,
}

impl BlindAccuracy {
    pub fn of<'a>(tests: impl IntoIterator<Item = &'a BlindTest>) -> Self {
        let mut accuracy = Self::default();
        for answer in tests.into_iter().flat_map(|test| &test.answers) {
            accuracy.questions += 1;
            accuracy.correct += usize::from(answer.correct());
        }
        accuracy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_option_letter_is_an_answer() {
        assert_eq!(check_choice(&json!({"answer": "b"})).unwrap(), 'B');
        assert_eq!(check_choice(&example()).unwrap(), 'A');
        let rejection = check_choice(&json!({"answer": "E"})).unwrap_err();
        assert_eq!(rejection.kinds(), ["not_an_option"]);
        assert!(check_choice(&json!({"answer": "A", "why": "x"})).is_err());
    }
}

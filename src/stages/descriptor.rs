//! What the rest of viss needs to know about an LLM step, as one value in the step's own
//! directory (`STEP` in `src/stages/<name>/mod.rs`): its stage kind, its prompt template and
//! default text, the earlier answers it reads, where its answer is stored and the answer's
//! schema, its checks, and an answer those checks keep clean. The registry
//! ([`crate::stages::REGISTRY`]) lists each step once; the stage list, the default prompts,
//! `viss review`'s steps, the scripted model's answers and the tests' step lists are derived
//! from it.

use serde_json::Value;

use crate::annotation::ScenarioContext;
use crate::annotation::check::Rejection;
use crate::dag::port::PortId;
use crate::dag::spec::StageKind;
use crate::stages::llm_step::{PromptRead, RefineRole};

pub struct StepDescriptor {
    pub kind: StageKind,
    /// Its template in `prompts/`, as `viss init` writes it.
    pub prompt: DefaultPrompt,
    /// The earlier steps' ports whose answers its prompt and checks see.
    pub reads: &'static [&'static dyn PromptRead],
    /// The port its answer is stored under: what later steps read and `viss review` puts
    /// before a person.
    pub port: PortId,
    /// The answer's JSON schema, as the model is asked for it.
    pub schema: fn() -> Value,
    /// How it narrows a role's schema for a grammar-constrained decoder.
    pub refine_role: RefineRole,
    /// The answer's checks: `Ok` when the answer is kept with no gate failing.
    pub validate: fn(&Value, &ScenarioContext) -> Result<(), Rejection>,
    /// An answer the checks keep clean for a plain scene between `Example::names`: what the
    /// scripted mock model answers, and what the fuzzers start from.
    pub example: fn(&Example<'_>) -> Value,
    /// Where its answer lands in the exported dataset: the card says which step each field of
    /// the benchmark record comes from by this, and a test holds it to the record's schema.
    pub exported: Exported,
}

/// Where an LLM step's answer lands in the exported dataset.
#[derive(Debug, Clone, Copy)]
pub enum Exported {
    /// As fields of the benchmark record (`data.jsonl`, `data.parquet`): the scenario's own,
    /// and each role's.
    Fields {
        scenario: &'static [&'static str],
        role: &'static [&'static str],
    },
    /// In the AgentSense configs (templates, instances, SOTOPIA's files), through the stages
    /// that build on it (`template`, `instantiate`).
    AgentSense,
}

impl StepDescriptor {
    pub fn stage(&self) -> &'static str {
        self.port.stage
    }

    /// The name of the answer's output in the stage's record.
    pub fn output(&self) -> String {
        self.port.output_name("")
    }
}

impl std::fmt::Debug for StepDescriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepDescriptor")
            .field("stage", &self.stage())
            .finish_non_exhaustive()
    }
}

/// A prompt template as `viss init` writes it into `prompts/`.
#[derive(Debug, Clone, Copy)]
pub struct DefaultPrompt {
    pub file: &'static str,
    pub text: &'static str,
}

/// The scene an example answer is written for.
pub struct Example<'a> {
    /// The participants, in order.
    pub names: &'a [String],
    /// Each participant's gender as the script states it ("unknown" where it does not).
    pub gender: &'a dyn Fn(&str) -> &'static str,
    /// How many lines each participant speaks.
    pub lines: &'a dyn Fn(&str) -> usize,
}

impl Example<'_> {
    /// One entry per participant, made from its name and another participant's.
    pub fn roles(&self, make: &dyn Fn(&str, &str) -> Value) -> Value {
        Value::Array(
            self.names
                .iter()
                .map(|name| {
                    let other = self.names.iter().find(|o| *o != name).unwrap_or(name);
                    make(name, other)
                })
                .collect(),
        )
    }

    /// What a participant's free text is about, by its place among the participants: the
    /// answers of different roles then differ by more than their names, as the quality gates
    /// require (near-duplicate fields of different roles are rejected).
    pub fn topic(&self, name: &str) -> &'static str {
        topic(self.names, name)
    }
}

/// [`Example::topic`] for any list of participants.
pub fn topic(people: &[impl AsRef<str>], name: &str) -> &'static str {
    const TOPICS: [&str; 6] = [
        "the fuel money",
        "the spare key",
        "the parking fine",
        "the broken lamp",
        "the late rent",
        "the heavy boxes",
    ];
    let index = people.iter().position(|p| p.as_ref() == name).unwrap_or(0);
    TOPICS[index % TOPICS.len()]
}

/// Declares `STEP`, the descriptor of the LLM step declared with `scenario_step!` in the same
/// module, from its answer port, its answer module, its template's built-in text (the
/// template is `KIND`'s first prompt) and where its answer is exported.
macro_rules! step_descriptor {
    ($output:ident, $module:path, $prompt_text:expr, $exported:expr $(,)?) => {
        /// The step as the rest of viss knows it (see
        /// [`crate::stages::descriptor::StepDescriptor`]).
        pub const STEP: crate::stages::descriptor::StepDescriptor = {
            use $module as step;
            crate::stages::descriptor::StepDescriptor {
                kind: KIND,
                prompt: crate::stages::descriptor::DefaultPrompt {
                    file: KIND.prompts[0],
                    text: $prompt_text,
                },
                reads: READS,
                port: $output.id(),
                schema: step::schema,
                refine_role: REFINE_ROLE,
                validate: |value, ctx| step::validate(value, ctx).map(drop),
                example: step::example,
                exported: $exported,
            }
        };
    };
}

pub(crate) use step_descriptor;

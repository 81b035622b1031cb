//! `simulate_sense` (AgentSense): one run of a synthetic instance (AgentSense, section 3.3). A
//! character's agent is told the situation, its own profile, its goals and private
//! information, and of every other character what their relationship lets it know (family,
//! friends and partners: all but the secret; acquaintances: name, occupation, pronouns;
//! strangers: pronouns); the speaker of each turn is drawn at random with the run's seed, never
//! the one who just spoke, for `rounds` turns. Each turn answers with an action type (SOTOPIA's)
//! and its words or deed. A turn that says nothing new or speaks for another character is
//! re-asked with the reason at most 5 times; then the run fails. Every turn goes through the
//! request cache with its own seed, so a stopped run resumes at the turn it reached.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{Env, JobCtx, Level, Outputs, Stage, StageFailure};
use crate::llm::{ChatRequest, ModelRef, Problems, Rejection};
use crate::range::{BadSetting, Range, Validate, check, check_some};
use crate::sim::policy::{SpeakerPolicy, decision_seed, next_speaker};
use crate::sim::trace::{Presence, RunEnd};
use crate::sim::turn::{ActionType, check_message_novel};
use crate::stages::export::agentsense::{CharacterRow, InstanceRow};
use crate::stages::llm_step::{ask_model, question};
use crate::stages::plan_sense_runs::{self, SenseRunPlan};

/// The run's trace: who played whom, every turn, how it ended.
pub const SENSE_TRACE: Port<SenseTrace> = Port::item(NAME, "sense_trace");

const NAME: &str = "simulate_sense";
/// The template of a character's turn.
pub const TEMPLATE: &str = "simulate_sense.j2";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "AgentSense: one role-play run of a synthetic instance (LLM)",
    version: 2,
    prompts: &[TEMPLATE],
    defaults: Defaults::of::<SimulateSenseParams>(),
    load: load_stage::<SimulateSenseParams, SimulateSense>,
};

/// simulate_sense: each run plan_sense_runs made is played by an agent per character, the
/// speaker of each turn drawn at random (never the one who just spoke), as AgentSense plays.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SimulateSenseParams {
    /// Turns per run, 1 to 200; AgentSense plays 15.
    pub rounds: usize,
    /// Agents' sampling temperature, 0 to 2.
    pub temperature: f32,
    /// Answer tokens per turn at most, 1 to 131072.
    pub max_tokens: u32,
    /// A turn's words at most, 1 to 1000. Unset: no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(example = 60)]
    pub message_budget_words: Option<usize>,
    /// The run's seed: the speakers and each turn's sampling seed derive from it, the
    /// replicate and the turn. Any 64-bit unsigned integer.
    pub seed: u64,
}

impl Default for SimulateSenseParams {
    fn default() -> Self {
        Self {
            rounds: 15,
            temperature: 0.8,
            max_tokens: 256,
            message_budget_words: None,
            seed: 7,
        }
    }
}

const ROUNDS: Range = Range::new(1.0, 200.0);
const MESSAGE_BUDGET_WORDS: Range = Range::new(1.0, 1000.0);

impl Validate for SimulateSenseParams {
    fn validate(&self) -> Result<(), BadSetting> {
        check("rounds", self.rounds, ROUNDS)?;
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
        check_some(
            "message_budget_words",
            self.message_budget_words,
            MESSAGE_BUDGET_WORDS,
        )
    }
}

pub struct SimulateSense(SimulateSenseParams);

impl From<SimulateSenseParams> for SimulateSense {
    fn from(params: SimulateSenseParams) -> Self {
        Self(params)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimulateSenseError {
    #[error("the run's model {model:?} is not a model reference: {problem}")]
    Model { model: String, problem: String },
    #[error(
        "the plan has {models} model(s) for {characters} character(s); rebuild plan_sense_runs"
    )]
    Seats { models: usize, characters: usize },
    #[error("turn {round} ({name}): {reason}")]
    Turn {
        round: usize,
        name: String,
        reason: String,
    },
}

/// One character of a run and the model playing it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SenseSeat {
    pub slot: String,
    pub name: String,
    pub model: String,
}

/// One turn of an AgentSense run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SenseTurn {
    pub round: usize,
    /// The speaker's slot (`r1`, ...).
    pub speaker: String,
    pub action_type: ActionType,
    /// What was said or done; empty for `none`.
    pub argument: String,
    /// Why each answer before this one was refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<crate::annotation::check::Refusal>,
    pub request_key: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// What `simulate_sense` stores for a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SenseTrace {
    pub scenario: String,
    pub instance_id: String,
    pub replicate: u32,
    /// The stage's seed; the run draws from [`run_seed`] of it and the instance's.
    pub seed: u64,
    pub rounds: usize,
    pub temperature: f32,
    pub cast: Vec<SenseSeat>,
    pub turns: Vec<SenseTurn>,
    pub end: RunEnd,
}

impl SenseTrace {
    /// The name the run gave `slot` (the slot itself for one not in the cast).
    pub fn name_of(&self, slot: &str) -> String {
        self.cast
            .iter()
            .find(|seat| seat.slot == slot)
            .map_or(slot.to_string(), |seat| seat.name.clone())
    }

    /// Every turn as the prompts show it, oldest first.
    pub fn said(&self) -> Vec<Said> {
        self.turns
            .iter()
            .map(|turn| Said {
                speaker: self.name_of(&turn.speaker),
                action: turn.action_type.as_str(),
                text: turn.argument.clone(),
            })
            .collect()
    }

    /// The run as a person reads it.
    pub fn transcript(&self) -> String {
        let mut out = format!(
            "{} ({}, replicate {}, seed {}, {} rounds)\n",
            self.instance_id, self.scenario, self.replicate, self.seed, self.rounds
        );
        for seat in &self.cast {
            out.push_str(&format!(
                "  {} ({}): {}\n",
                seat.name, seat.slot, seat.model
            ));
        }
        for turn in &self.turns {
            let who = self.name_of(&turn.speaker);
            out.push_str(&match turn.action_type {
                ActionType::Speak => format!("{}. {who}: {}\n", turn.round, turn.argument),
                ActionType::None => format!("{}. {who} does nothing\n", turn.round),
                other => format!(
                    "{}. {who} [{}]: {}\n",
                    turn.round,
                    other.as_str(),
                    turn.argument
                ),
            });
        }
        out.push_str(&format!("ended {}\n", self.end));
        out
    }
}

/// The seed a run of the instance cast with `instance_seed` draws from: the stage's `seed`, but
/// another for every instance, so instances do not all open with the same slot.
pub fn run_seed(seed: u64, instance_seed: u64) -> u64 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"viss-sense run");
    hasher.update(&seed.to_le_bytes());
    hasher.update(&instance_seed.to_le_bytes());
    u64::from_le_bytes(
        hasher.finalize().as_bytes()[..8]
            .try_into()
            .expect("8 bytes"),
    )
}

/// What the prompt shows of the speaker.
#[derive(Debug, Serialize)]
struct Me<'a> {
    name: String,
    pronouns: &'a str,
    age: u32,
    occupation: &'a str,
    big_five: &'a str,
    moral_values: &'a [String],
    decision_making_style: &'a str,
    public_info: &'a str,
    secret: &'a str,
}

/// Another character as the speaker knows them.
#[derive(Debug, Serialize)]
struct Known {
    name: String,
    known: Vec<String>,
}

/// One turn as the prompts show it: who, what kind of act, and its words or deed.
#[derive(Debug, Clone, Serialize)]
pub struct Said {
    pub speaker: String,
    pub action: &'static str,
    pub text: String,
}

impl Said {
    /// The turn as one line of a transcript an agent or a judge reads afterwards.
    pub fn line(&self) -> String {
        let Said {
            speaker,
            action,
            text,
        } = self;
        match *action {
            "none" => format!("{speaker} did nothing."),
            "non_verbal" => format!("{speaker}, without words: {text}"),
            "physical_action" => format!("{speaker} did this: {text}"),
            "leave" => format!("{speaker} left, saying: \"{text}\""),
            _ => format!("{speaker} said: \"{text}\""),
        }
    }
}

/// What `simulate_sense.j2` sees for one turn.
#[derive(Debug, Serialize)]
struct SenseView<'a> {
    background: &'a str,
    me: Me<'a>,
    goals: Vec<&'a str>,
    private_info: &'a [String],
    others: Vec<Known>,
    gone: Vec<String>,
    history: &'a [Said],
    round: usize,
    rounds: usize,
    message_budget_words: Option<usize>,
}

/// What `viewer` may know of `other` in `instance`: what their relationship lets it see
/// (family, friends and partners all but the secret; acquaintances name, occupation and
/// pronouns; strangers pronouns), the relationship first.
fn known_of(instance: &InstanceRow, viewer: &CharacterRow, other: &CharacterRow) -> Vec<String> {
    let relation = instance.relationships.iter().find(|pair| {
        (pair.first == viewer.slot && pair.second == other.slot)
            || (pair.first == other.slot && pair.second == viewer.slot)
    });
    let Some(relation) = relation else {
        // No rule for the pair: the least, as for strangers.
        return vec![format!("pronouns {}", other.pronouns)];
    };
    let mut known = vec![match relation.relationship.as_str() {
        "family" => "family of yours".to_string(),
        "romantic" => "your partner".to_string(),
        "friend" => "a friend of yours".to_string(),
        "acquaintance" => "an acquaintance of yours".to_string(),
        other => format!("a {other} to you"),
    }];
    match relation.sees.as_str() {
        "all_but_secret" => known.extend([
            format!("pronouns {}", other.pronouns),
            format!("{} years old", other.age),
            other.occupation.clone(),
            other.public_info.clone(),
            format!("personality: {}", other.big_five),
            format!("values: {}", other.moral_values.join(", ")),
            format!("decides in a {} way", other.decision_making_style),
        ]),
        "name_occupation_pronouns" => known.extend([
            format!("pronouns {}", other.pronouns),
            other.occupation.clone(),
        ]),
        _ => known.push(format!("pronouns {}", other.pronouns)),
    }
    known
}

/// The answer a turn is held to: SOTOPIA's action types, the argument empty only for none.
fn turn_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "action_type": {"type": "string", "enum": ActionType::ALL.map(ActionType::as_str)},
            "argument": {"type": "string"}
        },
        "required": ["action_type", "argument"],
        "additionalProperties": false
    })
}

/// [`turn_schema`] for a constrained decoder (the embedded model): `none` with an empty
/// argument, every other action with words, so the grammar cannot write the pair the check
/// refuses (the demo's model gave `none` with words six times in a row and failed a run).
fn turn_decoder_schema() -> Value {
    let acting: Vec<&str> = ActionType::ALL
        .iter()
        .filter(|action| **action != ActionType::None)
        .map(|action| action.as_str())
        .collect();
    json!({
        "anyOf": [
            {
                "type": "object",
                "properties": {
                    "action_type": {"type": "string", "enum": acting},
                    "argument": {"type": "string", "minLength": 1}
                },
                "required": ["action_type", "argument"],
                "additionalProperties": false
            },
            {
                "type": "object",
                "properties": {
                    "action_type": {"const": "none"},
                    "argument": {"const": ""}
                },
                "required": ["action_type", "argument"],
                "additionalProperties": false
            }
        ]
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnAnswer {
    action_type: ActionType,
    argument: String,
}

/// A turn's answer checked: the shape, words for every action but none, none for none, the
/// budget, and something new that is the speaker's own.
fn check_turn(
    value: &Value,
    names: &[String],
    history: &[(usize, String)],
    budget: Option<usize>,
) -> Result<TurnAnswer, Rejection> {
    let mut turn: TurnAnswer = serde_json::from_value(value.clone()).map_err(|e| {
        let message = format!(
            "give {{\"action_type\": one of {}, \"argument\": text}}: {e}",
            ActionType::ALL.map(ActionType::as_str).join(", ")
        );
        Rejection::whole("answer_shape", message)
    })?;
    turn.argument = turn.argument.trim().to_string();
    let mut problems = Problems::new();
    match (turn.action_type, turn.argument.is_empty()) {
        (ActionType::None, false) => {
            let message = "action_type none does nothing: leave argument empty".to_string();
            problems.unusable("none_with_words", None, "argument", message);
        }
        (ActionType::None, true) => return Ok(turn),
        (other, true) => {
            let what = if other == ActionType::Speak {
                "say"
            } else {
                "do"
            };
            let message =
                format!("argument is empty: say what you {what} (or use action_type none)");
            problems.unusable("empty", None, "argument", message);
        }
        (_, false) => {
            let words = turn.argument.split_whitespace().count();
            if let Some(budget) = budget.filter(|&budget| words > budget) {
                let message = format!("argument has {words} words; say it in at most {budget}");
                problems.unusable("too_long", None, "argument", message);
            }
        }
    }
    problems.finish()?;
    check_message_novel(&turn.argument, names, history)?;
    Ok(turn)
}

#[async_trait::async_trait]
impl Stage<Env> for SimulateSense {
    fn level(&self) -> Level {
        Level::Run
    }

    fn inputs(&self) -> Vec<PortId> {
        vec![plan_sense_runs::SENSE_RUN.id()]
    }

    fn outputs(&self) -> Vec<PortId> {
        vec![SENSE_TRACE.id()]
    }

    fn models(
        &self,
        Env { project, .. }: &Env,
        store: &Store,
    ) -> Result<BTreeMap<String, String>, StageFailure> {
        crate::stages::plan_runs::agent_identities(project, store)
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let params = &self.0;
        let plan: SenseRunPlan = ctx.read(&plan_sense_runs::SENSE_RUN)?;
        let characters = &plan.instance.characters;
        if plan.models.len() != characters.len() {
            return Err(SimulateSenseError::Seats {
                models: plan.models.len(),
                characters: characters.len(),
            }
            .into());
        }
        let models = plan
            .models
            .iter()
            .map(|model| {
                model
                    .parse::<ModelRef>()
                    .map_err(|problem| SimulateSenseError::Model {
                        model: model.clone(),
                        problem,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let names: Vec<String> = characters.iter().map(CharacterRow::full_name).collect();
        let mut presence = Presence::new(names.len());
        let mut spoken: Vec<usize> = Vec::new();
        let mut said: Vec<(usize, String)> = Vec::new();
        let mut history: Vec<Said> = Vec::new();
        let mut turns = Vec::new();
        let mut end = RunEnd::RoundsDone;
        let seed = run_seed(params.seed, plan.instance.seed);
        for round in 1..=params.rounds {
            let present = presence.present();
            let speaker = next_speaker(
                SpeakerPolicy::RandomNoRepeat,
                present,
                &spoken,
                None,
                seed,
                plan.replicate,
            );
            let me = &characters[speaker];
            let view = SenseView {
                background: &plan.instance.background,
                me: Me {
                    name: names[speaker].clone(),
                    pronouns: &me.pronouns,
                    age: me.age,
                    occupation: &me.occupation,
                    big_five: &me.big_five,
                    moral_values: &me.moral_values,
                    decision_making_style: &me.decision_making_style,
                    public_info: &me.public_info,
                    secret: &me.secret,
                },
                goals: me.goals.iter().map(|goal| goal.goal.as_str()).collect(),
                private_info: &me.private_info,
                others: characters
                    .iter()
                    .enumerate()
                    .filter(|&(index, _)| index != speaker && present[index])
                    .map(|(index, other)| Known {
                        name: names[index].clone(),
                        known: known_of(&plan.instance, me, other),
                    })
                    .collect(),
                gone: (0..names.len())
                    .filter(|&index| !present[index])
                    .map(|index| names[index].clone())
                    .collect(),
                history: &history,
                round,
                rounds: params.rounds,
                message_budget_words: params.message_budget_words,
            };
            let turn_seed = decision_seed(seed, plan.replicate, round);
            let mut request = ChatRequest::new(question(ctx, TEMPLATE, &view, Vec::new())?)
                .with_schema("sense_turn", turn_schema());
            request.decoder_schema = Some(turn_decoder_schema());
            request.temperature = params.temperature;
            request.seed = Some(turn_seed);
            request.replicate = plan.replicate;
            request.max_tokens = Some(params.max_tokens);
            let validate =
                |value: &Value| check_turn(value, &names, &said, params.message_budget_words);
            let (turn, completion) = ask_model(ctx, &models[speaker], &request, validate)
                .await
                .map_err(|failure| SimulateSenseError::Turn {
                    round,
                    name: names[speaker].clone(),
                    reason: failure.to_string(),
                })?;
            ctx.count("turns", 1);
            history.push(Said {
                speaker: names[speaker].clone(),
                action: turn.action_type.as_str(),
                text: turn.argument.clone(),
            });
            said.push((speaker, turn.argument.clone()));
            spoken.push(speaker);
            turns.push(SenseTurn {
                round,
                speaker: me.slot.clone(),
                action_type: turn.action_type,
                argument: turn.argument,
                rejected: completion.rejected,
                request_key: completion.key.to_hex(),
                prompt_tokens: completion.first_usage.prompt_tokens,
                completion_tokens: completion.first_usage.completion_tokens,
            });
            if let Some(ended) = presence.after_turn(speaker, Some(turn.action_type)) {
                end = ended;
                break;
            }
        }
        let trace = SenseTrace {
            scenario: plan.scenario.clone(),
            instance_id: plan.instance.instance_id.clone(),
            replicate: plan.replicate,
            seed: params.seed,
            rounds: params.rounds,
            temperature: params.temperature,
            cast: characters
                .iter()
                .zip(&plan.models)
                .zip(&names)
                .map(|((character, model), name)| SenseSeat {
                    slot: character.slot.clone(),
                    name: name.clone(),
                    model: model.clone(),
                })
                .collect(),
            turns,
            end,
        };
        let mut outputs = Outputs::default();
        outputs.put(ctx, &SENSE_TRACE, &trace)?;
        Ok(outputs)
    }
}

/// What the store holds of the AgentSense runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SenseRunsSummary {
    pub runs: usize,
    pub failed: usize,
    /// Instances with a run.
    pub instances: usize,
    pub turns: usize,
    /// Agent answers refused and re-asked.
    pub refused: usize,
}

impl SenseRunsSummary {
    pub fn render(&self) -> String {
        format!(
            "AgentSense runs: {} run(s) of {} instance(s), {} failed; {} turns ({} answers \
             refused and re-asked)\n",
            self.runs, self.instances, self.failed, self.turns, self.refused
        )
    }
}

/// What `store` holds of `simulate_sense`: `None` when no run was played or tried.
pub fn sense_runs_summary(
    store: &Store,
) -> Result<Option<SenseRunsSummary>, crate::dag::store::StoreError> {
    let records = store.index().scan_stage(NAME)?;
    if records.is_empty() {
        return Ok(None);
    }
    let mut summary = SenseRunsSummary {
        failed: records.iter().filter(|(_, r)| r.error.is_some()).count(),
        ..SenseRunsSummary::default()
    };
    let mut instances = std::collections::BTreeSet::new();
    for (_, trace) in store.outputs(&SENSE_TRACE, &records)? {
        summary.runs += 1;
        summary.turns += trace.turns.len();
        summary.refused += trace.turns.iter().map(|t| t.rejected.len()).sum::<usize>();
        instances.insert(trace.instance_id);
    }
    summary.instances = instances.len();
    Ok(Some(summary))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama.cpp takes the decoder schema, and its two branches are what the check accepts.
    #[test]
    fn the_embedded_decoder_cannot_write_none_with_words() {
        let schema = turn_decoder_schema();
        let grammar = llama_cpp_2::json_schema_to_grammar(&schema.to_string()).unwrap();
        assert!(grammar.contains("none"), "{grammar}");
        let names = vec!["Lena Haddad".to_string()];
        assert!(
            check_turn(
                &json!({"action_type": "none", "argument": ""}),
                &names,
                &[],
                None
            )
            .is_ok()
        );
        assert_eq!(
            schema["anyOf"][1]["properties"]["argument"],
            json!({"const": ""})
        );
        assert!(
            !schema["anyOf"][0]["properties"]["action_type"]["enum"]
                .as_array()
                .unwrap()
                .contains(&json!("none"))
        );
    }

    #[test]
    fn a_turn_is_held_to_its_action_type_its_budget_and_something_new() {
        let names = vec!["Lena Haddad".to_string(), "Omar Moreau".to_string()];
        let history = vec![(1, "Did you take the van?".to_string())];
        let turn = |value: Value| check_turn(&value, &names, &history, Some(5));
        assert!(turn(json!({"action_type": "speak", "argument": "I did, sorry."})).is_ok());
        assert!(turn(json!({"action_type": "none", "argument": ""})).is_ok());
        let refused = [
            (
                json!({"action_type": "none", "argument": "hm"}),
                "leave argument empty",
            ),
            (
                json!({"action_type": "speak", "argument": " "}),
                "argument is empty",
            ),
            (
                json!({"action_type": "shout", "argument": "Hey"}),
                "action_type",
            ),
            (
                json!({"action_type": "speak", "argument": "one two three four five six"}),
                "at most 5",
            ),
            (
                json!({"action_type": "speak", "argument": "did you take the VAN"}),
                "repeats word for word",
            ),
            (
                json!({"action_type": "speak", "argument": "Omar Moreau: fine."}),
                "label",
            ),
        ];
        for (answer, why) in refused {
            let problem = turn(answer.clone()).unwrap_err().message();
            assert!(problem.contains(why), "{answer}: {problem}");
        }
    }
}

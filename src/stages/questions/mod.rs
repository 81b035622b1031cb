//! `questions` (AgentSense): each private-information question as a four-option question, the
//! right option's place balanced across the benchmark: over all questions, each of A, B, C and
//! D is right as often as the others (the counts differ by one at most), which place each
//! question gets drawn from a seed. A model that favours one letter then gains nothing. The
//! wrong options keep the order `private_info` gave them around it. A scenario whose private
//! information a person rejected (`viss review`), or that has none, gets a record with no
//! question.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::{Env, JobCtx, Level, Outputs, Stage, StageFailure};
use crate::stages::llm_step::ReviewOutcome;
use crate::stages::parse_script;
use crate::stages::private_info::PRIVATE_INFO;
use crate::text::role::RoleId;

/// Each scenario's four-option questions, per scenario.
pub const CHOICES: Port<ScenarioChoices> = Port::child(NAME, "choices");
/// How often each letter is right over the benchmark.
pub const POSITIONS: Port<PositionCounts> = Port::private(NAME, "positions");

const NAME: &str = "questions";

/// Options per question: the right one and three wrong ones.
pub const OPTIONS: usize = 4;

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "AgentSense: four-option questions, the right option's place balanced",
    version: 1,
    prompts: &[],
    defaults: Defaults::of::<QuestionsParams>(),
    load: load_stage::<QuestionsParams, Questions>,
};

/// questions: every private-information question as four options, the right one's place (A,
/// B, C or D) balanced over the benchmark: each letter is right as often as the others, give or
/// take one. Which question gets which place is drawn from seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct QuestionsParams {
    /// Another seed, other places (still balanced). Any 64-bit unsigned integer.
    pub seed: u64,
}

impl Default for QuestionsParams {
    fn default() -> Self {
        Self { seed: 2025 }
    }
}

impl crate::range::Validate for QuestionsParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        Ok(())
    }
}

pub struct Questions(QuestionsParams);

impl From<QuestionsParams> for Questions {
    fn from(params: QuestionsParams) -> Self {
        Self(params)
    }
}

/// A scenario's questions as four options each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScenarioChoices {
    pub scenario: String,
    pub questions: Vec<MultipleChoice>,
}

/// One question's options: `order[k]` is what option k (A, B, C, D) shows, 0 for the right
/// answer and 1 to 3 for the wrong options in the order `private_info` gave them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MultipleChoice {
    pub role: RoleId,
    /// The question's place among the role's questions.
    pub index: usize,
    pub order: [u8; OPTIONS],
}

impl MultipleChoice {
    /// Where the right answer stands, 0 (A) to 3 (D).
    pub fn answer_position(&self) -> usize {
        self.order
            .iter()
            .position(|&option| option == 0)
            .expect("every order holds the right answer")
    }

    /// The question's four options in order, from its right answer and wrong options.
    pub fn options<'a>(&self, answer: &'a str, wrong: &'a [String]) -> Vec<&'a str> {
        self.order
            .iter()
            .map(|&k| match k {
                0 => answer,
                k => wrong[usize::from(k) - 1].as_str(),
            })
            .collect()
    }
}

/// How often each place was made the right one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PositionCounts {
    pub seed: u64,
    pub counts: [usize; OPTIONS],
}

/// The right answer's place for `count` questions in a fixed order: each place `count / 4`
/// times (the first `count % 4` places once more), in an order drawn from `seed`.
pub fn balanced_positions(count: usize, seed: u64) -> Vec<usize> {
    let mut positions: Vec<usize> = (0..count).map(|i| i % OPTIONS).collect();
    fastrand::Rng::with_seed(seed).shuffle(&mut positions);
    positions
}

/// The options around a right answer at `position`: the wrong ones keep their order.
fn order_with_answer_at(position: usize) -> [u8; OPTIONS] {
    let mut order = [0u8; OPTIONS];
    let mut wrong = 1u8;
    for (at, slot) in order.iter_mut().enumerate() {
        if at != position {
            *slot = wrong;
            wrong += 1;
        }
    }
    order
}

#[async_trait::async_trait]
impl Stage<Env> for Questions {
    fn level(&self) -> Level {
        Level::Benchmark
    }

    /// Every scenario's context too: a scenario without private information (or without
    /// goals) gets a record with no question, so what reads its choices is not held.
    fn inputs(&self) -> Vec<PortId> {
        vec![parse_script::CONTEXT.id(), PRIVATE_INFO.id()]
    }

    fn outputs(&self) -> Vec<PortId> {
        [CHOICES.id(), POSITIONS.id()].into()
    }

    fn partial_aggregate(&self) -> bool {
        true
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        // (scenario, role, index) in that order: the draw does not depend on the order the
        // records were read in.
        let mut asked: BTreeMap<String, Vec<(RoleId, usize)>> = ctx
            .inputs_of(parse_script::CONTEXT.id())
            .filter_map(|input| input.name.split_once('@'))
            .map(|(_, scenario)| (scenario.to_string(), Vec::new()))
            .collect();
        for input in ctx.inputs_of(PRIVATE_INFO.id()) {
            let record = ctx.read_input(&PRIVATE_INFO, input)?;
            let rejected = record
                .review
                .as_ref()
                .is_some_and(|mark| mark.verdict == ReviewOutcome::Rejected);
            let questions = asked.entry(record.scenario.clone()).or_default();
            if rejected {
                continue;
            }
            for (at, role) in record.answer.roles.iter().enumerate() {
                questions.extend((0..role.questions.len()).map(|index| (RoleId::at(at), index)));
            }
        }
        let total = asked.values().map(Vec::len).sum();
        let mut positions = balanced_positions(total, self.0.seed).into_iter();
        let mut counts = [0; OPTIONS];
        let mut outputs = Outputs::default();
        for (scenario, questions) in asked {
            let questions = questions
                .into_iter()
                .map(|(role, index)| {
                    let position = positions.next().expect("one place per question");
                    counts[position] += 1;
                    MultipleChoice {
                        role,
                        index,
                        order: order_with_answer_at(position),
                    }
                })
                .collect();
            let choices = ScenarioChoices {
                scenario: scenario.clone(),
                questions,
            };
            outputs.put_child(ctx, &CHOICES, &scenario, &choices)?;
        }
        let summary = PositionCounts {
            seed: self.0.seed,
            counts,
        };
        outputs.put(ctx, &POSITIONS, &summary)?;
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_place_is_right_as_often_as_the_others_give_or_take_one() {
        for count in [0, 1, 5, 10, 245, 1001] {
            let positions = balanced_positions(count, 2025);
            let mut counts = [0usize; OPTIONS];
            for position in &positions {
                counts[*position] += 1;
            }
            let (most, least) = (counts.iter().max(), counts.iter().min());
            assert!(most.unwrap() - least.unwrap() <= 1, "{count}: {counts:?}");
            assert_eq!(counts.iter().sum::<usize>(), count);
        }
    }

    #[test]
    fn the_places_are_drawn_from_the_seed() {
        assert_eq!(balanced_positions(40, 7), balanced_positions(40, 7));
        assert_ne!(balanced_positions(40, 7), balanced_positions(40, 8));
    }

    #[test]
    fn the_wrong_options_keep_their_order_around_the_right_one() {
        let choice = MultipleChoice {
            role: RoleId::at(1),
            index: 0,
            order: order_with_answer_at(2),
        };
        assert_eq!(choice.order, [1, 2, 0, 3]);
        assert_eq!(choice.answer_position(), 2);
        let wrong = ["a mirror".to_string(), "a lamp".into(), "a window".into()];
        assert_eq!(
            choice.options("a vase", &wrong),
            ["a mirror", "a lamp", "a vase", "a window"]
        );
    }
}

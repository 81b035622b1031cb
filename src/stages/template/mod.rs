//! `template` (AgentSense): the scenario template as a record a person can open (`viss show
//! template <scenario> template`) and later stages read: `anonymize`'s replacements applied to
//! the background, goals and private information, the participants as slots, each question
//! with its four options in the order `questions` balanced, and how much the template still
//! resembles its source script segment (word Jaccard, difflib's Ratcliff-Obershelp ratio, the
//! normalised Levenshtein similarity). `viss check leakage` reports those over the benchmark.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::annotation::ScenarioContext;
use crate::annotation::context::ContextLineKind;
use crate::annotation::words::words;
use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::{Env, JobCtx, Level, Outputs, Stage, StageFailure};
use crate::stages::anonymize::answer::{Replacement, Template, template};
use crate::stages::questions::{CHOICES, MultipleChoice};
use crate::stages::{anonymize, goals, parse_script, private_info};
use crate::text::role::RoleId;

/// The scenario's template, per scenario.
pub const TEMPLATE: Port<TemplateRecord> = Port::item(NAME, "template");

const NAME: &str = "template";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "AgentSense: the scenario template, its four-option questions, its likeness to the \
              source",
    version: 3,
    prompts: &[],
    defaults: Defaults::of::<TemplateParams>(),
    load: load_stage::<TemplateParams, TemplateStage>,
};

/// template: the scenario template made from anonymize's replacements (participants as slots),
/// with each private-information question's four options in the order `questions` chose, and
/// its similarity to the source script segment (word Jaccard, Ratcliff-Obershelp, Levenshtein).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateParams {}

impl crate::range::Validate for TemplateParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        Ok(())
    }
}

pub struct TemplateStage;

impl From<TemplateParams> for TemplateStage {
    fn from(_: TemplateParams) -> Self {
        Self
    }
}

/// What `template` stores for a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TemplateRecord {
    pub template: Template,
    /// Every replacement anonymize made, original -> revised: what the dataset's owner audits.
    pub replacements: Vec<Replacement>,
    pub choices: Vec<TemplateChoice>,
    pub similarity: Similarity,
    /// The stages whose answers behind the template are flagged (they still fail a quality
    /// gate, such as a name of the show left in it): the template is not to be used as clean
    /// until a person has reviewed them.
    pub flagged_upstream: Vec<String>,
}

/// One private-information question as asked: four options and the right one's letter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TemplateChoice {
    pub role: RoleId,
    pub question: String,
    pub options: Vec<String>,
    /// `A` to `D`.
    pub answer: char,
}

/// How much a template still reads like its source: each 0 (nothing shared) to 1 (the same).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Similarity {
    /// Shared words over all words (word sets, lowercased).
    pub jaccard: f64,
    /// difflib's SequenceMatcher ratio (Ratcliff-Obershelp, without the junk heuristic), by
    /// `difflib-fast`.
    pub gestalt: f64,
    /// 1 - Levenshtein distance / the longer length, in characters, by `strsim`.
    pub levenshtein: f64,
}

impl Similarity {
    pub fn between(a: &str, b: &str) -> Similarity {
        let (a_words, b_words): (BTreeSet<String>, BTreeSet<String>) = (
            words(a).into_iter().collect(),
            words(b).into_iter().collect(),
        );
        Similarity {
            jaccard: crate::annotation::gates::jaccard(&a_words, &b_words),
            gestalt: difflib_fast::ratio(a, b),
            levenshtein: strsim::normalized_levenshtein(a, b),
        }
    }
}

/// The scenario's lines as the script has them: what a template is compared with.
pub fn source_segment(ctx: &ScenarioContext) -> String {
    ctx.lines
        .iter()
        .map(|line| match (line.kind, &line.speaker) {
            (ContextLineKind::Dialogue, Some(speaker)) => format!("{speaker}: {}", line.text),
            _ => line.text.clone(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The template's text, in the order a reader meets it.
pub fn template_text(template: &Template) -> String {
    template
        .texts()
        .into_iter()
        .map(|(_, text)| text.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The letters of a question's options, in order.
pub const LETTERS: [char; crate::stages::questions::OPTIONS] = ['A', 'B', 'C', 'D'];

#[async_trait::async_trait]
impl Stage<Env> for TemplateStage {
    fn level(&self) -> Level {
        Level::Scenario
    }

    fn inputs(&self) -> Vec<PortId> {
        vec![
            parse_script::CONTEXT.id(),
            goals::GOALS.id(),
            private_info::PRIVATE_INFO.id(),
            anonymize::ANONYMIZATION.id(),
            CHOICES.id(),
        ]
    }

    fn outputs(&self) -> Vec<PortId> {
        vec![TEMPLATE.id()]
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        if let Some(skipped) = goals::skipped_without_goals(ctx) {
            return Ok(skipped);
        }
        let scenario = ctx.read(&parse_script::CONTEXT)?;
        let goals = ctx.read(&goals::GOALS)?;
        let info = ctx.read(&private_info::PRIVATE_INFO)?;
        let anonymization = ctx.read(&anonymize::ANONYMIZATION)?;
        let flagged_upstream: Vec<String> = [
            (goals::GOALS.id().stage, goals.provenance()),
            (private_info::PRIVATE_INFO.id().stage, info.provenance()),
            (
                anonymize::ANONYMIZATION.id().stage,
                anonymization.provenance(),
            ),
        ]
        .into_iter()
        .filter(|(_, record)| !record.problems.is_empty())
        .map(|(stage, _)| stage.to_string())
        .collect();
        let (goals, info, anonymization) = (goals.answer, info.answer, anonymization.answer);
        let choices = ctx.read(&CHOICES)?;
        let template = template(&anonymization, &scenario, &goals, Some(&info));
        let choices = choices
            .questions
            .iter()
            .filter_map(|choice| asked(&template, choice))
            .collect();
        let similarity = Similarity::between(&template_text(&template), &source_segment(&scenario));
        let record = TemplateRecord {
            template,
            replacements: anonymization.replacements,
            choices,
            similarity,
            flagged_upstream,
        };
        let mut outputs = Outputs::default();
        outputs.put(ctx, &TEMPLATE, &record)?;
        Ok(outputs)
    }
}

/// The question `choice` places, with its options in their places; `None` for a question the
/// template does not have (the choices were made from other answers: they are rebuilt first).
fn asked(template: &Template, choice: &MultipleChoice) -> Option<TemplateChoice> {
    let role = template.roles.iter().find(|r| r.role == choice.role)?;
    let question = role.questions.get(choice.index)?;
    Some(TemplateChoice {
        role: choice.role,
        question: question.question.clone(),
        options: choice
            .options(&question.answer, &question.wrong_options)
            .into_iter()
            .map(str::to_string)
            .collect(),
        answer: LETTERS[choice.answer_position()],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_text_is_fully_similar_and_unrelated_text_barely() {
        let same = Similarity::between("Ada took the van.", "Ada took the van.");
        assert_eq!(
            (same.jaccard, same.gestalt, same.levenshtein),
            (1.0, 1.0, 1.0)
        );
        let other = Similarity::between("Ada took the van.", "Rain fell on Tuesday, quietly.");
        assert_eq!(other.jaccard, 0.0);
        assert!(other.gestalt < 0.4 && other.levenshtein < 0.4, "{other:?}");
    }
}

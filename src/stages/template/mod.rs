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
use crate::dag::store::Store;
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
    version: 2,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateChoice {
    pub role: RoleId,
    pub question: String,
    pub options: Vec<String>,
    /// `A` to `D`.
    pub answer: char,
}

/// How much a template still reads like its source: each 0 (nothing shared) to 1 (the same).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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

const LETTERS: [char; crate::stages::questions::OPTIONS] = ['A', 'B', 'C', 'D'];

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

    /// A change to the record's types re-runs the stage.
    fn code(&self) -> std::collections::BTreeMap<String, String> {
        crate::stages::llm_step::record_code::<Template>()
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

/// Every stored template's similarity to its source, and their means and standard deviations:
/// what `viss check leakage` prints.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LeakageReport {
    pub templates: Vec<(String, Similarity)>,
    pub mean: Option<Similarity>,
    pub sd: Option<Similarity>,
}

pub fn leakage_report(store: &Store) -> Result<LeakageReport, crate::dag::store::StoreError> {
    let templates: Vec<(String, Similarity)> = store
        .read_all(&TEMPLATE)?
        .into_iter()
        .map(|(item, record)| (item, record.similarity))
        .collect();
    Ok(LeakageReport::of(templates))
}

impl LeakageReport {
    /// The report of `templates` (name, similarity), with their means and deviations.
    pub fn of(templates: Vec<(String, Similarity)>) -> LeakageReport {
        let column = |pick: fn(&Similarity) -> f64| -> Vec<f64> {
            templates.iter().map(|(_, s)| pick(s)).collect()
        };
        let of = |stat: fn(&[f64]) -> f64| -> Option<Similarity> {
            (!templates.is_empty()).then(|| Similarity {
                jaccard: stat(&column(|s| s.jaccard)),
                gestalt: stat(&column(|s| s.gestalt)),
                levenshtein: stat(&column(|s| s.levenshtein)),
            })
        };
        LeakageReport {
            mean: of(mean),
            sd: of(sample_sd),
            templates,
        }
    }
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// The sample standard deviation; 0 for a single value.
fn sample_sd(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let m = mean(values);
    (values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (values.len() - 1) as f64).sqrt()
}

impl LeakageReport {
    /// Percentages, per template and then the mean with its standard deviation, as AgentSense
    /// reports them.
    pub fn render(&self) -> String {
        let percent = |s: &Similarity| {
            format!(
                "{:>8.2} {:>8.2} {:>12.2}",
                100.0 * s.jaccard,
                100.0 * s.gestalt,
                100.0 * s.levenshtein
            )
        };
        if self.templates.is_empty() {
            return "no scenario template is built yet (`viss build` makes them: goals, \
                    private_info, anonymize, questions, template)\n"
                .to_string();
        }
        let mut out = format!(
            "similarity of each template to its source script segment, percent\n{:<40} {:>8} \
             {:>8} {:>12}\n",
            "template", "jaccard", "gestalt", "levenshtein"
        );
        for (item, similarity) in &self.templates {
            out.push_str(&format!("{item:<40} {}\n", percent(similarity)));
        }
        if let (Some(mean), Some(sd)) = (&self.mean, &self.sd) {
            out.push_str(&format!("{:<40} {}\n", "mean", percent(mean)));
            out.push_str(&format!("{:<40} {}\n", "standard deviation", percent(sd)));
        }
        out.push_str(&format!("{} template(s)\n", self.templates.len()));
        out
    }
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

    #[test]
    fn the_report_gives_percentages_per_template_then_mean_and_deviation() {
        let one = Similarity {
            jaccard: 0.1,
            gestalt: 0.03,
            levenshtein: 0.12,
        };
        let report = LeakageReport {
            templates: vec![("s/e/sc1".into(), one)],
            mean: Some(one),
            sd: Some(Similarity {
                jaccard: 0.0,
                gestalt: 0.0,
                levenshtein: 0.0,
            }),
        };
        let text = report.render();
        assert!(text.contains("s/e/sc1"), "{text}");
        assert!(text.contains("   10.00     3.00        12.00"), "{text}");
        assert!(text.contains("1 template(s)"), "{text}");
        let empty = LeakageReport {
            templates: Vec::new(),
            mean: None,
            sd: None,
        };
        assert!(
            empty
                .render()
                .starts_with("no scenario template is built yet")
        );
    }

    #[test]
    fn the_mean_and_the_sample_standard_deviation() {
        assert_eq!(mean(&[0.1, 0.3]), 0.2);
        assert!((sample_sd(&[0.1, 0.3]) - 0.141_421).abs() < 1e-6);
        assert_eq!(sample_sd(&[0.5]), 0.0);
    }
}

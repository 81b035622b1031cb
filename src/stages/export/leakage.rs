//! AgentSense's leakage checks over the benchmark (`viss check leakage`, the demo's summary and
//! the dataset card): how much each template still reads like its source script segment, how
//! often a model names the source show and episode from a template (`script_prediction`), and
//! how often the private-information questions are answered right from the template alone
//! (`blind_test`, against chance: one in four).

use serde::Serialize;

use crate::dag::store::Store;
use crate::stages::blind_test::{BLIND, BlindAccuracy, BlindTest};
use crate::stages::export::agentsense::template_id;
use crate::stages::script_prediction::{PREDICTION, PredictionAccuracy, ScriptPrediction};
use crate::stages::template::{Similarity, TEMPLATE};

/// Every stored template's similarity to its source, and their means and standard deviations:
/// what `viss check leakage` prints.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LeakageReport {
    pub templates: Vec<(String, Similarity)>,
    pub mean: Option<Similarity>,
    pub sd: Option<Similarity>,
    /// `script_prediction`'s guesses; `None` when none is stored.
    pub script_prediction: Option<PredictionAccuracy>,
    /// `blind_test`'s answers; `None` when none is stored.
    pub blind_test: Option<BlindAccuracy>,
}

pub fn leakage_report(store: &Store) -> Result<LeakageReport, crate::dag::store::StoreError> {
    let templates: Vec<(String, Similarity)> = store
        .read_all(&TEMPLATE)?
        .into_iter()
        // The template's id in the dataset beside its scenario: how the owner maps one to
        // the other.
        .map(|(item, record)| (format!("{} {item}", template_id(&item)), record.similarity))
        .collect();
    let predictions = store.read_all(&PREDICTION)?;
    let blind = store.read_all(&BLIND)?;
    Ok(LeakageReport::of(templates).with_probes(
        predictions.iter().map(|(_, p)| p),
        blind.iter().map(|(_, b)| b),
    ))
}

impl LeakageReport {
    /// The report with the accuracies of `predictions` and `blind` (each `None` when empty).
    pub fn with_probes<'a>(
        mut self,
        predictions: impl IntoIterator<Item = &'a ScriptPrediction>,
        blind: impl IntoIterator<Item = &'a BlindTest>,
    ) -> LeakageReport {
        self.script_prediction =
            Some(PredictionAccuracy::of(predictions)).filter(|a| a.templates > 0);
        self.blind_test = Some(BlindAccuracy::of(blind)).filter(|a| a.questions > 0);
        self
    }

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
            script_prediction: None,
            blind_test: None,
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
        let share = |part: usize, whole: usize| 100.0 * part as f64 / whole as f64;
        match &self.script_prediction {
            Some(a) => out.push_str(&format!(
                "script prediction: the show named for {} of {} template(s) ({:.1}%), the \
                 episode for {} ({:.1}%)\n",
                a.shows_named,
                a.templates,
                share(a.shows_named, a.templates),
                a.episodes_named,
                share(a.episodes_named, a.templates),
            )),
            None => out.push_str("script prediction: not built (`viss build` runs it)\n"),
        }
        match &self.blind_test {
            Some(a) => out.push_str(&format!(
                "blind test: {} of {} question(s) answered right from the template alone \
                 ({:.1}%; chance 25%)\n",
                a.correct,
                a.questions,
                share(a.correct, a.questions),
            )),
            None => out.push_str(
                "blind test: no question asked (no template has private information, or \
                 `blind_test` is not built)\n",
            ),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            script_prediction: Some(PredictionAccuracy {
                templates: 4,
                shows_named: 1,
                episodes_named: 0,
            }),
            blind_test: Some(BlindAccuracy {
                questions: 8,
                correct: 3,
            }),
        };
        let text = report.render();
        assert!(text.contains("s/e/sc1"), "{text}");
        assert!(text.contains("   10.00     3.00        12.00"), "{text}");
        assert!(text.contains("1 template(s)"), "{text}");
        assert!(
            text.contains("the show named for 1 of 4 template(s) (25.0%), the episode for 0"),
            "{text}"
        );
        assert!(
            text.contains("3 of 8 question(s) answered right from the template alone (37.5%"),
            "{text}"
        );
        let empty = LeakageReport::default();
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

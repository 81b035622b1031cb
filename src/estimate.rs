//! What a build would ask language models, and what it would cost, before it runs: `viss build
//! --dry-run` adds it to the plan. Per stage that asks a model: the items it would run, the
//! requests they would send, their tokens and their cost at the prices in `viss.toml`, each as
//! a range.
//!
//! The rates come from the stage's stored runs in this store when it has some (requests per item
//! from the 10th to the 90th percentile of its items, tokens per request their mean), and
//! otherwise from a prior stated in [`prior`]. Answers the request cache already holds are free,
//! and which ones a run finds there is known only once its prompts are rendered: the dry run
//! runs the items of these stages that are ready to run from the request cache alone, asking no
//! model and recording nothing ([`viss_engine::scheduler::BuildOptions::probe`]). The answers it
//! finds are counted free, exactly; an item it runs to its end costs nothing (and what follows
//! it is planned on what it made); the rest of an item that stops at its first uncached request
//! is priced at the stage's rates. Items not made yet (the scenarios of an episode not parsed,
//! the runs of a scenario not planned) are counted at the mean of the stored ones; with none
//! stored, they are not, and the estimate says so.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::Serialize;

use crate::dag::Level;
use crate::dag::scheduler::BuildReport;
use crate::dag::store::StoreError;
use crate::llm::{LlmConfig, ModelRef, Price};
use crate::stages::instantiate::InstantiateParams;
use crate::stages::llm_step::ModelRole;
use crate::stages::plan_runs::PlanRunsParams;
use crate::stages::plan_sense_runs::PlanSenseRunsParams;
use crate::workspace::Workspace;

/// A low, expected and high value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Span {
    pub low: f64,
    pub expected: f64,
    pub high: f64,
}

impl Span {
    fn times(self, factor: f64) -> Span {
        Span {
            low: self.low * factor,
            expected: self.expected * factor,
            high: self.high * factor,
        }
    }

    fn plus(self, other: Span) -> Span {
        Span {
            low: self.low + other.low,
            expected: self.expected + other.expected,
            high: self.high + other.high,
        }
    }

    /// Less `known` everywhere, never below nothing.
    fn less(self, known: f64) -> Span {
        Span {
            low: (self.low - known).max(0.0),
            expected: (self.expected - known).max(0.0),
            high: (self.high - known).max(0.0),
        }
    }
}

/// Where a stage's rates come from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// The stage's stored runs that asked a model, this many.
    Measured { items: usize },
    /// No stored run asked a model: the prior of [`prior`].
    Prior,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageEstimate {
    pub stage: String,
    /// Items the build would run, including those waiting on items that run first, and those
    /// not made yet (the scenarios of an episode still to parse, the runs of a scenario still to
    /// plan) at the mean number the stored ones made.
    pub items: usize,
    /// Some items are not made yet and nothing stored tells how many: more would run than
    /// counted here.
    pub incomplete: bool,
    /// Of `items`, those the request cache answers from start to end: they run and pay nothing.
    pub items_from_cache: usize,
    /// Requests the request cache answers, found by running the items ready to run from it:
    /// free, and not in `requests`.
    pub answers_from_cache: u64,
    pub basis: Basis,
    /// The models it would ask, as `viss.toml` names them.
    pub models: Vec<String>,
    /// The requests it would send (and pay for).
    pub requests: Span,
    pub prompt_tokens: Span,
    pub completion_tokens: Span,
    /// `None` when a model it asks has no price.
    pub cost_usd: Option<Span>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub stages: Vec<StageEstimate>,
    pub requests: Span,
    /// Requests the request cache answers (free).
    pub answers_from_cache: u64,
    /// Of the stages with a price for every model they ask.
    pub cost_usd: Span,
    /// Endpoint models asked without a price (their cost is not in the total).
    pub unpriced: BTreeSet<String>,
}

/// Per item of `stage`: requests (low, expected, high) and tokens per request (prompt,
/// completion), for a stage with no stored run. From the demo's measured requests on the
/// embedded model (600 to 900 prompt and 150 to 350 answer tokens a question, about 1.7 answers
/// per question with re-asks) and the stages' own parameters.
fn prior(stage: &str, params: &serde_json::Value, config: &LlmConfig) -> (Span, f64, f64) {
    let rounds = params["rounds"].as_f64().unwrap_or(15.0);
    let judges = config.roles.judges.len().max(1) as f64;
    match stage {
        // A turn per round, a re-ask now and then; each turn sees the dialogue so far.
        "simulate" | "simulate_sense" => (
            Span {
                low: rounds,
                expected: rounds * 1.2,
                high: rounds * 2.0,
            },
            1_200.0,
            120.0,
        ),
        // Each judge answers each of the stage's questionnaires about the whole transcript.
        "evaluate" | "evaluate_sense" => {
            let questionnaires = if stage == "evaluate" { 3.0 } else { 2.0 };
            let asks = judges * questionnaires;
            (
                Span {
                    low: asks,
                    expected: asks * 1.3,
                    high: asks * 2.0,
                },
                2_500.0,
                400.0,
            )
        }
        // A cast per instance, each with up to five re-asks.
        "instantiate" => {
            let instances = params["instances"].as_f64().unwrap_or(5.0);
            (
                Span {
                    low: instances,
                    expected: instances * 1.7,
                    high: instances * 6.0,
                },
                900.0,
                350.0,
            )
        }
        // One question, and up to five re-asks.
        _ => (
            Span {
                low: 1.0,
                expected: 1.7,
                high: 6.0,
            },
            800.0,
            250.0,
        ),
    }
}

/// The models `stage` asks, from `viss.toml`'s roles.
fn models_of(stage: &str, params: &serde_json::Value, config: &LlmConfig) -> Vec<ModelRef> {
    let roles = &config.roles;
    match stage {
        "simulate" | "simulate_sense" => roles.agents.clone(),
        "evaluate" | "evaluate_sense" => roles.judges.clone(),
        _ => {
            let role =
                serde_json::from_value(params["role"].clone()).unwrap_or(ModelRole::Annotator);
            vec![role.of(roles).clone()]
        }
    }
}

/// `model`'s price: free for the embedded model and a person, `None` for an endpoint model
/// without one.
fn price_of(model: &ModelRef, config: &LlmConfig) -> Option<Price> {
    match model {
        ModelRef::Endpoint { endpoint, model } => config
            .endpoints
            .get(endpoint)
            .and_then(|e| e.price_of(model)),
        ModelRef::Local | ModelRef::Human => Some(Price {
            input_per_mtok: 0.0,
            output_per_mtok: 0.0,
        }),
    }
}

/// The `q`-quantile of sorted `values` (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The stages that ask a model (they render prompts): those the estimate covers, and whose
/// items a dry run runs from the request cache alone to count what it answers.
pub fn stages_asking_models(workspace: &Workspace) -> Vec<String> {
    workspace
        .pipeline
        .stages
        .iter()
        .filter(|s| !s.prompts.is_empty())
        .map(|s| s.name.clone())
        .collect()
}

/// The estimate for the build `report` plans (a `--dry-run`'s report, with its probes).
pub fn estimate(workspace: &Workspace, report: &BuildReport) -> Result<Estimate, StoreError> {
    let config = &workspace.project().config.llm;
    let index = workspace.store().index();
    let pending = |stage: &str| {
        let counts = report.counts(stage);
        counts.would_run + counts.waiting
    };
    // Items not made yet: the scenarios of episodes still to parse, and the runs of scenarios
    // still to plan, at the mean of the stored ones (`None`: nothing stored to go by).
    let made_per_item = |maker: &str| -> Result<Option<f64>, StoreError> {
        let made: Vec<usize> = index
            .scan_stage(maker)?
            .into_iter()
            .filter(|(_, record)| !record.failed())
            .map(|(_, record)| record.children.len())
            .collect();
        Ok((!made.is_empty()).then(|| made.iter().sum::<usize>() as f64 / made.len() as f64))
    };
    let unparsed = pending("parse_script") as f64;
    let new_scenarios = if unparsed == 0.0 {
        Some(0.0)
    } else {
        made_per_item("parse_script")?.map(|per_episode| unparsed * per_episode)
    };
    let params = |stage: &str| {
        workspace
            .pipeline
            .stages
            .iter()
            .find(|s| s.name == stage)
            .map(|s| s.params.clone())
            .unwrap_or_default()
    };
    // What the planners' parameters multiply out to, when no stored plan tells.
    let planned = |maker: &str| -> Option<f64> {
        let roles = &config.roles;
        let runs = if maker == "plan_runs" {
            let plan: PlanRunsParams = serde_json::from_value(params(maker)).ok()?;
            plan.runs_per_scenario(roles)
        } else {
            let plan: PlanSenseRunsParams = serde_json::from_value(params(maker)).ok()?;
            let cast: InstantiateParams = serde_json::from_value(params("instantiate")).ok()?;
            plan.runs_per_template(cast.instances, roles.agents.len())
        };
        Some(runs as f64)
    };
    let new_runs = |maker: &str| -> Result<Option<f64>, StoreError> {
        let scenarios = new_scenarios.map(|new| new + pending(maker) as f64);
        Ok(match scenarios {
            Some(0.0) => Some(0.0),
            Some(scenarios) => made_per_item(maker)?
                .or_else(|| planned(maker))
                .map(|per_scenario| scenarios * per_scenario),
            None => None,
        })
    };
    let runs_not_planned = new_runs("plan_runs")?;
    let sense_runs_not_planned = new_runs("plan_sense_runs")?;
    let mut stages = Vec::new();
    let mut unpriced = BTreeSet::new();
    let asking = stages_asking_models(workspace);
    for spec in workspace
        .pipeline
        .stages
        .iter()
        .filter(|s| asking.contains(&s.name))
    {
        let not_made_yet = match spec.level {
            Level::Scenario => new_scenarios,
            Level::Run if spec.name.ends_with("_sense") => sense_runs_not_planned,
            Level::Run => runs_not_planned,
            Level::Episode | Level::Benchmark => Some(0.0),
        };
        let incomplete = not_made_yet.is_none();
        let items = pending(&spec.name) + not_made_yet.unwrap_or(0.0).round() as usize;
        if items == 0 && !incomplete {
            continue;
        }
        let probes: Vec<&viss_engine::scheduler::Probe> = report
            .probes
            .iter()
            .filter(|probe| probe.stage == spec.name)
            .collect();
        let from_cache = |probe: &&viss_engine::scheduler::Probe| {
            probe
                .stats
                .get(crate::dag::ANSWERS_FROM_CACHE)
                .copied()
                .unwrap_or(0)
        };
        let items_from_cache = probes.iter().filter(|probe| probe.finished).count();
        let answers_from_cache: u64 = probes.iter().map(from_cache).sum();
        // The answers of the items that stopped at an uncached request are part of what the
        // rates count for them: free, so taken off.
        let stopped_from_cache: u64 = probes
            .iter()
            .filter(|probe| !probe.finished)
            .map(from_cache)
            .sum();
        let mut asks: Vec<f64> = Vec::new();
        let (mut calls, mut prompt, mut completion) = (0u64, 0u64, 0u64);
        for (_, record) in index.scan_stage(&spec.name)? {
            let cached = record
                .stats
                .get(crate::dag::ANSWERS_FROM_CACHE)
                .copied()
                .unwrap_or(0);
            let asked = record.usage.llm_calls + cached;
            if asked > 0 {
                asks.push(asked as f64);
            }
            calls += record.usage.llm_calls;
            prompt += record.usage.prompt_tokens;
            completion += record.usage.completion_tokens;
        }
        asks.sort_by(f64::total_cmp);
        let (per_item, prior_prompt, prior_completion) = prior(&spec.name, &spec.params, config);
        let (basis, per_item) = if asks.is_empty() {
            (Basis::Prior, per_item)
        } else {
            let mean = asks.iter().sum::<f64>() / asks.len() as f64;
            let measured = Span {
                low: quantile(&asks, 0.1),
                expected: mean,
                high: quantile(&asks, 0.9),
            };
            (Basis::Measured { items: asks.len() }, measured)
        };
        let (prompt_per_call, completion_per_call) = if calls > 0 {
            (
                prompt as f64 / calls as f64,
                completion as f64 / calls as f64,
            )
        } else {
            (prior_prompt, prior_completion)
        };
        let requests = per_item
            .times(items.saturating_sub(items_from_cache) as f64)
            .less(stopped_from_cache as f64);
        let models = models_of(&spec.name, &spec.params, config);
        // The requests are spread evenly over the models it asks.
        let prices: Vec<Option<Price>> = models.iter().map(|m| price_of(m, config)).collect();
        for (model, price) in models.iter().zip(&prices) {
            if price.is_none() {
                unpriced.insert(model.to_string());
            }
        }
        let cost_usd = prices
            .iter()
            .copied()
            .collect::<Option<Vec<Price>>>()
            .map(|prices| {
                let share = 1.0 / prices.len().max(1) as f64;
                let per_request: f64 = prices
                    .iter()
                    .map(|p| {
                        share
                            * (prompt_per_call * p.input_per_mtok
                                + completion_per_call * p.output_per_mtok)
                            / 1e6
                    })
                    .sum();
                requests.times(per_request)
            });
        stages.push(StageEstimate {
            stage: spec.name.clone(),
            items,
            incomplete,
            items_from_cache,
            answers_from_cache,
            basis,
            models: models.iter().map(ToString::to_string).collect(),
            requests,
            prompt_tokens: requests.times(prompt_per_call),
            completion_tokens: requests.times(completion_per_call),
            cost_usd,
        });
    }
    let requests = stages
        .iter()
        .fold(Span::default(), |total, s| total.plus(s.requests));
    let cost_usd = stages
        .iter()
        .filter_map(|s| s.cost_usd)
        .fold(Span::default(), Span::plus);
    Ok(Estimate {
        answers_from_cache: stages.iter().map(|s| s.answers_from_cache).sum(),
        stages,
        requests,
        cost_usd,
        unpriced,
    })
}

impl Estimate {
    /// The estimate as `viss build --dry-run` prints it after the plan.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if self.stages.is_empty() {
            return out;
        }
        let _ = writeln!(
            out,
            "\nlanguage-model requests it would send and pay for (low / expected / high), and \
             those the request cache answers (free):"
        );
        let _ = writeln!(
            out,
            "{:20} {:>6} {:>22} {:>10} {:>26}  {:8} models",
            "stage", "items", "requests", "cached", "cost $", "rates"
        );
        for s in &self.stages {
            let cost = s.cost_usd.map_or("no price".to_string(), dollars);
            let basis = match s.basis {
                Basis::Measured { .. } => "measured",
                Basis::Prior => "prior",
            };
            let items = format!("{}{}", s.items, if s.incomplete { "+" } else { "" });
            let _ = writeln!(
                out,
                "{:20} {:>6} {:>22} {:>10} {:>26}  {:8} {}",
                s.stage,
                items,
                counts(s.requests),
                s.answers_from_cache,
                cost,
                basis,
                s.models.join(", ")
            );
        }
        let _ = writeln!(
            out,
            "{:20} {:>6} {:>22} {:>10} {:>26}",
            "total",
            "",
            counts(self.requests),
            self.answers_from_cache,
            dollars(self.cost_usd)
        );
        if self.stages.iter().any(|s| s.incomplete) {
            let _ = writeln!(
                out,
                "+: more items than counted: the scenarios of an episode not parsed yet, or the \
                 runs of a scenario not planned yet, with none stored to count by; `viss build \
                 --until parse_script` asks no model and counts the scenarios"
            );
        }
        if !self.unpriced.is_empty() {
            let names: Vec<&str> = self.unpriced.iter().map(String::as_str).collect();
            let _ = writeln!(
                out,
                "no price in viss.toml for {}: its cost is not in the total \
                 ([llm.endpoints.NAME.prices.\"MODEL\"])",
                names.join(", ")
            );
        }
        out
    }
}

fn counts(span: Span) -> String {
    format!("{:.0} / {:.0} / {:.0}", span.low, span.expected, span.high)
}

fn dollars(span: Span) -> String {
    format!("{:.4} / {:.4} / {:.4}", span.low, span.expected, span.high)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let sorted = [1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 4.0, 6.0, 6.0];
        assert_eq!(quantile(&sorted, 0.1), 1.0);
        assert_eq!(quantile(&sorted, 0.9), 6.0);
        assert_eq!(quantile(&[5.0], 0.1), 5.0);
    }

    #[test]
    fn a_judging_stage_asks_every_judge_and_a_step_its_role() {
        let mut config = LlmConfig::default();
        config.roles.judges = vec![ModelRef::Local, ModelRef::Local];
        config.roles.writer = ModelRef::Endpoint {
            endpoint: "e".into(),
            model: "m".into(),
        };
        let params = serde_json::json!({ "role": "writer" });
        assert_eq!(
            models_of("goals", &params, &config),
            vec![config.roles.writer.clone()]
        );
        assert_eq!(models_of("evaluate", &params, &config).len(), 2);
        let (asks, ..) = prior("evaluate", &params, &config);
        assert_eq!(asks.low, 6.0, "two judges, three questionnaires");
        assert_eq!(price_of(&config.roles.writer, &config), None);
        assert_eq!(
            price_of(&ModelRef::Local, &config).unwrap().input_per_mtok,
            0.0
        );
    }
}

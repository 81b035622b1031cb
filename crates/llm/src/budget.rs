//! A build's spending caps: `[llm] max_cost` over every request the build sends, and
//! `[llm.max_cost_per_stage]` over one stage's. A request is sent only when what has been
//! spent, what is in flight and the most this request can cost all fit under every cap that
//! applies; otherwise it is not sent and the caller gets [`LlmError::BudgetReached`]. What was
//! paid for is cached as always, so a later build with a larger cap carries on without paying
//! twice.
//!
//! The most a request can cost is its input priced at one token per three characters of text
//! (English runs about four) plus [`IMAGE_TOKENS`] per picture, and its whole `max_tokens` of
//! output ([`UNBOUNDED_OUTPUT_TOKENS`] when the request sets none). Only a prompt whose text
//! packs more tokens than that, or a picture billed above it, can take spending past a cap.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::backend::{ChatBackend, Price, RawAnswer, Usage};
use crate::error::LlmError;
use crate::request::{ChatRequest, EndpointIdentity, Message, Part};

/// Input tokens reserved for one picture: above what the common vision APIs bill for an image
/// fitted to 1,024 pixels.
pub const IMAGE_TOKENS: u64 = 1_600;
/// Output tokens reserved for a request that sets no `max_tokens`.
pub const UNBOUNDED_OUTPUT_TOKENS: u64 = 4_096;

/// The caps of one build and what it has spent against them.
#[derive(Debug, Default)]
pub struct Budget {
    max_cost: Option<f64>,
    max_cost_per_stage: BTreeMap<String, f64>,
    ledger: Mutex<Ledger>,
}

#[derive(Debug, Default)]
struct Ledger {
    spent: f64,
    in_flight: f64,
    stages: BTreeMap<String, StageLedger>,
}

#[derive(Debug, Default)]
struct StageLedger {
    spent: f64,
    in_flight: f64,
    /// Requests not sent because a cap would have been passed.
    refused: u64,
}

/// What a build spent against its caps, for its report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Spending {
    /// `[llm] max_cost`, when set.
    pub max_cost: Option<f64>,
    pub spent_usd: f64,
    /// Per stage that sent or refused a request: what it spent, its cap, and how many requests
    /// it did not send for a cap.
    pub stages: BTreeMap<String, StageSpending>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StageSpending {
    pub spent_usd: f64,
    pub max_cost: Option<f64>,
    pub refused_requests: u64,
}

impl Spending {
    /// Requests not sent because a cap would have been passed.
    pub fn refused_requests(&self) -> u64 {
        self.stages.values().map(|s| s.refused_requests).sum()
    }

    /// Whether any cap was set.
    pub fn capped(&self) -> bool {
        self.max_cost.is_some() || self.stages.values().any(|s| s.max_cost.is_some())
    }

    /// What a build prints about its caps: nothing when none was set.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        if !self.capped() {
            return String::new();
        }
        let mut out = match self.max_cost {
            Some(cap) => format!(
                "budget: spent ${:.4} of [llm] max_cost ${cap:.4}\n",
                self.spent_usd
            ),
            None => format!("budget: spent ${:.4}\n", self.spent_usd),
        };
        for (stage, spending) in &self.stages {
            let cap = spending
                .max_cost
                .map_or(String::new(), |cap| format!(" of its cap ${cap:.4}"));
            let refused = match spending.refused_requests {
                0 => String::new(),
                n => format!("; {n} request(s) not sent"),
            };
            let _ = writeln!(out, "  {stage}: ${:.4}{cap}{refused}", spending.spent_usd);
        }
        if self.refused_requests() > 0 {
            out.push_str(
                "  what a cap stopped is left to build: raise the cap in viss.toml and run `viss \
                 build` again (the answers paid for are kept and not paid again)\n",
            );
        }
        out
    }
}

impl Budget {
    pub fn new(max_cost: Option<f64>, max_cost_per_stage: BTreeMap<String, f64>) -> Self {
        Self {
            max_cost,
            max_cost_per_stage,
            ledger: Mutex::default(),
        }
    }

    /// Whether any cap applies to `stage`'s requests.
    pub fn caps(&self, stage: &str) -> bool {
        self.max_cost.is_some() || self.max_cost_per_stage.contains_key(stage)
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Holds `most` dollars for one of `stage`'s requests, or refuses it.
    fn reserve(&self, stage: &str, most: f64) -> Result<(), LlmError> {
        let mut ledger = self.ledger();
        let (spent, in_flight) = (ledger.spent, ledger.in_flight);
        let entry = ledger.stages.entry(stage.to_string()).or_default();
        let over = |scope: String, cap: f64, committed: f64| LlmError::BudgetReached {
            scope,
            cap,
            committed,
            most,
        };
        let refusal = if let Some(cap) = self.max_cost
            && spent + in_flight + most > cap
        {
            Some(over("[llm] max_cost".to_string(), cap, spent + in_flight))
        } else if let Some(&cap) = self.max_cost_per_stage.get(stage)
            && entry.spent + entry.in_flight + most > cap
        {
            Some(over(
                format!("[llm.max_cost_per_stage] {stage}"),
                cap,
                entry.spent + entry.in_flight,
            ))
        } else {
            None
        };
        if let Some(refusal) = refusal {
            entry.refused += 1;
            return Err(refusal);
        }
        entry.in_flight += most;
        ledger.in_flight += most;
        Ok(())
    }

    /// Replaces a reservation of `most` by what the request cost.
    fn settle(&self, stage: &str, most: f64, cost: f64) {
        let mut ledger = self.ledger();
        ledger.in_flight -= most;
        ledger.spent += cost;
        let entry = ledger.stages.entry(stage.to_string()).or_default();
        entry.in_flight -= most;
        entry.spent += cost;
    }

    /// What was spent so far, by stage.
    pub fn spending(&self) -> Spending {
        let ledger = self.ledger();
        let mut stages: BTreeMap<String, StageSpending> = ledger
            .stages
            .iter()
            .map(|(stage, entry)| {
                let spending = StageSpending {
                    spent_usd: entry.spent,
                    max_cost: self.max_cost_per_stage.get(stage).copied(),
                    refused_requests: entry.refused,
                };
                (stage.clone(), spending)
            })
            .collect();
        for (stage, cap) in &self.max_cost_per_stage {
            stages.entry(stage.clone()).or_default().max_cost = Some(*cap);
        }
        Spending {
            max_cost: self.max_cost,
            spent_usd: ledger.spent,
            stages,
        }
    }
}

/// The most one call of `conversation` can cost at `price` (see the module's note).
pub fn most_cost(price: Price, request: &ChatRequest, conversation: &[Message]) -> f64 {
    let input: u64 = conversation
        .iter()
        .flat_map(|message| &message.content)
        .map(|part| match part {
            Part::Text(text) => (text.chars().count() as u64).div_ceil(3),
            Part::ImagePng(_) => IMAGE_TOKENS,
        })
        .sum();
    let output = request
        .max_tokens
        .map_or(UNBOUNDED_OUTPUT_TOKENS, u64::from);
    (input as f64 * price.input_per_mtok + output as f64 * price.output_per_mtok) / 1e6
}

/// A backend whose calls for one stage are held to the build's caps.
pub struct MeteredBackend {
    pub inner: Arc<dyn ChatBackend>,
    pub budget: Arc<Budget>,
    pub stage: String,
    pub price: Price,
}

#[async_trait::async_trait]
impl ChatBackend for MeteredBackend {
    fn identity(&self) -> EndpointIdentity {
        self.inner.identity()
    }

    fn reproduces(&self, request: &ChatRequest) -> bool {
        self.inner.reproduces(request)
    }

    async fn answer(
        &self,
        request: &ChatRequest,
        conversation: &[Message],
        usage: &mut Usage,
    ) -> Result<RawAnswer, LlmError> {
        let most = most_cost(self.price, request, conversation);
        self.budget.reserve(&self.stage, most)?;
        let before = usage.cost_usd.unwrap_or(0.0);
        let result = self.inner.answer(request, conversation, usage).await;
        let cost = usage.cost_usd.unwrap_or(0.0) - before;
        self.budget.settle(&self.stage, most, cost);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRICE: Price = Price {
        input_per_mtok: 1.0,
        output_per_mtok: 2.0,
    };

    #[test]
    fn the_most_a_call_costs_counts_three_characters_a_token_and_all_its_output() {
        let mut request = ChatRequest::new(vec![Message::user("x".repeat(3_000))]);
        request.max_tokens = Some(500);
        let most = most_cost(PRICE, &request, &request.messages);
        assert!((most - (1_000.0 + 1_000.0) / 1e6).abs() < 1e-12, "{most}");
        request.max_tokens = None;
        let most = most_cost(PRICE, &request, &request.messages);
        let expected = (1_000.0 + 2.0 * UNBOUNDED_OUTPUT_TOKENS as f64) / 1e6;
        assert!((most - expected).abs() < 1e-12, "{most}");
    }

    #[test]
    fn a_request_that_could_pass_a_cap_is_refused_and_counted_and_settling_frees_room() {
        let budget = Budget::new(Some(1.0), [("tasks".to_string(), 0.5)].into());
        budget.reserve("annotate", 0.6).unwrap();
        // 0.6 in flight: 0.5 more could pass the build's cap.
        let refused = budget.reserve("annotate", 0.5).unwrap_err();
        assert!(refused.to_string().contains("[llm] max_cost"), "{refused}");
        budget.settle("annotate", 0.6, 0.2);
        budget.reserve("tasks", 0.4).unwrap();
        let refused = budget.reserve("tasks", 0.2).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("[llm.max_cost_per_stage] tasks"),
            "{refused}"
        );
        budget.settle("tasks", 0.4, 0.3);
        let spending = budget.spending();
        assert!((spending.spent_usd - 0.5).abs() < 1e-12);
        assert_eq!(spending.stages["annotate"].refused_requests, 1);
        assert_eq!(spending.stages["tasks"].refused_requests, 1);
        assert_eq!(spending.stages["tasks"].max_cost, Some(0.5));
        assert_eq!(spending.refused_requests(), 2);
    }
}

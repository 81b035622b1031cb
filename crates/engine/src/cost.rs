//! What the model answers behind a result cost when they were first asked: unlike a run's
//! [`Usage`](crate::store::Usage), the same whether the run asked them or found them in a
//! cache, so a stage may keep it in what it writes (a dataset card can then say what its
//! records cost, and a rebuild from the cache writes the same bytes).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Per request, by its cache key: the same answer behind two results is one cost, however
/// many records rest on it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct AnswersCost(pub BTreeMap<String, CallCost>);

/// What one request's answers cost (its re-asks included) when it was first asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CallCost {
    /// The model as the run's usage names it (`(batch)` for answers of the batch API).
    pub model: String,
    #[serde(flatten)]
    pub cost: Cost,
}

/// Answers and what they cost. Money is counted in whole millionths of a dollar, each
/// request's rounded, so that a sum does not depend on the order it was added in.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Cost {
    /// Every answer given, usable or not.
    pub answers: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// `None` when the model has no price set (a local model, or an endpoint without prices).
    pub micro_usd: Option<u64>,
}

impl Cost {
    pub fn add(&mut self, other: &Cost) {
        self.answers += other.answers;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.micro_usd = match (self.micro_usd, other.micro_usd) {
            (None, None) => None,
            (mine, theirs) => Some(mine.unwrap_or(0) + theirs.unwrap_or(0)),
        };
    }

    /// The cost in dollars, when priced.
    pub fn usd(&self) -> Option<f64> {
        self.micro_usd.map(|micro| micro as f64 / 1e6)
    }
}

impl AnswersCost {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds the request cached under `key`; one already there is the same answer, kept once.
    pub fn add_call(&mut self, key: String, call: CallCost) {
        self.0.entry(key).or_insert(call);
    }

    /// Adds `other`'s requests, each once.
    pub fn add(&mut self, other: &AnswersCost) {
        for (key, call) in &other.0 {
            self.add_call(key.clone(), call.clone());
        }
    }

    /// What each model's answers cost.
    pub fn by_model(&self) -> BTreeMap<&str, Cost> {
        let mut models: BTreeMap<&str, Cost> = BTreeMap::new();
        for call in self.0.values() {
            models.entry(&call.model).or_default().add(&call.cost);
        }
        models
    }

    /// Every request together.
    pub fn total(&self) -> Cost {
        let mut total = Cost::default();
        for call in self.0.values() {
            total.add(&call.cost);
        }
        total
    }
}

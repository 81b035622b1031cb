//! The engine (`crates/engine`, [`viss_engine`]) as the app uses it: its modules under the paths
//! the app has always used, with the app's environment [`Env`] filled in, so a stage names
//! `JobCtx`, `StageKind` and `Pipeline` without a type argument and implements `Stage<Env>`.
//!
//! The engine knows no project and no model: [`Env`] is what the app gives every job, and
//! [`AppCtx`] reads it from a job's context (`ctx.project()`, `ctx.llm()`, `ctx.ask_llm(..)`).

use std::future::Future;

use crate::hash::ContentHash;
use crate::llm::{ChatRequest, Completion, LlmError, LlmPool, ModelRef, ResponseCache};
use crate::project::Project;

pub use viss_engine::{
    BENCHMARK_ITEM, Input, JobError, Level, OutputOverlay, Outputs, SourceItem, SourceProblem,
    Stage, StageFailure, output_visible_to,
};
pub use viss_engine::{
    cost, key, lock, maintenance, port, problem, scheduler, shard, status, store, store_dir,
    toml_error,
};

use store::{ModelUsage, Store};

/// What every job of a build sees besides the store: the open project and its LLM backends.
pub struct Env {
    pub project: Project,
    pub llm: LlmPool,
}

/// The world as one running job sees it.
pub type JobCtx = viss_engine::JobCtx<Env>;

/// Shared by every job of a build.
pub type BuildResources = viss_engine::BuildResources<Env>;

/// Stage files and the DAG, for the app's [`Env`].
pub mod spec {
    use serde::Serialize;
    use serde::de::DeserializeOwned;

    use super::{Env, Stage};
    use crate::range::Validate;

    pub use viss_engine::spec::*;

    /// A stage implementation compiled into viss, with its default configuration.
    pub type StageKind = viss_engine::spec::StageKind<Env>;
    pub type LoadedStage = viss_engine::spec::LoadedStage<Env>;
    /// One configured stage of the DAG.
    pub type StageSpec = viss_engine::spec::StageSpec<Env>;
    /// The DAG, stages in an order where every stage follows its needs.
    pub type Pipeline = viss_engine::spec::Pipeline<Env>;

    /// [`viss_engine::spec::load_stage`] for a stage of the app.
    pub fn load_stage<P, S>(text: &str) -> Result<LoadedStage, toml::de::Error>
    where
        P: DeserializeOwned + Serialize + Default + Validate,
        S: Stage<Env> + From<P>,
    {
        viss_engine::spec::load_stage::<Env, P, S>(text)
    }
}

/// What a stage reads of the app's [`Env`] through its job's context.
pub trait AppCtx {
    /// The open project.
    fn project(&self) -> &Project;

    /// The project's LLM settings and backends.
    fn llm(&self) -> &LlmPool;

    /// Asks `model` for a JSON value `validate` accepts (see [`crate::llm::complete_json`]):
    /// from the store's response cache when this exact request was answered before. Every
    /// answer the model gave is recorded in this run's usage under the model's name, with its
    /// tokens and cost, whether it was usable or not and whether the call succeeded or not.
    /// `request`'s answer from `model` that `validate` accepts, through the store's memos; with
    /// `keep`, a call whose rejected answers the caller would keep one of is remembered and
    /// replayed (see [`crate::llm::complete_json_keeping`]).
    fn ask_llm(
        &self,
        model: &ModelRef,
        request: &ChatRequest,
        validate: &(dyn Fn(&serde_json::Value) -> Result<(), crate::llm::Rejection> + Sync),
        keep: Option<crate::llm::Keep<'_>>,
    ) -> impl Future<Output = Result<Completion, LlmError>> + Send;
}

impl AppCtx for JobCtx {
    fn project(&self) -> &Project {
        &self.env().project
    }

    fn llm(&self) -> &LlmPool {
        &self.env().llm
    }

    async fn ask_llm(
        &self,
        model: &ModelRef,
        request: &ChatRequest,
        validate: &(dyn Fn(&serde_json::Value) -> Result<(), crate::llm::Rejection> + Sync),
        keep: Option<crate::llm::Keep<'_>>,
    ) -> Result<Completion, LlmError> {
        let backend = match self.llm().asks_no_model() {
            true => self
                .llm()
                .cache_only(model, |path| local_model_fingerprint(self.store(), path))?,
            false => {
                let backend = self.llm().backend(model).await?;
                self.llm().metered(backend, model, &self.stage)?
            }
        };
        let key = crate::llm::request_key(request, &backend.identity());
        let _turn = self.llm().one_at_a_time(key).await;
        let cache = StoreResponseCache(self.store());
        let mut spent = crate::llm::Usage::default();
        let result = crate::llm::complete_json_keeping(
            &*backend, request, &cache, validate, keep, &mut spent,
        )
        .await;
        // Batched answers are billed at another price: counted apart.
        let label = match self.llm().batches(model) {
            true => format!("{model} (batch)"),
            false => model.to_string(),
        };
        let first_usage = match &result {
            Ok(completion) => Some(&completion.first_usage),
            Err(LlmError::InvalidOutput { usage, .. }) => Some(usage.as_ref()),
            Err(_) => None,
        };
        if let Some(usage) = first_usage.filter(|usage| usage.calls > 0) {
            let call = viss_engine::cost::CallCost {
                model: label.clone(),
                cost: answer_cost(usage),
            };
            self.add_answers_cost(key.to_hex(), call);
        }
        if spent.calls > 0 {
            self.add_model_usage(
                &label,
                &ModelUsage {
                    calls: u64::from(spent.calls),
                    rejected_calls: u64::from(spent.rejected),
                    prompt_tokens: spent.prompt_tokens,
                    completion_tokens: spent.completion_tokens,
                    cost_usd: spent.cost_usd.unwrap_or(0.0),
                },
            );
        }
        if let Ok(completion) = &result
            && completion.from_cache
        {
            self.count(ANSWERS_FROM_CACHE, 1);
            let saved = answer_cost(&completion.first_usage).micro_usd;
            self.count(COST_SAVED_MICRO_USD, saved.unwrap_or(0));
        }
        result
    }
}

/// One call's usage as a record keeps what its answers cost.
fn answer_cost(usage: &crate::llm::Usage) -> viss_engine::cost::Cost {
    viss_engine::cost::Cost {
        answers: u64::from(usage.calls),
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        micro_usd: usage.cost_usd.map(|usd| (usd * 1e6).round() as u64),
    }
}

/// The hash of the embedded model's file that its identity names, through the store's
/// stat-cached fingerprints (a 1 GB file is read once, not on every build).
pub fn local_model_fingerprint(store: &Store, path: &std::path::Path) -> Result<String, LlmError> {
    store
        .fingerprint_file(path, false)
        .map(|fingerprint| fingerprint.blake3.to_hex())
        .map_err(|error| LlmError::Config(error.to_string()))
}

/// A run's count of answers taken from the request cache instead of asked.
pub const ANSWERS_FROM_CACHE: &str = "llm_answers_from_cache";
/// A run's count of millionths of a dollar those answers cost when they were first asked: what
/// the cache saved.
pub const COST_SAVED_MICRO_USD: &str = "llm_cost_saved_micro_usd";

/// The store's memos as the LLM response cache: answers survive across builds, so a warm
/// re-run makes no calls.
struct StoreResponseCache<'a>(&'a Store);

impl ResponseCache for StoreResponseCache<'_> {
    fn get(&self, key: ContentHash) -> Option<Vec<u8>> {
        match self.0.memo_get(&key) {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!("cannot read the LLM response cache: {error}");
                None
            }
        }
    }

    fn put(&self, key: ContentHash, bytes: &[u8]) {
        let bytes = crate::redact::redact_bytes(bytes.to_vec());
        if let Err(error) = self.0.memo_put(&key, &bytes) {
            tracing::warn!("cannot write the LLM response cache: {error}");
        }
    }
}

/// The store's memos as the ledger of an endpoint's batches ([`crate::llm::batch`]): which
/// batch each request was submitted in, kept across processes. Held weakly: the build's
/// resources own the models that hold it.
pub struct BatchLedger(std::sync::Weak<BuildResources>);

impl BatchLedger {
    pub fn new(resources: &std::sync::Arc<BuildResources>) -> Self {
        Self(std::sync::Arc::downgrade(resources))
    }
}

impl ResponseCache for BatchLedger {
    fn get(&self, key: ContentHash) -> Option<Vec<u8>> {
        let resources = self.0.upgrade()?;
        StoreResponseCache(&resources.store).get(key)
    }

    fn put(&self, key: ContentHash, bytes: &[u8]) {
        if let Some(resources) = self.0.upgrade() {
            StoreResponseCache(&resources.store).put(key, bytes);
        }
    }
}

/// The batches the store records as submitted and not yet seen finished.
pub fn pending_batches(store: &Store) -> Vec<crate::llm::batch::PendingBatch> {
    crate::llm::batch::pending_batches(&StoreResponseCache(store))
}

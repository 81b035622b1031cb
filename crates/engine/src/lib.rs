//! The engine: stages declared in `stages/*.toml` form a DAG; each (stage, item) result is
//! content-addressed, committed atomically, and reused while its cache key is unchanged.
//!
//! It knows no stage, model or project: the app gives its stages an environment `E` (its
//! project, its model backends), which the engine hands to every stage as it is
//! ([`JobCtx::env`], [`Stage::models`], [`Stage::source_items`]) and never looks into.

pub mod cost;
pub mod key;
pub mod lock;
pub mod maintenance;
pub mod port;
pub mod problem;
pub mod scheduler;
pub mod shard;
pub mod spec;
pub mod stage_file;
pub mod status;
pub mod store;
pub mod store_dir;
pub mod toml_error;

// Generic helpers the engine is built on; the app uses them too.
pub mod fsutil;
pub mod hash;
pub mod panic_context;
pub mod range;
pub mod redact;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;

use crate::hash::ContentHash;
use port::{Bytes, Png, Port, PortId};
use store::{ModelUsage, Store, StoreError, Usage};

/// How coarse a stage's items are. Item ids are `/`-separated paths whose depth is the level:
/// `show/s01e01` is an episode, `show/s01e01/sc004` one of its scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// One item for the whole benchmark (balancing, export).
    Benchmark,
    Episode,
    Scenario,
    /// One run of a scenario: `show/s01e01/sc004/sim/<mode>/<model>/r<replicate>`, four
    /// segments below its scenario (a simulation run, and what is judged of it).
    Run,
}

/// The one item of a [`Level::Benchmark`] stage.
pub const BENCHMARK_ITEM: &str = "benchmark";

impl Level {
    fn depth(self) -> usize {
        match self {
            Level::Benchmark => 0,
            Level::Episode => 2,
            Level::Scenario => 3,
            Level::Run => 7,
        }
    }

    /// The id at this level of `item`'s ancestor (or of `item` itself).
    pub fn ancestor_of(self, item: &str) -> &str {
        if self == Level::Benchmark {
            return BENCHMARK_ITEM;
        }
        let mut seen = 0;
        for (at, c) in item.char_indices() {
            if c == '/' {
                seen += 1;
                if seen == self.depth() {
                    return &item[..at];
                }
            }
        }
        item
    }

    /// Whether `item` has the shape of an id at this level.
    pub fn fits(self, item: &str) -> bool {
        match self {
            Level::Benchmark => item == BENCHMARK_ITEM,
            _ => {
                let segments: Vec<&str> = item.split('/').collect();
                segments.len() == self.depth()
                    && segments.iter().all(|s| {
                        !s.is_empty()
                            && s.chars()
                                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                            && *s != "."
                            && *s != ".."
                    })
            }
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Benchmark => "benchmark",
            Level::Episode => "episode",
            Level::Scenario => "scenario",
            Level::Run => "run",
        })
    }
}

/// Why a stage run failed. Stages return their own typed errors; the engine only records the
/// message, with its causes.
pub struct StageFailure(Box<dyn std::error::Error + Send + Sync>);

impl<E: std::error::Error + Send + Sync + 'static> From<E> for StageFailure {
    fn from(error: E) -> Self {
        Self(Box::new(error))
    }
}

impl fmt::Display for StageFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

impl fmt::Debug for StageFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// An item a root stage found in the project's sources (manifests), with the fingerprint of
/// every raw byte it depends on, computed before it runs.
#[derive(Debug, Clone)]
pub struct SourceItem {
    pub id: String,
    pub fingerprint: ContentHash,
    pub payload: serde_json::Value,
}

/// A source entry that is invalid: it becomes a failed item naming the problem.
#[derive(Debug, Clone)]
pub struct SourceProblem {
    pub id: String,
    pub message: String,
}

/// What a finished run hands to the engine: its named artifacts, and the finer-level items it
/// introduced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outputs {
    pub artifacts: BTreeMap<String, ContentHash>,
    pub children: Vec<String>,
    /// Things a researcher should look at although the run succeeded (a scenario aligned with
    /// low confidence); `viss status` lists them.
    pub flags: Vec<String>,
    /// The kept answer failed these quality gates after its re-asks: the item is flagged (see
    /// [`problem`]); later stages run on it, `viss status` and `viss review` list it.
    pub problems: Vec<problem::Problem>,
}

impl Outputs {
    /// Stores `record` as the output of `port` (an [`port::Scope::Item`] or
    /// [`port::Scope::Private`] port).
    pub fn put<T: Serialize, E>(
        &mut self,
        ctx: &JobCtx<E>,
        port: &Port<T>,
        record: &T,
    ) -> Result<(), JobError> {
        let hash = ctx.put_json(record)?;
        self.artifacts.insert(port.id().output_name(""), hash);
        Ok(())
    }

    /// Stores `record` as `port`'s output for one child item (see [`port::Scope::Child`]).
    pub fn put_child<T: Serialize, E>(
        &mut self,
        ctx: &JobCtx<E>,
        port: &Port<T>,
        child: &str,
        record: &T,
    ) -> Result<(), JobError> {
        let hash = ctx.put_json(record)?;
        self.artifacts.insert(port.id().output_name(child), hash);
        Ok(())
    }

    /// Stores image bytes as the output of `port`, under `key` for a [`port::Scope::Keyed`] port.
    pub fn put_png<E>(
        &mut self,
        ctx: &JobCtx<E>,
        port: &Port<Png>,
        key: &str,
        png: &[u8],
    ) -> Result<ContentHash, JobError> {
        let hash = ctx.put_bytes(png)?;
        self.artifacts.insert(port.id().output_name(key), hash);
        Ok(hash)
    }

    /// Stores file bytes as the output of `port`, under `key` for a [`port::Scope::Keyed`] port.
    pub fn put_bytes<E>(
        &mut self,
        ctx: &JobCtx<E>,
        port: &Port<Bytes>,
        key: &str,
        bytes: &[u8],
    ) -> Result<ContentHash, JobError> {
        let hash = ctx.put_bytes(bytes)?;
        self.artifacts.insert(port.id().output_name(key), hash);
        Ok(hash)
    }
}

/// Whether a job for `item` sees the output called `output_name` of a coarser item: unscoped
/// outputs are seen by all descendants, scoped ones by their item and its descendants.
pub fn output_visible_to(output_name: &str, item: &str) -> bool {
    match output_name.split_once('@') {
        None => true,
        Some((_, "")) => false,
        Some((_, scope)) => {
            item == scope
                || item
                    .strip_prefix(scope)
                    .is_some_and(|rest| rest.starts_with('/'))
        }
    }
}

/// One input artifact of a job: output `name` of `need`'s item `item`.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub need: String,
    pub item: String,
    pub name: String,
    pub hash: ContentHash,
}

impl Input {
    /// The borrowed form the cache key is made of (and which names inputs in messages).
    pub fn key_ref(&self) -> key::InputRef<'_> {
        key::InputRef {
            need: &self.need,
            item: &self.item,
            name: &self.name,
            hash: self.hash,
        }
    }
}

/// Shared by every job of a build: the store, the CPU pool and the app's environment `E`.
pub struct BuildResources<E> {
    pub store: Store,
    pub cpu: Semaphore,
    pub env: E,
    /// What later stages read in place of some stored outputs (a person's verdicts on them).
    pub overlay: Option<Box<dyn OutputOverlay>>,
}

/// Replaces what later stages read of some stored outputs, without touching the records that
/// hold them: a person's edit of an answer reaches every stage that reads the answer (their
/// cache keys see the replaced hash, so exactly they re-run), while the answer's own record,
/// and the hash a verdict names, stay as the stage made them.
pub trait OutputOverlay: Send + Sync {
    /// Whether anything replaces an output of (stage, item); asked of every settled item, so
    /// it must be cheap.
    fn covers(&self, stage: &str, item: &str) -> bool;

    /// The bytes later stages read for output `output` (stored as `hash`) of (stage, item), or
    /// `None` to read it as stored. An error fails the item, with the message.
    fn replace(
        &self,
        store: &Store,
        stage: &str,
        item: &str,
        output: &str,
        hash: ContentHash,
    ) -> Result<Option<Vec<u8>>, String>;
}

/// The world as one running job sees it.
pub struct JobCtx<E> {
    pub stage: String,
    pub item: String,
    pub inputs: Vec<Input>,
    pub source: Option<serde_json::Value>,
    pub params: serde_json::Value,
    pub(crate) prompts: Vec<(String, PathBuf)>,
    pub(crate) resources: Arc<BuildResources<E>>,
    pub(crate) usage: Mutex<Usage>,
    pub(crate) stats: Mutex<BTreeMap<String, u64>>,
    pub(crate) answers_cost: Mutex<cost::AnswersCost>,
}

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{stage} {item}: no input from port {port}")]
    MissingInput {
        stage: String,
        item: String,
        port: String,
    },
    #[error("{stage} {item}: artifact {hash} is not the expected JSON: {source}")]
    BadJson {
        stage: String,
        item: String,
        hash: ContentHash,
        source: serde_json::Error,
    },
    #[error("{stage}: root stage has no source payload for {item}")]
    NoSource { stage: String, item: String },
}

impl<E> JobCtx<E> {
    /// The app's environment for this build.
    pub fn env(&self) -> &E {
        &self.resources.env
    }

    /// Everything shared by the build's jobs, for work that outlives this borrow of the context
    /// (a closure sent to [`JobCtx::cpu`]).
    pub fn resources(&self) -> &Arc<BuildResources<E>> {
        &self.resources
    }

    pub fn store(&self) -> &Store {
        &self.resources.store
    }

    /// Every input of `port` this job sees: one per producing item for an aggregate over a
    /// finer level, one per key for a keyed port.
    pub fn inputs_of(&self, port: PortId) -> impl Iterator<Item = &Input> + '_ {
        self.inputs
            .iter()
            .filter(move |i| i.need == port.stage && port.matches(&i.name))
    }

    /// The one input of `port` for this item: the producer's output for this item or its
    /// ancestor, or, for a [`port::Scope::Child`] port of a coarser producer, the one for this
    /// item or, below the producer's children (a run reading its scenario's record of the
    /// episode's script), for its nearest ancestor that has one.
    pub fn input(&self, port: PortId) -> Result<&Input, JobError> {
        let mut key = self.item.as_str();
        loop {
            if let Some(input) = self.named(port, key) {
                return Ok(input);
            }
            match key.rsplit_once('/') {
                Some((parent, _)) => key = parent,
                None => return Err(self.missing(&self.item, port.to_string())),
            }
        }
    }

    /// The input of `port` under its output name for `key`, from whichever producer item this
    /// job sees it from.
    fn named(&self, port: PortId, key: &str) -> Option<&Input> {
        let name = port.output_name(key);
        self.inputs
            .iter()
            .find(|i| i.need == port.stage && i.name == name)
    }

    fn missing(&self, item: &str, port: String) -> JobError {
        JobError::MissingInput {
            stage: self.stage.clone(),
            item: item.to_string(),
            port,
        }
    }

    /// The input of `port` from the producer's item `item` (for a [`port::Scope::Child`] or
    /// [`port::Scope::Keyed`] port, its child or key `key`), when this job sees it.
    pub fn find(&self, port: PortId, item: &str, key: &str) -> Option<&Input> {
        let name = port.output_name(key);
        self.inputs
            .iter()
            .find(|i| i.need == port.stage && i.item == item && i.name == name)
    }

    /// The record of `port` for this item (see [`JobCtx::input`]).
    pub fn read<T: DeserializeOwned>(&self, port: &Port<T>) -> Result<T, JobError> {
        let hash = self.input(port.id())?.hash;
        self.read_json(&hash)
    }

    /// The record a coarser or same-level job reads of one child item through a
    /// [`port::Scope::Child`] port (an episode's record of one of its scenarios).
    pub fn read_child<T: DeserializeOwned>(
        &self,
        port: &Port<T>,
        child: &str,
    ) -> Result<T, JobError> {
        let input = self
            .named(port.id(), child)
            .ok_or_else(|| self.missing(&self.item, port.id().output_name(child)))?;
        self.read_json(&input.hash)
    }

    /// The record of `port` that producer item `item` wrote (under `key` for a child or keyed
    /// port): how an aggregate over finer items reads each of them.
    pub fn read_from<T: DeserializeOwned>(
        &self,
        port: &Port<T>,
        item: &str,
        key: &str,
    ) -> Result<T, JobError> {
        let input = self
            .find(port.id(), item, key)
            .ok_or_else(|| self.missing(item, port.id().output_name(key)))?;
        self.read_json(&input.hash)
    }

    /// The record of `port` for this item, or `None` when its producer wrote none for it (an
    /// episode without subtitles); a record that cannot be read is still an error.
    pub fn read_optional<T: DeserializeOwned>(
        &self,
        port: &Port<T>,
    ) -> Result<Option<T>, JobError> {
        match self.input(port.id()) {
            Ok(input) => self.read_json(&input.hash).map(Some),
            Err(_) => Ok(None),
        }
    }

    /// The image of `port` for this item (see [`JobCtx::input`]).
    pub fn read_png(&self, port: &Port<Png>) -> Result<Vec<u8>, JobError> {
        let hash = self.input(port.id())?.hash;
        Ok(self.store().get_blob(&hash)?)
    }

    /// Reads one input found by [`JobCtx::inputs_of`] or [`JobCtx::find`] as `port`'s record.
    pub fn read_input<T: DeserializeOwned>(
        &self,
        _port: &Port<T>,
        input: &Input,
    ) -> Result<T, JobError> {
        self.read_json(&input.hash)
    }

    fn read_json<T: DeserializeOwned>(&self, hash: &ContentHash) -> Result<T, JobError> {
        let bytes = self.store().get_blob(hash)?;
        serde_json::from_slice(&bytes).map_err(|source| JobError::BadJson {
            stage: self.stage.clone(),
            item: self.item.clone(),
            hash: *hash,
            source,
        })
    }

    pub fn source<T: DeserializeOwned>(&self) -> Result<T, JobError> {
        let payload = self.source.clone().ok_or_else(|| JobError::NoSource {
            stage: self.stage.clone(),
            item: self.item.clone(),
        })?;
        serde_json::from_value(payload).map_err(|source| JobError::BadJson {
            stage: self.stage.clone(),
            item: self.item.clone(),
            hash: ContentHash::of(b""),
            source,
        })
    }

    /// Stores a record as pretty JSON (stable bytes: structs serialize in field order and maps
    /// are sorted) and returns its hash. No API key is ever stored (see [`crate::redact`]).
    /// Private: a stage writes through its ports ([`Outputs::put`]), never a bare blob.
    fn put_json<T: Serialize>(&self, value: &T) -> Result<ContentHash, JobError> {
        // Streamed to the store, so a large record (an episode's parsed script) is never held
        // whole as text; one in which a key shows up is written again, redacted.
        let mut saw_secret = false;
        let streamed = self.store().put_blob_streamed(|out| {
            // Watched in large pieces: a spelling of a key is looked for at every byte.
            let mut watch =
                std::io::BufWriter::with_capacity(1 << 16, crate::redact::SecretWatch::new(out));
            serde_json::to_writer_pretty(&mut watch, value).map_err(std::io::Error::other)?;
            std::io::Write::write_all(&mut watch, b"\n")?;
            std::io::Write::flush(&mut watch)?;
            saw_secret = watch.get_ref().saw_secret();
            if saw_secret {
                return Err(std::io::Error::other("a key in the record"));
            }
            Ok(())
        });
        match streamed {
            Err(_) if saw_secret => {
                let mut bytes = serde_json::to_vec_pretty(value).expect("records serialize");
                bytes.push(b'\n');
                Ok(self.store().put_blob(&crate::redact::redact_bytes(bytes))?)
            }
            streamed => Ok(streamed?),
        }
    }

    fn put_bytes(&self, bytes: &[u8]) -> Result<ContentHash, JobError> {
        Ok(self.store().put_blob(bytes)?)
    }

    /// Runs CPU-bound work on the blocking pool, at most `cpu` at a time across the build.
    pub async fn cpu<R: Send + 'static>(&self, work: impl FnOnce() -> R + Send + 'static) -> R {
        let _permit = self
            .resources
            .cpu
            .acquire()
            .await
            .expect("the cpu pool is never closed");
        match tokio::task::spawn_blocking(work).await {
            Ok(result) => result,
            // Raise the work's own panic again, so the stage's error carries its message.
            Err(join) => match join.try_into_panic() {
                Ok(payload) => std::panic::resume_unwind(payload),
                Err(join) => panic!("cpu work did not finish: {join}"),
            },
        }
    }

    /// Path of a prompt template this stage declared in its `prompts` list; rendering an
    /// undeclared template would make the cache key lie, so it is refused.
    pub fn prompt_path(&self, name: &str) -> Option<&PathBuf> {
        self.prompts.iter().find(|(n, _)| n == name).map(|(_, p)| p)
    }

    pub fn add_usage(&self, usage: &Usage) {
        self.usage.lock().expect("usage lock").add(usage);
    }

    /// Adds `n` to this run's count `name`. Counts are run metadata (kept in the index record,
    /// shown by `viss status` and `viss show`), never part of an output: how a result was
    /// reached (how much came from a memo) must not change its bytes.
    pub fn count(&self, name: &str, n: u64) {
        *self
            .stats
            .lock()
            .expect("stats lock")
            .entry(name.to_string())
            .or_default() += n;
    }

    /// Adds what answers this run used cost when first asked (see [`cost`]): unlike
    /// [`Self::add_model_usage`], answers from a cache count too.
    pub fn add_answers_cost(&self, request_key: String, call: cost::CallCost) {
        self.answers_cost
            .lock()
            .expect("answers cost lock")
            .add_call(request_key, call);
    }

    /// What the answers this run used so far cost when first asked, for its output to keep.
    pub fn answers_cost(&self) -> cost::AnswersCost {
        self.answers_cost.lock().expect("answers cost lock").clone()
    }

    /// Records calls to the model named `model` in this run's usage (how the app's LLM steps
    /// account for what they spent).
    pub fn add_model_usage(&self, model: &str, usage: &ModelUsage) {
        self.usage
            .lock()
            .expect("usage lock")
            .add_model(model, usage);
    }
}

/// A stage's implementation: what it reads and writes, and its run. Its params come from
/// `stages/<name>.toml`; its name, code version and prompts from its [`spec::StageKind`].
///
/// `E` is the app's environment (see [`JobCtx::env`]).
#[async_trait::async_trait]
pub trait Stage<E>: Send + Sync + 'static {
    fn level(&self) -> Level;

    /// The finer level of the child items this stage's runs introduce, if any (parse_script
    /// introduces an episode's scenarios).
    fn spawns(&self) -> Option<Level> {
        None
    }

    /// The ports this stage reads, each produced by another stage. The DAG's edges follow from
    /// them, and only what a stage reads is in its cache key, so a stage that reads an
    /// episode's script is not re-run when its subtitles change. May depend on the params (a
    /// step that attaches the group image reads it; one that does not, does not).
    fn inputs(&self) -> Vec<PortId>;

    /// The ports this stage writes; writing anything else fails the run.
    fn outputs(&self) -> Vec<PortId>;

    /// An aggregate over finer items (a benchmark-level stage reading every scenario's answer)
    /// that runs on those that settled when some failed or were blocked, rather than being
    /// held by them: each of its outputs is per child, so a failed scenario goes without and
    /// holds only itself (its own later stages are blocked for want of its output here).
    /// It still waits for every item that is running or to run.
    fn partial_aggregate(&self) -> bool {
        false
    }

    /// The name its outputs were read under before a split gave that name to another stage:
    /// an old stage file's `needs` line naming it still means this stage.
    fn former_name(&self) -> Option<&'static str> {
        None
    }

    /// Stages it reads now that it did not read when viss still wrote `needs` lines into stage
    /// files: such a line without them is an old file, not an edit that cuts an edge.
    fn reads_added(&self) -> &'static [&'static str] {
        &[]
    }

    /// Stages that must settle first although nothing of theirs is read, so they are not in
    /// the cache key (images of one scenario made together).
    fn after(&self) -> &'static [&'static str] {
        &[]
    }

    /// The models this stage uses, as role -> identity (endpoint + model id, or the hash of a
    /// local model file). Part of the cache key, so switching a model re-runs the stage. May
    /// fetch a missing default model; an error stops the build before anything runs.
    fn models(&self, _env: &E, _store: &Store) -> Result<BTreeMap<String, String>, StageFailure> {
        Ok(BTreeMap::new())
    }

    /// What the stage's code rests on beyond its own `version`: the versions of shared code it
    /// calls (the answer checks every LLM step shares) and hashes of the schemas it writes, by
    /// name. Part of the cache key, so changing any of them re-runs this stage (and, through
    /// early cutoff, only what its changed outputs reach), with no version raised by hand.
    fn code(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    /// Root stages (no `needs`) enumerate their items from the project's sources. Problems with
    /// one entry fail that item only.
    fn source_items(
        &self,
        _env: &E,
        _store: &Store,
    ) -> Result<Vec<Result<SourceItem, SourceProblem>>, StageFailure> {
        Ok(Vec::new())
    }

    async fn run(&self, ctx: &JobCtx<E>) -> Result<Outputs, StageFailure>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scoped_outputs_are_seen_by_their_item_and_its_descendants_only() {
        assert!(output_visible_to("script", "demo/e1/sc001"));
        assert!(output_visible_to("unit@demo/e1/sc001", "demo/e1/sc001"));
        assert!(output_visible_to(
            "unit@demo/e1/sc001",
            "demo/e1/sc001/role1"
        ));
        assert!(!output_visible_to("unit@demo/e1/sc001", "demo/e1/sc002"));
        assert!(!output_visible_to("unit@demo/e1/sc001", "demo/e1/sc0011"));
        assert!(!output_visible_to("script@", "demo/e1/sc001"));
    }

    #[test]
    fn levels_find_ancestors_and_check_shapes() {
        assert_eq!(
            Level::Episode.ancestor_of("demo/s01e01/sc004"),
            "demo/s01e01"
        );
        assert_eq!(
            Level::Scenario.ancestor_of("demo/s01e01/sc004"),
            "demo/s01e01/sc004"
        );
        assert_eq!(Level::Benchmark.ancestor_of("demo/s01e01"), BENCHMARK_ITEM);
        assert!(Level::Episode.fits("demo/s01e01"));
        assert!(!Level::Episode.fits("demo/s01e01/sc001"));
        assert!(!Level::Episode.fits("demo/.."));
        assert!(Level::Scenario.fits("demo/s01e01/sc001"));
        let run = "demo/s01e01/sc001/sim/text/qwen2.5-coder-1.5b/r0";
        assert!(Level::Run.fits(run));
        assert!(!Level::Run.fits("demo/s01e01/sc001/sim/text"));
        assert_eq!(Level::Scenario.ancestor_of(run), "demo/s01e01/sc001");
        assert_eq!(Level::Episode.ancestor_of(run), "demo/s01e01");
        assert!(
            Level::Run > Level::Scenario,
            "runs are finer than scenarios"
        );
    }
}

//! The models of one build: each role's backend made once, on first use, and shared by every
//! job (so an endpoint's in-flight and per-minute limits hold across the whole build, and the
//! embedded model is loaded once, and only if some answer is not already cached).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::backend::ChatBackend;
use super::budget::{Budget, MeteredBackend, Spending};
use super::cache::ResponseCache;
use super::config::{LlmConfig, ModelRef};
use super::error::LlmError;
use super::http::HttpBackend;
use super::request::EndpointIdentity;
use viss_engine::hash::ContentHash;

pub struct LlmPool {
    config: LlmConfig,
    project_root: PathBuf,
    http: Mutex<HashMap<ModelRef, Arc<dyn ChatBackend>>>,
    local: tokio::sync::OnceCell<Arc<dyn ChatBackend>>,
    /// Who answers for [`ModelRef::Human`]: the terminal of `viss play`, when it runs.
    person: Mutex<Option<Arc<dyn ChatBackend>>>,
    /// What this build may spend, and has.
    budget: Arc<Budget>,
    /// Where batched endpoints record their batches (the store's memos), once the store is
    /// open.
    batch_ledger: std::sync::OnceLock<Arc<dyn ResponseCache>>,
    /// A lock per request being asked ([`LlmPool::one_at_a_time`]).
    asking: Mutex<HashMap<ContentHash, Arc<tokio::sync::Mutex<()>>>>,
    /// Answers come from the request cache alone: a dry run's probe.
    from_cache_only: std::sync::atomic::AtomicBool,
}

/// A request's turn to be asked: while it is held, the same request waits
/// ([`LlmPool::one_at_a_time`]).
pub struct RequestTurn<'a> {
    pool: &'a LlmPool,
    key: ContentHash,
    lock: Arc<tokio::sync::Mutex<()>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for RequestTurn<'_> {
    fn drop(&mut self) {
        self.guard.take();
        let mut asking = self
            .pool
            .asking
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // The map's and this turn's: no one else waits on it.
        if Arc::strong_count(&self.lock) == 2 {
            asking.remove(&self.key);
        }
    }
}

/// The identity of a person's answers in request keys: one person is as good as another to the
/// cache, and the answers a player gave are re-played when the play resumes.
pub const PERSON_IDENTITY: &str = "human:terminal";

impl LlmPool {
    pub fn new(config: LlmConfig, project_root: PathBuf) -> Self {
        let budget = Budget::new(config.max_cost, config.max_cost_per_stage.clone());
        Self {
            budget: Arc::new(budget),
            batch_ledger: std::sync::OnceLock::new(),
            asking: Mutex::new(HashMap::new()),
            from_cache_only: std::sync::atomic::AtomicBool::new(false),
            config,
            project_root,
            http: Mutex::new(HashMap::new()),
            local: tokio::sync::OnceCell::new(),
            person: Mutex::new(None),
        }
    }

    /// Seats `backend` (a person at a terminal) wherever a run names [`ModelRef::Human`].
    pub fn seat_person(&self, backend: Arc<dyn ChatBackend>) {
        *self
            .person
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(backend);
    }

    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// Where endpoints with `batch = true` record their batches: set once, before a build.
    pub fn keep_batches_in(&self, ledger: Arc<dyn ResponseCache>) {
        let _ = self.batch_ledger.set(ledger);
    }

    /// Waits until no other job of the build is asking the request cached under `key`: two
    /// jobs asking the same thing at once would both be answered, and both paid for, where the
    /// second can take the first's answer from the cache.
    pub async fn one_at_a_time(&self, key: ContentHash) -> RequestTurn<'_> {
        let lock = self
            .asking
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(key)
            .or_default()
            .clone();
        let guard = lock.clone().lock_owned().await;
        RequestTurn {
            pool: self,
            key,
            lock,
            guard: Some(guard),
        }
    }

    /// Whether `model` is asked through its endpoint's batch API.
    pub fn batches(&self, model: &ModelRef) -> bool {
        match model {
            ModelRef::Endpoint { endpoint, .. } => {
                self.config.endpoints.get(endpoint).is_some_and(|e| e.batch)
            }
            ModelRef::Local | ModelRef::Human => false,
        }
    }

    /// What the build has spent against its caps.
    pub fn spending(&self) -> Spending {
        self.budget.spending()
    }

    /// `backend`, answering for `model` in `stage`, held to the build's caps where one applies
    /// to the stage. A model with no price under a cap is an error: its spending could not be
    /// kept to it. The embedded model and a person cost nothing.
    pub fn metered(
        &self,
        backend: Arc<dyn ChatBackend>,
        model: &ModelRef,
        stage: &str,
    ) -> Result<Arc<dyn ChatBackend>, LlmError> {
        if !self.budget.caps(stage) {
            return Ok(backend);
        }
        let ModelRef::Endpoint {
            endpoint,
            model: model_id,
        } = model
        else {
            return Ok(backend);
        };
        let price = self
            .config
            .endpoints
            .get(endpoint)
            .and_then(|settings| settings.price_of(model_id));
        let Some(price) = price else {
            let scope = match self.config.max_cost {
                Some(_) => "[llm] max_cost".to_string(),
                None => format!("[llm.max_cost_per_stage] {stage}"),
            };
            return Err(LlmError::Unpriced {
                scope,
                model: model.to_string(),
                endpoint: endpoint.clone(),
                model_id: model_id.clone(),
            });
        };
        Ok(Arc::new(MeteredBackend {
            inner: backend,
            budget: self.budget.clone(),
            stage: stage.to_string(),
            price,
        }))
    }

    /// From now on, answers come from the request cache alone and no model is asked
    /// ([`LlmPool::cache_only`]): what a dry run's probe needs.
    pub fn answer_from_cache_only(&self) {
        self.from_cache_only
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether answers come from the request cache alone ([`LlmPool::answer_from_cache_only`]).
    pub fn asks_no_model(&self) -> bool {
        self.from_cache_only
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// What answers for `model` from the request cache alone: it names the model as the model's
    /// own backend does (so a request finds the answer that backend cached), loads and connects
    /// to nothing, and answers every request with [`LlmError::NotCached`]. `local_fingerprint`
    /// is as for [`LlmPool::identity`].
    pub fn cache_only(
        &self,
        model: &ModelRef,
        local_fingerprint: impl FnOnce(&std::path::Path) -> Result<String, LlmError>,
    ) -> Result<Arc<dyn ChatBackend>, LlmError> {
        Ok(Arc::new(CacheOnly {
            identity: self.identity(model, local_fingerprint)?,
            embedded: matches!(model, ModelRef::Local),
        }))
    }

    /// The backend answering for `model`, made on first use.
    pub async fn backend(&self, model: &ModelRef) -> Result<Arc<dyn ChatBackend>, LlmError> {
        match model {
            ModelRef::Human => self
                .person
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clone()
                .ok_or_else(|| {
                    LlmError::Config(
                        "a person plays a role in this run and no one is at the terminal: play \
                         it with `viss play SCENARIO --as NAME` (it resumes at the turn reached)"
                            .to_string(),
                    )
                }),
            ModelRef::Local => self
                .local
                .get_or_try_init(|| async {
                    let settings = self.config.local.clone();
                    let root = self.project_root.clone();
                    tokio::task::spawn_blocking(move || super::local_model::load(&settings, &root))
                        .await
                        .map_err(|error| {
                            LlmError::Config(format!("loading the local model panicked: {error}"))
                        })?
                })
                .await
                .cloned(),
            ModelRef::Endpoint {
                endpoint,
                model: model_id,
            } => {
                let mut backends = self
                    .http
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                if let Some(backend) = backends.get(model) {
                    return Ok(backend.clone());
                }
                let settings = self.config.endpoints.get(endpoint).ok_or_else(|| {
                    LlmError::Config(format!(
                        "no endpoint {endpoint:?}: add [llm.endpoints.{endpoint}] with a base_url \
                         to viss.toml"
                    ))
                })?;
                let mut http = HttpBackend::new(settings.http_config(model_id))?;
                if settings.batch {
                    let Some(ledger) = self.batch_ledger.get() else {
                        return Err(LlmError::Config(format!(
                            "endpoint {endpoint:?} has batch = true, which records its batches \
                             in a project's store; this caller has none"
                        )));
                    };
                    http = http.with_batch_ledger(ledger.clone());
                }
                let backend: Arc<dyn ChatBackend> = Arc::new(http);
                backends.insert(model.clone(), backend.clone());
                Ok(backend)
            }
        }
    }

    /// What answers for `model`, without loading or connecting to anything: the part of a
    /// stage's cache key that says which model it used. `local_fingerprint` hashes a file
    /// (the store's stat-cached fingerprint, so a 0.5 GB model is read once, not per build).
    pub fn identity(
        &self,
        model: &ModelRef,
        local_fingerprint: impl FnOnce(&std::path::Path) -> Result<String, LlmError>,
    ) -> Result<EndpointIdentity, LlmError> {
        match model {
            ModelRef::Local => {
                let path =
                    super::local_model::resolve_path(&self.config.local, &self.project_root)?;
                Ok(super::local::identity_from_hash(
                    &path,
                    &local_fingerprint(&path)?,
                    self.config.local.dry_multiplier,
                ))
            }
            ModelRef::Human => Ok(EndpointIdentity {
                base_url: PERSON_IDENTITY.to_string(),
                model: "person".to_string(),
            }),
            ModelRef::Endpoint { endpoint, model } => {
                let settings = self.config.endpoints.get(endpoint).ok_or_else(|| {
                    LlmError::Config(format!(
                        "no endpoint {endpoint:?}: add [llm.endpoints.{endpoint}] with a base_url \
                         to viss.toml"
                    ))
                })?;
                Ok(EndpointIdentity {
                    base_url: settings.base_url.trim_end_matches('/').to_string(),
                    model: model.clone(),
                })
            }
        }
    }
}

/// A model's stand-in that has no answers of its own: see [`LlmPool::cache_only`].
struct CacheOnly {
    identity: EndpointIdentity,
    /// It stands in for the embedded model, whose seeded requests replay their failures.
    embedded: bool,
}

#[async_trait::async_trait]
impl ChatBackend for CacheOnly {
    fn identity(&self) -> EndpointIdentity {
        self.identity.clone()
    }

    async fn answer(
        &self,
        _: &super::request::ChatRequest,
        _: &[super::request::Message],
        _: &mut super::backend::Usage,
    ) -> Result<super::backend::RawAnswer, LlmError> {
        Err(LlmError::NotCached)
    }

    fn reproduces(&self, request: &super::request::ChatRequest) -> bool {
        self.embedded && super::local_model::reproduces(request)
    }
}

#[cfg(test)]
mod one_at_a_time_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_same_request_asked_twice_at_once_is_asked_once_and_other_requests_do_not_wait() {
        let pool = Arc::new(LlmPool::new(LlmConfig::default(), PathBuf::from(".")));
        let cache: Arc<Mutex<HashMap<ContentHash, &str>>> = Arc::default();
        let asked = Arc::new(AtomicUsize::new(0));
        let ask = |key: ContentHash| {
            let (pool, cache, asked) = (pool.clone(), cache.clone(), asked.clone());
            tokio::spawn(async move {
                let _turn = pool.one_at_a_time(key).await;
                if cache.lock().unwrap().contains_key(&key) {
                    return;
                }
                asked.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                cache.lock().unwrap().insert(key, "answer");
            })
        };
        let (same, other) = (ContentHash::of(b"same"), ContentHash::of(b"other"));
        let tasks = [ask(same), ask(same), ask(other)];
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(
            asked.load(Ordering::SeqCst),
            2,
            "one ask per distinct request"
        );
        assert!(
            pool.asking.lock().unwrap().is_empty(),
            "no lock is kept after"
        );

        let held = pool.one_at_a_time(same).await;
        let now = std::time::Duration::ZERO;
        let other_turn = tokio::time::timeout(now, pool.one_at_a_time(other)).await;
        assert!(other_turn.is_ok(), "another request does not wait");
        drop(other_turn);
        let a_while = std::time::Duration::from_millis(20);
        let same_turn = tokio::time::timeout(a_while, pool.one_at_a_time(same)).await;
        assert!(same_turn.is_err(), "the same request waits its turn");
        drop(held);
    }
}

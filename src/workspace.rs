//! A project opened for work: its writer lock held, its store open and its DAG loaded.

use std::sync::Arc;

use crate::dag::BuildResources;
use crate::llm::LlmPool;
use crate::dag::lock::{LockError, StoreLock};
use crate::dag::scheduler::{self, BuildError, BuildOptions, BuildReport};
use crate::dag::spec::{Pipeline, SpecError, StageKind};
use crate::dag::store::{Store, StoreError};
use crate::project::Project;

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

pub struct Workspace {
    pub pipeline: Pipeline,
    resources: Arc<BuildResources>,
    // Dropped last: the lock outlives every use of the store.
    _lock: StoreLock,
}

impl Workspace {
    /// Locks the project's artifacts directory (failing if another viss holds it), opens the
    /// store and loads the DAG from `kinds` configured by the project's `stages/`.
    pub fn open(
        project: Project,
        kinds: &[StageKind],
        purpose: &str,
    ) -> Result<Self, WorkspaceError> {
        let pipeline = Pipeline::load(kinds, &project.stages_dir(), &project.prompts_dir())?;
        let lock = StoreLock::acquire(&project.artifacts_dir(), purpose)?;
        let store = Store::open(&project.artifacts_dir())?;
        let cpu = tokio::sync::Semaphore::new(project.config.cpu());
        let llm = LlmPool::new(project.config.llm.clone(), project.root.clone());
        Ok(Self {
            pipeline,
            resources: Arc::new(BuildResources {
                project,
                store,
                cpu,
                llm,
            }),
            _lock: lock,
        })
    }

    pub fn project(&self) -> &Project {
        &self.resources.project
    }

    pub fn store(&self) -> &Store {
        &self.resources.store
    }

    /// Runs a build on a fresh multi-threaded runtime (one per build, shared by all its jobs).
    pub fn build(&self, options: &BuildOptions) -> Result<BuildReport, WorkspaceError> {
        let started = std::time::Instant::now();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(WorkspaceError::Runtime)?;
        let report = runtime.block_on(scheduler::build(&self.pipeline, self.resources.clone(), options))?;
        tracing::info!("build returned after {:.3} s", started.elapsed().as_secs_f64());
        Ok(report)
    }
}

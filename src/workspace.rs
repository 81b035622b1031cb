//! A project opened for work: its writer lock held, its store open and its DAG loaded.

use std::sync::Arc;

use crate::dag::lock::{LockError, StoreLock};
use crate::dag::scheduler::{self, BuildError, BuildOptions, BuildReport};
use crate::dag::spec::{Pipeline, SpecError, StageKind};
use crate::dag::store::{IndexRepair, Store, StoreError};
use crate::dag::store_dir::{self, StoreDirError};
use crate::dag::{BuildResources, Env, OutputOverlay};
use crate::llm::LlmPool;
use crate::project::Project;
use crate::review::overlay::ReviewOverlay;
use crate::review::verdicts::Reviews;

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    StoreDir(#[from] StoreDirError),
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot add the missing default templates to prompts/: {0}")]
    AddPrompts(std::io::Error),
    #[error(transparent)]
    Reviews(#[from] crate::review::ReviewError),
    #[error(transparent)]
    Remote(#[from] viss_remote::RemoteError),
}

pub struct Workspace {
    pub pipeline: Pipeline,
    resources: Arc<BuildResources>,
    // Dropped last: the lock outlives every use of the store.
    _lock: StoreLock,
}

impl Workspace {
    /// Locks the project's artifacts directory (failing if another viss holds it), opens the
    /// store and loads the DAG from `kinds` configured by the project's `stages/`. The
    /// artifacts directory must be a store of its own: not the project, an ancestor of it or
    /// one of its folders of user files, and either marked by viss or new (see
    /// [`store_dir`]); anything else is refused before a file is written there.
    pub fn open(
        project: Project,
        kinds: &[StageKind],
        purpose: &str,
    ) -> Result<Self, WorkspaceError> {
        Ok(Self::open_with(project, kinds, purpose, false)?.0)
    }

    /// As [`Workspace::open`], repairing a damaged index (see [`Store::open_repairing`]).
    pub fn open_repairing(
        project: Project,
        kinds: &[StageKind],
        purpose: &str,
    ) -> Result<(Self, Option<IndexRepair>), WorkspaceError> {
        Self::open_with(project, kinds, purpose, true)
    }

    fn open_with(
        project: Project,
        kinds: &[StageKind],
        purpose: &str,
        repair: bool,
    ) -> Result<(Self, Option<IndexRepair>), WorkspaceError> {
        for path in project
            .add_missing_prompts(&crate::stages::added_prompts())
            .map_err(WorkspaceError::AddPrompts)?
        {
            tracing::warn!(
                "{} was missing (this project is older than the template): written from the \
                 built-in default",
                path.display()
            );
        }
        let pipeline = Pipeline::load(kinds, &project.stages_dir(), &project.prompts_dir())?;
        let dir = project.artifacts_dir();
        store_dir::check_location(&dir, &project.protected_dirs())?;
        // Before the lock, which writes its file into the directory.
        store_dir::claim(&dir)?;
        let lock = StoreLock::acquire(&dir, purpose)?;
        let (store, repaired) = if repair {
            Store::open_repairing(&dir)?
        } else {
            (Store::open(&dir)?, None)
        };
        let store = match &project.config.remote {
            Some(remote) => store.with_remote(viss_remote::open(remote)?),
            None => store,
        };
        let cpu = tokio::sync::Semaphore::new(project.config.cpu());
        let llm = LlmPool::new(project.config.llm.clone(), project.root.clone());
        let reviews = Reviews::load(&project.reviews_dir())?;
        let overlay: Option<Box<dyn OutputOverlay>> = (!reviews.is_empty())
            .then(|| Box::new(ReviewOverlay::new(Arc::new(reviews))) as Box<dyn OutputOverlay>);
        let resources = Arc::new(BuildResources {
            store,
            cpu,
            env: Env { project, llm },
            overlay,
        });
        let ledger = crate::dag::BatchLedger::new(&resources);
        resources.env.llm.keep_batches_in(Arc::new(ledger));
        let workspace = Self {
            pipeline,
            resources,
            _lock: lock,
        };
        Ok((workspace, repaired))
    }

    pub fn project(&self) -> &Project {
        &self.resources.env.project
    }

    /// The models of this workspace's builds (to seat a person in a run: `viss play`).
    pub fn llm(&self) -> &crate::llm::LlmPool {
        &self.resources.env.llm
    }

    pub fn store(&self) -> &Store {
        &self.resources.store
    }

    /// Runs a build on a fresh multi-threaded runtime (one per build, shared by all its jobs).
    /// While it runs, other processes can see where it stands (`viss status`) and read what it
    /// has made (`viss show`): see [`crate::live`].
    pub fn build(&self, options: &BuildOptions) -> Result<BuildReport, WorkspaceError> {
        let started = std::time::Instant::now();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(WorkspaceError::Runtime)?;
        let mut options = options.clone();
        let artifacts = self.project().artifacts_dir();
        let _readers = if options.dry_run {
            None
        } else {
            options
                .on_progress
                .get_or_insert_with(|| crate::live::progress_sink(&artifacts, None));
            crate::live::Readers::serve(&artifacts, self.resources.clone())
        };
        let report = runtime.block_on(scheduler::build(
            &self.pipeline,
            self.resources.clone(),
            &options,
        ))?;
        tracing::info!(
            "build returned after {:.3} s",
            started.elapsed().as_secs_f64()
        );
        Ok(report)
    }
}

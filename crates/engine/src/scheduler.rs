//! Runs a build: items stream through the DAG as their inputs settle. An item whose key matches
//! its stored record is settled without running (and its unchanged outputs keep downstream keys
//! unchanged: early cutoff); others run as tokio tasks bounded by `-j`, each committing its
//! record the moment it finishes. A failure is recorded and blocks only what depends on it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::{Semaphore, mpsc};

use crate::hash::ContentHash;
use crate::key::{InputRef, KeyChange, KeyParts, SOURCE_INPUT, StageFingerprint};
use crate::panic_context::panic_message;
use crate::port::PortId;
use crate::spec::Pipeline;
use crate::store::{Record, StoreError, Usage};
use crate::{BuildResources, Input, JobCtx, Level, Outputs, SourceItem, output_visible_to};

#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Build this stage and what it needs, nothing after it.
    /// Stages to build with everything they need; empty: all stages.
    pub until: Vec<String>,
    /// Run only these stages; others are reused where fresh and otherwise left alone.
    pub only: Vec<String>,
    /// Run only items whose id matches this glob (`demo/s01e01*`).
    pub items: Option<String>,
    /// Run only one shard's items, or only the benchmark-level ones; the others are taken
    /// from the caches where they can be, and otherwise left for another build.
    pub part: crate::shard::Part,
    /// Plan and report, record nothing: run nothing but the probe's stages (below).
    pub dry_run: bool,
    /// With `dry_run`: stages whose items that would run are run all the same, committing
    /// nothing, to learn what they make from the caches alone (the caller's resources answer
    /// from caches only, such as a request cache that asks no model on a miss). An item whose
    /// job succeeds is settled on its outputs, so what follows it is planned on them (a later
    /// item whose inputs come out unchanged is fresh); one whose job fails would run, as
    /// without probing. Each is in [`BuildReport::probes`]. A probed job may store the blobs
    /// it makes: content-addressed, they are the build's own, and `gc` removes them otherwise.
    pub probe: Vec<String>,
    /// Jobs in flight at once.
    pub jobs: usize,
    pub progress: bool,
    /// Collect why this item would or would not run (`viss status --why`).
    pub explain: Option<String>,
    /// Given where the build stands every so often while it runs, and once at its end.
    pub on_progress: Option<ProgressSink>,
}

/// Receives a [`ProgressSnapshot`] every [`ProgressSink::every`] while a build runs (and once
/// when it ends, with `finished` set): what the app shows a person who is not watching a
/// terminal, or who asks from another process.
#[derive(Clone)]
pub struct ProgressSink {
    pub every: std::time::Duration,
    pub send: Arc<dyn Fn(&ProgressSnapshot) + Send + Sync>,
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressSink")
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

/// Where a running build stands.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct ProgressSnapshot {
    pub pid: u32,
    pub started_unix_ms: u64,
    pub updated_unix_ms: u64,
    /// In pipeline order, the stages the build covers.
    pub stages: Vec<StageProgress>,
    /// What the build's model calls have cost so far.
    pub usage: Usage,
    /// The items that failed so far.
    pub failures: Vec<ItemFailure>,
    /// The build has ended.
    pub finished: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct StageProgress {
    pub stage: String,
    /// Reused (up to date) and run in this build.
    pub fresh: usize,
    pub ran: usize,
    pub failed: usize,
    /// Not run because something they need failed.
    pub blocked: usize,
    /// Running or waiting for a job slot.
    pub running: usize,
    /// Known items not decided yet; more may appear while `open`.
    pub left: usize,
    /// Items can still appear: what the stage runs on is not all settled.
    pub open: bool,
}

/// An `--items` glob that matches `id` and nothing else: its glob characters escaped.
pub fn glob_literal(id: &str) -> String {
    let mut glob = String::with_capacity(id.len());
    for c in id.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | ',' | '\\' | '!') {
            glob.push('\\');
        }
        glob.push(c);
    }
    glob
}

#[cfg(test)]
#[test]
fn a_literal_glob_matches_its_id_and_nothing_else() {
    for id in [
        "demo/s01e01",
        "a*b/c?d/[x]/{y,z}/e\\f!g",
        "van/e1/sc0a1b/sim/text/m-1.5b/r0",
    ] {
        let glob = globset::Glob::new(&glob_literal(id))
            .unwrap()
            .compile_matcher();
        assert!(glob.is_match(id), "{id}");
        for other in [
            "demo/s01e012",
            "aXb/c?d/[x]/{y,z}/e\\f!g",
            "a*b/cXd/[x]/y/e\\f!g",
        ] {
            assert!(!glob.is_match(other) || other == id, "{id} matched {other}");
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("no stage named `{0}`; `viss graph` lists the stages")]
    UnknownStage(String),
    #[error("--items {pattern:?} is not a valid glob: {message}")]
    BadGlob { pattern: String, message: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("stage `{stage}` cannot load its models: {message}")]
    Models { stage: String, message: String },
    #[error(
        "stage `{stage}` is at the {level} level but no stage it needs introduces {level} items"
    )]
    NoSpawner { stage: String, level: Level },
}

/// Per-stage counts of one build.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StageCounts {
    /// Reused: key unchanged.
    pub fresh: usize,
    /// Ran in this build.
    pub ran: usize,
    pub failed: usize,
    /// Not run because something they need failed.
    pub blocked: usize,
    /// Stale but left alone by `--only` / `--items`.
    pub not_selected: usize,
    /// Stale, and would run without `--dry-run`.
    pub would_run: usize,
    /// Waiting on upstream items that would run first (`--dry-run`).
    pub waiting: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ItemFailure {
    pub stage: String,
    pub item: String,
    pub error: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    Fresh,
    /// Its stored record is for other inputs, but a run with exactly these inputs is in the
    /// action cache (a setting changed and changed back, a file restored): its outputs are
    /// taken as they are.
    Reused,
    NeverBuilt,
    Changed {
        changes: Vec<KeyChange>,
    },
    FailedLastTime {
        error: String,
    },
    Waiting {
        on: String,
    },
    Blocked {
        by: String,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    pub stage: String,
    pub item: String,
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// What a dry run's probe of one item found (see [`BuildOptions::probe`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Probe {
    pub stage: String,
    pub item: String,
    /// Its job ran to its end from the caches alone.
    pub finished: bool,
    /// The job's counts ([`crate::JobCtx::count`]), up to where it stopped.
    pub stats: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct BuildReport {
    /// In pipeline order.
    pub stages: Vec<(String, StageCounts)>,
    pub failures: Vec<ItemFailure>,
    pub explanations: Vec<Explanation>,
    /// The items a dry run probed, in the order their jobs ended.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<Probe>,
    pub usage: Usage,
    pub seconds: f64,
    /// The most memory the process has held so far (its peak resident set, from
    /// `/proc/self/status`; not known elsewhere): what a machine running such a build needs.
    pub peak_memory_bytes: Option<u64>,
    /// What the store's remote cache gave and took, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<crate::store::RemoteCounts>,
}

/// The process's peak resident set size in bytes (`VmHWM`), where the system says.
pub fn peak_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

impl BuildReport {
    pub fn counts(&self, stage: &str) -> StageCounts {
        self.stages
            .iter()
            .find(|(s, _)| s == stage)
            .map(|(_, c)| c.clone())
            .unwrap_or_default()
    }

    pub fn total(&self, field: fn(&StageCounts) -> usize) -> usize {
        self.stages.iter().map(|(_, c)| field(c)).sum()
    }
}

/// Item ids are shared between stages: one allocation per item, not per (stage, item).
type ItemId = Arc<str>;

#[derive(Debug)]
struct Settled {
    outputs: BTreeMap<String, ContentHash>,
    children: Vec<String>,
}

#[derive(Debug, Clone)]
enum ItemState {
    Settled(Arc<Settled>),
    Failed,
    /// Will not run this build; the reason blocks dependents.
    Held(Hold),
    Running,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Hold {
    Blocked,
    NotSelected,
    /// Not selected, and it failed last time on these same inputs: a partial aggregate goes
    /// on without it, as if it had failed in this build.
    StillFailed,
    WouldRun,
    Waiting,
}

/// Where a stage's items come from.
#[derive(Debug, Clone, Copy)]
enum Driver {
    Sources,
    /// The items of a need at the same level.
    SameLevel(usize),
    /// The children introduced by an upstream stage at a coarser level.
    Children(usize),
    /// One item per ancestor, at this stage's coarser level, of its needs' items.
    Aggregate,
}

struct StageRun {
    fingerprint: StageFingerprint,
    stored: HashMap<String, Record>,
    states: HashMap<ItemId, ItemState>,
    /// The item ids this stage will have, where they cannot be read off its driver's states.
    known: BTreeSet<ItemId>,
    /// Whether `known` is kept: always, except for a same-level-driven stage with no coarser
    /// need, whose items are exactly its driver's (the common case, kept cheap).
    indexes_known: bool,
    driver: Driver,
    needs: Vec<usize>,
    running: usize,
    finished: bool,
    /// Outside `--until`'s stages and their needs: no item of it is ever decided or run.
    active: bool,
    may_run: bool,
    counts: StageCounts,
}

struct JobDone {
    stage: usize,
    item: ItemId,
    result: Result<Settled, String>,
    usage: Usage,
    corrupt_producers: Vec<(String, String)>,
    /// A dry run's probe: the job's counts (nothing of it was committed).
    probed: Option<BTreeMap<String, u64>>,
}

struct Build<'a, E> {
    pipeline: &'a Pipeline<E>,
    resources: Arc<BuildResources<E>>,
    options: &'a BuildOptions,
    glob: Option<globset::GlobMatcher>,
    active: Vec<bool>,
    runs: Vec<StageRun>,
    dependents: Vec<Vec<usize>>,
    spawned_for: Vec<Vec<usize>>,
    same_level_for: Vec<Vec<usize>>,
    /// Each stage and every stage it transitively needs.
    upstream: Vec<Vec<usize>>,
    jobs: Arc<Semaphore>,
    done_tx: mpsc::UnboundedSender<JobDone>,
    in_flight: usize,
    report: BuildReport,
    progress: indicatif::ProgressBar,
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Runs (or with `dry_run`, plans) a build of `pipeline`.
pub async fn build<E: Send + Sync + 'static>(
    pipeline: &Pipeline<E>,
    resources: Arc<BuildResources<E>>,
    options: &BuildOptions,
) -> Result<BuildReport, BuildError> {
    let started = Instant::now();
    for name in options.until.iter().chain(&options.only) {
        if pipeline.get(name).is_none() {
            return Err(BuildError::UnknownStage(name.clone()));
        }
    }
    let glob = match &options.items {
        Some(pattern) => Some(
            globset::Glob::new(pattern)
                .map_err(|e| BuildError::BadGlob {
                    pattern: pattern.clone(),
                    message: e.to_string(),
                })?
                .compile_matcher(),
        ),
        None => None,
    };
    let active_names = (!options.until.is_empty()).then(|| {
        options
            .until
            .iter()
            .flat_map(|stage| pipeline.with_ancestors(stage))
            .collect::<BTreeSet<String>>()
    });
    let active: Vec<bool> = pipeline
        .stages
        .iter()
        .map(|s| {
            active_names
                .as_ref()
                .is_none_or(|names| names.contains(&s.name))
        })
        .collect();

    let stage_count = pipeline.stages.len();
    let mut dependents = vec![Vec::new(); stage_count];
    let mut runs = Vec::with_capacity(stage_count);
    for (at, spec) in pipeline.stages.iter().enumerate() {
        let needs: Vec<usize> = spec
            .needs
            .iter()
            .map(|n| pipeline.position(n).expect("needs checked at load"))
            .collect();
        for &need in &needs {
            dependents[need].push(at);
        }
        let driver = if spec.is_root() {
            Driver::Sources
        } else if let Some(&same) = needs
            .iter()
            .find(|&&n| pipeline.stages[n].level == spec.level)
        {
            Driver::SameLevel(same)
        } else if needs.iter().any(|&n| pipeline.stages[n].level < spec.level) {
            let spawner = pipeline
                .with_ancestors(&spec.name)
                .iter()
                .filter(|name| **name != spec.name)
                .filter_map(|name| pipeline.position(name))
                .filter(|&p| pipeline.stages[p].stage.spawns() == Some(spec.level))
                .max()
                .ok_or(BuildError::NoSpawner {
                    stage: spec.name.clone(),
                    level: spec.level,
                })?;
            Driver::Children(spawner)
        } else {
            Driver::Aggregate
        };
        let has_coarser_need = needs.iter().any(|&n| pipeline.stages[n].level < spec.level);
        // A same-level item that also aggregates a finer need (the benchmark-level `export`
        // reads every scenario) waits for that need to finish after its driver settled it; it
        // must be in `known` for `finish_stages` to decide it then.
        let has_finer_need = needs.iter().any(|&n| pipeline.stages[n].level > spec.level);
        let mut prompts = BTreeMap::new();
        for (name, path) in &spec.prompts {
            let bytes = std::fs::read(path).map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
            prompts.insert(name.clone(), ContentHash::of(&bytes));
        }
        let models = if active[at] {
            spec.stage
                .models(&resources.env, &resources.store)
                .map_err(|e| BuildError::Models {
                    stage: spec.name.clone(),
                    message: e.to_string(),
                })?
        } else {
            BTreeMap::new()
        };
        let fingerprint = StageFingerprint::new(
            &spec.name,
            spec.version,
            spec.params.clone(),
            prompts,
            models,
            spec.stage.code(),
            spec.stage
                .outputs()
                .iter()
                .map(|port| (port.to_string(), port.shape_hash()))
                .collect(),
        );
        runs.push(StageRun {
            fingerprint,
            stored: HashMap::new(),
            states: HashMap::new(),
            known: BTreeSet::new(),
            indexes_known: !matches!(driver, Driver::SameLevel(_))
                || has_coarser_need
                || has_finer_need,
            driver,
            needs,
            running: 0,
            finished: !active[at],
            active: active[at],
            may_run: options.only.is_empty() || options.only.contains(&spec.name),
            counts: StageCounts::default(),
        });
    }
    // Stages' records are independent: load them side by side.
    let index = resources.store.index();
    let loaded: Vec<Result<HashMap<String, Record>, StoreError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = pipeline
            .stages
            .iter()
            .zip(&active)
            .map(|(spec, &active)| {
                scope.spawn(move || {
                    if active {
                        Ok(index.scan_stage(&spec.name)?.into_iter().collect())
                    } else {
                        Ok(HashMap::new())
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("loading records panicked"))
            .collect()
    });
    for (run, stored) in runs.iter_mut().zip(loaded) {
        run.stored = stored?;
    }
    let mut spawned_for = vec![Vec::new(); stage_count];
    let mut same_level_for = vec![Vec::new(); stage_count];
    for (at, run) in runs.iter().enumerate() {
        match run.driver {
            Driver::Children(spawner) => spawned_for[spawner].push(at),
            Driver::SameLevel(need) if run.indexes_known => same_level_for[need].push(at),
            _ => {}
        }
    }

    let progress = if options.progress && !options.dry_run {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
            )
            .expect("static template"),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let mut build = Build {
        pipeline,
        resources,
        options,
        glob,
        active,
        runs,
        dependents,
        spawned_for,
        same_level_for,
        upstream: pipeline
            .stages
            .iter()
            .map(|s| {
                pipeline
                    .with_ancestors(&s.name)
                    .iter()
                    .filter_map(|n| pipeline.position(n))
                    .collect()
            })
            .collect(),
        jobs: Arc::new(Semaphore::new(options.jobs.max(1))),
        done_tx,
        in_flight: 0,
        report: BuildReport::default(),
        progress,
    };
    tracing::info!(
        "loaded {} stored records in {:.3} s",
        build.runs.iter().map(|r| r.stored.len()).sum::<usize>(),
        started.elapsed().as_secs_f64()
    );

    build.plan_sources()?;
    tracing::info!(
        "planned sources and settled what they allow at {:.3} s",
        started.elapsed().as_secs_f64()
    );
    let started_unix_ms = now_unix_ms();
    let sink = options.on_progress.clone().filter(|_| !options.dry_run);
    let mut ticks = sink.as_ref().map(|sink| {
        let mut ticks = tokio::time::interval(sink.every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks
    });
    loop {
        build.finish_stages()?;
        if build.in_flight == 0 {
            break;
        }
        let done = match (&mut ticks, &sink) {
            (Some(ticks), Some(sink)) => loop {
                tokio::select! {
                    done = done_rx.recv() => break done,
                    _ = ticks.tick() => (sink.send)(&build.snapshot(started_unix_ms, false)),
                }
            },
            _ => done_rx.recv().await,
        };
        build.in_flight -= 1;
        build.apply(done.expect("the build holds a sender"))?;
    }
    if let Some(sink) = &sink {
        (sink.send)(&build.snapshot(started_unix_ms, true));
    }
    build.progress.finish_and_clear();
    if !options.dry_run {
        build.resources.store.index().flush()?;
    }
    tracing::info!(
        "all items decided at {:.3} s",
        started.elapsed().as_secs_f64()
    );
    let remote = build.resources.store.remote().map(|remote| remote.counts());
    let Build {
        runs,
        active,
        mut report,
        ..
    } = build;
    report.stages = pipeline
        .stages
        .iter()
        .zip(&runs)
        .zip(&active)
        .filter(|(_, active)| **active)
        .map(|((spec, run), _)| (spec.name.clone(), run.counts.clone()))
        .collect();
    report.seconds = started.elapsed().as_secs_f64();
    report.peak_memory_bytes = peak_memory_bytes();
    report.remote = remote;
    // Freeing every per-item map takes longer than the rest of a no-op rebuild; a thread does it
    // while the caller goes on.
    std::thread::spawn(move || drop(runs));
    Ok(report)
}

/// What `resolve` decided, computed while the build's state is borrowed.
enum Decision {
    Pending,
    /// Will not run this build: blocked, waiting, not selected, or a dry run.
    Hold(Hold, Verdict),
    Fresh,
    /// A run with these inputs is in the action cache.
    Reuse {
        record: Box<Record>,
        parts: Box<KeyParts>,
    },
    Run {
        key: ContentHash,
        parts: Box<KeyParts>,
        inputs: Vec<Input>,
        verdict: Verdict,
    },
}

impl<E: Send + Sync + 'static> Build<'_, E> {
    fn snapshot(&self, started_unix_ms: u64, finished: bool) -> ProgressSnapshot {
        let stages = self
            .pipeline
            .stages
            .iter()
            .zip(&self.runs)
            .filter(|(_, run)| run.active)
            .map(|(spec, run)| {
                let expected = match run.driver {
                    Driver::SameLevel(driver) if !run.indexes_known => {
                        self.runs[driver].states.len()
                    }
                    _ => run.known.len(),
                };
                StageProgress {
                    stage: spec.name.clone(),
                    fresh: run.counts.fresh,
                    ran: run.counts.ran,
                    failed: run.counts.failed,
                    blocked: run.counts.blocked,
                    running: run.running,
                    left: expected.saturating_sub(run.states.len()),
                    open: !run.finished,
                }
            })
            .collect();
        ProgressSnapshot {
            pid: std::process::id(),
            started_unix_ms,
            updated_unix_ms: now_unix_ms(),
            stages,
            usage: self.report.usage.clone(),
            failures: self.report.failures.clone(),
            finished,
        }
    }

    fn plan_sources(&mut self) -> Result<(), BuildError> {
        for at in 0..self.runs.len() {
            if !self.active[at] || !matches!(self.runs[at].driver, Driver::Sources) {
                continue;
            }
            let spec = &self.pipeline.stages[at];
            let items = match spec
                .stage
                .source_items(&self.resources.env, &self.resources.store)
            {
                Ok(items) => items,
                Err(failure) => {
                    self.fail_item(at, Arc::from("*"), failure.to_string(), None)?;
                    continue;
                }
            };
            for entry in items {
                match entry {
                    Ok(source) => {
                        let id: ItemId = Arc::from(source.id.as_str());
                        self.runs[at].known.insert(id.clone());
                        self.resolve(at, &id, Some(source))?;
                    }
                    Err(problem) => {
                        let id: ItemId = Arc::from(problem.id.as_str());
                        self.runs[at].known.insert(id.clone());
                        self.fail_item(at, id, problem.message, None)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn is_known(&self, at: usize, item: &str) -> bool {
        let run = &self.runs[at];
        match run.driver {
            Driver::SameLevel(driver) if !run.indexes_known => {
                self.runs[driver].states.contains_key(item)
            }
            _ => run.known.contains(item),
        }
    }

    fn selected(&self, at: usize, item: &str) -> bool {
        self.runs[at].may_run
            && self.glob.as_ref().is_none_or(|g| g.is_match(item))
            && self.options.part.runs(self.pipeline.stages[at].level, item)
    }

    fn explaining(&self, item: &str) -> bool {
        self.options.explain.as_deref() == Some(item)
    }

    fn explain(&mut self, at: usize, item: &str, verdict: Verdict) {
        if self.explaining(item) {
            let stage = self.pipeline.stages[at].name.clone();
            self.report.explanations.push(Explanation {
                stage,
                item: item.to_string(),
                verdict,
            });
        }
    }

    /// Gathers the inputs of (stage `at`, `item`); `Err` carries the hold that keeps it from
    /// running, `Ok(None)` means some input is not settled yet.
    fn gather_inputs(
        &self,
        at: usize,
        item: &str,
    ) -> Result<Option<Vec<InputRef<'_>>>, (Hold, String)> {
        let level = self.pipeline.stages[at].level;
        let reads = &self.pipeline.stages[at].inputs;
        let partial = self.pipeline.stages[at].stage.partial_aggregate();
        let mut inputs = Vec::new();
        for &need in &self.runs[at].needs {
            let need_spec = &self.pipeline.stages[need];
            let need_run = &self.runs[need];
            // How many inputs the settled item `source` gives; `None` while it is not settled.
            let mut gather = |source: &str| -> Result<Option<usize>, (Hold, String)> {
                let label = || format!("{}:{source}", need_spec.name);
                match need_run.states.get_key_value(source) {
                    Some((id, ItemState::Settled(settled))) => {
                        let before = inputs.len();
                        let coarser = need_spec.level < level;
                        for (name, hash) in &settled.outputs {
                            if (!coarser || output_visible_to(name, item))
                                && reads
                                    .iter()
                                    .any(|p| p.stage == need_spec.name && p.matches(name))
                            {
                                inputs.push(InputRef {
                                    need: &need_spec.name,
                                    item: id,
                                    name,
                                    hash: *hash,
                                });
                            }
                        }
                        Ok(Some(inputs.len() - before))
                    }
                    Some((_, ItemState::Failed | ItemState::Held(Hold::Blocked))) => {
                        Err((Hold::Blocked, label()))
                    }
                    Some((_, ItemState::Held(Hold::NotSelected))) => {
                        Err((Hold::NotSelected, label()))
                    }
                    Some((_, ItemState::Held(Hold::StillFailed))) => {
                        Err((Hold::StillFailed, label()))
                    }
                    Some((_, ItemState::Held(_))) => Err((Hold::Waiting, label())),
                    Some((_, ItemState::Running)) => Ok(None),
                    None if need_run.finished => {
                        Err((Hold::Blocked, format!("{} (no such item)", label())))
                    }
                    None => Ok(None),
                }
            };
            if need_spec.level <= level {
                let Some(given) = gather(need_spec.level.ancestor_of(item))? else {
                    return Ok(None);
                };
                // A partial aggregate that left this item out (it failed upstream) holds it.
                if need_spec.level < level && need_spec.stage.partial_aggregate() && given == 0 {
                    return Err((
                        Hold::Blocked,
                        format!("{} (it has nothing for this item)", need_spec.name),
                    ));
                }
            } else {
                if !need_run.finished {
                    return Ok(None);
                }
                // An aggregate over part of its scope would be silently wrong: anything upstream
                // that failed or was held within the scope holds it too.
                for &upstream in &self.upstream[need] {
                    let upstream_run = &self.runs[upstream];
                    let upstream_level = self.pipeline.stages[upstream].level;
                    for (id, state) in &upstream_run.states {
                        let in_scope = upstream_level >= level && level.ancestor_of(id) == item;
                        let hold = match state {
                            ItemState::Failed
                            | ItemState::Held(Hold::Blocked | Hold::StillFailed)
                                if partial =>
                            {
                                continue;
                            }
                            ItemState::Failed | ItemState::Held(Hold::Blocked) => Hold::Blocked,
                            ItemState::Held(Hold::NotSelected | Hold::StillFailed) => {
                                Hold::NotSelected
                            }
                            ItemState::Held(_) | ItemState::Running => Hold::Waiting,
                            ItemState::Settled(_) => continue,
                        };
                        if in_scope {
                            return Err((
                                hold,
                                format!("{}:{id}", self.pipeline.stages[upstream].name),
                            ));
                        }
                    }
                }
                let mut under: Vec<&str> = need_run
                    .states
                    .keys()
                    .map(|k| &**k)
                    .filter(|i| level.ancestor_of(i) == item)
                    .collect();
                under.sort_unstable();
                for source in under {
                    match gather(source) {
                        Err((Hold::Blocked | Hold::StillFailed, _)) if partial => {}
                        gathered => {
                            gathered?;
                        }
                    }
                }
            }
        }
        Ok(Some(inputs))
    }

    fn decide(
        &self,
        at: usize,
        item: &str,
        source: Option<&SourceItem>,
    ) -> Result<Decision, BuildError> {
        let mut inputs = match source {
            Some(source) => vec![InputRef {
                need: SOURCE_INPUT,
                item,
                name: SOURCE_INPUT,
                hash: source.fingerprint,
            }],
            None => match self.gather_inputs(at, item) {
                Ok(Some(inputs)) => inputs,
                Ok(None) => return Ok(Decision::Pending),
                Err((hold, on)) => {
                    let verdict = if matches!(hold, Hold::Blocked | Hold::StillFailed) {
                        Verdict::Blocked { by: on }
                    } else {
                        Verdict::Waiting { on }
                    };
                    return Ok(Decision::Hold(hold, verdict));
                }
            },
        };
        let run = &self.runs[at];
        let key = run.fingerprint.key(&mut inputs);
        let verdict = match run.stored.get(item) {
            None => Verdict::NeverBuilt,
            Some(record) if record.failed() => Verdict::FailedLastTime {
                error: record.error.clone().unwrap_or_default(),
            },
            Some(record) if record.key != Some(key) => {
                let mut changes = Vec::new();
                if self.explaining(item)
                    && let Some(old) = self
                        .resources
                        .store
                        .index()
                        .key_parts(&self.pipeline.stages[at].name, item)?
                {
                    changes = old.changes_to(&run.fingerprint.parts_with(&inputs));
                }
                Verdict::Changed { changes }
            }
            Some(_) => return Ok(Decision::Fresh),
        };
        if let Some(record) = self.reusable(at, item, key)? {
            return Ok(Decision::Reuse {
                record: Box::new(record),
                parts: Box::new(run.fingerprint.parts_with(&inputs)),
            });
        }
        if !self.selected(at, item) {
            let failed_on_these_inputs = matches!(verdict, Verdict::FailedLastTime { .. })
                && run.stored.get(item).is_some_and(|r| r.key == Some(key));
            let hold = if failed_on_these_inputs {
                Hold::StillFailed
            } else {
                Hold::NotSelected
            };
            return Ok(Decision::Hold(hold, verdict));
        }
        if self.options.dry_run && !self.probes(at) {
            return Ok(Decision::Hold(Hold::WouldRun, verdict));
        }
        let parts = Box::new(run.fingerprint.parts_with(&inputs));
        let inputs = inputs
            .iter()
            .filter(|i| i.need != SOURCE_INPUT)
            .map(|i| Input {
                need: i.need.to_string(),
                item: i.item.to_string(),
                name: i.name.to_string(),
                hash: i.hash,
            })
            .collect();
        Ok(Decision::Run {
            key,
            parts,
            inputs,
            verdict,
        })
    }

    /// Whether a dry run runs stage `at`'s items from the caches ([`BuildOptions::probe`]).
    fn probes(&self, at: usize) -> bool {
        self.options.dry_run && self.options.probe.contains(&self.pipeline.stages[at].name)
    }

    /// The record of a successful run of this (stage, item) with cache key `key`, from the
    /// action cache, when every output it names is still stored.
    fn reusable(
        &self,
        at: usize,
        item: &str,
        key: ContentHash,
    ) -> Result<Option<Record>, BuildError> {
        let store = &self.resources.store;
        let stage = &self.pipeline.stages[at].name;
        let Some(action) = store.action(stage, item, &key)? else {
            return Ok(None);
        };
        let whole = action
            .record
            .outputs
            .values()
            .all(|hash| store.has_blob(hash));
        Ok((whole && !action.record.failed()).then_some(action.record))
    }

    /// Decides what to do with one item whose id is known: reuse, hold, or run.
    fn resolve(
        &mut self,
        at: usize,
        item: &ItemId,
        source: Option<SourceItem>,
    ) -> Result<(), BuildError> {
        if !self.runs[at].active
            || self.runs[at].states.contains_key(item)
            || !self.is_known(at, item)
        {
            return Ok(());
        }
        match self.decide(at, item, source.as_ref())? {
            Decision::Pending => Ok(()),
            Decision::Hold(hold, verdict) => {
                self.explain(at, item, verdict);
                self.hold(at, item, hold)
            }
            Decision::Fresh => {
                self.explain(at, item, Verdict::Fresh);
                let record = self.runs[at]
                    .stored
                    .remove(&**item)
                    .expect("a fresh item has a record");
                self.settle_unrun(at, item, record)
            }
            Decision::Reuse { record, parts } => {
                self.explain(at, item, Verdict::Reused);
                if !self.options.dry_run {
                    let stage = &self.pipeline.stages[at].name;
                    self.resources
                        .store
                        .index()
                        .put(stage, item, &record, Some(&parts))?;
                }
                self.runs[at].stored.remove(&**item);
                self.settle_unrun(at, item, *record)
            }
            Decision::Run {
                key,
                parts,
                inputs,
                verdict,
            } => {
                self.explain(at, item, verdict);
                self.dispatch(at, item, key, *parts, inputs, source.map(|s| s.payload));
                Ok(())
            }
        }
    }

    /// Settles an item with the outputs of a run made before (fresh, or from the action cache).
    fn settle_unrun(&mut self, at: usize, item: &ItemId, record: Record) -> Result<(), BuildError> {
        let mut settled = Settled {
            outputs: record.outputs,
            children: record.children,
        };
        if let Err(error) = self.overlay_outputs(at, item, &mut settled) {
            return self.fail_overlaid(at, item, error);
        }
        self.runs[at].counts.fresh += 1;
        self.settle(at, item, settled)
    }

    fn hold(&mut self, at: usize, item: &ItemId, hold: Hold) -> Result<(), BuildError> {
        let counts = &mut self.runs[at].counts;
        match hold {
            Hold::Blocked => counts.blocked += 1,
            Hold::NotSelected | Hold::StillFailed => counts.not_selected += 1,
            Hold::WouldRun => counts.would_run += 1,
            Hold::Waiting => counts.waiting += 1,
        }
        self.runs[at]
            .states
            .insert(item.clone(), ItemState::Held(hold));
        self.cascade(at, item, None)
    }

    fn dispatch(
        &mut self,
        at: usize,
        item: &ItemId,
        key: ContentHash,
        parts: KeyParts,
        inputs: Vec<Input>,
        source: Option<serde_json::Value>,
    ) {
        let spec = &self.pipeline.stages[at];
        self.runs[at]
            .states
            .insert(item.clone(), ItemState::Running);
        self.runs[at].running += 1;
        self.in_flight += 1;
        self.progress.inc_length(1);
        let ctx = JobCtx {
            stage: spec.name.clone(),
            item: item.to_string(),
            inputs,
            source,
            params: spec.params.clone(),
            prompts: spec.prompts.clone(),
            resources: self.resources.clone(),
            usage: Mutex::new(Usage::default()),
            stats: Mutex::new(BTreeMap::new()),
            answers_cost: Mutex::new(Default::default()),
        };
        let stage = spec.stage.clone();
        let level = spec.level;
        let spawns = stage.spawns();
        let writes = spec.outputs.clone();
        let jobs = self.jobs.clone();
        let done_tx = self.done_tx.clone();
        let item = item.clone();
        let probing = self.probes(at);
        tokio::spawn(async move {
            let _permit = jobs
                .acquire_owned()
                .await
                .expect("the job pool is never closed");
            let started = Instant::now();
            let ctx = Arc::new(ctx);
            let corrupt = verify_inputs(&ctx);
            let result: Result<Outputs, String> = if !corrupt.is_empty() {
                let problems: Vec<String> = corrupt
                    .iter()
                    .map(|(input, e)| format!("input `{}`: {e}", input.key_ref().label()))
                    .collect();
                Err(problems.join("; "))
            } else {
                let task_ctx = ctx.clone();
                match tokio::spawn(
                    async move { stage.run(&task_ctx).await.map_err(|f| f.to_string()) },
                )
                .await
                {
                    Ok(result) => result,
                    Err(join) => Err(match join.try_into_panic() {
                        Ok(panic) => {
                            format!("the stage panicked: {}", panic_message(panic.as_ref()))
                        }
                        Err(join) => format!("the stage did not finish: {join}"),
                    }),
                }
            };
            let result = result
                .and_then(|outputs| check_declared(&writes, outputs))
                .and_then(|outputs| check_children(&ctx.item, level, spawns, outputs));
            // Errors and flags quote servers and files: no key goes into the index or the report.
            let result = result
                .map(redact_flags)
                .map_err(crate::redact::redact_owned);
            let usage = ctx.usage.lock().expect("usage lock").clone();
            let stats = std::mem::take(&mut *ctx.stats.lock().expect("stats lock"));
            let record = Record {
                key: Some(key),
                outputs: result
                    .as_ref()
                    .map(|o| o.artifacts.clone())
                    .unwrap_or_default(),
                children: result
                    .as_ref()
                    .map(|o| o.children.clone())
                    .unwrap_or_default(),
                finished_unix_ms: now_unix_ms(),
                duration_ms: started.elapsed().as_millis() as u64,
                usage: usage.clone(),
                error: result.as_ref().err().cloned(),
                flags: result.as_ref().map(|o| o.flags.clone()).unwrap_or_default(),
                problems: result
                    .as_ref()
                    .map(|o| o.problems.clone())
                    .unwrap_or_default(),
                stats,
            };
            // The record names blobs only once they are durable. A probe commits nothing.
            let store = &ctx.resources.store;
            let committed = match probing {
                true => Ok(()),
                false => store.sync_blobs().and_then(|()| {
                    store
                        .index()
                        .put(&ctx.stage, &ctx.item, &record, Some(&parts))
                }),
            };
            if committed.is_ok() && !probing {
                store.publish(&ctx.stage, &ctx.item, &record);
            }
            let result = match (result, committed) {
                (_, Err(e)) => Err(format!("could not record the result: {e}")),
                (Ok(outputs), Ok(())) => Ok(Settled {
                    outputs: outputs.artifacts,
                    children: outputs.children,
                }),
                (Err(e), Ok(())) => Err(e),
            };
            let corrupt_producers = corrupt
                .into_iter()
                .map(|(input, _)| (input.need, input.item))
                .collect();
            let _ = done_tx.send(JobDone {
                stage: at,
                item,
                result,
                usage,
                corrupt_producers,
                probed: probing.then_some(record.stats),
            });
        });
    }

    fn apply(&mut self, done: JobDone) -> Result<(), BuildError> {
        let at = done.stage;
        self.runs[at].running -= 1;
        self.progress.inc(1);
        self.progress
            .set_message(format!("{} {}", self.pipeline.stages[at].name, done.item));
        self.report.usage.add(&done.usage);
        if let Some(stats) = done.probed {
            return self.settle_probe(at, &done.item, done.result, stats);
        }
        for (stage, item) in &done.corrupt_producers {
            // Forget the producer's record so the next build makes the blob again.
            self.resources.store.index().remove(stage, item)?;
        }
        match done.result {
            Ok(mut settled) => {
                if let Err(error) = self.overlay_outputs(at, &done.item, &mut settled) {
                    return self.fail_overlaid(at, &done.item, error);
                }
                self.runs[at].counts.ran += 1;
                self.settle(at, &done.item, settled)
            }
            Err(error) => self.fail_overlaid(at, &done.item, error),
        }
    }

    /// A dry run's probe of (stage `at`, `item`) ended: an item it ran from the caches alone is
    /// settled on what it made; one it could not would run.
    fn settle_probe(
        &mut self,
        at: usize,
        item: &ItemId,
        result: Result<Settled, String>,
        stats: BTreeMap<String, u64>,
    ) -> Result<(), BuildError> {
        self.report.probes.push(Probe {
            stage: self.pipeline.stages[at].name.clone(),
            item: item.to_string(),
            finished: result.is_ok(),
            stats,
        });
        match result {
            Ok(mut settled) => {
                if let Err(error) = self.overlay_outputs(at, item, &mut settled) {
                    return self.fail_overlaid(at, item, error);
                }
                self.runs[at].counts.would_run += 1;
                self.settle(at, item, settled)
            }
            Err(_) => self.hold(at, item, Hold::WouldRun),
        }
    }

    /// Marks (stage `at`, `item`) failed in this build with `error`, holding what needs it.
    fn fail_overlaid(&mut self, at: usize, item: &ItemId, error: String) -> Result<(), BuildError> {
        self.runs[at].counts.failed += 1;
        self.runs[at].states.insert(item.clone(), ItemState::Failed);
        self.report.failures.push(ItemFailure {
            stage: self.pipeline.stages[at].name.clone(),
            item: item.to_string(),
            error,
        });
        self.cascade(at, item, None)
    }

    /// Puts the resources' [`crate::OutputOverlay`] over the outputs later stages read of
    /// (stage `at`, `item`); its replacements are stored (hashed only, in a dry run) like any
    /// output, and made durable by the next record that names them.
    fn overlay_outputs(&self, at: usize, item: &str, settled: &mut Settled) -> Result<(), String> {
        let Some(overlay) = &self.resources.overlay else {
            return Ok(());
        };
        let stage = &self.pipeline.stages[at].name;
        if !overlay.covers(stage, item) {
            return Ok(());
        }
        let store = &self.resources.store;
        for (name, hash) in settled.outputs.iter_mut() {
            let Some(bytes) = overlay.replace(store, stage, item, name, *hash)? else {
                continue;
            };
            *hash = if self.options.dry_run {
                ContentHash::of(&bytes)
            } else {
                store
                    .put_blob(&bytes)
                    .map_err(|e| format!("storing the reviewed {name}: {e}"))?
            };
        }
        Ok(())
    }

    /// Records a failure that happened before the item could run (bad source entry).
    fn fail_item(
        &mut self,
        at: usize,
        item: ItemId,
        error: String,
        key: Option<ContentHash>,
    ) -> Result<(), BuildError> {
        let error = crate::redact::redact_owned(error);
        let stage = self.pipeline.stages[at].name.clone();
        if !self.options.dry_run {
            let record = Record {
                key,
                outputs: BTreeMap::new(),
                children: Vec::new(),
                finished_unix_ms: now_unix_ms(),
                duration_ms: 0,
                usage: Usage::default(),
                error: Some(error.clone()),
                flags: Vec::new(),
                problems: Vec::new(),
                stats: BTreeMap::new(),
            };
            self.resources
                .store
                .index()
                .put(&stage, &item, &record, None)?;
        }
        self.explain(
            at,
            &item,
            Verdict::FailedLastTime {
                error: error.clone(),
            },
        );
        self.runs[at].counts.failed += 1;
        self.runs[at].states.insert(item.clone(), ItemState::Failed);
        self.report.failures.push(ItemFailure {
            stage,
            item: item.to_string(),
            error,
        });
        self.cascade(at, &item, None)
    }

    fn settle(&mut self, at: usize, item: &ItemId, settled: Settled) -> Result<(), BuildError> {
        let settled = Arc::new(settled);
        self.runs[at]
            .states
            .insert(item.clone(), ItemState::Settled(settled.clone()));
        self.cascade(at, item, Some(&settled))
    }

    /// Offers the items that (stage `at`, `item`) may have unblocked to their stages.
    fn cascade(
        &mut self,
        at: usize,
        item: &ItemId,
        settled: Option<&Settled>,
    ) -> Result<(), BuildError> {
        let mut offers: Vec<(usize, ItemId)> = Vec::new();
        for &dependent in &self.same_level_for[at] {
            self.runs[dependent].known.insert(item.clone());
        }
        if let Some(settled) = settled {
            for &dependent in &self.spawned_for[at] {
                let level = self.pipeline.stages[dependent].level;
                for child in settled
                    .children
                    .iter()
                    .filter(|c| level.ancestor_of(c) == c.as_str())
                {
                    let child: ItemId = Arc::from(child.as_str());
                    self.runs[dependent].known.insert(child.clone());
                    offers.push((dependent, child));
                }
            }
        }
        let need_level = self.pipeline.stages[at].level;
        for &dependent in &self.dependents[at] {
            if !self.active[dependent] {
                continue;
            }
            let level = self.pipeline.stages[dependent].level;
            if need_level == level {
                offers.push((dependent, item.clone()));
            } else if need_level < level {
                let prefix = format!("{item}/");
                let known = &self.runs[dependent].known;
                offers.extend(
                    known
                        .range::<str, _>((
                            std::ops::Bound::Included(prefix.as_str()),
                            std::ops::Bound::Unbounded,
                        ))
                        .take_while(|k| k.starts_with(&prefix))
                        .map(|k| (dependent, k.clone())),
                );
            }
        }
        for (dependent, offered) in offers {
            self.resolve(dependent, &offered, None)?;
        }
        Ok(())
    }

    /// Marks stages whose every item is decided, creating aggregate items and blocking items
    /// whose inputs can no longer appear. Repeats until nothing changes.
    fn finish_stages(&mut self) -> Result<(), BuildError> {
        loop {
            let mut changed = false;
            for at in 0..self.runs.len() {
                if self.runs[at].finished || self.runs[at].running > 0 {
                    continue;
                }
                if !self.runs[at].needs.iter().all(|&n| self.runs[n].finished) {
                    continue;
                }
                if matches!(self.runs[at].driver, Driver::Aggregate) {
                    let level = self.pipeline.stages[at].level;
                    let items: BTreeSet<ItemId> = self.runs[at]
                        .needs
                        .iter()
                        .flat_map(|&need| self.runs[need].states.keys())
                        .map(|i| Arc::from(level.ancestor_of(i)))
                        .collect();
                    for item in items {
                        self.runs[at].known.insert(item.clone());
                        self.resolve(at, &item, None)?;
                    }
                }
                if self.runs[at].running > 0 {
                    changed = true;
                    continue;
                }
                let undecided: Vec<ItemId> = self.runs[at]
                    .known
                    .iter()
                    .filter(|k| !self.runs[at].states.contains_key(*k))
                    .cloned()
                    .collect();
                for item in undecided {
                    self.resolve(at, &item, None)?;
                    if !self.runs[at].states.contains_key(&item) {
                        self.explain(
                            at,
                            &item,
                            Verdict::Blocked {
                                by: "an input that never appeared".into(),
                            },
                        );
                        self.hold(at, &item, Hold::Blocked)?;
                    }
                }
                if self.runs[at].running == 0 {
                    self.runs[at].finished = true;
                    changed = true;
                }
            }
            if !changed {
                return Ok(());
            }
        }
    }
}

fn redact_flags(mut outputs: Outputs) -> Outputs {
    outputs.flags = outputs
        .flags
        .into_iter()
        .map(crate::redact::redact_owned)
        .collect();
    for problem in &mut outputs.problems {
        problem.message = crate::redact::redact_owned(std::mem::take(&mut problem.message));
    }
    outputs
}

/// Reads every input blob once before a run: a corrupt or missing input is never used.
/// A stage writes only the ports it declares: anything else would be invisible to the graph
/// and to every reader's cache key.
fn check_declared(writes: &[PortId], outputs: Outputs) -> Result<Outputs, String> {
    match outputs
        .artifacts
        .keys()
        .find(|name| !writes.iter().any(|p| p.matches(name)))
    {
        None => Ok(outputs),
        Some(name) => Err(format!(
            "the stage wrote `{name}`, which is none of the ports it declares"
        )),
    }
}

fn verify_inputs<E>(ctx: &JobCtx<E>) -> Vec<(Input, StoreError)> {
    let store = &ctx.resources.store;
    ctx.inputs
        .iter()
        .filter_map(|input| {
            store
                .get_blob(&input.hash)
                .err()
                .map(|e| (input.clone(), e))
        })
        .collect()
}

/// A run may only introduce children of its own item, at the level it declared.
fn check_children(
    item: &str,
    level: Level,
    spawns: Option<Level>,
    outputs: Outputs,
) -> Result<Outputs, String> {
    if outputs.children.is_empty() {
        return Ok(outputs);
    }
    let Some(child_level) = spawns.filter(|l| *l > level) else {
        return Err(
            "the stage returned child items but does not declare which level it spawns".into(),
        );
    };
    for child in &outputs.children {
        if !child_level.fits(child) || level.ancestor_of(child) != item {
            return Err(format!(
                "child item `{child}` is not a {child_level} id under `{item}`"
            ));
        }
    }
    Ok(outputs)
}

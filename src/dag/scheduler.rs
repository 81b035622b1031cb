//! Runs a build: items stream through the DAG as their inputs settle. An item whose key matches
//! its stored record is settled without running (and its unchanged outputs keep downstream keys
//! unchanged: early cutoff); others run as tokio tasks bounded by `-j`, each committing its
//! record the moment it finishes. A failure is recorded and blocks only what depends on it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::{Semaphore, mpsc};

use crate::dag::key::{KeyChange, KeyParts, StageFingerprint};
use crate::dag::spec::Pipeline;
use crate::dag::store::{Record, StoreError, Usage};
use crate::dag::{BuildResources, Input, JobCtx, Level, Outputs, SourceItem};
use crate::hash::ContentHash;

#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Build this stage and what it needs, nothing after it.
    pub until: Option<String>,
    /// Run only these stages; others are reused where fresh and otherwise left alone.
    pub only: Vec<String>,
    /// Run only items whose id matches this glob (`demo/s01e01*`).
    pub items: Option<String>,
    /// Plan and report, run nothing, write nothing.
    pub dry_run: bool,
    /// Jobs in flight at once.
    pub jobs: usize,
    pub progress: bool,
    /// Collect why this item would or would not run (`viss status --why`).
    pub explain: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("no stage named `{0}`; `viss graph` lists the stages")]
    UnknownStage(String),
    #[error("--items {pattern:?} is not a valid glob: {message}")]
    BadGlob { pattern: String, message: String },
    #[error(transparent)]
    Store(#[from] StoreError),
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

#[derive(Debug, Clone, Serialize)]
pub struct ItemFailure {
    pub stage: String,
    pub item: String,
    pub error: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    Fresh,
    NeverBuilt,
    Changed { changes: Vec<KeyChange> },
    FailedLastTime { error: String },
    OutputsMissing,
    Waiting { on: String },
    Blocked { by: String },
}

#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    pub stage: String,
    pub item: String,
    #[serde(flatten)]
    pub verdict: Verdict,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct BuildReport {
    /// In pipeline order.
    pub stages: Vec<(String, StageCounts)>,
    pub failures: Vec<ItemFailure>,
    pub explanations: Vec<Explanation>,
    pub usage: Usage,
    pub seconds: f64,
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

#[derive(Debug, Clone)]
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
    states: HashMap<String, ItemState>,
    known: BTreeSet<String>,
    driver: Driver,
    needs: Vec<usize>,
    running: usize,
    finished: bool,
    may_run: bool,
    counts: StageCounts,
}

struct JobDone {
    stage: usize,
    item: String,
    result: Result<Settled, String>,
    usage: Usage,
    corrupt_producers: Vec<(String, String)>,
}

struct Build<'a> {
    pipeline: &'a Pipeline,
    resources: Arc<BuildResources>,
    options: &'a BuildOptions,
    glob: Option<globset::GlobMatcher>,
    active: Vec<bool>,
    runs: Vec<StageRun>,
    dependents: Vec<Vec<usize>>,
    spawned_for: Vec<Vec<usize>>,
    same_level_for: Vec<Vec<usize>>,
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
pub async fn build(
    pipeline: &Pipeline,
    resources: Arc<BuildResources>,
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
    let active_names = options.until.as_ref().map(|u| pipeline.with_ancestors(u));
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
        let mut prompts = BTreeMap::new();
        for (name, path) in &spec.prompts {
            let bytes = std::fs::read(path).map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
            prompts.insert(name.clone(), ContentHash::of(&bytes));
        }
        let fingerprint = StageFingerprint::new(
            &spec.name,
            spec.version,
            spec.params.clone(),
            prompts,
            BTreeMap::new(),
        );
        let stored = if active[at] {
            resources
                .store
                .index()
                .scan_stage(&spec.name)?
                .into_iter()
                .collect()
        } else {
            HashMap::new()
        };
        let may_run = options.only.is_empty() || options.only.contains(&spec.name);
        runs.push(StageRun {
            fingerprint,
            stored,
            states: HashMap::new(),
            known: BTreeSet::new(),
            driver,
            needs,
            running: 0,
            finished: !active[at],
            may_run,
            counts: StageCounts::default(),
        });
    }
    let mut spawned_for = vec![Vec::new(); stage_count];
    let mut same_level_for = vec![Vec::new(); stage_count];
    for (at, run) in runs.iter().enumerate() {
        match run.driver {
            Driver::Children(spawner) => spawned_for[spawner].push(at),
            Driver::SameLevel(need) => same_level_for[need].push(at),
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
        jobs: Arc::new(Semaphore::new(options.jobs.max(1))),
        done_tx,
        in_flight: 0,
        report: BuildReport::default(),
        progress,
    };

    build.plan_sources()?;
    loop {
        build.finish_stages();
        if build.in_flight == 0 {
            break;
        }
        let done = done_rx.recv().await.expect("the build holds a sender");
        build.in_flight -= 1;
        build.apply(done)?;
    }
    build.progress.finish_and_clear();
    if !options.dry_run {
        build.resources.store.index().flush()?;
    }
    let mut report = build.report;
    report.stages = pipeline
        .stages
        .iter()
        .zip(&build.runs)
        .zip(&build.active)
        .filter(|(_, active)| **active)
        .map(|((spec, run), _)| (spec.name.clone(), run.counts.clone()))
        .collect();
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

impl Build<'_> {
    fn plan_sources(&mut self) -> Result<(), BuildError> {
        for at in 0..self.runs.len() {
            if !self.active[at] || !matches!(self.runs[at].driver, Driver::Sources) {
                continue;
            }
            let spec = &self.pipeline.stages[at];
            let items = match spec
                .stage
                .source_items(&self.resources.project, &self.resources.store)
            {
                Ok(items) => items,
                Err(failure) => {
                    self.fail_item(at, "*", failure.to_string(), None)?;
                    continue;
                }
            };
            for entry in items {
                match entry {
                    Ok(source) => {
                        self.runs[at].known.insert(source.id.clone());
                        self.resolve(at, &source.id.clone(), Some(source))?;
                    }
                    Err(problem) => {
                        self.runs[at].known.insert(problem.id.clone());
                        self.fail_item(at, &problem.id, problem.message, None)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn selected(&self, at: usize, item: &str) -> bool {
        self.runs[at].may_run && self.glob.as_ref().is_none_or(|g| g.is_match(item))
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
    fn gather_inputs(&self, at: usize, item: &str) -> Result<Option<Vec<Input>>, (Hold, String)> {
        let run = &self.runs[at];
        let level = self.pipeline.stages[at].level;
        let mut inputs = Vec::new();
        for &need in &run.needs {
            let need_spec = &self.pipeline.stages[need];
            let need_run = &self.runs[need];
            let sources: Vec<&str> = if need_spec.level <= level {
                vec![need_spec.level.ancestor_of(item)]
            } else {
                if !need_run.finished {
                    return Ok(None);
                }
                need_run
                    .states
                    .keys()
                    .filter(|i| level.ancestor_of(i) == item)
                    .map(String::as_str)
                    .collect()
            };
            for source in sources {
                let label = format!("{}:{source}", need_spec.name);
                match need_run.states.get(source) {
                    Some(ItemState::Settled(settled)) => {
                        for (name, hash) in &settled.outputs {
                            inputs.push(Input {
                                need: need_spec.name.clone(),
                                item: source.to_string(),
                                name: name.clone(),
                                hash: *hash,
                            });
                        }
                    }
                    Some(ItemState::Failed) => return Err((Hold::Blocked, label)),
                    Some(ItemState::Held(Hold::Blocked)) => return Err((Hold::Blocked, label)),
                    Some(ItemState::Held(hold)) => {
                        let hold = if *hold == Hold::NotSelected {
                            Hold::NotSelected
                        } else {
                            Hold::Waiting
                        };
                        return Err((hold, label));
                    }
                    Some(ItemState::Running) => return Ok(None),
                    None if need_run.finished => {
                        return Err((Hold::Blocked, format!("{label} (no such item)")));
                    }
                    None => return Ok(None),
                }
            }
        }
        Ok(Some(inputs))
    }

    /// Decides what to do with one item whose id is known: reuse, hold, or run.
    fn resolve(
        &mut self,
        at: usize,
        item: &str,
        source: Option<SourceItem>,
    ) -> Result<(), BuildError> {
        if self.runs[at].states.contains_key(item) || !self.runs[at].known.contains(item) {
            return Ok(());
        }
        let inputs = match &source {
            Some(source) => vec![Input {
                need: "source".into(),
                item: item.to_string(),
                name: "source".into(),
                hash: source.fingerprint,
            }],
            None => match self.gather_inputs(at, item) {
                Ok(Some(inputs)) => inputs,
                Ok(None) => return Ok(()),
                Err((hold, on)) => {
                    let verdict = match hold {
                        Hold::Blocked => Verdict::Blocked { by: on },
                        _ => Verdict::Waiting { on },
                    };
                    self.explain(at, item, verdict);
                    return self.hold(at, item, hold);
                }
            },
        };
        let labelled: BTreeMap<String, ContentHash> = inputs
            .iter()
            .map(|i| {
                if i.need == "source" {
                    ("source".to_string(), i.hash)
                } else {
                    (i.label(), i.hash)
                }
            })
            .collect();
        let key = self.runs[at].fingerprint.key(&labelled);
        let store = &self.resources.store;
        let verdict = match self.runs[at].stored.get(item) {
            None => Verdict::NeverBuilt,
            Some(record) if record.failed() => Verdict::FailedLastTime {
                error: record.error.clone().unwrap_or_default(),
            },
            Some(record) if record.key != Some(key) => {
                let stage = &self.pipeline.stages[at].name;
                let changes = if self.explaining(item) {
                    let now = self.runs[at].fingerprint.parts_with(labelled.clone());
                    match store.index().key_parts(stage, item)? {
                        Some(old) => old.changes_to(&now),
                        None => Vec::new(),
                    }
                } else {
                    Vec::new()
                };
                Verdict::Changed { changes }
            }
            Some(record) if !record.outputs.values().all(|h| store.has_blob(h)) => {
                Verdict::OutputsMissing
            }
            Some(_) => Verdict::Fresh,
        };
        if matches!(verdict, Verdict::Fresh) {
            self.explain(at, item, Verdict::Fresh);
            let record = &self.runs[at].stored[item];
            let settled = Settled {
                outputs: record.outputs.clone(),
                children: record.children.clone(),
            };
            self.runs[at].counts.fresh += 1;
            return self.settle(at, item, settled);
        }
        self.explain(at, item, verdict);
        if !self.selected(at, item) {
            return self.hold(at, item, Hold::NotSelected);
        }
        if self.options.dry_run {
            return self.hold(at, item, Hold::WouldRun);
        }
        let parts = self.runs[at].fingerprint.parts_with(labelled);
        self.dispatch(at, item, key, parts, inputs, source.map(|s| s.payload));
        Ok(())
    }

    fn hold(&mut self, at: usize, item: &str, hold: Hold) -> Result<(), BuildError> {
        let counts = &mut self.runs[at].counts;
        match hold {
            Hold::Blocked => counts.blocked += 1,
            Hold::NotSelected => counts.not_selected += 1,
            Hold::WouldRun => counts.would_run += 1,
            Hold::Waiting => counts.waiting += 1,
        }
        self.runs[at]
            .states
            .insert(item.to_string(), ItemState::Held(hold));
        self.cascade(at, item, None)
    }

    fn dispatch(
        &mut self,
        at: usize,
        item: &str,
        key: ContentHash,
        parts: KeyParts,
        inputs: Vec<Input>,
        source: Option<serde_json::Value>,
    ) {
        let spec = &self.pipeline.stages[at];
        self.runs[at]
            .states
            .insert(item.to_string(), ItemState::Running);
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
        };
        let stage = spec.stage.clone();
        let level = spec.level;
        let spawns = stage.spawns();
        let jobs = self.jobs.clone();
        let done_tx = self.done_tx.clone();
        tokio::spawn(async move {
            let _permit = jobs
                .acquire_owned()
                .await
                .expect("the job pool is never closed");
            let started = Instant::now();
            let ctx = Arc::new(ctx);
            let corrupt = verify_inputs(&ctx);
            let result: Result<Outputs, String> = if !corrupt.is_empty() {
                let names: Vec<String> = corrupt
                    .iter()
                    .map(|(input, e)| format!("input `{}`: {e}", input.label()))
                    .collect();
                Err(names.join("; "))
            } else {
                let task_ctx = ctx.clone();
                match tokio::spawn(
                    async move { stage.run(&task_ctx).await.map_err(|f| f.to_string()) },
                )
                .await
                {
                    Ok(result) => result,
                    Err(join) => Err(format!("the stage panicked: {join}")),
                }
            };
            let result =
                result.and_then(|outputs| check_children(&ctx.item, level, spawns, outputs));
            let usage = ctx.usage.lock().expect("usage lock").clone();
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
            };
            let committed =
                ctx.resources
                    .store
                    .index()
                    .put(&ctx.stage, &ctx.item, &record, Some(&parts));
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
                item: ctx.item.clone(),
                result,
                usage,
                corrupt_producers,
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
        for (stage, item) in &done.corrupt_producers {
            // Forget the producer's record so the next build makes the blob again.
            self.resources.store.index().remove(stage, item)?;
        }
        match done.result {
            Ok(settled) => {
                self.runs[at].counts.ran += 1;
                self.settle(at, &done.item, settled)
            }
            Err(error) => {
                self.runs[at].counts.failed += 1;
                self.runs[at]
                    .states
                    .insert(done.item.clone(), ItemState::Failed);
                self.report.failures.push(ItemFailure {
                    stage: self.pipeline.stages[at].name.clone(),
                    item: done.item.clone(),
                    error,
                });
                self.cascade(at, &done.item, None)
            }
        }
    }

    /// Records a failure that happened before the item could run (bad source entry).
    fn fail_item(
        &mut self,
        at: usize,
        item: &str,
        error: String,
        key: Option<ContentHash>,
    ) -> Result<(), BuildError> {
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
            };
            self.resources
                .store
                .index()
                .put(&stage, item, &record, None)?;
        }
        self.explain(
            at,
            item,
            Verdict::FailedLastTime {
                error: error.clone(),
            },
        );
        self.runs[at].counts.failed += 1;
        self.runs[at]
            .states
            .insert(item.to_string(), ItemState::Failed);
        self.report.failures.push(ItemFailure {
            stage,
            item: item.to_string(),
            error,
        });
        self.cascade(at, item, None)
    }

    fn settle(&mut self, at: usize, item: &str, settled: Settled) -> Result<(), BuildError> {
        let settled = Arc::new(settled);
        self.runs[at]
            .states
            .insert(item.to_string(), ItemState::Settled(settled.clone()));
        self.cascade(at, item, Some(&settled))
    }

    /// Offers the items that (stage `at`, `item`) may have unblocked to their stages.
    fn cascade(
        &mut self,
        at: usize,
        item: &str,
        settled: Option<&Settled>,
    ) -> Result<(), BuildError> {
        let mut offers: Vec<(usize, String)> = Vec::new();
        for &dependent in &self.same_level_for[at] {
            self.runs[dependent].known.insert(item.to_string());
        }
        if let Some(settled) = settled {
            for &dependent in &self.spawned_for[at] {
                let level = self.pipeline.stages[dependent].level;
                for child in &settled.children {
                    if level.ancestor_of(child) == child {
                        self.runs[dependent].known.insert(child.clone());
                    }
                }
            }
        }
        for &dependent in &self.dependents[at] {
            if !self.active[dependent] {
                continue;
            }
            let level = self.pipeline.stages[dependent].level;
            let need_level = self.pipeline.stages[at].level;
            if need_level == level {
                offers.push((dependent, item.to_string()));
            } else if need_level < level {
                let prefix = format!("{item}/");
                let under: Vec<String> = self.runs[dependent]
                    .known
                    .range(prefix.clone()..)
                    .take_while(|k| k.starts_with(&prefix))
                    .cloned()
                    .collect();
                offers.extend(under.into_iter().map(|k| (dependent, k)));
            }
        }
        for &dependent in &self.spawned_for[at] {
            if let Some(settled) = settled {
                offers.extend(settled.children.iter().map(|c| (dependent, c.clone())));
            }
        }
        for (dependent, offered) in offers {
            self.resolve(dependent, &offered, None)?;
        }
        Ok(())
    }

    /// Marks stages whose every item is decided, creating aggregate items and blocking items
    /// whose inputs can no longer appear. Repeats until nothing changes.
    fn finish_stages(&mut self) {
        loop {
            let mut changed = false;
            for at in 0..self.runs.len() {
                if self.runs[at].finished || self.runs[at].running > 0 {
                    continue;
                }
                let needs_done = self.runs[at].needs.iter().all(|&n| self.runs[n].finished);
                if !needs_done {
                    continue;
                }
                if matches!(self.runs[at].driver, Driver::Aggregate) {
                    let level = self.pipeline.stages[at].level;
                    let mut items = BTreeSet::new();
                    for &need in &self.runs[at].needs {
                        items.extend(
                            self.runs[need]
                                .states
                                .keys()
                                .map(|i| level.ancestor_of(i).to_string()),
                        );
                    }
                    for item in items {
                        self.runs[at].known.insert(item.clone());
                        let _ = self.resolve(at, &item, None);
                    }
                }
                if self.runs[at].running > 0 {
                    changed = true;
                    continue;
                }
                let undecided: Vec<String> = self.runs[at]
                    .known
                    .iter()
                    .filter(|k| !self.runs[at].states.contains_key(*k))
                    .cloned()
                    .collect();
                for item in undecided {
                    let _ = self.resolve(at, &item, None);
                    if !self.runs[at].states.contains_key(&item) {
                        let _ = self.hold(at, &item, Hold::Blocked);
                        self.explain(
                            at,
                            &item,
                            Verdict::Blocked {
                                by: "an input that never appeared".into(),
                            },
                        );
                    }
                }
                if self.runs[at].running == 0 {
                    self.runs[at].finished = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
    }
}

/// Reads every input blob once before a run: a corrupt or missing input is never used.
fn verify_inputs(ctx: &JobCtx) -> Vec<(Input, StoreError)> {
    let store = &ctx.resources.store;
    ctx.inputs
        .iter()
        .filter(|i| i.need != "source")
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

//! The scheduler's promises, tested through the engine's public API alone, on a small DAG of
//! test stages and an environment of the test's own (`TestEnv`, not the app's):
//!
//!   files (root: one episode item per `<inputs>/*.txt`) -> normalize -> count
//!                                                      \-> length
//!
//! `normalize` lowercases and re-spaces the words (so a case-only edit leaves its output
//! byte-identical) and drops the word its `strip` param names; `length` uses a "model" whose
//! identity the environment holds. Every stage counts its calls in the environment, so each
//! build's report is checked against what actually ran.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use viss_engine::hash::ContentHash;
use viss_engine::key::KeyChange;
use viss_engine::port::{Port, PortId};
use viss_engine::range::{BadSetting, Validate};
use viss_engine::scheduler::{BuildOptions, BuildReport, ItemFailure, StageCounts, Verdict};
use viss_engine::spec::{Defaults, NoParams, Pipeline, StageKind, load_stage};
use viss_engine::store::{Record, Store};
use viss_engine::{
    BuildResources, JobCtx, Level, Outputs, SourceItem, SourceProblem, Stage, StageFailure,
};

type Json = serde_json::Value;

const TEXT: Port<Json> = Port::item("files", "text");
const NORMALIZED: Port<Json> = Port::item("normalize", "normalized");
const COUNT: Port<Json> = Port::item("count", "count");
const LENGTH: Port<Json> = Port::item("length", "length");
/// `length`'s port after its record type was given a schema of its own: the same bytes are
/// written, but what the record may hold changed.
const LENGTH_TYPED: Port<LengthRecord> = Port::item("length", "length");

#[derive(Serialize, Deserialize, schemars::JsonSchema)]
struct LengthRecord {
    chars: usize,
}

thread_local! {
    /// The version of the shared code `count` rests on. Each test runs on its own thread (a
    /// current-thread runtime, where the scheduler asks for `code`), so raising it touches one
    /// test alone.
    static SHARED_CHECKS: std::cell::Cell<u32> = const { std::cell::Cell::new(1) };
    /// Whether `length` declares its port with the typed record (`LENGTH_TYPED`).
    static LENGTH_IS_TYPED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// What the test stages see of the world: where their sources are, the identity of the model
/// `length` uses, a word that makes `normalize` fail (a stand-in for a transient outage), and
/// how often each stage's `run` was called.
struct TestEnv {
    inputs: PathBuf,
    model: Mutex<String>,
    fail_on: Mutex<Option<String>>,
    calls: Mutex<BTreeMap<String, usize>>,
}

impl TestEnv {
    fn called(&self, stage: &str) {
        *self
            .calls
            .lock()
            .unwrap()
            .entry(stage.to_string())
            .or_default() += 1;
    }
}

fn record(ctx: &JobCtx<TestEnv>, port: &Port<Json>, value: Json) -> Result<Outputs, StageFailure> {
    let mut outputs = Outputs::default();
    outputs.put(ctx, port, &value)?;
    Ok(outputs)
}

fn text_of(record: &Json) -> &str {
    record["text"].as_str().unwrap_or_default()
}

struct Files;

impl From<NoParams> for Files {
    fn from(_: NoParams) -> Self {
        Files
    }
}

#[async_trait::async_trait]
impl Stage<TestEnv> for Files {
    fn level(&self) -> Level {
        Level::Episode
    }
    fn inputs(&self) -> Vec<PortId> {
        Vec::new()
    }
    fn outputs(&self) -> Vec<PortId> {
        vec![TEXT.id()]
    }
    fn source_items(
        &self,
        env: &TestEnv,
        _: &Store,
    ) -> Result<Vec<Result<SourceItem, SourceProblem>>, StageFailure> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&env.inputs)?
            .map(|entry| entry.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        paths.sort();
        let mut items = Vec::new();
        for path in paths {
            let text = std::fs::read_to_string(&path)?;
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            items.push(Ok(SourceItem {
                id: format!("t/{stem}"),
                fingerprint: ContentHash::of(text.as_bytes()),
                payload: serde_json::json!({ "text": text }),
            }));
        }
        Ok(items)
    }
    async fn run(&self, ctx: &JobCtx<TestEnv>) -> Result<Outputs, StageFailure> {
        ctx.env().called("files");
        let payload: Json = ctx.source()?;
        record(ctx, &TEXT, payload)
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct NormalizeParams {
    /// A word left out of the normalized text ("": none).
    strip: String,
}

impl Validate for NormalizeParams {
    fn validate(&self) -> Result<(), BadSetting> {
        Ok(())
    }
}

struct Normalize(NormalizeParams);

impl From<NormalizeParams> for Normalize {
    fn from(params: NormalizeParams) -> Self {
        Normalize(params)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the environment asks to fail on `{0}`")]
struct AskedToFail(String);

#[async_trait::async_trait]
impl Stage<TestEnv> for Normalize {
    fn level(&self) -> Level {
        Level::Episode
    }
    fn inputs(&self) -> Vec<PortId> {
        vec![TEXT.id()]
    }
    fn outputs(&self) -> Vec<PortId> {
        vec![NORMALIZED.id()]
    }
    async fn run(&self, ctx: &JobCtx<TestEnv>) -> Result<Outputs, StageFailure> {
        ctx.env().called("normalize");
        let input = ctx.read(&TEXT)?;
        let text = text_of(&input);
        let fail_on = ctx.env().fail_on.lock().unwrap().clone();
        if let Some(word) = fail_on.filter(|w| text.contains(w.as_str())) {
            return Err(AskedToFail(word).into());
        }
        let lower = text.to_lowercase();
        let words: Vec<&str> = lower
            .split_whitespace()
            .filter(|w| *w != self.0.strip)
            .collect();
        record(
            ctx,
            &NORMALIZED,
            serde_json::json!({ "text": words.join(" ") }),
        )
    }
}

struct Count;

impl From<NoParams> for Count {
    fn from(_: NoParams) -> Self {
        Count
    }
}

#[async_trait::async_trait]
impl Stage<TestEnv> for Count {
    fn level(&self) -> Level {
        Level::Episode
    }
    /// `count` rests on shared code whose version a test may raise (see [`SHARED_CHECKS`]).
    fn code(&self) -> BTreeMap<String, String> {
        [("checks".to_string(), SHARED_CHECKS.get().to_string())].into()
    }
    fn inputs(&self) -> Vec<PortId> {
        vec![NORMALIZED.id()]
    }
    fn outputs(&self) -> Vec<PortId> {
        vec![COUNT.id()]
    }
    async fn run(&self, ctx: &JobCtx<TestEnv>) -> Result<Outputs, StageFailure> {
        ctx.env().called("count");
        let input = ctx.read(&NORMALIZED)?;
        let words = text_of(&input).split_whitespace().count();
        record(ctx, &COUNT, serde_json::json!({ "words": words }))
    }
}

struct Length;

impl From<NoParams> for Length {
    fn from(_: NoParams) -> Self {
        Length
    }
}

#[async_trait::async_trait]
impl Stage<TestEnv> for Length {
    fn level(&self) -> Level {
        Level::Episode
    }
    fn inputs(&self) -> Vec<PortId> {
        vec![TEXT.id()]
    }
    fn outputs(&self) -> Vec<PortId> {
        if LENGTH_IS_TYPED.get() {
            vec![LENGTH_TYPED.id()]
        } else {
            vec![LENGTH.id()]
        }
    }
    fn models(&self, env: &TestEnv, _: &Store) -> Result<BTreeMap<String, String>, StageFailure> {
        Ok([("counter".to_string(), env.model.lock().unwrap().clone())].into())
    }
    async fn run(&self, ctx: &JobCtx<TestEnv>) -> Result<Outputs, StageFailure> {
        ctx.env().called("length");
        let input = ctx.read(&TEXT)?;
        let chars = text_of(&input).chars().count();
        record(ctx, &LENGTH, serde_json::json!({ "chars": chars }))
    }
}

const fn kind(
    name: &'static str,
    version: u32,
    load: fn(&str) -> Result<viss_engine::spec::LoadedStage<TestEnv>, toml::de::Error>,
) -> StageKind<TestEnv> {
    StageKind {
        name,
        summary: "test stage",
        version,
        prompts: &[],
        defaults: Defaults::Text(""),
        load,
    }
}

const KINDS: &[StageKind<TestEnv>] = &[
    kind("files", 1, load_stage::<TestEnv, NoParams, Files>),
    kind(
        "normalize",
        1,
        load_stage::<TestEnv, NormalizeParams, Normalize>,
    ),
    kind("count", 1, load_stage::<TestEnv, NoParams, Count>),
    kind("length", 1, load_stage::<TestEnv, NoParams, Length>),
];

/// `KINDS` after a change to `normalize`'s code that bumped its version.
const KINDS_NORMALIZE_V2: &[StageKind<TestEnv>] = &[
    KINDS[0],
    kind(
        "normalize",
        2,
        load_stage::<TestEnv, NormalizeParams, Normalize>,
    ),
    KINDS[2],
    KINDS[3],
];

const STAGES: [&str; 4] = ["files", "normalize", "count", "length"];

const THREE: &[(&str, &str)] = &[
    ("a", "Hello World"),
    ("b", "one two three"),
    ("c", "Keep Calm"),
];

/// A project directory (`inputs/`, `stages/`, `artifacts/`) and one store, open across builds.
struct Fixture {
    _temp: tempfile::TempDir,
    root: PathBuf,
    kinds: &'static [StageKind<TestEnv>],
    resources: Arc<BuildResources<TestEnv>>,
}

/// One build's report, and the `run` calls each stage actually got during it.
struct Built {
    report: BuildReport,
    calls: BTreeMap<String, usize>,
}

impl Fixture {
    fn new(inputs: &[(&str, &str)]) -> Self {
        Self::with_store(inputs, |store| store)
    }

    /// A fixture whose store is made by `make` from the plain one (a remote cache added).
    fn with_store(inputs: &[(&str, &str)], make: impl FnOnce(Store) -> Store) -> Self {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().to_path_buf();
        let fixture_inputs = root.join("inputs");
        std::fs::create_dir_all(&fixture_inputs).unwrap();
        for (name, text) in inputs {
            std::fs::write(fixture_inputs.join(format!("{name}.txt")), text).unwrap();
        }
        let resources = Arc::new(BuildResources {
            store: make(Store::open(&root.join("artifacts")).unwrap()),
            cpu: Semaphore::new(2),
            env: TestEnv {
                inputs: fixture_inputs,
                model: Mutex::new("counter-v1".into()),
                fail_on: Mutex::new(None),
                calls: Mutex::new(BTreeMap::new()),
            },
            overlay: None,
        });
        Self {
            _temp: temp,
            root,
            kinds: KINDS,
            resources,
        }
    }

    fn env(&self) -> &TestEnv {
        &self.resources.env
    }

    fn store(&self) -> &Store {
        &self.resources.store
    }

    fn write(&self, relative: &str, text: &str) {
        let path = self.root.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Loads the pipeline afresh (so edits to `stages/*.toml` are seen) and builds it.
    async fn build_with(&self, options: BuildOptions) -> Built {
        let pipeline = Pipeline::load(
            self.kinds,
            &self.root.join("stages"),
            &self.root.join("prompts"),
        )
        .unwrap();
        self.env().calls.lock().unwrap().clear();
        let report = viss_engine::scheduler::build(&pipeline, self.resources.clone(), &options)
            .await
            .unwrap();
        let calls = std::mem::take(&mut *self.env().calls.lock().unwrap());
        Built { report, calls }
    }

    async fn build(&self) -> Built {
        self.build_with(BuildOptions {
            jobs: 2,
            ..BuildOptions::default()
        })
        .await
    }

    async fn dry_run(&self, explain: Option<&str>) -> Built {
        self.build_with(BuildOptions {
            dry_run: true,
            jobs: 2,
            explain: explain.map(str::to_string),
            ..BuildOptions::default()
        })
        .await
    }

    fn stored(&self, stage: &str, item: &str) -> Option<Record> {
        self.store().index().get(stage, item).unwrap()
    }

    /// The JSON record output `output` of (stage, item) holds.
    fn output(&self, stage: &str, item: &str, output: &str) -> Json {
        let record = self.stored(stage, item).expect("a stored record");
        let bytes = self.store().get_blob(&record.outputs[output]).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn all_records(&self) -> Vec<(String, String, Record)> {
        self.store().index().scan_all().unwrap()
    }
}

/// The report covers exactly `STAGES`, in pipeline order, with these `ran` counts; and each
/// stage's `run` was called once per item the report says ran or failed.
fn expect_ran(built: &Built, expected: [usize; 4]) {
    let report = &built.report;
    let ran: Vec<(&str, usize)> = report
        .stages
        .iter()
        .map(|(stage, counts)| (stage.as_str(), counts.ran))
        .collect();
    let wanted: Vec<(&str, usize)> = STAGES.into_iter().zip(expected).collect();
    assert_eq!(ran, wanted, "failures: {:?}", report.failures);
    let reported: BTreeMap<String, usize> = report
        .stages
        .iter()
        .map(|(stage, c)| (stage.clone(), c.ran + c.failed))
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(built.calls, reported, "run calls against the report");
}

/// The counts of `stage`, failing when the report has no such stage.
fn counts(report: &BuildReport, stage: &str) -> StageCounts {
    report
        .stages
        .iter()
        .find(|(s, _)| s == stage)
        .unwrap_or_else(|| panic!("stage `{stage}` is missing from {:?}", report.stages))
        .1
        .clone()
}

fn fresh(n: usize) -> StageCounts {
    StageCounts {
        fresh: n,
        ..StageCounts::default()
    }
}

#[tokio::test]
async fn a_first_build_runs_every_item_and_a_second_runs_nothing() {
    let fixture = Fixture::new(THREE);
    let first = fixture.build().await;
    expect_ran(&first, [3, 3, 3, 3]);
    assert!(
        first.report.failures.is_empty(),
        "{:?}",
        first.report.failures
    );
    for stage in STAGES {
        let ran = StageCounts {
            ran: 3,
            ..StageCounts::default()
        };
        assert_eq!(counts(&first.report, stage), ran, "{stage}");
    }
    assert_eq!(fixture.output("count", "t/b", "count")["words"], 3);

    let second = fixture.build().await;
    expect_ran(&second, [0, 0, 0, 0]);
    for stage in STAGES {
        assert_eq!(counts(&second.report, stage), fresh(3), "{stage}");
    }
}

#[tokio::test]
async fn an_edit_that_leaves_an_output_byte_identical_runs_nothing_downstream_of_it() {
    let fixture = Fixture::new(THREE);
    fixture.build().await;
    let normalized = fixture.stored("normalize", "t/a").unwrap().outputs;

    // New bytes for `files` and `length`; `normalize` lowercases and re-spaces them back to
    // the very bytes it wrote before, so `count` must not run.
    fixture.write("inputs/a.txt", "HELLO   world");
    let edited = fixture.build().await;
    expect_ran(&edited, [1, 1, 0, 1]);
    assert_eq!(
        fixture.stored("normalize", "t/a").unwrap().outputs,
        normalized
    );
    assert_eq!(counts(&edited.report, "count"), fresh(3));
    assert_eq!(
        counts(&edited.report, "normalize"),
        StageCounts {
            fresh: 2,
            ran: 1,
            ..StageCounts::default()
        }
    );

    // An edit that does change the normalized text reaches `count`.
    fixture.write("inputs/a.txt", "Hello there World");
    expect_ran(&fixture.build().await, [1, 1, 1, 1]);
    assert_eq!(fixture.output("count", "t/a", "count")["words"], 3);
}

#[tokio::test]
async fn a_param_change_reruns_that_stage_and_only_what_its_changed_outputs_reach() {
    let fixture = Fixture::new(THREE);
    fixture.build().await;

    // Only t/b ("one two three") has the word: every normalize item runs (its params are in
    // each key), but only t/b's output changes, so only t/b's count runs.
    fixture.write("stages/normalize.toml", "[params]\nstrip = \"two\"\n");
    let changed = fixture.build().await;
    expect_ran(&changed, [0, 3, 1, 0]);
    assert_eq!(
        counts(&changed.report, "count"),
        StageCounts {
            fresh: 2,
            ran: 1,
            ..StageCounts::default()
        }
    );
    assert_eq!(
        fixture.output("normalize", "t/b", "normalized")["text"],
        "one three"
    );
    assert_eq!(fixture.output("count", "t/b", "count")["words"], 2);
    assert_eq!(counts(&changed.report, "length"), fresh(3));

    expect_ran(&fixture.build().await, [0, 0, 0, 0]);
}

/// A setting changed and changed back finds the first build's results by their cache keys:
/// nothing runs, the dry run says why, and the records are the first build's; `gc` removing
/// their blobs drops them from the action cache, so the next change back runs again.
#[tokio::test]
async fn a_param_changed_back_reuses_the_first_results_from_the_action_cache() {
    let fixture = Fixture::new(THREE);
    fixture.build().await;
    let first = fixture.stored("normalize", "t/b").unwrap();
    let strip = "[params]\nstrip = \"two\"\n";
    fixture.write("stages/normalize.toml", strip);
    expect_ran(&fixture.build().await, [0, 3, 1, 0]);

    fixture.write("stages/normalize.toml", "");
    let planned = fixture.dry_run(Some("t/b")).await;
    expect_ran(&planned, [0, 0, 0, 0]);
    assert!(
        verdicts(&planned.report).contains(&"normalize t/b: reused".to_string()),
        "{:?}",
        verdicts(&planned.report)
    );
    let back = fixture.build().await;
    expect_ran(&back, [0, 0, 0, 0]);
    assert_eq!(counts(&back.report, "normalize"), fresh(3));
    assert_eq!(counts(&back.report, "count"), fresh(3));
    assert_eq!(fixture.stored("normalize", "t/b").unwrap(), first);
    assert_eq!(fixture.output("count", "t/b", "count")["words"], 3);
    expect_ran(&fixture.build().await, [0, 0, 0, 0]);

    // The stripped results are only in the action cache now: gc frees the blobs no current
    // record holds and forgets the runs that made them. Changing the setting again runs t/b's
    // normalize, whose stripped text was one of them; the other two stripped texts are their
    // current ones byte for byte, and t/b's stripped count ({"words": 2}) is t/a's current one,
    // so those blobs stayed and their runs are reused.
    let gc = viss_engine::maintenance::gc(fixture.store(), false).unwrap();
    assert!(gc.blobs_removed > 0 && gc.actions_removed > 0, "{gc:?}");
    fixture.write("stages/normalize.toml", strip);
    expect_ran(&fixture.build().await, [0, 1, 0, 0]);
    assert_eq!(fixture.output("count", "t/b", "count")["words"], 2);
}

#[tokio::test]
async fn a_failed_item_is_recorded_blocks_only_its_dependents_and_is_retried() {
    let fixture = Fixture::new(&[("a", "fine"), ("b", "a bad apple"), ("c", "also fine")]);
    *fixture.env().fail_on.lock().unwrap() = Some("bad".into());
    let first = fixture.build().await;
    expect_ran(&first, [3, 2, 2, 3]);
    let failure = ItemFailure {
        stage: "normalize".into(),
        item: "t/b".into(),
        error: "the environment asks to fail on `bad`".into(),
    };
    assert_eq!(first.report.failures, vec![failure.clone()]);
    let failed_once = StageCounts {
        ran: 2,
        failed: 1,
        ..StageCounts::default()
    };
    assert_eq!(counts(&first.report, "normalize"), failed_once);
    let blocked_once = StageCounts {
        ran: 2,
        blocked: 1,
        ..StageCounts::default()
    };
    assert_eq!(counts(&first.report, "count"), blocked_once);
    let record = fixture
        .stored("normalize", "t/b")
        .expect("the failure is recorded");
    assert_eq!(record.error.as_deref(), Some(failure.error.as_str()));
    assert!(record.outputs.is_empty());
    assert!(
        fixture.stored("count", "t/b").is_none(),
        "a blocked item has no record"
    );

    // Nothing changed, yet the failed item runs again (and fails again); what settled is reused.
    let again = fixture.build().await;
    expect_ran(&again, [0, 0, 0, 0]);
    assert_eq!(
        again.calls.get("normalize"),
        Some(&1),
        "the failed item was retried"
    );
    assert_eq!(again.report.failures, vec![failure]);
    let failed_again = StageCounts {
        fresh: 2,
        failed: 1,
        ..StageCounts::default()
    };
    assert_eq!(counts(&again.report, "normalize"), failed_again);
    let blocked_again = StageCounts {
        fresh: 2,
        blocked: 1,
        ..StageCounts::default()
    };
    assert_eq!(counts(&again.report, "count"), blocked_again);

    // The cause goes away (no input changed): the retry succeeds and unblocks its dependent.
    *fixture.env().fail_on.lock().unwrap() = None;
    let recovered = fixture.build().await;
    expect_ran(&recovered, [0, 1, 1, 0]);
    assert!(
        recovered.report.failures.is_empty(),
        "{:?}",
        recovered.report.failures
    );
    assert!(!fixture.stored("normalize", "t/b").unwrap().failed());
    assert_eq!(fixture.output("count", "t/b", "count")["words"], 3);
    expect_ran(&fixture.build().await, [0, 0, 0, 0]);
}

#[tokio::test]
async fn a_code_version_bump_reruns_exactly_that_stage() {
    let mut fixture = Fixture::new(THREE);
    fixture.build().await;
    fixture.kinds = KINDS_NORMALIZE_V2;
    // The new code writes the same bytes, so nothing after it runs.
    expect_ran(&fixture.build().await, [0, 3, 0, 0]);
    expect_ran(&fixture.build().await, [0, 0, 0, 0]);
}

#[tokio::test]
async fn a_new_version_of_shared_code_reruns_exactly_the_stage_resting_on_it() {
    let fixture = Fixture::new(THREE);
    fixture.build().await;
    SHARED_CHECKS.set(2);
    expect_ran(&fixture.build().await, [0, 0, 3, 0]);
    expect_ran(&fixture.build().await, [0, 0, 0, 0]);
}

#[tokio::test]
async fn a_new_record_type_on_a_port_reruns_exactly_the_stage_that_writes_it() {
    let fixture = Fixture::new(THREE);
    fixture.build().await;
    LENGTH_IS_TYPED.set(true);
    let planned = fixture.dry_run(Some("t/a")).await;
    let explained = planned.report.explanations.iter();
    let length = explained
        .filter(|e| e.stage == "length")
        .collect::<Vec<_>>();
    let Verdict::Changed { changes } = &length[0].verdict else {
        panic!("{length:?}")
    };
    assert!(
        matches!(&changes[..], [KeyChange::Record { port, .. }] if port == "length.length"),
        "{changes:?}"
    );
    assert!(
        changes[0]
            .to_string()
            .starts_with("record type of `length.length` changed")
    );
    // It writes the same bytes, so nothing after it would run either way.
    expect_ran(&fixture.build().await, [0, 0, 0, 3]);
    expect_ran(&fixture.build().await, [0, 0, 0, 0]);
}

#[tokio::test]
async fn switching_the_model_in_the_environment_reruns_the_stage_that_uses_it() {
    let fixture = Fixture::new(THREE);
    fixture.build().await;
    *fixture.env().model.lock().unwrap() = "counter-v2".into();
    expect_ran(&fixture.build().await, [0, 0, 0, 3]);
    expect_ran(&fixture.build().await, [0, 0, 0, 0]);
}

/// `stage verdict` for each explanation of a dry run, sorted.
fn verdicts(report: &BuildReport) -> Vec<String> {
    let mut verdicts: Vec<String> = report
        .explanations
        .iter()
        .map(|e| {
            let verdict = match &e.verdict {
                Verdict::Fresh => "fresh".to_string(),
                Verdict::Reused => "reused".to_string(),
                Verdict::NeverBuilt => "never built".to_string(),
                Verdict::Changed { .. } => "changed".to_string(),
                Verdict::FailedLastTime { error } => format!("failed last time: {error}"),
                Verdict::Waiting { on } => format!("waits for {on}"),
                Verdict::Blocked { by } => format!("blocked by {by}"),
            };
            format!("{} {}: {verdict}", e.stage, e.item)
        })
        .collect();
    verdicts.sort();
    verdicts
}

#[tokio::test]
async fn a_dry_runs_probe_runs_items_committing_nothing_and_plans_what_follows_on_their_outputs() {
    let mut fixture = Fixture::new(THREE);
    fixture.build().await;
    let records = fixture.all_records();
    fixture.kinds = KINDS_NORMALIZE_V2;
    *fixture.env().fail_on.lock().unwrap() = Some("two".into());
    let probed = fixture
        .build_with(BuildOptions {
            dry_run: true,
            probe: vec!["normalize".to_string()],
            jobs: 2,
            ..BuildOptions::default()
        })
        .await;
    assert_eq!(probed.calls, [("normalize".to_string(), 3)].into());
    assert_eq!(
        counts(&probed.report, "normalize"),
        StageCounts {
            would_run: 3,
            ..StageCounts::default()
        }
    );
    // The new code writes the same bytes: the counts of the two items it made are fresh; the
    // item it failed on leaves its count waiting, as in a dry run without a probe.
    assert_eq!(
        counts(&probed.report, "count"),
        StageCounts {
            fresh: 2,
            waiting: 1,
            ..StageCounts::default()
        }
    );
    let mut outcomes: Vec<(String, bool)> = probed
        .report
        .probes
        .iter()
        .map(|probe| (probe.item.clone(), probe.finished))
        .collect();
    outcomes.sort();
    let expected = [("t/a", true), ("t/b", false), ("t/c", true)];
    assert_eq!(
        outcomes,
        expected.map(|(item, done)| (item.to_string(), done))
    );
    assert!(probed.report.failures.is_empty(), "a probe fails nothing");
    assert_eq!(fixture.all_records(), records, "a probe commits nothing");

    *fixture.env().fail_on.lock().unwrap() = None;
    expect_ran(&fixture.build().await, [0, 3, 0, 0]);
}

#[tokio::test]
async fn a_dry_run_runs_nothing_and_reports_what_would_run() {
    let fixture = Fixture::new(THREE);
    let planned = fixture.dry_run(Some("t/a")).await;
    expect_ran(&planned, [0, 0, 0, 0]);
    assert!(planned.calls.is_empty(), "{:?}", planned.calls);
    let would_run = StageCounts {
        would_run: 3,
        ..StageCounts::default()
    };
    assert_eq!(counts(&planned.report, "files"), would_run);
    let waiting = StageCounts {
        waiting: 3,
        ..StageCounts::default()
    };
    for stage in ["normalize", "count", "length"] {
        assert_eq!(counts(&planned.report, stage), waiting, "{stage}");
    }
    assert_eq!(
        verdicts(&planned.report),
        [
            "count t/a: waits for normalize:t/a",
            "files t/a: never built",
            "length t/a: waits for files:t/a",
            "normalize t/a: waits for files:t/a",
        ]
    );
    assert!(
        fixture.all_records().is_empty(),
        "a dry run writes no record"
    );

    expect_ran(&fixture.build().await, [3, 3, 3, 3]);
    let records = fixture.all_records();

    fixture.write("inputs/b.txt", "one two three four");
    let planned = fixture.dry_run(Some("t/b")).await;
    expect_ran(&planned, [0, 0, 0, 0]);
    assert!(planned.calls.is_empty(), "{:?}", planned.calls);
    assert_eq!(
        counts(&planned.report, "files"),
        StageCounts {
            fresh: 2,
            would_run: 1,
            ..StageCounts::default()
        }
    );
    let one_waits = StageCounts {
        fresh: 2,
        waiting: 1,
        ..StageCounts::default()
    };
    for stage in ["normalize", "count", "length"] {
        assert_eq!(counts(&planned.report, stage), one_waits, "{stage}");
    }
    assert_eq!(
        verdicts(&planned.report),
        [
            "count t/b: waits for normalize:t/b",
            "files t/b: changed",
            "length t/b: waits for files:t/b",
            "normalize t/b: waits for files:t/b",
        ]
    );
    assert_eq!(
        fixture.all_records(),
        records,
        "a dry run changes no record"
    );

    // What the plan named is what a real build runs.
    expect_ran(&fixture.build().await, [1, 1, 1, 1]);
}

/// A shared cache every fixture of a test reaches: blobs in one folder, actions and memos in
/// one map (the engine's traits; the app's S3 implementation is tested against a real server).
#[derive(Clone, Default)]
struct SharedKeyed(Arc<Mutex<BTreeMap<KeyedName, Vec<u8>>>>);

/// An object's folder and key.
type KeyedName = (&'static str, ContentHash);

impl viss_engine::store::KeyedObjects for SharedKeyed {
    fn get(
        &self,
        kind: viss_engine::store::KeyedKind,
        key: &ContentHash,
    ) -> Result<Option<Vec<u8>>, viss_engine::store::StoreError> {
        Ok(self.0.lock().unwrap().get(&(kind.folder(), *key)).cloned())
    }

    fn put(
        &self,
        kind: viss_engine::store::KeyedKind,
        key: &ContentHash,
        bytes: &[u8],
    ) -> Result<(), viss_engine::store::StoreError> {
        self.0
            .lock()
            .unwrap()
            .insert((kind.folder(), *key), bytes.to_vec());
        Ok(())
    }

    fn count(
        &self,
        kind: viss_engine::store::KeyedKind,
    ) -> Result<usize, viss_engine::store::StoreError> {
        let objects = self.0.lock().unwrap();
        Ok(objects
            .keys()
            .filter(|(folder, _)| *folder == kind.folder())
            .count())
    }
}

fn sharing(folder: &std::path::Path, keyed: &SharedKeyed) -> impl FnOnce(Store) -> Store {
    let (blobs, temp) = (folder.join("blobs"), folder.join("tmp"));
    let keyed = keyed.clone();
    move |store| {
        std::fs::create_dir_all(&blobs).unwrap();
        std::fs::create_dir_all(&temp).unwrap();
        let remote = viss_engine::store::Remote::new(
            Box::new(viss_engine::store::FileBlobs::new(blobs, temp)),
            Box::new(keyed),
            "shared",
        );
        store.with_remote(remote)
    }
}

#[tokio::test]
async fn shards_on_two_stores_split_the_items_and_a_third_store_takes_them_all() {
    let shared = tempfile::tempdir().unwrap();
    let keyed = SharedKeyed::default();
    let mut ran = BTreeMap::<String, usize>::new();
    for index in 0..2 {
        let machine = Fixture::with_store(THREE, sharing(shared.path(), &keyed));
        let built = machine
            .build_with(BuildOptions {
                jobs: 2,
                part: viss_engine::shard::Part::Shard { index, count: 2 },
                ..BuildOptions::default()
            })
            .await;
        assert!(
            built.report.failures.is_empty(),
            "{:?}",
            built.report.failures
        );
        for (stage, calls) in built.calls {
            *ran.entry(stage).or_default() += calls;
        }
    }
    // Each item ran once, on one machine or the other.
    let once: BTreeMap<String, usize> = STAGES.iter().map(|s| (s.to_string(), 3)).collect();
    assert_eq!(ran, once);

    let third = Fixture::with_store(THREE, sharing(shared.path(), &keyed));
    let built = third.build().await;
    expect_ran(&built, [0, 0, 0, 0]);
    assert_eq!(third.output("count", "t/b", "count")["words"], 3);
    let remote = built.report.remote.expect("the report counts the remote");
    assert_eq!(
        (remote.actions_found, remote.errors, remote.corrupt),
        (12, 0, 0)
    );
}

//! The engine's promises, on a small DAG of test stages:
//!   files (root: one item per inputs/*.txt) -> normalize -> count
//!                                           \-> length
//! normalize renders a prompt template and takes params, so both can be edited.

use std::path::Path;

use serde::{Deserialize, Serialize};
use viss::dag::port::{Port, PortId};
use viss::dag::scheduler::{BuildOptions, BuildReport, StageCounts};
use viss::dag::spec::{Defaults, StageKind, load_stage};
use viss::dag::store::Store;
use viss::dag::{Env, JobCtx, Level, Outputs, SourceItem, SourceProblem, Stage, StageFailure};
use viss::hash::ContentHash;
use viss::project::Project;
use viss::range::{BadSetting, Validate};
use viss::workspace::{Workspace, WorkspaceError};

type Json = serde_json::Value;
const TEXT: Port<Json> = Port::item("files", "text");
const NORMALIZED: Port<Json> = Port::item("normalize", "normalized");
const COUNT: Port<Json> = Port::item("count", "count");
const LENGTH: Port<Json> = Port::item("length", "length");
const LINE: Port<Json> = Port::child("split", "line");
const LOUD: Port<Json> = Port::item("shout", "loud");
const TOTAL: Port<Json> = Port::item("total", "total");
const PUBLISHED: Port<Json> = Port::item("publish", "published");
const RUN: Port<Json> = Port::child("fan", "run");
const PLAYED: Port<Json> = Port::item("play", "played");

/// The `inputs` and `outputs` of a test stage.
macro_rules! ports {
    ([$($read:expr),*] -> [$($write:expr),*]) => {
        fn inputs(&self) -> Vec<PortId> {
            vec![$($read.id()),*]
        }
        fn outputs(&self) -> Vec<PortId> {
            vec![$($write.id()),*]
        }
    };
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct NoParams {}

impl Validate for NoParams {
    fn validate(&self) -> Result<(), BadSetting> {
        Ok(())
    }
}

struct Files;
impl From<NoParams> for Files {
    fn from(_: NoParams) -> Self {
        Files
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Files {
    fn level(&self) -> Level {
        Level::Episode
    }
    ports!([] -> [TEXT]);
    fn source_items(
        &self,
        Env { project, .. }: &Env,
        _: &Store,
    ) -> Result<Vec<Result<SourceItem, SourceProblem>>, StageFailure> {
        let mut paths: Vec<_> = std::fs::read_dir(project.root.join("inputs"))?
            .flatten()
            .map(|e| e.path())
            .collect();
        paths.sort();
        Ok(paths
            .into_iter()
            .map(|path| {
                let text = std::fs::read_to_string(&path).unwrap();
                let id = format!("t/{}", path.file_stem().unwrap().to_string_lossy());
                Ok(SourceItem {
                    id,
                    fingerprint: ContentHash::of(text.as_bytes()),
                    payload: serde_json::json!({ "text": text }),
                })
            })
            .collect())
    }
    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let payload: serde_json::Value = ctx.source()?;
        let mut outputs = Outputs::default();
        outputs.put(ctx, &TEXT, &payload)?;
        Ok(outputs)
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct NormalizeParams {
    suffix: String,
}

impl Validate for NormalizeParams {
    fn validate(&self) -> Result<(), BadSetting> {
        Ok(())
    }
}

struct Normalize(NormalizeParams);
impl From<NormalizeParams> for Normalize {
    fn from(p: NormalizeParams) -> Self {
        Normalize(p)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("input asks to fail")]
struct AskedToFail;

#[async_trait::async_trait]
impl Stage<Env> for Normalize {
    fn level(&self) -> Level {
        Level::Episode
    }
    ports!([TEXT] -> [NORMALIZED]);
    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let input: serde_json::Value = ctx.read(&TEXT)?;
        let text = input["text"].as_str().unwrap_or_default();
        if text.contains("FAIL") {
            return Err(AskedToFail.into());
        }
        if text.contains("PANIC") {
            // On the blocking pool, as the parsers run: the panic crosses two task boundaries.
            ctx.cpu(|| panic!("input asks to panic")).await
        }
        let prompt =
            std::fs::read_to_string(ctx.prompt_path("normalize.j2").expect("declared prompt"))?;
        let normalized = format!(
            "{}{}{}",
            prompt.trim(),
            text.trim().to_lowercase(),
            self.0.suffix
        );
        let mut outputs = Outputs::default();
        outputs.put(ctx, &NORMALIZED, &serde_json::json!({ "text": normalized }))?;
        Ok(outputs)
    }
}

struct Count;
impl From<NoParams> for Count {
    fn from(_: NoParams) -> Self {
        Count
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Count {
    fn level(&self) -> Level {
        Level::Episode
    }
    ports!([NORMALIZED] -> [COUNT]);
    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let input: serde_json::Value = ctx.read(&NORMALIZED)?;
        let words = input["text"]
            .as_str()
            .unwrap_or_default()
            .split_whitespace()
            .count();
        let mut outputs = Outputs::default();
        outputs.put(ctx, &COUNT, &serde_json::json!({ "words": words }))?;
        Ok(outputs)
    }
}

struct Length;
impl From<NoParams> for Length {
    fn from(_: NoParams) -> Self {
        Length
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Length {
    fn level(&self) -> Level {
        Level::Episode
    }
    ports!([TEXT] -> [LENGTH]);
    /// Stands for a local model file: its content is the model's identity.
    fn models(
        &self,
        Env { project, .. }: &Env,
        _: &Store,
    ) -> Result<std::collections::BTreeMap<String, String>, StageFailure> {
        let identity = std::fs::read_to_string(project.root.join("counter-model.txt"))
            .unwrap_or_else(|_| "builtin".into());
        Ok([("counter".to_string(), identity)].into())
    }
    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let input: serde_json::Value = ctx.read(&TEXT)?;
        let chars = input["text"].as_str().unwrap_or_default().chars().count();
        let mut outputs = Outputs::default();
        outputs.put(ctx, &LENGTH, &serde_json::json!({ "chars": chars }))?;
        if chars < 10 {
            outputs.flags.push(format!("only {chars} characters"));
        }
        Ok(outputs)
    }
}

/// The version of the shared code `checked` rests on: only the test of shared code sets it.
static SHARED_CHECKS_VERSION: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// `length` as a stage whose code rests on shared checks as well as on its own version.
struct CheckedLength;
impl From<NoParams> for CheckedLength {
    fn from(_: NoParams) -> Self {
        CheckedLength
    }
}

#[async_trait::async_trait]
impl Stage<Env> for CheckedLength {
    fn level(&self) -> Level {
        Level::Episode
    }
    ports!([TEXT] -> [LENGTH]);
    fn code(&self) -> std::collections::BTreeMap<String, String> {
        let version = SHARED_CHECKS_VERSION.load(std::sync::atomic::Ordering::SeqCst);
        [("checks".to_string(), version.to_string())].into()
    }
    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        Length.run(ctx).await
    }
}

const KINDS: &[StageKind] = &[
    StageKind {
        name: "files",
        summary: "test source",
        version: 1,
        prompts: &[],
        defaults: Defaults::Text(""),
        load: load_stage::<NoParams, Files>,
    },
    StageKind {
        name: "normalize",
        summary: "lowercase + prompt",
        version: 1,
        prompts: &["normalize.j2"],
        defaults: Defaults::Text(""),
        load: load_stage::<NormalizeParams, Normalize>,
    },
    StageKind {
        name: "count",
        summary: "words",
        version: 1,
        prompts: &[],
        defaults: Defaults::Text(""),
        load: load_stage::<NoParams, Count>,
    },
    StageKind {
        name: "length",
        summary: "chars",
        version: 1,
        prompts: &[],
        defaults: Defaults::Text(""),
        load: load_stage::<NoParams, Length>,
    },
];

/// One scenario per line of an episode: `split` introduces them, `shout` works on one each,
/// `total` aggregates the whole benchmark.
struct Split;
impl From<NoParams> for Split {
    fn from(_: NoParams) -> Self {
        Split
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Split {
    fn level(&self) -> Level {
        Level::Episode
    }
    ports!([TEXT] -> [LINE]);
    fn spawns(&self) -> Option<Level> {
        Some(Level::Scenario)
    }
    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let input: serde_json::Value = ctx.read(&TEXT)?;
        if input["text"].as_str().unwrap_or_default().contains("FAIL") {
            return Err(AskedToFail.into());
        }
        let mut outputs = Outputs::default();
        for (n, line) in input["text"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .enumerate()
        {
            let child = format!("{}/l{:02}", ctx.item, n + 1);
            outputs.put_child(ctx, &LINE, &child, &serde_json::json!({ "line": line }))?;
            outputs.children.push(child);
        }
        Ok(outputs)
    }
}

struct Shout;
impl From<NoParams> for Shout {
    fn from(_: NoParams) -> Self {
        Shout
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Shout {
    fn level(&self) -> Level {
        Level::Scenario
    }
    ports!([LINE] -> [LOUD]);
    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        assert_eq!(
            ctx.inputs.len(),
            1,
            "a scenario sees only its own scoped output: {:?}",
            ctx.inputs
        );
        let line = ctx.read(&LINE)?;
        let loud = line["line"].as_str().unwrap_or_default().to_uppercase();
        let mut outputs = Outputs::default();
        outputs.put(ctx, &LOUD, &serde_json::json!({ "loud": loud }))?;
        Ok(outputs)
    }
}

struct Total;
impl From<NoParams> for Total {
    fn from(_: NoParams) -> Self {
        Total
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Total {
    fn level(&self) -> Level {
        Level::Benchmark
    }
    ports!([LOUD] -> [TOTAL]);
    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let mut items: Vec<&str> = ctx.inputs_of(LOUD.id()).map(|i| i.item.as_str()).collect();
        items.sort();
        let mut outputs = Outputs::default();
        outputs.put(ctx, &TOTAL, &serde_json::json!({ "scenarios": items }))?;
        Ok(outputs)
    }
}

/// Like `export`: driven by a same-level stage (`total`) and also reading every scenario of a
/// finer one (`shout`).
struct Publish;
impl From<NoParams> for Publish {
    fn from(_: NoParams) -> Self {
        Publish
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Publish {
    fn level(&self) -> Level {
        Level::Benchmark
    }
    ports!([TOTAL, LOUD] -> [PUBLISHED]);
    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let total = ctx.read(&TOTAL)?;
        let mut louds = Vec::new();
        for input in ctx.inputs_of(LOUD.id()) {
            let loud = ctx.read_input(&LOUD, input)?;
            louds.push((input.item.clone(), loud["loud"].clone()));
        }
        louds.sort_by(|a, b| a.0.cmp(&b.0));
        let louds: Vec<serde_json::Value> = louds.into_iter().map(|(_, loud)| loud).collect();
        let published = serde_json::json!({ "scenarios": total["scenarios"], "louds": louds });
        let mut outputs = Outputs::default();
        outputs.put(ctx, &PUBLISHED, &published)?;
        Ok(outputs)
    }
}

const LEVEL_KINDS: &[StageKind] = &[
    StageKind {
        name: "files",
        summary: "test source",
        version: 1,
        prompts: &[],
        defaults: Defaults::Text(""),
        load: load_stage::<NoParams, Files>,
    },
    StageKind {
        name: "split",
        summary: "lines",
        version: 1,
        prompts: &[],
        defaults: Defaults::Text(""),
        load: load_stage::<NoParams, Split>,
    },
    StageKind {
        name: "shout",
        summary: "upper",
        version: 1,
        prompts: &[],
        defaults: Defaults::Text(""),
        load: load_stage::<NoParams, Shout>,
    },
    StageKind {
        name: "total",
        summary: "all",
        version: 1,
        prompts: &[],
        defaults: Defaults::Text(""),
        load: load_stage::<NoParams, Total>,
    },
];

/// Like `simulate`'s plan: each scenario fans out into runs (`<scenario>/sim/<mode>/m/r0`, a
/// mode per word of its line), and `play` works on one run each, reading its scenario's output.
struct Fan;
impl From<NoParams> for Fan {
    fn from(_: NoParams) -> Self {
        Fan
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Fan {
    fn level(&self) -> Level {
        Level::Scenario
    }
    ports!([LOUD] -> [RUN]);
    fn spawns(&self) -> Option<Level> {
        Some(Level::Run)
    }
    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let loud = ctx.read(&LOUD)?;
        let mut outputs = Outputs::default();
        for word in loud["loud"].as_str().unwrap_or_default().split_whitespace() {
            let child = format!("{}/sim/{}/m/r0", ctx.item, word.to_lowercase());
            outputs.put_child(ctx, &RUN, &child, &serde_json::json!({ "mode": word }))?;
            outputs.children.push(child);
        }
        Ok(outputs)
    }
}

struct Play;
impl From<NoParams> for Play {
    fn from(_: NoParams) -> Self {
        Play
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Play {
    fn level(&self) -> Level {
        Level::Run
    }
    ports!([RUN, LOUD] -> [PLAYED]);
    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let run = ctx.read(&RUN)?;
        let loud = ctx.read(&LOUD)?;
        let mut outputs = Outputs::default();
        let played =
            serde_json::json!({ "run": ctx.item, "mode": run["mode"], "of": loud["loud"] });
        outputs.put(ctx, &PLAYED, &played)?;
        Ok(outputs)
    }
}

const RUN_KINDS: &[StageKind] = &[
    LEVEL_KINDS[0],
    LEVEL_KINDS[1],
    LEVEL_KINDS[2],
    StageKind {
        name: "fan",
        summary: "runs per scenario",
        version: 1,
        prompts: &[],
        defaults: Defaults::Text(""),
        load: load_stage::<NoParams, Fan>,
    },
    StageKind {
        name: "play",
        summary: "one run",
        version: 1,
        prompts: &[],
        defaults: Defaults::Text(""),
        load: load_stage::<NoParams, Play>,
    },
];

const SHARED_CODE_KINDS: &[StageKind] = &[
    KINDS[0],
    KINDS[1],
    KINDS[2],
    StageKind {
        name: "length",
        summary: "chars, resting on shared checks",
        version: 1,
        prompts: &[],
        defaults: Defaults::Text(""),
        load: load_stage::<NoParams, CheckedLength>,
    },
];

const PUBLISH_KINDS: &[StageKind] = &[
    LEVEL_KINDS[0],
    LEVEL_KINDS[1],
    LEVEL_KINDS[2],
    LEVEL_KINDS[3],
    StageKind {
        name: "publish",
        summary: "all, with every scenario",
        version: 1,
        prompts: &[],
        defaults: Defaults::Text(""),
        load: load_stage::<NoParams, Publish>,
    },
];

struct TestProject {
    _temp: tempfile::TempDir,
    root: std::path::PathBuf,
    kinds: &'static [StageKind],
}

impl TestProject {
    fn new(inputs: &[(&str, &str)]) -> Self {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().to_path_buf();
        Project::init(&root, &[], &[], false).unwrap();
        std::fs::create_dir_all(root.join("inputs")).unwrap();
        for (name, text) in inputs {
            std::fs::write(root.join("inputs").join(format!("{name}.txt")), text).unwrap();
        }
        std::fs::write(root.join("prompts/normalize.j2"), "Say: ").unwrap();
        Self {
            _temp: temp,
            root,
            kinds: KINDS,
        }
    }

    fn with_kinds(inputs: &[(&str, &str)], kinds: &'static [StageKind]) -> Self {
        Self {
            kinds,
            ..Self::new(inputs)
        }
    }

    fn write(&self, relative: &str, text: &str) {
        let path = self.root.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn open(&self) -> Result<Workspace, WorkspaceError> {
        Workspace::open(Project::open(&self.root).unwrap(), self.kinds, "test")
    }

    fn build(&self) -> BuildReport {
        self.build_with(BuildOptions {
            jobs: 4,
            ..BuildOptions::default()
        })
    }

    /// What a dry run says of `item` (`viss status --why`).
    fn why(&self, item: &str) -> String {
        let dry = self.build_with(BuildOptions {
            dry_run: true,
            explain: Some(item.into()),
            ..BuildOptions::default()
        });
        viss::dag::status::render_explanations(item, &dry)
    }

    fn build_with(&self, options: BuildOptions) -> BuildReport {
        self.open().unwrap().build(&options).unwrap()
    }
}

fn ran(report: &BuildReport) -> Vec<(String, usize)> {
    report
        .stages
        .iter()
        .map(|(s, c)| (s.clone(), c.ran))
        .collect()
}

fn expect_ran(report: &BuildReport, expected: &[(&str, usize)]) {
    let expected: Vec<(String, usize)> =
        expected.iter().map(|(s, n)| (s.to_string(), *n)).collect();
    assert_eq!(ran(report), expected, "failures: {:?}", report.failures);
}

const THREE: &[(&str, &str)] = &[
    ("a", "Hello World"),
    ("b", "one two three"),
    ("c", "Keep Calm"),
];

#[test]
fn first_build_runs_everything_and_second_runs_nothing() {
    let project = TestProject::new(THREE);
    let first = project.build();
    expect_ran(
        &first,
        &[("files", 3), ("normalize", 3), ("count", 3), ("length", 3)],
    );
    assert!(first.failures.is_empty());
    let second = project.build();
    expect_ran(
        &second,
        &[("files", 0), ("normalize", 0), ("count", 0), ("length", 0)],
    );
    assert_eq!(
        second.counts("count"),
        StageCounts {
            fresh: 3,
            ..StageCounts::default()
        }
    );
}

#[test]
fn identical_output_stops_the_cascade() {
    let project = TestProject::new(THREE);
    project.build();
    // Only the case changes: files and length see new content, normalize lowercases it back to
    // the same bytes, so count must not re-run.
    project.write("inputs/a.txt", "HELLO WORLD");
    let report = project.build();
    expect_ran(
        &report,
        &[("files", 1), ("normalize", 1), ("count", 0), ("length", 1)],
    );
    assert_eq!(report.counts("count").fresh, 3);
}

#[test]
fn a_param_change_reruns_that_stage_and_only_its_dependents() {
    let project = TestProject::new(THREE);
    project.build();
    project.write(
        "stages/normalize.toml",
        "version = 1\nneeds = [\"files\"]\nprompts = \
        [\"normalize.j2\"]\n[params]\nsuffix = \" again\"\n",
    );
    let report = project.build();
    expect_ran(
        &report,
        &[("files", 0), ("normalize", 3), ("count", 3), ("length", 0)],
    );
    let why = project
        .build_with(BuildOptions {
            dry_run: true,
            explain: Some("t/a".into()),
            ..BuildOptions::default()
        })
        .explanations;
    assert!(
        why.iter()
            .all(|e| matches!(e.verdict, viss::dag::scheduler::Verdict::Fresh)),
        "{why:?}"
    );
}

#[test]
fn writing_a_default_param_out_changes_nothing() {
    let project = TestProject::new(THREE);
    project.build();
    project.write(
        "stages/normalize.toml",
        "version = 1\nneeds = [\"files\"]\nprompts = [\"normalize.j2\"]\n[params]\nsuffix = \"\"\n",
    );
    expect_ran(
        &project.build(),
        &[("files", 0), ("normalize", 0), ("count", 0), ("length", 0)],
    );
}

#[test]
fn a_prompt_edit_reruns_only_the_stage_that_renders_it_and_dependents() {
    let project = TestProject::new(THREE);
    project.build();
    project.write("prompts/normalize.j2", "Answer briefly: ");
    let text = project.why("t/b");
    assert!(
        text.contains("normalize t/b: will run because prompt template `normalize.j2` was edited"),
        "{text}"
    );
    assert!(text.contains("length t/b: up to date"), "{text}");
    let report = project.build();
    expect_ran(
        &report,
        &[("files", 0), ("normalize", 3), ("count", 3), ("length", 0)],
    );
}

/// A prompt edit undone finds the runs of the first prompt by their cache keys: nothing runs,
/// `status --why` says where the results come from, and the records are the first build's.
#[test]
fn a_prompt_edit_undone_takes_the_earlier_results_from_the_action_cache() {
    let project = TestProject::new(THREE);
    project.build();
    let original = std::fs::read_to_string(project.root.join("prompts/normalize.j2")).unwrap();
    let first = project.open().unwrap().store().index().scan_all().unwrap();
    project.write("prompts/normalize.j2", "Answer briefly: ");
    project.build();
    project.write("prompts/normalize.j2", &original);
    let text = project.why("t/b");
    assert!(
        text.contains("normalize t/b: up to date: built before with exactly these inputs"),
        "{text}"
    );
    let report = project.build();
    expect_ran(
        &report,
        &[("files", 0), ("normalize", 0), ("count", 0), ("length", 0)],
    );
    let again = project.open().unwrap().store().index().scan_all().unwrap();
    assert_eq!(again, first, "the first build's records, run times and all");
}

#[test]
fn why_names_the_changed_param() {
    let project = TestProject::new(THREE);
    project.build();
    project.write(
        "stages/normalize.toml",
        "version = 2\nneeds = [\"files\"]\nprompts = \
        [\"normalize.j2\"]\n[params]\nsuffix = \"!\"\n",
    );
    let dry = project.build_with(BuildOptions {
        dry_run: true,
        explain: Some("t/c".into()),
        ..BuildOptions::default()
    });
    let text = viss::dag::status::render_explanations("t/c", &dry);
    assert!(text.contains("stage code version 1 -> 2"), "{text}");
    assert!(text.contains("param `suffix`: \"\" -> \"!\""), "{text}");
    assert!(
        text.contains("count t/c: waits for normalize:t/c"),
        "{text}"
    );
    assert_eq!(dry.counts("normalize").would_run, 3);
    assert_eq!(dry.total(|c| c.ran), 0, "a dry run runs nothing");
}

#[test]
fn a_panicking_item_fails_with_the_panic_message_and_blocks_only_its_dependents() {
    let project = TestProject::new(&[("a", "fine"), ("b", "please PANIC")]);
    let report = project.build();
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    let failure = &report.failures[0];
    assert_eq!(
        (failure.stage.as_str(), failure.item.as_str()),
        ("normalize", "t/b")
    );
    assert_eq!(failure.error, "the stage panicked: input asks to panic");
    assert_eq!(report.counts("count").ran, 1);
    assert_eq!(report.counts("count").blocked, 1);
}

#[test]
fn a_failed_item_is_recorded_blocks_its_dependents_and_is_retried() {
    let project = TestProject::new(&[("a", "fine"), ("b", "please FAIL"), ("c", "also fine")]);
    let first = project.build();
    assert_eq!(first.failures.len(), 1);
    assert_eq!(
        (
            first.failures[0].stage.as_str(),
            first.failures[0].item.as_str()
        ),
        ("normalize", "t/b")
    );
    assert!(first.failures[0].error.contains("input asks to fail"));
    assert_eq!(
        first.counts("count"),
        StageCounts {
            ran: 2,
            blocked: 1,
            ..StageCounts::default()
        }
    );
    assert_eq!(
        first.counts("length").ran,
        3,
        "a failure does not stop unrelated work"
    );

    let retry = project.build();
    assert_eq!(
        retry.counts("normalize"),
        StageCounts {
            fresh: 2,
            failed: 1,
            ..StageCounts::default()
        }
    );

    project.write("inputs/b.txt", "fixed now");
    let fixed = project.build();
    assert!(fixed.failures.is_empty());
    expect_ran(
        &fixed,
        &[("files", 1), ("normalize", 1), ("count", 1), ("length", 1)],
    );
}

#[test]
fn only_and_items_restrict_what_runs() {
    let project = TestProject::new(THREE);
    let report = project.build_with(BuildOptions {
        jobs: 2,
        items: Some("t/a".into()),
        ..BuildOptions::default()
    });
    expect_ran(
        &report,
        &[("files", 1), ("normalize", 1), ("count", 1), ("length", 1)],
    );
    let report = project.build_with(BuildOptions {
        jobs: 2,
        only: vec!["files".into()],
        ..BuildOptions::default()
    });
    expect_ran(
        &report,
        &[("files", 2), ("normalize", 0), ("count", 0), ("length", 0)],
    );
    assert_eq!(report.counts("normalize").not_selected, 2);
    let report = project.build_with(BuildOptions {
        jobs: 2,
        until: vec!["normalize".into()],
        ..BuildOptions::default()
    });
    assert_eq!(
        report
            .stages
            .iter()
            .map(|(s, _)| s.as_str())
            .collect::<Vec<_>>(),
        ["files", "normalize"]
    );
    assert_eq!(report.counts("normalize").ran, 2);
}

fn blob_of(
    project: &TestProject,
    stage: &str,
    item: &str,
    output: &str,
) -> (ContentHash, std::path::PathBuf) {
    let workspace = project.open().unwrap();
    let record = workspace.store().index().get(stage, item).unwrap().unwrap();
    let hash = record.outputs[output];
    let path = workspace.store().blobs().local_path(&hash).unwrap();
    (hash, path)
}

fn corrupt(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn verify_finds_a_corrupt_blob_and_the_next_build_rebuilds_it() {
    let project = TestProject::new(THREE);
    project.build();
    let (hash, path) = blob_of(&project, "normalize", "t/b", "normalized");
    let original = std::fs::read(&path).unwrap();
    corrupt(&path);

    let report = viss::dag::maintenance::verify(project.open().unwrap().store()).unwrap();
    assert_eq!(report.corrupt, vec![hash]);
    assert_eq!(
        report.invalidated,
        vec![("normalize".to_string(), "t/b".to_string())]
    );
    assert!(!path.exists(), "a corrupt blob is deleted, never used");

    let rebuilt = project.build();
    // normalize t/b runs again and makes the same bytes, so count t/b is reused.
    expect_ran(
        &rebuilt,
        &[("files", 0), ("normalize", 1), ("count", 0), ("length", 0)],
    );
    assert_eq!(std::fs::read(&path).unwrap(), original);
}

#[test]
fn a_corrupt_input_fails_its_reader_and_is_rebuilt_next_time() {
    let project = TestProject::new(THREE);
    project.build();
    let (hash, path) = blob_of(&project, "files", "t/a", "text");
    corrupt(&path);
    // Make normalize re-read its inputs.
    project.write("prompts/normalize.j2", "New: ");
    let report = project.build();
    let failure = report
        .failures
        .iter()
        .find(|f| f.item == "t/a")
        .expect("the reader of the corrupt blob fails");
    assert_eq!(failure.stage, "normalize");
    assert!(
        failure.error.contains(&format!("blob {hash} is corrupt")),
        "{}",
        failure.error
    );
    assert_eq!(report.counts("normalize").ran, 2);

    let next = project.build();
    assert!(next.failures.is_empty(), "{:?}", next.failures);
    assert_eq!(next.counts("files").ran, 1);
    assert_eq!(next.counts("normalize").ran, 1);
}

#[test]
fn a_second_writer_is_refused_with_the_holder_named() {
    let project = TestProject::new(THREE);
    let _held = project.open().unwrap();
    let error = project
        .open()
        .err()
        .expect("the second open must fail")
        .to_string();
    assert!(error.contains("held by another viss process"), "{error}");
    assert!(
        error.contains(&format!("pid {}", std::process::id())),
        "{error}"
    );
    assert!(error.contains("artifacts/.lock"), "{error}");
}

#[test]
fn unknown_or_mistyped_params_name_the_file_and_key() {
    let project = TestProject::new(THREE);
    project.write(
        "stages/normalize.toml",
        "version = 1\nneeds = [\"files\"]\nprompts = [\"normalize.j2\"]\n[params]\nsufix = \"x\"\n",
    );
    let error = project.open().err().unwrap().to_string();
    assert!(error.contains("stages/normalize.toml"), "{error}");
    assert!(error.contains("sufix"), "{error}");
    assert!(error.contains("stages/normalize.toml:5:"), "{error}");

    project.write(
        "stages/normalize.toml",
        "version = 1\nneeds = [\"files\"]\nprompts = [\"normalize.j2\"]\n[params]\nsuffix = 3\n",
    );
    let error = project.open().err().unwrap().to_string();
    assert!(
        error.contains("suffix") && error.contains("stages/normalize.toml:5:"),
        "{error}"
    );
}

#[test]
fn an_old_stage_files_needs_must_match_the_ports_and_unknown_stage_files_are_errors() {
    let project = TestProject::new(THREE);
    // A `needs` list an older viss wrote is accepted when it says what the ports say.
    project.write(
        "stages/count.toml",
        "version = 1\nneeds = [\"normalize\"]\n",
    );
    assert!(project.open().is_ok());
    project.write(
        "stages/count.toml",
        "version = 1\nneeds = [\"normalise\"]\n",
    );
    let error = project.open().err().unwrap().to_string();
    assert!(
        error.contains("stages/count.toml: `needs = [\"normalise\"]` does not match")
            && error.contains("[\"normalize\"]")
            && error.contains("delete the `needs` line"),
        "{error}"
    );
    std::fs::remove_file(project.root.join("stages/count.toml")).unwrap();

    project.write("stages/summarize.toml", "");
    let error = project.open().err().unwrap().to_string();
    assert!(
        error.contains("stages/summarize.toml") && error.contains("no stage named `summarize`"),
        "{error}"
    );
}

/// A stage whose ports and name come from its params, so a test can wire any graph.
fn wired(name: &'static str, reads: &str) -> StageKind {
    use viss::bench::dag::{StepParams, SyntheticStep};
    StageKind {
        name,
        summary: "wired by its params",
        version: 1,
        prompts: &[],
        defaults: Defaults::Text(Box::leak(
            format!("[params]\nstage = \"{name}\"\nreads = \"{reads}\"\n").into_boxed_str(),
        )),
        load: load_stage::<StepParams, SyntheticStep>,
    }
}

#[test]
fn ports_are_checked_before_anything_runs() {
    let project = TestProject::new(THREE);
    // A cycle through the ports the stages read.
    let kinds: &'static [StageKind] =
        Box::leak(vec![KINDS[0], wired("a", "b"), wired("b", "a")].into_boxed_slice());
    let cyclic = TestProject {
        kinds,
        ..TestProject::new(THREE)
    };
    let error = cyclic.open().err().unwrap().to_string();
    assert!(
        error.contains("the stage graph has a cycle: a -> b -> a"),
        "{error}"
    );
    // A port its producer does not write (`files` writes `text`, not `record`).
    let kinds: &'static [StageKind] =
        Box::leak(vec![KINDS[0], wired("a", "files")].into_boxed_slice());
    let unwired = TestProject { kinds, ..project };
    let error = unwired.open().err().unwrap().to_string();
    assert!(
        error.contains("stage `a` reads port files.record, but `files` does not write it"),
        "{error}"
    );
    assert!(
        !unwired.root.join("artifacts/v3").exists(),
        "nothing was built"
    );
}

#[test]
fn scenarios_spawned_by_an_episode_stage_rerun_only_where_their_own_input_changed() {
    let project = TestProject::with_kinds(
        &[("a", "one\ntwo\nthree"), ("b", "four\nfive")],
        LEVEL_KINDS,
    );
    let first = project.build();
    expect_ran(
        &first,
        &[("files", 2), ("split", 2), ("shout", 5), ("total", 1)],
    );
    let workspace = project.open().unwrap();
    let total = workspace
        .store()
        .index()
        .get("total", "benchmark")
        .unwrap()
        .unwrap();
    let bytes = workspace.store().get_blob(&total.outputs["total"]).unwrap();
    let total: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        total["scenarios"],
        serde_json::json!(["t/a/l01", "t/a/l02", "t/a/l03", "t/b/l01", "t/b/l02"])
    );
    drop(workspace);

    // Edit one line and add one: only those two scenarios run, plus the aggregate.
    project.write("inputs/a.txt", "one\nTWO!\nthree\nfour");
    let second = project.build();
    expect_ran(
        &second,
        &[("files", 1), ("split", 1), ("shout", 2), ("total", 1)],
    );
    assert_eq!(second.counts("shout").fresh, 4);

    expect_ran(
        &project.build(),
        &[("files", 0), ("split", 0), ("shout", 0), ("total", 0)],
    );
}

/// Issue 20: a run is an item of its own below its scenario, so one run re-runs alone.
#[test]
fn runs_spawned_by_a_scenario_stage_are_items_that_rerun_alone() {
    let project = TestProject::with_kinds(&[("a", "one two\nthree")], RUN_KINDS);
    let first = project.build();
    expect_ran(
        &first,
        &[
            ("files", 1),
            ("split", 1),
            ("shout", 2),
            ("fan", 2),
            ("play", 3),
        ],
    );
    let workspace = project.open().unwrap();
    let record = workspace
        .store()
        .index()
        .get("play", "t/a/l01/sim/two/m/r0")
        .unwrap()
        .expect("a run is an item");
    let bytes = workspace
        .store()
        .get_blob(&record.outputs["played"])
        .unwrap();
    let played: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        played,
        serde_json::json!({"run": "t/a/l01/sim/two/m/r0", "mode": "TWO", "of": "ONE TWO"})
    );
    drop(workspace);

    // The second line gains a word: its scenario fans out once more, and only the new run plays.
    project.write("inputs/a.txt", "one two\nthree four");
    let second = project.build();
    expect_ran(
        &second,
        &[
            ("files", 1),
            ("split", 1),
            ("shout", 1),
            ("fan", 1),
            ("play", 2),
        ],
    );
    assert_eq!(second.counts("play").fresh, 2);
}

#[test]
fn until_a_spawning_stage_leaves_its_children_unrun() {
    let project = TestProject::with_kinds(&[("a", "one\ntwo")], LEVEL_KINDS);
    let report = project.build_with(BuildOptions {
        jobs: 2,
        until: vec!["split".into()],
        ..BuildOptions::default()
    });
    assert_eq!(
        report
            .stages
            .iter()
            .map(|(s, _)| s.as_str())
            .collect::<Vec<_>>(),
        ["files", "split"]
    );
    assert_eq!(report.counts("split").ran, 1);
    let workspace = project.open().unwrap();
    assert!(
        workspace
            .store()
            .index()
            .get("shout", "t/a/l01")
            .unwrap()
            .is_none(),
        "a scenario of split ran past --until"
    );
    drop(workspace);
    expect_ran(
        &project.build(),
        &[("files", 0), ("split", 0), ("shout", 2), ("total", 1)],
    );
}

#[test]
fn a_failed_episode_blocks_the_aggregate_instead_of_leaving_a_silent_gap() {
    let project = TestProject::with_kinds(&[("a", "one\ntwo"), ("b", "FAIL here")], LEVEL_KINDS);
    let report = project.build();
    assert_eq!(
        report.counts("split"),
        StageCounts {
            ran: 1,
            failed: 1,
            ..StageCounts::default()
        }
    );
    assert_eq!(
        report.counts("shout").ran,
        2,
        "the good episode's scenarios still run"
    );
    assert_eq!(
        report.counts("total"),
        StageCounts {
            blocked: 1,
            ..StageCounts::default()
        }
    );

    project.write("inputs/b.txt", "fixed");
    let report = project.build();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    expect_ran(
        &report,
        &[("files", 1), ("split", 1), ("shout", 1), ("total", 1)],
    );
}

#[test]
fn flags_of_successful_runs_are_listed_by_status() {
    let project = TestProject::new(THREE);
    let report = project.build();
    assert!(report.failures.is_empty());
    let workspace = project.open().unwrap();
    let flags = viss::dag::status::stored_summary(workspace.store().index())
        .unwrap()
        .flags;
    assert_eq!(
        flags,
        vec![viss::dag::status::Flag {
            stage: "length".into(),
            item: "t/c".into(),
            flag: "only 9 characters".into()
        }]
    );
    let text = viss::dag::status::render_flags(&flags);
    assert!(text.contains("length t/c: only 9 characters"), "{text}");
}

#[test]
fn a_new_version_of_shared_code_reruns_exactly_the_stages_resting_on_it_and_why_says_so() {
    let project = TestProject::with_kinds(THREE, SHARED_CODE_KINDS);
    project.build();
    expect_ran(
        &project.build(),
        &[("files", 0), ("normalize", 0), ("count", 0), ("length", 0)],
    );
    SHARED_CHECKS_VERSION.store(2, std::sync::atomic::Ordering::SeqCst);
    let text = project.why("t/a");
    assert!(
        text.contains("length t/a: will run because shared code `checks`: 1 -> 2"),
        "{text}"
    );
    expect_ran(
        &project.build(),
        &[("files", 0), ("normalize", 0), ("count", 0), ("length", 3)],
    );
}

#[test]
fn switching_a_model_reruns_the_stages_that_use_it_and_why_says_so() {
    let project = TestProject::new(THREE);
    project.build();
    project.write("counter-model.txt", "counter-v2");
    let text = project.why("t/a");
    assert!(
        text.contains("length t/a: will run because model `counter`: builtin -> counter-v2"),
        "{text}"
    );
    expect_ran(
        &project.build(),
        &[("files", 0), ("normalize", 0), ("count", 0), ("length", 3)],
    );
}

#[test]
fn a_stage_driven_by_its_own_level_that_reads_a_finer_one_runs_after_it() {
    let project = TestProject::with_kinds(&[("a", "one\ntwo"), ("b", "three")], PUBLISH_KINDS);
    let first = project.build();
    expect_ran(
        &first,
        &[
            ("files", 2),
            ("split", 2),
            ("shout", 3),
            ("total", 1),
            ("publish", 1),
        ],
    );
    let published = |project: &TestProject| {
        let workspace = project.open().unwrap();
        let record = workspace
            .store()
            .index()
            .get("publish", "benchmark")
            .unwrap()
            .expect("publish ran");
        let bytes = workspace
            .store()
            .get_blob(&record.outputs["published"])
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()
    };
    assert_eq!(
        published(&project)["louds"],
        serde_json::json!(["ONE", "TWO", "THREE"])
    );

    expect_ran(
        &project.build(),
        &[
            ("files", 0),
            ("split", 0),
            ("shout", 0),
            ("total", 0),
            ("publish", 0),
        ],
    );
    // total runs again and lists the same scenarios; publish runs because a scenario it reads
    // from the finer stage changed.
    project.write("inputs/b.txt", "Three!");
    let report = project.build();
    expect_ran(
        &report,
        &[
            ("files", 1),
            ("split", 1),
            ("shout", 1),
            ("total", 1),
            ("publish", 1),
        ],
    );
    assert_eq!(
        published(&project)["louds"],
        serde_json::json!(["ONE", "TWO", "THREE!"])
    );
}

/// `KINDS` after an upgrade of viss that changed `length`'s code and bumped its built-in version.
const KINDS_WITH_LENGTH_V2: &[StageKind] = &[
    KINDS[0],
    KINDS[1],
    KINDS[2],
    StageKind {
        version: 2,
        ..KINDS[3]
    },
];

#[test]
fn a_newer_built_in_stage_version_reruns_it_even_where_the_projects_file_says_older() {
    let project = TestProject::new(THREE);
    // As `viss init` writes it: the built-in file of the viss that made the project.
    project.write("stages/length.toml", "version = 1\nneeds = [\"files\"]\n");
    project.build();
    let upgraded = TestProject {
        kinds: KINDS_WITH_LENGTH_V2,
        ..project
    };
    let text = upgraded.why("t/a");
    assert!(text.contains("stage code version 1 -> 2"), "{text}");
    expect_ran(
        &upgraded.build(),
        &[("files", 0), ("normalize", 0), ("count", 0), ("length", 3)],
    );
    // A version the project sets above the built-in one is its own choice, and is kept.
    upgraded.write("stages/length.toml", "version = 5\nneeds = [\"files\"]\n");
    expect_ran(
        &upgraded.build(),
        &[("files", 0), ("normalize", 0), ("count", 0), ("length", 3)],
    );
    expect_ran(
        &upgraded.build(),
        &[("files", 0), ("normalize", 0), ("count", 0), ("length", 0)],
    );
}

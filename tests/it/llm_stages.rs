//! The LLM annotation stages (annotate, describe, profiles, bdi_risk, tasks, affect,
//! vision_dependence) through `viss build`, answered by the in-process MOCK OpenAI-compatible
//! server (the network boundary; everything else is real): the whole chain on fixture
//! scenarios, faults on the wire, re-runs that make no calls, and prompt edits that re-run only
//! what renders the prompt and what depends on its changed answers.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use viss::llm::mock_server::{BackgroundMockServer, MockReply};

/// The AgentViSS annotation steps, in pipeline order.
pub const STAGES: [&str; 7] = [
    "annotate",
    "describe",
    "profiles",
    "bdi_risk",
    "tasks",
    "affect",
    "vision_dependence",
];

use crate::common;

use common::mock_llm::{digest, ran, step_of, topic};

pub(crate) fn viss(project: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_viss"))
        .arg("-C")
        .arg(project)
        .args(args)
        .output()
        .unwrap()
}

pub(crate) fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Two scenes between Ada and Ben, each long enough to be a scenario.
const SCRIPT: &str = "[Scene: A kitchen, early morning. Ada and Ben.]\n\
Ada: You took the van again.\nBen: I brought it back.\nAda: With no fuel in it.\nBen: There was \
some fuel.\n\
Ada: The light was on the whole way.\nBen: Then it was nearly some fuel.\nAda: I have a delivery \
at nine.\n\
Ben: I can drive you.\nAda: In what?\nBen: (pausing) In the van, after I fill it.\nAda: With whose \
money?\nBen: Yours, I suppose.\n\
\n[Scene: The petrol station. Ada and Ben.]\n\
Ben: Pump four is free.\nAda: You pay this time.\nBen: I left my wallet.\nAda: Of course you did.\n\
Ben: I will pay you back on Friday.\nAda: Which Friday?\nBen: This one, I promise.\nAda: Write it \
down.\n\
Ben: On what?\nAda: On your hand, if you must.\nBen: (writing) Friday, fuel, Ada.\nAda: Good. Now \
fill it up.\n";

const PARTICIPANTS: [&str; 2] = ["Ada", "Ben"];

/// A valid answer for the step the request asks (named by its response schema).
pub(crate) fn valid_answer(body: &Value) -> Value {
    let d = digest(body);
    let roles = |make: &dyn Fn(&str, &str) -> Value| -> Value {
        Value::Array(
            PARTICIPANTS
                .iter()
                .map(|name| {
                    let other = PARTICIPANTS.iter().find(|o| *o != name).unwrap();
                    make(name, other)
                })
                .collect(),
        )
    };
    match step_of(body).as_str() {
        "annotate" => json!({
            "dialogue_type": "persuasion",
            "roles": roles(&|name, _| json!({
                "name": name, "gender": "unknown", "age": "30s", "occupation": "courier"
            })),
        }),
        "describe" => json!({
            "background": format!("Two flatmates share a delivery van (v{d})."),
            "description": "Ada and Ben argue about the van and who pays for fuel.",
        }),
        // Ada competes in every scene, Ben only in the first: one high, one medium.
        "profiles" => {
            let prompt = body["messages"].to_string();
            let first_scene = prompt.contains("You took the van again");
            // The scene a test inserts (INSERTED_SCENE) is calm: nobody competes, intensity low.
            let calm_scene = prompt.contains("The dryer is free");
            json!({"roles": roles(&|name, _| json!({
                "name": name,
                "profile": format!("{name} shares the van (v{d})."),
                "expression_style": "honest_signaling",
                "conflict_characteristic": if !calm_scene && (name == "Ada" || first_scene) {
                    "competing"
                } else {
                    "accommodating"
                },
                "non_competing_alternative": "compromising",
            }))})
        }
        "bdi_risk" => {
            // The step's example, with the prompt's digest in the revised description.
            let mut answer = viss::bench::scripted::annotation_answer(body, &|_| "unknown");
            answer["revised_description"] =
                json!(format!("Ada and Ben settle who pays for fuel (v{d})."));
            answer
        }
        "tasks" => json!({"roles": roles(&|name, other| {
            let t = topic(&PARTICIPANTS, name);
            json!({
                "name": name,
                "expression_task": format!("{name} states plainly what {t} costs (v{d})."),
                "characteristic_task": format!("{name} refuses to give ground on {t}."),
                "interaction_regulation_task": format!("{name} brings the talk back to {t}."),
                "interaction_outcome_task": format!("{name} gets {other} to agree on a date to pay \
                                                     for {t} by {d}."),
            })
        })}),
        "affect" => json!({"roles": roles(&|name, _| json!({
            "name": name, "emotion": "anger", "facial_expression": "a tight frown",
            "body_action": format!("crosses arms (v{d})"),
        }))}),
        "vision_dependence" => json!({"roles": roles(&|name, _| json!({
            "name": name, "dependence": "weakly", "channels": [],
            "reason": format!("The agreement is said out loud (v{d})."),
        }))}),
        // A step this test does not script (a step added later) answers with its example.
        _ => viss::bench::scripted::annotation_answer(body, &|_| "unknown"),
    }
}

pub(crate) struct LlmProject {
    _temp: tempfile::TempDir,
    pub(crate) root: PathBuf,
}

impl LlmProject {
    /// The `index`-th scenario of the fixture episode, in script order.
    pub(crate) fn scenario(&self, index: usize) -> String {
        common::scenario_ids(&self.root, "van/e1").remove(index)
    }

    /// A project whose annotator is the mock server at `base_url`.
    pub(crate) fn new(base_url: &str) -> Self {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().join("p");
        assert!(
            Command::new(env!("CARGO_BIN_EXE_viss"))
                .arg("init")
                .arg(&root)
                .status()
                .unwrap()
                .success()
        );
        std::fs::create_dir_all(root.join("raw/van")).unwrap();
        std::fs::write(root.join("raw/van/e1.txt"), SCRIPT).unwrap();
        std::fs::write(
            root.join("manifests/shows/van.toml"),
            "license = \"test text written for viss\"\n\n[[episodes]]\nid = \"e1\"\nscript = \
             \"van/e1.txt\"\n",
        )
        .unwrap();
        let config = std::fs::read_to_string(root.join("viss.toml"))
            .unwrap()
            .replace("annotator = \"local\"", "annotator = \"mock:mock-model\"");
        let config = format!(
            "{config}\n[llm.endpoints.mock]\nbase_url = \"{base_url}\"\ntimeout_seconds = \
             2\nmax_retries = 3\nretry_backoff_seconds = 0.01\n\
             [llm.endpoints.mock.prices.\"mock-model\"]\ninput_per_mtok = 1.0\noutput_per_mtok = \
             2.0\n"
        );
        std::fs::write(root.join("viss.toml"), config).unwrap();
        Self { _temp: temp, root }
    }

    /// Builds the annotation stages and what they need; returns the output and the report.
    fn build(&self) -> (Output, Value) {
        let output = viss(
            &self.root,
            &["build", "--until", "affect,vision_dependence", "--json"],
        );
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        (output, report)
    }

    /// Subtitles for the script, one cue per line three seconds apart: `align` then runs with
    /// its sentence embedder (and memoises the embeddings in the store).
    fn with_subtitles(self) -> Self {
        let mut srt = String::new();
        let lines = SCRIPT
            .lines()
            .filter(|line| !line.starts_with('['))
            .filter_map(|line| line.split_once(": "))
            .map(|(_, said)| said);
        for (index, said) in lines.enumerate() {
            let said = said.split(") ").last().unwrap_or(said);
            let (start, end) = (1000 + 3000 * index, 2500 + 3000 * index);
            let time = |ms: usize| {
                format!(
                    "00:{:02}:{:02},{:03}",
                    ms / 60_000,
                    ms / 1000 % 60,
                    ms % 1000
                )
            };
            srt.push_str(&format!(
                "{}\n{} --> {}\n{said}\n\n",
                index + 1,
                time(start),
                time(end)
            ));
        }
        std::fs::write(self.root.join("raw/van/e1.srt"), srt).unwrap();
        let manifest = self.root.join("manifests/shows/van.toml");
        let text = std::fs::read_to_string(&manifest).unwrap() + "subtitles = \"van/e1.srt\"\n";
        std::fs::write(manifest, text).unwrap();
        self
    }

    /// The endpoint sends the key held by the environment variable `variable`.
    fn with_api_key_env(self, variable: &str) -> Self {
        let config = self.root.join("viss.toml");
        let text = std::fs::read_to_string(&config).unwrap().replace(
            "retry_backoff_seconds = 0.01\n",
            &format!("retry_backoff_seconds = 0.01\napi_key_env = \"{variable}\"\n"),
        );
        std::fs::write(config, text).unwrap();
        self
    }

    pub(crate) fn record(&self, stage: &str, item: &str, name: &str) -> Value {
        let output = viss(&self.root, &["show", stage, item, name]);
        assert!(output.status.success(), "{}", text(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    }
}

/// The report's counts of `stage` (`ran`, `failed`, ...).
pub(crate) fn counts<'a>(report: &'a Value, stage: &str) -> &'a Value {
    report["stages"]
        .as_array()
        .and_then(|stages| stages.iter().find(|s| s[0] == stage))
        .map_or(&Value::Null, |s| &s[1])
}

fn ran_counts(report: &Value) -> Vec<(&'static str, u64)> {
    STAGES.iter().map(|s| (*s, ran(report, s))).collect()
}

#[test]
fn mock_server_annotates_the_whole_chain_then_a_warm_rebuild_makes_no_calls() {
    let mock =
        BackgroundMockServer::start(|_, body| MockReply::answer(&valid_answer(body).to_string()));
    let project = LlmProject::new(&mock.server().base_url);
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(
        ran_counts(&report),
        vec![
            ("annotate", 2),
            ("describe", 2),
            ("profiles", 2),
            ("bdi_risk", 2),
            ("tasks", 2),
            ("affect", 2),
            ("vision_dependence", 2)
        ]
    );
    // One request per scenario per step (profiles asks per scenario too), all answered first time.
    assert_eq!(mock.server().request_count(), 14);
    let first_request = mock.server().body(0);
    assert_eq!(first_request["model"], "mock-model");
    assert_eq!(
        first_request["response_format"]["json_schema"]["strict"],
        true
    );

    // What each stage kept is the typed, validated answer.
    let annotation = project.record("annotate", &project.scenario(0), "annotation");
    assert_eq!(annotation["answer"]["dialogue_type"], "persuasion");
    assert_eq!(annotation["model"], "mock:mock-model");
    let tasks = project.record("tasks", &project.scenario(1), "tasks");
    // Roles come in order of first line: Ben opens the second scene.
    assert_eq!(tasks["answer"]["roles"][0]["name"], "Ben");
    let outcome = tasks["answer"]["roles"][0]["interaction_outcome_task"]
        .as_str()
        .unwrap();
    assert!(
        outcome.starts_with("Ben gets Ada to agree on a date to pay for the spare key by "),
        "{outcome}"
    );

    // Two scenarios: quotas high 1, medium 1, low 0; both are already natural, nothing moved.
    let first = project.record(
        "balance",
        "benchmark",
        &format!("profile@{}", &project.scenario(0)),
    );
    let second = project.record(
        "balance",
        "benchmark",
        &format!("profile@{}", &project.scenario(1)),
    );
    assert_eq!(first["profiles"]["conflict_intensity"], "high");
    assert_eq!(second["profiles"]["conflict_intensity"], "medium");
    assert_eq!(second["natural_intensity"], "medium");
    assert!(
        second["explanation"].as_str().unwrap().contains("medium"),
        "{second}"
    );

    // Usage per stage and model reaches `viss status`.
    let status = text(&viss(&project.root, &["status"]));
    assert!(status.contains("llm usage by stage and model"), "{status}");
    assert!(status.contains("mock:mock-model"), "{status}");
    // A script without subtitles is annotated all the same, and flagged for what it lacks.
    assert!(
        status.contains("lists no subtitles in its show manifest, so it gets no time ranges"),
        "{status}"
    );

    // Warm: nothing runs, nothing is asked.
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(
        ran_counts(&report).iter().map(|(_, n)| n).sum::<u64>(),
        0,
        "{report}"
    );
    assert_eq!(mock.server().request_count(), 14);

    // Forget the records but keep the response cache: every stage runs again, from the cache,
    // still with zero calls.
    std::fs::remove_dir_all(project.root.join("artifacts")).unwrap();
    let (output, _) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(
        mock.server().request_count(),
        28,
        "the response cache lives in the store, so a clean store asks again"
    );
}

#[test]
fn mock_server_prompt_edit_reruns_only_the_stages_that_render_it_and_their_dependents() {
    let mock =
        BackgroundMockServer::start(|_, body| MockReply::answer(&valid_answer(body).to_string()));
    let project = LlmProject::new(&mock.server().base_url);
    let (output, _) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    let calls_before = mock.server().request_count();

    // A leaf step: only its own items.
    let affect = project.root.join("prompts/affect.j2");
    std::fs::write(
        &affect,
        std::fs::read_to_string(&affect).unwrap() + "\nKeep each description short.\n",
    )
    .unwrap();
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(
        ran_counts(&report),
        vec![
            ("annotate", 0),
            ("describe", 0),
            ("profiles", 0),
            ("bdi_risk", 0),
            ("tasks", 0),
            ("affect", 2),
            ("vision_dependence", 0)
        ]
    );
    assert_eq!(mock.server().request_count(), calls_before + 2);

    // A middle step: itself, then every stage that reads its changed answers.
    let bdi = project.root.join("prompts/bdi_risk.j2");
    std::fs::write(
        &bdi,
        std::fs::read_to_string(&bdi).unwrap() + "\nBe concrete.\n",
    )
    .unwrap();
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(
        ran_counts(&report),
        vec![
            ("annotate", 0),
            ("describe", 0),
            ("profiles", 0),
            ("bdi_risk", 2),
            ("tasks", 2),
            ("affect", 2),
            ("vision_dependence", 2)
        ]
    );

    // A param: the stage asks again (temperature is in the request), and since the mock's
    // answers do not depend on it, early cutoff keeps everything downstream fresh.
    let tasks = project.root.join("stages/tasks.toml");
    std::fs::write(
        &tasks,
        std::fs::read_to_string(&tasks)
            .unwrap()
            .replace("temperature = 0.0", "temperature = 0.3"),
    )
    .unwrap();
    let calls_before = mock.server().request_count();
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(
        ran_counts(&report),
        vec![
            ("annotate", 0),
            ("describe", 0),
            ("profiles", 0),
            ("bdi_risk", 0),
            ("tasks", 2),
            ("affect", 0),
            ("vision_dependence", 0)
        ]
    );
    assert_eq!(mock.server().request_count(), calls_before + 2);
}

/// `cast` reads annotate's answer and the balanced profiles: a profiles prompt edit, whose
/// answers change, re-runs it for both scenarios; a tasks prompt edit, which it does not read,
/// leaves it fresh.
#[test]
fn mock_server_cast_reruns_for_what_it_reads_and_only_for_that() {
    let mock =
        BackgroundMockServer::start(|_, body| MockReply::answer(&valid_answer(body).to_string()));
    let project = LlmProject::new(&mock.server().base_url);
    let build = || -> Value {
        let output = viss(&project.root, &["build", "--until", "cast,tasks", "--json"]);
        assert!(output.status.success(), "{}", text(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let append = |prompt: &str, line: &str| {
        let path = project.root.join("prompts").join(prompt);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{text}\n{line}\n")).unwrap();
    };
    let report = build();
    assert_eq!((ran(&report, "tasks"), ran(&report, "cast")), (2, 2));

    append("tasks.j2", "Name the character in every task.");
    let report = build();
    assert_eq!((ran(&report, "tasks"), ran(&report, "cast")), (2, 0));

    append("profiles.j2", "Keep each profile to one sentence.");
    let report = build();
    assert_eq!(
        (
            ran(&report, "annotate"),
            ran(&report, "profiles"),
            ran(&report, "cast")
        ),
        (0, 2, 2)
    );
    assert_eq!(ran(&build(), "cast"), 0);
}

/// A third scene between Ada and Ben, inserted between the two of SCRIPT.
const INSERTED_SCENE: &str = "[Scene: The laundrette. Ada and Ben.]\n\
Ada: The dryer is free.\nBen: You go first.\nAda: Thank you.\nBen: Do you have coins?\n\
Ada: A few.\nBen: I can swap you a note.\nAda: That helps.\nBen: Here you are.\nAda: Thanks, Ben.\n\
Ben: Any time.\nAda: Same again next week?\nBen: Same again.\n\n";

#[test]
fn mock_server_inserting_a_scene_mid_script_reruns_only_the_new_scenarios_llm_items() {
    let mock =
        BackgroundMockServer::start(|_, body| MockReply::answer(&valid_answer(body).to_string()));
    let project = LlmProject::new(&mock.server().base_url);
    let (output, _) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    let before = common::scenario_ids(&project.root, "van/e1");
    let profiles_before: Vec<Value> = before
        .iter()
        .map(|id| project.record("balance", "benchmark", &format!("profile@{id}")))
        .collect();
    let calls_before = mock.server().request_count();

    let script = SCRIPT.replacen(
        "[Scene: The petrol station",
        &format!("{INSERTED_SCENE}[Scene: The petrol station"),
        1,
    );
    std::fs::write(project.root.join("raw/van/e1.txt"), script).unwrap();
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));

    let after = common::scenario_ids(&project.root, "van/e1");
    assert_eq!(after.len(), 3);
    assert_eq!(
        (&after[0], &after[2]),
        (&before[0], &before[1]),
        "the old scenarios keep their ids"
    );
    assert_eq!(
        ran_counts(&report),
        STAGES.iter().map(|stage| (*stage, 1)).collect::<Vec<_>>(),
        "each step ran once: for the new scenario (profiles: once for the benchmark)"
    );
    let asked: Vec<String> = (calls_before..mock.server().request_count())
        .map(|i| step_of(&mock.server().body(i)))
        .collect();
    assert_eq!(
        asked.len(),
        7,
        "only the new scenario was asked about, once per step: {asked:?}"
    );
    // Three scenarios: quotas 1/1/1. The new one is naturally low, so nobody else moved and
    // the old records are byte for byte what they were.
    let inserted = project.record("balance", "benchmark", &format!("profile@{}", after[1]));
    assert_eq!(
        inserted["profiles"]["conflict_intensity"], "low",
        "{inserted}"
    );
    for (id, before) in [&after[0], &after[2]].into_iter().zip(&profiles_before) {
        assert_eq!(
            &project.record("balance", "benchmark", &format!("profile@{id}")),
            before
        );
    }
}

#[test]
fn mock_server_faults_are_retried_then_answered_and_nothing_is_defaulted() {
    // Per step and scenario, the first attempt meets a fault: 429 with Retry-After, 500, a
    // timeout, malformed JSON, a truncated answer, or JSON that breaks the schema. Retries and
    // re-asks get through every one of them.
    let seen = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let faults = Arc::new(AtomicUsize::new(0));
    let (seen_in, faults_in) = (seen.clone(), faults.clone());
    let mock = BackgroundMockServer::start(move |_, body| {
        let reasked = body["messages"].as_array().is_some_and(|m| m.len() > 2);
        let key = (step_of(body), body["messages"][1].to_string());
        if reasked || !seen_in.lock().unwrap().insert(key) {
            return MockReply::answer(&valid_answer(body).to_string());
        }
        let fault = faults_in.fetch_add(1, Ordering::SeqCst) % 6;
        match fault {
            0 => MockReply::status(429, "{\"error\":\"slow down\"}").header("Retry-After", "0"),
            1 => MockReply::status(500, "{\"error\":\"boom\"}"),
            2 => MockReply::answer(&valid_answer(body).to_string())
                .after(std::time::Duration::from_secs(3)),
            3 => MockReply::status(200, "{\"choices\": [ not json"),
            4 => MockReply::answer(&valid_answer(body).to_string()[..20]),
            _ => MockReply::answer("{\"roles\": 42}"),
        }
    });
    let project = LlmProject::new(&mock.server().base_url);
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(
        faults.load(Ordering::SeqCst),
        14,
        "every first attempt met a fault"
    );
    assert_eq!(ran(&report, "vision_dependence"), 2);
}

#[test]
fn mock_server_that_never_gives_valid_json_fails_the_item_after_five_reasks_with_the_problem() {
    // Scenario 2's annotation is always schema-violating or not JSON, by turns (so its re-asks
    // do not stop at a problem repeated); scenario 1 is fine.
    let mock = BackgroundMockServer::start(|_, body| {
        if step_of(body) == "annotate" && body["messages"].to_string().contains("Pump four is free")
        {
            match reasks(body) % 2 {
                0 => MockReply::answer("{\"dialogue_type\": \"gossip\", \"roles\": []}"),
                _ => MockReply::answer("The scene is gossip."),
            }
        } else {
            MockReply::answer(&valid_answer(body).to_string())
        }
    });
    let project = LlmProject::new(&mock.server().base_url);
    let (output, report) = project.build();
    assert!(
        !output.status.success(),
        "a failed item makes the build fail"
    );
    let message = text(&output);
    assert!(message.contains(&project.scenario(1)), "{message}");
    assert!(
        message.contains("6 answers") && message.contains("re-asked 5 times"),
        "{message}"
    );
    assert!(
        message.contains("gossip"),
        "the last problem is named: {message}"
    );
    assert_eq!(counts(&report, "annotate")["failed"], 1);
    assert_eq!(ran(&report, "annotate"), 1);
    // The failed scenario holds only itself: the other is profiled and balanced on its own.
    assert_eq!(ran(&report, "profiles"), 1);
    assert_eq!(ran(&report, "balance"), 1);
    assert_eq!(counts(&report, "profiles")["blocked"], 1, "{report}");
    // Nothing was stored for the failed item: no default answer stands in for it.
    let show = viss(
        &project.root,
        &["show", "annotate", &project.scenario(1), "annotation"],
    );
    assert!(!show.status.success());
    let annotate_calls = (0..mock.server().request_count())
        .filter(|&i| step_of(&mock.server().body(i)) == "annotate")
        .count();
    assert_eq!(annotate_calls, 1 + 6);
}

/// `viss ARGS` on `project` with `env` set.
fn viss_env(project: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_viss"));
    command.arg("-C").arg(project).args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// A key without digits, long enough to be a secret, and long enough that an answer quoting it
/// is never a plausible age.
const ECHOED_KEY: &str = "sk-echo-never-store-or-print-this-key-QWERTYUIOPASDFGHJKL";
const ECHOED_KEY_VAR: &str = "VISS_TEST_ECHOED_API_KEY";

#[test]
fn mock_server_echoing_the_api_key_never_gets_it_stored_or_printed() {
    // A hostile endpoint echoes the Authorization header it was sent: inside a valid
    // description (which is kept), and inside an annotation of the second scenario that never
    // passes (so the failure quotes it), wrapped in terminal control characters.
    let mock = BackgroundMockServer::start_with_authorization(|_, body, authorization| {
        let echoed = authorization
            .unwrap_or("no Authorization header")
            .to_string();
        let mut answer = valid_answer(body);
        match step_of(body).as_str() {
            "annotate" if body["messages"].to_string().contains("Pump four is free") => {
                let hostile = format!(
                    "\u{7}\u{0}\u{1b}[J{echoed}\u{9b} is a header echoed back, not any kind of age"
                );
                answer["roles"][0]["age"] = json!(hostile);
            }
            "describe" => answer["background"] = json!(format!("The request said {echoed}.")),
            _ => {}
        }
        MockReply::answer(&answer.to_string())
    });
    let project = LlmProject::new(&mock.server().base_url).with_api_key_env(ECHOED_KEY_VAR);
    let env = [(ECHOED_KEY_VAR, ECHOED_KEY)];
    let run = |args: &[&str]| viss_env(&project.root, args, &env);
    let raw_controls = ['\u{7}', '\u{0}', '\u{9b}'];
    let check_printed = |what: &str, output: &Output| {
        let printed = text(output);
        assert!(
            !printed.contains(ECHOED_KEY),
            "{what} printed the key: {printed}"
        );
        for control in raw_controls {
            assert!(
                !printed.contains(control),
                "{what} printed {control:?} raw: {printed:?}"
            );
        }
        assert!(
            !printed.contains("\u{1b}[J"),
            "{what} printed an escape sequence raw: {printed:?}"
        );
    };

    let build = run(&["build", "--until", "annotate,describe", "--json"]);
    assert_eq!(
        build.status.code(),
        Some(1),
        "the second annotation fails: {}",
        text(&build)
    );
    assert_eq!(
        mock.server().state.requests.lock().unwrap()[0]
            .authorization
            .as_deref(),
        Some(format!("Bearer {ECHOED_KEY}").as_str()),
        "the key is sent"
    );
    check_printed("build --json", &build);
    let report: Value = serde_json::from_slice(&build.stdout).unwrap();
    let failure = report["failures"][0]["error"].as_str().unwrap();
    assert!(failure.contains("Bearer <redacted>"), "{failure}");

    // A human build retries the failed item and prints the failure: redacted, escaped.
    let build = run(&["build", "--until", "annotate,describe"]);
    assert_eq!(build.status.code(), Some(1), "{}", text(&build));
    check_printed("build", &build);
    let stderr = String::from_utf8_lossy(&build.stderr);
    // The answer's control characters fail it (a text field holds none) and are shown escaped.
    assert!(
        stderr.contains("roles[0].age holds the control character U+0007"),
        "{stderr}"
    );
    assert!(
        stderr.contains("u0000\\\\u001b[JBearer <redacted>"),
        "{stderr}"
    );

    let failed = project.scenario(1);
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["status", "--why", failed.as_str()],
    ] {
        check_printed(&args.join(" "), &run(args));
    }
    let shown = run(&["show", "annotate", &failed]);
    check_printed("show of the failed item", &shown);
    assert!(
        text(&shown).contains("failed: ") && text(&shown).contains("<redacted>"),
        "{}",
        text(&shown)
    );
    let description = run(&["show", "describe", &project.scenario(0), "description"]);
    check_printed("show of the description", &description);
    let description: Value = serde_json::from_slice(&description.stdout).unwrap();
    assert_eq!(
        description["answer"]["background"],
        "The request said Bearer <redacted>."
    );

    // Nowhere in the store: not in a blob, the index, its logs or the response cache.
    let files = files_under(&project.root.join("artifacts"));
    assert!(files.len() > 10, "{files:?}");
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        let found = bytes
            .windows(ECHOED_KEY.len())
            .any(|window| window == ECHOED_KEY.as_bytes());
        assert!(!found, "the key is stored in {}", file.display());
    }
}

const SLASHED_KEY: &str = "sk-proj/echoed+escaped/KEY-0123456789abcdef";
const SLASHED_KEY_VAR: &str = "VISS_TEST_SLASHED_API_KEY";

/// Every way a server may write `key` inside a JSON string that viss's own check for the key
/// as written would miss.
fn escaped_spellings(key: &str) -> Vec<String> {
    vec![
        key.replace('/', "\\/"),
        key.replacen('s', "\\u0073", 1).replace('K', "\\u004B"),
        key.replace('/', "\\\\\\/"),
    ]
}

#[test]
fn mock_server_echoing_the_api_key_escaped_as_json_allows_never_gets_it_stored_or_printed() {
    // The server echoes the key inside a kept description, written as JSON allows: `/` as
    // `\/`, letters as `\u` escapes, escaped once more inside an escaped string; and inside an
    // annotation that never passes, so that the failure quotes the raw answer.
    let mock = BackgroundMockServer::start_with_authorization(|_, body, authorization| {
        let key = authorization
            .and_then(|header| header.strip_prefix("Bearer "))
            .unwrap_or("no key")
            .to_string();
        let mut answer = valid_answer(body);
        let second = body["messages"].to_string().contains("Pump four is free");
        match step_of(body).as_str() {
            // A NUL makes it unusable, so the item fails quoting the answer.
            "annotate" if second => answer["roles"][0]["age"] = json!("KEYSPOT0 age\u{0}"),
            "describe" => {
                answer["background"] = json!("Keys: KEYSPOT0, KEYSPOT1 and KEYSPOT2.");
            }
            _ => {}
        }
        let mut raw = answer.to_string();
        for (at, spelt) in escaped_spellings(&key).iter().enumerate() {
            raw = raw.replace(&format!("KEYSPOT{at}"), spelt);
        }
        MockReply::answer(&raw)
    });
    let project = LlmProject::new(&mock.server().base_url).with_api_key_env(SLASHED_KEY_VAR);
    let env = [(SLASHED_KEY_VAR, SLASHED_KEY)];
    let run = |args: &[&str]| viss_env(&project.root, args, &env);
    let mut spellings = escaped_spellings(SLASHED_KEY);
    spellings.push(SLASHED_KEY.to_string());
    let check = |what: &str, bytes: &[u8]| {
        for spelt in &spellings {
            let found = bytes
                .windows(spelt.len())
                .any(|window| window == spelt.as_bytes());
            assert!(!found, "{what} holds the key as {spelt}");
        }
        // The key's distinctive middle in any spelling.
        let text = String::from_utf8_lossy(bytes);
        assert!(!text.contains("echoed+escaped"), "{what}: {text}");
    };
    let build = run(&["build", "--until", "annotate,describe"]);
    assert_eq!(build.status.code(), Some(1), "{}", text(&build));
    check("build's output", text(&build).as_bytes());
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["show", "annotate", &project.scenario(1)],
        &["show", "describe", &project.scenario(0), "description"],
    ] {
        let output = run(args);
        check(&args.join(" "), text(&output).as_bytes());
    }
    let description = run(&["show", "describe", &project.scenario(0), "description"]);
    let description: Value = serde_json::from_slice(&description.stdout).unwrap();
    assert_eq!(
        description["answer"]["background"],
        "Keys: <redacted>, <redacted> and <redacted>."
    );
    for file in files_under(&project.root.join("artifacts")) {
        check(&file.display().to_string(), &std::fs::read(&file).unwrap());
    }
}

/// How many times the request was re-asked so far: a re-ask is the question again, sampled
/// warmer by a step per re-ask, and these projects ask at temperature 0.
fn reasks(body: &Value) -> usize {
    let temperature = body["temperature"].as_f64().unwrap_or(0.0);
    (temperature / f64::from(viss::llm::backend::REASK_TEMPERATURE_STEP)).round() as usize
}

#[test]
fn mock_server_rejected_answers_are_paid_for_and_counted_in_build_and_status() {
    // Scenario 1's annotation breaks the schema twice and then passes; scenario 2's never
    // passes (one ask and five re-asks, then the item fails; its answers alternate between
    // two problems, so the re-asks do not stop at a repeated one). Every one of those answers
    // was paid for.
    let mock = BackgroundMockServer::start(|_, body| {
        let second = body["messages"].to_string().contains("Pump four is free");
        if step_of(body) == "annotate" && second && reasks(body) % 2 == 1 {
            return MockReply::answer("The scene is gossip.");
        }
        if step_of(body) == "annotate" && (second || reasks(body) < 2) {
            return MockReply::answer("{\"dialogue_type\": \"gossip\", \"roles\": []}");
        }
        MockReply::answer(&valid_answer(body).to_string())
    });
    let project = LlmProject::new(&mock.server().base_url);
    let build = viss(&project.root, &["build", "--until", "annotate", "--json"]);
    assert_eq!(build.status.code(), Some(1), "{}", text(&build));
    assert_eq!(mock.server().request_count(), 3 + 6);
    let report: Value = serde_json::from_slice(&build.stdout).unwrap();
    // 9 answers of 100 prompt and 20 completion tokens, at $1 and $2 per million.
    let check = |usage: &Value, calls: &str, what: &str| {
        assert_eq!(usage[calls], 9, "{what}: {usage}");
        assert_eq!(usage["rejected_calls"], 2 + 6, "{what}: {usage}");
        assert_eq!(usage["prompt_tokens"], 900, "{what}: {usage}");
        assert_eq!(usage["completion_tokens"], 180, "{what}: {usage}");
        let cost = usage["cost_usd"].as_f64().unwrap();
        assert!((cost - 9.0 * 140e-6).abs() < 1e-9, "{what}: {usage}");
    };
    check(&report["usage"], "llm_calls", "build --json");
    check(
        &report["usage"]["by_model"]["mock:mock-model"],
        "calls",
        "build --json, by model",
    );

    let status = viss(&project.root, &["status", "--json"]);
    assert!(status.status.success(), "{}", text(&status));
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    let annotate = &status["stored"]["annotate"]["usage"];
    check(annotate, "llm_calls", "status --json");
    check(
        &annotate["by_model"]["mock:mock-model"],
        "calls",
        "status --json, by model",
    );
    // The failed item's record holds its six answers.
    assert_eq!(status["stored"]["annotate"]["failed"], 1);

    let human = text(&viss(&project.root, &["status"]));
    let stored = human.split("stored results:").nth(1).unwrap();
    let row = stored
        .lines()
        .find(|line| line.starts_with("annotate "))
        .unwrap();
    let numbers: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        numbers[4..6],
        ["9", "8"],
        "llm calls, then rejected: {human}"
    );
    let human_build = text(&viss(&project.root, &["build", "--until", "annotate"]));
    assert!(
        human_build.contains("llm: 6 answer(s) (6 rejected"),
        "the retry's answers: {human_build}"
    );
}

/// The output hashes of every stored (stage, item), read from the store's index.
fn stored_outputs(root: &Path) -> std::collections::BTreeMap<(String, String), Value> {
    let store = viss::dag::store::Store::open(&root.join("artifacts")).unwrap();
    let records = store.index().scan_all().unwrap();
    records
        .into_iter()
        .map(|(stage, item, record)| {
            assert!(record.error.is_none(), "{stage} {item}: {:?}", record.error);
            (
                (stage, item),
                serde_json::to_value(&record.outputs).unwrap(),
            )
        })
        .collect()
}

#[test]
fn mock_server_rebuild_from_an_empty_store_with_a_warm_memo_gives_byte_identical_records() {
    let mock =
        BackgroundMockServer::start(|_, body| MockReply::answer(&valid_answer(body).to_string()));
    let project = LlmProject::new(&mock.server().base_url).with_subtitles();
    let (output, _) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    let first = stored_outputs(&project.root);
    let calls = mock.server().request_count();

    forget_records_keep_memo(&project.root);
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    for stage in ["ingest", "parse_script", "parse_subtitles", "align"]
        .iter()
        .chain(&STAGES)
    {
        assert!(ran(&report, stage) > 0, "{stage} ran again: {report}");
    }
    let second = stored_outputs(&project.root);
    assert_eq!(
        first.keys().collect::<Vec<_>>(),
        second.keys().collect::<Vec<_>>()
    );
    for (at, outputs) in &first {
        assert_eq!(
            outputs, &second[at],
            "{at:?}: the same inputs made different bytes"
        );
    }
    // The memo really was warm: nothing embedded, no model asked.
    assert_eq!(mock.server().request_count(), calls);
    let listing = text(&viss(&project.root, &["show", "align", "van/e1"]));
    assert!(listing.contains("stat\ttexts_embedded\t0\n"), "{listing}");
    assert!(
        listing.contains("stat\tembeddings_from_memo\t"),
        "{listing}"
    );
}

/// Forgets every record and blob of the project's store and keeps the memo (embeddings and
/// LLM answers): the next build makes everything again from the memo.
fn forget_records_keep_memo(root: &Path) {
    let store = viss::dag::store::Store::open(&root.join("artifacts")).unwrap();
    for (stage, item, _) in store.index().scan_all().unwrap() {
        store.index().remove(&stage, &item).unwrap();
    }
    store.index().flush().unwrap();
    std::fs::remove_dir_all(store.root().join("blobs")).unwrap();
}

/// Cuts the index's log file to half of what it holds (sled's segments are zero-filled).
fn cut_index(root: &Path) {
    let db = root.join(format!(
        "artifacts/v{}/index/db",
        viss::dag::store::LAYOUT_VERSION
    ));
    let bytes = std::fs::read(&db).unwrap();
    let used = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db)
        .unwrap()
        .set_len(used as u64 / 2)
        .unwrap();
}

/// Issue 16: a damaged index. Cut after sled's first snapshot (written when a second command
/// opens the index), every command failed with sled's "Read corrupted data at file offset
/// None" and no hint; cut before it, sled opened what preceded the cut without a word and the
/// build quietly re-ran, paying again for every LLM answer it had lost with the index. Now the
/// damage is named with what to do, `viss verify --repair` restores a working store, and the
/// rebuild after it makes no LLM call.
#[test]
fn mock_server_a_damaged_index_is_named_then_repaired_and_the_rebuild_pays_for_no_call() {
    let mock =
        BackgroundMockServer::start(|_, body| MockReply::answer(&valid_answer(body).to_string()));
    let jobs_run = |report: &Value| -> u64 {
        report["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s[1]["ran"].as_u64().unwrap())
            .sum()
    };
    for snapshot in [false, true] {
        let project = LlmProject::new(&mock.server().base_url);
        let calls_before = mock.server().request_count();
        let (output, report) = project.build();
        assert!(output.status.success(), "{}", text(&output));
        let jobs = jobs_run(&report);
        let calls = mock.server().request_count() - calls_before;
        assert_eq!(calls, 14);
        // Reading a scenario id opens the index too: from then on sled has a snapshot.
        let scenario = if snapshot {
            project.scenario(0)
        } else {
            "van/e1".to_string()
        };
        cut_index(&project.root);

        for args in [
            &["build"][..],
            &["status"],
            &["show", "annotate", &scenario],
            &["verify"],
        ] {
            let out = viss(&project.root, args);
            let message = text(&out);
            assert_eq!(
                out.status.code(),
                Some(2),
                "snapshot {snapshot}, {args:?}: {message}"
            );
            assert!(
                message.contains("index") && message.contains("is damaged"),
                "{message}"
            );
            assert!(message.contains("Run `viss verify --repair`"), "{message}");
        }
        let repaired = viss(&project.root, &["verify", "--repair"]);
        assert!(repaired.status.success(), "{}", text(&repaired));
        assert!(
            text(&repaired).contains("the index was damaged"),
            "{}",
            text(&repaired)
        );

        let (output, report) = project.build();
        assert!(output.status.success(), "{}", text(&output));
        let rerun = jobs_run(&report);
        let new_calls = mock.server().request_count() - calls_before - calls;
        eprintln!(
            "index cut {} sled's first snapshot: the first build ran {jobs} jobs and made \
             {calls} LLM calls; after `viss verify --repair` the rebuild re-ran {rerun} jobs and \
             made {new_calls} LLM calls",
            if snapshot { "after" } else { "before" }
        );
        assert_eq!(new_calls, 0, "every answer came from the memos");
        let (_, report) = project.build();
        assert_eq!(
            ran_counts(&report).iter().map(|(_, n)| n).sum::<u64>(),
            0,
            "{report}"
        );
    }
}

#[test]
fn mock_server_degenerate_answers_are_reasked_with_the_gates_reasons_and_the_records_keep_them() {
    // The first answer of tasks gives every task of a role the same sentence (the demo's), and
    // the first of vision_dependence labels every outcome strongly with all six channels
    // although no outcome names one. The re-asked answers are good.
    let mock = BackgroundMockServer::start(|_, body| {
        let mut answer = valid_answer(body);
        if reasks(body) == 0 {
            match step_of(body).as_str() {
                "tasks" => {
                    // The first role is Ada in scene 1, Ben in scene 2.
                    let first = answer["roles"][0]["name"].as_str().unwrap().to_string();
                    let other = if first == "Ada" { "Ben" } else { "Ada" };
                    let same = format!(
                        "{first} believes {other} knows each other through their names and the \
                         dialogue points to the van and the van people."
                    );
                    for field in [
                        "expression_task",
                        "characteristic_task",
                        "interaction_regulation_task",
                        "interaction_outcome_task",
                    ] {
                        answer["roles"][0][field] = json!(same);
                    }
                }
                "vision_dependence" => {
                    for role in answer["roles"].as_array_mut().unwrap() {
                        role["dependence"] = json!("strongly");
                        role["channels"] = json!([
                            "gaze",
                            "facial_expression",
                            "visible_emotion",
                            "posture",
                            "gesture",
                            "proximity"
                        ]);
                    }
                }
                _ => {}
            }
        }
        MockReply::answer(&answer.to_string())
    });
    let project = LlmProject::new(&mock.server().base_url);
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(ran(&report, "vision_dependence"), 2);
    // Two scenarios, each re-asked once in both steps.
    assert_eq!(mock.server().request_count(), 14 + 4);

    // The re-ask named the problem to the model.
    let reasked: Vec<Value> = (0..mock.server().request_count())
        .map(|i| mock.server().body(i))
        .filter(|body| reasks(body) == 1)
        .collect();
    let said = |step: &str| -> String {
        reasked
            .iter()
            .filter(|body| step_of(body) == step)
            .map(|body| body["messages"].as_array().unwrap().last().unwrap()["content"].to_string())
            .collect()
    };
    assert!(
        said("tasks").contains(
            "Ada: characteristic_task says nearly the same as its expression_task; write a \
             different sentence"
        ),
        "{}",
        said("tasks")
    );
    assert!(
        said("vision_dependence").contains("names no visual channel; make it weakly"),
        "{}",
        said("vision_dependence")
    );

    // Each record keeps why its first answer was rejected; the accepted answer is the good one.
    let tasks = project.record("tasks", &project.scenario(0), "tasks");
    let rejected = tasks["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 1, "{tasks}");
    let reason = rejected[0]["message"].as_str().unwrap();
    let problems = rejected[0]["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .all(|p| p["role"] == "Ada" && p["kind"] == "near_duplicate"),
        "{tasks}"
    );
    for field in [
        "characteristic_task",
        "interaction_regulation_task",
        "interaction_outcome_task",
    ] {
        assert!(
            reason.contains(&format!(
                "Ada: {field} says nearly the same as its expression_task"
            )),
            "{reason}"
        );
    }
    assert!(
        tasks["answer"]["roles"][0]["expression_task"]
            .as_str()
            .unwrap()
            .starts_with("Ada states plainly what the fuel money costs"),
        "{tasks}"
    );
    let vision = project.record(
        "vision_dependence",
        &project.scenario(1),
        "vision_dependence",
    );
    let reason = vision["rejected"][0]["message"].as_str().unwrap();
    assert!(
        reason.contains("Ben: dependence is strongly but Ben's interaction_outcome_task"),
        "{reason}"
    );
    assert_eq!(vision["answer"]["roles"][0]["dependence"], "weakly");
    // A step whose first answer passed was asked once, and says so.
    let bdi = project.record("bdi_risk", &project.scenario(0), "bdi_risk");
    assert_eq!(bdi["rejected"], json!([]));
}

#[test]
fn mock_server_a_degenerate_answer_repeated_past_the_limit_is_kept_flagged_with_the_reason() {
    // Scenario 2's bdi_risk answer always gives both roles the demo's template risks; scenario 1
    // is fine.
    let mock = BackgroundMockServer::start(|_, body| {
        let mut answer = valid_answer(body);
        if step_of(body) == "bdi_risk" && body["messages"].to_string().contains("Pump four is free")
        {
            answer["roles"][0]["risk_if_failed"] =
                json!("The character stands to lose if they do not get it");
            answer["roles"][1]["risk_if_failed"] = json!("No risk if they do not get it.");
        }
        MockReply::answer(&answer.to_string())
    });
    let project = LlmProject::new(&mock.server().base_url);
    let (output, report) = project.build();
    assert!(
        output.status.success(),
        "flagged, not failed: {}",
        text(&output)
    );
    assert_eq!(counts(&report, "bdi_risk")["failed"], 0, "{report}");
    assert_eq!(ran(&report, "bdi_risk"), 2);
    let bdi_calls = (0..mock.server().request_count())
        .filter(|&i| step_of(&mock.server().body(i)) == "bdi_risk")
        .count();
    assert_eq!(bdi_calls, 1 + viss::llm::STALLED_AFTER as usize);
    // The last answer is kept, with both roles' problems; nothing is defaulted.
    let bdi = project.record("bdi_risk", &project.scenario(1), "bdi_risk");
    let mut kept: Vec<&str> = (0..2)
        .map(|r| {
            bdi["answer"]["roles"][r]["risk_if_failed"]
                .as_str()
                .unwrap()
        })
        .collect();
    kept.sort_unstable();
    assert_eq!(
        kept,
        [
            "No risk if they do not get it.",
            "The character stands to lose if they do not get it"
        ]
    );
    let problems: Vec<&str> = bdi["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["message"].as_str().unwrap())
        .collect();
    for who in ["Ada", "Ben"] {
        assert!(
            problems.iter().any(|p| {
                p.starts_with(&format!(
                    "{who}: risk_if_failed names no concrete social cost"
                ))
            }),
            "{problems:?}"
        );
    }
    let ada = bdi["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["role"] == "Ada")
        .unwrap_or_else(|| panic!("no problem of Ada's: {bdi}"));
    assert_eq!(ada["field"], "risk_if_failed");
    let stalled = viss::llm::STALLED_AFTER as usize;
    assert_eq!(bdi["rejected"].as_array().unwrap().len(), stalled);
    // Later stages ran on it, and say so.
    assert_eq!(ran(&report, "tasks"), 2);
    let tasks = project.record("tasks", &project.scenario(1), "tasks");
    assert_eq!(tasks["flagged_upstream"], json!(["bdi_risk"]));
    // `viss status` counts it as flagged; `viss show` lists its problems.
    let status = viss(&project.root, &["status", "--json"]);
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["stored"]["bdi_risk"]["gate_flagged"], 1, "{status}");
    assert_eq!(status["stored"]["bdi_risk"]["failed"], 0, "{status}");
}

/// A per-role BDI entry for `name` from the mock: its own topic, or `copy_of`'s desire.
fn bdi_entry(name: &str, copy_desire_of: Option<&str>) -> Value {
    let other = PARTICIPANTS.iter().find(|o| **o != name).unwrap();
    let t = topic(&PARTICIPANTS, name);
    let desire = match copy_desire_of {
        Some(who) => format!(
            "A clear answer on {} before tonight.",
            topic(&PARTICIPANTS, who)
        ),
        None => format!("A clear answer on {t} before tonight."),
    };
    json!({
        "name": name,
        "belief": format!("{other} has been unfair about {t}."),
        "desire": desire,
        "intention": format!("Press {other} to settle {t} today."),
        "risk_if_failed": format!("Losing {other}'s trust over {t}."),
    })
}

/// A mock whose `bdi_risk` scene part revises the description, whose role parts answer
/// `role_entry(name, first_scene, body)` (`first_scene`: the scenario in which Ada speaks first)
/// and whose other steps answer validly.
fn per_role_bdi_mock(
    role_entry: impl Fn(&str, bool, &Value) -> Value + Send + Sync + 'static,
) -> BackgroundMockServer {
    BackgroundMockServer::start(move |_, body| {
        let answer = match step_of(body).as_str() {
            "bdi_risk_scene" => json!({
                "revised_description": "Ada and Ben settle who pays for fuel and when."
            }),
            "bdi_risk_role" => {
                let schema = &body["response_format"]["json_schema"]["schema"];
                let name = schema["properties"]["name"]["enum"][0].as_str().unwrap();
                let first_scene = !body["messages"].to_string().contains("Pump four is free");
                role_entry(name, first_scene, body)
            }
            _ => valid_answer(body),
        };
        MockReply::answer(&answer.to_string())
    })
}

/// A project on `base_url` whose `bdi_risk` asks one part at a time.
fn per_role_bdi_project(base_url: &str) -> LlmProject {
    let project = LlmProject::new(base_url);
    let params = project.root.join("stages/bdi_risk.toml");
    let text_before = std::fs::read_to_string(&params).unwrap();
    let per_role = text_before.replace(
        "max_tokens = 2048\n",
        "max_tokens = 2048\nper_role = true\n",
    );
    std::fs::write(&params, per_role).unwrap();
    project
}

#[test]
fn mock_server_per_role_asks_the_scene_then_each_role_after_the_earlier_ones_and_reasks_one() {
    // bdi_risk asked one part at a time: the revised description, then each role. A BDI part
    // does not show the entries before it (the 1.5B model copied them), but it is validated
    // with them: Ben's first entry after Ada's repeats her desire, so only Ben is re-asked, with
    // the reason, and the record keeps it. (In the first scenario Ada speaks first, in the
    // second Ben, who then has nothing to copy.)
    let mock = per_role_bdi_mock(|name, first_scene, body| {
        let reasked = body["messages"].as_array().map_or(0, Vec::len) > 2;
        let copy = (name == "Ben" && first_scene && !reasked).then_some("Ada");
        bdi_entry(name, copy)
    });
    let project = per_role_bdi_project(&mock.server().base_url);
    let build = viss(&project.root, &["build", "--until", "bdi_risk", "--json"]);
    assert!(build.status.success(), "{}", text(&build));

    let bodies: Vec<Value> = (0..mock.server().request_count())
        .map(|i| mock.server().body(i))
        .filter(|body| step_of(body).starts_with("bdi_risk"))
        .collect();
    // The scenarios run side by side; each asks in its order.
    let (second, first): (Vec<Value>, Vec<Value>) = bodies
        .into_iter()
        .partition(|body| body["messages"].to_string().contains("Pump four is free"));
    let asked = |bodies: &[Value]| -> Vec<(String, String)> {
        bodies
            .iter()
            .map(|body| {
                let schema = &body["response_format"]["json_schema"]["schema"];
                let who = schema["properties"]["name"]["enum"][0].as_str();
                (step_of(body), who.unwrap_or("-").to_string())
            })
            .collect()
    };
    let pair = |step: &str, who: &str| (format!("bdi_risk_{step}"), who.to_string());
    assert_eq!(
        asked(&first),
        [
            pair("scene", "-"),
            pair("role", "Ada"),
            pair("role", "Ben"),
            pair("role", "Ben")
        ]
    );
    assert_eq!(
        asked(&second),
        [pair("scene", "-"), pair("role", "Ben"), pair("role", "Ada")]
    );
    let bodies = first;
    let ada_desire = bdi_entry("Ada", None)["desire"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !bodies[1]["messages"].to_string().contains(&ada_desire),
        "Ada's request shows no entry"
    );
    let ben = bodies[2]["messages"].to_string();
    assert!(!ben.contains(&ada_desire), "Ben's request shows no entry");
    assert!(ben.contains("asked for separately"), "{ben}");

    let record = project.record("bdi_risk", &project.scenario(0), "bdi_risk");
    let rejected = record["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 1, "{record}");
    let reason = rejected[0]["message"].as_str().unwrap();
    assert!(
        reason.contains("Ben: desire says nearly the same as Ada's desire"),
        "{reason}"
    );
    let problem = &rejected[0]["problems"][0];
    assert_eq!(
        (&problem["role"], &problem["field"], &problem["kind"]),
        (&json!("Ben"), &json!("desire"), &json!("near_duplicate")),
        "{record}"
    );
    let roles = record["answer"]["roles"].as_array().unwrap();
    assert_eq!(roles[0], bdi_entry("Ada", None));
    assert_eq!(roles[1], bdi_entry("Ben", None));
    assert_eq!(
        record["answer"]["revised_description"],
        "Ada and Ben settle who pays for fuel and when."
    );
}

#[test]
fn mock_server_per_role_asks_the_earlier_role_again_when_a_later_one_keeps_repeating_it() {
    // Asked one role at a time, Ben (first scenario) writes Ada's desire again through all his
    // answers. The way out: Ben asked once more, held to his own problems only, passes; then
    // Ada is asked again with Ben's entry in place, told his sentence, and writes another.
    let mock = per_role_bdi_mock(|name, first_scene, body| {
        let messages = body["messages"].to_string();
        let told_of_ben = messages.contains("nearly the same as Ben's desire");
        match name {
            "Ben" if first_scene => bdi_entry("Ben", Some("Ada")),
            "Ada" if first_scene && told_of_ben => bdi_entry("Ada", Some("Ben")),
            _ => bdi_entry(name, None),
        }
    });
    let project = per_role_bdi_project(&mock.server().base_url);
    let build = viss(&project.root, &["build", "--until", "bdi_risk", "--json"]);
    assert!(build.status.success(), "{}", text(&build));

    let first: Vec<String> = (0..mock.server().request_count())
        .map(|i| mock.server().body(i))
        .filter(|body| step_of(body).starts_with("bdi_risk"))
        .filter(|body| !body["messages"].to_string().contains("Pump four is free"))
        .map(|body| {
            let schema = &body["response_format"]["json_schema"]["schema"];
            schema["properties"]["name"]["enum"][0]
                .as_str()
                .unwrap_or("scene")
                .to_string()
        })
        .collect();
    // The scene; Ada; Ben's rejected answers (a part's first and its re-asks, which stop when
    // the same problem came back three times in a row) and the one held to his own problems;
    // Ada again: her old entry, now a repeat of Ben's, then a new one.
    let mut expected = vec!["scene", "Ada"];
    let ben_answers = viss::llm::STALLED_AFTER as usize + 1;
    expected.extend(vec!["Ben"; ben_answers]);
    expected.extend(["Ada"; 2]);
    assert_eq!(first, expected);

    let record = project.record("bdi_risk", &project.scenario(0), "bdi_risk");
    let roles = record["answer"]["roles"].as_array().unwrap();
    assert_eq!(roles[0], bdi_entry("Ada", Some("Ben")));
    assert_eq!(roles[1], bdi_entry("Ben", Some("Ada")));
    let rejected: Vec<&str> = record["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|refusal| refusal["message"].as_str())
        .collect();
    assert!(
        rejected
            .iter()
            .any(|r| r.contains("Ben: desire says nearly the same as Ada's desire")),
        "{record}"
    );
    assert!(
        rejected
            .iter()
            .any(|r| r.contains("Ada: desire says nearly the same as Ben's desire")),
        "{record}"
    );
}

#[test]
fn mock_server_per_role_takes_a_later_roles_entry_that_stops_repeating_once_asked_apart() {
    // Ben (first scenario) writes Ada's desire again, with a belief in the first person besides,
    // and keeps the repeat through every re-ask that names it. Held to his own problems only
    // (the way out), told of the first person alone, he writes an entry of his own: it passes
    // beside Ada's, so it is his answer, and Ada is not asked again (the demo, 28 Nov, failed
    // an item here: Noor's entry, free of the repeat once asked apart, was thrown away).
    let mock = per_role_bdi_mock(|name, first_scene, body| {
        let messages = body["messages"].to_string();
        let asked_first = body["messages"].as_array().map_or(0, Vec::len) <= 2;
        let told_of_the_repeat = messages.contains("nearly the same as Ada's desire");
        match name {
            "Ben" if first_scene && asked_first => {
                let mut entry = bdi_entry("Ben", Some("Ada"));
                entry["belief"] = json!("I think Ada has been unfair about the bill.");
                entry
            }
            "Ben" if first_scene && told_of_the_repeat => bdi_entry("Ben", Some("Ada")),
            _ => bdi_entry(name, None),
        }
    });
    let project = per_role_bdi_project(&mock.server().base_url);
    let build = viss(&project.root, &["build", "--until", "bdi_risk", "--json"]);
    assert!(build.status.success(), "{}", text(&build));

    let asked_of_ada = (0..mock.server().request_count())
        .map(|i| mock.server().body(i))
        .filter(|body| step_of(body) == "bdi_risk_role")
        .filter(|body| !body["messages"].to_string().contains("Pump four is free"))
        .filter(|body| {
            body["response_format"]["json_schema"]["schema"]["properties"]["name"]["enum"][0]
                == "Ada"
        })
        .count();
    assert_eq!(asked_of_ada, 1, "Ada is asked once");
    let record = project.record("bdi_risk", &project.scenario(0), "bdi_risk");
    let roles = record["answer"]["roles"].as_array().unwrap();
    assert_eq!(roles[0], bdi_entry("Ada", None));
    assert_eq!(roles[1], bdi_entry("Ben", None));
    let rejected = record["rejected"].to_string();
    assert!(
        rejected.contains("Ben: desire says nearly the same as Ada's desire")
            && rejected.contains("Ben: belief speaks in the first person"),
        "{record}"
    );
    // Built again from the memo, the record is the same: the answer Ben gave held to his own
    // problems is not read back as the answer to the question asked beside Ada's, which would
    // skip the way out and its history.
    forget_records_keep_memo(&project.root);
    let build = viss(&project.root, &["build", "--until", "bdi_risk", "--json"]);
    assert!(build.status.success(), "{}", text(&build));
    assert_eq!(
        project.record("bdi_risk", &project.scenario(0), "bdi_risk"),
        record
    );
}

#[test]
fn mock_server_per_role_flags_the_item_when_the_repeated_role_cannot_write_another_either() {
    // As above, but Ada, asked again, keeps her entry: nothing passes, so the entries stand
    // flagged with the repeat as their problem (a person decides), and no entry is invented.
    let mock = per_role_bdi_mock(|name, first_scene, _| match name {
        "Ben" if first_scene => bdi_entry("Ben", Some("Ada")),
        _ => bdi_entry(name, None),
    });
    let project = per_role_bdi_project(&mock.server().base_url);
    let build = viss(&project.root, &["build", "--until", "bdi_risk", "--json"]);
    assert!(build.status.success(), "{}", text(&build));
    let record = project.record("bdi_risk", &project.scenario(0), "bdi_risk");
    let roles = record["answer"]["roles"].as_array().unwrap();
    assert_eq!(roles[0], bdi_entry("Ada", None));
    assert_eq!(roles[1], bdi_entry("Ben", Some("Ada")));
    let problems = record["problems"].to_string();
    assert!(
        problems.contains("Ada: desire says nearly the same as Ben's desire"),
        "{record}"
    );
    let shown = text(&viss(&project.root, &["status"]));
    assert!(shown.contains("answer(s) kept with problems"), "{shown}");
}

#[test]
fn mock_server_status_and_show_answer_while_a_build_runs_and_a_log_gets_progress_lines() {
    // Every answer takes a while, so the build is still running when the others ask.
    let mock = BackgroundMockServer::start(|_, body| {
        MockReply::answer(&valid_answer(body).to_string())
            .after(std::time::Duration::from_millis(1500))
    });
    let project = LlmProject::new(&mock.server().base_url);
    let config = project.root.join("viss.toml");
    let settings = std::fs::read_to_string(&config).unwrap();
    assert!(settings.contains("progress_seconds = 30"), "{settings}");
    std::fs::write(
        &config,
        settings.replace("progress_seconds = 30", "progress_seconds = 1"),
    )
    .unwrap();
    let build = Command::new(env!("CARGO_BIN_EXE_viss"))
        .arg("-C")
        .arg(&project.root)
        .args(["build", "--until", "describe"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while mock.server().request_count() < 2
        || !project.root.join("artifacts/progress.json").exists()
    {
        assert!(
            started.elapsed().as_secs() < 120,
            "the build never got to its models"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let status = viss(&project.root, &["status"]);
    assert!(status.status.success(), "{}", text(&status));
    let shown = text(&status);
    assert!(shown.contains("a build is running (pid "), "{shown}");
    assert!(
        shown.contains("stage") && shown.contains("left") && shown.contains("annotate"),
        "{shown}"
    );
    let status = viss(&project.root, &["status", "--json"]);
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    let stages = status["running"]["stages"].as_array().unwrap();
    assert!(stages.iter().any(|s| s["stage"] == "describe"), "{status}");
    // `show` is answered by the build itself, from its store.
    let show = viss(&project.root, &["show", "ingest", "van/e1"]);
    assert!(show.status.success(), "{}", text(&show));
    assert!(text(&show).contains("episode\t"), "{}", text(&show));
    let shown = viss(&project.root, &["show", "ingest", "van/nope"]);
    assert_eq!(shown.status.code(), Some(2), "{}", text(&shown));
    assert!(
        text(&shown).contains("no record of stage `ingest`"),
        "{}",
        text(&shown)
    );

    let output = build.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(
        log.lines()
            .any(|line| line.starts_with("viss: ") && line.contains(" done, ")),
        "a progress line in the log: {log}"
    );
    // -q silences them: the descriptions are asked again (their prompt changed), as slowly.
    let prompt = project.root.join("prompts/describe.j2");
    let template = std::fs::read_to_string(&prompt).unwrap();
    std::fs::write(&prompt, format!("{template}\nBe brief.\n")).unwrap();
    let asked = mock.server().request_count();
    let quiet = viss(&project.root, &["-q", "build", "--until", "describe"]);
    assert!(quiet.status.success(), "{}", text(&quiet));
    assert!(
        mock.server().request_count() >= asked + 2,
        "describe ran again"
    );
    assert!(
        !String::from_utf8_lossy(&quiet.stderr).contains(" done, "),
        "{}",
        text(&quiet)
    );
    // After the build, the store is the command's own again.
    let status = viss(&project.root, &["status"]);
    assert!(
        !text(&status).contains("a build is running"),
        "{}",
        text(&status)
    );
}

/// The answer the mock gives when the second scene's description must fail a quality gate:
/// its background says what someone wears, through every re-ask.
pub(crate) fn describing_clothes(body: &Value) -> MockReply {
    let mut answer = valid_answer(body);
    if step_of(body) == "describe" && body["messages"].to_string().contains("Pump four is free") {
        answer["background"] = json!("Ada, wearing a yellow raincoat, shares a van with Ben.");
    }
    MockReply::answer(&answer.to_string())
}

#[test]
fn mock_server_an_answer_failing_a_gate_through_every_reask_is_flagged_and_later_stages_run() {
    let mock = BackgroundMockServer::start(|_, body| describing_clothes(body));
    let project = LlmProject::new(&mock.server().base_url);
    let build = viss(&project.root, &["build", "--until", "export", "--json"]);
    assert!(
        build.status.success(),
        "flagged is not failed: {}",
        text(&build)
    );
    let report: Value = serde_json::from_slice(&build.stdout).unwrap();
    assert_eq!(report["failures"], json!([]), "{report}");
    let flagged = project.scenario(1);
    // Every answer the mock gave for it was asked again, then the answer kept.
    let record = project.record("describe", &flagged, "description");
    assert_eq!(
        record["answer"]["background"],
        "Ada, wearing a yellow raincoat, shares a van with Ben."
    );
    let problems = record["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{record}");
    assert_eq!(problems[0]["field"], "background");
    // Made by the check that found it: the scene's own field, the check's name as its kind.
    assert_eq!(problems[0]["role"], Value::Null, "{record}");
    assert_eq!(problems[0]["kind"], "looks_or_clothing", "{record}");
    assert!(
        problems[0]["message"].as_str().unwrap().contains("wearing"),
        "{record}"
    );
    let stalled = viss::llm::STALLED_AFTER as usize;
    assert_eq!(
        record["rejected"].as_array().unwrap().len(),
        stalled,
        "{record}"
    );
    // The scenario's later stages ran on it, and say they rest on it.
    let tasks = project.record("tasks", &flagged, "tasks");
    assert_eq!(tasks["flagged_upstream"], json!(["describe"]), "{tasks}");
    let clean = project.record("tasks", &project.scenario(0), "tasks");
    assert!(clean.get("flagged_upstream").is_none(), "{clean}");

    // status lists it with its problem, in words and as JSON.
    let status = viss(&project.root, &["status"]);
    let shown = text(&status);
    assert!(shown.contains("answer(s) kept with problems"), "{shown}");
    assert!(shown.contains(&format!("describe {flagged}:")), "{shown}");
    let status = viss(&project.root, &["status", "--json"]);
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["flagged"][0]["item"], flagged.as_str(), "{status}");
    assert_eq!(status["flagged"][0]["problems"][0]["field"], "background");

    // The export leaves it out and the card counts it; include_flagged keeps it, marked.
    let exported = |project: &LlmProject| -> (Vec<Value>, String) {
        let out = project.root.join("export");
        let export = viss(&project.root, &["export"]);
        assert!(export.status.success(), "{}", text(&export));
        let lines = std::fs::read_to_string(out.join("data.jsonl")).unwrap();
        let rows = lines
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (
            rows,
            std::fs::read_to_string(out.join("README.md")).unwrap(),
        )
    };
    let (rows, card) = exported(&project);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["id"], project.scenario(0).as_str());
    assert_eq!(rows[0]["problems"], json!([]));
    assert!(
        card.contains("1 scenario(s) have an answer that still failed"),
        "{card}"
    );
    assert!(card.contains("they are left out"), "{card}");
    assert!(
        card.contains("| `describe` | `looks_or_clothing` | 1 |"),
        "{card}"
    );
    // `check quality` reads the export, and lists the item the export left out.
    let quality = viss(&project.root, &["check", "quality", "--json"]);
    let quality: Value = serde_json::from_slice(&quality.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&quality)));
    assert_eq!(quality["gates"]["flagged_items"], 1, "{quality}");
    std::fs::write(
        project.root.join("stages/export.toml"),
        "[params]\ninclude_flagged = true\n",
    )
    .unwrap();
    let build = viss(&project.root, &["build", "--until", "export"]);
    assert!(build.status.success(), "{}", text(&build));
    let (rows, card) = exported(&project);
    assert_eq!(rows.len(), 2);
    let kept = rows
        .iter()
        .find(|row| row["id"] == flagged.as_str())
        .unwrap();
    assert_eq!(kept["problems"][0]["stage"], "describe", "{kept}");
    assert_eq!(kept["problems"][0]["field"], "background", "{kept}");
    assert!(card.contains("they are in the dataset"), "{card}");
}

#[test]
fn mock_server_a_transport_failure_still_fails_and_holds_only_its_scenario() {
    // The second scene's description never gets through: the server fails every time.
    let mock = BackgroundMockServer::start(|_, body| {
        if step_of(body) == "describe" && body["messages"].to_string().contains("Pump four is free")
        {
            return MockReply::status(503, "overloaded");
        }
        MockReply::answer(&valid_answer(body).to_string())
    });
    let project = LlmProject::new(&mock.server().base_url);
    let build = viss(&project.root, &["build", "--until", "export", "--json"]);
    assert_eq!(build.status.code(), Some(1), "{}", text(&build));
    let report: Value = serde_json::from_slice(&build.stdout).unwrap();
    let failures = report["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{report}");
    assert_eq!(failures[0]["stage"], "describe");
    assert!(
        failures[0]["error"].as_str().unwrap().contains("HTTP 503"),
        "{report}"
    );
    // The other scenario went through every stage, the benchmark-level ones included.
    let ran = |stage: &str| {
        report["stages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|entry| entry[0] == stage && entry[1]["ran"].as_u64() == Some(1))
    };
    for stage in ["balance", "tasks", "export"] {
        assert!(ran(stage), "{stage} ran once: {report}");
    }
    let card = std::fs::read_to_string(project.root.join("export/README.md"));
    assert!(
        card.is_err(),
        "viss export writes the directory, build only the stage"
    );
    let export = viss(&project.root, &["export"]);
    assert!(export.status.success(), "{}", text(&export));
    let card = std::fs::read_to_string(project.root.join("export/README.md")).unwrap();
    assert!(
        card.contains("1 scenario(s) are not in the dataset because a stage failed"),
        "{card}"
    );
}

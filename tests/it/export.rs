//! `viss export` on fixture scenarios annotated through the in-process MOCK OpenAI-compatible
//! server (the network boundary; parsing, alignment, balancing, assembly, Parquet and the
//! files are real): the dataset validates against the committed JSON schema, the Parquet file
//! reads back with the same rows, two clean builds give byte-identical locks, and adding a
//! scene re-runs only the new scenario's items and the export.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use viss::export::lock::DatasetLock;
use viss::llm::mock_server::{BackgroundMockServer, MockReply};

use crate::common;

use common::mock_llm::{
    digest, new_agentviss_requests_for_one_scenario, participants, ran, requests_by_step, step_of,
    topic,
};
use common::{json_of, text, viss};

/// Two scenes between Ada and Ben (the first all competing, the second mixed).
const SCENES_1_2: &str = "[Scene: A kitchen, early morning. Ada and Ben.]\n\
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

/// A third scene with a third character, where nobody competes.
const SCENE_3: &str = "\n[Scene: The garage at noon. Ada, Ben and Cy.]\n\
Cy: The van needs new tyres before winter.\nAda: Then we share the cost three ways.\nBen: I can do \
the fitting myself.\n\
Cy: I know a dealer by the river.\nAda: Ask him for a written price.\nBen: And ask about the spare \
wheel.\n\
Cy: I will call him this afternoon.\nAda: Put the receipt in the glovebox.\nBen: Next to the fuel \
receipts, I hope.\n\
Cy: Those are all yours, Ben.\nAda: We keep a list on the fridge.\nBen: Fine, a list it is.\n";

/// Broadcast-style subtitles for a script: one cue per dialogue line (directions removed),
/// 3 s apart, with a 5 s gap between scenes. Returns the SRT and each scene's (start, end) ms.
fn subtitles(script: &str) -> (String, Vec<(u64, u64)>) {
    let mut srt = String::new();
    let mut scenes: Vec<(u64, u64)> = Vec::new();
    let mut at = 1000u64;
    let mut index = 0;
    for line in script.lines() {
        if line.starts_with("[Scene:") {
            if !scenes.is_empty() {
                at += 5000;
            }
            scenes.push((at, at));
            continue;
        }
        let Some((_, spoken)) = line.split_once(": ") else {
            continue;
        };
        let spoken: String = spoken
            .split(['(', ')'])
            .step_by(2)
            .collect::<Vec<_>>()
            .join("")
            .trim()
            .to_string();
        index += 1;
        let (start, end) = (at, at + 2500);
        let stamp = |ms: u64| {
            format!(
                "00:{:02}:{:02},{:03}",
                ms / 60_000,
                ms / 1000 % 60,
                ms % 1000
            )
        };
        srt.push_str(&format!(
            "{index}\n{} --> {}\n{spoken}\n\n",
            stamp(start),
            stamp(end)
        ));
        scenes.last_mut().unwrap().1 = end;
        at += 3000;
    }
    (srt, scenes)
}

/// A valid answer for the step the request asks, for whoever takes part. Scene 1: everyone
/// competes (high); scene 2: only Ada (medium); scene 3: nobody (low). So three scenarios are
/// already balanced and adding the third moves none of the first two.
fn valid_answer(body: &Value) -> Value {
    let prompt = body["messages"].to_string();
    let scene = if prompt.contains("You took the van again") {
        1
    } else if prompt.contains("Pump four is free") {
        2
    } else {
        3
    };
    let d = digest(body);
    let people = participants(body);
    let roles = |make: &dyn Fn(&str, &str) -> Value| -> Value {
        Value::Array(
            people
                .iter()
                .map(|name| make(name, people.iter().find(|o| *o != name).unwrap()))
                .collect(),
        )
    };
    match step_of(body).as_str() {
        "annotate" => json!({
            "dialogue_type": (["persuasion", "eristic", "deliberation"][scene - 1]),
            "roles": roles(&|name, _| json!({
                "name": name, "gender": if name == "Ada" { "female" } else { "unknown" },
                "age": "30s", "occupation": "courier"
            })),
        }),
        "describe" => json!({
            "background": format!("Flatmates share a delivery van (v{d})."),
            "description": "They sort out who pays for the van.",
        }),
        "profiles" => json!({"roles": roles(&|name, _| json!({
            "name": name,
            "profile": format!("{name} shares the van (v{d})."),
            "expression_style":
                if name == "Ben" { "strategic_withholding" } else { "honest_signaling" },
            "conflict_characteristic": match (scene, name) {
                (1, _) | (2, "Ada") => "competing",
                (2, _) => "accommodating",
                _ => "collaborating",
            },
            "non_competing_alternative": "compromising",
        }))}),
        "bdi_risk" => {
            // The step's example, with the prompt's digest in the revised description.
            let mut answer = viss::bench::scripted::annotation_answer(body, &|_| "unknown");
            answer["revised_description"] =
                json!(format!("They settle who pays for the van (v{d})."));
            answer
        }
        "tasks" => json!({"roles": roles(&|name, other| {
            let t = topic(&people, name);
            // Ada's outcome names two visual channels: her vision_dependence is strongly.
            let seen = if name == "Ada" { " with a smile and eye contact" } else { "" };
            json!({
                "name": name,
                "expression_task": format!("{name} states plainly what {t} costs (v{d})."),
                "characteristic_task": format!("{name} refuses to give ground on {t}."),
                "interaction_regulation_task": format!("{name} brings the talk back to {t}."),
                "interaction_outcome_task":
                    format!("{name} gets {other} to agree{seen} on a date to pay for {t}."),
            })
        })}),
        "affect" => json!({"roles": roles(&|name, _| json!({
            "name": name, "emotion": if scene == 3 { "neutral" } else { "anger" },
            "facial_expression": "a tight frown", "body_action": format!("crosses arms (v{d})"),
        }))}),
        "vision_dependence" => json!({"roles": roles(&|name, _| if name == "Ada" {
            json!({
                "name": name, "dependence": "strongly", "channels": ["facial_expression", "gaze"],
                "reason": format!("It shows in her face (v{d}).")
            })
        } else {
            json!({
                "name": name, "dependence": "weakly", "channels": [], "reason": "The words say it."
            })
        })}),
        // A step this test does not script (a step added later) answers with its example.
        _ => viss::bench::scripted::annotation_answer(body, &|_| "unknown"),
    }
}

fn mock() -> BackgroundMockServer {
    BackgroundMockServer::start(|_, body| MockReply::answer(&valid_answer(body).to_string()))
}

struct Fixture {
    _temp: tempfile::TempDir,
    root: PathBuf,
}

impl Fixture {
    /// A project with one episode of `script` (and subtitles made from it), annotated by the
    /// mock at `base_url`, aligned lexically (alpha 0: no embedding model to fetch).
    fn new(base_url: &str, script: &str) -> Self {
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
        std::fs::write(
            root.join("manifests/shows/van.toml"),
            "title = \"The Van\"\nlicense = \"test text written for viss\"\n\n[[episodes]]\nid = \
             \"e1\"\ntitle = \"Fuel\"\nscript = \"van/e1.txt\"\nsubtitles = \"van/e1.srt\"\n",
        )
        .unwrap();
        let fixture = Self { _temp: temp, root };
        fixture.write_episode(script);
        let align = fixture.root.join("stages/align.toml");
        let config = std::fs::read_to_string(&align).unwrap();
        assert!(config.contains("alpha = 0.8"));
        std::fs::write(&align, config.replace("alpha = 0.8", "alpha = 0.0")).unwrap();
        let config = std::fs::read_to_string(fixture.root.join("viss.toml"))
            .unwrap()
            .replace("annotator = \"local\"", "annotator = \"mock:mock-model\"");
        let config = format!(
            "{config}\n[llm.endpoints.mock]\nbase_url = \"{base_url}\"\ntimeout_seconds = \
             5\nmax_retries = 2\nretry_backoff_seconds = 0.01\n"
        );
        std::fs::write(fixture.root.join("viss.toml"), config).unwrap();
        fixture
    }

    fn write_episode(&self, script: &str) {
        std::fs::create_dir_all(self.root.join("raw/van")).unwrap();
        std::fs::write(self.root.join("raw/van/e1.txt"), script).unwrap();
        std::fs::write(self.root.join("raw/van/e1.srt"), subtitles(script).0).unwrap();
    }

    fn build(&self) -> Value {
        // Up to the export: the simulation after it would play the embedded model's agents.
        json_of(&viss(&self.root, &["build", "--until", "export", "--json"]))
    }

    fn export(&self) -> Value {
        json_of(&viss(&self.root, &["export", "--json"]))
    }

    fn out(&self) -> PathBuf {
        self.root.join("export")
    }

    fn read(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.out().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
    }

    fn lines(&self) -> Vec<Value> {
        String::from_utf8(self.read("data.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn lock(&self) -> DatasetLock {
        DatasetLock::parse(&String::from_utf8(self.read("viss.lock")).unwrap()).unwrap()
    }
}

fn schema() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/stages/export/benchmark-record.schema.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn mock_export_writes_a_dataset_that_validates_and_whose_parquet_reads_back() {
    let mock = mock();
    let script = format!("{SCENES_1_2}{SCENE_3}");
    let project = Fixture::new(&mock.server().base_url, &script);
    let report = project.build();
    assert_eq!(
        ran(&report, "export"),
        1,
        "`viss build` builds the export stage too: {report}"
    );

    let summary = project.export();
    assert_eq!(summary["export_ran"], false, "viss build left it fresh");
    let stats = &summary["statistics"];
    assert_eq!(
        (
            stats["scenarios"].as_u64(),
            stats["roles"].as_u64(),
            stats["tasks"].as_u64()
        ),
        (Some(3), Some(7), Some(28))
    );
    assert_eq!(
        stats["conflict_intensities"],
        json!([["high", 1], ["medium", 1], ["low", 1]])
    );
    assert_eq!(summary["images"], 0);
    // Every AgentViSS step asked once per scenario (the AgentSense stages ask for the
    // scenarios with two characters who speak twice), and every answer used.
    let asked = requests_by_step(mock.server());
    for step in crate::llm_stages::STAGES {
        assert_eq!(asked.get(step), Some(&3), "{step}: {asked:?}");
    }
    assert_eq!(
        summary["answers"]["answers"],
        mock.server().request_count(),
        "{asked:?}"
    );

    // Every line satisfies the committed schema.
    let validator = jsonschema::validator_for(&schema()).unwrap();
    let lines = project.lines();
    assert_eq!(lines.len(), 3);
    for line in &lines {
        let errors: Vec<String> = validator
            .iter_errors(line)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", line["id"]);
    }
    // ... and the schema is not vacuous: a record missing a field or with a new one fails.
    let mut broken = lines[0].clone();
    broken["roles"][0].as_object_mut().unwrap().remove("belief");
    assert!(!validator.is_valid(&broken));
    let mut extra = lines[0].clone();
    extra["dialogue"] = json!("not shipped");
    assert!(!validator.is_valid(&extra));

    // The Parquet file has the same rows.
    let rows = viss::export::parquet::read_parquet(&project.read("data.parquet")).unwrap();
    assert_eq!(rows, lines);

    // What the records say is what the stages made, joined per role.
    let ids: Vec<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        common::scenario_ids(&project.root, "van/e1"),
        "script order"
    );
    let first = &lines[0];
    assert_eq!(
        (
            first["show_title"].as_str(),
            first["episode"].as_str(),
            first["episode_title"].as_str()
        ),
        (Some("The Van"), Some("van/e1"), Some("Fuel"))
    );
    assert_eq!(
        (
            first["dialogue_type"].as_str(),
            first["conflict_intensity"].as_str(),
            first["turns"].as_u64()
        ),
        (Some("persuasion"), Some("high"), Some(12))
    );
    assert!(
        first["description"]
            .as_str()
            .unwrap()
            .starts_with("They settle who pays"),
        "the revised description: {first}"
    );
    let (_, scenes) = subtitles(&script);
    for (line, (start, end)) in lines.iter().zip(&scenes) {
        assert_eq!(
            (line["start_ms"].as_u64(), line["end_ms"].as_u64()),
            (Some(*start), Some(*end)),
            "{}",
            line["id"]
        );
        assert_eq!(line["alignment_flagged"], false, "{}", line["id"]);
    }
    let third = &lines[2];
    let names: Vec<&str> = third["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Cy", "Ada", "Ben"], "roles in order of first line");
    let ada = &third["roles"][1];
    assert_eq!(
        (
            ada["gender"].as_str(),
            ada["conflict_characteristic"].as_str(),
            ada["emotion"].as_str()
        ),
        (Some("female"), Some("collaborating"), Some("neutral"))
    );
    assert_eq!(
        ada["interaction_outcome_task"],
        "Ada gets Cy to agree with a smile and eye contact on a date to pay for the spare key."
    );
    assert_eq!(
        (ada["vision_dependence"].as_str(), &ada["visual_channels"]),
        (Some("strongly"), &json!(["facial_expression", "gaze"]))
    );
    assert_eq!(
        third["roles"][2]["expression_style"],
        "strategic_withholding"
    );
    assert!(lines.iter().all(|l| {
        l["group_image"].is_null()
            && l["roles"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["portrait"].is_null())
    }));

    // The card: statistics, and that the images were not built.
    let card = String::from_utf8(project.read("README.md")).unwrap();
    let (metadata, card) = viss::export::huggingface::split_card(&card).unwrap();
    // Without images the one config is data.parquet.
    assert!(
        metadata.contains(
            "\nconfigs:\n- config_name: \"scenarios\"\n  data_files:\n  - split: \"test\"\n    \
             path: \"data.parquet\"\n"
        ),
        "{metadata}"
    );
    assert!(metadata.contains("\nlicense: \"unknown\"\n"), "{metadata}");
    assert!(card.starts_with("\n# The Van: a viss benchmark"), "{card}");
    assert!(card.contains("| scenarios | 3 |"), "{card}");
    assert!(card.contains("| 3 roles | 1 | 33.3% |"), "{card}");
    assert!(card.contains("| strongly | 3 | 42.9% |"), "{card}");
    assert!(card.contains("**The images were not built.**"), "{card}");
    assert!(
        card.contains("test text written for viss"),
        "the show's license note: {card}"
    );
    assert!(!project.out().join("images").exists());

    // The lock names every file and record by its hash.
    let lock = project.lock();
    let blake3 = |bytes: &[u8]| viss::hash::ContentHash::of(bytes);
    assert_eq!(
        lock.files["data.jsonl"],
        blake3(&project.read("data.jsonl"))
    );
    assert_eq!(
        lock.files["data.parquet"],
        blake3(&project.read("data.parquet"))
    );
    assert_eq!(lock.files["README.md"], blake3(&project.read("README.md")));
    let jsonl = String::from_utf8(project.read("data.jsonl")).unwrap();
    for (line, id) in jsonl.lines().zip(&ids) {
        let entry = &lock.scenarios[*id];
        assert_eq!(entry.record, blake3(line.as_bytes()));
        assert_eq!(
            entry.inputs.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "affect",
                "align",
                "annotate",
                "balance",
                "bdi_risk",
                "cast",
                "describe",
                "ingest",
                "parse_script",
                "tasks",
                "vision_dependence"
            ]
        );
    }
    let tasks_record = json_of(&viss(&project.root, &["show", "tasks", ids[2], "tasks"]));
    assert_eq!(
        tasks_record["answer"]["roles"][1]["interaction_outcome_task"],
        ada["interaction_outcome_task"]
    );

    // Exporting again changes nothing; a directory that is not an export is never overwritten.
    let before = project.read("viss.lock");
    assert_eq!(project.export()["export_ran"], false);
    assert_eq!(project.read("viss.lock"), before);
    let elsewhere = project.root.join("notes");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("todo.txt"), "mine").unwrap();
    let refused = viss(
        &project.root,
        &["export", "--out", elsewhere.to_str().unwrap()],
    );
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("is not a viss export"),
        "{}",
        text(&refused)
    );
    assert_eq!(
        std::fs::read_to_string(elsewhere.join("todo.txt")).unwrap(),
        "mine"
    );
}

#[test]
fn mock_two_clean_builds_give_identical_locks() {
    let mock = mock();
    let script = format!("{SCENES_1_2}{SCENE_3}");
    let one = Fixture::new(&mock.server().base_url, &script);
    let two = Fixture::new(&mock.server().base_url, &script);
    for project in [&one, &two] {
        // Straight to `viss export --build` on a fresh project, the other way in.
        let summary = json_of(&viss(&project.root, &["export", "--build", "--json"]));
        assert_eq!(summary["export_ran"], true);
    }
    assert_ne!(one.root, two.root);
    let lock = one.read("viss.lock");
    assert_eq!(
        String::from_utf8(lock.clone()).unwrap(),
        String::from_utf8(two.read("viss.lock")).unwrap()
    );
    for file in ["data.jsonl", "data.parquet", "README.md"] {
        assert_eq!(one.read(file), two.read(file), "{file}");
    }
    let text = String::from_utf8(lock).unwrap();
    for run_dependent in [one.root.to_str().unwrap(), "/tmp", "unix_ms", "seconds"] {
        assert!(
            !text.contains(run_dependent),
            "the lock holds {run_dependent:?}:\n{text}"
        );
    }
}

#[test]
fn mock_adding_a_scene_reruns_only_the_new_scenario_and_the_export() {
    let mock = mock();
    let project = Fixture::new(&mock.server().base_url, SCENES_1_2);
    project.build();
    project.export();
    let before = project.lock();
    let old_lines = project.lines();
    assert_eq!(before.scenarios.len(), 2);
    let calls = mock.server().request_count();
    let before_steps = requests_by_step(mock.server());

    project.write_episode(&format!("{SCENES_1_2}{SCENE_3}"));
    let report = project.build();
    for stage in [
        "annotate",
        "describe",
        "bdi_risk",
        "tasks",
        "affect",
        "vision_dependence",
    ] {
        assert_eq!(ran(&report, stage), 1, "{stage}: {report}");
    }
    // Benchmark-level: balancing and the export see every scenario, so they run once each.
    assert_eq!(
        (ran(&report, "profiles"), ran(&report, "export")),
        (1, 1),
        "{report}"
    );
    // One request per AgentViSS step for the new scenario only; the AgentSense stages ran for
    // it alone too.
    assert_eq!(
        new_agentviss_requests_for_one_scenario(&before_steps, mock.server()),
        7,
        "one request per step for the new scenario only"
    );
    assert!(mock.server().request_count() >= calls + 7);

    let summary = project.export();
    assert_eq!(summary["export_ran"], false);
    let after = project.lock();
    assert_eq!(after.scenarios.len(), 3);
    for id in &common::scenario_ids(&project.root, "van/e1")[..2] {
        let id = id.as_str();
        let (old, new) = (&before.scenarios[id].inputs, &after.scenarios[id].inputs);
        for stage in [
            "annotate",
            "describe",
            "balance",
            "bdi_risk",
            "tasks",
            "affect",
            "vision_dependence",
            "parse_script",
        ] {
            assert_eq!(
                old[stage], new[stage],
                "{id}: {stage}'s record is unchanged"
            );
        }
    }
    // The old scenarios' lines are the same but for the alignment confidence: `align` runs
    // over the whole episode, and its BM25 statistics include the new scene's lines.
    let lines = project.lines();
    for (old, new) in old_lines.iter().zip(&lines) {
        let differing: Vec<&String> = old
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| old[k.as_str()] != new[k.as_str()])
            .collect();
        assert!(
            differing.iter().all(|k| *k == "alignment_confidence"),
            "{}: {differing:?}",
            old["id"]
        );
    }
    assert_eq!(lines[2]["conflict_intensity"], "low");
}

#[test]
fn mock_export_of_an_unbuilt_project_says_what_to_build() {
    let mock = mock();
    let project = Fixture::new(&mock.server().base_url, SCENES_1_2);
    let refused = viss(&project.root, &["export"]);
    assert!(!refused.status.success());
    let message = text(&refused);
    assert!(
        message.contains("the benchmark is not built") && message.contains("viss build"),
        "{message}"
    );
    assert!(
        message.contains("ingest has 1 item(s) to build"),
        "{message}"
    );
    assert_eq!(
        mock.server().request_count(),
        0,
        "a plain export never asks a model"
    );
    assert!(!project.out().exists());

    // Built only part-way: still refused, naming what is missing.
    let partial = viss(&project.root, &["build", "--until", "tasks"]);
    assert!(partial.status.success(), "{}", text(&partial));
    let message = text(&viss(&project.root, &["export"]));
    assert!(
        message.contains("affect has 2 item(s) to build"),
        "{message}"
    );
    assert!(!message.contains("annotate has"), "{message}");
}

#[test]
fn mock_a_character_annotated_differently_across_an_episode_is_flagged_by_the_export() {
    // Ada is "female" in scene 1 and "male" in scene 2, a courier in both.
    let mock = BackgroundMockServer::start(|_, body| {
        let mut answer = valid_answer(body);
        if step_of(body) == "annotate" && body["messages"].to_string().contains("Pump four is free")
        {
            for role in answer["roles"].as_array_mut().unwrap() {
                if role["name"] == "Ada" {
                    role["gender"] = json!("male");
                }
            }
        }
        MockReply::answer(&answer.to_string())
    });
    let project = Fixture::new(&mock.server().base_url, SCENES_1_2);
    let report = project.build();
    assert_eq!(ran(&report, "export"), 1, "{report}");
    let status = text(&viss(&project.root, &["status"]));
    assert!(
        status.contains("export benchmark: episode van/e1: Ada: gender is \"female\" in van/e1/")
            && status.contains("but \"male\" in van/e1/"),
        "{status}"
    );
    assert!(
        !status.contains("Ada: occupation") && !status.contains("Ben: gender"),
        "{status}"
    );
}

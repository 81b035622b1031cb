//! The demo show rebuilt after a scene is added to its script, through every construction stage:
//! the video path and the export are real, the LLM steps are answered by the in-process MOCK
//! OpenAI-compatible server (the network boundary). The scene is on the video and in the
//! subtitles all along, as when a fan transcript stopped short of a broadcast episode's last
//! scene. (A scene missing mid-episode is different: align may place the next scene's first
//! lines on the missing scene's cues, so adding it rightly moves that neighbour's time range.)

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use viss::demo::SCRIPT_PATH;
use viss::export::lock::DatasetLock;
use viss::llm::mock_server::{BackgroundMockServer, MockReply};

use crate::common;

use common::mock_llm::{
    digest, new_agentviss_requests_for_one_scenario, participants, ran, requests_by_step, step_of,
    topic,
};
use common::{json_of, viss};

/// The demo's last scene (the rental office), which the transcript first lacks.
const OFFICE_SCENE_HEADING: &str = "[Scene: The rental office.";

/// Which demo scene a request is about, by a phrase of its dialogue.
fn scene_of(body: &Value) -> usize {
    let prompt = body["messages"].to_string();
    let phrases = ["Define", "Nobody told me", "whispering", "Dennis"];
    1 + phrases
        .iter()
        .position(|phrase| prompt.contains(phrase))
        .unwrap_or_else(|| {
            panic!("the mock's profiles request shows no demo scene's dialogue: {prompt}")
        })
}

/// A valid answer for the step the request asks. The natural conflict intensities are flat:
/// high, stairwell: medium, street: low, office: high. So the three scenes without the office
/// already fill the quotas of three (1/1/1) and with it those of four (2/1/1): balancing moves
/// nothing either way.
fn valid_answer(body: &Value) -> Value {
    let d = digest(body);
    let people = participants(body);
    let roles = |make: &dyn Fn(&str, &str) -> Value| -> Value {
        Value::Array(
            people
                .iter()
                .map(|name| make(name, people.iter().find(|o| *o != name).unwrap_or(name)))
                .collect(),
        )
    };
    let competes = |name: &str| match scene_of(body) {
        1 | 4 => true,
        2 => name == "Mila",
        _ => false,
    };
    match step_of(body).as_str() {
        "annotate" => json!({
            "dialogue_type": "persuasion",
            "roles": roles(&|name, _| json!({
                // The demo's headings state every gender, so "unknown" or another gender
                // would be re-asked: the genders are right, the other fields the same for all.
                "name": name, "gender": if name == "Mila" { "female" } else { "male" },
                "age": "30s", "occupation": "mover"
            })),
        }),
        "describe" => json!({
            "background": format!("Neighbours on a moving day (v{d})."),
            "description": "They sort out the van and the boxes.",
        }),
        "profiles" => json!({"roles": roles(&|name, _| json!({
            "name": name,
            "profile": format!("{name} is moving house (v{d})."),
            "expression_style": "honest_signaling",
            "conflict_characteristic": if competes(name) { "competing" } else { "accommodating" },
            "non_competing_alternative": "compromising",
        }))}),
        "bdi_risk" => {
            // The step's example, with the prompt's digest in the revised description.
            let mut answer = viss::bench::scripted::annotation_answer(body, &|_| "unknown");
            answer["revised_description"] = json!(format!("They settle the day's plan (v{d})."));
            answer
        }
        "tasks" => json!({"roles": roles(&|name, other| {
            let t = topic(&people, name);
            json!({
                "name": name,
                "expression_task": format!("{name} states plainly what {t} costs (v{d})."),
                "characteristic_task": format!("{name} refuses to give ground on {t}."),
                "interaction_regulation_task": format!("{name} brings the talk back to {t}."),
                "interaction_outcome_task":
                    format!("{name} gets {other} to agree on who deals with {t}."),
            })
        })}),
        "affect" => json!({"roles": roles(&|name, _| json!({
            "name": name, "emotion": "neutral", "facial_expression": "a calm look",
            "body_action": format!("holds a box (v{d})"),
        }))}),
        "vision_dependence" => json!({"roles": roles(&|name, _| json!({
            "name": name, "dependence": "weakly", "channels": [],
            "reason": format!("The words say it (v{d})."),
        }))}),
        // A step this test does not script (a step added later) answers with its example.
        _ => viss::bench::scripted::annotation_answer(body, &|_| "unknown"),
    }
}

/// The demo show whose annotator is the mock at `base_url`: a copy of the shared demo project,
/// with its store (`built`) or without it, as `viss demo` writes the project before building.
fn demo_project(base_url: &str, built: bool) -> (tempfile::TempDir, PathBuf) {
    let (temp, root) = if built {
        common::demo::copy()
    } else {
        common::demo::copy_without_store()
    };
    let config = std::fs::read_to_string(root.join("viss.toml")).unwrap();
    assert!(config.contains("annotator = \"local\""), "{config}");
    let config = format!(
        "{}\n[llm.endpoints.mock]\nbase_url = \"{base_url}\"\ntimeout_seconds = 10\nmax_retries = \
         2\nretry_backoff_seconds = 0.01\n",
        config.replace("annotator = \"local\"", "annotator = \"mock:mock-model\"")
    );
    std::fs::write(root.join("viss.toml"), config).unwrap();
    (temp, root)
}

/// The script without its last scene.
fn without_office_scene(script: &str) -> String {
    let start = script
        .find(OFFICE_SCENE_HEADING)
        .expect("the demo script has the office scene");
    assert!(
        !script[start + 1..].contains("[Scene:"),
        "the office scene is the last"
    );
    script[..start].to_string()
}

fn lock(root: &Path) -> DatasetLock {
    let text = std::fs::read_to_string(root.join("export/viss.lock")).unwrap();
    DatasetLock::parse(&text).unwrap()
}

const SCENARIO_STAGES: [&str; 12] = [
    "frames",
    "keyframes",
    "detect",
    "group_image",
    "match_roles",
    "portraits",
    "annotate",
    "describe",
    "bdi_risk",
    "tasks",
    "affect",
    "vision_dependence",
];

#[test]
fn mock_adding_a_scene_to_the_demo_script_reruns_only_the_new_scenario_and_the_export() {
    let mock =
        BackgroundMockServer::start(|_, body| MockReply::answer(&valid_answer(body).to_string()));
    // Without a store: the first build below counts what it runs.
    let (_temp, root) = demo_project(&mock.server().base_url, false);
    let script_path = root.join("raw").join(SCRIPT_PATH);
    let full_script = std::fs::read_to_string(&script_path).unwrap();
    std::fs::write(&script_path, without_office_scene(&full_script)).unwrap();

    // Up to the export: the simulation after it would play the embedded model's agents.
    let first = json_of(&viss(&root, &["build", "--until", "export", "--json"]));
    assert_eq!(ran(&first, "frames"), 3, "{first}");
    json_of(&viss(&root, &["export", "--json"]));
    let before = lock(&root);
    let old_ids: Vec<String> = before.scenarios.keys().cloned().collect();
    assert_eq!(old_ids.len(), 3);
    let calls = mock.server().request_count();
    let before_steps = requests_by_step(mock.server());

    std::fs::write(&script_path, &full_script).unwrap();
    let report = json_of(&viss(&root, &["build", "--until", "export", "--json"]));
    for stage in SCENARIO_STAGES {
        assert_eq!(
            ran(&report, stage),
            1,
            "{stage} runs for the new scenario only: {report}"
        );
    }
    // The episode's script changed, so its parse and its alignment run again; the benchmark-wide
    // balance and the export see every scenario.
    for stage in ["parse_script", "align", "profiles", "export"] {
        assert_eq!(ran(&report, stage), 1, "{stage}: {report}");
    }
    assert_eq!(
        ran(&report, "parse_subtitles"),
        0,
        "the subtitles did not change: {report}"
    );
    // One request per AgentViSS step, for the new scenario; the AgentSense stages ran for it
    // alone too.
    assert_eq!(
        new_agentviss_requests_for_one_scenario(&before_steps, mock.server()),
        7,
        "one request per LLM step, for the new scenario"
    );
    assert!(mock.server().request_count() >= calls + 7);

    json_of(&viss(&root, &["export", "--json"]));
    let after = lock(&root);
    assert_eq!(after.scenarios.len(), 4);
    let ids = common::scenario_ids(&root, "demo/s01e01");
    let new_id = ids
        .iter()
        .find(|id| !old_ids.contains(id))
        .expect("one new scenario");
    assert_eq!(ids[3], *new_id, "the office scene is last in script order");
    for id in &old_ids {
        let (old, new) = (&before.scenarios[id].inputs, &after.scenarios[id].inputs);
        for (stage, hash) in old {
            // Two records are the episode's rather than the scenario's own: ingest's names the
            // script file by its hash, and align's holds line numbers and a confidence computed
            // over the whole episode's BM25 statistics. Both change with the script.
            if stage != "ingest" && stage != "align" {
                assert_eq!(
                    Some(hash),
                    new.get(stage),
                    "{id}: {stage}'s record is unchanged"
                );
            }
        }
    }

    // The scorecard of the mock's answers against the demo's truth (the numbers follow from
    // `valid_answer`: every scene persuasion, every role female, in their 30s, a mover).
    let truth_file = root.join("raw/demo/s01e01/truth.toml");
    let truth_file = truth_file.to_str().unwrap();
    let card = json_of(&viss(
        &root,
        &["check", "quality", "--truth", truth_file, "--json"],
    ));
    let truth = &card["truth"];
    assert_eq!(card["records"], 4, "{card}");
    assert_eq!(
        card["stale"],
        Value::Null,
        "the export is the last build's: {card}"
    );
    assert_eq!(truth["missing_scenarios"], json!([]), "{card}");
    let counts: Vec<(String, u64, u64)> = truth["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let field = f["field"].as_str().unwrap().to_string();
            (
                field,
                f["correct"].as_u64().unwrap(),
                f["total"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected = [
        // The street scene is information seeking.
        ("dialogue_type", 3, 4),
        ("participants", 4, 4),
        ("gender", 12, 12),
        // 30s is right for Noor (in his thirties) in each of his four scenarios.
        ("age", 4, 12),
        ("occupation", 0, 12),
        ("competes", 7, 12),
    ];
    let expected: Vec<(String, u64, u64)> = expected
        .iter()
        .map(|(f, c, t)| (f.to_string(), *c, *t))
        .collect();
    assert_eq!(counts, expected, "{card}");
    assert_eq!(
        (truth["correct"].as_u64(), truth["total"].as_u64()),
        (Some(30), Some(56))
    );
    let gates = &card["gates"];
    assert_eq!(gates["rejected_calls"], 0, "{card}");
    assert_eq!(gates["failed_items"], 0, "{card}");
    let annotate = gates["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == "annotate")
        .unwrap_or_else(|| panic!("annotate asked the LLM: {card}"));
    assert_eq!(
        (annotate["items"].as_u64(), annotate["llm_calls"].as_u64()),
        (Some(4), Some(4))
    );
}

/// Every request the mock received for `step`.
fn requests_for(mock: &BackgroundMockServer, step: &str) -> Vec<Value> {
    (0..mock.server().request_count())
        .map(|i| mock.server().body(i))
        .filter(|body| step_of(body) == step)
        .collect()
}

#[test]
fn mock_describe_is_told_what_the_group_frame_shows_and_can_be_shown_g() {
    let mock =
        BackgroundMockServer::start(|_, body| MockReply::answer(&valid_answer(body).to_string()));
    let (_temp, root) = demo_project(&mock.server().base_url, true);
    json_of(&viss(&root, &["build", "--until", "describe", "--json"]));
    let asked = requests_for(&mock, "describe");
    assert_eq!(asked.len(), 4);
    for body in &asked {
        let prompt = body["messages"].to_string();
        assert!(
            prompt.contains("What the picture of the scene shows:"),
            "{prompt}"
        );
        // Every demo participant's face is in its scene's group frame.
        let recognised = prompt
            .split("Recognised: ")
            .nth(1)
            .expect("a caption naming who is recognised");
        for name in participants(body) {
            assert!(recognised.contains(&name), "{name} is recognised: {prompt}");
        }
        assert!(!prompt.contains("Not recognised"), "{prompt}");
    }

    // Configured to show G, describe reads group_image too and runs again for every scenario
    // with the picture attached, scaled to fit 448 x 448.
    let config = root.join("stages/describe.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replace("# attach_group_image = 448", "attach_group_image = 448");
    assert!(text.contains("\nattach_group_image = 448"), "{text}");
    std::fs::write(&config, text).unwrap();
    let report = json_of(&viss(&root, &["build", "--until", "describe", "--json"]));
    assert_eq!(ran(&report, "describe"), 4, "{report}");
    let asked = requests_for(&mock, "describe");
    assert_eq!(asked.len(), 8);
    for body in &asked[4..] {
        let question = body["messages"].as_array().unwrap().last().unwrap();
        let url = question["content"]
            .as_array()
            .and_then(|parts| parts.iter().find_map(|p| p["image_url"]["url"].as_str()))
            .unwrap_or_else(|| panic!("an image part: {question}"));
        let png = base64_decode(
            url.strip_prefix("data:image/png;base64,")
                .expect("a PNG data URL"),
        );
        let image = image::load_from_memory(&png).unwrap();
        assert!(
            image.width() <= 448 && image.height() <= 448,
            "{}x{}",
            image.width(),
            image.height()
        );
        assert_eq!(
            image.width().max(image.height()),
            448,
            "scaled to fit, not shrunk further"
        );
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

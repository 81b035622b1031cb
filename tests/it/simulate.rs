//! `plan_runs` and `simulate` through `viss build`, the agents answered by the in-process MOCK
//! OpenAI-compatible server (the network boundary; the engine, prompts, validation, cache and
//! trace are real): what each mode sends, turn by turn, seeded and reproducible, re-asks with
//! the protocol's reasons, and a run that fails rather than being filled in.

use serde_json::{Value, json};
use viss::llm::mock_server::{BackgroundMockServer, MockReply};

use crate::common::mock_llm::{digest, ran, step_of};
use crate::common::{binary_output, show};
use crate::llm_stages::{LlmProject, counts, text, valid_answer, viss};

const ROUNDS: usize = 5;

/// Who is asked to take the turn: the system message opens "You are NAME,".
fn speaker_of(body: &Value) -> String {
    let system = body["messages"][0]["content"].to_string();
    let after = system.split("You are ").nth(1).expect("an agent's turn");
    after.split(',').next().unwrap().to_string()
}

/// The user message's text.
fn question_of(body: &Value) -> String {
    body["messages"][1]["content"].to_string()
}

/// A turn that passes the protocol: the speaker hands over to the first name it may, and says
/// something new (the request's seed and digest make every message differ).
fn good_turn(body: &Value) -> Value {
    viss::bench::scripted::turn_answer(body)
}

fn is_turn(body: &Value) -> bool {
    step_of(body) == "turn"
}

impl LlmProject {
    /// The project's agents are the mock's model, and runs are `rounds` turns long.
    pub(crate) fn with_mock_agents(self, rounds: usize) -> Self {
        let config = self.root.join("viss.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        assert!(text.contains("agents = [\"local\"]"));
        std::fs::write(
            &config,
            text.replace("agents = [\"local\"]", "agents = [\"mock:mock-model\"]"),
        )
        .unwrap();
        std::fs::write(
            self.root.join("stages/simulate.toml"),
            format!("[params]\nrounds = {rounds}\n"),
        )
        .unwrap();
        self
    }

    fn simulate(&self) -> (std::process::Output, Value) {
        let output = viss(&self.root, &["build", "--until", "simulate", "--json"]);
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        (output, report)
    }

    pub(crate) fn run_id(&self, scenario: usize, mode: &str) -> String {
        format!("{}/sim/{mode}/mock-model/r0", self.scenario(scenario))
    }

    fn trace(&self, run: &str) -> Value {
        let output = viss(&self.root, &["show", "simulate", run, "trace"]);
        assert!(output.status.success(), "{}", text(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    }
}

fn answer(body: &Value) -> MockReply {
    if is_turn(body) {
        MockReply::answer(&good_turn(body).to_string())
    } else {
        MockReply::answer(&valid_answer(body).to_string())
    }
}

#[test]
fn mock_server_agents_play_text_and_vv_oracle_runs_turn_by_turn_and_rebuilds_pay_nothing() {
    let mock = BackgroundMockServer::start(|_, body| answer(body));
    let project = LlmProject::new(&mock.server().base_url).with_mock_agents(ROUNDS);
    let (output, report) = project.simulate();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(ran(&report, "plan_runs"), 2);
    // Two scenarios, each in text and vv_oracle, one model, one replicate: the describer is the
    // embedded model (no vv) and the scenarios have no pictures (no dv); status says so.
    assert_eq!(ran(&report, "simulate"), 4);
    let status = text(&viss(&project.root, &["status"]));
    for reason in [
        "vv runs not planned: the describer of [llm.roles] is the embedded model",
        "dv runs not planned: the scenario has no group image",
        // What the agents' turns cost: 100 + 20 tokens a turn at $1 / $2 per million.
        "simulation: 4 run(s) (2 text, 2 vv_oracle), 0 failed; 20 turns, 20 agent answers",
        "  mock:mock-model: 20 turns in 4 run(s), 2000 prompt + 400 answer tokens, cost $0.0028",
    ] {
        assert!(status.contains(reason), "{reason:?} not in:\n{status}");
    }

    let bodies: Vec<Value> = (0..mock.server().request_count())
        .map(|i| mock.server().body(i))
        .filter(is_turn)
        .collect();
    assert_eq!(
        bodies.len(),
        4 * ROUNDS,
        "one request per turn, none re-asked"
    );
    let observed = |body: &Value| question_of(body).contains("What you can see of the others");
    assert_eq!(bodies.iter().filter(|b| observed(b)).count(), 2 * ROUNDS);
    for body in &bodies {
        let sent = body["messages"].to_string();
        assert!(!sent.contains("image_url"), "no mode here sends a picture");
        assert_eq!(body["model"], "mock-model");
        assert!((body["temperature"].as_f64().unwrap() - 0.8).abs() < 1e-6);
    }
    // vv_oracle describes the other character as its recorded state has it: at the first turn,
    // the opening state from `affect`, then what that character's own turn said.
    let first_views: Vec<String> = bodies
        .iter()
        .filter(|b| observed(b) && !question_of(b).contains("The conversation so far"))
        .map(question_of)
        .collect();
    assert_eq!(first_views.len(), 2, "one opening turn per vv_oracle run");
    for view in &first_views {
        assert!(
            view.contains("looks angry; face: a tight frown; body: crosses arms"),
            "{view}"
        );
    }
    assert!(
        bodies
            .iter()
            .any(|b| observed(b) && question_of(b).contains("looks happy; face: a small smile")),
        "a character's own turn changes how the others see it"
    );

    let run = project.run_id(0, "text");
    let trace = project.trace(&run);
    assert_eq!(trace["settings"]["mode"], "text");
    assert_eq!(trace["settings"]["rounds"], ROUNDS);
    assert_eq!(
        trace["settings"]["cast"],
        json!([["Ada", "mock:mock-model"], ["Ben", "mock:mock-model"]])
    );
    let turns = trace["turns"].as_array().unwrap();
    assert_eq!(turns.len(), ROUNDS);
    assert_eq!(trace["end"]["reason"], "rounds_done");
    // Two roles, each handing over to the other: they alternate.
    let speakers: Vec<u64> = turns
        .iter()
        .map(|t| t["speaker"].as_u64().unwrap())
        .collect();
    assert!(speakers.windows(2).all(|w| w[0] != w[1]), "{speakers:?}");
    let seeds: std::collections::BTreeSet<&str> = turns
        .iter()
        .map(|t| {
            let message = t["turn"]["message"].as_str().unwrap();
            message
                .split("seed ")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(seeds.len(), ROUNDS, "each turn has a seed of its own");
    assert!(
        turns
            .iter()
            .all(|t| t["request_key"].as_str().unwrap().len() == 64)
    );

    // The readable transcript.
    let shown = viss(&project.root, &["show", "simulate", &run]);
    assert!(shown.status.success(), "{}", text(&shown));
    let transcript = String::from_utf8(shown.stdout).unwrap();
    assert!(
        transcript.contains("(Joy; a small smile; leans on the counter): "),
        "{transcript}"
    );
    assert!(
        transcript.contains("ended after every round"),
        "{transcript}"
    );

    // Built again, nothing runs; from scratch elsewhere, the same seeds give the same traces.
    let requests = mock.server().request_count();
    let (output, report) = project.simulate();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(ran(&report, "simulate"), 0);
    assert_eq!(mock.server().request_count(), requests);
    let again = LlmProject::new(&mock.server().base_url).with_mock_agents(ROUNDS);
    let (output, _) = again.simulate();
    assert!(output.status.success(), "{}", text(&output));
    for mode in ["text", "vv_oracle"] {
        let mut first = project.trace(&project.run_id(1, mode));
        let mut second = again.trace(&again.run_id(1, mode));
        first["settings"]["scenario"] = Value::Null;
        second["settings"]["scenario"] = Value::Null;
        assert_eq!(first, second, "{mode}");
    }

    // The traces beside the dataset, a run per line.
    let out = project.root.join("dataset");
    let exported = viss(
        &project.root,
        &[
            "export",
            "--build",
            "--traces",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(exported.status.success(), "{}", text(&exported));
    let lines = std::fs::read_to_string(out.join("traces.jsonl")).unwrap();
    let runs: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(runs.len(), 4);
    let exported_run = runs.iter().find(|r| r["run"] == run.as_str()).unwrap();
    assert_eq!(exported_run["turns"], trace["turns"]);

    // Another seed: only the runs re-play, with other draws.
    std::fs::write(
        project.root.join("stages/simulate.toml"),
        format!("[params]\nrounds = {ROUNDS}\nseed = 8\n"),
    )
    .unwrap();
    let (output, report) = project.simulate();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(ran(&report, "plan_runs"), 0);
    assert_eq!(ran(&report, "simulate"), 4);
    assert_ne!(project.trace(&run)["turns"], trace["turns"]);
}

#[test]
fn mock_server_turns_breaking_the_protocol_are_reasked_and_a_run_never_answered_fails() {
    // Text runs: every first answer speaks its thought aloud; the re-ask is answered well.
    // vv_oracle runs: the emotion is never one of the seven.
    let mock = BackgroundMockServer::start(|_, body| {
        if !is_turn(body) {
            return MockReply::answer(&valid_answer(body).to_string());
        }
        let mut turn = good_turn(body);
        let sent = body["messages"].to_string();
        if question_of(body).contains("What you can see of the others") {
            turn["emotion"] = json!("Worried");
        } else if !sent.contains("repeats the inner thought") {
            turn["message"] = json!(format!("Well. {}", turn["inner_thought"].as_str().unwrap()));
        }
        MockReply::answer(&turn.to_string())
    });
    let project = LlmProject::new(&mock.server().base_url).with_mock_agents(3);
    let (output, report) = project.simulate();
    assert!(!output.status.success(), "a failed run fails the build");
    assert_eq!(counts(&report, "simulate")["failed"], 2);
    assert_eq!(ran(&report, "simulate"), 2);
    let message = text(&output);
    assert!(message.contains("turn 1 ("), "{message}");
    assert!(
        message.contains("\"Worried\"") && message.contains("re-asked 2 times"),
        "{message}"
    );
    // The failed run left no trace; nothing stands in for the turns it never got.
    let failed = viss(
        &project.root,
        &["show", "simulate", &project.run_id(0, "vv_oracle"), "trace"],
    );
    assert!(!failed.status.success());

    let trace = project.trace(&project.run_id(0, "text"));
    for turn in trace["turns"].as_array().unwrap() {
        let rejected = turn["rejected"].as_array().unwrap();
        assert_eq!(rejected.len(), 1, "{turn}");
        assert!(
            rejected[0]["message"]
                .as_str()
                .unwrap()
                .contains("repeats the inner thought"),
            "{turn}"
        );
        assert!(
            !turn["turn"]["message"]
                .as_str()
                .unwrap()
                .starts_with("Well.")
        );
    }
}

/// Issue 20: a build of many runs SIGKILLed at random instants and resumed each time ends with
/// the traces an uninterrupted build writes, byte for byte, having paid at most for the
/// answers in flight at each kill: every finished turn is re-played from the request cache.
#[test]
fn mock_server_runs_killed_at_random_instants_resume_to_the_uninterrupted_traces() {
    const KILL_ROUNDS: usize = 8;
    const KILLS: usize = 6;
    let slow = |body: &Value| answer(body).after(std::time::Duration::from_millis(40));
    // One server for both projects: its address is part of every request key in the traces.
    let mock = BackgroundMockServer::start(move |_, body| slow(body));
    let reference = LlmProject::new(&mock.server().base_url).with_mock_agents(KILL_ROUNDS);
    let started = std::time::Instant::now();
    let (output, _) = reference.simulate();
    assert!(output.status.success(), "{}", text(&output));
    let uninterrupted = started.elapsed();
    let turn_calls = |from: usize| {
        (from..mock.server().request_count())
            .filter(|&i| is_turn(&mock.server().body(i)))
            .count()
    };
    assert_eq!(turn_calls(0), 4 * KILL_ROUNDS);

    let before_crashes = mock.server().request_count();
    let crashed = LlmProject::new(&mock.server().base_url).with_mock_agents(KILL_ROUNDS);
    let seed = std::env::var("VISS_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("crash seed {seed} (set VISS_CRASH_SEED to replay); uninterrupted {uninterrupted:?}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut kills = 0;
    for _ in 0..KILLS {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_viss"))
            .arg("-C")
            .arg(&crashed.root)
            .args(["build", "--until", "simulate"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let instant = rng.u64(1..=uninterrupted.as_millis() as u64);
        std::thread::sleep(std::time::Duration::from_millis(instant));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        child.wait().unwrap();
    }
    assert!(kills > 0, "no build was still running when killed");
    let (output, _) = crashed.simulate();
    assert!(output.status.success(), "{}", text(&output));

    for scenario in 0..2 {
        for mode in ["text", "vv_oracle"] {
            let shown = |project: &LlmProject| {
                let run = project.run_id(scenario, mode);
                let output = viss(&project.root, &["show", "simulate", &run, "trace"]);
                assert!(output.status.success(), "{}", text(&output));
                output.stdout
            };
            let (got, want) = (shown(&crashed), shown(&reference));
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "{mode} run {scenario}"
            );
        }
    }
    // Each kill loses at most the answers in flight (the endpoint's max_in_flight, 8).
    let paid = turn_calls(before_crashes);
    eprintln!(
        "{kills} kills: {paid} turn answers paid for, {} uninterrupted",
        4 * KILL_ROUNDS
    );
    assert!(paid >= 4 * KILL_ROUNDS);
    assert!(
        paid <= 4 * KILL_ROUNDS + kills * 8,
        "{paid} answers for {kills} kills"
    );
}

/// Cross-play: with two agent models, each plays every role alone and, per ordered pair, the
/// focal model takes one role while the partner takes the others; each turn goes to the model
/// of its speaker's seat.
#[test]
fn mock_server_cross_play_seats_the_focal_model_on_each_role_in_turn() {
    let mock = BackgroundMockServer::start(|_, body| answer(body));
    let project = LlmProject::new(&mock.server().base_url).with_mock_agents(2);
    let config = project.root.join("viss.toml");
    let text_of = std::fs::read_to_string(&config).unwrap().replace(
        "agents = [\"mock:mock-model\"]",
        "agents = [\"mock:mock-model\", \"mock:other-model\"]",
    );
    std::fs::write(&config, text_of).unwrap();
    std::fs::write(
        project.root.join("stages/plan_runs.toml"),
        "[params]\nmodes = [\"text\"]\ncross_play = true\n",
    )
    .unwrap();
    let (output, report) = project.simulate();
    assert!(output.status.success(), "{}", text(&output));
    // Per scenario: two models alone, and two ordered pairs x two focal roles.
    assert_eq!(ran(&report, "simulate"), 2 * (2 + 2 * 2));
    let scenario = project.scenario(0);
    let run = format!("{scenario}/sim/text/mock-model_vs_other-model_as_ben/r0");
    let trace = project.trace(&run);
    assert_eq!(
        trace["settings"]["cast"],
        json!([["Ada", "mock:other-model"], ["Ben", "mock:mock-model"]])
    );
    // Each turn was answered by the model of its speaker's seat (the mock signs its messages).
    let seat_models = ["other-model", "mock-model"];
    for turn in trace["turns"].as_array().unwrap() {
        let seat = seat_models[turn["speaker"].as_u64().unwrap() as usize];
        let message = turn["turn"]["message"].as_str().unwrap();
        assert!(
            message.ends_with(&format!("through \"{seat}\".")),
            "{message}"
        );
    }
}

/// The demo project's LLM roles pointed at the MOCK server: the annotator, and each of
/// `replacements` (a line of viss.toml and what it becomes).
fn point_at(project: &std::path::Path, mock: &BackgroundMockServer, replacements: &[(&str, &str)]) {
    let config = project.join("viss.toml");
    let mut settings = std::fs::read_to_string(&config)
        .unwrap()
        .replace("annotator = \"local\"", "annotator = \"mock:mock-model\"");
    for (line, becomes) in replacements {
        assert!(settings.contains(line), "{line} is not in viss.toml");
        settings = settings.replace(line, becomes);
    }
    std::fs::write(
        &config,
        format!(
            "{settings}\n[llm.endpoints.mock]\nbase_url = \"{}\"\ntimeout_seconds = 5\nmax_retries \
             = 2\nretry_backoff_seconds = 0.01\n",
            mock.server().base_url
        ),
    )
    .unwrap();
}

/// The scripted model: a good turn for an agent, a valid annotation for everything else.
fn scripted(body: &Value) -> MockReply {
    if is_turn(body) {
        MockReply::answer(&good_turn(body).to_string())
    } else {
        MockReply::answer(&crate::common::mock_llm::demo_answer(body).to_string())
    }
}

/// The images a chat request carries, as sent (PNG bytes).
fn images_of(body: &Value) -> Vec<Vec<u8>> {
    use base64::Engine;
    let mut images = Vec::new();
    for message in body["messages"].as_array().into_iter().flatten() {
        for part in message["content"].as_array().into_iter().flatten() {
            if let Some(url) = part["image_url"]["url"].as_str() {
                let data = url.strip_prefix("data:image/png;base64,").unwrap();
                images.push(
                    base64::engine::general_purpose::STANDARD
                        .decode(data)
                        .unwrap(),
                );
            }
        }
    }
    images
}

/// The text of a request's user message, whether it is one text or parts.
fn user_text_of(body: &Value) -> String {
    let content = &body["messages"][1]["content"];
    match content.as_array() {
        Some(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        None => content.as_str().unwrap_or_default().to_string(),
    }
}

fn hash_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// What the mock's image edit endpoint draws for its `index`-th request: a different colour
/// each time, so every edit is a new portrait.
fn edited_portrait(index: usize) -> MockReply {
    use base64::Engine;
    let colour = [(index * 37 % 256) as u8, 90, 200];
    let png = viss::vision::encode_png(&image::RgbImage::from_pixel(96, 96, image::Rgb(colour)));
    let answer = json!({
        "data": [{"b64_json": base64::engine::general_purpose::STANDARD.encode(&png)}],
        "usage": {"input_tokens": 300, "output_tokens": 800}
    });
    MockReply::status(200, &answer.to_string())
}

/// The mock describer: the scene in two sentences, each person in the collage by name.
fn description(body: &Value) -> Value {
    match step_of(body).as_str() {
        "describe_scene" => json!({
            "scene": format!("A cluttered flat, boxes by the door ({}).", digest(body)),
            "people": "Two people stand by the boxes; one points at a van outside.",
        }),
        "describe_people" => {
            let schema = &body["response_format"]["json_schema"]["schema"];
            let names = schema["properties"]["people"]["items"]["properties"]["name"]["enum"]
                .as_array()
                .unwrap();
            let people: Vec<Value> = names
                .iter()
                .map(|name| {
                    json!({"name": name, "look": format!("{} frowns, arms folded.",
                    name.as_str().unwrap())})
                })
                .collect();
            json!({ "people": people })
        }
        other => panic!("not a describer step: {other}"),
    }
}

#[test]
fn mock_server_vision_runs_show_the_pictures_describe_them_and_edit_only_the_speakers_portrait() {
    const VISION_ROUNDS: usize = 3;
    let (_temp, project) = crate::common::demo::copy();
    let mock = BackgroundMockServer::start(|index, body| {
        if body.is_null() {
            return edited_portrait(index);
        }
        match step_of(body).as_str() {
            "turn" => {
                let mut turn = good_turn(body);
                turn["image_edit"] = json!(true);
                // A face per request, so no two turns ask for the same edit.
                turn["facial_expression"] = json!(format!("a small smile ({})", digest(body)));
                MockReply::answer(&turn.to_string())
            }
            "describe_scene" | "describe_people" => {
                MockReply::answer(&description(body).to_string())
            }
            _ => MockReply::answer(&crate::common::mock_llm::demo_answer(body).to_string()),
        }
    });
    point_at(
        &project,
        &mock,
        &[
            ("describer = \"local\"", "describer = \"mock:eyes\""),
            ("agents = [\"local\"]", "agents = [\"mock:eyes\"]"),
            (
                "judges = [\"local\"]\n",
                "judges = [\"local\"]\nimage_edit = \"mock:gpt-image-1\"\n",
            ),
        ],
    );
    std::fs::write(
        project.join("stages/plan_runs.toml"),
        "[params]\nmodes = [\"text\", \"vv\", \"dv\"]\n",
    )
    .unwrap();
    std::fs::write(
        project.join("stages/simulate.toml"),
        format!("[params]\nrounds = {VISION_ROUNDS}\n"),
    )
    .unwrap();
    let output = viss(&project, &["build", "--until", "simulate", "--json"]);
    assert!(output.status.success(), "{}", text(&output));
    let scenarios = crate::common::scenario_ids(&project, "demo/s01e01");
    assert_eq!(
        ran(&serde_json::from_slice(&output.stdout).unwrap(), "simulate"),
        12
    );

    let requests = mock.server().state.requests.lock().unwrap();
    let chats: Vec<&Value> = requests
        .iter()
        .map(|r| &r.body)
        .filter(|b| !b.is_null())
        .collect();
    // The image edit endpoint also redrew G and the portraits (it is their backend too).
    let edits: Vec<_> = requests
        .iter()
        .filter(|r| {
            let marker = b"Redraw this portrait of";
            r.body.is_null() && r.raw.windows(marker.len()).any(|w| w == marker)
        })
        .collect();
    let turns: Vec<&&Value> = chats.iter().filter(|b| is_turn(b)).collect();
    let sent_images: Vec<String> = chats
        .iter()
        .flat_map(|b| images_of(b))
        .map(|png| hash_hex(&png))
        .collect();
    let with_images = turns.iter().filter(|b| !images_of(b).is_empty()).count();
    let described = |step: &str| chats.iter().filter(|b| step_of(b) == step).count();
    assert_eq!(turns.len(), 12 * VISION_ROUNDS);
    // Only dv turns carry pictures, two each; the describer sees G once per vv run and the
    // others' portraits every vv turn.
    assert_eq!(with_images, 4 * VISION_ROUNDS);
    assert!(turns.iter().all(|b| [0, 2].contains(&images_of(b).len())));
    for body in &turns {
        let question = user_text_of(body);
        let captioned = question.contains(
            "Pictures attached: the first picture is the whole scene; the second shows how ",
        );
        assert_eq!(captioned, !images_of(body).is_empty(), "{question}");
        if question.contains("What the room looks like:\n- The place: A cluttered flat") {
            assert!(!captioned && question.contains("What you can see of the others:"));
        }
    }
    let room = |b: &&&&Value| user_text_of(b).contains("What the room looks like:");
    assert_eq!(turns.iter().filter(room).count(), 4 * VISION_ROUNDS);
    assert_eq!(described("describe_scene"), 4);
    assert_eq!(described("describe_people"), 4 * VISION_ROUNDS);
    for body in chats.iter().filter(|b| step_of(b) == "describe_people") {
        assert_eq!(images_of(body).len(), 1);
        assert!((body["temperature"].as_f64().unwrap() - 0.2).abs() < 1e-6);
    }

    let mut edited = 0;
    for scenario in &scenarios {
        let portraits = show(&project, &["portraits", scenario, "portraits"]);
        for mode in ["text", "vv", "dv"] {
            let run = format!("{scenario}/sim/{mode}/eyes/r0");
            let trace = show(&project, &["simulate", &run, "trace"]);
            let cast: Vec<String> = trace["settings"]["cast"]
                .as_array()
                .unwrap()
                .iter()
                .map(|seat| seat[0].as_str().unwrap().to_string())
                .collect();
            let mut current: Vec<Value> = cast
                .iter()
                .map(|name| {
                    let role = portraits["roles"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|r| r["name"] == name.as_str())
                        .unwrap();
                    role["image"]["png"].clone()
                })
                .collect();
            let first = &trace["turns"][0];
            match mode {
                "text" => {
                    assert!(trace.get("scene").is_none(), "{trace}");
                    for turn in trace["turns"].as_array().unwrap() {
                        assert_eq!(turn["shown"]["texts"], json!([]));
                        assert_eq!(turn["shown"]["image_hashes"], json!([]));
                        assert_eq!(turn["portrait_edited"], false);
                        assert_eq!(
                            turn["portrait_note"],
                            "not edited: text runs show no portraits"
                        );
                    }
                    continue;
                }
                "vv" => {
                    assert_eq!(
                        trace["scene"][0].as_str().unwrap().split(" (").next(),
                        Some("The place: A cluttered flat, boxes by the door")
                    );
                    let speaker = first["speaker"].as_u64().unwrap() as usize;
                    let expected: Vec<String> = cast
                        .iter()
                        .enumerate()
                        .filter(|&(i, _)| i != speaker)
                        .map(|(_, n)| format!("{n}: {n} frowns, arms folded."))
                        .collect();
                    assert_eq!(first["shown"]["texts"], json!(expected), "{run}");
                    assert_eq!(first["shown"]["image_hashes"], json!([]));
                    assert_eq!(
                        first["shown"]["described_images"].as_array().unwrap().len(),
                        1
                    );
                }
                _ => {
                    // G fitted to 448, then the cast's portraits left to right in cast order.
                    let group = std::fs::read(binary_output(
                        &project,
                        "group_image",
                        scenario,
                        "group_image.png",
                    ))
                    .unwrap();
                    let viss::llm::request::Part::ImagePng(group) =
                        viss::llm::request::Part::image_fitted(&group, 448).unwrap()
                    else {
                        unreachable!()
                    };
                    let tiles: Vec<image::RgbImage> = cast
                        .iter()
                        .map(|name| {
                            let png = binary_output(
                                &project,
                                "portraits",
                                scenario,
                                &format!("portrait.png:{name}"),
                            );
                            viss::vision::load_rgb(&png).unwrap()
                        })
                        .collect();
                    let collage = viss::vision::encode_png(&viss::vision::portrait::collage(
                        &tiles,
                        448 / tiles.len() as u32,
                    ));
                    assert_eq!(
                        first["shown"]["image_hashes"],
                        json!([hash_hex(&group), hash_hex(&collage)]),
                        "{run}"
                    );
                    assert!(sent_images.contains(&hash_hex(&collage)));
                    let last = &trace["turns"][VISION_ROUNDS - 1]["shown"]["image_hashes"];
                    assert_ne!(last[1], first["shown"]["image_hashes"][1], "edits show");
                }
            }
            for turn in trace["turns"].as_array().unwrap() {
                let speaker = turn["speaker"].as_u64().unwrap() as usize;
                assert_eq!(turn["portrait_edited"], true, "{run}: {turn}");
                let after = turn["portraits_after"].as_array().unwrap();
                for (index, hash) in after.iter().enumerate() {
                    if index == speaker {
                        assert_ne!(hash, &current[index], "{run}: the speaker's is redrawn");
                    } else {
                        assert_eq!(hash, &current[index], "{run}: only the speaker's changes");
                    }
                }
                // The edit was asked of the speaker's portrait as it stood.
                let before = std::fs::read(if turn["round"] == 1 {
                    binary_output(
                        &project,
                        "portraits",
                        scenario,
                        &format!("portrait.png:{}", cast[speaker]),
                    )
                } else {
                    let round = turn["round"].as_u64().unwrap();
                    let earlier = trace["turns"].as_array().unwrap().iter().rev().find(|t| {
                        t["round"].as_u64().unwrap() < round
                            && t["speaker"].as_u64().unwrap() as usize == speaker
                    });
                    match earlier {
                        Some(t) => binary_output(
                            &project,
                            "simulate",
                            &run,
                            &format!("portrait.png:t{}-{}", t["round"], cast[speaker]),
                        ),
                        None => binary_output(
                            &project,
                            "portraits",
                            scenario,
                            &format!("portrait.png:{}", cast[speaker]),
                        ),
                    }
                })
                .unwrap();
                assert!(
                    edits
                        .iter()
                        .any(|e| e.raw.windows(before.len()).any(|w| w == before)),
                    "{run} turn {}: the speaker's current portrait was uploaded",
                    turn["round"]
                );
                current = after.clone();
                edited += 1;
            }
        }
    }
    assert_eq!(
        edits.len(),
        edited,
        "one edit per vv and dv turn, none for text"
    );
    assert_eq!(edited, 8 * VISION_ROUNDS);
    let before = requests.len();
    drop(requests);

    let again = viss(&project, &["build", "--until", "simulate", "--json"]);
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(
        mock.server().request_count(),
        before,
        "a warm rebuild asks nothing"
    );
}

#[test]
fn mock_server_agents_who_always_suggest_one_name_still_leave_no_role_silent_past_four_turns() {
    const LONG: usize = 24;
    let (_temp, project) = crate::common::demo::copy();
    // Every speaker hands the turn to the first name it may: without the fair policy two
    // roles would talk to each other for the whole run.
    let mock = BackgroundMockServer::start(|_, body| scripted(body));
    point_at(
        &project,
        &mock,
        &[("agents = [\"local\"]", "agents = [\"mock:mock-model\"]")],
    );
    std::fs::write(
        project.join("stages/plan_runs.toml"),
        "[params]\nmodes = [\"text\"]\n",
    )
    .unwrap();
    std::fs::write(
        project.join("stages/simulate.toml"),
        format!("[params]\nrounds = {LONG}\n"),
    )
    .unwrap();
    let output = viss(&project, &["build", "--until", "simulate"]);
    assert!(output.status.success(), "{}", text(&output));
    let mut crowded = 0;
    for scenario in crate::common::scenario_ids(&project, "demo/s01e01") {
        let run = format!("{scenario}/sim/text/mock-model/r0");
        let trace = show(&project, &["simulate", &run, "trace"]);
        let cast = trace["settings"]["cast"].as_array().unwrap().len();
        let turns = trace["turns"].as_array().unwrap();
        assert_eq!(turns.len(), LONG);
        let speakers: Vec<usize> = turns
            .iter()
            .map(|t| t["speaker"].as_u64().unwrap() as usize)
            .collect();
        for window in speakers.windows(5) {
            for role in 0..cast {
                assert!(
                    window.contains(&role),
                    "{run}: role {role} silent 5 turns in a row: {speakers:?}"
                );
            }
        }
        // Otherwise the suggestion stands: most turns go to whom the last speaker named.
        let followed = turns
            .windows(2)
            .filter(|pair| {
                let named = pair[0]["turn"]["next_speaker"].as_str().unwrap();
                let cast_names = &trace["settings"]["cast"];
                cast_names[pair[1]["speaker"].as_u64().unwrap() as usize][0] == named
            })
            .count();
        assert!(followed * 2 > LONG, "{run}: {followed} of {LONG} followed");
        crowded += usize::from(cast >= 3);
    }
    assert!(
        crowded >= 3,
        "the demo has three scenes of three or four roles"
    );
}

#[test]
fn mock_server_with_action_types_a_role_that_leaves_is_gone_and_idle_runs_end_early() {
    let (_temp, project) = crate::common::demo::copy();
    // Theo, in every demo scene, walks out at his first turn; everyone else does nothing.
    let mock = BackgroundMockServer::start(|_, body| {
        if !is_turn(body) {
            return MockReply::answer(&crate::common::mock_llm::demo_answer(body).to_string());
        }
        let mut turn = good_turn(body);
        if speaker_of(body) == "Theo" {
            turn["action_type"] = json!("leave");
            turn["message"] = json!("I am done with this, I am going.");
        } else {
            turn["action_type"] = json!("none");
            turn["message"] = json!("");
        }
        MockReply::answer(&turn.to_string())
    });
    point_at(
        &project,
        &mock,
        &[("agents = [\"local\"]", "agents = [\"mock:mock-model\"]")],
    );
    std::fs::write(
        project.join("stages/plan_runs.toml"),
        "[params]\nmodes = [\"text\"]\n",
    )
    .unwrap();
    std::fs::write(
        project.join("stages/simulate.toml"),
        "[params]\nrounds = 15\naction_types = true\n",
    )
    .unwrap();
    let output = viss(&project, &["build", "--until", "simulate"]);
    assert!(output.status.success(), "{}", text(&output));
    let mut played_on = 0;
    for scenario in crate::common::scenario_ids(&project, "demo/s01e01") {
        let run = format!("{scenario}/sim/text/mock-model/r0");
        let trace = show(&project, &["simulate", &run, "trace"]);
        let cast: Vec<&str> = trace["settings"]["cast"]
            .as_array()
            .unwrap()
            .iter()
            .map(|seat| seat[0].as_str().unwrap())
            .collect();
        let theo = cast.iter().position(|n| *n == "Theo").unwrap();
        let turns = trace["turns"].as_array().unwrap();
        assert!(turns.len() < 15, "{run} ended early");
        let actions: Vec<&str> = turns
            .iter()
            .map(|t| t["turn"]["action_type"].as_str().unwrap())
            .collect();
        let left = actions.iter().position(|a| *a == "leave");
        if let Some(at) = left {
            for later in &turns[at + 1..] {
                assert_ne!(later["speaker"].as_u64().unwrap() as usize, theo, "{run}");
            }
            played_on += usize::from(at + 1 < turns.len());
        }
        match trace["end"]["reason"].as_str().unwrap() {
            "too_few_roles" => {
                assert_eq!(cast.len(), 2, "{run}");
                assert_eq!(trace["end"]["remaining"], 1);
                assert_eq!(actions.last(), Some(&"leave"));
            }
            "idle" => {
                assert_eq!(trace["end"]["turns"], 3);
                assert_eq!(actions[actions.len() - 3..], ["none"; 3], "{run}");
            }
            other => panic!("{run}: ended {other}"),
        }
        let transcript = text(&viss(&project, &["show", "simulate", &run]));
        assert!(transcript.contains("ended early"), "{transcript}");
    }
    assert!(played_on >= 1, "some scene played on after Theo left");
    let requests = mock.server().state.requests.lock().unwrap();
    let after_leaving = requests
        .iter()
        .map(|r| &r.body)
        .filter(|b| is_turn(b) && question_of(b).contains("Theo left the scene, saying:"))
        .collect::<Vec<_>>();
    assert!(!after_leaving.is_empty());
    for body in after_leaving {
        assert!(
            question_of(body).contains(" Theo left the scene."),
            "{body}"
        );
        let next =
            &body["response_format"]["json_schema"]["schema"]["properties"]["next_speaker"]["enum"];
        assert!(!next.as_array().unwrap().contains(&json!("Theo")), "{next}");
    }
}

/// `viss play` on `project` with `input` as the person's typing.
fn play(project: &std::path::Path, args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_viss"))
        .arg("-C")
        .arg(project)
        .arg("play")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// One of Noor's turns as typed, field by field in the order asked.
fn typed_turn(thought: &str, message: &str) -> String {
    [
        thought,
        "4",
        "Annoyed that the deposit is at risk.",
        "n",
        "jaw set, eyes on Theo",
        "taps the clipboard",
        "1",
        message,
    ]
    .map(|line| format!("{line}\n"))
    .concat()
}

#[test]
fn mock_server_agents_and_a_person_at_the_terminal_play_a_scene_that_resumes_where_it_stopped() {
    let (_temp, project) = crate::common::demo::copy();
    let mock = BackgroundMockServer::start(|_, body| scripted(body));
    point_at(
        &project,
        &mock,
        &[("agents = [\"local\"]", "agents = [\"mock:mock-model\"]")],
    );
    std::fs::write(
        project.join("stages/simulate.toml"),
        "[params]\nrounds = 4\n",
    )
    .unwrap();
    let scenario = crate::common::scenario_ids(&project, "demo/s01e01").remove(0);
    let run = format!("{scenario}/sim/text/human-as-noor/r0");
    let args = ["--as", "Noor", scenario.as_str()];

    // The first sitting ends (input closed) during Noor's second turn, after a refused answer.
    let first = typed_turn(
        "He will pay for the dent if I keep at it",
        "You drove the van, Theo. The dent is yours.",
    );
    let spoken = typed_turn(
        "I will not let this drop",
        "I will not let this drop, Theo.",
    );
    let output = play(&project, &args, &format!("{first}{spoken}"));
    assert!(!output.status.success(), "{}", text(&output));
    let shown = text(&output);
    assert!(shown.contains("added a seat for you as Noor"), "{shown}");
    assert!(
        shown.contains("You are Noor, a character in a scene"),
        "{shown}"
    );
    assert!(
        shown.contains("What you want to achieve in this scene:"),
        "{shown}"
    );
    assert!(
        shown.contains("emotion [1. Joy  2. Sadness  3. Fear  4. Anger"),
        "{shown}"
    );
    assert!(
        shown.contains("the message repeats the inner thought word for word"),
        "the refused answer is asked again with why: {shown}"
    );
    assert!(
        shown.contains("run `viss play` again to go on from this turn"),
        "{shown}"
    );
    let plans = std::fs::read_to_string(project.join("stages/plan_runs.toml")).unwrap();
    assert!(plans.contains("[[params.play]]\nscenario = "), "{plans}");

    // The second sitting re-plays the answered turns from the cache and asks only the rest.
    let retyped = typed_turn("I will not let this drop", "Pay half by Friday, then.");
    let output = play(&project, &args, &retyped);
    assert!(output.status.success(), "{}", text(&output));
    let shown = text(&output);
    assert_eq!(
        shown.matches("You are Noor, a character").count(),
        1,
        "{shown}"
    );
    assert!(!shown.contains("added a seat"), "the seat is there already");
    assert!(shown.contains(&format!("{run}:")), "{shown}");
    assert!(
        shown.contains(
            "Noor (a person) (Anger; jaw set, eyes on Theo; taps the clipboard): You drove the \
             van, Theo. The dent is yours."
        ),
        "{shown}"
    );

    let trace = show(&project, &["simulate", &run, "trace"]);
    let cast = &trace["settings"]["cast"];
    let noor = (0..2).find(|&i| cast[i][0] == "Noor").unwrap();
    assert_eq!(cast[noor][1], "human");
    assert_eq!(cast[1 - noor][1], "mock:mock-model");
    let turns = trace["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 4);
    let messages: Vec<&str> = turns
        .iter()
        .filter(|t| t["speaker"] == noor)
        .map(|t| {
            assert_eq!(t["human"], true);
            t["turn"]["message"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        messages,
        [
            "You drove the van, Theo. The dent is yours.",
            "Pay half by Friday, then."
        ]
    );
    for turn in turns.iter().filter(|t| t["speaker"] != noor) {
        assert!(turn.get("human").is_none(), "{turn}");
        assert!(
            turn["turn"]["message"]
                .as_str()
                .unwrap()
                .contains("mock-model")
        );
    }
    // An ordinary build plays the agents' own runs and finds the person's built: nothing
    // fails, the play's trace stays as it was.
    let build = viss(&project, &["build", "--until", "simulate"]);
    assert!(build.status.success(), "{}", text(&build));
    assert_eq!(show(&project, &["simulate", &run, "trace"]), trace);
}

#[test]
fn mock_server_play_checks_the_scenario_role_and_store_before_writing_a_seat_or_asking_a_model() {
    let (_temp, project) = crate::common::demo::copy();
    // Every answer is unusable: a play that got as far as building would fail there.
    let mock = BackgroundMockServer::start(|_, _| MockReply::answer("{}"));
    point_at(
        &project,
        &mock,
        &[("agents = [\"local\"]", "agents = [\"mock:mock-model\"]")],
    );
    let plans = project.join("stages/plan_runs.toml");
    let before = std::fs::read_to_string(&plans).unwrap();
    let scenario = crate::common::scenario_ids(&project, "demo/s01e01").remove(0);
    let refused = |what: &str, output: &std::process::Output| {
        assert_eq!(output.status.code(), Some(2), "{what}: {}", text(output));
        assert_eq!(
            std::fs::read_to_string(&plans).unwrap(),
            before,
            "{what}: stages/plan_runs.toml is as it was"
        );
    };
    let unchanged = |what: &str, output: &std::process::Output| {
        refused(what, output);
        assert!(
            !text(output).contains("added a seat"),
            "{what}: {}",
            text(output)
        );
    };

    let output = play(&project, &["--as", "Noor", "demo/s01e01/scffff"], "");
    unchanged("an unknown scenario", &output);
    assert!(
        text(&output).contains("no scenario \"demo/s01e01/scffff\""),
        "{}",
        text(&output)
    );
    let output = play(&project, &["--as", "Nobody", &scenario], "");
    unchanged("an unknown role", &output);
    assert!(
        text(&output).contains("has no role \"Nobody\"; its roles are"),
        "{}",
        text(&output)
    );
    assert_eq!(mock.server().request_count(), 0, "no model was asked");

    let held = viss::dag::lock::StoreLock::acquire(&project.join("artifacts"), "test").unwrap();
    let output = play(&project, &["--as", "Noor", &scenario], "");
    unchanged("a store another process holds", &output);
    assert!(
        text(&output).contains("held by another viss process"),
        "{}",
        text(&output)
    );
    drop(held);
    assert_eq!(mock.server().request_count(), 0, "no model was asked");

    // A scene that cannot be prepared (its annotations fail) takes its new seat out again.
    let output = play(&project, &["--as", "Noor", &scenario], "");
    assert!(text(&output).contains("added a seat"), "{}", text(&output));
    refused("a scene that is not ready", &output);
    assert!(
        text(&output).contains("the seat is taken out again"),
        "{}",
        text(&output)
    );
    assert!(
        mock.server().request_count() > 0,
        "this time the build asked"
    );
}

/// The demo's export with its simulation traces and their evaluations, as a researcher loads
/// it with the real Hugging Face `datasets` library (the card's configs: images that open as
/// images, the records as they are, the traces, the results), pandas and pyarrow. Agents,
/// annotators and the judge are the MOCK server; the loaders, files and images are real.
#[test]
fn mock_server_export_loads_in_hugging_face_datasets_pandas_and_pyarrow() {
    let (_temp, project) = crate::common::demo::copy();
    let mock = BackgroundMockServer::start(|_, body| {
        let step = crate::common::mock_llm::step_of(body);
        if step == "role_enactment" || step == "interaction_management" {
            let grades = crate::evaluate::grades(body, ["Achieved", "Not Achieved"], false);
            MockReply::answer(&grades.to_string())
        } else {
            scripted(body)
        }
    });
    point_at(
        &project,
        &mock,
        &[
            ("agents = [\"local\"]", "agents = [\"mock:mock-model\"]"),
            ("judges = [\"local\"]", "judges = [\"mock:mock-judge\"]"),
        ],
    );
    std::fs::write(
        project.join("stages/plan_runs.toml"),
        "[params]\nmodes = [\"text\"]\n",
    )
    .unwrap();
    std::fs::write(
        project.join("stages/simulate.toml"),
        "[params]\nrounds = 2\n",
    )
    .unwrap();
    std::fs::write(
        project.join("stages/export.toml"),
        "[params]\nlicense = \"cc0-1.0\"\n",
    )
    .unwrap();
    let built = viss(&project, &["build", "--until", "evaluate", "--json"]);
    assert!(built.status.success(), "{}", text(&built));
    let out = project.join("hf-export");
    let exported = viss(
        &project,
        &[
            "export",
            "--build",
            "--traces",
            "--results",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(exported.status.success(), "{}", text(&exported));

    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(card.starts_with("---\npretty_name: "), "{card}");
    assert!(card.contains("\nconfigs:\n"), "{card}");
    assert!(card.contains("\nlicense: \"cc0-1.0\"\n"), "{card}");
    let lock = viss::export::lock::DatasetLock::parse(
        &std::fs::read_to_string(out.join("viss.lock")).unwrap(),
    )
    .unwrap();
    for file in [
        "README.md",
        "traces.jsonl",
        "turns.parquet",
        "results.jsonl",
        "results.parquet",
        "scenarios.parquet",
    ] {
        let bytes = std::fs::read(out.join(file)).unwrap();
        assert_eq!(
            lock.files[file].to_hex(),
            blake3::hash(&bytes).to_hex().as_str(),
            "{file}"
        );
    }

    let loaded = std::process::Command::new(crate::common::test_python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/python/load_export.py"
        ))
        .arg(&out)
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_HOME", project.join("hf-home"))
        .output()
        .unwrap();
    assert!(loaded.status.success(), "{}", text(&loaded));
    let read: Value = serde_json::from_slice(&loaded.stdout).unwrap();
    let records: Vec<Value> = std::fs::read_to_string(out.join("data.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let first = &records[0];
    assert_eq!(read["rows"], records.len());
    assert_eq!(read["table_rows"], records.len());
    assert_eq!(read["pandas_rows"], records.len());
    assert_eq!(read["first_id"], first["id"]);
    assert_eq!(read["turns"], first["turns"]);
    assert_eq!(
        read["pandas_roles"],
        first["roles"].as_array().unwrap().len()
    );
    // Images load as images, the size the record states; their facts stay beside them.
    assert_eq!(read["features"]["group_image"], "Image");
    assert_eq!(read["role_features"]["portrait"], "Image");
    assert_eq!(read["features"]["roles"], "List");
    assert_eq!(read["features"]["turns"], "Value");
    let image = &first["group_image"];
    assert_eq!(
        read["group_image"],
        json!({"type": "PngImageFile", "size": [image["width"], image["height"]], "mode": "RGB"})
    );
    assert_eq!(read["group_image_info"]["blake3"], image["blake3"]);
    let portrait = &first["roles"][0]["portrait"];
    assert_eq!(
        read["portrait"]["size"],
        json!([portrait["width"], portrait["height"]])
    );
    assert_eq!(read["table_group_image_path"], image["path"]);
    // The traces config: a turn per row, the runs of traces.jsonl in order.
    let runs: Vec<Value> = std::fs::read_to_string(out.join("traces.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let turns: usize = runs
        .iter()
        .map(|r| r["turns"].as_array().unwrap().len())
        .sum();
    assert_eq!(read["turn_rows"], turns);
    assert_eq!(runs.len() * 2, turns);
    let first_turn = &runs[0]["turns"][0];
    let speaker = &runs[0]["settings"]["cast"][first_turn["speaker"].as_u64().unwrap() as usize][0];
    assert_eq!(
        read["first_turn"],
        json!({"run": runs[0]["run"], "turn": 1, "speaker": speaker,
               "message": first_turn["turn"]["message"]})
    );
    // pyarrow sees the column types the card declares.
    assert_eq!(read["arrow_types"]["turns"], "uint64");
    assert_eq!(read["arrow_types"]["alignment_flagged"], "bool");
    // The results config: a task of a character per row, the runs of results.jsonl in order;
    // the judge's grades as it gave them (a panel of one: unanimous).
    let judged: Vec<Value> = std::fs::read_to_string(out.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(judged.len(), runs.len());
    let tasks: usize = judged
        .iter()
        .map(|r| r["tasks"].as_array().unwrap().len())
        .sum();
    assert_eq!(
        tasks,
        judged
            .iter()
            .map(|r| r["cast"].as_array().unwrap().len() * 4)
            .sum::<usize>()
    );
    assert_eq!(read["result_rows"], tasks);
    let cast = &judged[0]["cast"][0];
    assert_eq!(
        read["first_results"],
        json!([
            {"run": judged[0]["run"], "character": cast[0], "model": cast[1],
             "task": "expression", "label": "Achieved", "verdict": "unanimous"},
            {"run": judged[0]["run"], "character": cast[0], "model": cast[1],
             "task": "characteristic", "label": "Not Achieved", "verdict": "unanimous"},
        ])
    );
}

//! The video path through the CLI on the demo show, with the real models (fetched into the model
//! cache on first use): `frames`, `keyframes`, `detect` and `group_image` after `align`. Every
//! scenario gets a stylised group image made from a frame that shows its participants, judged
//! against the demo's own shot list; broken videos and image endpoints fail with messages that
//! name the file, the time or the endpoint; the image endpoint path runs against the in-process
//! mock server.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;
use viss::llm::mock_server::{BackgroundMockServer, MockReply};
use viss::vision::{ScrfdConfig, ScrfdDetector, load_rgb};

/// The demo's four scenarios in script order (ids hash each scene's opening lines; the demo
/// script is fixed, and `demo_scenario_ids_are_these` checks them against `viss show`).
const SCENARIOS: [&str; 4] = [
    "demo/s01e01/scd51d",
    "demo/s01e01/scd23d",
    "demo/s01e01/sc71a3",
    "demo/s01e01/scfba6",
];

use crate::common;

use common::{binary_output, show, text, viss_in, viss_in_with_env};

/// The shared demo project (built once per run, through portraits); tests that change it work
/// on a copy.
fn built_demo() -> &'static Path {
    common::demo::project()
}

fn copy_of_demo() -> (tempfile::TempDir, PathBuf) {
    common::demo::copy()
}

fn scrfd() -> &'static ScrfdDetector {
    static DETECTOR: OnceLock<ScrfdDetector> = OnceLock::new();
    DETECTOR.get_or_init(|| {
        let files = viss::models::ModelCache::from_env()
            .unwrap()
            .ensure_face_detector()
            .unwrap();
        ScrfdDetector::load(
            &files.onnx_runtime_library,
            &files.model_onnx,
            ScrfdConfig::default(),
            2,
        )
        .unwrap()
    })
}

/// The demo's shot at `time_s` from its ground truth: (scene, characters on screen).
fn truth_shot(truth: &Value, time_s: f64) -> (u64, Vec<String>) {
    let time_ms = (time_s * 1000.0).round() as u64;
    let shot = truth["shots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["start_ms"].as_u64().unwrap() <= time_ms && time_ms < s["end_ms"].as_u64().unwrap()
        })
        .unwrap_or_else(|| panic!("no shot at {time_s} s"));
    let framing = &shot["framing"];
    let characters = match framing["kind"].as_str().unwrap() {
        "close_up" => vec![framing["character"].as_str().unwrap().to_string()],
        _ => framing["characters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect(),
    };
    (shot["scene"].as_u64().unwrap(), characters)
}

#[test]
fn every_demo_scenario_gets_a_synthetic_group_image_of_a_frame_showing_its_participants() {
    let project = built_demo();
    let truth: Value = serde_json::from_str(
        &std::fs::read_to_string(project.join("raw/demo/s01e01/truth.json")).unwrap(),
    )
    .unwrap();
    let mut checked = 0;
    for scenario in SCENARIOS {
        let record = show(
            project,
            &[
                "parse_script",
                "demo/s01e01",
                &format!("scenario@{scenario}"),
            ],
        );
        let participants: Vec<String> = record["unit"]["participants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_string())
            .collect();
        let scene = record["unit"]["scene_index"].as_u64().unwrap();
        let frames = show(project, &["frames", scenario, "frames"]);
        let times: Vec<f64> = frames["times_s"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_f64().unwrap())
            .collect();
        assert_eq!(frames["fps"], 2.0);
        assert!(
            times.windows(2).all(|w| (w[1] - w[0] - 0.5).abs() < 0.05),
            "{scenario}: 2 samples per second"
        );

        // The demo renders a shot with all of this scenario's participants, in its own scene,
        // inside the decoded segment: the chosen frame must be such a shot.
        let shows_everyone = |(shot_scene, characters): &(u64, Vec<String>)| {
            *shot_scene == scene && participants.iter().all(|p| characters.contains(p))
        };
        assert!(
            times
                .iter()
                .any(|&t| shows_everyone(&truth_shot(&truth, t))),
            "{scenario}: the demo has no frame of all of {participants:?} in range; the test would \
             prove nothing"
        );
        let detections = show(project, &["detect", scenario, "detections"]);
        let chosen = &detections["group_frame"];
        let time_s = chosen["time_s"].as_f64().unwrap();
        let shot = truth_shot(&truth, time_s);
        assert!(
            shows_everyone(&shot),
            "{scenario} ({participants:?}): chose {time_s} s, which shows {shot:?}"
        );
        let candidate = &detections["candidates"][chosen["candidate"].as_u64().unwrap() as usize];
        assert!(
            candidate["faces"].as_array().unwrap().len() >= participants.len(),
            "{scenario}: {candidate}"
        );
        assert_eq!(
            chosen["counted_faces"].as_u64().unwrap() as usize,
            participants.len()
        );
        assert_eq!(detections["persons_from"], "derived_from_faces");
        assert_eq!(detections["person_detector"], Value::Null);
        assert_eq!(
            candidate["persons"].as_array().unwrap().len(),
            candidate["faces"].as_array().unwrap().len()
        );

        // G: synthetic, local, made from that frame, and still showing everyone's face.
        let group = show(project, &["group_image", scenario, "group_image"]);
        assert_eq!(group["scenario"], scenario);
        assert_eq!(group["image"]["synthetic"], true);
        assert_eq!(group["image"]["backend"], "local:cartoon/v1");
        assert_eq!(group["source_frame_seconds"].as_f64().unwrap(), time_s);
        let png = binary_output(project, "group_image", scenario, "group_image.png");
        assert!(
            png.ends_with(group["image"]["png"].as_str().unwrap()),
            "{}",
            png.display()
        );
        let image = load_rgb(&png).unwrap();
        assert_eq!(
            (image.width() as u64, image.height() as u64),
            (
                group["image"]["width"].as_u64().unwrap(),
                group["image"]["height"].as_u64().unwrap()
            )
        );
        let frame = load_rgb(&binary_output(
            project,
            "detect",
            scenario,
            "group_frame.png",
        ))
        .unwrap();
        assert_eq!(frame.dimensions(), image.dimensions());
        assert_ne!(frame, image, "G is not the frame itself");
        let faces_in_g = scrfd().detect(&image).unwrap();
        assert!(
            faces_in_g.len() >= participants.len(),
            "{scenario}: {} faces in G for {participants:?}",
            faces_in_g.len()
        );
        checked += 1;
    }
    assert_eq!(checked, SCENARIOS.len());
    let status = text(&viss_in(project, &["status"]));
    assert!(
        !status.contains("detect demo"),
        "no scenario is flagged: {status}"
    );
}

#[test]
fn keyframes_name_their_features_and_a_rebuild_reuses_everything() {
    // Its own copy: the rebuild below must not hold the shared project's store while other
    // tests read or copy it.
    let (_temp, project) = copy_of_demo();
    let project = project.as_path();
    let keyframes = show(project, &["keyframes", SCENARIOS[0], "keyframes"]);
    assert_eq!(keyframes["features"]["kind"], "classical");
    assert!(
        keyframes["features"]["id"]
            .as_str()
            .unwrap()
            .contains("not CLIP"),
        "{keyframes}"
    );
    assert_eq!(keyframes["pelt"]["penalty"], 1.0);
    let shots = keyframes["shots"].as_array().unwrap();
    assert!(
        shots.len() > 5,
        "the demo's first scene cuts between close-ups and group shots: {shots:?}"
    );
    // Shots tile the sampled frames, each representative inside its shot.
    let mut next = 0;
    for shot in shots {
        assert_eq!(shot["first"].as_u64().unwrap(), next);
        let (first, last, representative) = (
            shot["first"].as_u64().unwrap(),
            shot["last"].as_u64().unwrap(),
            shot["representative"].as_u64().unwrap(),
        );
        assert!(first <= representative && representative <= last);
        next = last + 1;
    }
    assert_eq!(next, keyframes["frame_count"].as_u64().unwrap());

    let (_temp, copy) = copy_of_demo();
    let rebuild = viss_in(&copy, &["build", "--until", "group_image", "--json"]);
    assert!(rebuild.status.success(), "{}", text(&rebuild));
    let report: Value = serde_json::from_slice(&rebuild.stdout).unwrap();
    let ran: u64 = report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[1]["ran"].as_u64().unwrap())
        .sum();
    assert_eq!(ran, 0, "{report}");

    // A keyframes param edit re-runs keyframes; identical shots keep detect and group_image fresh.
    let path = copy.join("stages/keyframes.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, config.replace("penalty = 1.0", "penalty = 1.01")).unwrap();
    let rebuild = viss_in(&copy, &["build", "--until", "group_image", "--json"]);
    assert!(rebuild.status.success(), "{}", text(&rebuild));
    let report: Value = serde_json::from_slice(&rebuild.stdout).unwrap();
    let ran = |stage: &str| {
        report["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s[0] == stage)
            .map_or(0, |s| s[1]["ran"].as_u64().unwrap())
    };
    assert_eq!((ran("frames"), ran("keyframes")), (0, 4), "{report}");
}

/// Replaces the demo video with `make(original) -> new file` and rebuilds through group_image.
fn rebuild_with_video(project: &Path, make: impl FnOnce(&Path, &Path)) -> String {
    let video = project.join("raw/demo/s01e01/video.mp4");
    let original = project.join("original.mp4");
    std::fs::rename(&video, &original).unwrap();
    make(&original, &video);
    let build = viss_in(project, &["build", "--until", "group_image"]);
    assert!(
        !build.status.success(),
        "a broken video must fail the build: {}",
        text(&build)
    );
    text(&build)
}

#[test]
fn a_truncated_video_fails_the_scenarios_it_cannot_cover_naming_file_and_times() {
    let (_temp, project) = copy_of_demo();
    let output = rebuild_with_video(&project, |original, video| {
        // The demo's video keeps its index at the front (faststart), so a cut copy still opens
        // and promises 176 s.
        let bytes = std::fs::read(original).unwrap();
        std::fs::write(video, &bytes[..bytes.len() / 2]).unwrap();
    });
    assert!(
        output.contains(&format!("frames {}", SCENARIOS[3])),
        "{output}"
    );
    assert!(output.contains("video.mp4 ends early"), "{output}");
    assert!(output.contains("stream stopped after"), "{output}");
    // The first scenario lies in the intact half and is rebuilt.
    let frames = show(&project, &["frames", SCENARIOS[0], "frames"]);
    assert!(!frames["times_s"].as_array().unwrap().is_empty());
}

#[test]
fn a_video_shorter_than_the_subtitles_fails_late_scenarios_naming_the_start_and_the_length() {
    let (_temp, project) = copy_of_demo();
    let output = rebuild_with_video(&project, |original, video| {
        let status = Command::new("ffmpeg")
            .args(["-v", "error", "-y", "-i"])
            .arg(original)
            .args(["-t", "60", "-c", "copy"])
            .arg(video)
            .status()
            .expect("the ffmpeg CLI (Debian package `ffmpeg`) is needed to cut the demo video");
        assert!(status.success());
    });
    // The third scenario's decoded segment starts at 81.9 s, past the new end.
    assert!(
        output.contains(&format!("frames {}", SCENARIOS[2])),
        "{output}"
    );
    assert!(
        output.contains("segment start 81.917 s is at or past the end of"),
        "{output}"
    );
    assert!(output.contains("video.mp4 (60."), "{output}");
    // The second (45.7..84.7 s) is decoded as far as the video goes, and flagged.
    let status = text(&viss_in(&project, &["status"]));
    assert!(
        status.contains(&format!(
            "frames {}: align places it until 82.7 s",
            SCENARIOS[1]
        )),
        "{status}"
    );
}

#[test]
fn a_scenario_without_a_face_is_flagged_not_failed() {
    let (_temp, project) = copy_of_demo();
    // A face detector that accepts nothing: every candidate frame is faceless.
    let path = project.join("stages/detect.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        config.replacen("score_threshold = 0.5", "score_threshold = 1.0", 1),
    )
    .unwrap();
    let build = viss_in(&project, &["build", "--until", "group_image"]);
    assert!(build.status.success(), "{}", text(&build));
    let status = text(&viss_in(&project, &["status"]));
    for scenario in SCENARIOS {
        assert!(
            status.contains(&format!("detect {scenario}: no usable face")),
            "{status}"
        );
    }
    let group = show(&project, &["group_image", SCENARIOS[0], "group_image"]);
    assert_eq!(group["image"]["synthetic"], true);
}

#[test]
fn an_episode_without_video_is_flagged_and_its_scenarios_skip_the_video_stages() {
    let (_temp, project) = copy_of_demo();
    let manifest = project.join("manifests/shows/demo.toml");
    let text_only: String = std::fs::read_to_string(&manifest)
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with("video = "))
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(&manifest, text_only).unwrap();
    let build = viss_in(&project, &["build", "--until", "group_image"]);
    assert!(
        build.status.success(),
        "a text-only episode builds: {}",
        text(&build)
    );
    let status = text(&viss_in(&project, &["status"]));
    for scenario in SCENARIOS {
        assert!(
            status.contains(&format!(
                "frames {scenario}: episode demo/s01e01 lists no video"
            )),
            "{status}"
        );
        let outputs = viss_in(&project, &["show", "group_image", scenario]);
        assert!(outputs.status.success(), "{}", text(&outputs));
        assert_eq!(
            String::from_utf8_lossy(&outputs.stdout).trim(),
            "",
            "no group image without a video"
        );
    }
}

#[test]
fn a_configured_yolo_detector_gives_the_person_boxes() {
    // The only YOLOv8-format model a registry ships detects faces (class 0), not people; as a
    // "person detector" it still shows that the configured graph, not the faces, gives the boxes.
    let yolo = viss::models::ModelCache::from_env()
        .unwrap()
        .ensure(&viss::models::YOLOV8_FACE_TEST_ONLY)
        .unwrap()
        .file("yolov8-face.onnx");
    let (_temp, project) = copy_of_demo();
    let config = project.join("viss.toml");
    let mut text_config = std::fs::read_to_string(&config).unwrap();
    text_config.push_str(&format!(
        "\n[models.person_detector]\nmodel_onnx = {yolo:?}\nclasses = [0]\n"
    ));
    std::fs::write(&config, text_config).unwrap();
    let build = viss_in(&project, &["build", "--until", "detect", "--json"]);
    assert!(build.status.success(), "{}", text(&build));
    let detections = show(&project, &["detect", SCENARIOS[3], "detections"]);
    assert_eq!(detections["persons_from"], "detector");
    assert!(
        detections["person_detector"]
            .as_str()
            .unwrap()
            .starts_with("yolov8/v1 "),
        "{detections}"
    );
    let chosen = &detections["candidates"]
        [detections["group_frame"]["candidate"].as_u64().unwrap() as usize];
    let persons = chosen["persons"].as_array().unwrap();
    assert!(persons.len() >= 4, "the group of four: {chosen}");
    // Detector boxes (here: faces), not the taller head-and-torso boxes derived from faces.
    for person in persons {
        let bbox: Vec<f64> = person["bbox"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert!(bbox[3] - bbox[1] < 150.0, "{person}");
    }
}

#[test]
fn keyframes_use_a_configured_clip_encoder_and_say_so() {
    let (_temp, project) = copy_of_demo();
    // Asking for CLIP without a model is refused before anything runs.
    let stage = project.join("stages/keyframes.toml");
    let config = std::fs::read_to_string(&stage).unwrap();
    std::fs::write(
        &stage,
        config.replace("features = \"auto\"", "features = \"clip\""),
    )
    .unwrap();
    let refused = viss_in(&project, &["build", "--until", "keyframes"]);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("[models.image_embedder]"),
        "{}",
        text(&refused)
    );

    // A stand-in CLIP graph (each channel's mean of CLIP's normalised 224x224 input; see
    // src/vision/clip.rs) configured as the project's image embedder.
    let model =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clip/channel_means.onnx");
    let settings = project.join("viss.toml");
    let mut text_config = std::fs::read_to_string(&settings).unwrap();
    text_config.push_str(&format!(
        "\n[models.image_embedder]\nmodel_onnx = {model:?}\nintra_threads = 1\n"
    ));
    std::fs::write(&settings, text_config).unwrap();
    let build = viss_in(&project, &["build", "--until", "keyframes"]);
    assert!(build.status.success(), "{}", text(&build));
    let keyframes = show(&project, &["keyframes", SCENARIOS[0], "keyframes"]);
    assert_eq!(keyframes["features"]["kind"], "clip");
    assert_eq!(keyframes["features"]["dimension"], 3);
    assert!(
        keyframes["features"]["id"]
            .as_str()
            .unwrap()
            .starts_with("clip-image/v1 model-blake3="),
        "{keyframes}"
    );
    assert!(!keyframes["shots"].as_array().unwrap().is_empty());
}

const IMAGE_KEY_VAR: &str = "VISS_TEST_IMAGE_EDIT_KEY";

fn use_image_endpoint(project: &Path, base_url: &str) {
    let path = project.join("viss.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    let config = config.replace(
        "judges = [\"local\"]\n",
        "judges = [\"local\"]\nimage_edit = \"mock:gpt-image-1\"\n",
    );
    let config = format!(
        "{config}\n[llm.endpoints.mock]\nbase_url = {base_url:?}\napi_key_env = \
         \"{IMAGE_KEY_VAR}\"\nmax_retries = 1\nretry_backoff_seconds = 0.01\n\
         [llm.endpoints.mock.prices.\"gpt-image-1\"]\ninput_per_mtok = 10.0\noutput_per_mtok = \
         40.0\n"
    );
    std::fs::write(path, config).unwrap();
}

#[test]
fn mock_group_images_come_from_an_image_edit_endpoint_when_one_is_configured() {
    use base64::Engine;
    let (_temp, project) = copy_of_demo();
    let drawn = {
        let mut png = Vec::new();
        image::RgbImage::from_pixel(96, 54, image::Rgb([250, 200, 10]))
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        png
    };
    let answer = serde_json::json!({
        "data": [{"b64_json": base64::engine::general_purpose::STANDARD.encode(&drawn)}],
        "usage": {"input_tokens": 500, "output_tokens": 1000}
    })
    .to_string();
    let mock = BackgroundMockServer::start(move |_, _| MockReply::status(200, &answer));
    use_image_endpoint(&project, &mock.server().base_url);

    let without_key = viss_in(&project, &["build", "--until", "group_image"]);
    assert!(!without_key.status.success());
    assert!(
        text(&without_key).contains(IMAGE_KEY_VAR),
        "{}",
        text(&without_key)
    );
    assert_eq!(mock.server().request_count(), 0);

    let build = viss_in_with_env(
        &project,
        &["build", "--until", "group_image", "--json"],
        &[(IMAGE_KEY_VAR, "sk-image-test")],
    );
    assert!(build.status.success(), "{}", text(&build));
    let report: Value = serde_json::from_slice(&build.stdout).unwrap();
    let ran = |stage: &str| {
        report["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s[0] == stage)
            .map_or(0, |s| s[1]["ran"].as_u64().unwrap())
    };
    assert_eq!(
        (ran("detect"), ran("group_image")),
        (0, 4),
        "only the image stage runs again: {report}"
    );
    assert_eq!(mock.server().request_count(), 4);
    let requests = mock.server().state.requests.lock().unwrap();
    for request in requests.iter() {
        assert_eq!(request.path, "/v1/images/edits");
        assert_eq!(
            request.authorization.as_deref(),
            Some("Bearer sk-image-test")
        );
        assert!(
            request
                .content_type
                .as_deref()
                .unwrap()
                .starts_with("multipart/form-data")
        );
    }
    // Each upload carries its scenario's group frame, byte for byte.
    let frame = std::fs::read(binary_output(
        &project,
        "detect",
        SCENARIOS[2],
        "group_frame.png",
    ))
    .unwrap();
    assert!(
        requests
            .iter()
            .any(|r| r.raw.windows(frame.len()).any(|w| w == frame.as_slice())),
        "the frame was uploaded"
    );
    drop(requests);

    for scenario in SCENARIOS {
        let group = show(&project, &["group_image", scenario, "group_image"]);
        assert_eq!(group["image"]["backend"], "mock:gpt-image-1");
        assert_eq!(group["image"]["synthetic"], true);
        assert_eq!(
            (
                group["image"]["width"].as_u64(),
                group["image"]["height"].as_u64()
            ),
            (Some(96), Some(54))
        );
        let png = binary_output(&project, "group_image", scenario, "group_image.png");
        assert_eq!(std::fs::read(png).unwrap(), drawn);
    }
    let status = text(&viss_in(&project, &["status"]));
    assert!(
        status.contains("mock:gpt-image-1"),
        "usage is reported: {status}"
    );
}

#[test]
fn mock_an_image_endpoint_answering_with_no_image_fails_naming_endpoint_scenario_and_time() {
    use base64::Engine;
    let (_temp, project) = copy_of_demo();
    let page = base64::engine::general_purpose::STANDARD.encode(b"<html>oops</html>");
    let garbage = serde_json::json!({"data": [{"b64_json": page}]}).to_string();
    let mock = BackgroundMockServer::start(move |_, _| MockReply::status(200, &garbage));
    use_image_endpoint(&project, &mock.server().base_url);
    let build = viss_in_with_env(
        &project,
        &["build", "--until", "group_image"],
        &[(IMAGE_KEY_VAR, "sk-image-test")],
    );
    assert!(!build.status.success());
    let output = text(&build);
    let time = show(&project, &["detect", SCENARIOS[0], "detections"])["group_frame"]["time_s"]
        .as_f64()
        .unwrap();
    assert!(
        output.contains(&format!(
            "group_image {}: {}: the group frame at {time:.3} s",
            SCENARIOS[0], SCENARIOS[0]
        )),
        "{output}"
    );
    assert!(
        output.contains("/v1/images/edits returned data that is not a PNG or JPEG image"),
        "{output}"
    );
}

#[test]
fn demo_scenario_ids_are_these() {
    let (_temp, project) = copy_of_demo();
    assert_eq!(common::scenario_ids(&project, "demo/s01e01"), SCENARIOS);
}

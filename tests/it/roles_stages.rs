//! `match_roles` and `portraits` through the CLI on the demo show, with the real models (SCRFD,
//! YuNet and SFace, fetched into the model cache on first use, never skipped). Every participant
//! is matched to the face the demo's own shot list says is theirs; swapped references swap the
//! matches; a reference of someone else leaves the role unmatched and flagged, never wrongly
//! assigned; a character without references is matched through a reference bootstrapped from its
//! lines; portraits are 448x448 synthetic crops centred on the matched face; and the export lists
//! them and copies them out (the LLM stages answered by the in-process MOCK server).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{Value, json};
use viss::llm::mock_server::{BackgroundMockServer, MockReply};
use viss::vision::nms::iou;
use viss::vision::portrait::{PORTRAIT_SIZE, portrait_crop, portrait_window};
use viss::vision::stylise::StyliseParams;
use viss::vision::{ScrfdConfig, ScrfdDetector, load_rgb};

use crate::common;

use common::{binary_output, show, text, viss_in, viss_in_with_env};

const EPISODE: &str = "demo/s01e01";

/// The shared demo project (built once per run, through portraits); tests that change it work
/// on a copy.
fn built_demo() -> &'static Path {
    common::demo::project()
}

fn copy_of_demo() -> (tempfile::TempDir, PathBuf) {
    common::demo::copy()
}

fn build(project: &Path, until: &str) -> Value {
    let output = viss_in(project, &["build", "--until", until, "--json"]);
    assert!(output.status.success(), "{}", text(&output));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&output)))
}

fn ran(report: &Value, stage: &str) -> u64 {
    report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s[0] == stage)
        .unwrap_or_else(|| panic!("no stage {stage} in the report: {report}"))[1]["ran"]
        .as_u64()
        .unwrap()
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

fn bbox(value: &Value) -> [f32; 4] {
    let v: Vec<f32> = value
        .as_array()
        .unwrap_or_else(|| panic!("not a box: {value}"))
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    [v[0], v[1], v[2], v[3]]
}

fn centre_x(b: &[f32; 4]) -> f32 {
    (b[0] + b[2]) / 2.0
}

/// The characters on screen at `time_s` in the demo's shot list, left to right (the demo lays
/// a shot's faces out side by side in the order its framing lists them).
fn on_screen(project: &Path, time_s: f64) -> Vec<String> {
    let truth: Value = serde_json::from_str(
        &std::fs::read_to_string(project.join("raw/demo/s01e01/truth.json")).unwrap(),
    )
    .unwrap();
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
    match framing["kind"].as_str().unwrap() {
        "close_up" => vec![framing["character"].as_str().unwrap().to_string()],
        _ => framing["characters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect(),
    }
}

/// Who each face of a `match_roles` record is, from the demo's truth: the record's faces
/// ordered left to right are the shot's characters in order.
fn true_faces(project: &Path, record: &Value) -> Vec<(String, [f32; 4])> {
    let characters = on_screen(project, record["group_frame_seconds"].as_f64().unwrap());
    let mut boxes: Vec<[f32; 4]> = record["faces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|face| bbox(&face["bbox"]))
        .collect();
    boxes.sort_by(|a, b| centre_x(a).total_cmp(&centre_x(b)));
    assert_eq!(
        boxes.len(),
        characters.len(),
        "{}: the group frame's faces {boxes:?} are not the shot's {characters:?}",
        record["scenario"]
    );
    characters.into_iter().zip(boxes).collect()
}

fn role<'a>(record: &'a Value, name: &str) -> &'a Value {
    record["roles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no role {name} in {record}"))
}

fn status_text(project: &Path) -> String {
    text(&viss_in(project, &["status"]))
}

#[test]
fn every_demo_participant_is_matched_to_its_own_face() {
    let project = built_demo();
    let scenarios = common::scenario_ids(project, EPISODE);
    assert_eq!(scenarios.len(), 4);
    let (mut own_min, mut other_max) = (f32::INFINITY, f32::NEG_INFINITY);
    let mut roles_checked = 0;
    for scenario in &scenarios {
        let record = show(project, &["match_roles", scenario, "role_matches"]);
        assert_eq!(record["scenario"], scenario.as_str());
        let detections = show(project, &["detect", scenario, "detections"]);
        assert_eq!(
            record["group_frame_seconds"],
            detections["group_frame"]["time_s"]
        );
        assert_eq!(record["group_frame"], detections["group_frame"]["png"]);
        assert!(
            record["face_embedder"]
                .as_str()
                .unwrap()
                .starts_with("sface/v1 "),
            "{record}"
        );
        let truth = true_faces(project, &record);
        let participants: Vec<&str> = detections["participants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        assert_eq!(
            record["roles"].as_array().unwrap().len(),
            participants.len()
        );
        for (index, name) in participants.iter().enumerate() {
            let entry = &record["roles"][index];
            assert_eq!(entry["name"], *name);
            assert_eq!(entry["status"], "matched", "{scenario} {name}: {entry}");
            assert_eq!(entry["character"], *name);
            assert_eq!(entry["bootstrapped"], Value::Null);
            let references = entry["references"].as_array().unwrap();
            assert_eq!(references.len(), 1, "{entry}");
            assert_eq!(
                references[0]["path"],
                format!("demo/references/{}.png", name.to_lowercase())
            );
            assert_eq!(references[0]["faces_found"], 1, "{entry}");
            let expected = truth
                .iter()
                .find(|(character, _)| character == name)
                .unwrap_or_else(|| panic!("{scenario}: {name} is not in the shot {truth:?}"))
                .1;
            let face = entry["face"].as_u64().unwrap() as usize;
            assert_eq!(
                bbox(&record["faces"][face]["bbox"]),
                expected,
                "{scenario} {name}"
            );
            assert_eq!(bbox(&entry["bbox"]), expected);
            let row: Vec<f32> = record["similarities"][index]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_f64().unwrap() as f32)
                .collect();
            let own = row[face];
            assert_eq!(entry["similarity"].as_f64().unwrap() as f32, own);
            for (other, similarity) in row.iter().enumerate() {
                if other != face {
                    assert!(
                        *similarity < own,
                        "{scenario} {name}: face {other} ({similarity}) beats its own ({own})"
                    );
                    other_max = other_max.max(*similarity);
                }
            }
            own_min = own_min.min(own);
            roles_checked += 1;
        }
    }
    eprintln!(
        "match_roles on the demo: {roles_checked} roles; own face similarity >= {own_min:.3}, \
         other faces <= {other_max:.3}"
    );
    assert!(roles_checked >= 10, "{roles_checked}");
    let status = status_text(project);
    assert!(
        !status.contains("match_roles demo"),
        "nothing flagged: {status}"
    );
    assert!(
        !status.contains("portraits demo"),
        "nothing flagged: {status}"
    );
}

#[test]
fn portraits_are_448_synthetic_and_centred_on_the_matched_face() {
    let project = built_demo();
    let (mut portraits, mut still_detected) = (0, 0);
    for scenario in common::scenario_ids(project, EPISODE) {
        let matches = show(project, &["match_roles", &scenario, "role_matches"]);
        let record = show(project, &["portraits", &scenario, "portraits"]);
        assert_eq!(record["scenario"], scenario.as_str());
        let frame = load_rgb(&binary_output(
            project,
            "detect",
            &scenario,
            "group_frame.png",
        ))
        .unwrap();
        for entry in record["roles"].as_array().unwrap() {
            let name = entry["name"].as_str().unwrap();
            let matched = role(&matches, name);
            let image = &entry["image"];
            assert_eq!(entry["missing_reason"], Value::Null, "{entry}");
            assert_eq!(image["synthetic"], true);
            assert_eq!(image["backend"], "local:cartoon/v1");
            assert_eq!(
                (image["width"].as_u64(), image["height"].as_u64()),
                (Some(448), Some(448))
            );
            let path = binary_output(
                project,
                "portraits",
                &scenario,
                &format!("portrait.png:{name}"),
            );
            assert!(
                path.ends_with(image["png"].as_str().unwrap()),
                "{}",
                path.display()
            );
            let portrait = load_rgb(&path).unwrap();
            assert_eq!(portrait.dimensions(), (PORTRAIT_SIZE, PORTRAIT_SIZE));

            // The portrait is drawn from the square around the matched face: that square shows
            // the face, centred horizontally, a face's height above the shoulders (the square
            // only moves up or sideways where the frame ends), at 40% of the side.
            let face = bbox(&matched["bbox"]);
            let crop = portrait_crop(&frame, &face, PORTRAIT_SIZE).unwrap();
            assert_ne!(
                crop, portrait,
                "{scenario} {name}: the portrait is stylised"
            );
            let window = portrait_window(frame.width(), frame.height(), &face).unwrap();
            let scale = PORTRAIT_SIZE as f32 / window.side;
            let expected = [
                (face[0] - window.left) * scale,
                (face[1] - window.top) * scale,
                (face[2] - window.left) * scale,
                (face[3] - window.top) * scale,
            ];
            let found = scrfd().detect(&crop).unwrap();
            let central = found
                .iter()
                .find(|f| iou(&f.bbox, &expected) > 0.6)
                .unwrap_or_else(|| {
                    panic!("{scenario} {name}: no face at {expected:?} in the crop: {found:?}")
                });
            let (x, y) = (
                (central.bbox[0] + central.bbox[2]) / 2.0,
                (central.bbox[1] + central.bbox[3]) / 2.0,
            );
            // Centred horizontally, with the face centre at 42% of the side, unless the frame
            // constrains the square on that side (it touches an edge, or is larger than the
            // frame and centred on it).
            let touches = |start: f32, length: u32| {
                start.abs() < 0.5
                    || (start + window.side - length as f32).abs() < 0.5
                    || window.side > length as f32
            };
            assert!(
                (x - 224.0).abs() < 30.0 || touches(window.left, frame.width()),
                "{scenario} {name}: the face's centre x {x} is off the portrait's middle; matched \
                 {face:?}, window {window:?}"
            );
            assert!(
                (y - 0.42 * 448.0).abs() < 30.0 || touches(window.top, frame.height()),
                "{scenario} {name}: the face's centre y {y} is off 42% of the portrait; matched \
                 {face:?}, window {window:?}"
            );
            let height = central.bbox[3] - central.bbox[1];
            assert!(
                (0.3 * 448.0..0.5 * 448.0).contains(&height),
                "{scenario} {name}: face height {height} in the portrait"
            );
            eprintln!(
                "{scenario} {name}: face at ({x:.0}, {y:.0}), {height:.0} px tall in the 448 px \
                 portrait"
            );
            // The portrait is that square through the local cartoon filter, exactly
            // (`vision::portrait`, with the stage's default filter settings).
            assert!(
                portrait
                    == viss::vision::portrait::portrait(&frame, &face, &StyliseParams::default())
                        .unwrap(),
                "{scenario} {name}: the portrait is not the stylised square around the face"
            );
            if scrfd()
                .detect(&portrait)
                .unwrap()
                .iter()
                .any(|f| iou(&f.bbox, &central.bbox) > 0.6)
            {
                still_detected += 1;
            }
            portraits += 1;
        }
    }
    eprintln!(
        "{portraits} portraits; SCRFD still finds the face in {still_detected} of them after the \
         cartoon filter"
    );
    assert!(portraits >= 10, "{portraits}");
}

#[test]
fn swapped_references_swap_the_matches_and_a_rebuild_reuses_everything() {
    let (_temp, project) = copy_of_demo();
    let report = build(&project, "portraits");
    assert_eq!(
        (ran(&report, "match_roles"), ran(&report, "portraits")),
        (0, 0),
        "{report}"
    );
    let scenarios = common::scenario_ids(&project, EPISODE);
    let before: Vec<Value> = scenarios
        .iter()
        .map(|s| show(&project, &["match_roles", s, "role_matches"]))
        .collect();

    let references = project.join("raw/demo/references");
    let (noor, theo) = (references.join("noor.png"), references.join("theo.png"));
    let (noor_bytes, theo_bytes) = (std::fs::read(&noor).unwrap(), std::fs::read(&theo).unwrap());
    std::fs::write(&noor, &theo_bytes).unwrap();
    std::fs::write(&theo, &noor_bytes).unwrap();
    let report = build(&project, "match_roles");
    assert_eq!(ran(&report, "match_roles"), 4, "{report}");

    let mut swapped = 0;
    for (scenario, old) in scenarios.iter().zip(&before) {
        let new = show(&project, &["match_roles", scenario, "role_matches"]);
        for entry in new["roles"].as_array().unwrap() {
            let name = entry["name"].as_str().unwrap();
            let other = match name {
                "Noor" => "Theo",
                "Theo" => "Noor",
                _ => name,
            };
            let expected = old["roles"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["name"] == other)
                .map(|r| &r["bbox"]);
            match expected {
                // Its reference now shows someone in the frame: it takes that person's face.
                Some(expected) => {
                    assert_eq!(entry["status"], "matched", "{scenario} {name}: {entry}");
                    assert_eq!(&entry["bbox"], expected, "{scenario} {name}");
                    if other != name {
                        swapped += 1;
                    }
                }
                // Its reference shows someone not in the scene: no face, and a flag.
                None => {
                    assert_eq!(
                        entry["status"], "below_threshold",
                        "{scenario} {name}: {entry}"
                    );
                    assert_eq!(entry["face"], Value::Null);
                }
            }
        }
    }
    assert!(
        swapped >= 4,
        "Noor and Theo appear together in at least two scenes: {swapped}"
    );
}

#[test]
fn a_reference_of_someone_else_leaves_the_role_unmatched_and_flagged() {
    let (_temp, project) = copy_of_demo();
    // Bruno's reference becomes a photograph of another person (astronaut Eileen Collins).
    std::fs::copy(
        common::test_media("photos/astronaut.png"),
        project.join("raw/demo/references/bruno.png"),
    )
    .unwrap();
    let report = build(&project, "portraits");
    assert_eq!(ran(&report, "match_roles"), 4, "{report}");
    let status = status_text(&project);
    let mut bruno_seen = 0;
    for scenario in common::scenario_ids(&project, EPISODE) {
        let record = show(&project, &["match_roles", &scenario, "role_matches"]);
        let portraits = show(&project, &["portraits", &scenario, "portraits"]);
        for entry in record["roles"].as_array().unwrap() {
            let name = entry["name"].as_str().unwrap();
            let portrait = portraits["roles"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == name)
                .unwrap();
            if name != "Bruno" {
                assert_eq!(entry["status"], "matched", "{scenario} {name}: {entry}");
                assert_eq!(portrait["image"]["synthetic"], true);
                continue;
            }
            bruno_seen += 1;
            assert_eq!(entry["status"], "below_threshold", "{entry}");
            assert_eq!(
                (&entry["face"], &entry["bbox"]),
                (&Value::Null, &Value::Null)
            );
            let similarity = entry["similarity"].as_f64().unwrap();
            assert!(similarity < 0.5, "{entry}");
            let reason = entry["reason"].as_str().unwrap();
            assert!(reason.contains("min_similarity 0.50"), "{reason}");
            assert!(
                status.contains(&format!(
                    "match_roles {scenario}: Bruno has no face: no face in \
                     the group frame is similar enough"
                )),
                "{status}"
            );
            assert_eq!(portrait["image"], Value::Null);
            assert!(
                portrait["missing_reason"]
                    .as_str()
                    .unwrap()
                    .starts_with("no face was matched to this role (below_threshold)"),
                "{portrait}"
            );
            let outputs = text(&viss_in(&project, &["show", "portraits", &scenario]));
            assert!(!outputs.contains("portrait.png:Bruno"), "{outputs}");
            // Bruno's face is left to no one.
            let faces = record["faces"].as_array().unwrap().len();
            let taken = record["roles"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["face"].is_u64())
                .count();
            assert_eq!(taken + 1, faces, "{record}");
        }
    }
    assert!(bruno_seen >= 1, "Bruno is in the last scene");
}

#[test]
fn a_character_without_references_is_matched_through_a_bootstrapped_reference() {
    let (_temp, project) = copy_of_demo();
    let scenarios = common::scenario_ids(&project, EPISODE);
    let before: Vec<Value> = scenarios
        .iter()
        .map(|s| show(&project, &["match_roles", s, "role_matches"]))
        .collect();
    let manifest = project.join("manifests/shows/demo.toml");
    let text_before = std::fs::read_to_string(&manifest).unwrap();
    let without = text_before.replace("references = [\"demo/references/noor.png\"]\n", "");
    assert_ne!(without, text_before);
    std::fs::write(&manifest, without).unwrap();
    build(&project, "match_roles");
    let status = status_text(&project);
    let mut bootstrapped = 0;
    for (scenario, old) in scenarios.iter().zip(&before) {
        let new = show(&project, &["match_roles", scenario, "role_matches"]);
        let Some(noor) = new["roles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "Noor")
        else {
            continue;
        };
        assert_eq!(noor["references"], json!([]));
        match noor["status"].as_str().unwrap() {
            // Never a wrong face: a bootstrapped match is Noor's own.
            "matched" => {
                assert_eq!(
                    noor["bbox"],
                    role(old, "Noor")["bbox"],
                    "{scenario}: {noor}"
                );
                let summary = &noor["bootstrapped"];
                assert!(
                    summary["lines_covered"].as_u64().unwrap()
                        > summary["runner_up_lines"].as_u64().unwrap(),
                    "{noor}"
                );
                assert!(
                    status.contains(&format!(
                        "match_roles {scenario}: Noor: no usable reference \
                         image; matched against a reference bootstrapped"
                    )),
                    "{status}"
                );
                bootstrapped += 1;
            }
            "no_reference" => {
                let reason = noor["reason"].as_str().unwrap();
                assert!(
                    reason.contains("add references = [\"demo/references/noor.png\"]"),
                    "{reason}"
                );
            }
            other => panic!("{scenario}: Noor is {other}: {noor}"),
        }
        // The others keep their faces.
        for entry in new["roles"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["name"] != "Noor")
        {
            assert_eq!(
                entry["bbox"],
                role(old, entry["name"].as_str().unwrap())["bbox"]
            );
        }
    }
    eprintln!("Noor bootstrapped and matched in {bootstrapped} scenarios");
    assert!(bootstrapped >= 2, "Noor speaks in three scenes: {status}");
}

#[test]
fn an_unreadable_reference_fails_naming_the_manifest_and_the_file() {
    let (_temp, project) = copy_of_demo();
    std::fs::write(
        project.join("raw/demo/references/mila.png"),
        b"not an image at all",
    )
    .unwrap();
    let output = viss_in(&project, &["build", "--until", "match_roles"]);
    assert!(!output.status.success(), "{}", text(&output));
    let output = text(&output);
    assert!(
        output.contains(
            "manifests/shows/demo.toml: a reference image of Mila: \
             raw/demo/references/mila.png is not an image viss can read"
        ),
        "{output}"
    );
}

#[test]
fn mock_portraits_come_from_the_image_edit_endpoint_when_one_is_configured() {
    use base64::Engine;
    const KEY_VAR: &str = "VISS_TEST_PORTRAIT_KEY";
    let (_temp, project) = copy_of_demo();
    let drawn = {
        let mut png = Vec::new();
        image::RgbImage::from_pixel(64, 64, image::Rgb([10, 120, 250]))
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        png
    };
    let answer = json!({
        "data": [{"b64_json": base64::engine::general_purpose::STANDARD.encode(&drawn)}],
        "usage": {"input_tokens": 300, "output_tokens": 800}
    })
    .to_string();
    let mock = BackgroundMockServer::start(move |_, _| MockReply::status(200, &answer));
    let config = project.join("viss.toml");
    let settings = std::fs::read_to_string(&config).unwrap().replace(
        "judges = [\"local\"]\n",
        "judges = [\"local\"]\nimage_edit = \"mock:gpt-image-1\"\n",
    );
    std::fs::write(
        &config,
        format!(
            "{settings}\n[llm.endpoints.mock]\nbase_url = {:?}\napi_key_env = \
             \"{KEY_VAR}\"\nmax_retries = 1\nretry_backoff_seconds = 0.01\n",
            mock.server().base_url
        ),
    )
    .unwrap();
    let build = viss_in_with_env(
        &project,
        &["build", "--until", "portraits", "--json"],
        &[(KEY_VAR, "sk-portrait-test")],
    );
    assert!(build.status.success(), "{}", text(&build));
    let report: Value = serde_json::from_slice(&build.stdout).unwrap();
    assert_eq!(
        (
            ran(&report, "match_roles"),
            ran(&report, "group_image"),
            ran(&report, "portraits")
        ),
        (0, 4, 4),
        "only the image stages run again: {report}"
    );
    let scenarios = common::scenario_ids(&project, EPISODE);
    let mut roles = 0;
    let requests = mock.server().state.requests.lock().unwrap();
    for scenario in &scenarios {
        let matches = show(&project, &["match_roles", scenario, "role_matches"]);
        let record = show(&project, &["portraits", scenario, "portraits"]);
        let frame = load_rgb(&binary_output(
            &project,
            "detect",
            scenario,
            "group_frame.png",
        ))
        .unwrap();
        for entry in record["roles"].as_array().unwrap() {
            let name = entry["name"].as_str().unwrap();
            assert_eq!(entry["image"]["backend"], "mock:gpt-image-1");
            assert_eq!(entry["image"]["synthetic"], true);
            assert_eq!(
                (
                    entry["image"]["width"].as_u64(),
                    entry["image"]["height"].as_u64()
                ),
                (Some(64), Some(64))
            );
            let png = binary_output(
                &project,
                "portraits",
                scenario,
                &format!("portrait.png:{name}"),
            );
            assert_eq!(std::fs::read(png).unwrap(), drawn);
            // The upload is the 448x448 square around the role's face, with the portrait prompt.
            let crop = viss::vision::encode_png(
                &portrait_crop(&frame, &bbox(&role(&matches, name)["bbox"]), PORTRAIT_SIZE)
                    .unwrap(),
            );
            let upload = requests
                .iter()
                .find(|r| r.raw.windows(crop.len()).any(|w| w == crop.as_slice()))
                .unwrap_or_else(|| panic!("{scenario} {name}: its crop was not uploaded"));
            assert_eq!(upload.path, "/v1/images/edits");
            let body = String::from_utf8_lossy(&upload.raw);
            assert!(
                body.contains("front-facing head-and-shoulders portrait"),
                "{scenario} {name}"
            );
            assert!(body.contains("1024x1024"), "{scenario} {name}");
            roles += 1;
        }
    }
    assert_eq!(
        requests.len(),
        scenarios.len() + roles,
        "one edit per G and per portrait"
    );
    drop(requests);
    let status = status_text(&project);
    assert!(
        status.contains("mock:gpt-image-1"),
        "usage is reported: {status}"
    );
}

#[test]
fn scenarios_without_a_group_frame_or_without_faces_get_no_matches_and_say_why() {
    // No usable face: every role is flagged, and the portraits record says why each is missing.
    let (_temp, project) = copy_of_demo();
    let path = project.join("stages/detect.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        config.replacen("score_threshold = 0.5", "score_threshold = 1.0", 1),
    )
    .unwrap();
    build(&project, "portraits");
    let status = status_text(&project);
    let scenario = &common::scenario_ids(&project, EPISODE)[0];
    let record = show(&project, &["match_roles", scenario, "role_matches"]);
    assert_eq!(record["faces"], json!([]));
    let portraits = show(&project, &["portraits", scenario, "portraits"]);
    for (entry, portrait) in record["roles"]
        .as_array()
        .unwrap()
        .iter()
        .zip(portraits["roles"].as_array().unwrap())
    {
        let name = entry["name"].as_str().unwrap();
        assert_eq!(entry["status"], "no_faces", "{entry}");
        assert!(
            status.contains(&format!(
                "match_roles {scenario}: {name} has no face: the group frame"
            )),
            "{status}"
        );
        assert_eq!(portrait["image"], Value::Null);
        assert!(
            portrait["missing_reason"]
                .as_str()
                .unwrap()
                .contains("(no_faces): the group frame"),
            "{portrait}"
        );
    }

    // No video: the video stages skip the scenarios, these two as well.
    let (_temp, project) = copy_of_demo();
    let manifest = project.join("manifests/shows/demo.toml");
    let text_only: String = std::fs::read_to_string(&manifest)
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with("video = "))
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(&manifest, text_only).unwrap();
    build(&project, "portraits");
    for scenario in common::scenario_ids(&project, EPISODE) {
        for stage in ["match_roles", "portraits"] {
            let outputs = viss_in(&project, &["show", stage, &scenario]);
            assert!(outputs.status.success(), "{}", text(&outputs));
            assert_eq!(
                String::from_utf8_lossy(&outputs.stdout).trim(),
                "",
                "{stage} {scenario}"
            );
        }
    }
}

#[test]
fn mock_export_lists_the_portraits_and_copies_them() {
    let (_temp, project) = copy_of_demo();
    let mock = BackgroundMockServer::start(|_, body| {
        MockReply::answer(&common::mock_llm::demo_answer(body).to_string())
    });
    let config = project.join("viss.toml");
    let settings = std::fs::read_to_string(&config)
        .unwrap()
        .replace("annotator = \"local\"", "annotator = \"mock:mock-model\"");
    std::fs::write(
        &config,
        format!(
            "{settings}\n[llm.endpoints.mock]\nbase_url = \"{}\"\ntimeout_seconds = 5\nmax_retries \
             = 2\nretry_backoff_seconds = 0.01\n",
            mock.server().base_url
        ),
    )
    .unwrap();
    let report = build(&project, "export");
    assert_eq!(ran(&report, "export"), 1, "{report}");
    assert_eq!(ran(&report, "portraits"), 0, "already built: {report}");
    let exported = viss_in(&project, &["export", "--json"]);
    assert!(exported.status.success(), "{}", text(&exported));
    let out = project.join("export");
    let lines: Vec<Value> = std::fs::read_to_string(out.join("data.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    let mut copied = 0;
    for line in &lines {
        let id = line["id"].as_str().unwrap();
        let record = show(&project, &["portraits", id, "portraits"]);
        for entry in line["roles"].as_array().unwrap() {
            let name = entry["name"].as_str().unwrap();
            let portrait = &entry["portrait"];
            assert_eq!(
                portrait["path"],
                format!("images/{id}/{name}.png"),
                "{entry}"
            );
            assert_eq!(portrait["synthetic"], true);
            assert_eq!(portrait["backend"], "local:cartoon/v1");
            assert_eq!(
                (portrait["width"].as_u64(), portrait["height"].as_u64()),
                (Some(448), Some(448))
            );
            assert_eq!(entry["portrait_missing_reason"], Value::Null);
            let made = &role(&record, name)["image"]["png"];
            assert_eq!(&portrait["blake3"], made);
            let bytes = std::fs::read(out.join(portrait["path"].as_str().unwrap())).unwrap();
            assert_eq!(
                blake3::hash(&bytes).to_hex().as_str(),
                made.as_str().unwrap()
            );
            copied += 1;
        }
    }
    assert!(copied >= 10, "{copied}");
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(
        card.contains(&format!("| role portraits | {copied} |")),
        "{card}"
    );
}

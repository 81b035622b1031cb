//! The demo show's media: the script in both formats, the subtitles derived from it, the video
//! rendered from the Solvay 1927 faces, the reference images and the manifest. Needs the
//! `ffmpeg` CLI (and `espeak-ng` for the speech checks), as `viss demo` does.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};
use viss::demo::{self, EpisodePlan};
use viss::text::scenario::{ScenarioParams, build_scenarios};
use viss::text::script::Script;

/// One rendered demo show for the tests that only read it.
fn rendered() -> &'static (tempfile::TempDir, demo::WrittenShow) {
    static SHOW: OnceLock<(tempfile::TempDir, demo::WrittenShow)> = OnceLock::new();
    SHOW.get_or_init(|| {
        let temp = tempfile::tempdir().unwrap();
        let written = write_into(temp.path());
        (temp, written)
    })
}

fn write_into(root: &Path) -> demo::WrittenShow {
    demo::write_show_into(&root.join("manifests/shows"), &root.join("raw")).unwrap()
}

fn raw(root: &Path, relative: &str) -> std::path::PathBuf {
    root.join("raw").join(relative)
}

/// (scene index, speakers, words) of every dialogue line.
fn dialogue_of(script: &Script) -> Vec<(usize, Vec<String>, String)> {
    script
        .scenes
        .iter()
        .flat_map(|scene| {
            scene
                .lines
                .iter()
                .filter_map(|l| l.dialogue())
                .map(move |d| (scene.index, d.speakers.clone(), d.text.clone()))
        })
        .collect()
}

#[test]
fn both_script_formats_parse_to_the_same_scenes_and_scenarios() {
    let transcript = demo::plan::parse_transcript();
    let fountain = demo::plan::parse_fountain();
    assert_eq!(transcript.scenes.len(), 4);
    assert_eq!(fountain.scenes.len(), transcript.scenes.len());
    assert_eq!(dialogue_of(&fountain), dialogue_of(&transcript));
    assert_eq!(fountain.speakers(), transcript.speakers());
    assert_eq!(transcript.speakers(), ["Noor", "Theo", "Mila", "Bruno"]);

    let params = ScenarioParams::default();
    let units = build_scenarios(&transcript, &params).unwrap();
    let fountain_units = build_scenarios(&fountain, &params).unwrap();
    let shape = |units: &[viss::text::scenario::ScenarioUnit]| -> Vec<(usize, Vec<String>, usize)> {
        units
            .iter()
            .map(|u| (u.scene_index, u.participants.clone(), u.dialogue_line_count))
            .collect()
    };
    assert_eq!(shape(&units), shape(&fountain_units));
    // Every scene is one scenario of at least 12 lines and 2-4 speakers; one has all four.
    assert_eq!(units.len(), 4, "{:?}", shape(&units));
    for unit in &units {
        assert!(unit.dialogue_line_count >= 12, "{:?}", shape(&units));
        assert!((2..=4).contains(&unit.participants.len()));
    }
    assert!(units.iter().any(|u| u.participants.len() == 4));
    assert!(units.iter().filter(|u| u.participants.len() >= 3).count() >= 2);
}

#[test]
fn subtitles_cover_the_transcript_dialogue_with_broadcast_edits() {
    let plan = EpisodePlan::build();
    let lines = plan.dialogue.lines.len();
    let carried = plan
        .truth
        .line_cues
        .iter()
        .filter(|c| !c.is_empty())
        .count();
    // A few lines are cut, as in a broadcast; most are there.
    assert!(carried < lines, "some lines are missing");
    assert!(
        carried * 100 >= lines * 88,
        "{carried} of {lines} lines carried"
    );
    // The kinds of broadcast edit the seed was chosen for.
    assert!(
        plan.truth.line_cues.iter().any(|c| c.len() >= 2),
        "a split line"
    );
    assert!(
        plan.cues.iter().any(|c| c.text.starts_with("- ")),
        "a two-speaker cue"
    );
    assert!(
        !plan.truth.extra_cues.is_empty(),
        "a cue the transcript lacks"
    );
    // Cues carry words of their lines, in order, and are timed in sequence.
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.len() > 3)
            .map(str::to_lowercase)
            .collect()
    };
    for (line, cues) in plan.truth.line_cues.iter().enumerate() {
        let line_words = words(&plan.dialogue.lines[line].text);
        for &cue in cues {
            let cue_words = words(&plan.cues[cue].text);
            if !cue_words.is_empty() && !line_words.is_empty() {
                assert!(
                    cue_words.iter().any(|w| line_words.contains(w)),
                    "cue {cue} {:?} vs line {line} {:?}",
                    plan.cues[cue].text,
                    plan.dialogue.lines[line].text
                );
            }
        }
    }
    for pair in plan.cues.windows(2) {
        assert!(pair[0].end_ms < pair[1].start_ms);
    }
    // The SRT written parses back to the same cues.
    let parsed = viss::text::subtitles::parse_subtitles(&plan.srt(), "s.srt", None).unwrap();
    assert_eq!(parsed.cues.len(), plan.cues.len());
    let duration_s = plan.duration_ms as f64 / 1000.0;
    assert!((90.0..=180.0).contains(&duration_s), "{duration_s} s");
}

#[test]
fn shots_cut_on_cue_starts_and_scene_changes() {
    let plan = EpisodePlan::build();
    let cue_starts: Vec<u64> = plan.cues.iter().map(|c| c.start_ms).collect();
    let cue_ends: Vec<u64> = plan.cues.iter().map(|c| c.end_ms).collect();
    for shot in &plan.shots[1..] {
        assert!(
            cue_starts.contains(&shot.start_ms) || cue_ends.contains(&shot.start_ms),
            "{shot:?}"
        );
    }
    assert_eq!(plan.shots.last().unwrap().end_ms, plan.duration_ms);
    let openings = plan
        .shots
        .iter()
        .filter(|s| s.cue.is_none() && matches!(s.framing, demo::plan::Framing::Group { .. }))
        .count();
    assert_eq!(
        openings,
        plan.script.scenes.len() + 1,
        "one per scene, and the end"
    );
}

fn sha256_of_tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let digest = Sha256::digest(std::fs::read(&path).unwrap());
                let name = path.strip_prefix(root).unwrap().display().to_string();
                out.insert(
                    name,
                    digest
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>(),
                );
            }
        }
    }
    out
}

#[test]
fn two_generations_are_byte_identical_and_a_third_renders_nothing() {
    let (first_dir, first) = rendered();
    assert!(first.rendered);
    let second_dir = tempfile::tempdir().unwrap();
    let second = write_into(second_dir.path());
    assert!(second.rendered);
    let a = sha256_of_tree(first_dir.path());
    let b = sha256_of_tree(second_dir.path());
    assert!(a.contains_key("raw/demo/s01e01/video.mp4"), "{a:?}");
    assert!(a.contains_key("raw/demo/references/mila.png"), "{a:?}");
    assert_eq!(a, b);
    eprintln!("render: {:.1} s, {:.1} s", first.seconds, second.seconds);

    let again = write_into(second_dir.path());
    assert!(!again.rendered, "an up-to-date render is kept");
    assert_eq!(sha256_of_tree(second_dir.path()), b);
    std::fs::remove_file(raw(second_dir.path(), demo::VIDEO_PATH)).unwrap();
    assert!(
        write_into(second_dir.path()).rendered,
        "a deleted video is rendered again"
    );
    assert_eq!(sha256_of_tree(second_dir.path()), b);
}

/// Mean absolute difference between two RGB frames, 0-255.
fn frame_difference(a: &[u8], b: &[u8]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| x.abs_diff(*y) as f64)
        .sum::<f64>()
        / a.len() as f64
}

fn frame_at(video: &Path, time_s: f64) -> viss::media::video::SampledFrame {
    let mut frame = None;
    viss::media::video::sample_frames(video, time_s, time_s + 0.04, 25.0, |f| {
        frame.get_or_insert(f);
        Ok::<(), std::convert::Infallible>(())
    })
    .unwrap();
    frame.unwrap()
}

#[test]
fn video_has_the_planned_duration_size_and_cuts() {
    let (dir, _) = rendered();
    let plan = EpisodePlan::build();
    let video = raw(dir.path(), demo::VIDEO_PATH);
    let info = viss::media::video::probe(&video).unwrap();
    assert_eq!((info.width, info.height), (640, 360));
    assert!((info.fps - 25.0).abs() < 0.01, "{info:?}");
    let planned = plan.duration_ms as f64 / 1000.0;
    assert!(
        (info.duration_s - planned).abs() < 0.15,
        "{info:?} vs {planned}"
    );

    // Mid-shot frames: the opening group shot, the first close-up, a close-up of another
    // speaker, and the next scene's group shot all differ; two frames of one shot do not.
    let mid = |k: usize| (plan.shots[k].start_ms + plan.shots[k].end_ms) as f64 / 2000.0;
    let group = plan.shots.iter().position(|s| s.cue.is_none()).unwrap();
    let close = plan
        .shots
        .iter()
        .position(|s| matches!(s.framing, demo::plan::Framing::CloseUp { .. }))
        .unwrap();
    let other_close = plan
        .shots
        .iter()
        .position(|s| {
            matches!(&s.framing, demo::plan::Framing::CloseUp { .. })
                && s.framing != plan.shots[close].framing
                && s.scene == plan.shots[close].scene
        })
        .unwrap();
    let next_scene = plan.shots.iter().position(|s| s.scene == 1).unwrap();
    let frames: Vec<_> = [group, close, other_close, next_scene]
        .iter()
        .map(|&k| frame_at(&video, mid(k)))
        .collect();
    for i in 0..frames.len() {
        for j in i + 1..frames.len() {
            let d = frame_difference(&frames[i].rgb, &frames[j].rgb);
            assert!(d > 10.0, "shots {i} and {j} differ by only {d}");
        }
    }
    let shot = &plan.shots[close];
    let early = frame_at(&video, shot.start_ms as f64 / 1000.0 + 0.1);
    let late = frame_at(&video, shot.end_ms as f64 / 1000.0 - 0.1);
    assert!(frame_difference(&early.rgb, &late.rgb) < 3.0);
}

#[test]
fn video_has_speech_from_espeak_ng() {
    // scripts/setup.sh installs espeak-ng; without it the demo renders silently, which this
    // test reports rather than accepts.
    let (dir, _) = rendered();
    let probe = std::process::Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "stream=codec_type,codec_name",
            "-of",
            "csv=p=0",
        ])
        .arg(raw(dir.path(), demo::VIDEO_PATH))
        .output()
        .unwrap();
    let streams = String::from_utf8_lossy(&probe.stdout).to_string();
    assert!(streams.contains("video"), "{streams}");
    assert!(
        streams.contains("audio"),
        "no audio stream (is espeak-ng installed? run scripts/setup.sh): {streams}"
    );
}

#[test]
fn references_are_images_of_each_character() {
    let (dir, _) = rendered();
    for (name, _) in demo::video::CAST {
        let path = raw(dir.path(), &demo::reference_path(name));
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
    }
}

#[test]
fn the_manifest_validates_through_the_loader() {
    let (dir, _) = rendered();
    let root = dir.path();
    let manifest = root.join("manifests/shows/demo.toml");
    let loaded =
        viss::manifest::LoadedManifest::read(&manifest, "manifests/shows/demo.toml".into())
            .unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let store = viss::dag::store::Store::open(store_dir.path()).unwrap();
    let episodes = loaded.episodes(&store, &root.join("raw"));
    assert_eq!(episodes.len(), 1);
    let (item, source) = &episodes[0];
    assert_eq!(item, "demo/s01e01");
    let source = source.as_ref().unwrap();
    let roles: Vec<&str> = source.files.keys().map(String::as_str).collect();
    assert_eq!(roles, ["script", "subtitles", "video"]);
    let names: Vec<&str> = source.characters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["Noor", "Theo", "Mila", "Bruno"]);
    for character in &source.characters {
        assert_eq!(character.references.len(), 1, "{}", character.name);
    }
}

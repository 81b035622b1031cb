//! The demo episode as data: the parsed script, broadcast subtitles derived from it (with the
//! truth of which cue carries which line), and the shot list the video is cut to.
//!
//! Everything here is a pure function of the embedded script and a fixed seed, so every machine
//! gets the same subtitles and the same cuts.

use serde::Serialize;

use crate::broadcast::{BroadcastParams, GroundTruth, derive_broadcast_subtitles, to_srt};
use viss_text::align::{AlignCue, ScriptDialogue, script_dialogue};
use viss_text::script::{ParseOptions, Script, ScriptFormat, parse_script};

/// The episode in the fan-transcript format (the manifest's script).
pub const SCRIPT: &str = include_str!("s01e01.txt");
/// The same episode as a Fountain screenplay.
pub const FOUNTAIN: &str = include_str!("s01e01.fountain");
/// What each scene is meant to be (dialogue type, who is present, each character's gender, age
/// and occupation, who competes), written by hand from the script, each fact with its evidence:
/// the truth `viss demo`'s scorecard compares the export with.
pub const ANNOTATION_TRUTH: &str = include_str!("s01e01.truth.toml");

/// Seed of the broadcast derivation. Chosen (among 1-40) because its subtitles show every kind
/// of broadcast edit on this short script: dropped lines, a split line, two-speaker cues, a cue
/// the transcript lacks and music at a scene change.
pub const SUBTITLE_SEED: u64 = 33;

/// Frames per second of the rendered video.
pub const FPS: u64 = 25;

/// Group shot held after the last cue, milliseconds.
const TAIL_MS: u64 = 2_000;

/// The broadcast parameters: the library defaults (lines dropped, split, merged, reworded), timed
/// a little faster (16-18 characters per second, about espeak-ng's default speaking rate) and
/// with shorter gaps, so the episode stays under three minutes.
pub fn broadcast_params() -> BroadcastParams {
    BroadcastParams {
        min_chars_per_second: 16.0,
        max_chars_per_second: 18.0,
        max_gap_ms: 300,
        min_scene_gap_ms: 2_500,
        max_scene_gap_ms: 4_000,
        ..BroadcastParams::default()
    }
}

pub fn parse_transcript() -> Script {
    parse(SCRIPT, "s01e01.txt", ScriptFormat::FriendsTranscript)
}

pub fn parse_fountain() -> Script {
    parse(FOUNTAIN, "s01e01.fountain", ScriptFormat::Fountain)
}

fn parse(text: &str, file: &str, format: ScriptFormat) -> Script {
    let options = ParseOptions {
        format: Some(format),
        ..ParseOptions::default()
    };
    parse_script(text, file, &options).expect("the embedded demo script parses")
}

/// What the camera shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Framing {
    /// Everyone in the scene side by side (scene openings, the end, and cues no character speaks).
    Group { characters: Vec<String> },
    /// One speaker's face.
    CloseUp { character: String },
    /// A two-speaker cue: both faces.
    TwoShot { characters: Vec<String> },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shot {
    pub start_ms: u64,
    pub end_ms: u64,
    /// 0-based scene index of the script.
    pub scene: usize,
    pub framing: Framing,
    /// The cue this shot is cut to (0-based position in the subtitles); `None` for group shots
    /// that open a scene or end the episode.
    pub cue: Option<usize>,
}

/// Who speaks a cue: the speakers of the lines it carries, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CueTruth {
    pub index: usize,
    pub start_ms: u64,
    pub end_ms: u64,
    pub scene: usize,
    /// Transcript dialogue lines carried (positions in [`ScriptDialogue::lines`]).
    pub lines: Vec<usize>,
    pub speakers: Vec<String>,
    /// Text the transcript does not have (music, a sound, an extra "Hey.").
    pub extra: bool,
}

pub struct EpisodePlan {
    pub script: Script,
    pub dialogue: ScriptDialogue,
    pub cues: Vec<AlignCue>,
    pub truth: GroundTruth,
    pub cue_truth: Vec<CueTruth>,
    /// Per scene, its characters in order of first line.
    pub scene_characters: Vec<Vec<String>>,
    pub shots: Vec<Shot>,
    pub duration_ms: u64,
}

impl EpisodePlan {
    pub fn build() -> EpisodePlan {
        let script = parse_transcript();
        let dialogue = script_dialogue(&script);
        let (cues, truth) = derive_broadcast_subtitles(
            &dialogue.lines,
            &dialogue.scene_of_line,
            SUBTITLE_SEED,
            &broadcast_params(),
        )
        .expect("demo broadcast parameters are valid");
        let scene_characters: Vec<Vec<String>> = script
            .scenes
            .iter()
            .map(|scene| {
                let mut names: Vec<String> = Vec::new();
                for d in scene.lines.iter().filter_map(|l| l.dialogue()) {
                    for s in &d.speakers {
                        if !names.contains(s) {
                            names.push(s.clone());
                        }
                    }
                }
                names
            })
            .collect();
        let cue_truth = cue_truth(&script, &dialogue, &cues, &truth);
        let duration_ms = cues.last().map_or(0, |c| c.end_ms) + TAIL_MS;
        let shots = shots(&cue_truth, &scene_characters, duration_ms);
        EpisodePlan {
            script,
            dialogue,
            cues,
            truth,
            cue_truth,
            scene_characters,
            shots,
            duration_ms,
        }
    }

    pub fn srt(&self) -> String {
        to_srt(&self.cues)
    }

    /// Frame count of the video: the duration on the [`FPS`] grid.
    pub fn frame_count(&self) -> u64 {
        (self.duration_ms * FPS).div_ceil(1000)
    }

    /// The shot shown at frame `frame` (the last shot starting at or before the frame's time).
    pub fn shot_at_frame(&self, frame: u64) -> usize {
        let time_ms = frame * 1000 / FPS;
        self.shots
            .iter()
            .rposition(|s| s.start_ms <= time_ms)
            .unwrap_or(0)
    }

    /// The ground truth as JSON: cues with their lines and speakers, and the shot list.
    pub fn truth_json(&self) -> String {
        #[derive(Serialize)]
        struct Truth<'a> {
            note: &'static str,
            fps: u64,
            duration_ms: u64,
            subtitle_seed: u64,
            scenes: Vec<SceneTruth<'a>>,
            cues: &'a [CueTruth],
            shots: &'a [Shot],
        }
        #[derive(Serialize)]
        struct SceneTruth<'a> {
            index: usize,
            heading: Option<&'a str>,
            characters: &'a [String],
        }
        let truth = Truth {
            note: "Ground truth of the viss demo episode: which subtitle cue carries which \
                   transcript dialogue line (positions among the transcript's dialogue lines), who \
                   speaks it, and the shots of the video. Shots start on the first frame at or \
                   after start_ms.",
            fps: FPS,
            duration_ms: self.duration_ms,
            subtitle_seed: SUBTITLE_SEED,
            scenes: self
                .script
                .scenes
                .iter()
                .zip(&self.scene_characters)
                .map(|(scene, characters)| SceneTruth {
                    index: scene.index,
                    heading: scene.heading.as_deref(),
                    characters,
                })
                .collect(),
            cues: &self.cue_truth,
            shots: &self.shots,
        };
        let mut json = serde_json::to_string_pretty(&truth).expect("plain data serialises");
        json.push('\n');
        json
    }
}

/// Speakers of each dialogue line in [`ScriptDialogue::lines`] order, all of them for a shared
/// line ("Noor and Mila").
pub fn speakers_per_line(script: &Script) -> Vec<Vec<String>> {
    script
        .scenes
        .iter()
        .flat_map(|s| &s.lines)
        .filter_map(|l| l.dialogue())
        .filter(|d| !d.text.trim().is_empty())
        .map(|d| d.speakers.clone())
        .collect()
}

fn cue_truth(
    script: &Script,
    dialogue: &ScriptDialogue,
    cues: &[AlignCue],
    truth: &GroundTruth,
) -> Vec<CueTruth> {
    let mut lines_of_cue: Vec<Vec<usize>> = vec![Vec::new(); cues.len()];
    for (line, positions) in truth.line_cues.iter().enumerate() {
        for &cue in positions {
            lines_of_cue[cue].push(line);
        }
    }
    let line_speakers = speakers_per_line(script);
    debug_assert_eq!(line_speakers.len(), dialogue.lines.len());
    let mut out: Vec<CueTruth> = cues
        .iter()
        .zip(lines_of_cue)
        .map(|(cue, lines)| {
            let mut speakers: Vec<String> = Vec::new();
            for &line in &lines {
                for s in &line_speakers[line] {
                    if !speakers.contains(s) {
                        speakers.push(s.clone());
                    }
                }
            }
            CueTruth {
                index: cue.index,
                start_ms: cue.start_ms,
                end_ms: cue.end_ms,
                scene: lines
                    .first()
                    .map_or(usize::MAX, |&l| dialogue.scene_of_line[l]),
                extra: lines.is_empty(),
                lines,
                speakers,
            }
        })
        .collect();
    // A cue the transcript lacks belongs to the scene of the cue before it, unless a scene
    // change's gap precedes it (music opening a scene): then to the scene of the next cue.
    let scene_gap_ms = broadcast_params().min_scene_gap_ms;
    for k in 0..out.len() {
        if out[k].scene == usize::MAX && k > 0 && out[k].start_ms - out[k - 1].end_ms < scene_gap_ms
        {
            out[k].scene = out[k - 1].scene;
        }
    }
    for k in (0..out.len()).rev() {
        if out[k].scene == usize::MAX {
            out[k].scene = out.get(k + 1).map_or(0, |next| next.scene);
        }
    }
    out
}

fn shots(cues: &[CueTruth], scene_characters: &[Vec<String>], duration_ms: u64) -> Vec<Shot> {
    let group = |scene: usize| Framing::Group {
        characters: scene_characters[scene].clone(),
    };
    let mut shots: Vec<Shot> = Vec::new();
    let mut current_scene: Option<usize> = None;
    for (k, cue) in cues.iter().enumerate() {
        if current_scene != Some(cue.scene) {
            // The establishing shot starts where the previous scene's last cue ended.
            let start_ms = if k == 0 { 0 } else { cues[k - 1].end_ms };
            shots.push(Shot {
                start_ms,
                end_ms: 0,
                scene: cue.scene,
                framing: group(cue.scene),
                cue: None,
            });
            current_scene = Some(cue.scene);
        }
        let framing = match cue.speakers.as_slice() {
            [] => group(cue.scene),
            [one] => Framing::CloseUp {
                character: one.clone(),
            },
            many => Framing::TwoShot {
                characters: many.iter().take(2).cloned().collect(),
            },
        };
        shots.push(Shot {
            start_ms: cue.start_ms,
            end_ms: 0,
            scene: cue.scene,
            framing,
            cue: Some(k),
        });
    }
    if let Some(last) = cues.last() {
        shots.push(Shot {
            start_ms: last.end_ms,
            end_ms: 0,
            scene: last.scene,
            framing: group(last.scene),
            cue: None,
        });
    }
    for k in 0..shots.len() {
        shots[k].end_ms = shots.get(k + 1).map_or(duration_ms, |next| next.start_ms);
    }
    shots
}

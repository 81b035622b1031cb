//! The demo episode's video, rendered with the `ffmpeg` CLI (and `espeak-ng` for speech when it
//! is installed).
//!
//! The four characters are real, freely licensed faces: attendees of the 1927 Solvay conference,
//! cropped from the group photograph (public domain in the US). Each scene opens on a group shot
//! (its characters side by side on a background colour of its own); then every subtitle cue cuts
//! to a close-up of its speaker (both speakers for a two-speaker cue, the group for a cue no
//! character speaks), and the episode ends on the group. So shot changes fall on cue starts, and
//! scene changes, who is present and who speaks are all really in the picture.
//!
//! Rendering is deterministic: one ffmpeg call crops and scales every still (one decode of the
//! photo), Rust lays the stills out frame by frame on the [`FPS`] grid and pipes them as raw
//! yuv420p to a second ffmpeg call that encodes H.264 (libx264; MPEG-4 part 2 where the build lacks
//! it) single-threaded with bit-exact flags and no metadata. Speech, when espeak-ng is present, is
//! synthesised per cue (deterministic for a given espeak-ng), mixed in Rust into one WAV, and
//! encoded as AAC.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::plan::{EpisodePlan, FPS, Framing};

pub const WIDTH: u32 = 640;
pub const HEIGHT: u32 = 360;

/// The Solvay 1927 photograph: the copy the `scrfd` 0.3.0 source distribution ships, fetched
/// (sha256-checked) into the model cache with the face detector, so the demo needs nothing but
/// the package registry.
pub fn solvay_photo_path() -> Result<PathBuf, viss_models::ModelError> {
    Ok(viss_models::ModelCache::from_env()?
        .ensure_face_detector()?
        .group_photo)
}

/// A face in the Solvay photograph (3000 x 2171 pixels): the close-up box, 165 x 220 (3:4), from
/// the top of the hair to the collar, chosen so that no neighbour's face enters it.
#[derive(Debug, Clone, Copy)]
pub struct Face {
    pub attendee: &'static str,
    pub x: u32,
    pub y: u32,
}

pub const FACE_W: u32 = 165;
pub const FACE_H: u32 = 220;

/// The reference image of a face: a tighter box (forehead to chin, no collar) inside the
/// close-up box, at another scale, so references are not frames of the video.
pub const REFERENCE_INSET: (u32, u32, u32, u32) = (22, 30, 120, 160);
pub const REFERENCE_SIZE: (u32, u32) = (192, 256);

/// The characters and their faces. Front row of the photograph, left to right: Max Planck
/// (2nd), Marie Curie (3rd), Hendrik Lorentz (4th), Albert Einstein (5th). Their neighbours
/// (e.g. Paul Langevin, whose box would take in Niels Bohr's chin) were left out for clean crops.
pub const CAST: [(&str, Face); 4] = [
    (
        "Noor",
        Face {
            attendee: "Max Planck",
            x: 512,
            y: 1085,
        },
    ),
    (
        "Theo",
        Face {
            attendee: "Albert Einstein",
            x: 1537,
            y: 1085,
        },
    ),
    (
        "Mila",
        Face {
            attendee: "Marie Curie",
            x: 810,
            y: 1080,
        },
    ),
    (
        "Bruno",
        Face {
            attendee: "Hendrik Lorentz",
            x: 1155,
            y: 1090,
        },
    ),
];

/// Background colour per scene (RGB), cycling.
const SCENE_COLOURS: [&str; 4] = ["2E5E8C", "8C3B2E", "3B7A3B", "6B4C8C"];

/// espeak-ng voice per character.
const VOICES: [(&str, &str); 4] = [
    ("Noor", "en-gb+m3"),
    ("Theo", "en-us+m1"),
    ("Mila", "en+f3"),
    ("Bruno", "en+m7"),
];

/// Bumped whenever the rendering below changes in a way the render key does not see.
const RENDER_VERSION: u32 = 1;

const SAMPLE_RATE: u32 = 22_050;

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error(
        "`{tool}` is not installed or not on PATH; `viss demo` renders its video with it. Run \
         scripts/setup.sh (Debian package `{package}`)"
    )]
    MissingTool {
        tool: &'static str,
        package: &'static str,
    },
    #[error(
        "the Solvay 1927 photograph the demo's faces come from is missing at {path}; fetch it (see \
         MODELS.md: the scrfd 0.3.0 source distribution)"
    )]
    MissingPhoto { path: PathBuf },
    #[error("`{command}` failed: {detail}")]
    Tool { command: String, detail: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> RenderError + '_ {
    move |source| RenderError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub fn face_of(character: &str) -> Face {
    CAST.iter()
        .find(|(name, _)| *name == character)
        .map(|(_, face)| *face)
        .unwrap_or_else(|| panic!("demo character {character} has no face"))
}

fn voice_of(character: &str) -> &'static str {
    VOICES
        .iter()
        .find(|(name, _)| *name == character)
        .map_or("en", |(_, voice)| voice)
}

/// The tools the render uses, with their versions (part of the render key).
#[derive(Debug, Clone)]
pub struct Tools {
    pub ffmpeg_version: String,
    /// `libx264` when the ffmpeg build has it, else `mpeg4`.
    pub video_encoder: &'static str,
    /// `None`: espeak-ng is not installed; the video is silent.
    pub espeak_version: Option<String>,
}

fn first_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string()
}

pub fn find_tools() -> Result<Tools, RenderError> {
    let missing_ffmpeg = || RenderError::MissingTool {
        tool: "ffmpeg",
        package: "ffmpeg",
    };
    let version = Command::new("ffmpeg")
        .arg("-version")
        .output()
        .map_err(|_| missing_ffmpeg())?;
    if !version.status.success() {
        return Err(missing_ffmpeg());
    }
    let encoders = Command::new("ffmpeg")
        .args(["-hide_banner", "-encoders"])
        .output()
        .map_err(|_| missing_ffmpeg())?;
    let has_x264 = String::from_utf8_lossy(&encoders.stdout)
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some("libx264"));
    let espeak_version = Command::new("espeak-ng")
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| first_line(&o.stdout));
    Ok(Tools {
        ffmpeg_version: first_line(&version.stdout),
        video_encoder: if has_x264 { "libx264" } else { "mpeg4" },
        espeak_version,
    })
}

/// Everything that determines the rendered bytes, as text to hash.
pub fn render_key(plan: &EpisodePlan, tools: &Tools, photo: &[u8]) -> String {
    let mut hasher = blake3::Hasher::new();
    let describe = format!(
        "v{RENDER_VERSION}\n{}\n{}\n{:?}\n{WIDTH}x{HEIGHT}@{FPS}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n",
        tools.ffmpeg_version,
        tools.video_encoder,
        tools.espeak_version,
        CAST,
        REFERENCE_INSET,
        SCENE_COLOURS,
        VOICES,
        plan.cues,
    );
    hasher.update(describe.as_bytes());
    hasher.update(plan.truth_json().as_bytes());
    hasher.update(photo);
    hasher.finalize().to_hex().to_string()
}

/// The rendered files, in memory.
pub struct Rendered {
    pub video: Vec<u8>,
    /// Per character of [`CAST`], in its order: (name, PNG bytes).
    pub references: Vec<(String, Vec<u8>)>,
    pub has_audio: bool,
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Self, RenderError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path =
            std::env::temp_dir().join(format!("viss-demo-render-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).map_err(io_error(&path))?;
        Ok(Scratch(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// ffmpeg flags that keep output bytes independent of the run.
const BITEXACT: [&str; 8] = [
    "-fflags",
    "+bitexact",
    "-flags:v",
    "+bitexact",
    "-flags:a",
    "+bitexact",
    "-map_metadata",
    "-1",
];

fn run_tool(command: &mut Command) -> Result<(), RenderError> {
    let described = format!("{command:?}");
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| RenderError::Tool {
            command: described.clone(),
            detail: e.to_string(),
        })?;
    if !output.status.success() {
        return Err(RenderError::Tool {
            command: described,
            detail: tail(&output.stderr),
        });
    }
    Ok(())
}

fn tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

/// One distinct picture of the video.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Still {
    scene: usize,
    framing: Framing,
}

/// Face tile size for a framing with `count` faces.
fn tile_size(framing: &Framing) -> (u32, u32) {
    match framing {
        Framing::CloseUp { .. } => (270, 360),
        Framing::TwoShot { .. } => (216, 288),
        Framing::Group { characters } if characters.len() <= 2 => (180, 240),
        Framing::Group { characters } if characters.len() == 3 => (165, 220),
        Framing::Group { .. } => (135, 180),
    }
}

fn faces_of(framing: &Framing) -> Vec<String> {
    match framing {
        Framing::CloseUp { character } => vec![character.clone()],
        Framing::TwoShot { characters } | Framing::Group { characters } => characters.clone(),
    }
}

/// Bytes of one yuv420p frame.
const FRAME_BYTES: usize = (WIDTH * HEIGHT * 3 / 2) as usize;

/// Cuts `count` yuv420p stills stacked top to bottom (one planar frame `count` times as tall)
/// into one planar frame each. Each still was converted to yuv420p before stacking, so no chroma
/// sample mixes two stills.
fn split_planar_stills(bytes: &[u8], count: usize) -> Option<Vec<Vec<u8>>> {
    if bytes.len() != FRAME_BYTES * count {
        return None;
    }
    let luma = (WIDTH * HEIGHT) as usize;
    let chroma = luma / 4;
    let (y, rest) = bytes.split_at(luma * count);
    let (u, v) = rest.split_at(chroma * count);
    Some(
        (0..count)
            .map(|k| {
                let mut frame = Vec::with_capacity(FRAME_BYTES);
                frame.extend_from_slice(&y[k * luma..(k + 1) * luma]);
                frame.extend_from_slice(&u[k * chroma..(k + 1) * chroma]);
                frame.extend_from_slice(&v[k * chroma..(k + 1) * chroma]);
                frame
            })
            .collect(),
    )
}

/// The filter graph that makes every still (stacked top to bottom into one tall frame) and the
/// reference images.
fn stills_filter(stills: &[Still]) -> String {
    let mut chains: Vec<String> = Vec::new();
    let mut labels: Vec<String> = Vec::new();
    let mut uses = 0usize;
    let mut crop_chains: Vec<String> = Vec::new();
    for (k, still) in stills.iter().enumerate() {
        let colour = SCENE_COLOURS[still.scene % SCENE_COLOURS.len()];
        let (w, h) = tile_size(&still.framing);
        let faces = faces_of(&still.framing);
        let mut tiles = Vec::new();
        for name in &faces {
            let face = face_of(name);
            let label = format!("t{uses}");
            crop_chains.push(format!(
                "[p{uses}]crop={FACE_W}:{FACE_H}:{}:{},scale={w}:{h}:flags=bicubic,\
                 pad={}:{h}:12:0:color=0x{colour}[{label}]",
                face.x,
                face.y,
                w + 24
            ));
            tiles.push(label);
            uses += 1;
        }
        let row = if tiles.len() == 1 {
            format!("[{}]", tiles[0])
        } else {
            let joined: String = tiles.iter().map(|t| format!("[{t}]")).collect();
            chains.push(format!("{joined}hstack=inputs={}[row{k}]", tiles.len()));
            format!("[row{k}]")
        };
        chains.push(format!(
            "{row}pad={WIDTH}:{HEIGHT}:(ow-iw)/2:(oh-ih)/2:color=0x{colour},format=yuv420p[s{k}]"
        ));
        labels.push(format!("[s{k}]"));
    }
    for (k, (_, face)) in CAST.iter().enumerate() {
        let (dx, dy, w, h) = REFERENCE_INSET;
        let (ow, oh) = REFERENCE_SIZE;
        crop_chains.push(format!(
            "[p{}]crop={w}:{h}:{}:{},scale={ow}:{oh}:flags=lanczos,format=rgb24[r{k}]",
            uses + k,
            face.x + dx,
            face.y + dy
        ));
    }
    let total = uses + CAST.len();
    let splits: String = (0..total).map(|k| format!("[p{k}]")).collect();
    let mut graph = vec![format!("[0:v]split={total}{splits}")];
    graph.extend(crop_chains);
    graph.extend(chains);
    if labels.len() == 1 {
        graph.push(format!("{}null[stills]", labels[0]));
    } else {
        graph.push(format!(
            "{}vstack=inputs={}[stills]",
            labels.concat(),
            labels.len()
        ));
    }
    graph.join(";")
}

pub fn render(plan: &EpisodePlan, tools: &Tools, photo: &Path) -> Result<Rendered, RenderError> {
    if !photo.is_file() {
        return Err(RenderError::MissingPhoto {
            path: photo.to_path_buf(),
        });
    }
    let scratch = Scratch::new()?;

    // 1. Every distinct still, and the reference images, in one ffmpeg call.
    let mut stills: Vec<Still> = Vec::new();
    let mut still_of_shot = Vec::with_capacity(plan.shots.len());
    for shot in &plan.shots {
        let still = Still {
            scene: shot.scene,
            framing: shot.framing.clone(),
        };
        let index = match stills.iter().position(|s| *s == still) {
            Some(index) => index,
            None => {
                stills.push(still);
                stills.len() - 1
            }
        };
        still_of_shot.push(index);
    }
    let stills_path = scratch.0.join("stills.rgb");
    let mut command = Command::new("ffmpeg");
    command
        .args(["-hide_banner", "-nostdin", "-loglevel", "error", "-y"])
        .args(["-threads", "1", "-filter_threads", "1"])
        .arg("-i")
        .arg(photo)
        .args(["-filter_complex", &stills_filter(&stills)])
        .args(["-map", "[stills]", "-frames:v", "1", "-f", "rawvideo"])
        .args(["-pix_fmt", "yuv420p"])
        .arg(&stills_path);
    let reference_paths: Vec<PathBuf> = CAST
        .iter()
        .map(|(name, _)| scratch.0.join(format!("{name}.png")))
        .collect();
    for (k, path) in reference_paths.iter().enumerate() {
        command
            .args(["-map", &format!("[r{k}]"), "-frames:v", "1", "-c:v", "png"])
            .args(BITEXACT)
            .args(["-f", "image2", "-update", "1"])
            .arg(path);
    }
    run_tool(&mut command)?;
    let still_bytes = std::fs::read(&stills_path).map_err(io_error(&stills_path))?;
    let still_frames =
        split_planar_stills(&still_bytes, stills.len()).ok_or_else(|| RenderError::Tool {
            command: "ffmpeg (stills)".to_string(),
            detail: format!(
                "expected {} bytes of stills, got {}",
                FRAME_BYTES * stills.len(),
                still_bytes.len()
            ),
        })?;
    let mut references = Vec::new();
    for ((name, _), path) in CAST.iter().zip(&reference_paths) {
        references.push((
            name.to_string(),
            std::fs::read(path).map_err(io_error(path))?,
        ));
    }

    // 2. Speech.
    let audio_path = scratch.0.join("speech.wav");
    let has_audio = tools.espeak_version.is_some();
    if has_audio {
        let samples = speech_track(plan)?;
        std::fs::write(&audio_path, wav_bytes(&samples)).map_err(io_error(&audio_path))?;
    }

    // 3. Encode: raw frames on stdin, one per 1/FPS s.
    let video_path = scratch.0.join("video.mp4");
    let mut command = Command::new("ffmpeg");
    command
        .args(["-hide_banner", "-nostdin", "-loglevel", "error", "-y"])
        .args(["-f", "rawvideo", "-pix_fmt", "yuv420p"])
        .args(["-s", &format!("{WIDTH}x{HEIGHT}"), "-r", &FPS.to_string()])
        .args(["-i", "pipe:0"]);
    if has_audio {
        command.arg("-i").arg(&audio_path);
    }
    command.args(["-map", "0:v"]);
    if has_audio {
        command.args(["-map", "1:a", "-c:a", "aac", "-b:a", "64k"]);
    }
    command.args(["-c:v", tools.video_encoder]).args([
        "-threads",
        "1",
        "-g",
        &(2 * FPS).to_string(),
    ]);
    if tools.video_encoder == "libx264" {
        command.args(["-preset", "veryfast", "-crf", "20"]);
    } else {
        command.args(["-q:v", "4"]);
    }
    command
        .args(BITEXACT)
        .args(["-movflags", "+faststart", "-f", "mp4"])
        .arg(&video_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let described = format!("{command:?}");
    let tool_error = |detail: String| RenderError::Tool {
        command: described.clone(),
        detail,
    };
    let mut child = command.spawn().map_err(|e| tool_error(e.to_string()))?;
    let mut stdin = child.stdin.take().expect("stdin was piped");
    let mut write_result = Ok(());
    for frame in 0..plan.frame_count() {
        let still = &still_frames[still_of_shot[plan.shot_at_frame(frame)]];
        if let Err(e) = stdin.write_all(still) {
            write_result = Err(e);
            break;
        }
    }
    drop(stdin);
    let output = child
        .wait_with_output()
        .map_err(|e| tool_error(e.to_string()))?;
    if !output.status.success() {
        return Err(tool_error(tail(&output.stderr)));
    }
    write_result.map_err(|e| tool_error(format!("writing frames: {e}")))?;
    let video = std::fs::read(&video_path).map_err(io_error(&video_path))?;
    Ok(Rendered {
        video,
        references,
        has_audio,
    })
}

/// The episode's speech: each cue's words in its speakers' voices, starting 100 ms into the
/// cue, sped up when needed so they end before the next cue (a shared line is said by all its
/// speakers at once).
fn speech_track(plan: &EpisodePlan) -> Result<Vec<i16>, RenderError> {
    let total = (plan.duration_ms * u64::from(SAMPLE_RATE) / 1000) as usize;
    let mut mix = vec![0i32; total];
    let line_speakers = super::plan::speakers_per_line(&plan.script);
    for (k, (cue, truth)) in plan.cues.iter().zip(&plan.cue_truth).enumerate() {
        if truth.extra || truth.lines.is_empty() {
            continue;
        }
        let next_start = plan
            .cues
            .get(k + 1)
            .map_or(plan.duration_ms, |n| n.start_ms);
        let start_ms = cue.start_ms + 100;
        let slot_ms = next_start.saturating_sub(60).max(cue.end_ms) - start_ms;
        // Two-speaker cues ("- A\n- B") hold one part per line; otherwise the cue is one part.
        let parts: Vec<String> = if truth.lines.len() > 1 && cue.text.starts_with("- ") {
            cue.text
                .lines()
                .map(|l| l.trim_start_matches("- ").to_string())
                .collect()
        } else {
            vec![cue.text.replace('\n', " ")]
        };
        let chars: usize = parts.iter().map(|p| p.chars().count().max(1)).sum();
        let mut offset_ms = start_ms;
        for (part, &line) in parts.iter().zip(truth.lines.iter().cycle()) {
            let part_slot = slot_ms * part.chars().count().max(1) as u64 / chars as u64;
            let mut longest = 0usize;
            for speaker in &line_speakers[line] {
                let samples = speak_to_fit(part, voice_of(speaker), part_slot)?;
                let at = (offset_ms * u64::from(SAMPLE_RATE) / 1000) as usize;
                for (i, s) in samples.iter().enumerate() {
                    if let Some(slot) = mix.get_mut(at + i) {
                        *slot += i32::from(*s);
                    }
                }
                longest = longest.max(samples.len());
            }
            offset_ms += (longest as u64 * 1000 / u64::from(SAMPLE_RATE)).max(part_slot);
        }
    }
    Ok(mix
        .into_iter()
        .map(|s| s.clamp(i32::from(i16::MIN), i32::from(i16::MAX)) as i16)
        .collect())
}

/// Synthesises `text` at the default rate, again faster when it overruns `slot_ms`, and cuts it
/// (with a 20 ms fade) if even that is too long.
fn speak_to_fit(text: &str, voice: &str, slot_ms: u64) -> Result<Vec<i16>, RenderError> {
    let slot = (slot_ms * u64::from(SAMPLE_RATE) / 1000) as usize;
    let mut samples = espeak(text, voice, 175)?;
    if samples.len() > slot && slot > 0 {
        let speed = (175 * samples.len() / slot * 21 / 20).min(450) as u32;
        samples = espeak(text, voice, speed)?;
    }
    if samples.len() > slot {
        samples.truncate(slot);
        let fade = (SAMPLE_RATE as usize / 50).min(samples.len());
        let n = samples.len();
        for i in 0..fade {
            let s = &mut samples[n - fade + i];
            *s = (i32::from(*s) * (fade - i) as i32 / fade as i32) as i16;
        }
    }
    Ok(samples)
}

/// 16-bit mono samples at [`SAMPLE_RATE`] from espeak-ng.
fn espeak(text: &str, voice: &str, speed: u32) -> Result<Vec<i16>, RenderError> {
    let mut command = Command::new("espeak-ng");
    command
        .args(["-v", voice, "-s", &speed.to_string(), "--stdout"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let described = format!("{command:?}");
    let tool_error = |detail: String| RenderError::Tool {
        command: described.clone(),
        detail,
    };
    let mut child = command.spawn().map_err(|e| tool_error(e.to_string()))?;
    let mut stdin = child.stdin.take().expect("stdin was piped");
    let written = stdin.write_all(text.as_bytes());
    drop(stdin);
    let output = child
        .wait_with_output()
        .map_err(|e| tool_error(e.to_string()))?;
    written.map_err(|e| tool_error(e.to_string()))?;
    if !output.status.success() {
        return Err(tool_error(tail(&output.stderr)));
    }
    parse_wav(&output.stdout)
        .ok_or_else(|| tool_error("output is not 16-bit mono 22050 Hz WAV".to_string()))
}

/// Samples of a 16-bit mono WAV at [`SAMPLE_RATE`]; the data chunk runs to the end of the bytes
/// (espeak-ng writes a streaming header whose sizes are placeholders).
fn parse_wav(bytes: &[u8]) -> Option<Vec<i16>> {
    if bytes.len() < 12 || &bytes[..4] != b"RIFF" || &bytes[8..12] != b"WAVE" {
        return None;
    }
    let mut at = 12;
    let mut format_ok = false;
    while at + 8 <= bytes.len() {
        let id = &bytes[at..at + 4];
        let size = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().ok()?) as usize;
        let body = at + 8;
        if id == b"fmt " {
            let fmt = bytes.get(body..body + 16)?;
            let channels = u16::from_le_bytes([fmt[2], fmt[3]]);
            let rate = u32::from_le_bytes([fmt[4], fmt[5], fmt[6], fmt[7]]);
            let bits = u16::from_le_bytes([fmt[14], fmt[15]]);
            format_ok = channels == 1 && rate == SAMPLE_RATE && bits == 16;
        } else if id == b"data" {
            if !format_ok {
                return None;
            }
            let data = &bytes[body..];
            return Some(
                data.chunks_exact(2)
                    .map(|c| i16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            );
        }
        at = body + size + (size & 1);
    }
    None
}

fn wav_bytes(samples: &[i16]) -> Vec<u8> {
    let data_len = (samples.len() * 2) as u32;
    let mut out = Vec::with_capacity(44 + samples.len() * 2);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&SAMPLE_RATE.to_le_bytes());
    out.extend_from_slice(&(SAMPLE_RATE * 2).to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    for s in samples {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wav_round_trips() {
        let samples = vec![0i16, 1, -1, i16::MAX, i16::MIN];
        assert_eq!(parse_wav(&wav_bytes(&samples)), Some(samples));
        assert_eq!(parse_wav(b"not a wav"), None);
    }

    #[test]
    fn planar_stills_are_cut_plane_by_plane() {
        let luma = (WIDTH * HEIGHT) as usize;
        let chroma = luma / 4;
        let mut stacked = vec![1u8; luma];
        stacked.extend(vec![2u8; luma]);
        stacked.extend(vec![3u8; chroma]);
        stacked.extend(vec![4u8; chroma]);
        stacked.extend(vec![5u8; chroma]);
        stacked.extend(vec![6u8; chroma]);
        let stills = split_planar_stills(&stacked, 2).unwrap();
        assert_eq!(stills[0][0], 1);
        assert_eq!(stills[0][luma], 3);
        assert_eq!(stills[0][luma + chroma], 5);
        assert_eq!(stills[1][0], 2);
        assert_eq!(stills[1][luma], 4);
        assert_eq!(stills[1][FRAME_BYTES - 1], 6);
        assert!(split_planar_stills(&stacked[1..], 2).is_none());
    }

    #[test]
    fn every_speaking_character_has_a_face_and_a_voice() {
        let plan = EpisodePlan::build();
        for characters in &plan.scene_characters {
            for name in characters {
                face_of(name);
                assert!(VOICES.iter().any(|(n, _)| n == name), "{name}");
            }
        }
        let faces: std::collections::BTreeSet<_> = CAST.iter().map(|(_, f)| (f.x, f.y)).collect();
        assert_eq!(faces.len(), CAST.len(), "distinct attendees");
    }
}

//! `viss bench video`: decoding a video and sampling frames as RGB, against the `ffmpeg` CLI
//! doing the same (`-vf fps=N -f rawvideo -pix_fmt rgb24`), in one run, at full resolution on
//! both sides. Also reports this process's peak resident memory, the number that must stay
//! bounded on long episodes.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::Serialize;

use crate::media::video::{SampleOptions, VideoError, probe, sample_frames_with};

#[derive(Debug, thiserror::Error)]
pub enum VideoBenchError {
    #[error(transparent)]
    Video(#[from] VideoError),
    #[error("cannot run `ffmpeg` (install the Debian package `ffmpeg`): {0}")]
    Ffmpeg(std::io::Error),
    #[error("`ffmpeg` failed on {file}: {stderr}")]
    FfmpegFailed { file: PathBuf, stderr: String },
}

#[derive(Debug, Serialize)]
pub struct VideoBenchReport {
    pub file: PathBuf,
    pub duration_s: f64,
    pub width: u32,
    pub height: u32,
    pub fps: f64,
    pub frames_viss: u64,
    pub frames_ffmpeg: u64,
    /// Medians over the repeats.
    pub viss_seconds: f64,
    pub ffmpeg_seconds: f64,
    /// ffmpeg time / viss time.
    pub speedup: f64,
    /// Peak resident set of this process (VmHWM), in MiB, after the viss runs.
    pub peak_rss_mib: Option<f64>,
}

impl VideoBenchReport {
    /// The one-line summary `viss bench` prints after the JSON report.
    pub fn summary(&self) -> String {
        format!(
            "decode + sample at {} fps, {:.0} s of {}x{}: viss {:.3} s ({} frames), ffmpeg \
             CLI {:.3} s ({} frames): {:.2}x; peak RSS {:.0} MiB",
            self.fps,
            self.duration_s,
            self.width,
            self.height,
            self.viss_seconds,
            self.frames_viss,
            self.ffmpeg_seconds,
            self.frames_ffmpeg,
            self.speedup,
            self.peak_rss_mib.unwrap_or(f64::NAN)
        )
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

pub fn run_video_bench(
    file: &Path,
    fps: f64,
    repeat: usize,
) -> Result<VideoBenchReport, VideoBenchError> {
    let info = probe(file)?;
    let options = SampleOptions {
        fps,
        max_width: None,
    };
    let mut viss_times = Vec::new();
    let mut frames_viss = 0;
    for _ in 0..repeat.max(1) {
        let started = Instant::now();
        let mut frames = 0u64;
        sample_frames_with(file, 0.0, info.duration_s, &options, |frame| {
            frames += 1;
            std::hint::black_box(&frame.rgb);
            Ok::<(), std::convert::Infallible>(())
        })?;
        viss_times.push(started.elapsed().as_secs_f64());
        frames_viss = frames;
    }
    let peak_rss_mib = peak_rss_mib();

    let mut ffmpeg_times = Vec::new();
    let mut frames_ffmpeg = 0;
    for _ in 0..repeat.max(1) {
        let started = Instant::now();
        let mut child = Command::new("ffmpeg")
            .args(["-v", "error", "-nostdin", "-i"])
            .arg(file)
            .args([
                "-vf",
                &format!("fps={fps}"),
                "-f",
                "rawvideo",
                "-pix_fmt",
                "rgb24",
                "-",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(VideoBenchError::Ffmpeg)?;
        let mut bytes = 0u64;
        let mut buffer = vec![0u8; 1 << 20];
        let mut stdout = child.stdout.take().expect("piped");
        loop {
            let read = stdout.read(&mut buffer).map_err(VideoBenchError::Ffmpeg)?;
            if read == 0 {
                break;
            }
            bytes += read as u64;
        }
        let output = child.wait_with_output().map_err(VideoBenchError::Ffmpeg)?;
        if !output.status.success() {
            return Err(VideoBenchError::FfmpegFailed {
                file: file.to_path_buf(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        ffmpeg_times.push(started.elapsed().as_secs_f64());
        frames_ffmpeg = bytes / (u64::from(info.width) * u64::from(info.height) * 3).max(1);
    }
    let (viss_seconds, ffmpeg_seconds) = (median(viss_times), median(ffmpeg_times));
    Ok(VideoBenchReport {
        file: file.to_path_buf(),
        duration_s: info.duration_s,
        width: info.width,
        height: info.height,
        fps,
        frames_viss,
        frames_ffmpeg,
        viss_seconds,
        ffmpeg_seconds,
        speedup: ffmpeg_seconds / viss_seconds,
        peak_rss_mib,
    })
}

/// Resets the process's peak resident memory (VmHWM) to its current size; false where the
/// kernel does not allow it.
fn reset_peak_rss() -> bool {
    // Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0).
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// One phase of the video stages' work on the long video.
#[derive(Debug, Serialize)]
pub struct PhaseReport {
    pub phase: &'static str,
    pub seconds: f64,
    /// Peak resident memory during this phase alone (VmHWM after a reset), MiB.
    pub peak_rss_mib: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct VideoStagesBenchReport {
    pub file: PathBuf,
    pub duration_s: f64,
    pub width: u32,
    pub height: u32,
    pub encoder: String,
    pub generate_seconds: f64,
    pub sampled_frames: usize,
    pub shots: usize,
    pub phases: Vec<PhaseReport>,
    /// The largest of the phases' peaks, MiB.
    pub peak_rss_mib: Option<f64>,
    /// Whether peaks were measured per phase (needs /proc/self/clear_refs); otherwise each
    /// phase reports the process's peak so far.
    pub per_phase_peaks: bool,
}

impl VideoStagesBenchReport {
    /// The summary `viss bench` prints after the JSON report.
    pub fn summary(&self) -> String {
        let mut lines: Vec<String> = self
            .phases
            .iter()
            .map(|phase| {
                format!(
                    "{:70} {:8.2} s  peak RSS {:6.0} MiB",
                    phase.phase,
                    phase.seconds,
                    phase.peak_rss_mib.unwrap_or(f64::NAN)
                )
            })
            .collect();
        lines.push(format!(
            "{:.0} s of {}x{} ({} sampled frames, {} shots): peak RSS {:.0} MiB (goal: under \
             1024)",
            self.duration_s,
            self.width,
            self.height,
            self.sampled_frames,
            self.shots,
            self.peak_rss_mib.unwrap_or(f64::NAN)
        ));
        lines.join("\n")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum VideoStagesBenchError {
    #[error(transparent)]
    Bench(#[from] VideoBenchError),
    #[error(transparent)]
    Keyframes(#[from] crate::stages::keyframes::KeyframesError),
    #[error(transparent)]
    Detect(#[from] crate::stages::detect::DetectError),
    #[error(transparent)]
    Detector(#[from] crate::vision::DetectorError),
    #[error(transparent)]
    Model(#[from] crate::models::ModelError),
    #[error(transparent)]
    Pelt(#[from] viss_pelt::PeltError),
    #[error(transparent)]
    Stylise(#[from] crate::vision::stylise::StyliseError),
}

/// Makes a `minutes`-long 1280x720 25 fps H.264 video with the `ffmpeg` CLI: `testsrc2` whose
/// hue jumps every 7 s, so shot detection has cuts to find.
pub fn generate_long_video(path: &Path, minutes: f64) -> Result<String, VideoBenchError> {
    let encoders = Command::new("ffmpeg")
        .args(["-hide_banner", "-encoders"])
        .output()
        .map_err(VideoBenchError::Ffmpeg)?;
    let encoder = if String::from_utf8_lossy(&encoders.stdout).contains(" libx264 ") {
        "libx264"
    } else {
        "mpeg4"
    };
    let output = Command::new("ffmpeg")
        .args([
            "-v",
            "error",
            "-nostdin",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "testsrc2=size=1280x720:rate=25",
        ])
        .args([
            "-vf",
            "hue=H=2*PI*floor(t/7)/5",
            "-t",
            &format!("{}", minutes * 60.0),
        ])
        .args(["-c:v", encoder, "-pix_fmt", "yuv420p"])
        .args(if encoder == "libx264" {
            ["-preset", "veryfast"]
        } else {
            ["-q:v", "4"]
        })
        .arg(path)
        .output()
        .map_err(VideoBenchError::Ffmpeg)?;
    if !output.status.success() {
        return Err(VideoBenchError::FfmpegFailed {
            file: path.to_path_buf(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(encoder.to_string())
}

/// The work of `frames`, `keyframes`, `detect` and `group_image` on one video taken as a single
/// scenario (the worst case for memory: PELT over every sampled frame of the episode), with the
/// stages' own functions and default parameters, timing each phase and its peak memory.
pub fn run_video_stages_bench(
    video: &Path,
    encoder: String,
    generate_seconds: f64,
) -> Result<VideoStagesBenchReport, VideoStagesBenchError> {
    use crate::stages::detect::{DetectParams, detect_candidates};
    use crate::stages::frames::{FrameSampling, FramesParams, SourceVideo};
    use crate::stages::keyframes::{
        FeatureSource, KeyframesParams, KeyframesRecord, describe_frames, shots_of,
    };
    use crate::vision::{
        ScrfdDetector,
        stylise::{StyliseParams, stylise},
    };

    let per_phase_peaks = reset_peak_rss();
    let mut phases = Vec::new();
    let mut phase = |name: &'static str, started: Instant| {
        phases.push(PhaseReport {
            phase: name,
            seconds: started.elapsed().as_secs_f64(),
            peak_rss_mib: peak_rss_mib(),
        });
        reset_peak_rss();
    };

    // frames: decode and sample, keeping times only.
    let started = Instant::now();
    let params = FramesParams::default();
    let info = probe(video).map_err(VideoBenchError::from)?;
    let options = SampleOptions {
        fps: params.fps,
        max_width: Some(params.max_width),
    };
    let mut times = Vec::new();
    let mut size = (0, 0);
    sample_frames_with(video, 0.0, info.duration_s, &options, |frame| {
        times.push(frame.time_s);
        size = (frame.width, frame.height);
        Ok::<(), std::convert::Infallible>(())
    })
    .map_err(VideoBenchError::from)?;
    phase("frames: decode + sample at 2 fps, 640 px", started);

    // keyframes: decode again, describe, PELT.
    let started = Instant::now();
    let sampling = FrameSampling {
        scenario: "bench/long/sc001".into(),
        video: crate::manifest::RawFile {
            path: video.display().to_string(),
            bytes: 0,
            blake3: crate::hash::ContentHash::of(b""),
            sha256: None,
        },
        source: SourceVideo {
            width: info.width,
            height: info.height,
            fps: info.fps,
            codec: info.codec.clone(),
            duration_s: info.duration_s,
        },
        aligned_s: [0.0, info.duration_s],
        segment_s: [0.0, info.duration_s],
        fps: params.fps,
        max_width: params.max_width,
        frame_width: size.0,
        frame_height: size.1,
        times_s: times.clone(),
        damaged_packets: 0,
    };
    let (described_times, vectors) = describe_frames(video, &sampling, None)?;
    let keyframe_params = KeyframesParams::default();
    let pelt = viss_pelt::PeltParams {
        penalty: keyframe_params.penalty,
        min_size: keyframe_params.min_size,
        jump: keyframe_params.jump,
        gamma: None,
    };
    let (shots, gamma) = shots_of(&described_times, &vectors, &pelt)?;
    drop(vectors);
    phase(
        "keyframes: decode again + classical descriptor + PELT over all frames",
        started,
    );

    // detect: SCRFD on every shot's representative at 1280 px.
    let started = Instant::now();
    let files = crate::models::ModelCache::from_env()?.ensure_face_detector()?;
    let detect_params = DetectParams::default();
    let faces = ScrfdDetector::load(
        &files.onnx_runtime_library,
        &files.model_onnx,
        detect_params.faces.clone(),
        crate::config::cores(),
    )?;
    let shot_count = shots.len();
    let keyframes = KeyframesRecord {
        scenario: sampling.scenario.clone(),
        features: FeatureSource {
            kind: "classical".into(),
            id: crate::media::features::DESCRIPTOR_ID.into(),
            dimension: 0,
        },
        pelt,
        gamma,
        frame_count: described_times.len(),
        shots,
    };
    let found = detect_candidates(
        video,
        "long.mp4",
        &sampling.scenario,
        &keyframes,
        sampling.aligned_s,
        &detect_params,
        2,
        &faces,
        None,
    )?;
    phase(
        "detect: SCRFD on each shot's representative at 1280 px",
        started,
    );

    // group_image: the local filter on the chosen frame.
    let started = Instant::now();
    std::hint::black_box(stylise(&found.best, &StyliseParams::default())?);
    phase(
        "group_image: local stylisation of the 1280x720 group frame",
        started,
    );

    let peak_rss_mib = phases
        .iter()
        .filter_map(|p| p.peak_rss_mib)
        .reduce(f64::max);
    Ok(VideoStagesBenchReport {
        file: video.to_path_buf(),
        duration_s: info.duration_s,
        width: info.width,
        height: info.height,
        encoder,
        generate_seconds,
        sampled_frames: times.len(),
        shots: shot_count,
        phases,
        peak_rss_mib,
        per_phase_peaks,
    })
}

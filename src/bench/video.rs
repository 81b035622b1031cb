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

pub fn run_video_bench(file: &Path, fps: f64, repeat: usize) -> Result<VideoBenchReport, VideoBenchError> {
    let info = probe(file)?;
    let options = SampleOptions { fps, max_width: None };
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
            .args(["-vf", &format!("fps={fps}"), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"])
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

//! `frames`: the scenario's stretch of the episode's video is decoded with FFmpeg (accurate
//! seeking, sampled by presentation time, so variable frame rates are sampled by real time) and
//! sampled at a fixed rate, streaming: one frame in memory at a time.
//!
//! The range is `align`'s, widened by a lead-in and a tail: scenes open on establishing or group
//! shots before anyone speaks, and the shot that shows everyone is often there. Sampled frames
//! are not stored (a minute at 2 frames/s and 640 pixels wide is about 80 MB of RGB, and a
//! benchmark has hundreds of scenarios): the record keeps the recipe (file hash, segment, rate,
//! width) and every frame's time, and the stages that need pixels decode exactly those frames
//! again from the same verified file.
//!
//! A scenario without a video (a text-only episode) or without an aligned range is flagged and
//! skipped by the whole video path; a video that is truncated, corrupt or shorter than the
//! range fails the scenario with the file and the times named.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::StoreError;
use crate::dag::{AppCtx, Env, JobCtx, JobError, Level, Outputs, Stage, StageFailure};
use crate::manifest::RawFile;
use crate::media::video::{
    DEFAULT_MAX_WIDTH, DEFAULT_SAMPLE_FPS, SampleOptions, VideoError, sample_frames_with,
};
use crate::range::{BadSetting, Range, Validate, check};
use crate::stages::{align, ingest};

/// How the scenario's frames were sampled (the recipe, not the pixels).
pub const FRAMES: Port<FrameSampling> = Port::item(NAME, "frames");

const NAME: &str = "frames";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "decode the scenario's video segment, sample frames",
    version: 2,
    prompts: &[],
    defaults: Defaults::of::<FramesParams>(),
    load: load_stage::<FramesParams, Frames>,
};

/// frames: the scenario's stretch of the episode's video, decoded with FFmpeg (accurate seeking,
/// presentation-time sampling, so variable frame rates are sampled by real time) and sampled at
/// `fps`, one frame in memory at a time. The record keeps every sampled frame's time and how to
/// decode it again, not the pixels (about 80 MB of RGB per minute at the defaults): keyframes
/// and detect decode what they need from the same file, whose hash is checked first. An episode
/// without a video, or a scenario align could not place, is flagged and skips the video stages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FramesParams {
    /// Samples per second of video time, above 0 and at most 240; a cut is seen at most 1/fps
    /// after it happens.
    pub fps: f64,
    /// Frames wider than this are downscaled for features, keeping the aspect ratio (detect
    /// decodes its own); 16 to 7680 pixels.
    pub max_width: u32,
    /// Seconds decoded before the scenario's first aligned line, 0 to 600. Scenes open on an
    /// establishing or group shot before anyone speaks (the demo's do, for 4-5 s), and end on a
    /// reaction. A lead-in longer than the gap between two scenes reaches into the previous one,
    /// whose frames then are candidates too (the record keeps the aligned range apart from the
    /// decoded segment).
    pub lead_in_s: f64,
    /// Seconds decoded after its last aligned line, 0 to 600.
    pub tail_s: f64,
}

impl Validate for FramesParams {
    fn validate(&self) -> Result<(), BadSetting> {
        // Every sampled frame's time is kept in the record: 240/s is above any video's rate.
        check("fps", self.fps, Range::above(0.0, 240.0))?;
        check("max_width", self.max_width, Range::new(16.0, 7680.0))?;
        check("lead_in_s", self.lead_in_s, Range::new(0.0, 600.0))?;
        check("tail_s", self.tail_s, Range::new(0.0, 600.0))
    }
}

impl Default for FramesParams {
    fn default() -> Self {
        Self {
            fps: DEFAULT_SAMPLE_FPS,
            max_width: DEFAULT_MAX_WIDTH,
            lead_in_s: 6.0,
            tail_s: 2.0,
        }
    }
}

pub struct Frames(FramesParams);

impl From<FramesParams> for Frames {
    fn from(params: FramesParams) -> Self {
        Self(params)
    }
}

/// The video as decoders report it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SourceVideo {
    pub width: u32,
    pub height: u32,
    /// Average frame rate the stream declares (0 when unknown).
    pub fps: f64,
    pub codec: String,
    pub duration_s: f64,
}

/// What `frames` decoded: enough to decode the same frames again, and their times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FrameSampling {
    pub scenario: String,
    /// The episode's video as ingested (path relative to `raw/`, blake3).
    pub video: RawFile,
    pub source: SourceVideo,
    /// The scenario's range from `align`, seconds.
    pub aligned_s: [f64; 2],
    /// The decoded segment: the aligned range with lead-in and tail, within the video.
    pub segment_s: [f64; 2],
    pub fps: f64,
    pub max_width: u32,
    /// Size of the sampled frames (after downscaling).
    pub frame_width: u32,
    pub frame_height: u32,
    /// Presentation time of every sampled frame, ascending.
    pub times_s: Vec<f64>,
    /// Packets the decoder rejected as damaged and skipped.
    pub damaged_packets: usize,
}

impl FrameSampling {
    /// How to decode these frames again.
    pub fn sample_options(&self) -> SampleOptions {
        SampleOptions {
            fps: self.fps,
            max_width: Some(self.max_width),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FramesError {
    #[error(
        "raw/{path} changed after it was ingested (its blake3 is now {now}); run `viss build` \
         again to pick up the new version"
    )]
    VideoChanged { path: String, now: String },
    #[error("cannot read raw/{path}: {source}")]
    VideoUnreadable { path: String, source: StoreError },
    #[error("raw/{path} {problem}")]
    NotAFile {
        path: String,
        problem: crate::fsutil::NotAFile,
    },
    #[error(
        "no frame of raw/{path} lies in {start_s:.3}..{end_s:.3} s (the video is {duration_s:.3} \
         s long)"
    )]
    NoFrames {
        path: String,
        start_s: f64,
        end_s: f64,
        duration_s: f64,
    },
    #[error("invalid [params] in stages/frames.toml: {0}")]
    Params(String),
    #[error(transparent)]
    Video(#[from] VideoError),
    #[error(transparent)]
    Job(#[from] JobError),
}

/// The video file on disk, checked to be the bytes `ingest` hashed (through the store's
/// size-and-mtime memo, so a long video is read once, not once per scenario).
pub fn checked_video_path(ctx: &JobCtx, video: &RawFile) -> Result<PathBuf, FramesError> {
    let path = ctx.project().raw_dir().join(&video.path);
    // Replaced since it was ingested by something that is not a file (a FIFO would block).
    crate::fsutil::regular_file(&path).map_err(|problem| FramesError::NotAFile {
        path: video.path.clone(),
        problem,
    })?;
    let fingerprint = ctx
        .store()
        .fingerprint_file(&path, false)
        .map_err(|source| FramesError::VideoUnreadable {
            path: video.path.clone(),
            source,
        })?;
    if fingerprint.blake3 != video.blake3 {
        return Err(FramesError::VideoChanged {
            path: video.path.clone(),
            now: fingerprint.blake3.short(),
        });
    }
    Ok(path)
}

impl FramesParams {
    fn check(&self) -> Result<(), FramesError> {
        self.validate()
            .map_err(|bad| FramesError::Params(bad.to_string()))
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Frames {
    fn level(&self) -> Level {
        Level::Scenario
    }

    fn inputs(&self) -> Vec<PortId> {
        [ingest::VIDEO.id(), align::TIME_RANGE.id()].into()
    }

    fn outputs(&self) -> Vec<PortId> {
        [FRAMES.id()].into()
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        self.0.check()?;
        let episode = Level::Episode.ancestor_of(&ctx.item).to_string();
        // Without a video or a time range there is nothing to decode: the scenario is flagged
        // and the video stages after this one find no record and skip it too, rather than
        // failing every build of a text-only project.
        let skip = |why: String| {
            let mut outputs = Outputs::default();
            outputs.flags.push(format!(
                "{why}; the video stages (frames, keyframes, detect, group_image, match_roles, \
                 portraits) skip this scenario"
            ));
            Ok(outputs)
        };
        let Some(video) = ctx.read_optional(&ingest::VIDEO)? else {
            return skip(format!(
                "episode {episode} lists no video in its show manifest (add `video = \"...\"` to \
                 it for group images)"
            ));
        };
        let Some(range) = ctx.read_optional(&align::TIME_RANGE)? else {
            return skip(
                "align found no time range for it (no dialogue line it could place)".to_string(),
            );
        };
        let (Some(start_ms), Some(end_ms)) = (range.start_ms, range.end_ms) else {
            let reason = range
                .missing_reason
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            return skip(format!("align found no time range for it{reason}"));
        };
        let path = checked_video_path(ctx, &video.file)?;
        let aligned_s = [start_ms as f64 / 1000.0, end_ms as f64 / 1000.0];
        let start_s = (aligned_s[0] - self.0.lead_in_s).max(0.0);
        let end_s = aligned_s[1] + self.0.tail_s;
        let options = SampleOptions {
            fps: self.0.fps,
            max_width: Some(self.0.max_width),
        };
        let (times_s, size, info) = ctx
            .cpu(move || -> Result<_, VideoError> {
                let mut times = Vec::new();
                let mut size = (0, 0);
                let info = sample_frames_with(&path, start_s, end_s, &options, |frame| {
                    times.push(frame.time_s);
                    size = (frame.width, frame.height);
                    Ok::<(), std::convert::Infallible>(())
                })?;
                Ok((times, size, info))
            })
            .await?;
        let segment_end_s = if info.duration_s > 0.0 {
            end_s.min(info.duration_s)
        } else {
            end_s
        };
        if times_s.is_empty() {
            let error = FramesError::NoFrames {
                path: video.file.path.clone(),
                start_s,
                end_s: segment_end_s,
                duration_s: info.duration_s,
            };
            return Err(error.into());
        }
        let mut outputs = Outputs::default();
        if info.duration_s > 0.0 && aligned_s[1] > info.duration_s {
            outputs.flags.push(format!(
                "align places it until {:.1} s but raw/{} ends at {:.1} s; are the subtitles for \
                 this video?",
                aligned_s[1], video.file.path, info.duration_s
            ));
        }
        if info.damaged_packets > 0 {
            outputs.flags.push(format!(
                "{} damaged packet(s) skipped while decoding raw/{} \
                 {start_s:.1}..{segment_end_s:.1} s",
                info.damaged_packets, video.file.path
            ));
        }
        let sampling = FrameSampling {
            scenario: ctx.item.clone(),
            video: video.file,
            source: SourceVideo {
                width: info.width,
                height: info.height,
                fps: info.fps,
                codec: info.codec,
                duration_s: info.duration_s,
            },
            aligned_s,
            segment_s: [start_s, segment_end_s],
            fps: self.0.fps,
            max_width: self.0.max_width,
            frame_width: size.0,
            frame_height: size.1,
            times_s,
            damaged_packets: info.damaged_packets,
        };
        outputs.put(ctx, &FRAMES, &sampling)?;
        Ok(outputs)
    }
}

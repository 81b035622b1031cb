//! Decoding video segments into sampled RGB frames, through FFmpeg.
//!
//! [`sample_frames`] opens any container and codec the linked FFmpeg
//! supports, seeks to the keyframe at or before the segment start, decodes
//! (discarding frames before the start, so the first delivered frame is
//! accurate to one source frame), and hands the caller one packed RGB24 frame
//! per sample time. Only the frame being delivered is held in memory, so a
//! segment of any length costs the same memory.
//!
//! Timing. Frame times are `(pts - stream start) * time_base` (the best-effort
//! timestamp), so variable-frame-rate files are sampled by real time, not by
//! frame count. Sample times are `start + k / fps` for every `k` with a sample
//! time before `end`; each one takes the first decoded frame whose time is at
//! or after it. When the source has fewer frames than samples (e.g. 1 fps
//! slides sampled at 2 fps) several sample times fall on the same frame; that
//! frame is delivered once, with its own presentation time.
//!
//! Ends and damage. A segment end past the end of the video is clamped to the
//! video's duration (the covered range is reported in [`VideoInfo`]); a start
//! at or past the end is an error. When the stream stops early (a truncated or
//! corrupt file whose header promises more), sampling fails with
//! [`VideoError::Truncated`] naming the range actually covered: frames up to
//! that time have already been delivered, but the call never reports success
//! for a range it did not decode.

use std::path::{Path, PathBuf};
use std::sync::Once;

use ffmpeg::format::Pixel;
use ffmpeg::software::scaling;
use ffmpeg_next as ffmpeg;
use thiserror::Error;

/// Samples per second when the caller has no preference.
pub const DEFAULT_SAMPLE_FPS: f64 = 2.0;

/// Frames wider than this are downscaled (keeping the aspect ratio) by
/// default; shot detection and embeddings need no more detail.
pub const DEFAULT_MAX_WIDTH: u32 = 640;

/// One sampled frame, packed RGB24 (`rgb.len() == width * height * 3`,
/// rows top to bottom, no padding).
#[derive(Debug, Clone, PartialEq)]
pub struct SampledFrame {
    /// Presentation time of the frame, seconds from the start of the video.
    pub time_s: f64,
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
}

/// What was decoded, and which part of the requested segment it covered.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoInfo {
    /// Duration the container declares (the video stream's when the
    /// container has none), seconds.
    pub duration_s: f64,
    /// Source frame size, before any downscaling.
    pub width: u32,
    pub height: u32,
    /// Average frame rate the stream declares (0 when unknown).
    pub fps: f64,
    /// FFmpeg's short codec name, e.g. `h264`.
    pub codec: String,
    /// Time of the first and last delivered frame; `None` when no frame fell
    /// inside the segment.
    pub covered_s: Option<(f64, f64)>,
    /// Number of frames delivered to the callback.
    pub frames_delivered: usize,
    /// Packets the decoder rejected as damaged and skipped (0 for a clean file).
    pub damaged_packets: usize,
}

/// How to sample: rate and output size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleOptions {
    /// Samples per second of video time; must be finite and > 0.
    pub fps: f64,
    /// Downscale frames wider than this; `None` keeps the source size.
    pub max_width: Option<u32>,
}

impl Default for SampleOptions {
    fn default() -> Self {
        Self {
            fps: DEFAULT_SAMPLE_FPS,
            max_width: Some(DEFAULT_MAX_WIDTH),
        }
    }
}

/// Why a segment could not be decoded. Every variant names the file.
#[derive(Debug, Error)]
pub enum VideoError {
    #[error("video file {path} does not exist; check the path")]
    NotFound { path: PathBuf },
    #[error(
        "cannot open {path} as a media file ({reason}); check that it is a complete, readable \
         video file"
    )]
    Unreadable { path: PathBuf, reason: String },
    #[error(
        "{path} has no video stream (it may be audio-only or not media at all); pass a video file"
    )]
    NoVideoStream { path: PathBuf },
    #[error(
        "cannot decode the video stream of {path} (codec {codec}: {reason}); re-encode it, e.g. \
         `ffmpeg -i IN -c:v libx264 OUT.mp4`"
    )]
    UnsupportedCodec {
        path: PathBuf,
        codec: String,
        reason: String,
    },
    #[error("invalid segment {start_s}..{end_s} s with {fps} samples/s for {path}: {reason}")]
    InvalidRequest {
        path: PathBuf,
        start_s: f64,
        end_s: f64,
        fps: f64,
        reason: &'static str,
    },
    #[error("invalid sample times for {path}: {reason}")]
    InvalidTimes { path: PathBuf, reason: String },
    #[error(
        "segment start {start_s:.3} s is at or past the end of {path} ({duration_s:.3} s long); \
         request a start before {duration_s:.3} s"
    )]
    StartBeyondEnd {
        path: PathBuf,
        start_s: f64,
        duration_s: f64,
    },
    #[error(
        "cannot seek to {start_s:.3} s in {path} ({reason}); the file may be damaged or not \
         seekable; remux it with `ffmpeg -i IN -c copy OUT.mp4`"
    )]
    SeekFailed {
        path: PathBuf,
        start_s: f64,
        reason: String,
    },
    #[error(
        "{path} ends early: asked for {start_s:.3}..{end_s:.3} s but the stream stopped after \
         {decoded_until_s:.3} s (frames up to then were delivered; the file declares \
         {duration_s:.3} s); it is truncated or corrupt: re-download or re-encode it"
    )]
    Truncated {
        path: PathBuf,
        start_s: f64,
        end_s: f64,
        /// Time of the last decoded frame (the segment start when none was).
        decoded_until_s: f64,
        duration_s: f64,
    },
    #[error(
        "reading {path} failed near {time_s:.3} s ({reason}); the file is damaged: re-download or \
         re-encode it"
    )]
    Corrupt {
        path: PathBuf,
        time_s: f64,
        reason: String,
    },
    #[error("converting the frame at {time_s:.3} s of {path} to RGB failed: {reason}")]
    Convert {
        path: PathBuf,
        time_s: f64,
        reason: String,
    },
    #[error("the frame consumer stopped at {time_s:.3} s of {path}: {source}")]
    Consumer {
        path: PathBuf,
        time_s: f64,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Samples `[start_s, end_s)` of the video at `fps` frames per second,
/// downscaled to at most [`DEFAULT_MAX_WIDTH`] pixels wide. See the module
/// documentation for the timing rules.
pub fn sample_frames<E>(
    path: &Path,
    start_s: f64,
    end_s: f64,
    fps: f64,
    on_frame: impl FnMut(SampledFrame) -> Result<(), E>,
) -> Result<VideoInfo, VideoError>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let options = SampleOptions {
        fps,
        ..SampleOptions::default()
    };
    sample_frames_with(path, start_s, end_s, &options, on_frame)
}

/// Reads the stream properties of a video without decoding frames.
pub fn probe(path: &Path) -> Result<VideoInfo, VideoError> {
    let input = open_input(path)?;
    let video = VideoStream::find(path, &input)?;
    Ok(video.info())
}

/// [`sample_frames`] with explicit [`SampleOptions`].
pub fn sample_frames_with<E>(
    path: &Path,
    start_s: f64,
    end_s: f64,
    options: &SampleOptions,
    mut on_frame: impl FnMut(SampledFrame) -> Result<(), E>,
) -> Result<VideoInfo, VideoError>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let invalid = |reason| VideoError::InvalidRequest {
        path: path.to_path_buf(),
        start_s,
        end_s,
        fps: options.fps,
        reason,
    };
    if !(start_s.is_finite() && start_s >= 0.0) {
        return Err(invalid("start must be a finite number of seconds >= 0"));
    }
    if end_s.is_nan() || end_s <= start_s {
        return Err(invalid("end must be after start"));
    }
    if !(options.fps.is_finite() && options.fps > 0.0) {
        return Err(invalid(
            "the sample rate must be a finite number > 0 (default 2)",
        ));
    }
    if options.max_width == Some(0) {
        return Err(invalid("max_width must be at least 1 pixel, or None"));
    }
    decode_schedule(
        path,
        start_s,
        end_s,
        Schedule::Rate(options.fps),
        options.max_width,
        &mut on_frame,
    )
}

/// Decodes the frames at or just after each of `times` (seconds, ascending), downscaled to at
/// most `max_width` pixels wide: the frames a caller chose earlier (shot representatives),
/// decoded again without storing every sample. One seek to the first time, then one pass, so
/// the cost is that of decoding `times[0]..times[last]`. A time that several entries share, or
/// that no later frame serves (past the last frame), gets no frame of its own; callers match
/// delivered frames to their times by [`SampledFrame::time_s`].
pub fn sample_frames_at<E>(
    path: &Path,
    times: &[f64],
    max_width: Option<u32>,
    mut on_frame: impl FnMut(SampledFrame) -> Result<(), E>,
) -> Result<VideoInfo, VideoError>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let invalid = |reason: String| VideoError::InvalidTimes {
        path: path.to_path_buf(),
        reason,
    };
    let (Some(&first), Some(&last)) = (times.first(), times.last()) else {
        return Err(invalid("no sample time was given".to_string()));
    };
    if let Some(bad) = times.iter().find(|t| !(t.is_finite() && **t >= 0.0)) {
        return Err(invalid(format!(
            "{bad} is not a finite number of seconds >= 0"
        )));
    }
    if let Some(pair) = times.windows(2).find(|pair| pair[1] < pair[0]) {
        return Err(invalid(format!(
            "times must be ascending, but {} comes after {}",
            pair[1], pair[0]
        )));
    }
    if max_width == Some(0) {
        return Err(invalid(
            "max_width must be at least 1 pixel, or None".to_string(),
        ));
    }
    decode_schedule(
        path,
        first,
        last,
        Schedule::Times(times),
        max_width,
        &mut on_frame,
    )
}

/// Which frames a decode pass delivers.
#[derive(Clone, Copy)]
enum Schedule<'t> {
    /// `start + k / fps` for every `k` with a time before the end.
    Rate(f64),
    /// Exactly these times (ascending); the pass ends once the last is served.
    Times(&'t [f64]),
}

/// The decode loop shared by rate and explicit-time sampling. `end_s` is the end of the
/// segment for [`Schedule::Rate`] and the last wanted time for [`Schedule::Times`].
fn decode_schedule<E>(
    path: &Path,
    start_s: f64,
    end_s: f64,
    schedule: Schedule<'_>,
    max_width: Option<u32>,
    on_frame: &mut impl FnMut(SampledFrame) -> Result<(), E>,
) -> Result<VideoInfo, VideoError>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut input = open_input(path)?;
    let video = VideoStream::find(path, &input)?;
    let mut info = video.info();
    if info.duration_s > 0.0 && start_s >= info.duration_s {
        return Err(VideoError::StartBeyondEnd {
            path: path.to_path_buf(),
            start_s,
            duration_s: info.duration_s,
        });
    }
    // Past the declared end there is nothing to decode; clamping keeps the
    // truncation check below from blaming a healthy file.
    let effective_end_s = if info.duration_s > 0.0 {
        end_s.min(info.duration_s)
    } else {
        end_s
    };
    // Explicit times stop when the last one is served (or the file ends), not at a segment end:
    // the frame serving the last time lies after it.
    let stop_s = match schedule {
        Schedule::Rate(_) => effective_end_s,
        Schedule::Times(_) if info.duration_s > 0.0 => info.duration_s,
        Schedule::Times(_) => f64::INFINITY,
    };

    let mut decoder = video.open_decoder(path)?;

    if start_s > 0.0 {
        // Container-level seek in AV_TIME_BASE units, landing on the keyframe
        // at or before the target (max_ts = target); frames before the start
        // are decoded and dropped below.
        let target = ((start_s + video.start_offset_s) * f64::from(ffmpeg::ffi::AV_TIME_BASE))
            .floor() as i64;
        input
            // ffmpeg-next passes `..target` through as max_ts = target (inclusive).
            .seek(target, ..target)
            .map_err(|e| VideoError::SeekFailed {
                path: path.to_path_buf(),
                start_s,
                reason: e.to_string(),
            })?;
    }

    let mut sampler = Sampler {
        path,
        start_s,
        end_s: stop_s,
        schedule,
        next_sample: 0,
        max_width,
        scaler: None,
        last_frame_s: None,
        first_delivered_s: None,
        last_delivered_s: None,
        delivered: 0,
        done: false,
    };
    let mut decoded = ffmpeg::frame::Video::empty();
    let mut damaged_packets = 0usize;

    while !sampler.done {
        // A fresh packet each time: `Packet::read` does not release the previous buffer (only
        // dropping does), so reusing one packet leaks every packet of the file.
        let mut packet = ffmpeg::Packet::empty();
        match packet.read(&mut input) {
            Ok(()) => {}
            Err(ffmpeg::Error::Eof) => break,
            Err(e) => {
                return Err(VideoError::Corrupt {
                    path: path.to_path_buf(),
                    time_s: sampler.last_frame_s.unwrap_or(start_s),
                    reason: e.to_string(),
                });
            }
        }
        if packet.stream() != video.index {
            continue;
        }
        match decoder.send_packet(&packet) {
            Ok(()) => {}
            // A damaged packet spoils a few frames, not the file: FFmpeg's own
            // CLI skips it too. The truncation check still catches a stream
            // that stops producing frames.
            Err(ffmpeg::Error::InvalidData) => {
                damaged_packets += 1;
                continue;
            }
            Err(e) => {
                return Err(VideoError::Corrupt {
                    path: path.to_path_buf(),
                    time_s: sampler.last_frame_s.unwrap_or(start_s),
                    reason: e.to_string(),
                });
            }
        }
        while !sampler.done && decoder.receive_frame(&mut decoded).is_ok() {
            sampler.offer(&video, &decoded, on_frame)?;
        }
    }
    if !sampler.done {
        // Drain the frames the decoder still holds (B-frame reordering,
        // frame threads) so the last sample times are served.
        let _ = decoder.send_eof();
        while !sampler.done && decoder.receive_frame(&mut decoded).is_ok() {
            sampler.offer(&video, &decoded, on_frame)?;
        }
    }

    // A stream may end a frame or two short of its declared duration; more
    // than that means the data stopped before the header said it would.
    let frame_slack_s = if info.fps > 0.0 { 2.0 / info.fps } else { 0.1 };
    let decoded_until_s = sampler.last_frame_s.unwrap_or(start_s);
    if !sampler.done && decoded_until_s + frame_slack_s < effective_end_s {
        return Err(VideoError::Truncated {
            path: path.to_path_buf(),
            start_s,
            end_s,
            decoded_until_s,
            duration_s: info.duration_s,
        });
    }

    info.covered_s = sampler.first_delivered_s.zip(sampler.last_delivered_s);
    info.frames_delivered = sampler.delivered;
    info.damaged_packets = damaged_packets;
    Ok(info)
}

fn init_ffmpeg() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        // Registration cannot fail on FFmpeg >= 4; quieten the library so
        // damaged-file warnings surface through our errors, not stderr spam.
        let _ = ffmpeg::init();
        ffmpeg::util::log::set_level(ffmpeg::util::log::Level::Error);
    });
}

fn open_input(path: &Path) -> Result<ffmpeg::format::context::Input, VideoError> {
    init_ffmpeg();
    if !path.exists() {
        return Err(VideoError::NotFound {
            path: path.to_path_buf(),
        });
    }
    ffmpeg::format::input(path).map_err(|e| VideoError::Unreadable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// The chosen video stream's timing and codec parameters.
struct VideoStream {
    index: usize,
    time_base: f64,
    /// Stream start time in stream ticks; subtracted so time 0 is the first frame.
    start_pts: i64,
    /// The same offset relative to the container clock, in seconds, for seeking.
    start_offset_s: f64,
    parameters: ffmpeg::codec::Parameters,
    avg_fps: f64,
    duration_s: f64,
}

impl VideoStream {
    fn find(path: &Path, input: &ffmpeg::format::context::Input) -> Result<Self, VideoError> {
        let stream = input
            .streams()
            .best(ffmpeg::media::Type::Video)
            .ok_or_else(|| VideoError::NoVideoStream {
                path: path.to_path_buf(),
            })?;
        let time_base = f64::from(stream.time_base());
        let start_pts = match stream.start_time() {
            ffmpeg::ffi::AV_NOPTS_VALUE => 0,
            t => t,
        };
        let avg_fps = match stream.avg_frame_rate() {
            r if r.denominator() != 0 && r.numerator() > 0 => f64::from(r),
            _ => 0.0,
        };
        let container_duration = input.duration();
        let duration_s = if container_duration > 0 {
            container_duration as f64 / f64::from(ffmpeg::ffi::AV_TIME_BASE)
        } else if stream.duration() > 0 {
            stream.duration() as f64 * time_base
        } else {
            0.0
        };
        Ok(Self {
            index: stream.index(),
            time_base,
            start_pts,
            start_offset_s: start_pts as f64 * time_base,
            parameters: stream.parameters(),
            avg_fps,
            duration_s,
        })
    }

    fn info(&self) -> VideoInfo {
        // SAFETY: the parameters struct is owned by `self.parameters` and
        // valid for its lifetime; width/height are plain ints.
        let (width, height) = unsafe {
            let p = self.parameters.as_ptr();
            ((*p).width.max(0) as u32, (*p).height.max(0) as u32)
        };
        VideoInfo {
            duration_s: self.duration_s,
            width,
            height,
            fps: self.avg_fps,
            codec: self.parameters.id().name().to_string(),
            covered_s: None,
            frames_delivered: 0,
            damaged_packets: 0,
        }
    }

    fn open_decoder(&self, path: &Path) -> Result<ffmpeg::decoder::Video, VideoError> {
        let codec_name = self.parameters.id().name().to_string();
        let unsupported = |e: ffmpeg::Error| VideoError::UnsupportedCodec {
            path: path.to_path_buf(),
            codec: codec_name.clone(),
            reason: e.to_string(),
        };
        let mut context = ffmpeg::codec::context::Context::from_parameters(self.parameters.clone())
            .map_err(unsupported)?;
        // Frame threads: decoding every frame is the cost of accurate
        // seeking and timestamp sampling, so let FFmpeg use the cores.
        context.set_threading(ffmpeg::codec::threading::Config {
            kind: ffmpeg::codec::threading::Type::Frame,
            count: 0,
            ..Default::default()
        });
        context.decoder().video().map_err(unsupported)
    }

    fn frame_time_s(&self, frame: &ffmpeg::frame::Video) -> Option<f64> {
        let ticks = frame.timestamp().or_else(|| frame.pts())?;
        Some((ticks - self.start_pts) as f64 * self.time_base)
    }
}

/// Picks frames at the sample times and converts them.
struct Sampler<'p> {
    path: &'p Path,
    start_s: f64,
    /// Frames at or after this end the pass.
    end_s: f64,
    schedule: Schedule<'p>,
    /// Index `k` of the next sample time (`start + k / fps`, or `times[k]`).
    next_sample: u64,
    max_width: Option<u32>,
    /// Rebuilt whenever the decoded size or pixel format changes mid-stream.
    scaler: Option<scaling::Context>,
    last_frame_s: Option<f64>,
    first_delivered_s: Option<f64>,
    last_delivered_s: Option<f64>,
    delivered: usize,
    done: bool,
}

/// Timestamps are rationals turned into floats; a frame this close before a
/// sample time is treated as on it.
const TIME_EPSILON_S: f64 = 1e-6;

impl Sampler<'_> {
    fn sample_time(&self, k: u64) -> f64 {
        match self.schedule {
            Schedule::Rate(fps) => self.start_s + k as f64 / fps,
            Schedule::Times(times) => usize::try_from(k)
                .ok()
                .and_then(|k| times.get(k))
                .copied()
                .unwrap_or(f64::INFINITY),
        }
    }

    fn offer<E>(
        &mut self,
        video: &VideoStream,
        frame: &ffmpeg::frame::Video,
        on_frame: &mut impl FnMut(SampledFrame) -> Result<(), E>,
    ) -> Result<(), VideoError>
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        // Frames without any timestamp cannot be placed in time; skip them.
        let Some(time_s) = video.frame_time_s(frame) else {
            return Ok(());
        };
        self.last_frame_s = Some(self.last_frame_s.map_or(time_s, |t| t.max(time_s)));
        if time_s + TIME_EPSILON_S >= self.end_s {
            self.done = true;
            return Ok(());
        }
        if time_s + TIME_EPSILON_S < self.sample_time(self.next_sample) {
            return Ok(());
        }
        // This frame serves every sample time up to its own time.
        while self.sample_time(self.next_sample) <= time_s + TIME_EPSILON_S {
            self.next_sample += 1;
        }
        let sampled = self.convert(frame, time_s)?;
        self.first_delivered_s.get_or_insert(time_s);
        self.last_delivered_s = Some(time_s);
        self.delivered += 1;
        on_frame(sampled).map_err(|e| VideoError::Consumer {
            path: self.path.to_path_buf(),
            time_s,
            source: e.into(),
        })?;
        if self.sample_time(self.next_sample) + TIME_EPSILON_S >= self.end_s {
            self.done = true;
        }
        Ok(())
    }

    fn convert(
        &mut self,
        frame: &ffmpeg::frame::Video,
        time_s: f64,
    ) -> Result<SampledFrame, VideoError> {
        let convert_error = |reason: String| VideoError::Convert {
            path: self.path.to_path_buf(),
            time_s,
            reason,
        };
        let (src_w, src_h, src_format) = (frame.width(), frame.height(), frame.format());
        if src_w == 0 || src_h == 0 {
            return Err(convert_error("the decoder produced an empty frame".into()));
        }
        let (dst_w, dst_h) = output_size(src_w, src_h, self.max_width);
        let reusable = self.scaler.as_ref().is_some_and(|s| {
            let input = s.input();
            input.width == src_w && input.height == src_h && input.format == src_format
        });
        if !reusable {
            self.scaler = Some(
                scaling::Context::get(
                    src_format,
                    src_w,
                    src_h,
                    Pixel::RGB24,
                    dst_w,
                    dst_h,
                    // Area averaging: the right filter for downscaling, and
                    // exact at 1:1.
                    scaling::Flags::AREA,
                )
                .map_err(|e| convert_error(format!("no conversion from {src_format:?}: {e}")))?,
            );
        }
        let scaler = self.scaler.as_mut().expect("scaler was just built");
        let mut rgb_frame = ffmpeg::frame::Video::empty();
        scaler
            .run(frame, &mut rgb_frame)
            .map_err(|e| convert_error(e.to_string()))?;

        // swscale pads rows to an alignment; copy them out tightly packed.
        let row_bytes = dst_w as usize * 3;
        let stride = rgb_frame.stride(0);
        let plane = rgb_frame.data(0);
        let mut rgb = Vec::with_capacity(row_bytes * dst_h as usize);
        for row in 0..dst_h as usize {
            rgb.extend_from_slice(&plane[row * stride..row * stride + row_bytes]);
        }
        Ok(SampledFrame {
            time_s,
            width: dst_w,
            height: dst_h,
            rgb,
        })
    }
}

/// Output size for a source size and width cap, keeping the aspect ratio
/// and an even height (chroma-subsampled consumers prefer even sizes).
fn output_size(src_w: u32, src_h: u32, max_width: Option<u32>) -> (u32, u32) {
    match max_width {
        Some(max_w) if src_w > max_w => {
            let h = (f64::from(src_h) * f64::from(max_w) / f64::from(src_w)).round() as u32;
            let h = (h & !1).max(2);
            (max_w, h)
        }
        _ => (src_w, src_h),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_size_keeps_aspect_and_caps_width() {
        assert_eq!(output_size(1920, 1080, Some(640)), (640, 360));
        assert_eq!(output_size(640, 360, Some(640)), (640, 360));
        assert_eq!(output_size(320, 240, Some(640)), (320, 240));
        assert_eq!(output_size(4000, 10, None), (4000, 10));
        assert_eq!(output_size(4000, 1, Some(100)), (100, 2));
    }

    use crate::shared_media;

    /// "Tears of Steel" 05:00-05:10, (CC) Blender Foundation, CC BY 3.0.
    fn tears_of_steel() -> PathBuf {
        shared_media("tears_of_steel/clip_01_tears_of_steel.mp4")
    }

    fn collect(
        path: &Path,
        start_s: f64,
        end_s: f64,
        options: &SampleOptions,
    ) -> Result<(Vec<SampledFrame>, VideoInfo), VideoError> {
        let mut frames = Vec::new();
        let info = sample_frames_with(path, start_s, end_s, options, |frame| {
            frames.push(frame);
            Ok::<(), std::convert::Infallible>(())
        })?;
        Ok((frames, info))
    }

    #[test]
    fn two_second_segment_at_two_fps_gives_four_timed_rgb_frames() {
        let (frames, info) =
            collect(&tears_of_steel(), 3.0, 5.0, &SampleOptions::default()).unwrap();
        let times: Vec<f64> = frames.iter().map(|f| f.time_s).collect();
        assert_eq!(frames.len(), 4, "times {times:?}");
        for (frame, expected) in frames.iter().zip([3.0, 3.5, 4.0, 4.5]) {
            // The first frame at or after the sample time, at 24 fps.
            assert!(
                frame.time_s >= expected - 1e-6 && frame.time_s < expected + 1.0 / 24.0,
                "times {times:?}"
            );
            assert_eq!((frame.width, frame.height), (640, 360));
            assert_eq!(frame.rgb.len(), 640 * 360 * 3);
        }
        assert_eq!(info.codec, "h264");
        assert_eq!((info.width, info.height), (640, 360));
        assert!((info.fps - 24.0).abs() < 1e-9);
        assert!((info.duration_s - 10.0).abs() < 0.05);
        assert_eq!(info.frames_delivered, 4);
        assert_eq!(info.covered_s, Some((times[0], times[3])));
    }

    #[test]
    fn seek_is_accurate_between_keyframes() {
        for start in [0.0, 1.3, 5.31, 7.7, 9.9] {
            let (frames, _) = collect(
                &tears_of_steel(),
                start,
                start + 0.4,
                &SampleOptions::default(),
            )
            .unwrap();
            let first = frames.first().expect("a frame").time_s;
            assert!(
                first >= start - 1e-6 && first < start + 1.0 / 24.0 + 1e-6,
                "start {start}: first frame at {first}"
            );
            assert_eq!(frames.len(), 1, "start {start}");
        }
    }

    #[test]
    fn frames_are_downscaled_keeping_aspect() {
        let options = SampleOptions {
            fps: 1.0,
            max_width: Some(320),
        };
        let (frames, _) = collect(&tears_of_steel(), 0.0, 2.0, &options).unwrap();
        assert_eq!(frames.len(), 2);
        for frame in &frames {
            assert_eq!((frame.width, frame.height), (320, 180));
            assert_eq!(frame.rgb.len(), 320 * 180 * 3);
        }
    }

    #[test]
    fn decoded_pixels_match_the_picture() {
        // The GRID backdrop is blue-grey and the clip is not blank: a swapped
        // channel order or a stride bug would show up here.
        let path = shared_media("grid/bbaf2n.mpg");
        let (frames, info) = collect(&path, 0.0, 1.0, &SampleOptions::default()).unwrap();
        assert_eq!(info.codec, "mpeg1video");
        let frame = &frames[0];
        assert_eq!((frame.width, frame.height), (360, 288));
        let mean = |c: usize| {
            frame
                .rgb
                .iter()
                .skip(c)
                .step_by(3)
                .map(|&v| f64::from(v))
                .sum::<f64>()
                / f64::from(frame.width * frame.height)
        };
        let (r, g, b) = (mean(0), mean(1), mean(2));
        assert!(r > 10.0 && g > 10.0 && b > 10.0, "mean rgb {r} {g} {b}");
        let variance = frame
            .rgb
            .iter()
            .map(|&v| (f64::from(v) - g).powi(2))
            .sum::<f64>()
            / frame.rgb.len() as f64;
        assert!(variance > 100.0, "frame looks blank");
    }

    #[test]
    fn segment_end_past_the_video_is_clamped_and_reported() {
        let (frames, info) =
            collect(&tears_of_steel(), 8.0, 30.0, &SampleOptions::default()).unwrap();
        let times: Vec<f64> = frames.iter().map(|f| f.time_s).collect();
        assert_eq!(times, vec![8.0, 8.5, 9.0, 9.5]);
        assert_eq!(info.covered_s, Some((8.0, 9.5)));
    }

    #[test]
    fn start_past_the_end_names_both_times() {
        let err = collect(&tears_of_steel(), 12.0, 14.0, &SampleOptions::default()).unwrap_err();
        assert!(matches!(err, VideoError::StartBeyondEnd { .. }), "{err}");
        let message = err.to_string();
        assert!(
            message.contains("12.000") && message.contains("10.000"),
            "{message}"
        );
        assert!(message.contains("clip_01_tears_of_steel.mp4"), "{message}");
    }

    #[test]
    fn invalid_requests_are_rejected() {
        let path = tears_of_steel();
        let bad = [
            (2.0, 1.0, 2.0),
            (-1.0, 1.0, 2.0),
            (0.0, 1.0, 0.0),
            (f64::NAN, 1.0, 2.0),
        ];
        for (start, end, fps) in bad {
            let options = SampleOptions {
                fps,
                ..SampleOptions::default()
            };
            let err = collect(&path, start, end, &options).unwrap_err();
            assert!(matches!(err, VideoError::InvalidRequest { .. }), "{err}");
        }
    }

    #[test]
    fn non_media_and_audio_only_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.mp4");
        std::fs::write(&text, "this is not a video\n".repeat(50)).unwrap();
        let err = collect(&text, 0.0, 1.0, &SampleOptions::default()).unwrap_err();
        assert!(matches!(err, VideoError::Unreadable { .. }), "{err}");
        assert!(err.to_string().contains("notes.mp4"));

        // A valid 1 s mono 8 kHz 16-bit WAV of silence: media, but no video.
        let samples = 8000u32;
        let mut wav = Vec::new();
        wav.extend(b"RIFF");
        wav.extend((36 + samples * 2).to_le_bytes());
        wav.extend(b"WAVEfmt ");
        wav.extend(16u32.to_le_bytes());
        wav.extend(1u16.to_le_bytes()); // PCM
        wav.extend(1u16.to_le_bytes()); // mono
        wav.extend(8000u32.to_le_bytes());
        wav.extend(16000u32.to_le_bytes()); // byte rate
        wav.extend(2u16.to_le_bytes()); // block align
        wav.extend(16u16.to_le_bytes()); // bits per sample
        wav.extend(b"data");
        wav.extend((samples * 2).to_le_bytes());
        wav.extend(vec![0u8; samples as usize * 2]);
        let audio = dir.path().join("silence.wav");
        std::fs::write(&audio, wav).unwrap();
        let err = collect(&audio, 0.0, 1.0, &SampleOptions::default()).unwrap_err();
        assert!(matches!(err, VideoError::NoVideoStream { .. }), "{err}");
        assert!(err.to_string().contains("silence.wav"));
    }

    /// Keeps the first 40% of `source`'s bytes in `target`.
    fn truncate_copy(source: &Path, target: &Path) {
        let bytes = std::fs::read(source).unwrap();
        std::fs::write(target, &bytes[..bytes.len() * 4 / 10]).unwrap();
    }

    #[test]
    fn truncated_file_with_index_at_the_end_cannot_be_opened() {
        // The shipped clip keeps its MP4 index ("moov") at the end, so a cut
        // copy loses it: FFmpeg cannot open it at all.
        let dir = tempfile::tempdir().unwrap();
        let cut = dir.path().join("cut.mp4");
        truncate_copy(&tears_of_steel(), &cut);
        let err = collect(&cut, 0.0, 10.0, &SampleOptions::default()).unwrap_err();
        assert!(matches!(err, VideoError::Unreadable { .. }), "{err}");
        assert!(err.to_string().contains("cut.mp4"));
    }

    #[test]
    fn truncated_stream_is_an_error_naming_the_covered_range() {
        // With the index moved to the front (as web video is), a cut copy
        // opens, declares 10 s, and its data stops early.
        let dir = tempfile::tempdir().unwrap();
        let faststart = dir.path().join("faststart.mp4");
        let status = std::process::Command::new("ffmpeg")
            .args(["-v", "error", "-y", "-i"])
            .arg(tears_of_steel())
            .args(["-c", "copy", "-movflags", "+faststart"])
            .arg(&faststart)
            .status()
            .expect(
                "the ffmpeg CLI (Debian package `ffmpeg`) is needed to build this test's input",
            );
        assert!(status.success());
        let cut = dir.path().join("cut_faststart.mp4");
        truncate_copy(&faststart, &cut);

        let mut delivered = Vec::new();
        let err = sample_frames(&cut, 0.0, 10.0, 2.0, |frame| {
            delivered.push(frame.time_s);
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap_err();
        let VideoError::Truncated {
            decoded_until_s,
            duration_s,
            ..
        } = &err
        else {
            panic!("expected Truncated, got {err}");
        };
        assert!((duration_s - 10.0).abs() < 0.05);
        assert!(*decoded_until_s > 1.0 && *decoded_until_s < 9.0, "{err}");
        // Everything delivered lies inside the reported range.
        assert!(!delivered.is_empty());
        assert!(
            delivered.iter().all(|t| t <= decoded_until_s),
            "{delivered:?} vs {err}"
        );
        let message = err.to_string();
        assert!(
            message.contains("cut_faststart.mp4") && message.contains("ends early"),
            "{message}"
        );

        // A segment wholly before the cut still decodes cleanly.
        let (frames, _) = collect(&cut, 0.0, 1.0, &SampleOptions::default()).unwrap();
        assert_eq!(frames.len(), 2);
    }

    #[test]
    fn variable_frame_rate_is_sampled_by_timestamp() {
        // 25 fps for the first 2 s, then one frame every 0.2 s (timestamps
        // kept, so the frame rate changes mid-stream). GRID corpus clip,
        // Cooke et al. 2006, CC BY 4.0.
        let dir = tempfile::tempdir().unwrap();
        let vfr = dir.path().join("vfr.mp4");
        let status = std::process::Command::new("ffmpeg")
            .args(["-v", "error", "-y", "-i"])
            .arg(shared_media("grid/bbaf2n.mpg"))
            .args([
                "-an",
                "-vf",
                "select='lt(n,50)+not(mod(n,5))'",
                "-fps_mode",
                "vfr",
            ])
            .args(["-c:v", "mpeg4", "-q:v", "3"])
            .arg(&vfr)
            .status()
            .expect(
                "the ffmpeg CLI (Debian package `ffmpeg`) is needed to build this test's input",
            );
        assert!(status.success());
        let (frames, _) = collect(&vfr, 0.0, 3.0, &SampleOptions::default()).unwrap();
        let times: Vec<f64> = frames.iter().map(|f| f.time_s).collect();
        // First frame at or after 0, 0.5, ... 2.5 s: 0.5 and 1.5 fall between
        // 25 fps frames; 2.5 falls in the sparse part, where the next frame is 2.6.
        let expected = [0.0, 0.52, 1.0, 1.52, 2.0, 2.6];
        assert_eq!(times.len(), expected.len(), "{times:?}");
        for (t, e) in times.iter().zip(expected) {
            assert!((t - e).abs() < 1e-3, "{times:?}");
        }
    }

    #[test]
    fn consumer_errors_stop_decoding_and_are_passed_on() {
        let mut seen = 0;
        let err = sample_frames(&tears_of_steel(), 0.0, 10.0, 2.0, |_| {
            seen += 1;
            if seen == 3 { Err("disk full") } else { Ok(()) }
        })
        .unwrap_err();
        assert_eq!(seen, 3);
        assert!(matches!(err, VideoError::Consumer { .. }), "{err}");
        assert!(err.to_string().contains("disk full"));
    }

    #[test]
    fn explicit_times_get_the_first_frame_at_or_after_each() {
        let times = [1.0, 3.3, 3.31, 7.71];
        let mut frames = Vec::new();
        let info = sample_frames_at(&tears_of_steel(), &times, Some(320), |frame| {
            frames.push(frame);
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap();
        let got: Vec<f64> = frames.iter().map(|f| f.time_s).collect();
        // 3.3 and 3.31 fall between the same two 24 fps frames: one frame serves both.
        assert_eq!(got.len(), 3, "{got:?}");
        for (t, wanted) in got.iter().zip([1.0, 3.3, 7.71]) {
            assert!(
                *t >= wanted - 1e-6 && *t < wanted + 1.0 / 24.0 + 1e-6,
                "{got:?}"
            );
        }
        assert!(frames.iter().all(|f| (f.width, f.height) == (320, 180)));
        assert_eq!(info.frames_delivered, 3);

        // The same frames as rate sampling delivers at those times.
        let (rate, _) = collect(
            &tears_of_steel(),
            7.71,
            7.8,
            &SampleOptions {
                fps: 2.0,
                max_width: Some(320),
            },
        )
        .unwrap();
        assert_eq!(rate[0], frames[2]);
    }

    #[test]
    fn explicit_times_are_checked() {
        let path = tears_of_steel();
        let none = |times: &[f64]| {
            sample_frames_at(&path, times, None, |_| {
                Ok::<(), std::convert::Infallible>(())
            })
            .unwrap_err()
        };
        for bad in [&[][..], &[2.0, 1.0][..], &[f64::NAN][..], &[-1.0][..]] {
            let error = none(bad);
            assert!(matches!(error, VideoError::InvalidTimes { .. }), "{error}");
            assert!(
                error.to_string().contains("clip_01_tears_of_steel.mp4"),
                "{error}"
            );
        }
        assert!(matches!(none(&[12.0]), VideoError::StartBeyondEnd { .. }));
        // A later time past the end is simply not served.
        let mut served = Vec::new();
        sample_frames_at(&path, &[3.0, 12.0], None, |frame| {
            served.push(frame.time_s);
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap();
        assert_eq!(served, vec![3.0]);
    }

    #[test]
    fn probe_reads_stream_facts() {
        let info = probe(&tears_of_steel()).unwrap();
        assert_eq!(
            (info.width, info.height, info.codec.as_str()),
            (640, 360, "h264")
        );
    }

    #[test]
    fn missing_file_is_named() {
        let path = Path::new("/definitely/not/here.mp4");
        let err = sample_frames(path, 0.0, 1.0, 2.0, |_| {
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap_err();
        assert!(matches!(err, VideoError::NotFound { .. }));
        assert!(err.to_string().contains("/definitely/not/here.mp4"));
    }
}

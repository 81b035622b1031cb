//! Shot changes: per-frame descriptors segmented with PELT (RBF cost).
//!
//! A shot boundary is reported at the first sampled frame of the new shot,
//! so at 2 samples/s its time is at most 0.5 s after the real cut.

use std::path::Path;

use super::features::{self, FeatureError};
use super::video::{self, VideoError, VideoInfo};
use viss_pelt::{PeltError, PeltParams};

/// PELT settings for shot detection on frames sampled at about 2 per second.
///
/// PELT's generic defaults (`penalty 5, jump 5`) cannot serve here:
/// `jump = 5` only allows a cut every 5 samples (2.5 s at 2 fps), and with
/// the RBF cost splitting `n` frames into perfectly separated runs of `a` and
/// `n - a` frames gains at most `2 a (n - a) / n`, which for a 1 s shot
/// (2 samples) inside 10 s is 3.6 — below a penalty of 5 whatever the
/// descriptor. With [`super::features`]' descriptor, consecutive samples
/// inside a shot are at squared distance <= 0.2 and across a cut >= 0.66, so
/// penalty 1 finds every cut in the test clips (penalty 0.5 to 2 give the
/// same cuts on the GRID montage). `min_size = 2` keeps a one-sample flash
/// from becoming a shot.
pub const SHOT_PELT_PARAMS: PeltParams = PeltParams {
    penalty: 1.0,
    min_size: 2,
    jump: 1,
    gamma: None,
};

/// The start of a new shot.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ShotBoundary {
    /// Index of the first sampled frame of the new shot.
    pub index: usize,
    /// Time of that frame, seconds.
    pub time_s: f64,
}

/// Why shots could not be found.
#[derive(Debug, thiserror::Error)]
pub enum ShotError {
    #[error("got {features} feature vectors but {times} frame times; pass one time per frame")]
    LengthMismatch { features: usize, times: usize },
    #[error("change-point search failed: {0}")]
    Pelt(#[from] PeltError),
    #[error(transparent)]
    Video(#[from] VideoError),
    #[error("descriptor of the frame at {time_s:.3} s failed: {source}")]
    Feature {
        time_s: f64,
        #[source]
        source: FeatureError,
    },
}

/// Finds shot changes in a sequence of frame descriptors taken at `times`.
///
/// Fewer than two frames cannot hold a change, so they give no boundaries
/// rather than an error; PELT's own errors (ragged or non-finite features,
/// bad parameters) are passed on.
pub fn shot_changes(
    frames_features: &[Vec<f32>],
    times: &[f64],
    params: &PeltParams,
) -> Result<Vec<ShotBoundary>, ShotError> {
    if frames_features.len() != times.len() {
        return Err(ShotError::LengthMismatch {
            features: frames_features.len(),
            times: times.len(),
        });
    }
    if frames_features.len() < 2 {
        return Ok(Vec::new());
    }
    let breakpoints = viss_pelt::segment(frames_features, params)?.breakpoints;
    // PELT returns segment ends; every end except the last (== frame count)
    // is where a new segment starts.
    Ok(breakpoints
        .into_iter()
        .filter(|&b| b > 0 && b < frames_features.len())
        .map(|index| ShotBoundary {
            index,
            time_s: times[index],
        })
        .collect())
}

/// One frame index per shot: the middle frame of each segment, which is
/// furthest from the transitions (fades and cuts blur the edges).
///
/// `boundaries` are shot starts (or PELT segment ends: a trailing
/// `frame_count` and out-of-range values are ignored), `frame_count` the
/// number of frames.
pub fn representative_frames(boundaries: &[usize], frame_count: usize) -> Vec<usize> {
    if frame_count == 0 {
        return Vec::new();
    }
    let mut starts: Vec<usize> = std::iter::once(0)
        .chain(
            boundaries
                .iter()
                .copied()
                .filter(|&b| b > 0 && b < frame_count),
        )
        .collect();
    starts.sort_unstable();
    starts.dedup();
    starts
        .iter()
        .enumerate()
        .map(|(i, &start)| {
            let end = starts.get(i + 1).copied().unwrap_or(frame_count);
            start + (end - start - 1) / 2
        })
        .collect()
}

/// Shots found in one segment of a video file.
#[derive(Debug, Clone, PartialEq)]
pub struct ShotDetection {
    /// Times of the sampled frames.
    pub times: Vec<f64>,
    pub boundaries: Vec<ShotBoundary>,
    /// Decoder facts, including the range actually covered.
    pub video: VideoInfo,
    /// [`features::DESCRIPTOR_ID`] of the descriptors used.
    pub descriptor: &'static str,
}

/// Decodes `[start_s, end_s)` of `path` at `fps`, describes each frame and
/// finds shot changes. Frames are dropped as soon as they are described,
/// so memory grows only by one descriptor per sample.
pub fn detect_shots(
    path: &Path,
    start_s: f64,
    end_s: f64,
    fps: f64,
    params: &PeltParams,
) -> Result<ShotDetection, ShotError> {
    let mut times = Vec::new();
    let mut descriptors = Vec::new();
    let info = video::sample_frames(path, start_s, end_s, fps, |frame| {
        let descriptor = features::frame_descriptor(&frame.rgb, frame.width, frame.height)
            .map_err(|source| ShotError::Feature {
                time_s: frame.time_s,
                source,
            })?;
        times.push(frame.time_s);
        descriptors.push(descriptor);
        Ok::<(), ShotError>(())
    })?;
    let boundaries = shot_changes(&descriptors, &times, params)?;
    Ok(ShotDetection {
        times,
        boundaries,
        video: info,
        descriptor: features::DESCRIPTOR_ID,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::shared_media;

    #[derive(serde::Deserialize)]
    struct ShotTruth {
        file: String,
        hard_cuts: Vec<HardCut>,
        gradual_transitions: Vec<GradualTransition>,
    }
    #[derive(serde::Deserialize)]
    struct HardCut {
        time_s: f64,
    }
    #[derive(serde::Deserialize)]
    struct GradualTransition {
        start_s: f64,
        end_s: f64,
    }

    /// At 2 samples/s a boundary lands on the first sample after the cut.
    const SAMPLE_FPS: f64 = 2.0;
    const TOLERANCE_S: f64 = 1.0 / SAMPLE_FPS;

    #[test]
    fn tears_of_steel_cuts_match_the_established_truth() {
        let truth_path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/video/tears_of_steel_shots.json");
        let truth: ShotTruth =
            serde_json::from_str(&std::fs::read_to_string(truth_path).unwrap()).unwrap();
        // "Tears of Steel", (CC) Blender Foundation, CC BY 3.0.
        let clip = shared_media(&truth.file);
        let found = detect_shots(&clip, 0.0, 10.0, SAMPLE_FPS, &SHOT_PELT_PARAMS).unwrap();
        let times: Vec<f64> = found.boundaries.iter().map(|b| b.time_s).collect();
        assert_eq!(found.times.len(), 20);
        for cut in &truth.hard_cuts {
            assert!(
                times.iter().any(|t| (t - cut.time_s).abs() <= TOLERANCE_S),
                "cut at {} s not found; boundaries {times:?}",
                cut.time_s
            );
        }
        for t in &times {
            let near_cut = truth
                .hard_cuts
                .iter()
                .any(|c| (t - c.time_s).abs() <= TOLERANCE_S);
            let in_transition = truth
                .gradual_transitions
                .iter()
                .any(|g| *t >= g.start_s - TOLERANCE_S && *t <= g.end_s + TOLERANCE_S);
            assert!(
                near_cut || in_transition,
                "false cut at {t} s; boundaries {times:?}"
            );
        }

        // One representative per shot, each inside its own shot.
        let starts: Vec<usize> = found.boundaries.iter().map(|b| b.index).collect();
        let picks = representative_frames(&starts, found.times.len());
        assert_eq!(picks.len(), starts.len() + 1);
        for (shot, pick) in picks.iter().enumerate() {
            let start = if shot == 0 { 0 } else { starts[shot - 1] };
            let end = starts.get(shot).copied().unwrap_or(found.times.len());
            assert!((start..end).contains(pick));
        }
    }

    #[test]
    fn grid_montage_cuts_are_found_within_one_sample() {
        // Seven GRID corpus clips (Cooke et al. 2006, CC BY 4.0), 3 s each,
        // joined and re-encoded with the ffmpeg CLI: cuts at 3, 6, ... 18 s.
        let names = [
            "bbaf2n", "brbk7n", "lbax4n", "lwbsza", "pwij3p", "sbwe5n", "swiz3n",
        ];
        let dir = tempfile::tempdir().unwrap();
        let montage = dir.path().join("grid_montage.mp4");
        let mut ffmpeg = std::process::Command::new("ffmpeg");
        ffmpeg.args(["-v", "error", "-y"]);
        for name in names {
            ffmpeg
                .arg("-i")
                .arg(shared_media(&format!("grid/{name}.mpg")));
        }
        let inputs: String = (0..names.len()).map(|i| format!("[{i}:v]")).collect();
        let graph = format!("{inputs}concat=n={}:v=1:a=0[v]", names.len());
        let status = ffmpeg
            .args([
                "-filter_complex",
                &graph,
                "-map",
                "[v]",
                "-c:v",
                "mpeg4",
                "-q:v",
                "3",
            ])
            .arg(&montage)
            .status()
            .expect("the ffmpeg CLI (Debian package `ffmpeg`) is needed to build the montage");
        assert!(status.success());

        let found = detect_shots(&montage, 0.0, 21.0, SAMPLE_FPS, &SHOT_PELT_PARAMS).unwrap();
        let times: Vec<f64> = found.boundaries.iter().map(|b| b.time_s).collect();
        let cuts: Vec<f64> = (1..names.len()).map(|k| 3.0 * k as f64).collect();
        assert_eq!(
            times.len(),
            cuts.len(),
            "boundaries {times:?}, cuts {cuts:?}"
        );
        for (found_s, cut_s) in times.iter().zip(&cuts) {
            assert!(
                *found_s >= cut_s - 1e-6 && *found_s <= cut_s + TOLERANCE_S,
                "boundaries {times:?}, cuts {cuts:?}"
            );
        }
        assert_eq!(found.descriptor, features::DESCRIPTOR_ID);
    }

    #[test]
    fn representative_frames_are_segment_middles() {
        assert_eq!(representative_frames(&[4, 10], 10), vec![1, 6]);
        assert_eq!(representative_frames(&[], 5), vec![2]);
        assert_eq!(representative_frames(&[3], 4), vec![1, 3]);
        assert_eq!(representative_frames(&[], 0), Vec::<usize>::new());
    }

    #[test]
    fn two_flat_halves_give_one_boundary() {
        let features: Vec<Vec<f32>> = (0..20)
            .map(|i| {
                if i < 10 {
                    vec![0.0, 1.0]
                } else {
                    vec![1.0, 0.0]
                }
            })
            .collect();
        let times: Vec<f64> = (0..20).map(|i| i as f64 * 0.5).collect();
        let shots = shot_changes(&features, &times, &PeltParams::default()).unwrap();
        assert_eq!(
            shots,
            vec![ShotBoundary {
                index: 10,
                time_s: 5.0
            }]
        );
    }

    #[test]
    fn mismatched_lengths_are_an_error() {
        let err = shot_changes(&[vec![0.0]], &[], &PeltParams::default()).unwrap_err();
        assert!(matches!(
            err,
            ShotError::LengthMismatch {
                features: 1,
                times: 0
            }
        ));
    }
}

//! `keyframes`: every sampled frame becomes one feature vector (CLIP ViT-L/14 image embeddings
//! when a CLIP model is configured; offline, a classical colour/layout/edge descriptor, and the
//! record says which), the sequence is cut into shots by PELT change-point detection with an RBF
//! kernel cost, and each shot keeps one representative frame: its middle one, furthest from the
//! transitions. Representatives are kept as times; `detect` decodes them again.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{AppCtx, Env, JobCtx, JobError, Level, Outputs, Stage, StageFailure};
use crate::media::features::{self, FeatureError};
use crate::media::shots::representative_frames;
use crate::media::video::{VideoError, sample_frames_with};
use crate::models::{ModelCache, ModelError, ONNX_RUNTIME, onnx_runtime_spec_for_this_platform};
use crate::project::Project;
use crate::stages::frames::{FRAMES, FrameSampling, FramesError, checked_video_path};
use crate::vision::clip::{ClipConfig, ClipImageEncoder};
use crate::vision::{DetectorError, ImageError, frame_to_image};
use viss_pelt::{PeltError, PeltParams};

/// Each shot of the scenario's frames and its representative frame's time.
pub const KEYFRAMES: Port<KeyframesRecord> = Port::item(NAME, "keyframes");

const NAME: &str = "keyframes";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "per-frame visual features, PELT shot changes, one frame per shot",
    version: 1,
    prompts: &[],
    defaults: Defaults::of::<KeyframesParams>(),
    load: load_stage::<KeyframesParams, Keyframes>,
};

/// Which per-frame features to compute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FeatureChoice {
    /// CLIP when `[models.image_embedder]` is configured, else the classical descriptor.
    #[default]
    Auto,
    Classical,
    /// CLIP, and an error when no model is configured.
    Clip,
}

/// keyframes: one feature vector per sampled frame, shots found by PELT change-point detection
/// (RBF kernel cost, as ruptures' Pelt(model="rbf")), one representative frame per shot (its
/// middle frame). The record names the features used and keeps the representatives' times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct KeyframesParams {
    /// "auto": CLIP image embeddings when viss.toml has [models.image_embedder] (the paper used
    /// CLIP ViT-L/14), else the offline classical descriptor (colour histogram, layout
    /// thumbnail, edge density; no registry ships a CLIP model). "classical" or "clip" force
    /// one.
    pub features: FeatureChoice,
    /// PELT cost per added segment, 0 to 1,000,000. The paper's PELT used penalty 5 with
    /// ruptures' default jump 5. At 2 frames/s that cannot work: jump 5 allows a cut only every
    /// 2.5 s, and with the RBF cost a 1 s shot (2 frames) inside 10 s gains at most
    /// 2*a*(n-a)/n = 3.6 < 5 even when perfectly separated. With the classical descriptor,
    /// frames inside a shot lie at squared distance <= 0.2 and across a cut >= 0.66, so penalty
    /// 1 finds every cut of the Tears of Steel and GRID test clips without false ones (0.5 to 2
    /// give the same cuts; see src/media/shots.rs). The RBF bandwidth comes from each
    /// scenario's median distance, so the penalty does not depend on the features' scale, but
    /// how well CLIP features separate shots was not measured here (no CLIP model offline):
    /// check it.
    pub penalty: f64,
    /// Shortest shot, in sampled frames, 1 to 10,000: a one-frame flash is not a shot.
    pub min_size: usize,
    /// Change points are considered at multiples of this many frames, 1 to 10,000; 1 considers
    /// a cut at every sampled frame.
    pub jump: usize,
}

impl crate::range::Validate for KeyframesParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        use crate::range::{Range, check};
        check("penalty", self.penalty, Range::new(0.0, 1e6))?;
        check("min_size", self.min_size, Range::new(1.0, 10_000.0))?;
        check("jump", self.jump, Range::new(1.0, 10_000.0))
    }
}

impl Default for KeyframesParams {
    fn default() -> Self {
        let shots = crate::media::shots::SHOT_PELT_PARAMS;
        Self {
            features: FeatureChoice::Auto,
            penalty: shots.penalty,
            min_size: shots.min_size,
            jump: shots.jump,
        }
    }
}

pub struct Keyframes {
    params: KeyframesParams,
    /// Loaded once per process when the build starts (see `models`).
    clip: OnceLock<Arc<ClipImageEncoder>>,
}

impl From<KeyframesParams> for Keyframes {
    fn from(params: KeyframesParams) -> Self {
        Self {
            params,
            clip: OnceLock::new(),
        }
    }
}

/// Which features a record's shots come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FeatureSource {
    /// `clip` or `classical`.
    pub kind: String,
    /// The encoder's identity or the descriptor's id.
    pub id: String,
    pub dimension: usize,
}

/// One shot of the scenario's sampled frames.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KeyShot {
    /// Sampled frames `first..=last` (indexes into the `frames` record's times).
    pub first: usize,
    pub last: usize,
    pub start_s: f64,
    pub end_s: f64,
    pub representative: usize,
    pub representative_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KeyframesRecord {
    pub scenario: String,
    pub features: FeatureSource,
    pub pelt: PeltParams,
    /// The RBF bandwidth PELT used (median heuristic); `None` when there were too few frames to
    /// cut.
    pub gamma: Option<f64>,
    pub frame_count: usize,
    pub shots: Vec<KeyShot>,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyframesError {
    #[error(
        "stages/keyframes.toml asks for features = \"clip\" but viss.toml has no \
         [models.image_embedder]; configure a CLIP ONNX model or use features = \"auto\""
    )]
    ClipNotConfigured,
    #[error("the CLIP encoder was not loaded before the build ran; this is a bug in viss")]
    ClipNotLoaded,
    #[error(
        "decoding raw/{path} again gave {got} frames where frames recorded {expected} (first \
         difference at frame {at}); the decoder is not deterministic on this file: re-encode it"
    )]
    DecodeMismatch {
        path: String,
        expected: usize,
        got: usize,
        at: usize,
    },
    #[error("features of the frame at {time_s:.3} s of raw/{path}: {reason}")]
    Feature {
        path: String,
        time_s: f64,
        reason: String,
    },
    #[error("shot detection on {scenario}: {source}")]
    Pelt { scenario: String, source: PeltError },
    #[error(transparent)]
    Frames(#[from] FramesError),
    #[error(transparent)]
    Video(#[from] VideoError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Detector(#[from] DetectorError),
    #[error(transparent)]
    Job(#[from] JobError),
}

impl Keyframes {
    fn uses_clip(&self, project: &Project) -> Result<Option<ClipConfig>, KeyframesError> {
        match (self.params.features, &project.config.models.image_embedder) {
            (FeatureChoice::Classical, _) | (FeatureChoice::Auto, None) => Ok(None),
            (FeatureChoice::Clip, None) => Err(KeyframesError::ClipNotConfigured),
            (_, Some(config)) => Ok(Some(config.clone())),
        }
    }
}

/// A model file path from viss.toml: relative paths are from the project root.
fn project_path(project: &Project, path: &std::path::Path) -> std::path::PathBuf {
    project.root.join(path)
}

/// The ONNX Runtime library a `[models.*]` section names, else the fetched default.
pub(crate) fn onnx_runtime_library(
    project: &Project,
    configured: Option<&std::path::Path>,
) -> Result<std::path::PathBuf, ModelError> {
    match configured {
        Some(path) => Ok(project_path(project, path)),
        None => Ok(ModelCache::from_env()?
            .ensure(onnx_runtime_spec_for_this_platform()?)?
            .file(ONNX_RUNTIME.packages[0].members[0].file_name)),
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Keyframes {
    fn level(&self) -> Level {
        Level::Scenario
    }

    fn inputs(&self) -> Vec<PortId> {
        [FRAMES.id()].into()
    }

    fn outputs(&self) -> Vec<PortId> {
        [KEYFRAMES.id()].into()
    }

    fn models(
        &self,
        Env { project, .. }: &Env,
        _store: &Store,
    ) -> Result<BTreeMap<String, String>, StageFailure> {
        let Some(mut config) = self.uses_clip(project)? else {
            return Ok([(
                "frame_features".to_string(),
                features::DESCRIPTOR_ID.to_string(),
            )]
            .into());
        };
        if self.clip.get().is_none() {
            let runtime = onnx_runtime_library(project, config.onnx_runtime_library.as_deref())?;
            config.model_onnx = project_path(project, &config.model_onnx);
            let encoder = ClipImageEncoder::load(&runtime, config).map_err(KeyframesError::from)?;
            let _ = self.clip.set(Arc::new(encoder));
        }
        Ok([(
            "frame_features".to_string(),
            self.clip.get().expect("set above").identity(),
        )]
        .into())
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        // `frames` skipped this scenario (no video or no time range) and flagged why.
        let Some(sampling) = ctx.read_optional(&FRAMES)? else {
            return Ok(Outputs::default());
        };
        let path = checked_video_path(ctx, &sampling.video)?;
        let clip = match self.uses_clip(ctx.project())? {
            Some(_) => Some(
                self.clip
                    .get()
                    .cloned()
                    .ok_or(KeyframesError::ClipNotLoaded)?,
            ),
            None => None,
        };
        let features = match &clip {
            Some(encoder) => FeatureSource {
                kind: "clip".into(),
                id: encoder.identity(),
                dimension: 0,
            },
            None => FeatureSource {
                kind: "classical".into(),
                id: format!("{} (offline default, not CLIP)", features::DESCRIPTOR_ID),
                dimension: features::DESCRIPTOR_LEN,
            },
        };
        let pelt = PeltParams {
            penalty: self.params.penalty,
            min_size: self.params.min_size,
            jump: self.params.jump,
            gamma: None,
        };
        let (times, vectors) = {
            let sampling = sampling.clone();
            ctx.cpu(move || describe_frames(&path, &sampling, clip.as_deref()))
                .await?
        };
        // Times went through JSON, which may round the last bit of a float.
        let same = |a: &f64, b: &f64| (a - b).abs() < 1e-6;
        if times.len() != sampling.times_s.len()
            || !times.iter().zip(&sampling.times_s).all(|(a, b)| same(a, b))
        {
            let at = times
                .iter()
                .zip(&sampling.times_s)
                .position(|(a, b)| !same(a, b))
                .unwrap_or(times.len().min(sampling.times_s.len()));
            let error = KeyframesError::DecodeMismatch {
                path: sampling.video.path.clone(),
                expected: sampling.times_s.len(),
                got: times.len(),
                at,
            };
            return Err(error.into());
        }
        let dimension = vectors.first().map_or(0, Vec::len);
        let (shots, gamma) =
            shots_of(&times, &vectors, &pelt).map_err(|source| KeyframesError::Pelt {
                scenario: ctx.item.clone(),
                source,
            })?;
        let record = KeyframesRecord {
            scenario: ctx.item.clone(),
            features: FeatureSource {
                dimension,
                ..features
            },
            pelt,
            gamma,
            frame_count: times.len(),
            shots,
        };
        let mut outputs = Outputs::default();
        outputs.put(ctx, &KEYFRAMES, &record)?;
        Ok(outputs)
    }
}

/// The shots of a sequence of frame features (PELT breakpoints, middle frames as
/// representatives) and the RBF bandwidth used; one shot when the sequence is too short to cut.
pub(crate) fn shots_of(
    times: &[f64],
    vectors: &[Vec<f32>],
    pelt: &PeltParams,
) -> Result<(Vec<KeyShot>, Option<f64>), PeltError> {
    if times.is_empty() {
        return Ok((Vec::new(), None));
    }
    let (breakpoints, gamma) = if vectors.len() >= 2 * pelt.min_size.max(1) {
        let segmentation = viss_pelt::segment(vectors, pelt)?;
        (segmentation.breakpoints, Some(segmentation.gamma))
    } else {
        (vec![vectors.len()], None)
    };
    let starts: Vec<usize> = breakpoints
        .iter()
        .copied()
        .filter(|&b| b > 0 && b < times.len())
        .collect();
    let shots = representative_frames(&starts, times.len())
        .into_iter()
        .enumerate()
        .map(|(shot, representative)| {
            let first = if shot == 0 { 0 } else { starts[shot - 1] };
            let last = starts.get(shot).map_or(times.len(), |&next| next) - 1;
            KeyShot {
                first,
                last,
                start_s: times[first],
                end_s: times[last],
                representative,
                representative_s: times[representative],
            }
        })
        .collect();
    Ok((shots, gamma))
}

/// Decodes the sampled frames again and describes each as it arrives (one frame in memory).
pub(crate) fn describe_frames(
    path: &std::path::Path,
    sampling: &FrameSampling,
    clip: Option<&ClipImageEncoder>,
) -> Result<(Vec<f64>, Vec<Vec<f32>>), KeyframesError> {
    let mut times = Vec::with_capacity(sampling.times_s.len());
    let mut vectors = Vec::with_capacity(sampling.times_s.len());
    let file = sampling.video.path.clone();
    let feature_error = |time_s: f64, reason: String| KeyframesError::Feature {
        path: file.clone(),
        time_s,
        reason,
    };
    sample_frames_with(
        path,
        sampling.segment_s[0],
        sampling.segment_s[1],
        &sampling.sample_options(),
        |frame| {
            let time_s = frame.time_s;
            let vector = match clip {
                None => features::frame_descriptor(&frame.rgb, frame.width, frame.height)
                    .map_err(|error: FeatureError| feature_error(time_s, error.to_string()))?,
                Some(encoder) => {
                    let image = frame_to_image(frame)
                        .map_err(|error: ImageError| feature_error(time_s, error.to_string()))?;
                    encoder
                        .embed(&image)
                        .map_err(|error| feature_error(time_s, error.to_string()))?
                }
            };
            times.push(time_s);
            vectors.push(vector);
            Ok::<(), KeyframesError>(())
        },
    )?;
    Ok((times, vectors))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shots_tile_the_frames_with_middle_representatives() {
        let times: Vec<f64> = (0..20).map(|i| i as f64 * 0.5).collect();
        let vectors: Vec<Vec<f32>> = (0..20)
            .map(|i| {
                if i < 8 {
                    vec![0.0, 1.0]
                } else {
                    vec![1.0, 0.0]
                }
            })
            .collect();
        let pelt = PeltParams {
            penalty: 1.0,
            min_size: 2,
            jump: 1,
            gamma: None,
        };
        let (shots, gamma) = shots_of(&times, &vectors, &pelt).unwrap();
        assert!(gamma.is_some());
        let summary: Vec<(usize, usize, usize, f64)> = shots
            .iter()
            .map(|s| (s.first, s.last, s.representative, s.representative_s))
            .collect();
        assert_eq!(summary, vec![(0, 7, 3, 1.5), (8, 19, 13, 6.5)]);
        assert_eq!((shots[1].start_s, shots[1].end_s), (4.0, 9.5));

        // Too short to cut: one shot; nothing: no shot.
        let (one, gamma) = shots_of(&times[..3], &vectors[..3], &pelt).unwrap();
        assert_eq!((one.len(), one[0].representative, gamma), (1, 1, None));
        assert!(shots_of(&[], &[], &pelt).unwrap().0.is_empty());
    }
}

//! One face detector chosen by configuration: SCRFD or YuNet, both giving [`FaceDetection`]s
//! (box, score, five landmarks in the same order), so stages need not care which one ran.

use serde::{Deserialize, Serialize};

use super::image::RgbImage;
use super::scrfd::{DetectionTimings, FaceDetection, ScrfdConfig, ScrfdDetector};
use super::session::DetectorError;
use super::yunet::{YunetConfig, YunetDetector};
use viss_models::{ModelCache, ModelError};

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FaceDetectorModel {
    /// InsightFace SCRFD (non-commercial research weights); found 29/29 faces on Solvay 1927.
    #[default]
    Scrfd,
    /// OpenCV Zoo YuNet (Apache-2.0); smaller and faster.
    Yunet,
}

/// `model` picks the detector; the other section's settings are kept but unused, so switching
/// back and forth in a stage's TOML loses nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FaceDetectorConfig {
    /// Which detector: "scrfd" or "yunet"; the other one's settings are kept but unused.
    pub model: FaceDetectorModel,
    pub scrfd: ScrfdConfig,
    pub yunet: YunetConfig,
}

/// Both sections are checked, the unused one too: switching to it must not fail later.
impl viss_engine::range::Validate for FaceDetectorConfig {
    fn validate(&self) -> Result<(), viss_engine::range::BadSetting> {
        viss_engine::range::check_table("scrfd", &self.scrfd)?;
        viss_engine::range::check_table("yunet", &self.yunet)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FaceDetectorError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Detector(#[from] DetectorError),
}

pub enum FaceDetector {
    Scrfd(ScrfdDetector),
    Yunet(YunetDetector),
}

impl FaceDetector {
    /// Loads the configured detector from `cache`, fetching its model if missing.
    pub fn load(
        cache: &ModelCache,
        config: &FaceDetectorConfig,
        intra_threads: usize,
    ) -> Result<Self, FaceDetectorError> {
        Ok(match config.model {
            FaceDetectorModel::Scrfd => {
                let files = cache.ensure_face_detector()?;
                Self::Scrfd(ScrfdDetector::load(
                    &files.onnx_runtime_library,
                    &files.model_onnx,
                    config.scrfd.clone(),
                    intra_threads,
                )?)
            }
            FaceDetectorModel::Yunet => {
                let files = cache.ensure_face_recognition()?;
                Self::Yunet(YunetDetector::load(
                    &files.onnx_runtime_library,
                    &files.yunet_onnx,
                    config.yunet.clone(),
                    intra_threads,
                )?)
            }
        })
    }

    /// Everything that shapes the detections: part of any cache key built on them.
    pub fn identity(&self) -> String {
        match self {
            Self::Scrfd(detector) => detector.identity(),
            Self::Yunet(detector) => detector.identity(),
        }
    }

    /// Faces in `image`, best score first.
    pub fn detect(&self, image: &RgbImage) -> Result<Vec<FaceDetection>, DetectorError> {
        match self {
            Self::Scrfd(detector) => detector.detect(image),
            Self::Yunet(detector) => detector.detect(image),
        }
    }

    pub fn detect_timed(
        &self,
        image: &RgbImage,
    ) -> Result<(Vec<FaceDetection>, DetectionTimings), DetectorError> {
        match self {
            Self::Scrfd(detector) => detector.detect_timed(image),
            Self::Yunet(detector) => detector.detect_timed(image),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_picks_the_model_and_keeps_both_sections() {
        let config: FaceDetectorConfig =
            toml::from_str("model = \"yunet\"\n[yunet]\nscore_threshold = 0.8\n").unwrap();
        assert_eq!(config.model, FaceDetectorModel::Yunet);
        assert_eq!(config.yunet.score_threshold, 0.8);
        assert_eq!(config.scrfd, ScrfdConfig::default());
        assert_eq!(
            toml::from_str::<FaceDetectorConfig>("").unwrap().model,
            FaceDetectorModel::Scrfd
        );
        let error = toml::from_str::<FaceDetectorConfig>("model = \"retinaface\"").unwrap_err();
        assert!(error.to_string().contains("retinaface"), "{error}");
        let error = toml::from_str::<FaceDetectorConfig>("detector = \"yunet\"").unwrap_err();
        assert!(error.to_string().contains("detector"), "{error}");
    }
}

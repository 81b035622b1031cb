//! SCRFD face detection (InsightFace's anchor-free-style detector with 5 landmarks).
//!
//! The graph takes one RGB image `[1, 3, 640, 640]` normalised as `(value - 127.5) / 128` and
//! returns, for each feature stride 8, 16 and 32, a score, four distances to the box edges and
//! five landmark offsets per anchor; there are two anchors per grid cell, both centred on the
//! cell's top-left corner. Distances and offsets are in stride units. The input is letterboxed
//! with the padding right and bottom, as InsightFace trains and runs it.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::image::RgbImage;
use super::letterbox::{Letterbox, Normalisation, PadPlacement, planar_input};
use super::nms::{BoxXyxy, nms};
use super::session::{DetectorError, ImageSession, check_detector_config};

/// Feature strides of the three detection heads, finest first.
pub const STRIDES: [u32; 3] = [8, 16, 32];
/// Anchors per grid cell in every head.
pub const ANCHORS_PER_CELL: usize = 2;

const NORMALISATION: Normalisation = Normalisation {
    mean: 127.5,
    scale: 1.0 / 128.0,
};
/// Black padding, as InsightFace's own letterbox.
const PAD_VALUE: u8 = 0;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ScrfdConfig {
    /// Faces scoring below this are dropped before NMS.
    pub score_threshold: f32,
    /// A face overlapping a better one by more than this IoU is a duplicate.
    pub nms_iou: f32,
    /// Side of the square detector input; must match the model when its input size is fixed
    /// (the `scrfd` 0.3.0 export is 640), and be a multiple of 32.
    pub det_size: u32,
}

/// Scores and IoU 0 to 1; `det_size` a multiple of 32 from 32 to 4096.
impl viss_engine::range::Validate for ScrfdConfig {
    fn validate(&self) -> Result<(), viss_engine::range::BadSetting> {
        use viss_engine::range::{INPUT_SIDE, UNIT, check};
        check("score_threshold", self.score_threshold, UNIT)?;
        check("nms_iou", self.nms_iou, UNIT)?;
        check("det_size", self.det_size, INPUT_SIDE)
    }
}

impl Default for ScrfdConfig {
    fn default() -> Self {
        Self {
            score_threshold: 0.5,
            nms_iou: 0.4,
            det_size: 640,
        }
    }
}

/// One face in source image pixels. Boxes are clipped to the image; landmarks are not (an eye
/// just outside the frame is still where the model put it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FaceDetection {
    /// `[x1, y1, x2, y2]`.
    pub bbox: BoxXyxy,
    pub score: f32,
    /// Left eye, right eye, nose tip, left and right mouth corner (from the viewer's side:
    /// the first eye has the smaller x on a frontal face).
    pub landmarks: [[f32; 2]; 5],
}

/// Where the time of one detection went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct DetectionTimings {
    pub preprocess: Duration,
    pub inference: Duration,
    pub postprocess: Duration,
}

/// Output names of one stride's head.
#[derive(Debug, Clone)]
struct HeadOutputs {
    stride: u32,
    score: String,
    bbox: String,
    landmarks: String,
}

pub struct ScrfdDetector {
    session: ImageSession,
    heads: Vec<HeadOutputs>,
    config: ScrfdConfig,
}

impl ScrfdDetector {
    pub fn load(
        onnx_runtime_library: &Path,
        model_onnx: &Path,
        config: ScrfdConfig,
        intra_threads: usize,
    ) -> Result<Self, DetectorError> {
        check_detector_config(
            model_onnx,
            config.score_threshold,
            config.nms_iou,
            "det_size",
            config.det_size,
        )?;
        let session = ImageSession::load(onnx_runtime_library, model_onnx, intra_threads, "SCRFD")?;
        if let Some((height, width)) = session.fixed_input_size
            && (height != config.det_size || width != config.det_size)
        {
            return Err(DetectorError::InvalidConfig {
                model: model_onnx.to_path_buf(),
                reason: format!(
                    "det_size is {} but the model's input is fixed at {width}x{height}; set \
                     det_size = {width}",
                    config.det_size
                ),
            });
        }
        let heads =
            head_outputs(&session.output_names).ok_or_else(|| DetectorError::UnsupportedModel {
                model: model_onnx.to_path_buf(),
                detector: "SCRFD",
                reason: format!(
                    "its outputs are {:?}; expected score_8/16/32, bbox_8/16/32, kps_8/16/32 (or 9 \
                     unnamed outputs in that order)",
                    session.output_names
                ),
            })?;
        Ok(Self {
            session,
            heads,
            config,
        })
    }

    pub fn config(&self) -> &ScrfdConfig {
        &self.config
    }

    /// Everything that shapes the detections: part of any cache key built on them.
    pub fn identity(&self) -> String {
        format!(
            "scrfd/v1 model-blake3={} det-size={} score-threshold={} nms-iou={} letterbox=top-left",
            self.session.model_hash.to_hex(),
            self.config.det_size,
            self.config.score_threshold,
            self.config.nms_iou
        )
    }

    /// Faces in `image`, best score first.
    pub fn detect(&self, image: &RgbImage) -> Result<Vec<FaceDetection>, DetectorError> {
        self.detect_timed(image).map(|(faces, _)| faces)
    }

    pub fn detect_timed(
        &self,
        image: &RgbImage,
    ) -> Result<(Vec<FaceDetection>, DetectionTimings), DetectorError> {
        let started = Instant::now();
        let size = self.config.det_size;
        let letterbox = Letterbox::fit(
            image.width(),
            image.height(),
            size,
            size,
            PadPlacement::TopLeft,
        );
        let input = planar_input(image, &letterbox, PAD_VALUE, NORMALISATION);
        let preprocessed = Instant::now();

        let names: Vec<&str> = self
            .heads
            .iter()
            .flat_map(|head| {
                [
                    head.score.as_str(),
                    head.bbox.as_str(),
                    head.landmarks.as_str(),
                ]
            })
            .collect();
        let mut candidates = Vec::new();
        let mut inferred = preprocessed;
        self.session.run(input, size, size, &names, |outputs| {
            inferred = Instant::now();
            for (head, tensors) in self.heads.iter().zip(outputs.chunks_exact(3)) {
                let raw = HeadTensors {
                    scores: tensors[0].1,
                    distances: tensors[1].1,
                    landmark_offsets: tensors[2].1,
                };
                decode_head(
                    &raw,
                    head.stride,
                    size,
                    size,
                    self.config.score_threshold,
                    &mut candidates,
                )
                .map_err(|reason| {
                    self.session
                        .unexpected_output(format!("{} {reason}", head.score))
                })?;
            }
            Ok(())
        })?;

        let faces = faces_in_source(&candidates, &letterbox, image, self.config.nms_iou);
        let finished = Instant::now();
        let timings = DetectionTimings {
            preprocess: preprocessed - started,
            inference: inferred - preprocessed,
            postprocess: finished - inferred,
        };
        Ok((faces, timings))
    }
}

/// The names the `scrfd` package's export uses, else InsightFace's positional convention
/// (scores, boxes, landmarks, each for strides 8, 16, 32) for exports with numeric names.
fn head_outputs(output_names: &[String]) -> Option<Vec<HeadOutputs>> {
    let named: Option<Vec<HeadOutputs>> = STRIDES
        .iter()
        .map(|&stride| {
            let find = |prefix: &str| {
                let wanted = format!("{prefix}_{stride}");
                output_names.iter().find(|name| **name == wanted).cloned()
            };
            Some(HeadOutputs {
                stride,
                score: find("score")?,
                bbox: find("bbox")?,
                landmarks: find("kps")?,
            })
        })
        .collect();
    if named.is_some() {
        return named;
    }
    (output_names.len() == 3 * STRIDES.len()).then(|| {
        STRIDES
            .iter()
            .enumerate()
            .map(|(position, &stride)| HeadOutputs {
                stride,
                score: output_names[position].clone(),
                bbox: output_names[position + 3].clone(),
                landmarks: output_names[position + 6].clone(),
            })
            .collect()
    })
}

/// One head's raw outputs for one image, anchors in grid order (row, column, anchor).
pub struct HeadTensors<'a> {
    /// One per anchor.
    pub scores: &'a [f32],
    /// Left, top, right, bottom distances from the anchor centre, in stride units.
    pub distances: &'a [f32],
    /// Five (x, y) offsets from the anchor centre, in stride units.
    pub landmark_offsets: &'a [f32],
}

/// Candidates in network-input pixels -> non-overlapping faces in `image`'s pixels: NMS, then
/// the letterbox undone and boxes clamped to the image. Shared by every face detector.
pub(crate) fn faces_in_source(
    candidates: &[Candidate],
    letterbox: &Letterbox,
    image: &RgbImage,
    nms_iou: f32,
) -> Vec<FaceDetection> {
    let boxes: Vec<BoxXyxy> = candidates.iter().map(|candidate| candidate.bbox).collect();
    let scores: Vec<f32> = candidates.iter().map(|candidate| candidate.score).collect();
    let (width, height) = (image.width() as f32, image.height() as f32);
    nms(&boxes, &scores, nms_iou)
        .into_iter()
        .map(|index| {
            let candidate = &candidates[index];
            let [x1, y1] = letterbox.to_source([candidate.bbox[0], candidate.bbox[1]]);
            let [x2, y2] = letterbox.to_source([candidate.bbox[2], candidate.bbox[3]]);
            FaceDetection {
                bbox: [
                    x1.clamp(0.0, width),
                    y1.clamp(0.0, height),
                    x2.clamp(0.0, width),
                    y2.clamp(0.0, height),
                ],
                score: candidate.score,
                landmarks: candidate.landmarks.map(|point| letterbox.to_source(point)),
            }
        })
        .collect()
}

/// A face in detector input pixels, before NMS.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub bbox: BoxXyxy,
    pub score: f32,
    pub landmarks: [[f32; 2]; 5],
}

/// Appends the anchors of one head scoring at least `score_threshold` to `candidates`.
pub fn decode_head(
    raw: &HeadTensors<'_>,
    stride: u32,
    input_width: u32,
    input_height: u32,
    score_threshold: f32,
    candidates: &mut Vec<Candidate>,
) -> Result<(), String> {
    let columns = (input_width / stride) as usize;
    let rows = (input_height / stride) as usize;
    let anchors = rows * columns * ANCHORS_PER_CELL;
    if raw.scores.len() != anchors
        || raw.distances.len() != anchors * 4
        || raw.landmark_offsets.len() != anchors * 10
    {
        return Err(format!(
            "has {} scores, {} box values and {} landmark values for stride {stride}; a \
             {input_width}x{input_height} input needs {anchors}, {} and {}",
            raw.scores.len(),
            raw.distances.len(),
            raw.landmark_offsets.len(),
            anchors * 4,
            anchors * 10
        ));
    }
    let step = stride as f32;
    for (anchor, &score) in raw.scores.iter().enumerate() {
        if score < score_threshold {
            continue;
        }
        let cell = anchor / ANCHORS_PER_CELL;
        let centre_x = (cell % columns) as f32 * step;
        let centre_y = (cell / columns) as f32 * step;
        let distance = &raw.distances[anchor * 4..anchor * 4 + 4];
        let offsets = &raw.landmark_offsets[anchor * 10..anchor * 10 + 10];
        let mut landmarks = [[0.0f32; 2]; 5];
        for (point, offset) in landmarks.iter_mut().zip(offsets.chunks_exact(2)) {
            *point = [centre_x + offset[0] * step, centre_y + offset[1] * step];
        }
        candidates.push(Candidate {
            bbox: [
                centre_x - distance[0] * step,
                centre_y - distance[1] * step,
                centre_x + distance[2] * step,
                centre_y + distance[3] * step,
            ],
            score,
            landmarks,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_are_decoded_in_grid_order() {
        // A 64x32 input at stride 32: 2 columns x 1 row x 2 anchors.
        let scores = [0.1, 0.2, 0.9, 0.6];
        let mut distances = [0.0f32; 16];
        // Anchor 2 sits on cell (row 0, column 1): centre (32, 0).
        distances[8..12].copy_from_slice(&[0.5, 0.0, 0.5, 1.0]);
        let mut offsets = [0.0f32; 40];
        offsets[20..22].copy_from_slice(&[0.25, 0.5]);
        let raw = HeadTensors {
            scores: &scores,
            distances: &distances,
            landmark_offsets: &offsets,
        };
        let mut candidates = Vec::new();
        decode_head(&raw, 32, 64, 32, 0.5, &mut candidates).unwrap();
        assert_eq!(candidates.len(), 2, "anchors 2 and 3 pass the threshold");
        assert_eq!(candidates[0].bbox, [16.0, 0.0, 48.0, 32.0]);
        assert_eq!(candidates[0].score, 0.9);
        assert_eq!(candidates[0].landmarks[0], [40.0, 16.0]);
        assert_eq!(candidates[0].landmarks[1], [32.0, 0.0]);
        assert_eq!(
            candidates[1].bbox,
            [32.0, 0.0, 32.0, 0.0],
            "anchor 3 shares the cell"
        );
    }

    #[test]
    fn wrong_tensor_sizes_are_reported() {
        let raw = HeadTensors {
            scores: &[0.0; 3],
            distances: &[0.0; 12],
            landmark_offsets: &[0.0; 30],
        };
        let error = decode_head(&raw, 32, 64, 32, 0.5, &mut Vec::new()).unwrap_err();
        assert!(error.contains("needs 4"), "{error}");
    }

    #[test]
    fn numeric_output_names_follow_insightface_order() {
        let names: Vec<String> = (0..9).map(|index| format!("out{index}")).collect();
        let heads = head_outputs(&names).unwrap();
        assert_eq!(
            (
                heads[1].stride,
                heads[1].score.as_str(),
                heads[1].bbox.as_str(),
                heads[1].landmarks.as_str()
            ),
            (16, "out1", "out4", "out7")
        );
        assert!(head_outputs(&names[..8]).is_none());
    }

    #[test]
    fn config_rejects_unknown_fields() {
        let error = toml::from_str::<ScrfdConfig>("score_threshold = 0.6\nnms = 0.3").unwrap_err();
        assert!(error.to_string().contains("nms"), "{error}");
        let config: ScrfdConfig = toml::from_str("det_size = 640").unwrap();
        assert_eq!(config, ScrfdConfig::default());
    }
}

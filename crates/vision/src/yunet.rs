//! YuNet face detection (libfacedetection's detector, OpenCV Zoo export) with 5 landmarks.
//!
//! The graph takes one BGR image `[1, 3, 640, 640]` of raw values 0..255 (no normalisation) and
//! returns, for each stride 8, 16 and 32, per grid cell (one anchor, row-major): a class score
//! and an objectness score (both already sigmoids), a box `(dx, dy, log w, log h)` and five
//! landmark offsets, all in stride units relative to the cell's top-left corner. A face's score
//! is `sqrt(cls * obj)`; the box centre is `(column + dx, row + dy) * stride` and its size
//! `exp(log w) * stride`, as OpenCV's `FaceDetectorYN` decodes them. OpenCV pads the image right
//! and bottom with black to the input size; the fixed 640x640 export is fed the same way, after
//! fitting the image into it.

use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::image::RgbImage;
use super::letterbox::{Letterbox, Normalisation, PadPlacement, planar_input};
use super::scrfd::{Candidate, DetectionTimings, FaceDetection, faces_in_source};
use super::session::{DetectorError, ImageSession, check_detector_config};

/// Feature strides of the three detection heads, finest first.
pub const STRIDES: [u32; 3] = [8, 16, 32];

/// Raw pixel values, as `cv::dnn::blobFromImage` with its defaults gives them.
const RAW_VALUES: Normalisation = Normalisation {
    mean: 0.0,
    scale: 1.0,
};
/// Black padding, as OpenCV's `copyMakeBorder` in `FaceDetectorYN`.
const PAD_VALUE: u8 = 0;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct YunetConfig {
    /// Faces scoring below this are dropped before NMS. OpenCV Zoo's demo uses 0.9 for close-up
    /// webcam faces; on the Solvay 1927 photograph (faces about 25 px tall in the 640 input)
    /// every real face scores 0.80-0.91 and the two false alarms 0.60-0.61, hence 0.7.
    pub score_threshold: f32,
    /// A face overlapping a better one by more than this IoU is a duplicate (OpenCV's 0.3).
    pub nms_iou: f32,
    /// Side of the square detector input; must match the model when its input size is fixed
    /// (the OpenCV Zoo export is 640), and be a multiple of 32.
    pub det_size: u32,
}

/// Scores and IoU 0 to 1; `det_size` a multiple of 32 from 32 to 4096.
impl viss_engine::range::Validate for YunetConfig {
    fn validate(&self) -> Result<(), viss_engine::range::BadSetting> {
        use viss_engine::range::{INPUT_SIDE, UNIT, check};
        check("score_threshold", self.score_threshold, UNIT)?;
        check("nms_iou", self.nms_iou, UNIT)?;
        check("det_size", self.det_size, INPUT_SIDE)
    }
}

impl Default for YunetConfig {
    fn default() -> Self {
        Self {
            score_threshold: 0.7,
            nms_iou: 0.3,
            det_size: 640,
        }
    }
}

/// Output names of one stride's head.
#[derive(Debug, Clone)]
struct HeadOutputs {
    stride: u32,
    class: String,
    objectness: String,
    bbox: String,
    landmarks: String,
}

pub struct YunetDetector {
    session: ImageSession,
    heads: Vec<HeadOutputs>,
    config: YunetConfig,
}

impl YunetDetector {
    /// Loads the converted YuNet graph (`ModelCache::ensure_face_recognition`).
    pub fn load(
        onnx_runtime_library: &Path,
        model_onnx: &Path,
        config: YunetConfig,
        intra_threads: usize,
    ) -> Result<Self, DetectorError> {
        check_detector_config(
            model_onnx,
            config.score_threshold,
            config.nms_iou,
            "det_size",
            config.det_size,
        )?;
        let session = ImageSession::load(onnx_runtime_library, model_onnx, intra_threads, "YuNet")?;
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
        let heads = STRIDES
            .iter()
            .map(|&stride| {
                let find = |prefix: &str| {
                    let wanted = format!("{prefix}_{stride}");
                    session
                        .output_names
                        .iter()
                        .find(|name| **name == wanted)
                        .cloned()
                };
                Some(HeadOutputs {
                    stride,
                    class: find("cls")?,
                    objectness: find("obj")?,
                    bbox: find("bbox")?,
                    landmarks: find("kps")?,
                })
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| DetectorError::UnsupportedModel {
                model: model_onnx.to_path_buf(),
                detector: "YuNet",
                reason: format!(
                    "its outputs are {:?}; expected cls_8/16/32, obj_8/16/32, bbox_8/16/32, \
                     kps_8/16/32",
                    session.output_names
                ),
            })?;
        Ok(Self {
            session,
            heads,
            config,
        })
    }

    pub fn config(&self) -> &YunetConfig {
        &self.config
    }

    /// Everything that shapes the detections: part of any cache key built on them.
    pub fn identity(&self) -> String {
        format!(
            "yunet/v1 model-blake3={} det-size={} score-threshold={} nms-iou={} letterbox=top-left \
             input=bgr-0-255",
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
        let mut input = planar_input(image, &letterbox, PAD_VALUE, RAW_VALUES);
        // planar_input writes R, G, B planes; YuNet was trained on OpenCV's B, G, R.
        let plane = (size * size) as usize;
        let (red, rest) = input.split_at_mut(plane);
        red.swap_with_slice(&mut rest[plane..]);
        let preprocessed = Instant::now();

        let names: Vec<&str> = self
            .heads
            .iter()
            .flat_map(|head| {
                [
                    head.class.as_str(),
                    head.objectness.as_str(),
                    head.bbox.as_str(),
                    head.landmarks.as_str(),
                ]
            })
            .collect();
        let mut candidates = Vec::new();
        let mut inferred = preprocessed;
        self.session.run(input, size, size, &names, |outputs| {
            inferred = Instant::now();
            for (head, tensors) in self.heads.iter().zip(outputs.chunks_exact(4)) {
                let raw = YunetHead {
                    class_scores: tensors[0].1,
                    objectness: tensors[1].1,
                    boxes: tensors[2].1,
                    landmark_offsets: tensors[3].1,
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
                        .unexpected_output(format!("{} {reason}", head.class))
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

/// One head's raw outputs for one image, cells in row-major order.
pub struct YunetHead<'a> {
    /// One sigmoid per cell.
    pub class_scores: &'a [f32],
    /// One sigmoid per cell.
    pub objectness: &'a [f32],
    /// `dx, dy, log w, log h` per cell, in stride units.
    pub boxes: &'a [f32],
    /// Five `(x, y)` offsets from the cell's corner per cell, in stride units.
    pub landmark_offsets: &'a [f32],
}

/// Appends the cells of one head scoring at least `score_threshold` to `candidates`, in
/// detector input pixels.
pub fn decode_head(
    raw: &YunetHead<'_>,
    stride: u32,
    input_width: u32,
    input_height: u32,
    score_threshold: f32,
    candidates: &mut Vec<Candidate>,
) -> Result<(), String> {
    let columns = (input_width / stride) as usize;
    let cells = columns * (input_height / stride) as usize;
    if raw.class_scores.len() != cells
        || raw.objectness.len() != cells
        || raw.boxes.len() != cells * 4
        || raw.landmark_offsets.len() != cells * 10
    {
        return Err(format!(
            "has {} class scores, {} objectness scores, {} box values and {} landmark values for \
             stride {stride}; a {input_width}x{input_height} input needs {cells}, {cells}, {} and \
             {}",
            raw.class_scores.len(),
            raw.objectness.len(),
            raw.boxes.len(),
            raw.landmark_offsets.len(),
            cells * 4,
            cells * 10
        ));
    }
    let step = stride as f32;
    for cell in 0..cells {
        let score =
            (raw.class_scores[cell].clamp(0.0, 1.0) * raw.objectness[cell].clamp(0.0, 1.0)).sqrt();
        if score < score_threshold {
            continue;
        }
        let (column, row) = ((cell % columns) as f32, (cell / columns) as f32);
        let values = &raw.boxes[cell * 4..cell * 4 + 4];
        let centre_x = (column + values[0]) * step;
        let centre_y = (row + values[1]) * step;
        let (half_width, half_height) =
            (values[2].exp() * step / 2.0, values[3].exp() * step / 2.0);
        let offsets = &raw.landmark_offsets[cell * 10..cell * 10 + 10];
        let mut landmarks = [[0.0f32; 2]; 5];
        for (point, offset) in landmarks.iter_mut().zip(offsets.chunks_exact(2)) {
            *point = [(offset[0] + column) * step, (offset[1] + row) * step];
        }
        candidates.push(Candidate {
            bbox: [
                centre_x - half_width,
                centre_y - half_height,
                centre_x + half_width,
                centre_y + half_height,
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
    fn cells_are_decoded_as_opencv_does() {
        // A 64x32 input at stride 16: 4 columns x 2 rows. Cell 6 is row 1, column 2.
        let mut class_scores = [0.0f32; 8];
        let mut objectness = [0.0f32; 8];
        class_scores[6] = 0.81;
        objectness[6] = 1.0;
        // Cell 1 fails: sqrt(0.9 * 0.1) = 0.3.
        class_scores[1] = 0.9;
        objectness[1] = 0.1;
        let mut boxes = [0.0f32; 32];
        boxes[24..28].copy_from_slice(&[0.5, 0.25, 0.0, 2.0f32.ln()]);
        let mut offsets = [0.0f32; 80];
        offsets[60..62].copy_from_slice(&[0.25, -0.5]);
        let raw = YunetHead {
            class_scores: &class_scores,
            objectness: &objectness,
            boxes: &boxes,
            landmark_offsets: &offsets,
        };
        let mut candidates = Vec::new();
        decode_head(&raw, 16, 64, 32, 0.5, &mut candidates).unwrap();
        assert_eq!(candidates.len(), 1);
        let face = candidates[0];
        assert!((face.score - 0.9).abs() < 1e-6, "{face:?}");
        // Centre ((2 + 0.5) * 16, (1 + 0.25) * 16) = (40, 20); size 16 x 32.
        let expected = [32.0, 4.0, 48.0, 36.0];
        for (got, want) in face.bbox.iter().zip(expected) {
            assert!((got - want).abs() < 1e-4, "{:?}", face.bbox);
        }
        assert_eq!(
            face.landmarks[0],
            [(0.25 + 2.0) * 16.0, (-0.5 + 1.0) * 16.0]
        );
        assert_eq!(
            face.landmarks[1],
            [32.0, 16.0],
            "a zero offset is the cell's corner"
        );
    }

    #[test]
    fn scores_outside_zero_one_are_clamped() {
        let raw = YunetHead {
            class_scores: &[1.5],
            objectness: &[-0.2],
            boxes: &[0.0; 4],
            landmark_offsets: &[0.0; 10],
        };
        let mut candidates = Vec::new();
        decode_head(&raw, 32, 32, 32, 0.0, &mut candidates).unwrap();
        assert_eq!(candidates[0].score, 0.0);
    }

    #[test]
    fn wrong_tensor_sizes_are_reported() {
        let raw = YunetHead {
            class_scores: &[0.0; 3],
            objectness: &[0.0; 4],
            boxes: &[0.0; 16],
            landmark_offsets: &[0.0; 40],
        };
        let error = decode_head(&raw, 16, 32, 32, 0.5, &mut Vec::new()).unwrap_err();
        assert!(error.contains("needs 4"), "{error}");
    }

    #[test]
    fn config_rejects_unknown_fields() {
        let error = toml::from_str::<YunetConfig>("score_threshold = 0.6\ntop_k = 10").unwrap_err();
        assert!(error.to_string().contains("top_k"), "{error}");
        assert_eq!(
            toml::from_str::<YunetConfig>("").unwrap(),
            YunetConfig::default()
        );
    }
}

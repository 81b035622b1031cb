//! Detectors in the Ultralytics YOLOv8 output format, for any class set.
//!
//! Such graphs take `images` `[b, 3, h, w]` (RGB, `value / 255`, letterboxed with grey 114
//! padding split evenly) and return `output0` `[b, 4 + classes, anchors]`: per anchor the box
//! centre, width and height in input pixels, then one score per class (already sigmoid-ed; there
//! is no separate objectness). NMS is not in the graph. A COCO `yolov8n.onnx` decodes the same
//! way (person is class 0); the tests use a one-class face model.

use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::image::RgbImage;
use super::letterbox::{Letterbox, Normalisation, PadPlacement, planar_input};
use super::nms::{BoxXyxy, nms};
use super::scrfd::DetectionTimings;
use super::session::{DetectorError, ImageSession, check_detector_config};

const NORMALISATION: Normalisation = Normalisation {
    mean: 0.0,
    scale: 1.0 / 255.0,
};
const PAD_VALUE: u8 = 114;
const OUTPUT_NAME: &str = "output0";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct YoloConfig {
    pub score_threshold: f32,
    pub nms_iou: f32,
    /// Side of the square input when the graph's size is symbolic; a multiple of 32.
    pub input_size: u32,
    /// Only these class ids are reported (e.g. `[0]` for COCO persons); all when empty.
    pub classes: Vec<usize>,
}

impl Default for YoloConfig {
    fn default() -> Self {
        Self {
            score_threshold: 0.25,
            nms_iou: 0.45,
            input_size: 640,
            classes: Vec::new(),
        }
    }
}

/// One object in source image pixels; the box is clipped to the image.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ObjectDetection {
    /// `[x1, y1, x2, y2]`.
    pub bbox: BoxXyxy,
    pub score: f32,
    pub class_id: usize,
}

pub struct YoloDetector {
    session: ImageSession,
    config: YoloConfig,
    input_width: u32,
    input_height: u32,
}

impl YoloDetector {
    pub fn load(
        onnx_runtime_library: &Path,
        model_onnx: &Path,
        config: YoloConfig,
        intra_threads: usize,
    ) -> Result<Self, DetectorError> {
        check_detector_config(
            model_onnx,
            config.score_threshold,
            config.nms_iou,
            "input_size",
            config.input_size,
        )?;
        let session =
            ImageSession::load(onnx_runtime_library, model_onnx, intra_threads, "YOLOv8")?;
        if session.input_name != "images"
            || !session.output_names.iter().any(|name| name == OUTPUT_NAME)
        {
            return Err(DetectorError::UnsupportedModel {
                model: model_onnx.to_path_buf(),
                detector: "YOLOv8",
                reason: format!(
                    "it has input `{}` and outputs {:?}; a YOLOv8 export has input `images` and \
                     output `{OUTPUT_NAME}`",
                    session.input_name, session.output_names
                ),
            });
        }
        let (input_height, input_width) = session
            .fixed_input_size
            .unwrap_or((config.input_size, config.input_size));
        Ok(Self {
            session,
            config,
            input_width,
            input_height,
        })
    }

    pub fn config(&self) -> &YoloConfig {
        &self.config
    }

    pub fn identity(&self) -> String {
        format!(
            "yolov8/v1 model-blake3={} input={}x{} score-threshold={} nms-iou={} classes={:?} \
             letterbox=centred-114",
            self.session.model_hash.to_hex(),
            self.input_width,
            self.input_height,
            self.config.score_threshold,
            self.config.nms_iou,
            self.config.classes
        )
    }

    /// Objects in `image`, best score first.
    pub fn detect(&self, image: &RgbImage) -> Result<Vec<ObjectDetection>, DetectorError> {
        self.detect_timed(image).map(|(objects, _)| objects)
    }

    pub fn detect_timed(
        &self,
        image: &RgbImage,
    ) -> Result<(Vec<ObjectDetection>, DetectionTimings), DetectorError> {
        let started = Instant::now();
        let letterbox = Letterbox::fit(
            image.width(),
            image.height(),
            self.input_width,
            self.input_height,
            PadPlacement::Centred,
        );
        let input = planar_input(image, &letterbox, PAD_VALUE, NORMALISATION);
        let preprocessed = Instant::now();
        let mut inferred = preprocessed;
        let in_input_pixels = self.session.run(
            input,
            self.input_height,
            self.input_width,
            &[OUTPUT_NAME],
            |outputs| {
                inferred = Instant::now();
                let (shape, values) = outputs[0];
                decode_output(shape, values, &self.config).map_err(|reason| {
                    self.session
                        .unexpected_output(format!("`{OUTPUT_NAME}` {reason}"))
                })
            },
        )?;
        let (width, height) = (image.width() as f32, image.height() as f32);
        let objects = in_input_pixels
            .into_iter()
            .map(|object| {
                let [x1, y1] = letterbox.to_source([object.bbox[0], object.bbox[1]]);
                let [x2, y2] = letterbox.to_source([object.bbox[2], object.bbox[3]]);
                ObjectDetection {
                    bbox: [
                        x1.clamp(0.0, width),
                        y1.clamp(0.0, height),
                        x2.clamp(0.0, width),
                        y2.clamp(0.0, height),
                    ],
                    ..object
                }
            })
            .collect();
        let finished = Instant::now();
        let timings = DetectionTimings {
            preprocess: preprocessed - started,
            inference: inferred - preprocessed,
            postprocess: finished - inferred,
        };
        Ok((objects, timings))
    }
}

/// Decodes the first image of a `[b, 4 + classes, anchors]` output into boxes in input pixels,
/// best score first. Each anchor votes for its best allowed class; NMS runs per class, so a
/// person and the bag they hold do not suppress each other.
pub fn decode_output(
    shape: &[i64],
    values: &[f32],
    config: &YoloConfig,
) -> Result<Vec<ObjectDetection>, String> {
    let &[batch, rows, anchors] = shape else {
        return Err(format!(
            "has shape {shape:?}; expected [batch, 4 + classes, anchors]"
        ));
    };
    if batch < 1 || rows < 5 || anchors < 0 {
        return Err(format!(
            "has shape {shape:?}; expected at least one image and one class"
        ));
    }
    let (rows, anchors) = (rows as usize, anchors as usize);
    let class_count = rows - 4;
    if values.len() < rows * anchors {
        return Err(format!("has {} values for shape {shape:?}", values.len()));
    }
    if let Some(&class) = config.classes.iter().find(|&&class| class >= class_count) {
        return Err(format!(
            "has {class_count} classes but the config asks for class {class}"
        ));
    }
    let allowed: Vec<usize> = if config.classes.is_empty() {
        (0..class_count).collect()
    } else {
        config.classes.clone()
    };
    // Channel-major: row r of anchor a is at r * anchors + a.
    let at = |row: usize, anchor: usize| values[row * anchors + anchor];

    let mut candidates: Vec<ObjectDetection> = Vec::new();
    for anchor in 0..anchors {
        let best = allowed
            .iter()
            .map(|&class| (class, at(4 + class, anchor)))
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        let Some((class_id, score)) = best else {
            continue;
        };
        if score < config.score_threshold {
            continue;
        }
        let (centre_x, centre_y, width, height) =
            (at(0, anchor), at(1, anchor), at(2, anchor), at(3, anchor));
        candidates.push(ObjectDetection {
            bbox: [
                centre_x - width / 2.0,
                centre_y - height / 2.0,
                centre_x + width / 2.0,
                centre_y + height / 2.0,
            ],
            score,
            class_id,
        });
    }

    let mut kept: Vec<ObjectDetection> = Vec::new();
    for &class in &allowed {
        let of_class: Vec<&ObjectDetection> = candidates
            .iter()
            .filter(|object| object.class_id == class)
            .collect();
        let boxes: Vec<BoxXyxy> = of_class.iter().map(|object| object.bbox).collect();
        let scores: Vec<f32> = of_class.iter().map(|object| object.score).collect();
        kept.extend(
            nms(&boxes, &scores, config.nms_iou)
                .into_iter()
                .map(|index| *of_class[index]),
        );
    }
    kept.sort_by(|a, b| b.score.total_cmp(&a.score));
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lays out anchors (cx, cy, w, h, class scores...) the way the graph does: channel-major.
    fn output(anchors: &[[f32; 6]]) -> (Vec<i64>, Vec<f32>) {
        let rows = 6;
        let mut values = vec![0.0; rows * anchors.len()];
        for (anchor, fields) in anchors.iter().enumerate() {
            for (row, &value) in fields.iter().enumerate() {
                values[row * anchors.len() + anchor] = value;
            }
        }
        (vec![1, rows as i64, anchors.len() as i64], values)
    }

    #[test]
    fn decodes_centre_boxes_and_suppresses_per_class() {
        let (shape, values) = output(&[
            [50.0, 50.0, 20.0, 40.0, 0.9, 0.1], // class 0
            [51.0, 50.0, 20.0, 40.0, 0.8, 0.0], // duplicate of the first
            [50.0, 50.0, 20.0, 40.0, 0.1, 0.7], // same place, class 1: kept
            [200.0, 10.0, 4.0, 4.0, 0.2, 0.2],  // below threshold
        ]);
        let config = YoloConfig::default();
        let objects = decode_output(&shape, &values, &config).unwrap();
        assert_eq!(objects.len(), 2, "{objects:?}");
        assert_eq!(objects[0].bbox, [40.0, 30.0, 60.0, 70.0]);
        assert_eq!((objects[0].class_id, objects[0].score), (0, 0.9));
        assert_eq!((objects[1].class_id, objects[1].score), (1, 0.7));
    }

    #[test]
    fn class_filter_keeps_only_named_classes() {
        let (shape, values) = output(&[
            [50.0, 50.0, 20.0, 40.0, 0.9, 0.3],
            [150.0, 50.0, 20.0, 40.0, 0.1, 0.6],
        ]);
        let config = YoloConfig {
            classes: vec![1],
            ..YoloConfig::default()
        };
        let objects = decode_output(&shape, &values, &config).unwrap();
        // The first anchor's best allowed class is 1 at 0.3, which still passes 0.25.
        assert_eq!(
            objects
                .iter()
                .map(|object| (object.class_id, object.score))
                .collect::<Vec<_>>(),
            vec![(1, 0.6), (1, 0.3)]
        );
        let unknown = YoloConfig {
            classes: vec![5],
            ..YoloConfig::default()
        };
        assert!(
            decode_output(&shape, &values, &unknown)
                .unwrap_err()
                .contains("class 5")
        );
    }

    #[test]
    fn malformed_shapes_are_reported() {
        let config = YoloConfig::default();
        assert!(
            decode_output(&[1, 5], &[], &config)
                .unwrap_err()
                .contains("expected")
        );
        assert!(
            decode_output(&[1, 4, 10], &[0.0; 40], &config)
                .unwrap_err()
                .contains("one class")
        );
        assert!(
            decode_output(&[1, 5, 10], &[0.0; 3], &config)
                .unwrap_err()
                .contains("3 values")
        );
    }
}

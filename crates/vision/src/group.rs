//! Choosing the frame that best shows the people of a scene together.
//!
//! A scene's image should show every role that is present, large and sharp enough to read
//! their expressions. Frames are ranked, in this order of importance, by:
//! 1. the number of distinct faces, capped at the number of roles expected (a crowd behind the
//!    cast earns nothing extra);
//! 2. the height of the smallest counted face, in coarse size steps (so that a few pixels do
//!    not outweigh a clearly sharper frame);
//! 3. the mean sharpness of the counted faces (variance of the Laplacian of their pixels),
//!    where the caller measured it;
//! 4. the exact smallest face height, then the earlier frame.

use serde::{Deserialize, Serialize};

use super::image::RgbImage;
use super::nms::{area, iou};
use super::scrfd::FaceDetection;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct GroupFrameParams {
    /// Faces below this detector score are not counted; 0 to 1.
    pub min_score: f32,
    /// Two faces overlapping by more than this IoU are one person (e.g. boxes from two
    /// detectors); 0 to 1.
    pub duplicate_iou: f32,
    /// Ratio between consecutive size steps of rule 2; 1.25 means faces within about 25% of
    /// each other's height tie on size. 1 to 10; 1: sizes are not compared in steps.
    pub size_step: f32,
}

impl viss_engine::range::Validate for GroupFrameParams {
    fn validate(&self) -> Result<(), viss_engine::range::BadSetting> {
        use viss_engine::range::{Range, UNIT, check};
        check("min_score", self.min_score, UNIT)?;
        check("duplicate_iou", self.duplicate_iou, UNIT)?;
        check("size_step", self.size_step, Range::new(1.0, 10.0))
    }
}

impl Default for GroupFrameParams {
    fn default() -> Self {
        Self {
            min_score: 0.5,
            duplicate_iou: 0.5,
            size_step: 1.25,
        }
    }
}

/// The faces found in one candidate frame.
#[derive(Debug, Clone, PartialEq)]
pub struct FrameFaces {
    pub frame_height: u32,
    pub faces: Vec<FaceDetection>,
    /// One sharpness per face (see [`face_sharpness`]), in the order of `faces`, if measured.
    pub sharpness: Option<Vec<f32>>,
}

/// Why a frame ranked where it did; kept in the record of the choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FrameScore {
    pub index: usize,
    pub distinct_faces: usize,
    /// `distinct_faces` capped at the expected number of roles.
    pub counted_faces: usize,
    /// Height of the smallest counted face as a fraction of the frame height (0 without faces).
    pub smallest_face_height: f32,
    /// `floor(log(smallest_face_height) / log(size_step))`; `i32::MIN` without faces.
    pub size_step_index: i32,
    /// Mean sharpness of the counted faces; `None` when not measured.
    pub mean_sharpness: Option<f32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GroupFrameChoice {
    pub chosen: usize,
    pub expected_roles: usize,
    /// Every frame's score, in input order.
    pub frames: Vec<FrameScore>,
}

/// Picks the best frame for `expected_roles` people (0: no cap); `None` when `frames` is empty.
pub fn choose_group_frame(
    frames: &[FrameFaces],
    expected_roles: usize,
    params: &GroupFrameParams,
) -> Option<GroupFrameChoice> {
    let cap = if expected_roles == 0 {
        usize::MAX
    } else {
        expected_roles
    };
    let scores: Vec<FrameScore> = frames
        .iter()
        .enumerate()
        .map(|(index, frame)| score_frame(index, frame, cap, params))
        .collect();
    let chosen = scores
        .iter()
        .max_by(|a, b| {
            a.counted_faces
                .cmp(&b.counted_faces)
                .then(a.size_step_index.cmp(&b.size_step_index))
                .then(compare_sharpness(a.mean_sharpness, b.mean_sharpness))
                .then(a.smallest_face_height.total_cmp(&b.smallest_face_height))
                // max_by keeps the last of equals; reversing the index keeps the earliest.
                .then(b.index.cmp(&a.index))
        })?
        .index;
    Some(GroupFrameChoice {
        chosen,
        expected_roles,
        frames: scores,
    })
}

/// A measured sharpness beats an unmeasured one, since the caller could measure it.
fn compare_sharpness(a: Option<f32>, b: Option<f32>) -> std::cmp::Ordering {
    match (a, b) {
        (Some(a), Some(b)) => a.total_cmp(&b),
        (a, b) => a.is_some().cmp(&b.is_some()),
    }
}

fn score_frame(
    index: usize,
    frame: &FrameFaces,
    cap: usize,
    params: &GroupFrameParams,
) -> FrameScore {
    // Largest first, so duplicates resolve to the larger box and the cap keeps the largest faces.
    let mut candidates: Vec<usize> = (0..frame.faces.len())
        .filter(|&face| frame.faces[face].score >= params.min_score)
        .collect();
    candidates.sort_by(|&a, &b| {
        area(&frame.faces[b].bbox)
            .total_cmp(&area(&frame.faces[a].bbox))
            .then(a.cmp(&b))
    });
    let mut distinct: Vec<usize> = Vec::new();
    for face in candidates {
        if distinct.iter().all(|&kept| {
            iou(&frame.faces[kept].bbox, &frame.faces[face].bbox) <= params.duplicate_iou
        }) {
            distinct.push(face);
        }
    }
    let counted = &distinct[..distinct.len().min(cap)];
    let frame_height = frame.frame_height.max(1) as f32;
    let smallest_face_height = counted
        .iter()
        .map(|&face| {
            (frame.faces[face].bbox[3] - frame.faces[face].bbox[1]).max(0.0) / frame_height
        })
        .min_by(f32::total_cmp)
        .unwrap_or(0.0);
    let size_step_index = if smallest_face_height > 0.0 && params.size_step > 1.0 {
        (smallest_face_height.ln() / params.size_step.ln()).floor() as i32
    } else {
        i32::MIN
    };
    let mean_sharpness = frame
        .sharpness
        .as_ref()
        .filter(|_| !counted.is_empty())
        .map(|sharpness| {
            counted
                .iter()
                .map(|&face| sharpness.get(face).copied().unwrap_or(0.0))
                .sum::<f32>()
                / counted.len() as f32
        });
    FrameScore {
        index,
        distinct_faces: distinct.len(),
        counted_faces: counted.len(),
        smallest_face_height,
        size_step_index,
        mean_sharpness,
    }
}

/// Variance of the 4-neighbour Laplacian of the luma inside `bbox` (clipped to the image): a
/// blurred or out-of-focus face has little high-frequency energy and scores low. Boxes smaller
/// than 3x3 pixels score 0.
pub fn face_sharpness(image: &RgbImage, bbox: &[f32; 4]) -> f32 {
    let x1 = (bbox[0].max(0.0).floor() as u32).min(image.width());
    let y1 = (bbox[1].max(0.0).floor() as u32).min(image.height());
    let x2 = (bbox[2].max(0.0).ceil() as u32).min(image.width());
    let y2 = (bbox[3].max(0.0).ceil() as u32).min(image.height());
    if x2 < x1 + 3 || y2 < y1 + 3 {
        return 0.0;
    }
    let (width, height) = ((x2 - x1) as usize, (y2 - y1) as usize);
    let luma: Vec<f32> = (y1..y2)
        .flat_map(|y| (x1..x2).map(move |x| (x, y)))
        .map(|(x, y)| {
            let [r, g, b] = image.get_pixel(x, y).0;
            0.299 * f32::from(r) + 0.587 * f32::from(g) + 0.114 * f32::from(b)
        })
        .collect();
    let mut sum = 0.0f64;
    let mut sum_of_squares = 0.0f64;
    let mut count = 0usize;
    for y in 1..height - 1 {
        for x in 1..width - 1 {
            let at = y * width + x;
            let laplacian =
                luma[at - 1] + luma[at + 1] + luma[at - width] + luma[at + width] - 4.0 * luma[at];
            sum += f64::from(laplacian);
            sum_of_squares += f64::from(laplacian) * f64::from(laplacian);
            count += 1;
        }
    }
    let mean = sum / count as f64;
    (sum_of_squares / count as f64 - mean * mean).max(0.0) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn face(x: f32, y: f32, size: f32) -> FaceDetection {
        FaceDetection {
            bbox: [x, y, x + size, y + size],
            score: 0.9,
            landmarks: [[x, y]; 5],
        }
    }

    fn frame(faces: Vec<FaceDetection>) -> FrameFaces {
        FrameFaces {
            frame_height: 360,
            faces,
            sharpness: None,
        }
    }

    #[test]
    fn more_roles_beat_bigger_faces() {
        let frames = [
            frame(vec![face(0.0, 0.0, 200.0)]),
            frame(vec![face(0.0, 0.0, 40.0), face(100.0, 0.0, 40.0)]),
        ];
        let choice = choose_group_frame(&frames, 2, &GroupFrameParams::default()).unwrap();
        assert_eq!(choice.chosen, 1);
        assert_eq!(choice.frames[0].counted_faces, 1);
        assert_eq!(choice.frames[1].counted_faces, 2);
    }

    #[test]
    fn faces_beyond_the_expected_roles_earn_nothing() {
        let crowd = (0..6).map(|i| face(i as f32 * 50.0, 0.0, 30.0)).collect();
        let cast = vec![face(0.0, 0.0, 120.0), face(150.0, 0.0, 110.0)];
        let choice = choose_group_frame(
            &[frame(crowd), frame(cast)],
            2,
            &GroupFrameParams::default(),
        )
        .unwrap();
        assert_eq!(choice.chosen, 1, "{:?}", choice.frames);
        assert_eq!(choice.frames[0].distinct_faces, 6);
        assert_eq!(choice.frames[0].counted_faces, 2);
        // Without a cap the crowd wins.
        assert_eq!(
            choose_group_frame(
                &[
                    frame((0..6).map(|i| face(i as f32 * 50.0, 0.0, 30.0)).collect()),
                    frame(vec![face(0.0, 0.0, 120.0)])
                ],
                0,
                &GroupFrameParams::default()
            )
            .unwrap()
            .chosen,
            0
        );
    }

    #[test]
    fn sharpness_decides_between_similar_sizes() {
        let blurred = FrameFaces {
            sharpness: Some(vec![5.0, 7.0]),
            ..frame(vec![face(0.0, 0.0, 100.0), face(150.0, 0.0, 102.0)])
        };
        let sharp = FrameFaces {
            sharpness: Some(vec![80.0, 90.0]),
            ..frame(vec![face(0.0, 0.0, 96.0), face(150.0, 0.0, 97.0)])
        };
        let choice =
            choose_group_frame(&[blurred, sharp], 2, &GroupFrameParams::default()).unwrap();
        assert_eq!(choice.chosen, 1, "{:?}", choice.frames);
        assert_eq!(choice.frames[1].mean_sharpness, Some(85.0));
        assert_eq!(
            choice.frames[0].size_step_index,
            choice.frames[1].size_step_index
        );
    }

    #[test]
    fn much_larger_faces_beat_sharpness() {
        let small_sharp = FrameFaces {
            sharpness: Some(vec![90.0]),
            ..frame(vec![face(0.0, 0.0, 40.0)])
        };
        let large_soft = FrameFaces {
            sharpness: Some(vec![10.0]),
            ..frame(vec![face(0.0, 0.0, 160.0)])
        };
        assert_eq!(
            choose_group_frame(&[small_sharp, large_soft], 1, &GroupFrameParams::default())
                .unwrap()
                .chosen,
            1
        );
    }

    #[test]
    fn duplicates_and_weak_faces_are_not_counted() {
        let mut weak = face(300.0, 0.0, 50.0);
        weak.score = 0.3;
        let faces = vec![face(0.0, 0.0, 100.0), face(2.0, 2.0, 98.0), weak];
        let choice = choose_group_frame(&[frame(faces)], 3, &GroupFrameParams::default()).unwrap();
        assert_eq!(choice.frames[0].distinct_faces, 1);
    }

    #[test]
    fn ties_keep_the_earliest_frame_and_empty_input_has_no_choice() {
        let frames = [
            frame(vec![face(0.0, 0.0, 50.0)]),
            frame(vec![face(10.0, 0.0, 50.0)]),
            frame(vec![]),
        ];
        assert_eq!(
            choose_group_frame(&frames, 1, &GroupFrameParams::default())
                .unwrap()
                .chosen,
            0
        );
        assert_eq!(
            choose_group_frame(&[], 1, &GroupFrameParams::default()),
            None
        );
        let empty = choose_group_frame(&[frame(vec![])], 1, &GroupFrameParams::default()).unwrap();
        assert_eq!(
            (
                empty.frames[0].counted_faces,
                empty.frames[0].size_step_index
            ),
            (0, i32::MIN)
        );
    }

    #[test]
    fn checkerboard_is_sharper_than_flat_and_gradient() {
        let size = 32;
        let checker = RgbImage::from_fn(size, size, |x, y| {
            if (x + y) % 2 == 0 {
                image::Rgb([255; 3])
            } else {
                image::Rgb([0; 3])
            }
        });
        let gradient = RgbImage::from_fn(size, size, |x, _| image::Rgb([(x * 8) as u8; 3]));
        let flat = RgbImage::from_pixel(size, size, image::Rgb([128; 3]));
        let bbox = [0.0, 0.0, size as f32, size as f32];
        assert_eq!(face_sharpness(&flat, &bbox), 0.0);
        assert!(
            face_sharpness(&gradient, &bbox) < 1e-3,
            "a linear ramp has zero Laplacian"
        );
        assert!(face_sharpness(&checker, &bbox) > 1e5);
        assert_eq!(
            face_sharpness(&checker, &[30.0, 30.0, 40.0, 40.0]),
            0.0,
            "2x2 after clipping"
        );
    }
}

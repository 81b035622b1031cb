//! Face identity embeddings with SFace (OpenCV Zoo, 128-d), from a face's five landmarks.
//!
//! A detected face is first aligned: the similarity transform (rotation, uniform scale,
//! translation) that best maps its five landmarks onto the standard ArcFace 112x112 template,
//! in the least-squares sense, resamples it into a 112x112 crop with bilinear interpolation and
//! black outside the image, as OpenCV's `FaceRecognizerSF::alignCrop` does. The crop is fed as
//! RGB values 0..255 (the graph normalises them itself: `(x - 127.5) / 128`), the channel order
//! OpenCV's `FaceRecognizerSF::feature` gives it (`swapRB`). The 128 outputs of `fc1` are
//! L2-normalised, so the cosine similarity of two faces is their dot product.
//!
//! Landmarks come from either detector ([`super::scrfd`] or [`super::yunet`]): both give left eye,
//! right eye, nose tip, left and right mouth corner as seen by the viewer, the template's order.

use std::path::Path;

use super::image::RgbImage;
use super::scrfd::FaceDetection;
use super::session::{DetectorError, ImageSession};

/// Length of an SFace embedding.
pub const EMBEDDING_DIM: usize = 128;
/// Side of the aligned face crop SFace takes.
pub const ALIGNED_SIZE: u32 = 112;

/// Where the five landmarks of a frontal face lie in a 112x112 crop (ArcFace's template, also
/// OpenCV's): left eye, right eye, nose tip, left and right mouth corner, viewer's side.
pub const ARCFACE_TEMPLATE: [[f32; 2]; 5] = [
    [38.2946, 51.6963],
    [73.5318, 51.5014],
    [56.0252, 71.7366],
    [41.5493, 92.3655],
    [70.7299, 92.2041],
];

/// The output holding the embedding in the OpenCV Zoo export.
const EMBEDDING_OUTPUT: &str = "fc1";

/// `p -> [[a, -b], [b, a]] p + t`: rotation and uniform scale (`a`, `b`), then translation.
#[derive(Debug, Clone, Copy, PartialEq, schemars::JsonSchema)]
pub struct Similarity {
    pub a: f64,
    pub b: f64,
    pub tx: f64,
    pub ty: f64,
}

impl Similarity {
    pub fn apply(&self, [x, y]: [f64; 2]) -> [f64; 2] {
        [
            self.a * x - self.b * y + self.tx,
            self.b * x + self.a * y + self.ty,
        ]
    }

    /// Scale factor of the transform.
    pub fn scale(&self) -> f64 {
        self.a.hypot(self.b)
    }

    /// The inverse transform; `None` when the transform collapses everything to a point.
    pub fn inverse(&self) -> Option<Similarity> {
        let norm = self.a * self.a + self.b * self.b;
        if norm <= f64::EPSILON {
            return None;
        }
        // The inverse of [[a, -b], [b, a]] is [[a, b], [-b, a]] / (a² + b²).
        let (a, b) = (self.a / norm, -self.b / norm);
        Some(Similarity {
            a,
            b,
            tx: -(a * self.tx - b * self.ty),
            ty: -(b * self.tx + a * self.ty),
        })
    }
}

/// The similarity transform minimising `Σ |T(from_i) - to_i|²` (no reflection).
///
/// With both point sets centred on their means, the problem is linear in `a` and `b`:
/// `a = Σ (x·y) / Σ |x|²` and `b = Σ (x × y) / Σ |x|²` (x from `from`, y from `to`, × the 2-D
/// cross product), and the translation carries the mean of `from` onto the mean of `to`.
/// `None` when `from` has fewer than two distinct points.
pub fn estimate_similarity(from: &[[f32; 2]], to: &[[f32; 2]]) -> Option<Similarity> {
    assert_eq!(from.len(), to.len(), "one target per point");
    if from.is_empty() {
        return None;
    }
    let count = from.len() as f64;
    let mean = |points: &[[f32; 2]]| {
        let (sx, sy) = points.iter().fold((0.0, 0.0), |(sx, sy), p| {
            (sx + f64::from(p[0]), sy + f64::from(p[1]))
        });
        [sx / count, sy / count]
    };
    let (from_mean, to_mean) = (mean(from), mean(to));
    let (mut dot, mut cross, mut spread) = (0.0, 0.0, 0.0);
    for (source, target) in from.iter().zip(to) {
        let x = [
            f64::from(source[0]) - from_mean[0],
            f64::from(source[1]) - from_mean[1],
        ];
        let y = [
            f64::from(target[0]) - to_mean[0],
            f64::from(target[1]) - to_mean[1],
        ];
        dot += x[0] * y[0] + x[1] * y[1];
        cross += x[0] * y[1] - x[1] * y[0];
        spread += x[0] * x[0] + x[1] * x[1];
    }
    if spread <= 1e-12 || !spread.is_finite() || !dot.is_finite() || !cross.is_finite() {
        return None;
    }
    let (a, b) = (dot / spread, cross / spread);
    Some(Similarity {
        a,
        b,
        tx: to_mean[0] - (a * from_mean[0] - b * from_mean[1]),
        ty: to_mean[1] - (b * from_mean[0] + a * from_mean[1]),
    })
}

/// The `size` x `size` image whose pixel `(u, v)` shows `image` at `to_crop⁻¹(u, v)`, sampled
/// bilinearly (pixel centres at integer coordinates); pixels outside `image` count as black.
pub fn warp_similarity(image: &RgbImage, to_crop: &Similarity, size: u32) -> Option<RgbImage> {
    let back = to_crop.inverse()?;
    let (width, height) = (image.width() as i64, image.height() as i64);
    let source = image.as_raw();
    let mut pixels = Vec::with_capacity((size * size * 3) as usize);
    for v in 0..size {
        for u in 0..size {
            let [x, y] = back.apply([f64::from(u), f64::from(v)]);
            let (x0, y0) = (x.floor(), y.floor());
            let (fx, fy) = (x - x0, y - y0);
            let (x0, y0) = (x0 as i64, y0 as i64);
            let mut sum = [0.0f64; 3];
            for (dy, wy) in [(0, 1.0 - fy), (1, fy)] {
                for (dx, wx) in [(0, 1.0 - fx), (1, fx)] {
                    let (sx, sy) = (x0 + dx, y0 + dy);
                    if sx < 0 || sy < 0 || sx >= width || sy >= height {
                        continue;
                    }
                    let at = ((sy * width + sx) * 3) as usize;
                    let weight = wx * wy;
                    for channel in 0..3 {
                        sum[channel] += weight * f64::from(source[at + channel]);
                    }
                }
            }
            pixels.extend(sum.map(|value| value.round().clamp(0.0, 255.0) as u8));
        }
    }
    RgbImage::from_raw(size, size, pixels)
}

/// The 112x112 crop SFace expects for a face with these landmarks; `None` when the landmarks
/// are degenerate (all on one point).
pub fn align_face(image: &RgbImage, landmarks: &[[f32; 2]; 5]) -> Option<RgbImage> {
    let to_crop = estimate_similarity(landmarks, &ARCFACE_TEMPLATE)?;
    warp_similarity(image, &to_crop, ALIGNED_SIZE)
}

pub struct SfaceEmbedder {
    session: ImageSession,
    output: String,
}

impl SfaceEmbedder {
    /// Loads the converted SFace graph (`ModelCache::ensure_face_recognition`).
    pub fn load(
        onnx_runtime_library: &Path,
        model_onnx: &Path,
        intra_threads: usize,
    ) -> Result<Self, DetectorError> {
        let session = ImageSession::load(onnx_runtime_library, model_onnx, intra_threads, "SFace")?;
        let unsupported = |reason: String| DetectorError::UnsupportedModel {
            model: model_onnx.to_path_buf(),
            detector: "SFace",
            reason,
        };
        if session.fixed_input_size != Some((ALIGNED_SIZE, ALIGNED_SIZE)) {
            return Err(unsupported(format!(
                "its input `{}` is {:?}; SFace takes a fixed 112x112 face",
                session.input_name, session.fixed_input_size
            )));
        }
        let output = match session.output_names.as_slice() {
            [single] => single.clone(),
            names => names
                .iter()
                .find(|name| *name == EMBEDDING_OUTPUT)
                .cloned()
                .ok_or_else(|| {
                    unsupported(format!(
                        "its outputs are {names:?}; expected `{EMBEDDING_OUTPUT}`"
                    ))
                })?,
        };
        Ok(Self { session, output })
    }

    /// Everything that shapes the embeddings: part of any cache key built on them.
    pub fn identity(&self) -> String {
        format!(
            "sface/v1 model-blake3={} align=arcface-112-lsq-similarity-bilinear input=rgb-0-255 l2",
            self.session.model_hash.to_hex()
        )
    }

    /// The unit-length embedding of the face with these landmarks in `image`.
    pub fn embed(
        &self,
        image: &RgbImage,
        landmarks: &[[f32; 2]; 5],
    ) -> Result<Vec<f32>, DetectorError> {
        let aligned = align_face(image, landmarks).ok_or_else(|| DetectorError::InvalidInput {
            model: self.session.model_path.clone(),
            reason: format!(
                "the face's landmarks {landmarks:?} are degenerate (no extent to align)"
            ),
        })?;
        self.embed_aligned(&aligned)
    }

    /// The unit-length embedding of a detected face.
    pub fn embed_face(
        &self,
        image: &RgbImage,
        face: &FaceDetection,
    ) -> Result<Vec<f32>, DetectorError> {
        self.embed(image, &face.landmarks)
    }

    /// The unit-length embedding of an already aligned 112x112 crop.
    pub fn embed_aligned(&self, aligned: &RgbImage) -> Result<Vec<f32>, DetectorError> {
        if aligned.dimensions() != (ALIGNED_SIZE, ALIGNED_SIZE) {
            return Err(DetectorError::InvalidInput {
                model: self.session.model_path.clone(),
                reason: format!(
                    "an aligned face is {}x{}; SFace takes 112x112 (use align_face)",
                    aligned.width(),
                    aligned.height()
                ),
            });
        }
        let plane = (ALIGNED_SIZE * ALIGNED_SIZE) as usize;
        let mut input = vec![0.0f32; 3 * plane];
        for (at, pixel) in aligned.as_raw().chunks_exact(3).enumerate() {
            for channel in 0..3 {
                input[channel * plane + at] = f32::from(pixel[channel]);
            }
        }
        self.session.run(
            input,
            ALIGNED_SIZE,
            ALIGNED_SIZE,
            &[self.output.as_str()],
            |outputs| {
                let (shape, values) = outputs[0];
                if values.len() != EMBEDDING_DIM || values.iter().any(|value| !value.is_finite()) {
                    return Err(self.session.unexpected_output(format!(
                        "`{}` of shape {shape:?}; expected {EMBEDDING_DIM} finite values",
                        self.output
                    )));
                }
                let mut embedding = values.to_vec();
                if !viss_text::embed::l2_normalise(&mut embedding) {
                    return Err(self
                        .session
                        .unexpected_output(format!("an all-zero `{}`", self.output)));
                }
                Ok(embedding)
            },
        )
    }
}

/// Cosine similarity of two embeddings (for unit-length ones, their dot product).
pub use viss_text::embed::cosine;

#[cfg(test)]
mod tests {
    use super::*;

    fn close(left: [f64; 2], right: [f32; 2], tolerance: f64) -> bool {
        (left[0] - f64::from(right[0])).abs() < tolerance
            && (left[1] - f64::from(right[1])).abs() < tolerance
    }

    #[test]
    fn exact_similarity_is_recovered() {
        // Rotate by 30°, scale by 0.4, shift: the estimate must give back the same transform.
        let (angle, scale) = (30f64.to_radians(), 0.4);
        let truth = Similarity {
            a: scale * angle.cos(),
            b: scale * angle.sin(),
            tx: 12.5,
            ty: -7.0,
        };
        let from: Vec<[f32; 2]> = [
            [100.0, 200.0],
            [180.0, 195.0],
            [140.0, 240.0],
            [110.0, 280.0],
            [175.0, 282.0],
        ]
        .to_vec();
        let to: Vec<[f32; 2]> = from
            .iter()
            .map(|&[x, y]| truth.apply([f64::from(x), f64::from(y)]).map(|v| v as f32))
            .collect();
        let estimate = estimate_similarity(&from, &to).unwrap();
        assert!(
            (estimate.a - truth.a).abs() < 1e-5 && (estimate.b - truth.b).abs() < 1e-5,
            "{estimate:?}"
        );
        assert!(
            (estimate.tx - truth.tx).abs() < 1e-3 && (estimate.ty - truth.ty).abs() < 1e-3,
            "{estimate:?}"
        );
        assert!((estimate.scale() - scale).abs() < 1e-6);
        let back = estimate.inverse().unwrap();
        for point in &from {
            assert!(close(
                back.apply(estimate.apply([f64::from(point[0]), f64::from(point[1])])),
                *point,
                1e-4
            ));
        }
    }

    #[test]
    fn least_squares_fit_beats_any_nearby_transform() {
        // Noisy correspondences: the estimate's squared error is a minimum, so nudging any of
        // its four parameters must not lower it.
        let from = [
            [10.0f32, 10.0],
            [50.0, 12.0],
            [30.0, 35.0],
            [14.0, 55.0],
            [47.0, 57.0],
        ];
        let to = ARCFACE_TEMPLATE;
        let best = estimate_similarity(&from, &to).unwrap();
        let error = |t: &Similarity| -> f64 {
            from.iter()
                .zip(&to)
                .map(|(p, q)| {
                    let [x, y] = t.apply([f64::from(p[0]), f64::from(p[1])]);
                    (x - f64::from(q[0])).powi(2) + (y - f64::from(q[1])).powi(2)
                })
                .sum()
        };
        let minimum = error(&best);
        for (da, db, dx, dy) in [
            (1e-3, 0.0, 0.0, 0.0),
            (0.0, 1e-3, 0.0, 0.0),
            (0.0, 0.0, 0.05, 0.0),
            (0.0, 0.0, 0.0, 0.05),
        ] {
            for sign in [-1.0, 1.0] {
                let nudged = Similarity {
                    a: best.a + sign * da,
                    b: best.b + sign * db,
                    tx: best.tx + sign * dx,
                    ty: best.ty + sign * dy,
                };
                assert!(
                    error(&nudged) > minimum,
                    "{nudged:?} fits better than {best:?}"
                );
            }
        }
    }

    #[test]
    fn degenerate_landmarks_are_refused() {
        assert!(estimate_similarity(&[[5.0, 5.0]; 5], &ARCFACE_TEMPLATE).is_none());
        let image = RgbImage::new(20, 20);
        assert!(align_face(&image, &[[3.0, 3.0]; 5]).is_none());
    }

    #[test]
    fn landmarks_already_on_the_template_give_the_same_pixels() {
        // An image that is already the aligned crop, with landmarks on the template, must come
        // back unchanged (identity transform, bilinear at integer positions).
        let pixels: Vec<u8> = (0..112 * 112 * 3)
            .map(|index| (index * 7 % 251) as u8)
            .collect();
        let image = RgbImage::from_raw(112, 112, pixels).unwrap();
        let aligned = align_face(&image, &ARCFACE_TEMPLATE).unwrap();
        assert_eq!(aligned.as_raw(), image.as_raw());
    }

    #[test]
    fn a_face_twice_as_large_is_scaled_down() {
        // A 224x224 image whose landmarks are the template doubled: pixel (u, v) of the crop is
        // pixel (2u, 2v) of the image. A horizontal ramp makes that checkable.
        let mut image = RgbImage::new(224, 224);
        for (x, _, pixel) in image.enumerate_pixels_mut() {
            pixel.0 = [x as u8, 0, 255 - x as u8];
        }
        let doubled = ARCFACE_TEMPLATE.map(|[x, y]| [x * 2.0, y * 2.0]);
        let aligned = align_face(&image, &doubled).unwrap();
        for u in [0u32, 10, 55, 111] {
            assert_eq!(
                aligned.get_pixel(u, 40).0,
                [(2 * u) as u8, 0, 255 - (2 * u) as u8]
            );
        }
    }

    #[test]
    fn outside_the_image_is_black() {
        let mut image = RgbImage::new(50, 50);
        image
            .pixels_mut()
            .for_each(|pixel| pixel.0 = [200, 200, 200]);
        // Shift the template 60 px right: the crop's left part falls outside the image.
        let shifted = ARCFACE_TEMPLATE.map(|[x, y]| [x - 60.0, y]);
        let aligned = align_face(&image, &shifted).unwrap();
        // Crop column u shows image column u - 60: inside the image for u in 60..=109.
        assert_eq!(aligned.get_pixel(0, 10).0, [0, 0, 0]);
        assert_eq!(aligned.get_pixel(80, 10).0, [200, 200, 200]);
        assert_eq!(aligned.get_pixel(111, 10).0, [0, 0, 0]);
    }
}

//! A CLIP-style image encoder through ONNX Runtime: one feature vector per image.
//!
//! No registry package ships a CLIP model, so this runs only when one is configured
//! (`[models.image_embedder]` in viss.toml): any ONNX export of a CLIP vision tower whose one
//! input is `[1 or batch, 3, size, size]` and whose output is `[1, dim]` (Hugging Face's
//! `CLIPVisionModelWithProjection` export names it `image_embeds`).
//!
//! Preprocessing is CLIP's own for ViT-L/14, not an approximation of it: the shorter side
//! resized to 224 with Pillow's bicubic filter (byte-exact, see [`super::resample`]), a centred
//! 224 x 224 crop, values scaled to 0..1 and normalised with CLIP's mean and std. Embeddings
//! are L2-normalised, as CLIP compares them by cosine.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::image::RgbImage;
use super::resample::resize_bicubic;
use super::session::{DetectorError, ImageSession};

/// CLIP's normalisation constants (OpenAI `clip`, `CLIPImageProcessor`).
pub const CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
// The digits as OpenAI publishes them (they round to the same f32 as clippy's shorter ones).
#[allow(clippy::excessive_precision)]
pub const CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_58, 0.275_777_11];

/// `[models.image_embedder]`: where the model is and how it was trained to see.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClipConfig {
    /// The ONNX file, relative to the project root.
    pub model_onnx: PathBuf,
    /// ONNX Runtime library; unset: the one `viss models fetch` gets.
    #[serde(default)]
    pub onnx_runtime_library: Option<PathBuf>,
    /// Side of the square input, 16 to 2048 (224 for ViT-L/14 and ViT-B/32; 336 for
    /// ViT-L/14@336px).
    #[serde(default = "default_input_size")]
    pub input_size: u32,
    /// Per channel, 0 to 1 (pixels are scaled to 0..1 first).
    #[serde(default = "default_mean")]
    pub mean: [f32; 3],
    /// Per channel, above 0 and at most 1.
    #[serde(default = "default_std")]
    pub std: [f32; 3],
    /// Output to read; unset: `image_embeds` when the graph has it, else its first output.
    #[serde(default)]
    pub output: Option<String>,
    /// ONNX Runtime threads for one image, 0 to 256; 0: one per core.
    #[serde(default)]
    pub intra_threads: usize,
}

impl viss_engine::range::Validate for ClipConfig {
    fn validate(&self) -> Result<(), viss_engine::range::BadSetting> {
        use viss_engine::range::{Range, THREADS, UNIT, check, check_each};
        check("input_size", self.input_size, Range::new(16.0, 2048.0))?;
        check_each("mean", &self.mean, UNIT)?;
        check_each("std", &self.std, Range::above(0.0, 1.0))?;
        check("intra_threads", self.intra_threads, THREADS)
    }
}

fn default_input_size() -> u32 {
    224
}

fn default_mean() -> [f32; 3] {
    CLIP_MEAN
}

fn default_std() -> [f32; 3] {
    CLIP_STD
}

/// The pixels CLIP sees: the shorter side resized to `size` (the longer to
/// `floor(size * long / short)`, as torchvision's `Resize(size)` computes it), then the centred
/// `size` x `size` crop (offsets rounded half to even, as Python's `round`).
pub fn clip_crop(image: &RgbImage, size: u32) -> RgbImage {
    let (width, height) = image.dimensions();
    let (short, long) = if width <= height {
        (width, height)
    } else {
        (height, width)
    };
    let new_long = ((u64::from(size) * u64::from(long)) / u64::from(short.max(1))) as u32;
    let (new_width, new_height) = if width <= height {
        (size, new_long)
    } else {
        (new_long, size)
    };
    let resized = resize_bicubic(image, new_width.max(1), new_height.max(1));
    let offset =
        |length: u32| (f64::from(length.saturating_sub(size)) / 2.0).round_ties_even() as u32;
    let (left, top) = (offset(new_width), offset(new_height));
    image::imageops::crop_imm(
        &resized,
        left,
        top,
        size.min(new_width),
        size.min(new_height),
    )
    .to_image()
}

/// `image` as the planar `[3, size, size]` float input CLIP takes.
pub fn clip_input(image: &RgbImage, size: u32, mean: [f32; 3], std: [f32; 3]) -> Vec<f32> {
    let crop = clip_crop(image, size);
    let plane = (crop.width() * crop.height()) as usize;
    let mut input = vec![0f32; plane * 3];
    for (index, pixel) in crop.pixels().enumerate() {
        for channel in 0..3 {
            input[channel * plane + index] =
                (f32::from(pixel.0[channel]) / 255.0 - mean[channel]) / std[channel];
        }
    }
    input
}

pub struct ClipImageEncoder {
    session: ImageSession,
    output: String,
    config: ClipConfig,
}

impl ClipImageEncoder {
    /// Loads `config.model_onnx` (already resolved against the project root) on the process's
    /// ONNX Runtime from `onnx_runtime_library`.
    pub fn load(onnx_runtime_library: &Path, config: ClipConfig) -> Result<Self, DetectorError> {
        let invalid = |reason: String| DetectorError::InvalidConfig {
            model: config.model_onnx.clone(),
            reason,
        };
        if config.input_size == 0 {
            return Err(invalid(
                "input_size must be at least 1 (224 for ViT-L/14)".to_string(),
            ));
        }
        if config.std.iter().any(|s| !(s.is_finite() && *s > 0.0))
            || config.mean.iter().any(|m| !m.is_finite())
        {
            return Err(invalid(format!(
                "mean {:?} must be finite and std {:?} positive",
                config.mean, config.std
            )));
        }
        let threads = viss_engine::range::threads(config.intra_threads);
        let session = ImageSession::load(
            onnx_runtime_library,
            &config.model_onnx,
            threads,
            "CLIP image encoder",
        )?;
        if let Some((height, width)) = session.fixed_input_size
            && (height != config.input_size || width != config.input_size)
        {
            return Err(invalid(format!(
                "input_size is {} but the model's input is fixed at {width}x{height}; set \
                 input_size = {width}",
                config.input_size
            )));
        }
        let output = match &config.output {
            Some(name) if session.output_names.contains(name) => name.clone(),
            Some(name) => {
                return Err(invalid(format!(
                    "the model has no output `{name}`; its outputs are {:?}",
                    session.output_names
                )));
            }
            None => session
                .output_names
                .iter()
                .find(|name| *name == "image_embeds")
                .or(session.output_names.first())
                .cloned()
                .ok_or_else(|| invalid("the model has no outputs".to_string()))?,
        };
        Ok(Self {
            session,
            output,
            config,
        })
    }

    /// Everything that shapes the vectors: part of any cache key built on them.
    pub fn identity(&self) -> String {
        format!(
            "clip-image/v1 model-blake3={} output={} input={} resize=pillow-bicubic-shorter-side \
             crop=centre mean={:?} std={:?} l2-normalised",
            self.session.model_hash.to_hex(),
            self.output,
            self.config.input_size,
            self.config.mean,
            self.config.std
        )
    }

    /// The L2-normalised embedding of `image`.
    pub fn embed(&self, image: &RgbImage) -> Result<Vec<f32>, DetectorError> {
        let size = self.config.input_size;
        let input = clip_input(image, size, self.config.mean, self.config.std);
        self.session
            .run(input, size, size, &[self.output.as_str()], |outputs| {
                let (shape, values) = outputs[0];
                let dims: Vec<i64> = shape.iter().copied().filter(|&d| d != 1).collect();
                if dims.len() != 1 || values.is_empty() {
                    return Err(self.session.unexpected_output(format!(
                        "`{}` of shape {shape:?}; an image embedding is [1, dim]",
                        self.output
                    )));
                }
                let norm = values.iter().map(|v| v * v).sum::<f32>().sqrt();
                if !norm.is_finite() || norm == 0.0 {
                    return Err(self
                        .session
                        .unexpected_output(format!("an embedding of norm {norm}")));
                }
                Ok(values.iter().map(|v| v / norm).collect())
            })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn textured(width: u32, height: u32) -> RgbImage {
        RgbImage::from_fn(width, height, |x, y| {
            image::Rgb([
                ((x * 7 + y * 3) % 256) as u8,
                ((x * y) % 251) as u8,
                if (x / 5 + y / 3) % 2 == 0 { 230 } else { 20 },
            ])
        })
    }

    #[derive(serde::Deserialize)]
    struct Reference {
        size: u32,
        mean: [f32; 3],
        std: [f32; 3],
        cases: Vec<Case>,
    }

    #[derive(serde::Deserialize)]
    struct Case {
        width: u32,
        height: u32,
        cropped_sha256: String,
        first_row: Vec<[u8; 3]>,
        channel_means: [f64; 3],
    }

    fn reference() -> Reference {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/clip/reference.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// The crop is Pillow's, byte for byte (tests/fixtures/clip/make_reference.py), for shrinks
    /// in either orientation and an enlargement.
    #[test]
    fn preprocessing_matches_pillow_clip_transform_exactly() {
        let reference = reference();
        assert_eq!((reference.mean, reference.std), (CLIP_MEAN, CLIP_STD));
        for case in &reference.cases {
            let crop = clip_crop(&textured(case.width, case.height), reference.size);
            assert_eq!(crop.dimensions(), (224, 224));
            let first_row: Vec<[u8; 3]> = (0..8).map(|x| crop.get_pixel(x, 0).0).collect();
            assert_eq!(first_row, case.first_row, "{}x{}", case.width, case.height);
            let digest: String = Sha256::digest(crop.as_raw())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(
                digest, case.cropped_sha256,
                "{}x{}",
                case.width, case.height
            );

            let input = clip_input(&textured(case.width, case.height), 224, CLIP_MEAN, CLIP_STD);
            let plane = 224 * 224;
            for channel in 0..3 {
                let mean = input[channel * plane..(channel + 1) * plane]
                    .iter()
                    .map(|&v| f64::from(v))
                    .sum::<f64>()
                    / plane as f64;
                assert!(
                    (mean - case.channel_means[channel]).abs() < 1e-5,
                    "{mean} vs {:?}",
                    case.channel_means
                );
            }
        }
    }

    /// A minimal ONNX model, encoded by hand (protobuf): `image_embeds =
    /// Flatten(GlobalAveragePool(pixel_values))`, input `[1, 3, 224, 224]`, output `[1, 3]`: an
    /// "image encoder" whose embedding is each channel's mean, enough to check everything around
    /// the graph.
    pub(crate) fn channel_mean_model() -> Vec<u8> {
        fn varint(mut value: u64, out: &mut Vec<u8>) {
            loop {
                let byte = (value & 0x7f) as u8;
                value >>= 7;
                if value == 0 {
                    out.push(byte);
                    return;
                }
                out.push(byte | 0x80);
            }
        }
        fn int_field(field: u64, value: u64, out: &mut Vec<u8>) {
            varint(field << 3, out);
            varint(value, out);
        }
        fn bytes_field(field: u64, bytes: &[u8], out: &mut Vec<u8>) {
            varint((field << 3) | 2, out);
            varint(bytes.len() as u64, out);
            out.extend_from_slice(bytes);
        }
        fn tensor_value_info(name: &str, dims: &[u64]) -> Vec<u8> {
            let mut shape = Vec::new();
            for &dim in dims {
                let mut dimension = Vec::new();
                int_field(1, dim, &mut dimension);
                bytes_field(1, &dimension, &mut shape);
            }
            let mut tensor = Vec::new();
            int_field(1, 1, &mut tensor); // elem_type FLOAT
            bytes_field(2, &shape, &mut tensor);
            let mut type_proto = Vec::new();
            bytes_field(1, &tensor, &mut type_proto);
            let mut info = Vec::new();
            bytes_field(1, name.as_bytes(), &mut info);
            bytes_field(2, &type_proto, &mut info);
            info
        }
        fn node(input: &str, output: &str, op: &str) -> Vec<u8> {
            let mut node = Vec::new();
            bytes_field(1, input.as_bytes(), &mut node);
            bytes_field(2, output.as_bytes(), &mut node);
            bytes_field(3, op.as_bytes(), &mut node);
            bytes_field(4, op.as_bytes(), &mut node);
            node
        }
        let mut graph = Vec::new();
        bytes_field(
            1,
            &node("pixel_values", "pooled", "GlobalAveragePool"),
            &mut graph,
        );
        bytes_field(1, &node("pooled", "image_embeds", "Flatten"), &mut graph);
        bytes_field(2, b"channel_means", &mut graph);
        bytes_field(
            11,
            &tensor_value_info("pixel_values", &[1, 3, 224, 224]),
            &mut graph,
        );
        bytes_field(12, &tensor_value_info("image_embeds", &[1, 3]), &mut graph);
        let mut opset = Vec::new();
        bytes_field(1, b"", &mut opset);
        int_field(2, 13, &mut opset);
        let mut model = Vec::new();
        int_field(1, 8, &mut model); // ir_version
        bytes_field(2, b"viss-test", &mut model);
        bytes_field(7, &graph, &mut model);
        bytes_field(8, &opset, &mut model);
        model
    }

    /// The integration tests configure this model as a project's CLIP encoder from a fixture
    /// file; it must be exactly what the generator above makes.
    #[test]
    fn the_fixture_model_is_the_generated_one() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/clip/channel_means.onnx");
        assert_eq!(std::fs::read(fixture).unwrap(), channel_mean_model());
    }

    #[test]
    fn encoder_runs_the_graph_on_clip_input_and_normalises() {
        let runtime = viss_models::ModelCache::from_env()
            .unwrap()
            .ensure_face_detector()
            .unwrap()
            .onnx_runtime_library;
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("channel_means.onnx");
        std::fs::write(&model, channel_mean_model()).unwrap();
        let config: ClipConfig =
            toml::from_str(&format!("model_onnx = {:?}\nintra_threads = 1", model)).unwrap();
        let encoder = ClipImageEncoder::load(&runtime, config).unwrap();
        assert!(
            encoder.identity().contains("output=image_embeds input=224"),
            "{}",
            encoder.identity()
        );

        let image = textured(300, 217);
        let embedding = encoder.embed(&image).unwrap();
        let input = clip_input(&image, 224, CLIP_MEAN, CLIP_STD);
        let plane = 224 * 224;
        let means: Vec<f32> = (0..3)
            .map(|c| input[c * plane..(c + 1) * plane].iter().sum::<f32>() / plane as f32)
            .collect();
        let norm = means.iter().map(|v| v * v).sum::<f32>().sqrt();
        for (got, mean) in embedding.iter().zip(&means) {
            assert!(
                (got - mean / norm).abs() < 1e-4,
                "{embedding:?} vs {means:?}"
            );
        }
        let red = encoder
            .embed(&RgbImage::from_pixel(64, 48, image::Rgb([220, 20, 20])))
            .unwrap();
        let blue = encoder
            .embed(&RgbImage::from_pixel(64, 48, image::Rgb([20, 20, 220])))
            .unwrap();
        let cosine: f32 = red.iter().zip(&blue).map(|(a, b)| a * b).sum();
        assert!(cosine < 0.5, "red and blue embed apart: {cosine}");

        let wrong_size: ClipConfig =
            toml::from_str(&format!("model_onnx = {:?}\ninput_size = 336", model)).unwrap();
        let error = ClipImageEncoder::load(&runtime, wrong_size).err().unwrap();
        assert!(
            error.to_string().contains("set input_size = 224"),
            "{error}"
        );
        let wrong_output: ClipConfig = toml::from_str(&format!(
            "model_onnx = {:?}\noutput = \"pooler_output\"",
            model
        ))
        .unwrap();
        let error = ClipImageEncoder::load(&runtime, wrong_output)
            .err()
            .unwrap();
        assert!(
            error.to_string().contains("no output `pooler_output`"),
            "{error}"
        );
    }
}

//! Loading and running an image detector's ONNX graph: what SCRFD and YOLO share.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ort::session::Session;
use ort::value::{Tensor, TensorElementType};

use viss_engine::hash::ContentHash;
use viss_models::onnx_runtime::{self, OnnxRuntimeError};

#[derive(Debug, thiserror::Error)]
pub enum DetectorError {
    #[error(transparent)]
    OnnxRuntime(#[from] OnnxRuntimeError),

    #[error(
        "cannot read model file {path}: {source}; run `viss models fetch` or fix the path in the \
         config"
    )]
    ReadModelFile {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error(
        "cannot load ONNX model {model}: {reason}; the file may be incomplete (run `viss models \
         fetch`) or not an ONNX model"
    )]
    LoadModel { model: PathBuf, reason: String },

    #[error("ONNX model {model} cannot be used as a {detector} detector: {reason}")]
    UnsupportedModel {
        model: PathBuf,
        detector: &'static str,
        reason: String,
    },

    #[error("invalid detector config for {model}: {reason}")]
    InvalidConfig { model: PathBuf, reason: String },

    #[error("cannot run ONNX model {model} on this input: {reason}")]
    InvalidInput { model: PathBuf, reason: String },

    #[error("running ONNX model {model} failed: {reason}")]
    Inference { model: PathBuf, reason: String },

    #[error("ONNX model {model} returned {reason}")]
    UnexpectedOutput { model: PathBuf, reason: String },
}

/// Checks what every detector's config shares: thresholds that are fractions, and an input size
/// that the model's largest stride (32) divides.
pub(crate) fn check_detector_config(
    model: &Path,
    score_threshold: f32,
    nms_iou: f32,
    size_name: &str,
    size: u32,
) -> Result<(), DetectorError> {
    let invalid = |reason: String| DetectorError::InvalidConfig {
        model: model.to_path_buf(),
        reason,
    };
    if !(0.0..=1.0).contains(&score_threshold) || !(0.0..=1.0).contains(&nms_iou) {
        return Err(invalid(format!(
            "score_threshold and nms_iou must lie in 0..=1 (got {score_threshold} and {nms_iou})"
        )));
    }
    if size == 0 || !size.is_multiple_of(32) {
        return Err(invalid(format!(
            "{size_name} must be a positive multiple of 32 (got {size})"
        )));
    }
    Ok(())
}

/// A loaded graph with one float image input `[1, 3, H, W]`.
pub(crate) struct ImageSession {
    /// `Session::run` needs `&mut`: ONNX Runtime sessions are not safe to run concurrently.
    session: Mutex<Session>,
    pub input_name: String,
    /// Fixed input height and width, `None` where the graph leaves them symbolic.
    pub fixed_input_size: Option<(u32, u32)>,
    pub output_names: Vec<String>,
    pub model_path: PathBuf,
    pub model_hash: ContentHash,
}

impl ImageSession {
    pub fn load(
        onnx_runtime_library: &Path,
        model_onnx: &Path,
        intra_threads: usize,
        detector: &'static str,
    ) -> Result<Self, DetectorError> {
        let unsupported = |reason: String| DetectorError::UnsupportedModel {
            model: model_onnx.to_path_buf(),
            detector,
            reason,
        };
        if intra_threads == 0 {
            return Err(DetectorError::InvalidConfig {
                model: model_onnx.to_path_buf(),
                reason: "intra_threads must be at least 1".to_string(),
            });
        }
        // Hashing first also reports a missing file plainly, before ONNX Runtime's wording.
        let model_hash = hash_file(model_onnx)?;
        let environment = onnx_runtime::environment(onnx_runtime_library)?;
        let load_error = |error: ort::Error| DetectorError::LoadModel {
            model: model_onnx.to_path_buf(),
            reason: error.to_string(),
        };
        let session = Session::builder(&environment)
            .map_err(load_error)?
            .with_intra_threads(intra_threads)
            .map_err(|error| load_error(error.into()))?
            .with_inter_threads(1)
            .map_err(|error| load_error(error.into()))?
            .commit_from_file(model_onnx)
            .map_err(load_error)?;

        let [input] = session.inputs() else {
            return Err(unsupported(format!(
                "it has {} inputs; an image detector has exactly one",
                session.inputs().len()
            )));
        };
        if input.dtype().tensor_type() != Some(TensorElementType::Float32) {
            return Err(unsupported(format!(
                "input `{}` is {:?}; expected float32",
                input.name(),
                input.dtype()
            )));
        }
        let shape = input
            .dtype()
            .tensor_shape()
            .map(|shape| shape.to_vec())
            .unwrap_or_default();
        if shape.len() != 4 || (shape[1] > 0 && shape[1] != 3) || (shape[0] > 1) {
            return Err(unsupported(format!(
                "input `{}` has shape {shape:?}; expected [1 or batch, 3, height, width]",
                input.name()
            )));
        }
        let fixed_input_size =
            (shape[2] > 0 && shape[3] > 0).then(|| (shape[2] as u32, shape[3] as u32));
        let input_name = input.name().to_string();
        let output_names = session
            .outputs()
            .iter()
            .map(|output| output.name().to_string())
            .collect();
        Ok(Self {
            session: Mutex::new(session),
            input_name,
            fixed_input_size,
            output_names,
            model_path: model_onnx.to_path_buf(),
            model_hash,
        })
    }

    /// Runs the graph on one `[1, 3, height, width]` input and hands each requested output's
    /// shape and values to `read`, while the outputs are still borrowed from the session.
    pub fn run<T>(
        &self,
        input: Vec<f32>,
        height: u32,
        width: u32,
        wanted_outputs: &[&str],
        read: impl FnOnce(&[(&[i64], &[f32])]) -> Result<T, DetectorError>,
    ) -> Result<T, DetectorError> {
        let inference_error = |error: ort::Error| DetectorError::Inference {
            model: self.model_path.clone(),
            reason: error.to_string(),
        };
        let tensor = Tensor::from_array(([1usize, 3, height as usize, width as usize], input))
            .map_err(inference_error)?;
        let mut session = self
            .session
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let outputs = session
            .run(ort::inputs![self.input_name.as_str() => tensor])
            .map_err(inference_error)?;
        let mut extracted = Vec::with_capacity(wanted_outputs.len());
        for name in wanted_outputs {
            let output = outputs
                .get(name)
                .ok_or_else(|| DetectorError::UnexpectedOutput {
                    model: self.model_path.clone(),
                    reason: format!("no output named `{name}`"),
                })?;
            let (shape, values) = output
                .try_extract_tensor::<f32>()
                .map_err(inference_error)?;
            extracted.push((&shape[..], values));
        }
        read(&extracted)
    }

    pub fn unexpected_output(&self, reason: String) -> DetectorError {
        DetectorError::UnexpectedOutput {
            model: self.model_path.clone(),
            reason,
        }
    }
}

fn hash_file(path: &Path) -> Result<ContentHash, DetectorError> {
    let read_error = |source| DetectorError::ReadModelFile {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(file).map_err(read_error)?;
    Ok(ContentHash::from_hasher(&hasher))
}

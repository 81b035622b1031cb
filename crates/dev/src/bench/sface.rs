//! `viss bench sface`: SFace embeddings per face against the Python reference
//! (`crates/dev/src/bench/reference/sface_reference.py`: Pillow + numpy + onnxruntime) on the same
//! aligned crops, with the same converted graph and ONNX Runtime thread count. The faces are
//! YuNet's on one image (the Solvay 1927 photo by default), aligned in Rust; both sides are timed
//! from the decoded 112x112 crop to the unit-length embedding, after one discarded warm-up pass.
//! Reports the medians per face, their ratio, the Rust alignment time per face, and how closely the
//! two sides' embeddings agree.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use viss_models::{ModelCache, ModelError};
use viss_vision::sface::{align_face, cosine};
use viss_vision::{DetectorError, ImageError, SfaceEmbedder, YunetConfig, YunetDetector, load_rgb};

#[derive(Debug, thiserror::Error)]
pub enum SfaceBenchError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Detector(#[from] DetectorError),
    #[error("no face was found in {image}; the benchmark needs at least one")]
    NoFaces { image: PathBuf },
    #[error("cannot run the Python reference `{python} {script}`: {message}")]
    Python {
        python: String,
        script: String,
        message: String,
    },
    #[error(
        "the Python reference failed (it needs `pip install numpy pillow \
         onnxruntime==1.31.1`):\n{stderr}"
    )]
    Reference { stderr: String },
    #[error("{path}: {reason}")]
    WriteCrop { path: PathBuf, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub struct SfaceBenchOptions {
    /// The image whose faces are embedded; the Solvay 1927 photo when `None`.
    pub image: Option<PathBuf>,
    pub python: String,
    pub reference_script: PathBuf,
    pub threads: usize,
    pub repeat: usize,
}

#[derive(Debug, Serialize)]
pub struct SfaceBenchReport {
    pub image: PathBuf,
    pub faces: usize,
    pub threads: usize,
    pub repeat: usize,
    /// Median seconds per face, crop to unit embedding.
    pub rust_seconds_per_face: f64,
    pub python_seconds_per_face: f64,
    /// Python / Rust.
    pub speedup: f64,
    /// Median seconds per face for the Rust alignment (not part of the comparison).
    pub rust_align_seconds_per_face: f64,
    /// Lowest cosine similarity between the two sides' embeddings of one face.
    pub min_agreement: f32,
}

impl SfaceBenchReport {
    /// The summary `viss bench` prints after the JSON report.
    pub fn summary(&self) -> String {
        format!(
            "sface, {} faces of {}, {} thread(s): rust {:.2} ms/face, python {:.2} ms/face: \
                 {:.2}x; alignment {:.3} ms/face; embeddings agree to cos >= {:.6}",
            self.faces,
            self.image.display(),
            self.threads,
            self.rust_seconds_per_face * 1e3,
            self.python_seconds_per_face * 1e3,
            self.speedup,
            self.rust_align_seconds_per_face * 1e3,
            self.min_agreement
        )
    }
}

#[derive(Deserialize)]
struct ReferenceOutput {
    seconds_per_face: f64,
    embeddings: Vec<Vec<f32>>,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

pub fn run_sface_bench(
    options: &SfaceBenchOptions,
    work_dir: &Path,
) -> Result<SfaceBenchReport, SfaceBenchError> {
    let cache = ModelCache::from_env()?;
    let files = cache.ensure_face_recognition()?;
    let image_path = match &options.image {
        Some(path) => path.clone(),
        None => cache.ensure_face_detector()?.group_photo,
    };
    let repeat = options.repeat.max(1);
    let image = load_rgb(&image_path)?;
    let detector = YunetDetector::load(
        &files.onnx_runtime_library,
        &files.yunet_onnx,
        YunetConfig::default(),
        options.threads,
    )?;
    let embedder = SfaceEmbedder::load(
        &files.onnx_runtime_library,
        &files.sface_onnx,
        options.threads,
    )?;
    let faces = detector.detect(&image)?;
    if faces.is_empty() {
        return Err(SfaceBenchError::NoFaces { image: image_path });
    }

    let mut align_times = Vec::new();
    let mut crops = Vec::new();
    for face in &faces {
        let started = Instant::now();
        let crop = align_face(&image, &face.landmarks).expect("detected landmarks have extent");
        align_times.push(started.elapsed().as_secs_f64());
        crops.push(crop);
    }
    let mut embed_times = Vec::new();
    let mut embeddings = Vec::new();
    for attempt in 0..=repeat {
        for crop in &crops {
            let started = Instant::now();
            let embedding = embedder.embed_aligned(crop)?;
            let elapsed = started.elapsed().as_secs_f64();
            if attempt > 0 {
                embed_times.push(elapsed);
            } else {
                embeddings.push(embedding);
            }
        }
    }

    let mut crop_paths = Vec::new();
    for (index, crop) in crops.iter().enumerate() {
        let path = work_dir.join(format!("face_{index:03}.png"));
        crop.save(&path)
            .map_err(|error| SfaceBenchError::WriteCrop {
                path: path.clone(),
                reason: error.to_string(),
            })?;
        crop_paths.push(path);
    }
    let output_path = work_dir.join("sface_bench_output.json");
    let python_error = |message: String| SfaceBenchError::Python {
        python: options.python.clone(),
        script: options.reference_script.display().to_string(),
        message,
    };
    let output = Command::new(&options.python)
        .arg(&options.reference_script)
        .arg(&output_path)
        .args(&crop_paths)
        .arg("--model")
        .arg(&files.sface_onnx)
        .arg("--threads")
        .arg(options.threads.to_string())
        .arg("--repeat")
        .arg(repeat.to_string())
        .output()
        .map_err(|error| python_error(error.to_string()))?;
    if !output.status.success() {
        return Err(SfaceBenchError::Reference {
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    let bytes = std::fs::read(&output_path).map_err(|source| SfaceBenchError::Io {
        path: output_path.clone(),
        source,
    })?;
    let reference: ReferenceOutput = serde_json::from_slice(&bytes)
        .map_err(|error| python_error(format!("unreadable output: {error}")))?;
    if reference.embeddings.len() != embeddings.len() {
        return Err(python_error(format!(
            "it reported {} embeddings for {} crops",
            reference.embeddings.len(),
            embeddings.len()
        )));
    }
    let min_agreement = embeddings
        .iter()
        .zip(&reference.embeddings)
        .map(|(ours, theirs)| cosine(ours, theirs))
        .fold(f32::INFINITY, f32::min);
    let rust_seconds_per_face = median(embed_times);
    Ok(SfaceBenchReport {
        image: image_path,
        faces: faces.len(),
        threads: options.threads,
        repeat,
        rust_seconds_per_face,
        python_seconds_per_face: reference.seconds_per_face,
        speedup: reference.seconds_per_face / rust_seconds_per_face,
        rust_align_seconds_per_face: median(align_times),
        min_agreement,
    })
}

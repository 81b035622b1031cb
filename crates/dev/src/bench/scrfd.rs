//! `viss bench scrfd`: the SCRFD face detector against the Python reference
//! (`crates/dev/src/bench/reference/scrfd_reference.py`: Pillow + numpy + onnxruntime, same model,
//! letterbox, decoding and NMS) on the same images, in one run, with the same ONNX Runtime thread
//! count. Reports per-image medians of each stage, the time ratio, and whether both found the same
//! faces (same count, every face paired with IoU > 0.9). Model loading is excluded on both sides
//! and both discard one warm-up run per image.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use viss_models::{ModelCache, ModelError};
use viss_vision::nms::iou;
use viss_vision::{DetectorError, FaceDetection, ImageError, ScrfdConfig, ScrfdDetector, load_rgb};

/// Two detections are the same face when their boxes overlap by more than this.
pub const SAME_FACE_IOU: f32 = 0.9;

#[derive(Debug, thiserror::Error)]
pub enum ScrfdBenchError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Detector(#[from] DetectorError),
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
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub struct ScrfdBenchOptions {
    /// Images to detect faces in; the Solvay 1927 photo fetched with the model when empty.
    pub images: Vec<PathBuf>,
    pub python: String,
    pub reference_script: PathBuf,
    pub threads: usize,
    pub repeat: usize,
}

/// Medians over the repeats, seconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StageSeconds {
    pub decode: f64,
    pub preprocess: f64,
    pub inference: f64,
    pub postprocess: f64,
    pub total: f64,
}

#[derive(Debug, Serialize)]
pub struct ImageBench {
    pub image: PathBuf,
    pub width: u32,
    pub height: u32,
    pub rust_faces: usize,
    pub python_faces: usize,
    /// Faces paired one to one with IoU > [`SAME_FACE_IOU`].
    pub matched_faces: usize,
    /// Lowest IoU among the pairs (1 when there are none).
    pub min_matched_iou: f32,
    pub same_faces: bool,
    pub rust: StageSeconds,
    pub python: StageSeconds,
    /// Python total / Rust total.
    pub speedup: f64,
}

#[derive(Debug, Serialize)]
pub struct ScrfdBenchReport {
    pub threads: usize,
    pub repeat: usize,
    pub images: Vec<ImageBench>,
    /// Sums of the per-image medians.
    pub rust_seconds: f64,
    pub python_seconds: f64,
    pub speedup: f64,
    pub all_same_faces: bool,
}

impl ScrfdBenchReport {
    /// The summary `viss bench` prints after the JSON report.
    pub fn summary(&self) -> String {
        let mut lines: Vec<String> = self
            .images
            .iter()
            .map(|image| {
                format!(
                    "{} ({}x{}): rust {:.3} s, python {:.3} s: {:.2}x; faces rust {} python {}, \
                     {} matched at IoU > {} (min {:.3})",
                    image.image.display(),
                    image.width,
                    image.height,
                    image.rust.total,
                    image.python.total,
                    image.speedup,
                    image.rust_faces,
                    image.python_faces,
                    image.matched_faces,
                    SAME_FACE_IOU,
                    image.min_matched_iou
                )
            })
            .collect();
        lines.push(format!(
            "scrfd, {} image(s), {} thread(s): rust {:.3} s, python {:.3} s: {:.2}x; same \
             faces: {}",
            self.images.len(),
            self.threads,
            self.rust_seconds,
            self.python_seconds,
            self.speedup,
            self.all_same_faces
        ));
        lines.join("\n")
    }
}

#[derive(Deserialize)]
struct ReferenceOutput {
    images: Vec<ReferenceImage>,
}

#[derive(Deserialize)]
struct ReferenceImage {
    faces: Vec<FaceDetection>,
    timings_s: StageSeconds,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

pub fn run_scrfd_bench(
    options: &ScrfdBenchOptions,
    work_dir: &Path,
) -> Result<ScrfdBenchReport, ScrfdBenchError> {
    let files = ModelCache::from_env()?.ensure_face_detector()?;
    let images = if options.images.is_empty() {
        vec![files.group_photo.clone()]
    } else {
        options.images.clone()
    };
    let repeat = options.repeat.max(1);
    let detector = ScrfdDetector::load(
        &files.onnx_runtime_library,
        &files.model_onnx,
        ScrfdConfig::default(),
        options.threads,
    )?;

    let mut rust_results = Vec::new();
    for path in &images {
        let mut runs: Vec<(Duration, viss_vision::DetectionTimings, Duration)> = Vec::new();
        let mut last = None;
        for attempt in 0..=repeat {
            let started = Instant::now();
            let image = load_rgb(path)?;
            let decoded = started.elapsed();
            let (faces, timings) = detector.detect_timed(&image)?;
            let total = started.elapsed();
            if attempt > 0 {
                runs.push((decoded, timings, total));
            }
            last = Some((image.dimensions(), faces));
        }
        let seconds =
            |pick: fn(&(Duration, viss_vision::DetectionTimings, Duration)) -> Duration| {
                median(runs.iter().map(|run| pick(run).as_secs_f64()).collect())
            };
        let stages = StageSeconds {
            decode: seconds(|run| run.0),
            preprocess: seconds(|run| run.1.preprocess),
            inference: seconds(|run| run.1.inference),
            postprocess: seconds(|run| run.1.postprocess),
            total: seconds(|run| run.2),
        };
        let (dimensions, faces) = last.expect("at least one run");
        rust_results.push((dimensions, faces, stages));
    }

    let output_path = work_dir.join("scrfd_bench_output.json");
    let python_error = |message: String| ScrfdBenchError::Python {
        python: options.python.clone(),
        script: options.reference_script.display().to_string(),
        message,
    };
    let output = Command::new(&options.python)
        .arg(&options.reference_script)
        .arg(&output_path)
        .args(&images)
        .arg("--model")
        .arg(&files.model_onnx)
        .arg("--threads")
        .arg(options.threads.to_string())
        .arg("--repeat")
        .arg(repeat.to_string())
        .output()
        .map_err(|error| python_error(error.to_string()))?;
    if !output.status.success() {
        return Err(ScrfdBenchError::Reference {
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    let bytes = std::fs::read(&output_path).map_err(|source| ScrfdBenchError::Io {
        path: output_path.clone(),
        source,
    })?;
    let reference: ReferenceOutput = serde_json::from_slice(&bytes)
        .map_err(|error| python_error(format!("unreadable output: {error}")))?;
    if reference.images.len() != images.len() {
        return Err(python_error(format!(
            "it reported {} images for {} given",
            reference.images.len(),
            images.len()
        )));
    }

    let mut reports = Vec::new();
    for ((path, (dimensions, faces, rust)), python) in
        images.iter().zip(rust_results).zip(reference.images)
    {
        let pairs = pair_faces(&faces, &python.faces);
        let matched = pairs
            .iter()
            .filter(|&&overlap| overlap > SAME_FACE_IOU)
            .count();
        reports.push(ImageBench {
            image: path.clone(),
            width: dimensions.0,
            height: dimensions.1,
            rust_faces: faces.len(),
            python_faces: python.faces.len(),
            matched_faces: matched,
            min_matched_iou: pairs.iter().copied().fold(1.0, f32::min),
            same_faces: faces.len() == python.faces.len() && matched == faces.len(),
            speedup: python.timings_s.total / rust.total,
            rust,
            python: python.timings_s,
        });
    }
    let rust_seconds: f64 = reports.iter().map(|report| report.rust.total).sum();
    let python_seconds: f64 = reports.iter().map(|report| report.python.total).sum();
    Ok(ScrfdBenchReport {
        threads: options.threads,
        repeat,
        all_same_faces: reports.iter().all(|report| report.same_faces),
        images: reports,
        rust_seconds,
        python_seconds,
        speedup: python_seconds / rust_seconds,
    })
}

/// Greedy one-to-one pairing by highest IoU; returns the IoU of each pair made.
fn pair_faces(ours: &[FaceDetection], theirs: &[FaceDetection]) -> Vec<f32> {
    let mut overlaps: Vec<(f32, usize, usize)> = Vec::new();
    for (a, face) in ours.iter().enumerate() {
        for (b, other) in theirs.iter().enumerate() {
            let overlap = iou(&face.bbox, &other.bbox);
            if overlap > 0.0 {
                overlaps.push((overlap, a, b));
            }
        }
    }
    overlaps.sort_by(|x, y| y.0.total_cmp(&x.0));
    let (mut used_ours, mut used_theirs) = (vec![false; ours.len()], vec![false; theirs.len()]);
    let mut pairs = Vec::new();
    for (overlap, a, b) in overlaps {
        if !used_ours[a] && !used_theirs[b] {
            used_ours[a] = true;
            used_theirs[b] = true;
            pairs.push(overlap);
        }
    }
    pairs
}

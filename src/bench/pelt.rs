//! `viss bench pelt`: PELT with the RBF cost (src/media/pelt.rs) against ruptures
//! (`benches/pelt_reference.py`) on the same float32 signals: shot-like piecewise-constant
//! sequences of frame descriptors (273 values, the classical descriptor's length) with noise,
//! at the sizes a scenario and an episode have at 2 frames/s. Reports both times, their ratio
//! and whether the breakpoints agree.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::media::features::DESCRIPTOR_LEN;
use crate::media::pelt::{PeltError, PeltParams, pelt_rbf};

#[derive(Debug, thiserror::Error)]
pub enum PeltBenchError {
    #[error(transparent)]
    Pelt(#[from] PeltError),
    #[error("cannot run the Python reference `{python} {script}`: {message}")]
    Python {
        python: String,
        script: String,
        message: String,
    },
    #[error("the Python reference failed (it needs `pip install numpy ruptures`):\n{stderr}")]
    Reference { stderr: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub struct PeltBenchOptions {
    pub python: String,
    pub reference_script: PathBuf,
    pub repeat: usize,
    /// Rounds, each timing both sides on every signal: this machine's speed
    /// drifts by a third within seconds, so each ratio compares times taken
    /// close together and the report gives every round's.
    pub rounds: usize,
    /// Signal lengths in frames.
    pub frames: Vec<usize>,
}

#[derive(Debug, Serialize)]
pub struct PeltCase {
    pub frames: usize,
    pub dim: usize,
    pub penalty: f64,
    pub min_size: usize,
    pub jump: usize,
    pub true_changes: usize,
    /// Median over the rounds of each round's median time.
    pub rust_seconds: f64,
    pub ruptures_seconds: f64,
    /// Median over the rounds of ruptures time / Rust time.
    pub speedup: f64,
    pub speedup_per_round: Vec<f64>,
    pub same_breakpoints: bool,
    pub rust_breakpoints: usize,
    pub ruptures_breakpoints: usize,
}

#[derive(Debug, Serialize)]
pub struct PeltBenchReport {
    pub ruptures_version: String,
    pub repeat: usize,
    pub rounds: usize,
    pub cases: Vec<PeltCase>,
}

#[derive(Deserialize)]
struct ReferenceOutput {
    ruptures: String,
    cases: Vec<ReferenceCase>,
}

#[derive(Deserialize)]
struct ReferenceCase {
    breakpoints: Vec<usize>,
    seconds: f64,
}

/// Shots of 4 to 40 frames (2 to 20 s at 2 frames/s), each a random level per feature, with
/// per-frame noise a fifth of the level spread; deterministic for a given length.
fn shot_signal(frames: usize, dim: usize) -> (Vec<f32>, usize) {
    let mut rng = fastrand::Rng::with_seed(frames as u64);
    let mut values = Vec::with_capacity(frames * dim);
    let mut changes = 0;
    let mut level: Vec<f32> = Vec::new();
    let mut left = 0;
    for _ in 0..frames {
        if left == 0 {
            level = (0..dim).map(|_| rng.f32()).collect();
            left = rng.usize(4..=40);
            changes += 1;
        }
        values.extend(level.iter().map(|l| l + (rng.f32() - 0.5) * 0.4));
        left -= 1;
    }
    (values, changes - 1)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One run of the Python reference over every case in `spec_path`.
fn run_reference(
    options: &PeltBenchOptions,
    spec_path: &Path,
    output_path: &Path,
) -> Result<ReferenceOutput, PeltBenchError> {
    let output = Command::new(&options.python)
        .arg(&options.reference_script)
        .arg(spec_path)
        .arg(output_path)
        .output()
        .map_err(|error| PeltBenchError::Python {
            python: options.python.clone(),
            script: options.reference_script.display().to_string(),
            message: error.to_string(),
        })?;
    if !output.status.success() {
        return Err(PeltBenchError::Reference {
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    let text = std::fs::read_to_string(output_path).map_err(|source| PeltBenchError::Io {
        path: output_path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|error| PeltBenchError::Reference {
        stderr: format!("unreadable output {}: {error}", output_path.display()),
    })
}

pub fn run_pelt_bench(
    options: &PeltBenchOptions,
    work_dir: &Path,
) -> Result<PeltBenchReport, PeltBenchError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PeltBenchError::Io { path, source }
    };
    let params = PeltParams {
        penalty: 1.0,
        min_size: 2,
        jump: 1,
        gamma: None,
    };
    let dim = DESCRIPTOR_LEN;
    let repeat = options.repeat.max(1);
    let rounds = options.rounds.max(1);
    let mut signals = Vec::new();
    let mut specs = Vec::new();
    for &frames in &options.frames {
        let (values, true_changes) = shot_signal(frames, dim);
        let file = work_dir.join(format!("signal_{frames}.f32"));
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&file, bytes).map_err(io(&file))?;
        specs.push(serde_json::json!({
            "file": file, "frames": frames, "dim": dim,
            "penalty": params.penalty, "min_size": params.min_size, "jump": params.jump
        }));
        let rows: Vec<&[f32]> = values.chunks_exact(dim).collect();
        // Also the warm-up call.
        let breakpoints = pelt_rbf(&rows, &params)?;
        signals.push((frames, true_changes, values, breakpoints));
    }
    let spec_path = work_dir.join("pelt_cases.json");
    let spec = serde_json::json!({"repeat": repeat, "cases": specs});
    std::fs::write(&spec_path, spec.to_string()).map_err(io(&spec_path))?;
    let output_path = work_dir.join("pelt_reference.json");

    // Per case, per round: (Rust seconds, ruptures seconds).
    let mut times = vec![Vec::new(); signals.len()];
    let mut reference: Option<ReferenceOutput> = None;
    for _ in 0..rounds {
        let mut rust = Vec::new();
        for (_, _, values, _) in &signals {
            let rows: Vec<&[f32]> = values.chunks_exact(dim).collect();
            let mut samples = Vec::new();
            for _ in 0..repeat {
                let started = Instant::now();
                std::hint::black_box(pelt_rbf(&rows, &params)?);
                samples.push(started.elapsed().as_secs_f64());
            }
            rust.push(median(samples));
        }
        let output = run_reference(options, &spec_path, &output_path)?;
        for ((case_times, rust_seconds), theirs) in times.iter_mut().zip(rust).zip(&output.cases) {
            case_times.push((rust_seconds, theirs.seconds));
        }
        reference.get_or_insert(output);
    }
    let reference = reference.expect("at least one round");
    let mut cases = Vec::new();
    for (((frames, true_changes, _, breakpoints), theirs), case_times) in
        signals.into_iter().zip(reference.cases).zip(times)
    {
        let speedup_per_round: Vec<f64> = case_times
            .iter()
            .map(|(ours, theirs)| theirs / ours)
            .collect();
        cases.push(PeltCase {
            frames,
            dim,
            penalty: params.penalty,
            min_size: params.min_size,
            jump: params.jump,
            true_changes,
            rust_seconds: median(case_times.iter().map(|t| t.0).collect()),
            ruptures_seconds: median(case_times.iter().map(|t| t.1).collect()),
            speedup: median(speedup_per_round.clone()),
            speedup_per_round,
            same_breakpoints: breakpoints == theirs.breakpoints,
            rust_breakpoints: breakpoints.len() - 1,
            ruptures_breakpoints: theirs.breakpoints.len().saturating_sub(1),
        });
    }
    Ok(PeltBenchReport {
        ruptures_version: reference.ruptures,
        repeat,
        rounds,
        cases,
    })
}

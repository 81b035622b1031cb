//! `viss bench pelt`: PELT with the RBF cost (crates/pelt) against ruptures
//! (`crates/dev/src/bench/reference/pelt_reference.py`) on the same float32 signals: shot-like
//! piecewise-constant sequences of frame descriptors (273 values, the classical descriptor's
//! length) with noise, at the sizes a scenario and an episode have at 2 frames/s. Reports both
//! times, their ratio and whether the breakpoints agree.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use viss_media::features::DESCRIPTOR_LEN;
use viss_pelt::{PeltError, PeltParams, segment};

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
    /// Rounds, each timing both sides on every signal back to back (in
    /// alternating order): this machine's speed drifts by a third within
    /// seconds, so each ratio compares times taken together, and the report
    /// gives every round's.
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

impl PeltBenchReport {
    /// The summary `viss bench` prints after the JSON report.
    pub fn summary(&self) -> String {
        self.cases
            .iter()
            .map(|case| {
                format!(
                    "PELT rbf, {} frames x {}, penalty {}, min_size {}, jump {}: rust {:.4} s, \
                     ruptures {} {:.4} s: {:.1}x (rounds: {}); same breakpoints: {} ({} change \
                     points, {} true)",
                    case.frames,
                    case.dim,
                    case.penalty,
                    case.min_size,
                    case.jump,
                    case.rust_seconds,
                    self.ruptures_version,
                    case.ruptures_seconds,
                    case.speedup,
                    case.speedup_per_round
                        .iter()
                        .map(|s| format!("{s:.1}x"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    case.same_breakpoints,
                    case.rust_breakpoints,
                    case.true_changes
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[derive(Deserialize)]
struct ReferenceReady {
    ruptures: String,
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

/// How long each side runs a case untimed before timing it: this VM runs
/// slower for a while after an idle spell, and each side idles while the
/// other is timed.
const WARM_UP: Duration = Duration::from_millis(300);

/// Each side's timed runs of a case last at least this long together (and
/// number at least `repeat`), so that both medians cover a similar stretch
/// of this VM's drifting speed.
const MEASURE_AT_LEAST: Duration = Duration::from_millis(300);

/// The Python reference, started once and asked for one case at a time.
struct Reference {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    ruptures_version: String,
}

impl Reference {
    fn start(options: &PeltBenchOptions, spec_path: &Path) -> Result<Self, PeltBenchError> {
        let mut child = Command::new(&options.python)
            .arg(&options.reference_script)
            .arg(spec_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| PeltBenchError::Python {
                python: options.python.clone(),
                script: options.reference_script.display().to_string(),
                message: error.to_string(),
            })?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut reference = Self {
            child,
            stdin,
            stdout,
            ruptures_version: String::new(),
        };
        let ready: ReferenceReady = reference.read_line()?;
        reference.ruptures_version = ready.ruptures;
        Ok(reference)
    }

    /// Times case `index` (its breakpoints and median seconds).
    fn time_case(&mut self, index: usize) -> Result<ReferenceCase, PeltBenchError> {
        if writeln!(self.stdin, "{index}")
            .and_then(|()| self.stdin.flush())
            .is_err()
        {
            return Err(self.failure("it stopped reading its input".to_string()));
        }
        self.read_line()
    }

    fn read_line<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, PeltBenchError> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) | Err(_) => Err(self.failure("it ended without an answer".to_string())),
            Ok(_) => serde_json::from_str(&line)
                .map_err(|error| self.failure(format!("unreadable answer {line:?}: {error}"))),
        }
    }

    /// What went wrong, with the script's stderr once it has exited.
    fn failure(&mut self, what: String) -> PeltBenchError {
        let _ = self.child.kill();
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
        }
        let _ = self.child.wait();
        PeltBenchError::Reference {
            stderr: format!("{what}\n{stderr}"),
        }
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
        // The breakpoints to compare (every timed call gives the same).
        let breakpoints = segment(&rows, &params)?.breakpoints;
        signals.push((frames, true_changes, values, breakpoints));
    }
    let spec_path = work_dir.join("pelt_cases.json");
    let spec = serde_json::json!({
        "repeat": repeat,
        "warm_up_seconds": WARM_UP.as_secs_f64(),
        "measure_seconds": MEASURE_AT_LEAST.as_secs_f64(),
        "cases": specs
    });
    std::fs::write(&spec_path, spec.to_string()).map_err(io(&spec_path))?;
    let mut reference = Reference::start(options, &spec_path)?;

    let time_rust = |values: &[f32]| -> Result<f64, PeltBenchError> {
        let rows: Vec<&[f32]> = values.chunks_exact(dim).collect();
        let warm_up_started = Instant::now();
        segment(&rows, &params)?;
        while warm_up_started.elapsed() < WARM_UP {
            segment(&rows, &params)?;
        }
        let mut samples: Vec<f64> = Vec::new();
        while samples.len() < repeat || samples.iter().sum::<f64>() < MEASURE_AT_LEAST.as_secs_f64()
        {
            let started = Instant::now();
            std::hint::black_box(segment(&rows, &params)?.breakpoints);
            samples.push(started.elapsed().as_secs_f64());
        }
        Ok(median(samples))
    };
    // Per case, per round: (Rust seconds, ruptures seconds), taken back to
    // back, Rust first in even rounds and second in odd ones.
    let mut times = vec![Vec::new(); signals.len()];
    let mut theirs: Vec<Option<ReferenceCase>> = signals.iter().map(|_| None).collect();
    for round in 0..rounds {
        for (index, (_, _, values, _)) in signals.iter().enumerate() {
            let (rust_seconds, case) = if round % 2 == 0 {
                let rust_seconds = time_rust(values)?;
                (rust_seconds, reference.time_case(index)?)
            } else {
                let case = reference.time_case(index)?;
                (time_rust(values)?, case)
            };
            times[index].push((rust_seconds, case.seconds));
            theirs[index].get_or_insert(case);
        }
    }
    let mut cases = Vec::new();
    for (((frames, true_changes, _, breakpoints), theirs), case_times) in
        signals.into_iter().zip(theirs).zip(times)
    {
        let theirs = theirs.expect("at least one round");
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
        ruptures_version: reference.ruptures_version.clone(),
        repeat,
        rounds,
        cases,
    })
}

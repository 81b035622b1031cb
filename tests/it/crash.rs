//! Killing a build at any instant loses only in-flight work: after 20+ SIGKILLs and a final
//! resume, the store holds exactly what an uninterrupted build makes, and every blob verifies.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ITEMS: &str = "1500";
const STAGES: &str = "5";
const KILLS: usize = 24;

fn viss(dir: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_viss"));
    command
        .args([
            "bench", "dag", "--items", ITEMS, "--stages", STAGES, "-j", "4", "--dir",
        ])
        .arg(dir)
        .args(extra);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    command
}

/// Builds (or resumes) once; returns how many (stage, item) jobs ran.
fn build_once(dir: &Path) -> u64 {
    let output = viss(dir, &["--once"]).output().unwrap();
    assert!(
        output.status.success(),
        "build failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[1]["ran"].as_u64().unwrap())
        .sum()
}

/// Every record as (stage, item, key, outputs), and the verify summary, from `--dump`.
fn dump(dir: &Path) -> (Vec<serde_json::Value>, serde_json::Value) {
    let output = viss(dir, &["--dump"]).output().unwrap();
    assert!(
        output.status.success(),
        "dump failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines: Vec<serde_json::Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let verify = lines.pop().unwrap();
    (lines, verify["verify"].clone())
}

#[test]
fn sigkill_at_random_instants_then_resume_equals_an_uninterrupted_build() {
    let temp = tempfile::tempdir().unwrap();
    let reference = temp.path().join("reference");
    let crashed = temp.path().join("crashed");

    let started = Instant::now();
    assert_eq!(build_once(&reference), 1500 * 5);
    let uninterrupted = started.elapsed();
    let (expected, reference_verify) = dump(&reference);
    assert_eq!(expected.len(), 1500 * 5);
    assert_eq!(reference_verify["corrupt"], serde_json::json!([]));

    let seed = std::env::var("VISS_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64
        });
    eprintln!(
        "crash seed {seed} (set VISS_CRASH_SEED to replay); uninterrupted build {uninterrupted:?}"
    );
    let mut rng = fastrand::Rng::with_seed(seed);
    // Kill instants spread over the first 1/KILLS of a build each, so the kills together cannot
    // finish it: every one of them lands while the child is working.
    let window_ms = (uninterrupted.as_millis() as u64 / KILLS as u64).max(5);
    let mut kills = 0;
    for _ in 0..KILLS {
        let mut child = viss(&crashed, &["--once"]).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(rng.u64(1..=window_ms)));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        child.wait().unwrap();
    }
    assert!(
        kills >= 20,
        "only {kills} of {KILLS} runs were still working when killed"
    );

    let resumed = build_once(&crashed);
    eprintln!("the final resume ran {resumed} of {} jobs", 1500 * 5);
    assert!(resumed < 1500 * 5, "the killed runs committed nothing");
    let (actual, verify) = dump(&crashed);
    assert_eq!(
        verify["corrupt"],
        serde_json::json!([]),
        "no blob may fail verification"
    );
    assert_eq!(
        verify["invalidated"],
        serde_json::json!([]),
        "every record's outputs must exist"
    );
    assert_eq!(actual.len(), expected.len());
    for (got, want) in actual.iter().zip(&expected) {
        assert_eq!(got, want);
    }
}

//! `viss bench simulate`: simulation throughput against the in-process MOCK endpoint with a
//! fixed latency per agent turn. A synthetic show of N two- and three-role scenes is annotated
//! by the scripted model (instantly, not timed), then `viss build --until simulate` plays R runs
//! of every scene, T turns each, with at most C requests in flight. Turns within a run are
//! sequential, so the ideal is `max(ceil(runs x T / C), T) x latency`; the report gives the
//! wall time as a ratio of it.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::dag::scheduler::BuildOptions;
use crate::llm::mock_server::{BackgroundMockServer, MockReply};
use crate::project::Project;
use crate::stages;
use crate::workspace::Workspace;

use super::dag::BenchError;
use super::scripted;

#[derive(Debug, Clone)]
pub struct SimulateBenchOptions {
    pub scenarios: usize,
    /// Runs per scenario (replicates of the text mode: the synthetic scenes have no pictures,
    /// and every mode costs one agent request per turn).
    pub runs_per_scenario: u32,
    pub rounds: usize,
    pub latency: Duration,
    pub in_flight: usize,
}

#[derive(Debug, Serialize)]
pub struct SimulateBenchReport {
    pub scenarios: usize,
    pub runs: usize,
    pub turns: usize,
    pub latency_ms: u64,
    pub in_flight: usize,
    /// The front half (annotation by the scripted model), not part of the measure.
    pub setup_seconds: f64,
    pub seconds: f64,
    pub ideal_seconds: f64,
    /// `ideal_seconds / seconds`: 1.0 means the latency is the only cost.
    pub ratio_of_ideal: f64,
    pub most_in_flight_seen_by_server: usize,
}

impl SimulateBenchReport {
    /// The one-line summary `viss bench` prints after the JSON report.
    pub fn summary(&self) -> String {
        format!(
            "simulate: {} scenes, {} runs, {} turns, {} ms a turn, {} in flight: {:.1} s \
             (ideal {:.1} s), {:.3} of ideal; the server saw at most {} in flight (setup, not \
             timed: {:.1} s)",
            self.scenarios,
            self.runs,
            self.turns,
            self.latency_ms,
            self.in_flight,
            self.seconds,
            self.ideal_seconds,
            self.ratio_of_ideal,
            self.most_in_flight_seen_by_server,
            self.setup_seconds
        )
    }
}

const PEOPLE: [&str; 3] = ["Ada", "Ben", "Cyd"];

/// A script of `scenes` scenes, alternately of two and three people, of 12 lines each (the
/// segmenter keeps scenes of 10 lines or more), each line its own.
pub(super) fn synthetic_script(scenes: usize) -> String {
    let mut script = String::new();
    for scene in 0..scenes {
        let cast = &PEOPLE[..2 + scene % 2];
        script.push_str(&format!(
            "[Scene: Room {scene}, a flat full of boxes. {}.]\n",
            cast.join(" and ")
        ));
        for line in 0..12 {
            let speaker = cast[line % cast.len()];
            script.push_str(&format!(
                "{speaker}: Box {line} of room {scene} is still not taped, and the van comes at \
                 {}.\n",
                line + 1
            ));
        }
        script.push('\n');
    }
    script
}

/// Makes a project under `dir` (which must not hold one) whose show `bench` has these
/// episodes (id, script) and whose every LLM role is the mock at `base_url`, at most
/// `in_flight` requests at once.
pub(super) fn synthetic_project(
    dir: &Path,
    base_url: &str,
    in_flight: usize,
    latency: Duration,
    episodes: &[(&str, String)],
) -> Result<(), BenchError> {
    Project::init(
        dir,
        &stages::default_configs(),
        stages::DEFAULT_PROMPTS,
        false,
    )?;
    let write = |relative: &str, text: &str| write_file(dir, relative, text);
    let config = std::fs::read_to_string(dir.join("viss.toml"))
        .map_err(|error| BenchError::Failed(format!("viss.toml: {error}")))?
        .replace("annotator = \"local\"", "annotator = \"mock:scripted\"")
        .replace("writer = \"local\"", "writer = \"mock:scripted\"")
        .replace("describer = \"local\"", "describer = \"mock:scripted\"")
        .replace("agents = [\"local\"]", "agents = [\"mock:scripted\"]");
    write(
        "viss.toml",
        &format!(
            "{config}\n[llm.endpoints.mock]\nbase_url = \"{base_url}\"\nmax_in_flight = \
             {in_flight}\ntimeout_seconds = {}\n",
            latency.as_secs_f64() * 10.0 + 30.0
        ),
    )?;
    let mut manifest = "license = \"Synthetic text written by viss bench, CC0.\"\n\n".to_string();
    for (id, script) in episodes {
        write(&format!("raw/bench/{id}.txt"), script)?;
        manifest.push_str(&format!(
            "[[episodes]]\nid = \"{id}\"\nscript = \"bench/{id}.txt\"\n\n"
        ));
    }
    write("manifests/shows/bench.toml", &manifest)
}

/// A benchmark's build report, or an error naming how many items failed and the first one.
pub(super) fn without_failures(
    report: crate::dag::scheduler::BuildReport,
) -> Result<crate::dag::scheduler::BuildReport, BenchError> {
    match report.failures.first() {
        Some(first) => Err(BenchError::Failed(format!(
            "{} item(s) failed, e.g. {} {}: {}",
            report.failures.len(),
            first.stage,
            first.item,
            first.error
        ))),
        None => Ok(report),
    }
}

/// Writes `text` to `relative` under `dir`, making its folders.
pub(super) fn write_file(dir: &Path, relative: &str, text: &str) -> Result<(), BenchError> {
    let path = dir.join(relative);
    std::fs::create_dir_all(path.parent().expect("a file in a folder"))
        .and_then(|()| std::fs::write(&path, text))
        .map_err(|error| BenchError::Failed(format!("{}: {error}", path.display())))
}

/// Runs the benchmark in a new project under `dir` (which must not hold one).
pub fn run_simulate_bench(
    options: &SimulateBenchOptions,
    dir: &Path,
) -> Result<SimulateBenchReport, BenchError> {
    let latency = options.latency;
    let mock = BackgroundMockServer::start(move |_, body| {
        let reply = MockReply::answer(&scripted::answer(body).to_string());
        // Only the turns are timed: the annotation before them is set-up.
        if scripted::step_of(body) == "turn" {
            reply.after(latency)
        } else {
            reply
        }
    });
    synthetic_project(
        dir,
        &mock.server().base_url,
        options.in_flight,
        latency,
        &[("e01", synthetic_script(options.scenarios))],
    )?;
    let write = |relative: &str, text: &str| write_file(dir, relative, text);
    write(
        "stages/plan_runs.toml",
        &format!(
            "[params]\nmodes = [\"text\"]\nreplicates = {}\n",
            options.runs_per_scenario
        ),
    )?;
    write(
        "stages/simulate.toml",
        &format!("[params]\nrounds = {}\n", options.rounds),
    )?;
    let project = Project::open(dir)?;
    let workspace = Workspace::open(project.clone(), stages::BUILTIN, "bench")?;
    let build = |until: &str| -> Result<_, BenchError> {
        let report = workspace.build(&BuildOptions {
            until: vec![until.to_string()],
            jobs: project.config.jobs(),
            ..BuildOptions::default()
        })?;
        without_failures(report)
    };
    let started = Instant::now();
    build(stages::affect::AFFECT.id().stage)?;
    let setup_seconds = started.elapsed().as_secs_f64();
    let turns_asked = || {
        let requests = mock.server().state.requests.lock();
        let requests = requests.unwrap_or_else(|poisoned| poisoned.into_inner());
        requests
            .iter()
            .filter(|request| scripted::step_of(&request.body) == "turn")
            .count()
    };
    mock.server()
        .state
        .most_in_flight
        .store(0, Ordering::SeqCst);
    let started = Instant::now();
    let simulate = stages::simulate::TRACE.id().stage;
    let report = build(simulate)?;
    let seconds = started.elapsed().as_secs_f64();
    let runs = report.counts(simulate).ran;
    let turns = turns_asked();
    let waves = turns.div_ceil(options.in_flight.max(1)).max(options.rounds);
    let ideal_seconds = waves as f64 * latency.as_secs_f64();
    Ok(SimulateBenchReport {
        scenarios: report.counts(stages::plan_runs::RUN.id().stage).ran,
        runs,
        turns,
        latency_ms: latency.as_millis() as u64,
        in_flight: options.in_flight,
        setup_seconds,
        seconds,
        ideal_seconds,
        ratio_of_ideal: ideal_seconds / seconds,
        most_in_flight_seen_by_server: mock.server().state.most_in_flight.load(Ordering::SeqCst),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_synthetic_script_alternates_two_and_three_people() {
        let script = synthetic_script(3);
        assert_eq!(script.matches("[Scene: ").count(), 3);
        assert!(script.contains("Ada and Ben.]\nAda: Box 0 of room 0"));
        assert!(script.contains("Ada and Ben and Cyd.]\nAda: Box 0 of room 1"));
        assert!(script.contains("Cyd: Box 2 of room 1"));
    }
}

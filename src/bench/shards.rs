//! `viss bench shards`: a build split into K shards sharing a cache, against the same build on
//! one machine, side by side in one run. A synthetic show of E episodes is annotated through
//! `tasks` by the scripted MOCK model with a fixed latency per request (the network boundary);
//! the reference is one unsharded build, then for each K, K shard builds run at once (each its
//! own project copy and store, as on K machines, here threads of one process) sharing a cache in
//! a folder, each round followed by the assembly, until a round runs nothing, then the final
//! unsharded build. Reported: wall time, speed-up over the reference, rounds, items run (which
//! must equal the reference's: nothing twice) and LLM requests (nothing paid twice).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::dag::scheduler::{BuildOptions, BuildReport};
use crate::dag::shard::Part;
use crate::llm::mock_server::{BackgroundMockServer, MockReply};
use crate::project::Project;
use crate::stages;
use crate::workspace::Workspace;

use super::dag::BenchError;
use super::scripted;
use super::simulate::{synthetic_project, synthetic_script, without_failures, write_file};

#[derive(Debug, Clone)]
pub struct ShardsBenchOptions {
    pub episodes: usize,
    pub scenes_per_episode: usize,
    pub latency: Duration,
    /// Requests in flight per machine.
    pub in_flight: usize,
    /// The shard counts to measure, each against the one-machine build.
    pub shards: Vec<u32>,
}

#[derive(Debug, Serialize)]
pub struct ShardsBenchReport {
    pub episodes: usize,
    pub scenes: usize,
    pub latency_ms: u64,
    pub in_flight_per_machine: usize,
    pub until: &'static str,
    pub one_machine: Measured,
    pub sharded: Vec<Measured>,
}

#[derive(Debug, Serialize)]
pub struct Measured {
    pub shards: u32,
    pub seconds: f64,
    /// The one-machine build's seconds over these.
    pub speed_up: f64,
    /// Rounds of shards and an assembly (0 for the one-machine build).
    pub rounds: usize,
    pub items_run: usize,
    pub llm_requests: usize,
}

impl ShardsBenchReport {
    pub fn summary(&self) -> String {
        let mut lines = vec![format!(
            "shards: {} episodes x {} scenes through `{}`, {} ms a request, {} in flight per \
             machine; one machine {:.1} s ({} items, {} LLM requests)",
            self.episodes,
            self.scenes / self.episodes.max(1),
            self.until,
            self.latency_ms,
            self.in_flight_per_machine,
            self.one_machine.seconds,
            self.one_machine.items_run,
            self.one_machine.llm_requests
        )];
        for m in &self.sharded {
            lines.push(format!(
                "  {} shard(s): {:.1} s, {:.2}x the one machine, {} round(s), {} items, {} LLM \
                 requests",
                m.shards, m.seconds, m.speed_up, m.rounds, m.items_run, m.llm_requests
            ));
        }
        lines.join("\n")
    }
}

const UNTIL: &str = "tasks";

fn ran(report: &BuildReport) -> usize {
    report.total(|c| c.ran)
}

fn build(root: &Path, part: Part) -> Result<BuildReport, BenchError> {
    let project = Project::open(root)?;
    let jobs = project.config.jobs();
    let workspace = Workspace::open(project, stages::BUILTIN, "bench")?;
    let report = workspace.build(&BuildOptions {
        until: vec![UNTIL.to_string()],
        part,
        jobs,
        ..BuildOptions::default()
    })?;
    without_failures(report)
}

/// Runs the benchmark in new projects under `dir`.
pub fn run_shards_bench(
    options: &ShardsBenchOptions,
    dir: &Path,
) -> Result<ShardsBenchReport, BenchError> {
    let latency = options.latency;
    let mock = BackgroundMockServer::start(move |_, body| {
        MockReply::answer(&scripted::answer(body).to_string()).after(latency)
    });
    let episodes: Vec<(String, String)> = (1..=options.episodes)
        .map(|e| {
            // Each episode its own lines: the same lines would be the same LLM requests,
            // answered from the cache.
            let script = synthetic_script(options.scenes_per_episode)
                .replace("Room ", &format!("Room {e}."))
                .replace("of room ", &format!("of room {e}."));
            (format!("e{e:02}"), script)
        })
        .collect();
    let episodes: Vec<(&str, String)> = episodes
        .iter()
        .map(|(id, script)| (id.as_str(), script.clone()))
        .collect();
    let new_project = |name: &str, remote: Option<&Path>| -> Result<PathBuf, BenchError> {
        let root = dir.join(name);
        let base_url = &mock.server().base_url;
        synthetic_project(&root, base_url, options.in_flight, latency, &episodes)?;
        if let Some(folder) = remote {
            let config = std::fs::read_to_string(root.join("viss.toml"))
                .map_err(|error| BenchError::Failed(format!("viss.toml: {error}")))?;
            let remote = format!("\n[remote]\nurl = \"file://{}\"\n", folder.display());
            write_file(&root, "viss.toml", &(config + &remote))?;
        }
        Ok(root)
    };

    let requests = || mock.server().request_count();
    let started = Instant::now();
    let single = build(&new_project("one-machine", None)?, Part::All)?;
    let one_seconds = started.elapsed().as_secs_f64();
    let one_machine = Measured {
        shards: 1,
        seconds: one_seconds,
        speed_up: 1.0,
        rounds: 0,
        items_run: ran(&single),
        llm_requests: requests(),
    };

    let mut sharded = Vec::new();
    for &count in &options.shards {
        let shared = dir.join(format!("shared-{count}"));
        let machines = (0..=count)
            .map(|m| new_project(&format!("k{count}-machine{m}"), Some(&shared)))
            .collect::<Result<Vec<_>, _>>()?;
        let before = requests();
        let started = Instant::now();
        let (mut items, mut rounds) = (0, 0);
        loop {
            rounds += 1;
            let reports: Vec<Result<BuildReport, BenchError>> = std::thread::scope(|scope| {
                let builds: Vec<_> = (0..count)
                    .map(|index| {
                        let root = &machines[index as usize];
                        scope.spawn(move || build(root, Part::Shard { index, count }))
                    })
                    .collect();
                builds
                    .into_iter()
                    .map(|b| b.join().expect("a shard's thread"))
                    .collect()
            });
            let mut this_round = 0;
            for report in reports {
                this_round += ran(&report?);
            }
            this_round += ran(&build(&machines[count as usize], Part::Assemble)?);
            items += this_round;
            if this_round == 0 || rounds == 8 {
                break;
            }
        }
        items += ran(&build(&machines[count as usize], Part::All)?);
        let seconds = started.elapsed().as_secs_f64();
        sharded.push(Measured {
            shards: count,
            seconds,
            speed_up: one_seconds / seconds,
            rounds,
            items_run: items,
            llm_requests: requests() - before,
        });
    }
    Ok(ShardsBenchReport {
        episodes: options.episodes,
        scenes: options.episodes * options.scenes_per_episode,
        latency_ms: latency.as_millis() as u64,
        in_flight_per_machine: options.in_flight,
        until: UNTIL,
        one_machine,
        sharded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the measure rests on: every sharded configuration ran the one machine's items and
    /// LLM requests, none twice, and the final unsharded build found them all.
    #[test]
    fn sharded_builds_run_each_item_and_request_once() {
        let temp = tempfile::tempdir().unwrap();
        let options = ShardsBenchOptions {
            episodes: 3,
            scenes_per_episode: 1,
            latency: Duration::from_millis(5),
            in_flight: 2,
            shards: vec![2, 3],
        };
        let report = run_shards_bench(&options, temp.path()).unwrap();
        assert!(report.one_machine.items_run > 0);
        for sharded in &report.sharded {
            assert_eq!(
                sharded.items_run, report.one_machine.items_run,
                "{report:?}"
            );
            assert_eq!(
                sharded.llm_requests, report.one_machine.llm_requests,
                "{report:?}"
            );
            assert!(
                sharded.rounds >= 2,
                "profile balancing needs an assembly: {report:?}"
            );
        }
    }
}

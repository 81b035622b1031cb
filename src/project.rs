//! A viss project: a directory with `viss.toml`, `stages/`, `prompts/`, `raw/`, `manifests/` and
//! the artifact store.

use std::path::{Path, PathBuf};

use crate::config::{Config, ConfigError, DEFAULT_CONFIG_TOML};
use crate::dag::store_dir::Protected;
use crate::fsutil::write_atomic_beside;

pub const CONFIG_FILE: &str = "viss.toml";

#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    #[error(
        "no {CONFIG_FILE} in {start} or any parent directory; run `viss init` to make a project, \
         or pass -C DIR"
    )]
    NotFound { start: PathBuf },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} already exists; use --force to overwrite the files viss would write")]
    Exists { path: PathBuf },
}

#[derive(Debug, Clone)]
pub struct Project {
    pub root: PathBuf,
    pub config: Config,
}

const RAW_README: &str = "Put licensed media here (scripts, subtitles, video, character reference \
                          images),\n\
one folder per show, and describe them in manifests/shows/<show>.toml.\n\
viss never copies these files into its store and refuses manifest paths outside this folder.\n";

/// What `init` keeps out of version control: the store and the export are rebuilt from the
/// project, and licensed media must not end up in a shared repository.
const PROJECT_GITIGNORE: &str = "/artifacts/\n/export/\n/raw/*\n!/raw/README.md\n";

impl Project {
    /// Finds the project containing `start` (searching parent directories for `viss.toml`).
    pub fn discover(start: &Path) -> Result<Self, ProjectError> {
        let start = std::path::absolute(start).map_err(|source| ProjectError::Io {
            path: start.to_path_buf(),
            source,
        })?;
        let mut dir = Some(start.as_path());
        while let Some(at) = dir {
            // Anything named viss.toml stops the search (without following it): one that is
            // not a regular file is then an error naming it, not a reason to open a parent.
            if std::fs::symlink_metadata(at.join(CONFIG_FILE)).is_ok() {
                return Self::open(at);
            }
            dir = at.parent();
        }
        Err(ProjectError::NotFound { start })
    }

    pub fn open(root: &Path) -> Result<Self, ProjectError> {
        let root = std::path::absolute(root).map_err(|source| ProjectError::Io {
            path: root.to_path_buf(),
            source,
        })?;
        let config = Config::load(&root.join(CONFIG_FILE))?;
        // From here on nothing this process stores or prints shows the endpoints' keys.
        crate::redact::register_configured_keys(&config.llm);
        Ok(Self { root, config })
    }

    /// Creates a project skeleton with the built-in stage configurations and prompt templates
    /// written out, so a user can see and edit every parameter and prompt.
    pub fn init(
        root: &Path,
        stage_configs: &[(&str, &str)],
        prompts: &[(&str, &str)],
        force: bool,
    ) -> Result<Self, ProjectError> {
        let config_path = root.join(CONFIG_FILE);
        if config_path.exists() && !force {
            return Err(ProjectError::Exists { path: config_path });
        }
        let write = |path: PathBuf, text: &str| {
            write_atomic_beside(&path, text.as_bytes())
                .map_err(|source| ProjectError::Io { path, source })
        };
        for dir in ["stages", "prompts", "raw", "manifests/shows"] {
            let path = root.join(dir);
            std::fs::create_dir_all(&path).map_err(|source| ProjectError::Io { path, source })?;
        }
        write(config_path, DEFAULT_CONFIG_TOML)?;
        for (name, text) in stage_configs {
            write(root.join("stages").join(format!("{name}.toml")), text)?;
        }
        for (file_name, text) in prompts {
            write(root.join("prompts").join(file_name), text)?;
        }
        write(root.join("raw/README.md"), RAW_README)?;
        if !root.join(".gitignore").exists() {
            write(root.join(".gitignore"), PROJECT_GITIGNORE)?;
        }
        Self::open(root)
    }

    pub fn stages_dir(&self) -> PathBuf {
        self.root.join("stages")
    }

    pub fn prompts_dir(&self) -> PathBuf {
        self.root.join("prompts")
    }

    pub fn raw_dir(&self) -> PathBuf {
        self.root.join("raw")
    }

    pub fn shows_dir(&self) -> PathBuf {
        self.root.join("manifests").join("shows")
    }

    pub fn artifacts_dir(&self) -> PathBuf {
        self.root.join(&self.config.paths.artifacts)
    }

    /// What the artifact store must not be (nor contain): the project itself, and its folders
    /// of user files, which it must not lie inside of either.
    pub fn protected_dirs(&self) -> Vec<Protected> {
        let mut protected = vec![Protected {
            what: "the project directory".to_string(),
            path: self.root.clone(),
            inside_too: false,
        }];
        for (what, path) in [
            ("raw/ (your licensed media)", self.raw_dir()),
            ("manifests/", self.root.join("manifests")),
            ("stages/", self.stages_dir()),
            ("prompts/", self.prompts_dir()),
        ] {
            protected.push(Protected {
                what: what.to_string(),
                path,
                inside_too: true,
            });
        }
        protected
    }

    /// A path relative to the project root, for messages.
    pub fn display_path(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_viss_toml_that_is_not_a_file_is_an_error_not_skipped() {
        let temp = tempfile::tempdir().unwrap();
        std::fs::write(temp.path().join(CONFIG_FILE), "").unwrap();
        let inner = temp.path().join("inner");
        std::fs::create_dir_all(inner.join(CONFIG_FILE)).unwrap();
        let error = Project::discover(&inner).unwrap_err().to_string();
        assert!(error.contains("inner/viss.toml: is a directory"), "{error}");
    }
}

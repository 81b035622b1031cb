//! A viss project: a directory with `viss.toml`, `stages/`, `prompts/`, `raw/`, `manifests/` and
//! the artifact store.
//!
//! Which directory is a project (see [`Project::discover`]): one with `viss.toml`, or, without
//! it, one with both a `stages/` and a `manifests/shows/` directory, whose settings are then
//! the defaults. The second rule makes a checkout of viss itself a project (its `stages/` and
//! `prompts/` are the built-in defaults, `manifests/shows/` the demo show) without a
//! `viss.toml` at its top level. A `viss.toml` always wins: at each level it is looked for
//! first, so a project made by `viss init` is found exactly as before.

use std::path::{Path, PathBuf};

use crate::config::{Config, ConfigError, DEFAULT_CONFIG_TOML};
use crate::fsutil::write_atomic_beside;
use viss_engine::store_dir::Protected;

pub const CONFIG_FILE: &str = "viss.toml";

#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    #[error(
        "no {CONFIG_FILE} (nor stages/ with manifests/shows/) in {start} or any parent \
         directory; run `viss init` to make a project, or pass -C DIR"
    )]
    NotFound { start: PathBuf },
    #[error(
        "{root} is not a viss project: it has no {CONFIG_FILE} (nor both stages/ and \
         manifests/shows/); run `viss init {root}` to make one"
    )]
    NotAProject { root: PathBuf },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} already exists; use --force to overwrite the files viss would write")]
    Exists { path: PathBuf },
    #[error("no show {show:?} in {shows_dir}: the shows are {known}")]
    UnknownShow {
        show: String,
        shows_dir: String,
        known: String,
    },
    #[error("show name {show:?} has glob characters; rename its manifest")]
    ShowNameIsAGlob { show: String },
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

/// A directory without `viss.toml` that is a project by its folders: `stages/` and
/// `manifests/shows/` are both directories (symlinks to directories count).
fn is_layout_project(dir: &Path) -> bool {
    dir.join("stages").is_dir() && dir.join("manifests").join("shows").is_dir()
}

impl Project {
    /// Finds the project containing `start`: the nearest of it and its parents that has
    /// `viss.toml` or, at a level without one, both `stages/` and `manifests/shows/`
    /// directories (see the module's doc).
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
            if is_layout_project(at) {
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
        let config_path = root.join(CONFIG_FILE);
        // A viss.toml that is there in any form is read (and a non-file one is an error);
        // without one, the directory must look like a project by its folders.
        let config = if std::fs::symlink_metadata(&config_path).is_ok() {
            Config::load(&config_path)?
        } else if is_layout_project(&root) {
            Config::defaults_with_env()?
        } else {
            return Err(ProjectError::NotAProject { root });
        };
        // From here on nothing this process stores or prints shows the endpoints' keys.
        crate::redact::register_configured_keys(&config.llm);
        if config.remote.is_some() {
            crate::redact::register_remote_credentials();
        }
        Ok(Self { root, config })
    }

    /// Creates a project skeleton with the built-in stage configurations and prompt templates
    /// written out, so a user can see and edit every parameter and prompt.
    pub fn init(
        root: &Path,
        stage_configs: &[(&str, String)],
        prompts: &[(&str, &str)],
        force: bool,
    ) -> Result<Self, ProjectError> {
        let config_path = root.join(CONFIG_FILE);
        if config_path.exists() && !force {
            return Err(ProjectError::Exists { path: config_path });
        }
        // A project by its folders (a checkout of viss) has stage files of its own to keep.
        if is_layout_project(root) && !force {
            return Err(ProjectError::Exists {
                path: root.join("stages"),
            });
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

    /// Writes those of `prompts` (file name, built-in text: the stages' `added_prompts()`) that a
    /// project made by an older `viss init` lacks because they came later (`one_part.j2`), so
    /// that its stages load; never overwrites a file. Returns the paths written.
    pub fn add_missing_prompts(&self, prompts: &[(&str, &str)]) -> std::io::Result<Vec<PathBuf>> {
        let dir = self.prompts_dir();
        let mut written = Vec::new();
        if !dir.is_dir() {
            return Ok(written);
        }
        for (name, text) in prompts {
            let path = dir.join(name);
            if std::fs::symlink_metadata(&path).is_err() {
                crate::fsutil::write_atomic_beside(&path, text.as_bytes())?;
                written.push(path);
            }
        }
        Ok(written)
    }

    pub fn raw_dir(&self) -> PathBuf {
        self.root.join("raw")
    }

    /// The items of `show` and the benchmark item, as a glob for a build's `--items`.
    pub fn show_items_glob(&self, show: &str) -> Result<String, ProjectError> {
        let shows: Vec<String> = crate::manifest::manifest_paths(&self.shows_dir())
            .iter()
            .filter_map(|path| {
                path.file_stem()
                    .map(|stem| stem.to_string_lossy().into_owned())
            })
            .collect();
        if !shows.iter().any(|known| known == show) {
            return Err(ProjectError::UnknownShow {
                show: show.to_string(),
                shows_dir: self.display_path(&self.shows_dir()),
                known: if shows.is_empty() {
                    "none yet (add manifests/shows/NAME.toml)".to_string()
                } else {
                    shows.join(", ")
                },
            });
        }
        if show.contains(['*', '?', '[', ']', '{', '}', ',']) {
            return Err(ProjectError::ShowNameIsAGlob {
                show: show.to_string(),
            });
        }
        Ok(format!("{{{show}/*,{}}}", crate::dag::BENCHMARK_ITEM))
    }

    pub fn shows_dir(&self) -> PathBuf {
        self.root.join("manifests").join("shows")
    }

    /// `manifests/reviews`: one verdict file per reviewer (see [`crate::review`]).
    pub fn reviews_dir(&self) -> PathBuf {
        self.root.join("manifests").join("reviews")
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

    #[test]
    fn stages_and_manifests_shows_make_a_project_without_viss_toml() {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path();
        std::fs::create_dir_all(root.join("stages")).unwrap();
        let inner = root.join("src/deep");
        std::fs::create_dir_all(&inner).unwrap();
        // stages/ alone is not enough (nor is manifests/shows/ alone).
        assert!(matches!(
            Project::discover(&inner),
            Err(ProjectError::NotFound { .. })
        ));
        let error = Project::open(root).unwrap_err().to_string();
        assert!(error.contains("is not a viss project"), "{error}");

        std::fs::create_dir_all(root.join("manifests/shows")).unwrap();
        let project = Project::discover(&inner).unwrap();
        assert_eq!(project.root, std::path::absolute(root).unwrap());
        assert_eq!(project.artifacts_dir(), project.root.join("artifacts"));
        assert_eq!(Project::open(root).unwrap().root, project.root);
        // `viss init` there would overwrite its stage files: only with --force.
        let error = Project::init(root, &[], &[], false)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("stages already exists; use --force"),
            "{error}"
        );
    }

    #[test]
    fn a_viss_toml_is_looked_for_first_at_each_level() {
        let temp = tempfile::tempdir().unwrap();
        let outer = temp.path();
        std::fs::write(outer.join(CONFIG_FILE), "[paths]\nartifacts = \"store\"\n").unwrap();
        std::fs::create_dir_all(outer.join("stages")).unwrap();
        std::fs::create_dir_all(outer.join("manifests/shows")).unwrap();
        let project = Project::discover(outer).unwrap();
        assert_eq!(project.artifacts_dir(), project.root.join("store"));
        // A folder inside a project that has neither rule's marks opens the project.
        let raw = outer.join("raw/myshow");
        std::fs::create_dir_all(&raw).unwrap();
        assert_eq!(Project::discover(&raw).unwrap().root, project.root);
    }
}

//! Loading the DAG: each stage's `stages/<name>.toml` (or its built-in default) is read with the
//! stage's own typed params, and the `needs` lists are checked for unknown names and cycles.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::dag::{Level, Stage};
use crate::fsutil::{NotAFile, regular_file};
use crate::range::{BadSetting, Validate};

/// A stage implementation compiled into viss, with its default configuration.
#[derive(Clone, Copy)]
pub struct StageKind {
    pub name: &'static str,
    pub summary: &'static str,
    pub default_config: &'static str,
    pub load: fn(&str) -> Result<LoadedStage, toml::de::Error>,
}

pub struct LoadedStage {
    pub version: u32,
    pub needs: Vec<String>,
    pub prompts: Vec<String>,
    /// The params with defaults filled in, as JSON: equal configurations hash equally whether
    /// a default is written out or not.
    pub params: serde_json::Value,
    pub stage: Arc<dyn Stage>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StageFile<P> {
    version: u32,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    #[serde(default)]
    needs: Vec<String>,
    #[serde(default)]
    prompts: Vec<String>,
    #[serde(default)]
    params: P,
}

/// Reads a stage file whose `[params]` table is the stage's typed params struct `P` (which
/// should be `#[serde(deny_unknown_fields, default)]`), checks every number of it against its
/// documented range, and builds the stage from it.
pub fn load_stage<P, S>(text: &str) -> Result<LoadedStage, toml::de::Error>
where
    P: DeserializeOwned + Serialize + Default + Validate,
    S: Stage + From<P>,
{
    let file: StageFile<P> = toml::from_str(text)?;
    file.params
        .validate()
        .map_err(|bad| <toml::de::Error as serde::de::Error>::custom(bad.within("params")))?;
    // Through text, not `to_value`: that widens an f32 0.45 to 0.44999998807907104, which is
    // what `status --why` would then show.
    let params = serde_json::from_slice(&serde_json::to_vec(&file.params).expect("params serialize")).expect("params reparse");
    Ok(LoadedStage {
        version: file.version,
        needs: file.needs,
        prompts: file.prompts,
        params,
        stage: Arc::new(S::from(file.params)),
    })
}

#[derive(Deserialize)]
struct VersionOnly {
    version: u32,
}

/// The version that goes into a stage's cache keys: the stage file's, or the built-in one when
/// that is newer. `viss init` copies the built-in files into a project, so without this a stage
/// whose code changed (and whose built-in version was bumped for it) would keep serving records
/// made by the old code to a project initialised before the upgrade.
fn effective_version(kind: &StageKind, file_version: u32, label: &str) -> u32 {
    let built_in = toml::from_str::<VersionOnly>(kind.default_config)
        .map(|v| v.version)
        .unwrap_or(0);
    if file_version < built_in {
        tracing::warn!(
            "{label} says version {file_version}, but this viss's `{}` stage is version {built_in}: using {built_in}, so its records are rebuilt by the new code (set `version = {built_in}` in the file to silence this)",
            kind.name
        );
    }
    file_version.max(built_in)
}

/// Params of a stage that takes none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

impl Validate for NoParams {
    fn validate(&self) -> Result<(), BadSetting> {
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error(
        "{path}: no stage named `{name}` is built into viss (known: {known}); rename or remove the file"
    )]
    UnknownStageFile {
        path: String,
        name: String,
        known: String,
    },
    #[error("{path}: `needs` names `{need}`, which is not a stage (known: {known})")]
    UnknownNeed {
        path: String,
        need: String,
        known: String,
    },
    #[error("{path}: prompt template `{prompt}` is not in {dir}")]
    MissingPrompt {
        path: String,
        prompt: String,
        dir: String,
    },
    #[error("the stage graph has a cycle: {cycle}; break it by editing `needs` in {files}")]
    Cycle { cycle: String, files: String },
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} {problem}")]
    NotAFile { path: String, problem: NotAFile },
    #[error("{path}: stage files are read only as lowercase <stage>.toml; rename it to {wanted}")]
    Misnamed { path: String, wanted: String },
}

/// One configured stage of the DAG.
pub struct StageSpec {
    pub name: String,
    pub summary: String,
    pub version: u32,
    pub needs: Vec<String>,
    pub prompts: Vec<(String, PathBuf)>,
    pub params: serde_json::Value,
    pub level: Level,
    pub stage: Arc<dyn Stage>,
    /// The project file it came from; `None` when the built-in default was used.
    pub config_path: Option<PathBuf>,
}

impl StageSpec {
    pub fn is_root(&self) -> bool {
        self.needs.is_empty()
    }

    pub fn config_label(&self) -> String {
        match &self.config_path {
            Some(path) => path.display().to_string(),
            None => format!("built-in stages/{}.toml", self.name),
        }
    }
}

/// The DAG, stages in an order where every stage follows its needs.
pub struct Pipeline {
    pub stages: Vec<StageSpec>,
    position: HashMap<String, usize>,
}

impl Pipeline {
    /// Loads every built-in stage, from `stages_dir/<name>.toml` when the project has one and
    /// from the built-in default otherwise. Prompt templates resolve under `prompts_dir`.
    pub fn load(
        kinds: &[StageKind],
        stages_dir: &Path,
        prompts_dir: &Path,
    ) -> Result<Self, SpecError> {
        let known = kinds.iter().map(|k| k.name).collect::<Vec<_>>().join(", ");
        if let Ok(entries) = std::fs::read_dir(stages_dir) {
            for entry in entries.flatten() {
                let path = entry.path();
                if let Some(extension) = path.extension()
                    && extension != "toml"
                    && extension.eq_ignore_ascii_case("toml")
                {
                    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
                    return Err(SpecError::Misnamed {
                        path: path.display().to_string(),
                        wanted: format!("{stem}.toml"),
                    });
                }
                if path.extension().is_some_and(|e| e == "toml") {
                    let name = path
                        .file_stem()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned();
                    if !kinds.iter().any(|k| k.name == name) {
                        return Err(SpecError::UnknownStageFile {
                            path: path.display().to_string(),
                            name,
                            known,
                        });
                    }
                }
            }
        }
        let mut specs = Vec::new();
        for kind in kinds {
            let file = stages_dir.join(format!("{}.toml", kind.name));
            // A directory, FIFO or symlink loop in its place is refused, not read as "no file":
            // the built-in defaults silently standing in for it would hide the mistake.
            let present = regular_file(&file).map_err(|problem| SpecError::NotAFile {
                path: file.display().to_string(),
                problem,
            })?;
            let (text, config_path) = if present.is_some() {
                let text = std::fs::read_to_string(&file).map_err(|source| SpecError::Io {
                    path: file.display().to_string(),
                    source,
                })?;
                (text, Some(file.clone()))
            } else {
                (kind.default_config.to_string(), None)
            };
            let label = config_path
                .as_ref()
                .map_or(format!("built-in stages/{}.toml", kind.name), |p| {
                    p.display().to_string()
                });
            let loaded = (kind.load)(&text).map_err(|e| SpecError::Parse {
                path: label.clone(),
                message: e.to_string(),
            })?;
            let level = loaded.stage.level();
            let version = effective_version(kind, loaded.version, &label);
            let mut prompts = Vec::new();
            for prompt in &loaded.prompts {
                let path = prompts_dir.join(prompt);
                let present = regular_file(&path).map_err(|problem| SpecError::NotAFile {
                    path: path.display().to_string(),
                    problem,
                })?;
                if present.is_none() {
                    return Err(SpecError::MissingPrompt {
                        path: label.clone(),
                        prompt: prompt.clone(),
                        dir: prompts_dir.display().to_string(),
                    });
                }
                prompts.push((prompt.clone(), path));
            }
            specs.push(StageSpec {
                name: kind.name.to_string(),
                summary: kind.summary.to_string(),
                version,
                needs: loaded.needs,
                prompts,
                params: loaded.params,
                level,
                stage: loaded.stage,
                config_path,
            });
        }
        Self::from_specs(specs, &known)
    }

    fn from_specs(specs: Vec<StageSpec>, known: &str) -> Result<Self, SpecError> {
        let names: BTreeSet<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        for spec in &specs {
            for need in &spec.needs {
                if !names.contains(need.as_str()) {
                    return Err(SpecError::UnknownNeed {
                        path: spec.config_label(),
                        need: need.clone(),
                        known: known.to_string(),
                    });
                }
            }
        }
        // Depth-first topological sort that reports the cycle it runs into.
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            Open,
            Done,
        }
        let index: HashMap<&str, usize> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        let mut marks = vec![Mark::New; specs.len()];
        let mut order = Vec::with_capacity(specs.len());
        fn visit(
            at: usize,
            specs: &[StageSpec],
            index: &HashMap<&str, usize>,
            marks: &mut [Mark],
            path: &mut Vec<usize>,
            order: &mut Vec<usize>,
        ) -> Result<(), SpecError> {
            match marks[at] {
                Mark::Done => return Ok(()),
                Mark::Open => {
                    let start = path.iter().position(|&p| p == at).unwrap_or(0);
                    let mut cycle: Vec<&str> = path[start..]
                        .iter()
                        .map(|&p| specs[p].name.as_str())
                        .collect();
                    cycle.push(specs[at].name.as_str());
                    let files: Vec<String> = path[start..]
                        .iter()
                        .map(|&p| specs[p].config_label())
                        .collect();
                    return Err(SpecError::Cycle {
                        cycle: cycle.join(" -> "),
                        files: files.join(", "),
                    });
                }
                Mark::New => {}
            }
            marks[at] = Mark::Open;
            path.push(at);
            for need in &specs[at].needs {
                visit(index[need.as_str()], specs, index, marks, path, order)?;
            }
            path.pop();
            marks[at] = Mark::Done;
            order.push(at);
            Ok(())
        }
        for at in 0..specs.len() {
            visit(at, &specs, &index, &mut marks, &mut Vec::new(), &mut order)?;
        }
        let mut slots: Vec<Option<StageSpec>> = specs.into_iter().map(Some).collect();
        let stages: Vec<StageSpec> = order
            .into_iter()
            .map(|i| slots[i].take().expect("each stage once"))
            .collect();
        let position = stages
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i))
            .collect();
        Ok(Self { stages, position })
    }

    pub fn get(&self, name: &str) -> Option<&StageSpec> {
        self.position.get(name).map(|&i| &self.stages[i])
    }

    pub fn position(&self, name: &str) -> Option<usize> {
        self.position.get(name).copied()
    }

    /// `name` and every stage it transitively needs.
    pub fn with_ancestors(&self, name: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![name.to_string()];
        while let Some(at) = stack.pop() {
            if seen.insert(at.clone())
                && let Some(spec) = self.get(&at)
            {
                stack.extend(spec.needs.iter().cloned());
            }
        }
        seen
    }

    /// The DAG as text: each stage with its level, version, config file and needs.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let width = self.stages.iter().map(|s| s.name.len()).max().unwrap_or(0);
        let dependents: BTreeMap<&str, Vec<&str>> = self
            .stages
            .iter()
            .map(|s| {
                let users = self
                    .stages
                    .iter()
                    .filter(|u| u.needs.contains(&s.name))
                    .map(|u| u.name.as_str())
                    .collect();
                (s.name.as_str(), users)
            })
            .collect();
        for spec in &self.stages {
            let needs = if spec.needs.is_empty() {
                "(sources)".to_string()
            } else {
                spec.needs.join(", ")
            };
            let _ = writeln!(
                out,
                "{:width$}  {:9}  v{:<3} needs: {needs}",
                spec.name,
                spec.level.to_string(),
                spec.version,
            );
            let users = &dependents[spec.name.as_str()];
            if !users.is_empty() {
                let _ = writeln!(out, "{:width$}  {:9}  feeds: {}", "", "", users.join(", "));
            }
            let _ = writeln!(
                out,
                "{:width$}  {:9}  {} ({})",
                "",
                "",
                spec.summary,
                spec.config_label()
            );
        }
        out
    }

    /// The DAG in Graphviz dot.
    pub fn render_dot(&self) -> String {
        let mut out = String::from("digraph viss {\n  rankdir=LR;\n");
        for spec in &self.stages {
            let _ = writeln!(
                out,
                "  \"{}\" [label=\"{}\\n{}\"];",
                spec.name, spec.name, spec.level
            );
            for need in &spec.needs {
                let _ = writeln!(out, "  \"{need}\" -> \"{}\";", spec.name);
            }
        }
        out.push_str("}\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(stages: &Path) -> Result<Pipeline, SpecError> {
        let prompts = stages.parent().unwrap().join("prompts");
        std::fs::create_dir_all(&prompts).unwrap();
        for (name, text) in crate::stages::DEFAULT_PROMPTS {
            std::fs::write(prompts.join(name), text).unwrap();
        }
        Pipeline::load(crate::stages::BUILTIN, stages, &prompts)
    }

    #[test]
    fn every_built_in_stage_file_is_in_range() {
        let temp = tempfile::tempdir().unwrap();
        assert!(load(&temp.path().join("stages")).is_ok());
    }

    #[test]
    fn a_param_out_of_range_names_the_stage_file_key_and_range() {
        let temp = tempfile::tempdir().unwrap();
        let stages = temp.path().join("stages");
        std::fs::create_dir(&stages).unwrap();
        let cases = [
            ("align", "alpha = 2", "params.alpha = 2"),
            (
                "detect",
                "[params.faces]\ndet_size = 650",
                "params.faces.det_size = 650",
            ),
            (
                "match_roles",
                "[params.faces.yunet]\nnms_iou = -1",
                "params.faces.yunet.nms_iou",
            ),
            ("keyframes", "jump = 0", "params.jump = 0"),
            (
                "portraits",
                "[params.local]\nline_width = 1e30",
                "params.local.line_width = 1e30",
            ),
            (
                "parse_script",
                "[params.scenarios]\nmax_silence = 0",
                "scenarios.max_silence",
            ),
            ("annotate", "temperature = inf", "params.temperature = inf"),
            ("profiles", "concurrency = 0", "params.concurrency = 0"),
        ];
        for (stage, params, key) in cases {
            let file = stages.join(format!("{stage}.toml"));
            let params = if params.starts_with('[') {
                params.to_string()
            } else {
                format!("[params]\n{params}")
            };
            std::fs::write(&file, format!("version = 9\n{params}\n")).unwrap();
            let error = load(&stages).err().expect("refused").to_string();
            assert!(error.contains(&format!("stages/{stage}.toml: ")), "{error}");
            assert!(
                error.contains(key) && error.contains("is out of range"),
                "{error}"
            );
            std::fs::remove_file(&file).unwrap();
        }
    }

    #[test]
    fn a_stage_file_that_is_not_a_file_is_refused_not_replaced_by_defaults() {
        let temp = tempfile::tempdir().unwrap();
        let stages = temp.path().join("stages");
        std::fs::create_dir_all(stages.join("align.toml")).unwrap();
        let error = load(&stages).err().expect("refused").to_string();
        assert!(
            error.contains("stages/align.toml is a directory"),
            "{error}"
        );
        std::fs::remove_dir(stages.join("align.toml")).unwrap();

        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("align.toml", stages.join("frames.toml")).unwrap();
            std::os::unix::fs::symlink("frames.toml", stages.join("align.toml")).unwrap();
            let error = load(&stages).err().expect("refused").to_string();
            assert!(error.contains("is a symlink loop"), "{error}");
            std::fs::remove_file(stages.join("align.toml")).unwrap();
            std::fs::remove_file(stages.join("frames.toml")).unwrap();
        }

        std::fs::write(stages.join("Align.TOML"), "version = 2\n").unwrap();
        let error = load(&stages).err().expect("refused").to_string();
        assert!(
            error.contains("Align.TOML") && error.contains("rename it to Align.toml"),
            "{error}"
        );
    }
}

//! Loading the DAG: each stage's `stages/<name>.toml` (or its built-in default) is read with the
//! stage's own typed params; the edges come from the ports each stage reads, checked against
//! the ports their producers write (and for cycles) before anything runs.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::fsutil::{NotAFile, regular_file};
use crate::port::PortId;
use crate::range::{BadSetting, Validate};
use crate::stage_file::render_stage_file;
use crate::{Level, Stage};

/// A stage implementation compiled into viss, with its default configuration.
pub struct StageKind<E> {
    pub name: &'static str,
    pub summary: &'static str,
    /// The code's version, part of every cache key of the stage: bump it when a change to the
    /// code changes what the stage writes, so stored records made by the old code are rebuilt.
    pub version: u32,
    /// The prompt templates (in the project's `prompts/`) the stage renders; their bytes are
    /// part of its cache key.
    pub prompts: &'static [&'static str],
    /// Its configuration when the project has no `stages/<name>.toml`, and what `viss init`
    /// writes there: [`StageKind::default_config`].
    pub defaults: Defaults,
    pub load: fn(&str) -> Result<LoadedStage<E>, toml::de::Error>,
}

/// Where a stage's default configuration comes from.
#[derive(Clone, Copy)]
pub enum Defaults {
    /// Rendered from its params type: the values of its `Default`, the comments of its doc
    /// comments ([`render_stage_file`]); built with [`Defaults::of`].
    Rendered(fn(summary: &str) -> String),
    /// This text (synthetic and test stages, whose params are not documented).
    Text(&'static str),
}

impl Defaults {
    /// The stage file of params type `P`.
    pub const fn of<P: JsonSchema + Serialize + Default>() -> Self {
        Self::Rendered(render_stage_file::<P>)
    }
}

impl<E> StageKind<E> {
    /// The text of its default `stages/<name>.toml`.
    pub fn default_config(&self) -> String {
        match self.defaults {
            Defaults::Rendered(render) => render(self.summary),
            Defaults::Text(text) => text.to_string(),
        }
    }
}

// Not derived: that would ask `E: Clone`, and a kind holds no `E`.
impl<E> Clone for StageKind<E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E> Copy for StageKind<E> {}

pub struct LoadedStage<E> {
    /// What an older project's stage file still says; `None` in files written since these
    /// moved into the code.
    pub version: Option<u32>,
    pub needs: Option<Vec<String>>,
    pub prompts: Option<Vec<String>>,
    /// The params with defaults filled in, as JSON: equal configurations hash equally whether
    /// a default is written out or not.
    pub params: serde_json::Value,
    pub stage: Arc<dyn Stage<E>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StageFile<P> {
    #[serde(default)]
    version: Option<u32>,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    #[serde(default)]
    needs: Option<Vec<String>>,
    #[serde(default)]
    prompts: Option<Vec<String>>,
    #[serde(default)]
    params: P,
}

/// Reads a stage file whose `[params]` table is the stage's typed params struct `P` (which
/// should be `#[serde(deny_unknown_fields, default)]`), checks every number of it against its
/// documented range, and builds the stage from it.
pub fn load_stage<E, P, S>(text: &str) -> Result<LoadedStage<E>, toml::de::Error>
where
    P: DeserializeOwned + Serialize + Default + Validate,
    S: Stage<E> + From<P>,
{
    let file: StageFile<P> = toml::from_str(text)?;
    file.params
        .validate()
        .map_err(|bad| <toml::de::Error as serde::de::Error>::custom(bad.within("params")))?;
    // Through text, not `to_value`: that widens an f32 0.45 to 0.44999998807907104, which is
    // what `status --why` would then show.
    let params =
        serde_json::from_slice(&serde_json::to_vec(&file.params).expect("params serialize"))
            .expect("params reparse");
    Ok(LoadedStage {
        version: file.version,
        needs: file.needs,
        prompts: file.prompts,
        params,
        stage: Arc::new(S::from(file.params)),
    })
}

/// The version that goes into a stage's cache keys: the code's, or an older project file's when
/// that is higher (a user who bumped it to force a rebuild keeps those records). A file below
/// the code's version was copied from an older viss: its records are rebuilt by the new code.
fn effective_version<E>(kind: &StageKind<E>, file_version: Option<u32>, label: &str) -> u32 {
    let Some(file_version) = file_version else {
        return kind.version;
    };
    if file_version < kind.version {
        tracing::warn!(
            "{label} says version {file_version}, but this viss's `{}` stage is version {}: using \
             {}, so its records are rebuilt by the new code (the code sets the version now: \
             delete the `version` line)",
            kind.name,
            kind.version,
            kind.version
        );
    }
    file_version.max(kind.version)
}

fn quoted<S: AsRef<str>>(names: &[S]) -> String {
    names
        .iter()
        .map(|n| format!("\"{}\"", n.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Params of a stage that takes none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

impl Validate for NoParams {
    fn validate(&self) -> Result<(), BadSetting> {
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// Not TOML, or not the stage's settings: rendered by [`crate::toml_error::render`].
    #[error("{0}")]
    Toml(String),
    #[error(
        "{path}: no stage named `{name}` is built into viss (known: {known}); rename or remove \
         the file"
    )]
    UnknownStageFile {
        path: String,
        name: String,
        known: String,
    },
    #[error(
        "{path}: `needs = [{written}]` does not match what the `{stage}` stage reads, which is \
         from [{derived}]; delete the `needs` line (the code declares a stage's inputs; `viss \
         graph` lists them)"
    )]
    NeedsDiffer {
        path: String,
        stage: String,
        written: String,
        derived: String,
    },
    #[error(
        "{path}: `prompts = [{written}]` is not what the `{stage}` stage renders ([{declared}]); \
         delete the `prompts` line and edit the templates in prompts/ instead"
    )]
    PromptsDiffer {
        path: String,
        stage: String,
        written: String,
        declared: String,
    },
    #[error(
        "stage `{stage}` reads port {port}, but {problem}; this is a bug in the stage's declaration"
    )]
    UnknownPort {
        stage: String,
        port: String,
        problem: String,
    },
    #[error("{path}: prompt template `{prompt}` is not in {dir}")]
    MissingPrompt {
        path: String,
        prompt: String,
        dir: String,
    },
    #[error("the stage graph has a cycle: {cycle} (through the ports they read)")]
    Cycle { cycle: String },
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
pub struct StageSpec<E> {
    pub name: String,
    pub summary: String,
    pub version: u32,
    /// The stages this one reads from, in the order its inputs name them.
    pub needs: Vec<String>,
    pub inputs: Vec<PortId>,
    pub outputs: Vec<PortId>,
    pub prompts: Vec<(String, PathBuf)>,
    pub params: serde_json::Value,
    pub level: Level,
    pub stage: Arc<dyn Stage<E>>,
    /// The project file it came from; `None` when the built-in default was used.
    pub config_path: Option<PathBuf>,
}

impl<E> StageSpec<E> {
    pub fn is_root(&self) -> bool {
        self.needs.is_empty()
    }

    /// The needs it reads nothing from: stages that only have to settle first.
    pub fn order_only(&self) -> Vec<&str> {
        self.needs
            .iter()
            .filter(|need| !self.inputs.iter().any(|port| port.stage == need.as_str()))
            .map(String::as_str)
            .collect()
    }

    pub fn config_label(&self) -> String {
        match &self.config_path {
            Some(path) => path.display().to_string(),
            None => format!("built-in stages/{}.toml", self.name),
        }
    }
}

/// The DAG, stages in an order where every stage follows its needs.
pub struct Pipeline<E> {
    pub stages: Vec<StageSpec<E>>,
    position: HashMap<String, usize>,
}

impl<E: 'static> Pipeline<E> {
    /// Loads every built-in stage, from `stages_dir/<name>.toml` when the project has one and
    /// from the built-in default otherwise. Prompt templates resolve under `prompts_dir`.
    pub fn load(
        kinds: &[StageKind<E>],
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
                (kind.default_config(), None)
            };
            let label = config_path
                .as_ref()
                .map_or(format!("built-in stages/{}.toml", kind.name), |p| {
                    p.display().to_string()
                });
            let loaded = (kind.load)(&text)
                .map_err(|e| SpecError::Toml(crate::toml_error::render(&label, &text, &e)))?;
            let level = loaded.stage.level();
            let version = effective_version(kind, loaded.version, &label);
            let inputs = loaded.stage.inputs();
            let mut needs: Vec<String> = Vec::new();
            let order_only = loaded.stage.after().iter().copied();
            for stage in inputs.iter().map(|p| p.stage).chain(order_only) {
                if !needs.iter().any(|n| n == stage) {
                    needs.push(stage.to_string());
                }
            }
            if let Some(written) = &loaded.needs {
                let added = loaded.stage.reads_added();
                // A stage read only since `needs` lines were written cannot be what an old line
                // names: such a name is the former name of another stage.
                let now_named = |w: &String| -> String {
                    if needs.contains(w) && !added.contains(&w.as_str()) {
                        return w.clone();
                    }
                    specs
                        .iter()
                        .find(|s: &&StageSpec<E>| s.stage.former_name() == Some(w.as_str()))
                        .map_or_else(|| w.clone(), |s| s.name.clone())
                };
                let written_now: Vec<String> = written.iter().map(now_named).collect();
                let expected: Vec<&String> = needs
                    .iter()
                    .filter(|n| !added.contains(&n.as_str()) || written_now.contains(n))
                    .collect();
                let same = written_now.len() == expected.len()
                    && written_now.iter().all(|w| expected.contains(&w));
                if !same {
                    return Err(SpecError::NeedsDiffer {
                        path: label,
                        stage: kind.name.to_string(),
                        written: quoted(written),
                        derived: quoted(&needs),
                    });
                }
            }
            // An older viss wrote the templates its stage rendered then; a later one may render
            // more after them (one_part.j2), so a written list that begins the declared one is
            // an old file, not an edit.
            if let Some(written) = &loaded.prompts
                && (written.len() > kind.prompts.len()
                    || !written
                        .iter()
                        .map(String::as_str)
                        .eq(kind.prompts[..written.len()].iter().copied()))
            {
                return Err(SpecError::PromptsDiffer {
                    path: label,
                    stage: kind.name.to_string(),
                    written: quoted(written),
                    declared: quoted(kind.prompts),
                });
            }
            let mut prompts = Vec::new();
            for prompt in kind.prompts {
                let path = prompts_dir.join(prompt);
                let present = regular_file(&path).map_err(|problem| SpecError::NotAFile {
                    path: path.display().to_string(),
                    problem,
                })?;
                if present.is_none() {
                    return Err(SpecError::MissingPrompt {
                        path: label.clone(),
                        prompt: prompt.to_string(),
                        dir: prompts_dir.display().to_string(),
                    });
                }
                prompts.push((prompt.to_string(), path));
            }
            specs.push(StageSpec {
                name: kind.name.to_string(),
                summary: kind.summary.to_string(),
                version,
                needs,
                outputs: loaded.stage.outputs(),
                inputs,
                prompts,
                params: loaded.params,
                level,
                stage: loaded.stage,
                config_path,
            });
        }
        Self::from_specs(specs)
    }

    fn from_specs(specs: Vec<StageSpec<E>>) -> Result<Self, SpecError> {
        // Every port read must be written by a stage of this build, as that stage declares it.
        for spec in &specs {
            for port in &spec.inputs {
                let problem = match specs.iter().find(|s| s.name == port.stage) {
                    None => format!("no stage `{}` is in this build", port.stage),
                    Some(producer) if !producer.outputs.contains(port) => {
                        format!("`{}` does not write it", port.stage)
                    }
                    Some(_) => continue,
                };
                return Err(SpecError::UnknownPort {
                    stage: spec.name.clone(),
                    port: port.to_string(),
                    problem,
                });
            }
            for need in &spec.needs {
                if !specs.iter().any(|s| &s.name == need) {
                    return Err(SpecError::UnknownPort {
                        stage: spec.name.clone(),
                        port: format!("(order only) {need}"),
                        problem: format!("no stage `{need}` is in this build"),
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
        fn visit<E>(
            at: usize,
            specs: &[StageSpec<E>],
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
                    return Err(SpecError::Cycle {
                        cycle: cycle.join(" -> "),
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
        let mut slots: Vec<Option<StageSpec<E>>> = specs.into_iter().map(Some).collect();
        let stages: Vec<StageSpec<E>> = order
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

    pub fn get(&self, name: &str) -> Option<&StageSpec<E>> {
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

    /// The stages that read from `name`.
    fn dependents(&self, name: &str) -> Vec<&str> {
        self.stages
            .iter()
            .filter(|u| u.needs.iter().any(|n| n == name))
            .map(|u| u.name.as_str())
            .collect()
    }

    /// The DAG as text: each stage with its level, code version and config file, then the
    /// ports it reads and writes with their record types, and the stages it feeds.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let port_width = self
            .stages
            .iter()
            .flat_map(|s| s.inputs.iter().chain(&s.outputs))
            .map(|p| p.to_string().len())
            .max()
            .unwrap_or(0);
        for spec in &self.stages {
            let _ = writeln!(
                out,
                "{}  {} level, v{}: {} ({})",
                spec.name,
                spec.level,
                spec.version,
                spec.summary,
                spec.config_label()
            );
            if spec.inputs.is_empty() {
                let _ = writeln!(out, "  {:7} the project's show manifests", "reads");
            }
            for (label, ports) in [("reads", &spec.inputs), ("writes", &spec.outputs)] {
                for (i, port) in ports.iter().enumerate() {
                    let label = if i == 0 { label } else { "" };
                    let _ = writeln!(
                        out,
                        "  {label:7} {:port_width$}  {}",
                        port.to_string(),
                        port.record()
                    );
                }
            }
            let order_only = spec.order_only();
            if !order_only.is_empty() {
                let _ = writeln!(
                    out,
                    "  {:7} {} (order only)",
                    "after",
                    order_only.join(", ")
                );
            }
            let users = self.dependents(&spec.name);
            if !users.is_empty() {
                let _ = writeln!(out, "  {:7} {}", "feeds", users.join(", "));
            }
        }
        out
    }

    /// The DAG as JSON: per stage its level, version, config file, and typed inputs and outputs.
    pub fn to_json(&self) -> serde_json::Value {
        let ports = |ports: &[PortId]| -> serde_json::Value {
            ports
                .iter()
                .map(|p| {
                    serde_json::json!({
                        "port": p.to_string(),
                        "stage": p.stage,
                        "name": p.name,
                        "scope": format!("{:?}", p.scope).to_lowercase(),
                        "record": p.record(),
                    })
                })
                .collect()
        };
        let stages: Vec<serde_json::Value> = self
            .stages
            .iter()
            .map(|spec| {
                serde_json::json!({
                    "name": spec.name,
                    "summary": spec.summary,
                    "level": spec.level,
                    "version": spec.version,
                    "config": spec.config_label(),
                    "needs": spec.needs,
                    "after": spec.order_only(),
                    "inputs": ports(&spec.inputs),
                    "outputs": ports(&spec.outputs),
                    "feeds": self.dependents(&spec.name),
                })
            })
            .collect();
        serde_json::json!({ "stages": stages })
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

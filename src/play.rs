//! `viss play`: a person takes one role of a simulation run at the terminal. The person's seat
//! is answered by [`Terminal`], a chat backend that shows what an agent would be shown (the
//! turn's prompt; pictures written to files, their paths printed) and asks for each field of
//! the turn in order: free text as a line, a choice (emotion, next speaker) by number or name,
//! yes or no. The answer then goes through the same checks as an agent's, and a refused answer
//! is asked again with the reason. Every answer goes through the request cache like an agent's,
//! so a play stopped at a turn resumes there.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use crate::hash::ContentHash;
use crate::llm::pool::PERSON_IDENTITY;
use crate::llm::request::{EndpointIdentity, Message, Part, Role};
use crate::llm::{ChatBackend, ChatRequest, LlmError, RawAnswer, Usage};

/// A person at a terminal: reads answers from `input`, writes what it shows to `output`.
pub struct Terminal {
    io: Arc<Mutex<TerminalIo>>,
}

struct TerminalIo {
    input: Box<dyn BufRead + Send>,
    output: Box<dyn Write + Send>,
    /// Where the pictures of a turn are written for the person to open.
    pictures: PathBuf,
}

impl Terminal {
    pub fn new(
        input: Box<dyn BufRead + Send>,
        output: Box<dyn Write + Send>,
        pictures: PathBuf,
    ) -> Self {
        Self {
            io: Arc::new(Mutex::new(TerminalIo {
                input,
                output,
                pictures,
            })),
        }
    }
}

fn closed() -> LlmError {
    LlmError::Config(
        "the terminal's input ended before the turn was answered; run `viss play` again to go on \
         from this turn"
            .to_string(),
    )
}

fn io_failed(error: std::io::Error) -> LlmError {
    LlmError::Config(format!("the terminal: {error}"))
}

impl TerminalIo {
    fn say(&mut self, text: &str) -> Result<(), LlmError> {
        self.output
            .write_all(text.as_bytes())
            .and_then(|()| self.output.flush())
            .map_err(io_failed)
    }

    fn line(&mut self, question: &str) -> Result<String, LlmError> {
        self.say(question)?;
        let mut line = String::new();
        match self.input.read_line(&mut line).map_err(io_failed)? {
            0 => Err(closed()),
            _ => Ok(line.trim().to_string()),
        }
    }

    /// The message's texts, and its pictures written to files (their paths in its place).
    fn show(&mut self, message: &Message) -> Result<(), LlmError> {
        for part in &message.content {
            match part {
                Part::Text(text) => self.say(&format!("{text}\n"))?,
                Part::ImagePng(png) => {
                    std::fs::create_dir_all(&self.pictures).map_err(io_failed)?;
                    let path = self
                        .pictures
                        .join(format!("{}.png", &ContentHash::of(png).to_hex()[..16]));
                    std::fs::write(&path, png).map_err(io_failed)?;
                    self.say(&format!("[picture: {}]\n", path.display()))?;
                }
            }
        }
        Ok(())
    }

    /// One field of the answer, asked as its schema says.
    fn field(&mut self, name: &str, schema: &Value) -> Result<Value, LlmError> {
        if let Some(options) = schema.get("enum").and_then(Value::as_array) {
            let names: Vec<&str> = options.iter().filter_map(Value::as_str).collect();
            let menu: Vec<String> = names
                .iter()
                .enumerate()
                .map(|(index, option)| format!("{}. {option}", index + 1))
                .collect();
            let answer = self.line(&format!("{name} [{}]: ", menu.join("  ")))?;
            let chosen = answer
                .parse::<usize>()
                .ok()
                .and_then(|number| names.get(number.wrapping_sub(1)).copied())
                .unwrap_or(answer.as_str());
            return Ok(Value::String(chosen.to_string()));
        }
        if schema.get("type").and_then(Value::as_str) == Some("boolean") {
            let answer = self.line(&format!("{name} [y/n]: "))?;
            return Ok(Value::Bool(matches!(
                answer.to_ascii_lowercase().as_str(),
                "y" | "yes" | "true"
            )));
        }
        let hint = schema
            .get("description")
            .and_then(Value::as_str)
            .map_or(String::new(), |d| format!(" ({d})"));
        Ok(Value::String(self.line(&format!("{name}{hint}: "))?))
    }
}

#[async_trait::async_trait]
impl ChatBackend for Terminal {
    fn identity(&self) -> EndpointIdentity {
        EndpointIdentity {
            base_url: PERSON_IDENTITY.to_string(),
            model: "person".to_string(),
        }
    }

    async fn answer(
        &self,
        request: &ChatRequest,
        conversation: &[Message],
        _usage: &mut Usage,
    ) -> Result<RawAnswer, LlmError> {
        let Some((_, schema)) = request.response_schema.clone() else {
            return Err(LlmError::Config(
                "a person can only answer a request with a schema".to_string(),
            ));
        };
        let conversation = conversation.to_vec();
        let io = self.io.clone();
        tokio::task::spawn_blocking(move || {
            let mut io = io.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            // First the whole turn as an agent gets it; on a re-ask, only why it was refused.
            let first = conversation.iter().filter(|m| m.role == Role::User).count() == 1;
            let shown: Vec<&Message> = if first {
                conversation.iter().collect()
            } else {
                conversation.iter().rev().take(1).collect()
            };
            io.say("\n----------------------------------------\n")?;
            for message in shown {
                io.show(message)?;
            }
            io.say("----------------------------------------\n")?;
            let properties = schema.get("properties").and_then(Value::as_object);
            let order: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|names| names.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut answer = Map::new();
            for name in order {
                let field_schema = properties
                    .and_then(|p| p.get(name))
                    .cloned()
                    .unwrap_or(Value::Null);
                answer.insert(name.to_string(), io.field(name, &field_schema)?);
            }
            Ok(RawAnswer {
                text: Value::Object(answer).to_string(),
                stopped_at_token_limit: false,
            })
        })
        .await
        .map_err(|error| LlmError::Config(format!("the terminal task failed: {error}")))?
    }
}

/// Adds `seat` to `play` in stages/plan_runs.toml of `project` unless it is there; returns
/// whether it was added. The file's own text is kept; the seat goes at its end as a
/// `[[params.play]]` table, checked to parse before it is written.
/// Checks, before anything is written or any model asked, that `seat` names a scenario of the
/// project and one of its roles: the scenario's episode is parsed (no language model), and its
/// participants read.
pub fn check_seat(
    workspace: &crate::workspace::Workspace,
    seat: &crate::stages::plan_runs::PlaySeat,
    jobs: usize,
    progress: bool,
) -> Result<(), PlayError> {
    use crate::stages::parse_script;
    let unknown = || PlayError::UnknownScenario {
        scenario: seat.scenario.clone(),
    };
    let (episode, _) = seat.scenario.rsplit_once('/').ok_or_else(unknown)?;
    let report = workspace.build(&crate::dag::scheduler::BuildOptions {
        until: vec![parse_script::SCENARIO.id().stage.to_string()],
        items: Some(crate::dag::scheduler::glob_literal(episode)),
        jobs,
        progress,
        ..Default::default()
    })?;
    if let Some(failure) = report.failures.first() {
        return Err(PlayError::NotParsed {
            scenario: seat.scenario.clone(),
            error: failure.error.clone(),
        });
    }
    let store = workspace.store();
    let record = store
        .index()
        .get(parse_script::SCENARIO.id().stage, episode)?
        .ok_or_else(unknown)?;
    let hash = record
        .outputs
        .get(&parse_script::CONTEXT.id().output_name(&seat.scenario))
        .ok_or_else(unknown)?;
    let context: crate::annotation::ScenarioContext =
        serde_json::from_slice(&store.get_blob(hash)?).map_err(|error| {
            PlayError::Store(crate::dag::store::StoreError::OutputDecode {
                what: format!("the context of {}", seat.scenario),
                message: error.to_string(),
            })
        })?;
    if !context.participants.contains(&seat.role) {
        return Err(PlayError::UnknownRole {
            role: seat.role.clone(),
            scenario: seat.scenario.clone(),
            roles: context.participants.join(", "),
        });
    }
    Ok(())
}

/// A seat [`add_seat`] wrote into `stages/plan_runs.toml`, which [`AddedSeat::undo`] takes out
/// again, leaving the file as it was.
#[derive(Debug)]
pub struct AddedSeat {
    path: PathBuf,
    /// The file before (`None`: there was none).
    before: Option<String>,
}

impl AddedSeat {
    pub fn undo(self) -> Result<(), PlayError> {
        let result = match &self.before {
            Some(text) => crate::fsutil::write_atomic_beside(&self.path, text.as_bytes()),
            None => std::fs::remove_file(&self.path),
        };
        result.map_err(|source| PlayError::Io {
            path: self.path,
            source,
        })
    }
}

/// Adds `seat` to `stages/plan_runs.toml`: `None` when it is there already.
pub fn add_seat(
    project: &crate::project::Project,
    seat: &crate::stages::plan_runs::PlaySeat,
) -> Result<Option<AddedSeat>, PlayError> {
    let path = project.stages_dir().join("plan_runs.toml");
    let before = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => return Err(PlayError::Io { path, source }),
    };
    let text = before.clone().unwrap_or_default();
    let parsed: toml::Value = toml::from_str(&text).map_err(|error| {
        PlayError::Toml(crate::dag::toml_error::render(
            &path.display().to_string(),
            &text,
            &error,
        ))
    })?;
    let seats = parsed
        .get("params")
        .and_then(|params| params.get("play"))
        .cloned()
        .map(|play| play.try_into::<Vec<crate::stages::plan_runs::PlaySeat>>())
        .transpose()
        .map_err(|error| PlayError::StageFile {
            path: path.clone(),
            problem: error.to_string(),
        })?
        .unwrap_or_default();
    if seats.contains(seat) {
        return Ok(None);
    }
    let quoted = |text: &str| toml::Value::from(text).to_string();
    let added = format!(
        "{}{}\n# Added by `viss play`: a person in this role.\n[[params.play]]\nscenario = \
         {}\nrole = {}\nmode = {}\n",
        text,
        if text.ends_with('\n') || text.is_empty() {
            ""
        } else {
            "\n"
        },
        quoted(&seat.scenario),
        quoted(&seat.role),
        quoted(seat.mode.as_str())
    );
    if let Err(error) = toml::from_str::<toml::Value>(&added) {
        return Err(PlayError::StageFile {
            path,
            problem: format!(
                "cannot add the seat at its end ({error}); add it to [params] play by hand"
            ),
        });
    }
    crate::fsutil::write_atomic_beside(&path, added.as_bytes()).map_err(|source| {
        PlayError::Io {
            path: path.clone(),
            source,
        }
    })?;
    Ok(Some(AddedSeat { path, before }))
}

/// How a play ended: the run's trace, or the failures that stopped it.
pub enum Played {
    /// The run and its transcript (none when the run has no trace yet).
    Finished {
        run: String,
        transcript: Option<String>,
    },
    /// The run failed; `viss status` lists why (rendered here).
    Failed(String),
}

/// Plays `seat` on `project` with a person at `person`: checks the seat, writes it into
/// stages/plan_runs.toml (taken out again if the scene cannot be made ready), builds what the
/// scene needs, then plays the run. Once the play is under way its seat stays, so that
/// `viss play` again goes on from the turn it reached.
pub fn play(
    project: crate::project::Project,
    seat: &crate::stages::plan_runs::PlaySeat,
    person: std::sync::Arc<dyn crate::llm::ChatBackend>,
    jobs: usize,
    progress: bool,
    on_added: impl FnOnce(),
) -> Result<Played, PlayError> {
    use crate::dag::scheduler::BuildOptions;
    use crate::stages::{self, simulate};
    use crate::workspace::Workspace;
    check_seat(
        &Workspace::open(project.clone(), stages::BUILTIN, "play")?,
        seat,
        jobs,
        progress,
    )?;
    let added = add_seat(&project, seat)?;
    if added.is_some() {
        on_added();
    }
    let undo = |added: Option<AddedSeat>, error: PlayError| -> PlayError {
        match added.map(AddedSeat::undo) {
            None => error,
            Some(Ok(())) => PlayError::SeatTakenOut(Box::new(error)),
            Some(Err(undo_error)) => undo_error,
        }
    };
    let ready = (|| -> Result<Workspace, PlayError> {
        let workspace = Workspace::open(project, stages::BUILTIN, "play")?;
        workspace.llm().seat_person(person);
        let prepared = workspace.build(&BuildOptions {
            until: simulate::stages_read(),
            jobs,
            progress,
            ..BuildOptions::default()
        })?;
        if !prepared.failures.is_empty() {
            return Err(PlayError::NotReady(crate::dag::status::render_failures(
                &prepared,
            )));
        }
        Ok(workspace)
    })();
    let workspace = match ready {
        Ok(workspace) => workspace,
        Err(error) => return Err(undo(added, error)),
    };
    let run = seat.run_id();
    let report = workspace.build(&BuildOptions {
        until: vec![simulate::TRACE.id().stage.to_string()],
        items: Some(crate::dag::scheduler::glob_literal(&run)),
        jobs: 1,
        progress: false,
        ..BuildOptions::default()
    })?;
    if !report.failures.is_empty() {
        return Ok(Played::Failed(crate::dag::status::render_failures(&report)));
    }
    let Some(record) = workspace
        .store()
        .index()
        .get(simulate::TRACE.id().stage, &run)?
    else {
        return Err(undo(
            added,
            PlayError::NotPlanned {
                scenario: seat.scenario.clone(),
            },
        ));
    };
    let transcript = match record.outputs.get(simulate::TRACE.id().name) {
        Some(hash) => {
            let trace: viss_sim::trace::Trace =
                serde_json::from_slice(&workspace.store().get_blob(hash)?).map_err(|error| {
                    PlayError::Store(crate::dag::store::StoreError::OutputDecode {
                        what: format!("the trace of {run}"),
                        message: error.to_string(),
                    })
                })?;
            Some(trace.transcript())
        }
        None => None,
    };
    Ok(Played::Finished { run, transcript })
}

#[derive(Debug, thiserror::Error)]
pub enum PlayError {
    #[error("{}: {problem}", path.display())]
    StageFile { path: PathBuf, problem: String },
    #[error("{0}")]
    Toml(String),
    #[error(
        "no scenario {scenario:?}: `viss show parse_script EPISODE` lists an episode's scenarios"
    )]
    UnknownScenario { scenario: String },
    #[error("{scenario} has no role {role:?}; its roles are {roles}")]
    UnknownRole {
        role: String,
        scenario: String,
        roles: String,
    },
    #[error("the script of {scenario} does not parse: {error}")]
    NotParsed { scenario: String, error: String },
    #[error("{0}the scenario is not ready to play; fix the failures above and run again")]
    NotReady(String),
    #[error("the play was not planned: `viss status` says why (a flag of plan_runs on {scenario})")]
    NotPlanned { scenario: String },
    #[error("{0}\nstages/plan_runs.toml: the seat is taken out again")]
    SeatTakenOut(Box<PlayError>),
    #[error(transparent)]
    Build(#[from] crate::dag::scheduler::BuildError),
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    #[error(transparent)]
    Store(#[from] crate::dag::store::StoreError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

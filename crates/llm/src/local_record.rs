//! Questions the embedded model was asked, written down as asked so that `viss bench local-llm`
//! can put the same questions to the model again: a build run with [`RECORD_ENV`] set appends
//! one JSON line per generation (re-asks included, as sent) to the file it names.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::LlmError;
use super::local::LocalAnswer;
use super::request::{Message, Part, Role};

/// The environment variable naming the file the embedded model's questions are appended to.
pub const RECORD_ENV: &str = "VISS_RECORD_LOCAL_LLM";

/// One message of a recorded conversation: the local model reads text only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedMessage {
    pub role: Role,
    pub text: String,
}

/// What one generation was asked and what it gave.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedQuestion {
    /// The response schema's name (the step asking, e.g. `tasks_role`); `None` without one.
    pub step: Option<String>,
    pub messages: Vec<RecordedMessage>,
    /// The schema the decoder was held to.
    pub schema: Option<Value>,
    pub temperature: f32,
    pub seed: Option<u64>,
    pub max_tokens: Option<u32>,
    pub avoid_words: Vec<String>,
    /// The answer as generated then.
    pub answer: String,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
}

impl RecordedQuestion {
    pub fn conversation(&self) -> Vec<Message> {
        self.messages
            .iter()
            .map(|message| Message {
                role: message.role,
                content: vec![Part::Text(message.text.clone())],
            })
            .collect()
    }
}

/// Appends recorded questions to one file, a line each, whole lines only.
#[derive(Debug)]
pub struct Recorder {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

impl Recorder {
    /// The recorder [`RECORD_ENV`] asks for, if it is set.
    pub fn from_env() -> Result<Option<Recorder>, LlmError> {
        match std::env::var_os(RECORD_ENV) {
            Some(path) if !path.is_empty() => Recorder::append_to(Path::new(&path)).map(Some),
            _ => Ok(None),
        }
    }

    pub fn append_to(path: &Path) -> Result<Recorder, LlmError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|error| {
                LlmError::Config(format!(
                    "{RECORD_ENV}: cannot open {} to record the local model's questions: {error}",
                    path.display()
                ))
            })?;
        Ok(Recorder {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// Writes one generation down. A recording is a measurement aid: a failure to write it is
    /// logged, and the build goes on.
    pub fn record(&self, question: Question<'_>, answer: &LocalAnswer) {
        let messages = question
            .conversation
            .iter()
            .map(|message| RecordedMessage {
                role: message.role,
                text: message
                    .content
                    .iter()
                    .filter_map(|part| match part {
                        Part::Text(text) => Some(text.as_str()),
                        Part::ImagePng(_) => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            })
            .collect();
        let recorded = RecordedQuestion {
            step: question.step.map(str::to_string),
            messages,
            schema: question.schema.cloned(),
            temperature: question.temperature,
            seed: question.seed,
            max_tokens: question.max_tokens,
            avoid_words: question.avoid_words.to_vec(),
            answer: answer.text.clone(),
            prompt_tokens: answer.prompt_tokens,
            completion_tokens: answer.completion_tokens,
        };
        let mut line = match serde_json::to_string(&recorded) {
            Ok(line) => line,
            Err(error) => {
                tracing::warn!(%error, "could not encode a recorded question");
                return;
            }
        };
        line.push('\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(error) = file.write_all(line.as_bytes()) {
            tracing::warn!(path = %self.path.display(), %error, "could not record a question");
        }
    }
}

/// A generation's question as [`Recorder::record`] writes it down.
pub struct Question<'a> {
    pub step: Option<&'a str>,
    pub conversation: &'a [Message],
    pub schema: Option<&'a Value>,
    pub temperature: f32,
    pub seed: Option<u64>,
    pub max_tokens: Option<u32>,
    pub avoid_words: &'a [String],
}

/// The questions of a recording, in the order asked.
pub fn read_recording(path: &Path) -> Result<Vec<RecordedQuestion>, LlmError> {
    let text = std::fs::read_to_string(path).map_err(|error| {
        LlmError::Config(format!(
            "cannot read the recording {}: {error}",
            path.display()
        ))
    })?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            serde_json::from_str(line).map_err(|error| {
                LlmError::Config(format!(
                    "{} line {}: not a recorded question ({error})",
                    path.display(),
                    index + 1
                ))
            })
        })
        .collect()
}

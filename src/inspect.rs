//! `viss show`: what a stage made for an item, as the text the command prints. One function, so
//! that a build in progress can answer the same question for another process ([`crate::live`]).

use serde::{Deserialize, Serialize};

use crate::dag::store::{Store, StoreError};
use crate::stages;

/// One `viss show` question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShowRequest {
    pub stage: String,
    pub item: String,
    pub output: Option<String>,
    /// A run of `simulate` or `simulate_sense`: its trace as JSON instead of the transcript.
    pub json: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ShowError {
    #[error("no record of stage `{stage}` for item `{item}`; `viss status` lists what is built")]
    NoRecord { stage: String, item: String },
    #[error("`{stage}` has no output `{output}` for `{item}`; its outputs: {names:?}")]
    NoOutput {
        stage: String,
        item: String,
        output: String,
        names: Vec<String>,
    },
    #[error("the trace of {item} does not read: {message}")]
    Trace { item: String, message: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What [`show`] found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Shown {
    /// A stored output or a transcript, as it is: the printer escapes it line by line.
    Text(String),
    /// The item's listing (outputs, children, flags, error), tab-separated, with every name and
    /// message already escaped for a terminal.
    Listing(String),
}

/// The answer to `request` from `store`.
pub fn show(store: &Store, request: &ShowRequest) -> Result<Shown, ShowError> {
    use crate::redact::{for_terminal, for_terminal_message};
    use std::fmt::Write as _;
    let ShowRequest {
        stage,
        item,
        output,
        json,
    } = request;
    let Some(record) = store.index().get(stage, item)? else {
        return Err(ShowError::NoRecord {
            stage: stage.clone(),
            item: item.clone(),
        });
    };
    // A run of either half is shown as its transcript unless an output or --json is asked for.
    let traces = [
        stages::simulate::TRACE.id().name,
        stages::simulate_sense::SENSE_TRACE.id().name,
    ];
    let trace_output = traces
        .into_iter()
        .find(|name| record.outputs.contains_key(*name));
    let output = match (output, trace_output) {
        (None, Some(trace)) if *json => Some(trace.to_string()),
        (other, _) => other.clone(),
    };
    let mut out = String::new();
    if output.is_none()
        && let Some(trace_output) = trace_output
    {
        let bytes = store.get_blob(&record.outputs[trace_output])?;
        let unreadable = |error: serde_json::Error| ShowError::Trace {
            item: item.clone(),
            message: error.to_string(),
        };
        let transcript = if trace_output == stages::simulate::TRACE.id().name {
            serde_json::from_slice::<viss_sim::trace::Trace>(&bytes)
                .map_err(unreadable)?
                .transcript()
        } else {
            serde_json::from_slice::<stages::simulate_sense::SenseTrace>(&bytes)
                .map_err(unreadable)?
                .transcript()
        };
        return Ok(Shown::Text(transcript));
    }
    let Some(output) = output else {
        if let Some(error) = &record.error {
            let _ = writeln!(out, "failed: {}", for_terminal_message(error));
        }
        for flag in &record.flags {
            let _ = writeln!(out, "flag\t{}", for_terminal(flag));
        }
        for (name, count) in &record.stats {
            let _ = writeln!(out, "stat\t{}\t{count}", for_terminal(name));
        }
        for (name, hash) in &record.outputs {
            let name = name.strip_suffix('@').unwrap_or(name);
            let _ = writeln!(out, "{}\t{hash}", for_terminal(name));
        }
        for child in &record.children {
            let _ = writeln!(out, "child\t{}", for_terminal(child));
        }
        return Ok(Shown::Listing(out));
    };
    // A whole-item output private to its stage is stored as `name@`; it is listed and typed as
    // `name`.
    let hash = record
        .outputs
        .get(&output)
        .or_else(|| record.outputs.get(&format!("{output}@")));
    let Some(hash) = hash else {
        return Err(ShowError::NoOutput {
            stage: stage.clone(),
            item: item.clone(),
            output,
            names: record
                .outputs
                .keys()
                .map(|name| name.strip_suffix('@').unwrap_or(name).to_string())
                .collect(),
        });
    };
    let bytes = store.get_blob(hash)?;
    Ok(Shown::Text(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(error) => format!(
            "{} bytes of binary data: {}\n",
            error.as_bytes().len(),
            store.blobs().location(hash)
        ),
    }))
}

//! Language-model calls over an OpenAI-compatible HTTP API (`POST {base_url}/chat/completions`).
//!
//! Every answer the pipeline keeps is a JSON value that a caller-supplied validator accepted;
//! the module never invents a default when the model fails. Answers are cached under a key
//! that names the endpoint, the model and the full request (including the replicate index, so
//! asking for another sample is a different key), and never the API key.
//!
//! - [`request`]: what is asked ([`ChatRequest`], [`Message`], [`Part`]) and its cache key.
//! - [`cache`]: where validated answers are kept ([`ResponseCache`]).
//! - [`backend`]: the [`ChatBackend`] trait and [`complete_json`]: re-asks, validation, caching.
//! - [`http`]: the OpenAI-compatible backend ([`HttpBackend`]): limits, retries, re-asks,
//!   response-format fallback.
//! - [`extract`]: tolerant extraction of a JSON value from free text.
//! - [`prompt`]: prompt templates rendered into system and user messages.
//! - [`local`]: a GGUF model run in-process by llama.cpp ([`LocalBackend`]), text only, with
//!   schema-constrained decoding.

pub mod backend;
pub mod batch;
pub mod budget;
pub mod cache;
pub mod config;
pub mod error;
pub mod extract;
pub mod http;
mod limits;
pub mod local;
pub mod local_model;
pub mod local_record;
#[cfg(any(test, feature = "mock"))]
pub mod mock_server;
pub mod pool;
pub mod prompt;
pub mod request;

#[cfg(test)]
mod mock_server_tests;

pub use backend::{
    ChatBackend, Completion, Keep, MAX_REASKS, Price, RawAnswer, STALLED_AFTER, Usage,
    complete_json, complete_json_keeping, complete_json_metered, unanswered_key,
};
pub use budget::{Budget, Spending};
pub use cache::{MemoryResponseCache, ResponseCache};
pub use config::{LlmConfig, ModelRef};
pub use error::{LlmError, RejectedAnswer};
pub use extract::parse_json_tolerant;
pub use http::{HttpBackend, HttpConfig};
pub use local::{
    LocalAnswer, LocalBackend, LocalConfig, ReferenceRates, ThroughputReport, local_identity,
    measure_throughput, restart_with_passive_waits,
};
pub use pool::LlmPool;
pub use prompt::{PromptError, render_prompt};
pub use request::{ChatRequest, EndpointIdentity, Message, Part, Role, request_key};
/// What a validator returns for an answer it refuses: the contract of [`complete_json`].
pub use viss_problem::{Problems, Refusal, Rejection};

//! Errors of the LLM backend. Each message says what went wrong and what to do about it, and
//! none ever contains the API key (bodies quoted from the server are scrubbed of it).

use std::path::PathBuf;

/// An answer that parsed as JSON and was rejected, with why, as it was sent back.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RejectedAnswer {
    pub value: serde_json::Value,
    #[serde(alias = "problem", deserialize_with = "viss_problem::stored::one")]
    pub refusal: viss_problem::Refusal,
}

/// A failed language-model call.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error(
        "no API key for the LLM endpoint: set the environment variable {var} \
         (named by api_key_env in the endpoint config), or remove api_key_env if the endpoint \
         needs no key"
    )]
    MissingApiKey { var: String },

    #[error("invalid LLM endpoint configuration: {0}")]
    Config(String),

    #[error("could not build the HTTP client for the LLM endpoint: {0}")]
    Client(String),

    #[error(
        "the LLM endpoint {endpoint} refused the credentials (HTTP {status}): {excerpt}; \
         check the API key in the environment variable named by api_key_env and that it is valid \
         for this endpoint"
    )]
    Unauthorized {
        endpoint: String,
        status: u16,
        excerpt: String,
    },

    #[error(
        "the LLM endpoint {endpoint} rejected the request (HTTP {status}): {excerpt}; \
         retrying will not help: check the model name and request parameters"
    )]
    Rejected {
        endpoint: String,
        status: u16,
        excerpt: String,
    },

    #[error(
        "the LLM endpoint {endpoint} failed {attempts} times in a row (retries exhausted); last \
         failure: {last}; \
         check that the server is up and reachable, lower the request rate, or raise max_retries / \
         timeout"
    )]
    RetriesExhausted {
        endpoint: String,
        attempts: u32,
        last: String,
    },

    #[error("the LLM endpoint {endpoint} refused: {refused}")]
    Redirect {
        endpoint: String,
        refused: Box<crate::http::RefusedRedirect>,
    },

    #[error(
        "the LLM endpoint {endpoint} sent a response body over {limit} bytes (max_response_mib \
         in its [llm.endpoints.*] table); no chat answer is that long: check base_url, or raise \
         max_response_mib if the server really sends that much"
    )]
    ResponseTooLarge { endpoint: String, limit: u64 },

    #[error(
        "the LLM endpoint {endpoint} returned something that is not an OpenAI chat completion: \
         {detail}; \
         check that base_url points at an OpenAI-compatible API (it usually ends in /v1)"
    )]
    MalformedResponse { endpoint: String, detail: String },

    #[error(
        "the model gave {answers} answers without a usable JSON value (re-asked {reasks} times); \
         last problem: {last_problem}; last answer began: {last_answer_excerpt:?}; \
         make the prompt or schema clearer, raise max_tokens, or use a stronger model"
    )]
    InvalidOutput {
        answers: u32,
        reasks: u32,
        last_problem: viss_problem::Refusal,
        last_answer_excerpt: String,
        /// Every answer that was JSON, with why it was rejected, in the order given: a caller
        /// whose checks tell an unusable answer from one that only fails quality gates may
        /// keep the best of them, flagged, instead of failing the item.
        parsed: Vec<RejectedAnswer>,
        /// What the answers cost when they were asked: by this call, or by the one whose
        /// answers the cache replayed (then nothing was spent now).
        usage: Box<crate::Usage>,
    },

    #[error(
        "cannot use the local model {path}: {detail}; check that the file is a GGUF model \
         llama.cpp can load \
         (`viss models fetch` gets the default one) and that the machine has memory for it and its \
         context"
    )]
    LocalModel { path: PathBuf, detail: String },

    #[error(
        "the local model {model} reads text only, but message {message_index} of the conversation \
         contains an image; \
         use a text-only prompt for local models, or an HTTP endpoint with a vision model"
    )]
    LocalImagesUnsupported { model: String, message_index: usize },

    #[error(
        "the prompt is {prompt_tokens} tokens but the local model's context holds \
         {context_tokens}; \
         shorten the prompt or raise context_tokens in the local LLM config"
    )]
    LocalPromptTooLong {
        prompt_tokens: usize,
        context_tokens: u32,
    },

    #[error(
        "the JSON schema cannot be turned into a grammar for the local model: {detail}; \
         simplify the schema (llama.cpp supports objects, arrays, enums, strings, numbers, \
         required, min/maxItems)"
    )]
    LocalSchema { detail: String },

    #[error(
        "the local model {model} could not answer: {detail}; \
         unless that names a problem with the messages, it is llama.cpp failing: check memory, or \
         lower context_tokens"
    )]
    LocalInference { model: String, detail: String },

    #[error(
        "not sent: {scope} = ${cap:.4} would be passed (${committed:.4} spent or in flight, and \
         this request could cost up to ${most:.4}); raise it in viss.toml and run `viss build` \
         again: every answer already paid for is kept and not paid again"
    )]
    BudgetReached {
        scope: String,
        cap: f64,
        committed: f64,
        most: f64,
    },

    #[error(
        "the batch API of {endpoint}: {detail}; check the endpoint serves /files and /batches \
         (OpenAI's batch API), or set batch = false to ask it one request at a time"
    )]
    Batch { endpoint: String, detail: String },

    #[error(
        "{scope} is set, but {model} has no price, so viss cannot keep to it: add its \
         input_per_mtok and output_per_mtok under [llm.endpoints.{endpoint}.prices.\"{model_id}\"]"
    )]
    Unpriced {
        scope: String,
        model: String,
        endpoint: String,
        model_id: String,
    },
    #[error(
        "not asked: the request cache holds no answer to it, and a dry run asks no model \
         (`viss build` without --dry-run asks it)"
    )]
    NotCached,
}

//! What every language-model backend shares: the [`ChatBackend`] trait (one answer to a
//! conversation) and [`complete_json`], the loop that turns answers into a validated JSON
//! value: cache lookup, re-asking with the problem named, caching only what passed.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::{debug, info, warn};

use super::cache::ResponseCache;
use super::error::LlmError;
use super::extract::parse_json_tolerant;
use super::request::{ChatRequest, EndpointIdentity, Message, request_key};
use viss_engine::hash::ContentHash;
use viss_engine::redact::for_terminal;
use viss_problem::{Refusal, Rejection};

/// How many times an unusable answer (not JSON, or rejected by the validator) is sent back to
/// the model with the problem named, before the call fails: a request's default
/// ([`ChatRequest::max_reasks`]).
pub const MAX_REASKS: u32 = 5;

/// How much warmer than the request each re-ask is sampled, up to [`MAX_REASK_TEMPERATURE`]: a
/// model decoding greedily that is shown its own rejected answer mostly gives it again word for
/// word, so every re-ask would fail the same way. Still deterministic with the request's seed.
pub const REASK_TEMPERATURE_STEP: f32 = 0.15;
pub const MAX_REASK_TEMPERATURE: f32 = 0.8;

/// Answers refused in a row for the very same problem after which a call stops re-asking: the
/// model is stuck, and each warmer answer that makes the same mistake is paid for (or waited
/// for) in vain. On the demo's `goals` step the 1.5B model never recovered from such a run:
/// every part that gave the same problem three times in a row still failed after its last
/// re-ask, and those re-asks were over half of the step's answers.
pub const STALLED_AFTER: u32 = 3;

/// Whether the last [`STALLED_AFTER`] answers of a call were refused for the very same problem.
fn stalled(rejected: &[Refusal]) -> bool {
    let last = rejected.len().saturating_sub(STALLED_AFTER as usize);
    rejected.len() >= STALLED_AFTER as usize && rejected[last..].windows(2).all(|w| w[0] == w[1])
}

/// The message added to the question when it is asked again.
fn reask_text(problems: &[String]) -> String {
    let mut text = String::from("Answers given before to this question could not be used:\n");
    for problem in problems {
        text.push_str(&format!("- {problem}\n"));
    }
    text.push_str(
        "Write a new answer that has none of these problems. Reply with only the JSON value, \
         without any other text.",
    );
    text
}

/// The temperature of the answer after `reasks_so_far` rejected ones.
fn reask_temperature(requested: f32, reasks_so_far: u32) -> f32 {
    if reasks_so_far == 0 || requested >= MAX_REASK_TEMPERATURE {
        return requested;
    }
    (requested + REASK_TEMPERATURE_STEP * reasks_so_far as f32).min(MAX_REASK_TEMPERATURE)
}

/// Prices in US dollars per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

impl Price {
    /// Both prices times `factor` (a batch discount).
    pub fn scaled(self, factor: f64) -> Price {
        Price {
            input_per_mtok: self.input_per_mtok * factor,
            output_per_mtok: self.output_per_mtok * factor,
        }
    }
}

/// Tokens and money spent on one [`complete_json`] call (zero on a cache hit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// `None` when no price is configured for the model.
    pub cost_usd: Option<f64>,
    /// Completions the backend returned (re-asked answers included; failed transport
    /// attempts are not billed and not counted).
    pub calls: u32,
    /// Of `calls`, the answers that could not be used: not JSON, rejected by the validator, or
    /// a response that is not a chat completion. Paid for all the same.
    #[serde(default)]
    pub rejected: u32,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.calls += other.calls;
        self.rejected += other.rejected;
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (None, None) => None,
            (mine, theirs) => Some(mine.unwrap_or(0.0) + theirs.unwrap_or(0.0)),
        };
    }

    pub fn add_call(&mut self, prompt_tokens: u64, completion_tokens: u64, price: Option<Price>) {
        self.prompt_tokens += prompt_tokens;
        self.completion_tokens += completion_tokens;
        self.calls += 1;
        if let Some(price) = price {
            let cost = (prompt_tokens as f64 * price.input_per_mtok
                + completion_tokens as f64 * price.output_per_mtok)
                / 1e6;
            self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + cost);
        }
    }
}

/// One answer as the backend produced it, before any parsing.
pub struct RawAnswer {
    pub text: String,
    pub stopped_at_token_limit: bool,
}

/// A model that answers conversations: an OpenAI-compatible endpoint or the embedded model.
#[async_trait::async_trait]
pub trait ChatBackend: Send + Sync {
    /// Which endpoint and model answer: part of every request's cache key.
    fn identity(&self) -> EndpointIdentity;

    /// One answer to `conversation` (the request's messages plus any re-asks), with the
    /// request's sampling settings and schema. Transport retries happen inside; the answer is
    /// not validated here. Adds what the answer cost to `usage`.
    async fn answer(
        &self,
        request: &ChatRequest,
        conversation: &[Message],
        usage: &mut Usage,
    ) -> Result<RawAnswer, LlmError>;

    /// Whether `request`, asked again, gets the same answers, re-asks included (the embedded
    /// model with a seed: greedy or seeded decoding). A call of such a request that found no
    /// usable answer is then kept in the cache like one that found one, and a rebuild replays
    /// its failure instead of paying for the same answers again. An endpoint's answers vary
    /// from call to call, so a rebuild asks it again.
    fn reproduces(&self, _request: &ChatRequest) -> bool {
        false
    }
}

/// A validated answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    pub value: Value,
    /// What this call cost: nothing when the answer came from the cache.
    pub usage: Usage,
    /// What the answer cost when it was first asked: the same whether it came from the cache or
    /// not, so a record of it reads the same after a resumed build.
    pub first_usage: Usage,
    pub from_cache: bool,
    /// The request key it is cached under.
    pub key: ContentHash,
    /// Why each answer the model gave before this one could not be used, in order (as sent back
    /// to it): the same on a cache hit as when it was first asked.
    pub rejected: Vec<Refusal>,
}

/// What the cache holds: the value, what producing it cost the first time and why the answers
/// before it were rejected.
#[derive(Serialize, Deserialize)]
struct CachedCompletion {
    value: Value,
    usage: Usage,
    #[serde(default, deserialize_with = "viss_problem::stored::many")]
    rejected: Vec<Refusal>,
}

/// Every string of an answer (keys too) holds text a person could have typed: no control
/// character but new line and tab. A NUL or an escape sequence in a field would travel into
/// the dataset, the prompts of later stages and the terminal; JSON lets a model or a server
/// spell them as `\u0000`, so they get past the parser.
pub fn plain_text(value: &Value) -> Result<(), Rejection> {
    fn walk(value: &Value, path: &mut String) -> Result<(), String> {
        let refuse = |path: &str, text: &str| match text
            .chars()
            .find(|&c| c.is_control() && c != '\n' && c != '\t')
        {
            Some(c) => Err(format!(
                "{} holds the control character U+{:04X}; write plain text",
                if path.is_empty() { "the answer" } else { path },
                u32::from(c)
            )),
            None => Ok(()),
        };
        match value {
            Value::String(text) => refuse(path, text),
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    let before = path.len();
                    path.push_str(&format!("[{index}]"));
                    walk(item, path)?;
                    path.truncate(before);
                }
                Ok(())
            }
            Value::Object(fields) => {
                for (name, item) in fields {
                    refuse(path, name)?;
                    let before = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(name);
                    walk(item, path)?;
                    path.truncate(before);
                }
                Ok(())
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
        }
    }
    walk(value, &mut String::new())
        .map_err(|message| Rejection::whole("control_character", message))
}

/// The request's answer as a JSON value that `validate` accepts: from `cache` if there, else
/// from `backend`, re-asking up to [`ChatRequest::max_reasks`] times with the problem named when
/// an answer is not JSON or `validate` rejects it, unless [`STALLED_AFTER`] answers in a row
/// were refused for the same problem. Only validated answers are cached, and a
/// model that never gives one is an error: no default is ever substituted.
pub async fn complete_json(
    backend: &dyn ChatBackend,
    request: &ChatRequest,
    cache: &dyn ResponseCache,
    validate: &(dyn Fn(&Value) -> Result<(), Rejection> + Sync),
) -> Result<Completion, LlmError> {
    complete_json_metered(backend, request, cache, validate, &mut Usage::default()).await
}

/// [`complete_json`], adding to `spent` what every answer the backend gave cost, whatever the
/// outcome: unusable answers (counted in [`Usage::rejected`] as well) and the answers of a call
/// that fails in the end were paid for too, and are in no [`Completion`].
pub async fn complete_json_metered(
    backend: &dyn ChatBackend,
    request: &ChatRequest,
    cache: &dyn ResponseCache,
    validate: &(dyn Fn(&Value) -> Result<(), Rejection> + Sync),
    spent: &mut Usage,
) -> Result<Completion, LlmError> {
    complete_json_keeping(backend, request, cache, validate, None, spent).await
}

/// A test of a rejected answer: whether the caller keeps it (flagged) rather than failing.
pub type Keep<'a> = &'a (dyn Fn(&Value) -> bool + Sync);

/// [`complete_json_metered`], except that when every answer is rejected and `keep` holds for
/// one of them (the caller will keep it, flagged, rather than fail), the rejected answers are
/// kept in `cache` too, and the same request is answered from them from then on instead of
/// being asked again: each is checked again by `validate` (a loosened check may accept one),
/// and otherwise the same [`LlmError::InvalidOutput`] comes back, its problems as `validate`
/// words them now. A rebuild thus keeps the answer a person may have reviewed, and pays nothing.
/// A call with nothing to keep is not kept, so a rebuild asks it again, unless the backend
/// [`reproduces`](ChatBackend::reproduces) the request: asked again it would only give the
/// same answers, so its failure is kept and replayed the same way, with or without `keep`.
pub async fn complete_json_keeping(
    backend: &dyn ChatBackend,
    request: &ChatRequest,
    cache: &dyn ResponseCache,
    validate: &(dyn Fn(&Value) -> Result<(), Rejection> + Sync),
    keep: Option<Keep<'_>>,
    spent: &mut Usage,
) -> Result<Completion, LlmError> {
    let key = request_key(request, &backend.identity());
    if let Some(bytes) = cache.get(key) {
        match serde_json::from_slice::<CachedCompletion>(&bytes) {
            Ok(cached) => match plain_text(&cached.value).and_then(|()| validate(&cached.value)) {
                Ok(()) => {
                    debug!(key = %key.to_hex(), "LLM answer from cache");
                    return Ok(Completion {
                        value: cached.value,
                        usage: Usage::default(),
                        first_usage: cached.usage,
                        from_cache: true,
                        key,
                        rejected: cached.rejected,
                    });
                }
                // The validator may have been tightened since: ask again.
                Err(rejection) => {
                    info!(
                        key = %key.to_hex(), problem = %for_terminal(&rejection.message()),
                        "cached LLM answer fails validation now; asking again"
                    )
                }
            },
            Err(error) => {
                warn!(key = %key.to_hex(), %error, "unreadable cached LLM answer; asking again")
            }
        }
    }

    let reproduced = backend.reproduces(request);
    if keep.is_none() && !reproduced {
        let mut usage = Usage::default();
        let result = ask_until_valid(backend, request, cache, validate, key, &mut usage).await;
        spent.add(&usage);
        return result;
    }
    if let Some(bytes) = cache.get(unanswered_key(key)) {
        match serde_json::from_slice::<KeptUnanswered>(&bytes) {
            Ok(kept) => {
                debug!(key = %key.to_hex(), "rejected LLM answers from cache");
                return kept.replay(key, validate);
            }
            Err(error) => {
                warn!(
                    key = %key.to_hex(), %error,
                    "unreadable cached rejected answers; asking again"
                )
            }
        }
    }
    let mut usage = Usage::default();
    let result = ask_until_valid(backend, request, cache, validate, key, &mut usage).await;
    spent.add(&usage);
    if let Err(LlmError::InvalidOutput {
        answers,
        reasks,
        last_problem,
        last_answer_excerpt,
        parsed,
        ..
    }) = &result
        && (reproduced
            || parsed
                .iter()
                .any(|answer| keep.is_some_and(|keep| keep(&answer.value))))
    {
        let kept = KeptUnanswered {
            answers: *answers,
            reasks: *reasks,
            last_problem: last_problem.clone(),
            last_answer_excerpt: last_answer_excerpt.clone(),
            parsed: parsed.clone(),
            usage,
        };
        match serde_json::to_vec(&kept) {
            Ok(bytes) => cache.put(unanswered_key(key), &bytes),
            Err(error) => warn!(%error, "could not encode rejected LLM answers for the cache"),
        }
    }
    result
}

/// Where the rejected answers of the request cached under `key` are kept: another key, so a
/// reader of answers never takes them for one.
pub fn unanswered_key(key: ContentHash) -> ContentHash {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"viss rejected answers\0");
    hasher.update(key.as_bytes());
    ContentHash::from_hasher(&hasher)
}

/// What the cache holds of a call whose every answer was rejected, one of them kept by the
/// caller: the [`LlmError::InvalidOutput`] it ended with.
#[derive(Serialize, Deserialize)]
struct KeptUnanswered {
    answers: u32,
    reasks: u32,
    #[serde(deserialize_with = "viss_problem::stored::one")]
    last_problem: Refusal,
    last_answer_excerpt: String,
    parsed: Vec<super::error::RejectedAnswer>,
    /// What the answers cost when first asked (kept before it was: none).
    #[serde(default)]
    usage: Usage,
}

impl KeptUnanswered {
    /// The call answered again from its kept answers, checked by `validate` as it is now.
    fn replay(
        self,
        key: ContentHash,
        validate: &(dyn Fn(&Value) -> Result<(), Rejection> + Sync),
    ) -> Result<Completion, LlmError> {
        let mut rejected = Vec::new();
        let mut parsed = Vec::new();
        for answer in self.parsed {
            match plain_text(&answer.value).and_then(|()| validate(&answer.value)) {
                Ok(()) => {
                    return Ok(Completion {
                        value: answer.value,
                        usage: Usage::default(),
                        first_usage: self.usage,
                        from_cache: true,
                        key,
                        rejected,
                    });
                }
                Err(rejection) => {
                    let refusal = refusal(&rejection);
                    rejected.push(refusal.clone());
                    parsed.push(super::error::RejectedAnswer {
                        value: answer.value,
                        refusal,
                    });
                }
            }
        }
        Err(LlmError::InvalidOutput {
            answers: self.answers,
            reasks: self.reasks,
            last_problem: parsed
                .last()
                .map_or(self.last_problem, |answer| answer.refusal.clone()),
            last_answer_excerpt: self.last_answer_excerpt,
            parsed,
            usage: Box::new(self.usage),
        })
    }
}

/// What the model is told of an answer that parsed but was rejected, and what the cache and
/// the error keep of it.
fn refusal(rejection: &Rejection) -> Refusal {
    let message = format!(
        "the JSON does not meet the requirements: {}",
        rejection.message()
    );
    Refusal::of(rejection, message)
}

/// The asking part of [`complete_json_metered`]: `usage` holds every answer's cost however it
/// returns.
async fn ask_until_valid(
    backend: &dyn ChatBackend,
    request: &ChatRequest,
    cache: &dyn ResponseCache,
    validate: &(dyn Fn(&Value) -> Result<(), Rejection> + Sync),
    key: ContentHash,
    usage: &mut Usage,
) -> Result<Completion, LlmError> {
    let mut conversation = request.messages.clone();
    let mut problems_so_far: Vec<String> = Vec::new();
    let mut last_answer = String::new();
    let mut rejected = Vec::new();
    let mut parsed_answers = Vec::new();
    let mut attempt = request.clone();
    for reasks_so_far in 0..=request.max_reasks {
        attempt.temperature = reask_temperature(request.temperature, reasks_so_far);
        attempt.reask_round = reasks_so_far;
        let mut answer = backend.answer(&attempt, &conversation, usage).await?;
        // A server may echo what it was sent, the key included: nothing it says is kept, cached,
        // quoted in an error or sent back to it with a key in it.
        answer.text = viss_engine::redact::redact_owned(answer.text);
        let parsed = if answer.stopped_at_token_limit {
            // Tolerant extraction of a cut-off answer finds some inner object and reports
            // problems with it that mislead both the user and the model.
            serde_json::from_str::<Value>(answer.text.trim()).map_err(|_| {
                Refusal::whole(
                    "json_cut_off",
                    "the answer stopped at the max_tokens limit before its JSON was complete; \
                     write shorter values so the whole answer fits"
                        .to_string(),
                )
            })
        } else {
            parse_json_tolerant(&answer.text).map_err(|message| Refusal::whole("not_json", message))
        };
        let mut parsed_value = None;
        let outcome = parsed.and_then(|value| {
            let rejection = match plain_text(&value) {
                Ok(()) => match validate(&value) {
                    Ok(()) => return Ok(value),
                    // Only text a caller could keep is offered to it as a rejected answer.
                    Err(rejection) => {
                        parsed_value = Some(value);
                        rejection
                    }
                },
                Err(rejection) => rejection,
            };
            Err(refusal(&rejection))
        });
        match outcome {
            Ok(value) => {
                let usage = *usage;
                let record = CachedCompletion {
                    value,
                    usage,
                    rejected,
                };
                match serde_json::to_vec(&record) {
                    Ok(bytes) => cache.put(key, &bytes),
                    Err(error) => warn!(%error, "could not encode an LLM answer for the cache"),
                }
                return Ok(Completion {
                    value: record.value,
                    usage,
                    first_usage: usage,
                    from_cache: false,
                    key,
                    rejected: record.rejected,
                });
            }
            Err(mut refusal) => {
                usage.rejected += 1;
                if answer.stopped_at_token_limit && !refusal.message.contains("max_tokens") {
                    refusal.message.push_str(
                        " (the answer stopped at the max_tokens limit, so it is \
                         probably cut off: be more concise)",
                    );
                }
                let problem = &refusal.message;
                warn!(reasks_so_far, problem = %for_terminal(problem), "unusable LLM answer");
                // The re-ask is the question again with every problem so far, not the rejected
                // answer: a small model shown its own answer mostly writes it again, problems
                // and all. (It also keeps the question's start, which a local model has decoded.)
                if !problems_so_far.contains(problem) {
                    problems_so_far.push(problem.clone());
                }
                conversation = request.messages.clone();
                conversation.push(Message::user(reask_text(&problems_so_far)));
                if let Some(value) = parsed_value {
                    parsed_answers.push(super::error::RejectedAnswer {
                        value,
                        refusal: refusal.clone(),
                    });
                }
                rejected.push(refusal);
                last_answer = answer.text;
                if stalled(&rejected) {
                    info!("the same problem {STALLED_AFTER} times in a row: not re-asked");
                    break;
                }
            }
        }
    }
    // Every answer the loop got was refused, each kept in `rejected`.
    let answers = rejected.len() as u32;
    Err(LlmError::InvalidOutput {
        answers,
        reasks: answers - 1,
        last_problem: rejected.pop().expect("every call asks at least once"),
        last_answer_excerpt: last_answer.chars().take(300).collect(),
        parsed: parsed_answers,
        usage: Box::new(*usage),
    })
}

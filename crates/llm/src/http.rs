//! The OpenAI-compatible HTTP backend: admission limits, transport retries, response-format
//! fallback, re-asking on unusable answers, caching of validated answers, usage and cost.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use serde_json::Value;
use tracing::{info, warn};

use super::backend::{ChatBackend, Completion, Price, RawAnswer, Usage, complete_json};
use super::cache::ResponseCache;
use super::error::LlmError;
use super::limits::RequestGate;
use super::request::{ChatRequest, EndpointIdentity, Message, ResponseFormatMode, chat_body};
use viss_engine::redact::for_terminal;

/// Server bodies quoted in errors are cut to this many characters.
const EXCERPT_CHARS: usize = 300;
/// Exponential backoff stops growing here.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A `Retry-After` longer than this is not waited out in full: a stage should fail and be
/// resumed later rather than hang.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
/// Redirects followed within one request, the first URL not counted.
const MAX_REDIRECTS: usize = 5;
/// The default of [`HttpConfig::max_response_bytes`]: 64 MiB, well above a chat answer (a few
/// kB) and an image edit's base64 PNG (a few MB at gpt-image-1's largest size).
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 64 << 20;

/// Where and how to call the endpoint. Holds the *name* of the environment variable with the
/// key, never the key, so it can be logged and stored.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// E.g. `https://api.openai.com/v1` or `http://127.0.0.1:8000/v1`; `/chat/completions` is
    /// appended.
    pub base_url: String,
    pub model: String,
    /// Name of the environment variable holding the API key; `None` for endpoints without auth.
    pub api_key_env: Option<String>,
    /// Per HTTP request, including reading the body.
    pub timeout: Duration,
    pub max_in_flight: usize,
    /// `None` or 0: unlimited.
    pub requests_per_minute: Option<u32>,
    /// Estimated as request characters / 4 + max_tokens; `None` or 0: unlimited.
    pub tokens_per_minute: Option<u32>,
    /// Transport retries after the first attempt (429, 5xx, timeouts, connection errors).
    pub max_retries: u32,
    /// First backoff delay; doubled per retry, with jitter, capped at 60 s.
    pub backoff_base: Duration,
    pub prices: Option<Price>,
    /// A response body longer than this fails the request (read as it streams in, so an
    /// endless body costs at most this much memory).
    pub max_response_bytes: u64,
    /// Send requests through the endpoint's batch API ([`crate::batch`]) instead of one call
    /// each.
    pub batch: Option<crate::batch::BatchSettings>,
}

impl HttpConfig {
    /// Defaults: no key, 120 s timeout, 4 in flight, no rate limit, 5 retries from 1 s, no prices.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: None,
            timeout: Duration::from_secs(120),
            max_in_flight: 4,
            requests_per_minute: None,
            tokens_per_minute: None,
            max_retries: 5,
            backoff_base: Duration::from_secs(1),
            prices: None,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            batch: None,
        }
    }
}

/// Adds a chat completion's `usage` (as the server reported it) to `usage`.
fn add_completion_usage(usage: &mut Usage, response: &Value, price: Option<Price>) {
    let tokens = |name: &str| response["usage"][name].as_u64().unwrap_or(0);
    usage.add_call(tokens("prompt_tokens"), tokens("completion_tokens"), price);
}

/// The API key. Its Debug never shows it, and nothing else in this module prints it.
struct ApiKey {
    secret: String,
    from_env: String,
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<redacted, from ${}>", self.from_env)
    }
}

/// A client for one OpenAI-compatible endpoint and model. Share one per endpoint: the limits
/// are per backend.
pub struct HttpBackend {
    config: HttpConfig,
    chat_url: String,
    api_key: Option<ApiKey>,
    client: reqwest::Client,
    gate: RequestGate,
    /// The strongest response format this server accepted so far ([`ResponseFormatMode`]):
    /// remembered so that a server without `json_schema` support costs one 400, not one per call.
    format_mode: AtomicU8,
    /// With `config.batch`: the batches of this build, and where they are recorded.
    batches: Option<crate::batch::Batches>,
}

impl fmt::Debug for HttpBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpBackend")
            .field("chat_url", &self.chat_url)
            .field("model", &self.config.model)
            .field("api_key", &self.api_key)
            .field(
                "format_mode",
                &ResponseFormatMode::from_u8(self.format_mode.load(Ordering::Relaxed)),
            )
            .finish_non_exhaustive()
    }
}

impl HttpBackend {
    /// Reads the API key from the environment variable named by `config.api_key_env`.
    pub fn new(config: HttpConfig) -> Result<Self, LlmError> {
        Self::with_key_lookup(config, |name| std::env::var(name).ok())
    }

    /// Like [`HttpBackend::new`] with the key looked up by `lookup(variable name)`: for callers
    /// that own the environment (tests, a secrets manager) without mutating the process's.
    pub fn with_key_lookup(
        config: HttpConfig,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, LlmError> {
        let base_url = config.base_url.trim_end_matches('/');
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(LlmError::Config(format!(
                "base_url {:?} must start with http:// or https:// (for example \
                 https://api.openai.com/v1)",
                config.base_url
            )));
        }
        let chat_url = format!("{base_url}/chat/completions");
        let api_key = match &config.api_key_env {
            None => None,
            Some(variable) => match lookup(variable).filter(|value| !value.trim().is_empty()) {
                Some(secret) => {
                    // Whatever this endpoint says back is scrubbed of the key it is sent.
                    viss_engine::redact::register_secret(&secret);
                    Some(ApiKey {
                        secret: secret.trim().to_string(),
                        from_env: variable.clone(),
                    })
                }
                None => {
                    return Err(LlmError::MissingApiKey {
                        var: variable.clone(),
                    });
                }
            },
        };
        let client =
            endpoint_client(config.timeout).map_err(|error| LlmError::Client(error.to_string()))?;
        Ok(Self {
            gate: RequestGate::new(
                config.max_in_flight,
                config.requests_per_minute,
                config.tokens_per_minute,
            ),
            chat_url,
            api_key,
            client,
            format_mode: AtomicU8::new(ResponseFormatMode::JsonSchema as u8),
            config,
            batches: None,
        })
    }

    /// With `batch` in its config, this backend sends its requests in batches recorded in
    /// `ledger` (the store's memos), so that a later process finds a pending batch again.
    pub fn with_batch_ledger(mut self, ledger: Arc<dyn ResponseCache>) -> Self {
        self.batches = self
            .config
            .batch
            .map(|settings| crate::batch::Batches::new(settings, ledger));
        self
    }

    fn batch_api(&self) -> crate::batch::BatchApi<'_> {
        crate::batch::BatchApi {
            client: &self.client,
            base_url: self.config.base_url.trim_end_matches('/'),
            api_key: self.api_key.as_ref().map(|key| key.secret.as_str()),
            model: &self.config.model,
            max_retries: self.config.max_retries,
            backoff_base: self.config.backoff_base,
        }
    }

    /// One completion of `conversation` through the batch API: the line's recorded batch, or
    /// the next one, waited on; a line the batch did not answer goes into another.
    async fn answer_in_batch(
        &self,
        batches: &crate::batch::Batches,
        model: &str,
        request: &ChatRequest,
        conversation: &[Message],
        usage: &mut Usage,
    ) -> Result<RawAnswer, LlmError> {
        if request.reask_round > batches.settings.reask_rounds {
            return self.ask_once(model, request, conversation, usage).await;
        }
        let mode = ResponseFormatMode::from_u8(self.format_mode.load(Ordering::Relaxed))
            .for_request(request);
        let body = chat_body(model, request, conversation, mode);
        let custom_id = crate::batch::custom_id(&body);
        let api = self.batch_api();
        let mut last = String::new();
        for attempt in 0..=batches.settings.resubmits {
            let batch = api
                .batch_of(batches, &custom_id, &body, attempt > 0)
                .await?;
            let outcome = api.outcome(batches, &batch).await?;
            match outcome.lines.get(&custom_id) {
                Some(Ok(response)) => {
                    let discount = batches.settings.discount;
                    let price = self.config.prices.map(|price| price.scaled(discount));
                    add_completion_usage(usage, response, price);
                    let answer = self.read_answer(response);
                    usage.rejected += u32::from(answer.is_err());
                    return answer;
                }
                Some(Err(why)) => last = format!("batch {batch} failed the request: {why}"),
                None => {
                    last = format!(
                        "batch {batch} ended {} without answering the request",
                        outcome.status
                    )
                }
            }
            info!(%custom_id, "{}; submitting it again", for_terminal(&last));
        }
        Err(LlmError::Batch {
            endpoint: self.config.base_url.clone(),
            detail: format!(
                "{last} (submitted {} times)",
                batches.settings.resubmits + 1
            ),
        })
    }

    pub fn config(&self) -> &HttpConfig {
        &self.config
    }

    pub fn endpoint_identity(&self) -> EndpointIdentity {
        EndpointIdentity {
            base_url: self.config.base_url.trim_end_matches('/').to_string(),
            model: self.config.model.clone(),
        }
    }

    /// See [`super::backend::complete_json`]: the answer as a JSON value that `validate`
    /// accepts, from `cache` or from this endpoint.
    pub async fn complete_json(
        &self,
        request: &ChatRequest,
        cache: &dyn ResponseCache,
        validate: impl Fn(&Value) -> Result<(), crate::Rejection> + Sync,
    ) -> Result<Completion, LlmError> {
        complete_json(self, request, cache, &validate).await
    }

    /// One completion of `conversation`, stepping down the response format while the server
    /// rejects it.
    async fn ask_once(
        &self,
        model: &str,
        request: &ChatRequest,
        conversation: &[Message],
        usage: &mut Usage,
    ) -> Result<RawAnswer, LlmError> {
        loop {
            let mode = ResponseFormatMode::from_u8(self.format_mode.load(Ordering::Relaxed))
                .for_request(request);
            let body = chat_body(model, request, conversation, mode);
            let sent_format = mode != ResponseFormatMode::Unconstrained;
            match self.post_with_retries(&body, sent_format).await {
                Ok(response) => {
                    // Billed whether or not it holds an answer.
                    add_completion_usage(usage, &response, self.config.prices);
                    let answer = self.read_answer(&response);
                    usage.rejected += u32::from(answer.is_err());
                    return answer;
                }
                Err(PostFailure::FormatUnsupported(excerpt)) => {
                    let weaker = mode
                        .weaker()
                        .expect("a format was sent, so a weaker one exists");
                    info!(
                        from = ?mode, to = ?weaker, server_said = %for_terminal(&excerpt),
                        "endpoint rejects the response format; stepping down"
                    );
                    // Monotone, so calls racing to step down agree; a request without a schema
                    // that was sent json_object steps past json_schema too.
                    self.format_mode.fetch_max(weaker as u8, Ordering::Relaxed);
                }
                Err(PostFailure::Final(error)) => return Err(error),
            }
        }
    }

    fn read_answer(&self, response: &Value) -> Result<RawAnswer, LlmError> {
        let choice = response["choices"]
            .get(0)
            .ok_or_else(|| LlmError::MalformedResponse {
                endpoint: self.chat_url.clone(),
                detail: format!("no choices[0] in {}", excerpt(&response.to_string())),
            })?;
        let message = &choice["message"];
        // A refusal is an answer too: it goes back to the model like any unusable answer.
        let text = message["content"]
            .as_str()
            .or_else(|| message["refusal"].as_str())
            .unwrap_or_default()
            .to_string();
        Ok(RawAnswer {
            text,
            stopped_at_token_limit: choice["finish_reason"] == "length",
        })
    }

    /// POSTs `body`, retrying 429, 408, 5xx, timeouts and connection errors with exponential
    /// backoff and jitter (or the server's `Retry-After`), at most `max_retries` times.
    async fn post_with_retries(
        &self,
        body: &Value,
        sent_format: bool,
    ) -> Result<Value, PostFailure> {
        let attempts = self.config.max_retries + 1;
        let estimated_tokens = estimate_tokens(body);
        let mut last_failure = String::new();
        for attempt in 0..attempts {
            let permit = self.gate.admit(estimated_tokens).await;
            let mut http_request = self.client.post(&self.chat_url).json(body);
            if let Some(key) = &self.api_key {
                http_request = http_request.bearer_auth(&key.secret);
            }
            let retry_delay = match http_request.send().await {
                Err(error) => match refused_redirect(&error) {
                    Some(refused) => {
                        return Err(PostFailure::Final(LlmError::Redirect {
                            endpoint: self.chat_url.clone(),
                            refused: Box::new(refused),
                        }));
                    }
                    None => {
                        last_failure = self.describe_transport_error(&error);
                        self.backoff(attempt)
                    }
                },
                Ok(response) => {
                    let status = response.status();
                    let retry_after = retry_after(&response);
                    let text = match read_body_text(response, self.config.max_response_bytes).await
                    {
                        Ok(text) => text,
                        Err(BodyError::TooLarge { limit }) => {
                            return Err(PostFailure::Final(LlmError::ResponseTooLarge {
                                endpoint: self.chat_url.clone(),
                                limit,
                            }));
                        }
                        Err(BodyError::Transport(error)) => {
                            last_failure = self.describe_transport_error(&error);
                            drop(permit);
                            self.sleep_before_retry(
                                attempt,
                                attempts,
                                self.backoff(attempt),
                                &last_failure,
                            )
                            .await;
                            continue;
                        }
                    };
                    drop(permit);
                    let quoted = excerpt(&text);
                    let code = status.as_u16();
                    if status.is_success() {
                        match serde_json::from_str(&text) {
                            Ok(body) => return Ok(body),
                            // A proxy or an overloaded server cut the body short: like a 5xx,
                            // worth another attempt, and an error once attempts run out.
                            Err(error) => {
                                last_failure = format!(
                                    "HTTP {code} with a body that is not JSON ({error}): {quoted}"
                                );
                                self.backoff(attempt)
                            }
                        }
                    } else if sent_format
                        && matches!(code, 400 | 422 | 500)
                        && mentions_response_format(&text)
                    {
                        // llama-cpp-python's server answers a `json_schema` format it does not
                        // know with a 500 naming `response_format`: not a passing failure.
                        return Err(PostFailure::FormatUnsupported(quoted));
                    } else if code == 429 || code == 408 || status.is_server_error() {
                        last_failure = format!("HTTP {code}: {quoted}");
                        retry_after.unwrap_or_else(|| self.backoff(attempt))
                    } else if code == 401 || code == 403 {
                        return Err(PostFailure::Final(LlmError::Unauthorized {
                            endpoint: self.chat_url.clone(),
                            status: code,
                            excerpt: quoted,
                        }));
                    } else {
                        return Err(PostFailure::Final(LlmError::Rejected {
                            endpoint: self.chat_url.clone(),
                            status: code,
                            excerpt: quoted,
                        }));
                    }
                }
            };
            self.sleep_before_retry(attempt, attempts, retry_delay, &last_failure)
                .await;
        }
        Err(PostFailure::Final(LlmError::RetriesExhausted {
            endpoint: self.chat_url.clone(),
            attempts,
            last: last_failure,
        }))
    }

    async fn sleep_before_retry(
        &self,
        attempt: u32,
        attempts: u32,
        delay: Duration,
        failure: &str,
    ) {
        if attempt + 1 < attempts {
            warn!(
                attempt = attempt + 1, of = attempts, ?delay, failure = %for_terminal(failure),
                "LLM request failed; retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }

    fn backoff(&self, attempt: u32) -> Duration {
        backoff_delay(self.config.backoff_base, attempt)
    }

    fn describe_transport_error(&self, error: &reqwest::Error) -> String {
        describe_transport_error(error, self.config.timeout)
    }
}

#[async_trait::async_trait]
impl ChatBackend for HttpBackend {
    fn identity(&self) -> EndpointIdentity {
        self.endpoint_identity()
    }

    async fn answer(
        &self,
        request: &ChatRequest,
        conversation: &[Message],
        usage: &mut Usage,
    ) -> Result<RawAnswer, LlmError> {
        let model = self.endpoint_identity().model_for(request).to_string();
        if let Some(batches) = &self.batches {
            return self
                .answer_in_batch(batches, &model, request, conversation, usage)
                .await;
        }
        self.ask_once(&model, request, conversation, usage).await
    }
}

enum PostFailure {
    /// HTTP 400, 422 or 500 naming `response_format` / `json_schema`: ask again with a weaker
    /// format.
    FormatUnsupported(String),
    Final(LlmError),
}

/// What a request will count against a tokens-per-minute budget, before the server says:
/// about four characters a token for the prompt, plus the most the answer may take.
fn estimate_tokens(body: &Value) -> u64 {
    let prompt_characters = body["messages"].to_string().len() as u64;
    let answer_tokens = body["max_tokens"].as_u64().unwrap_or(1024);
    prompt_characters / 4 + answer_tokens
}

fn mentions_response_format(body: &str) -> bool {
    let lower = body.to_ascii_lowercase();
    lower.contains("response_format") || lower.contains("json_schema")
}

/// The HTTP client of one endpoint (chat or images): viss's timeouts, and redirects followed
/// only to the endpoint's own origin (scheme, host and port) and only where the method and
/// body survive (307, 308), at most [`MAX_REDIRECTS`] of them. Any other redirect fails the
/// request ([`refused_redirect`] says why): following one would send the prompt, which holds
/// the licensed script, to a host nobody configured, or turn the POST into a GET whose page
/// would be taken for the model's answer.
pub fn endpoint_client(timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(30)))
        .redirect(reqwest::redirect::Policy::custom(|attempt| {
            let Some(first) = attempt.previous().first() else {
                return attempt.follow();
            };
            let refused = RefusedRedirect {
                status: attempt.status().as_u16(),
                from: first.origin().ascii_serialization(),
                to: attempt.url().origin().ascii_serialization(),
            };
            if refused.from != refused.to
                || !matches!(refused.status, 307 | 308)
                || attempt.previous().len() > MAX_REDIRECTS
            {
                attempt.error(refused)
            } else {
                attempt.follow()
            }
        }))
        .build()
}

/// A redirect [`endpoint_client`] would not follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedRedirect {
    pub status: u16,
    /// Origins (`scheme://host:port`): the endpoint's, and where the server pointed.
    pub from: String,
    pub to: String,
}

impl fmt::Display for RefusedRedirect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.from != self.to {
            write!(
                f,
                "HTTP {} redirects from {} to another origin, {}; viss sends requests only to \
                 the configured origin: point base_url at the server that answers",
                self.status, self.from, self.to
            )
        } else if matches!(self.status, 307 | 308) {
            write!(
                f,
                "more than {MAX_REDIRECTS} redirects within {}; point base_url at the server \
                 that answers",
                self.from
            )
        } else {
            write!(
                f,
                "HTTP {} redirects within {} in a way that would resend the request as a GET \
                 without its body; point base_url at the URL that answers",
                self.status, self.from
            )
        }
    }
}

impl std::error::Error for RefusedRedirect {}

/// The redirect [`endpoint_client`] refused, when that is why `error` happened.
pub fn refused_redirect(error: &reqwest::Error) -> Option<RefusedRedirect> {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<RefusedRedirect>() {
            return Some(refused.clone());
        }
        source = cause.source();
    }
    None
}

/// The response's `Retry-After` in seconds, capped at [`MAX_RETRY_AFTER`].
pub fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(|seconds| Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

/// Why a response body could not be read.
#[derive(Debug)]
pub enum BodyError {
    /// Longer than the endpoint's `max_response_bytes`.
    TooLarge {
        limit: u64,
    },
    Transport(reqwest::Error),
}

/// The response body, read chunk by chunk and refused as soon as it passes `limit` bytes, so a
/// huge or endless body never costs more memory than the limit.
pub async fn read_body(mut response: reqwest::Response, limit: u64) -> Result<Vec<u8>, BodyError> {
    if response
        .content_length()
        .is_some_and(|length| length > limit)
    {
        return Err(BodyError::TooLarge { limit });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Transport)? {
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(BodyError::TooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// [`read_body`] as text, invalid UTF-8 replaced (as `reqwest::Response::text` does).
pub async fn read_body_text(response: reqwest::Response, limit: u64) -> Result<String, BodyError> {
    let bytes = read_body(response, limit).await?;
    Ok(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(error) => String::from_utf8_lossy(error.as_bytes()).into_owned(),
    })
}

/// `base * 2^attempt`, capped, times a random factor in [0.5, 1) so that many clients failing
/// together do not retry together. Shared by every HTTP client of viss.
pub fn backoff_delay(base: Duration, attempt: u32) -> Duration {
    base.saturating_mul(1u32 << attempt.min(16))
        .min(MAX_BACKOFF)
        .mul_f64(0.5 + fastrand::f64() * 0.5)
}

/// A transport failure in words for an error message: what kind, and the whole cause chain.
pub fn describe_transport_error(error: &reqwest::Error, timeout: Duration) -> String {
    // reqwest's messages name the URL, never headers, so the key cannot appear; scrub anyway.
    let kind = if error.is_timeout() {
        format!("no response within {timeout:?}")
    } else if error.is_connect() {
        "could not connect".to_string()
    } else {
        "transport error".to_string()
    };
    let mut detail = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        detail.push_str(": ");
        detail.push_str(&cause.to_string());
        source = cause.source();
    }
    format!("{kind} ({})", excerpt(&detail))
}

/// A server's text fit for an error message: every key viss knows redacted (see
/// [`viss_engine::redact`]), one line, cut short to [`EXCERPT_CHARS`] characters. Control
/// characters are left to whatever prints the message (it escapes them).
pub fn excerpt(text: &str) -> String {
    let scrubbed = viss_engine::redact::redact(text);
    let one_line: String = scrubbed.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_scrubs_the_secret_and_cuts_long_bodies() {
        viss_engine::redact::register_secret("sk-SECRET");
        let quoted = excerpt("bad key sk-SECRET given\n\n");
        assert_eq!(quoted, "bad key <redacted> given");
        assert_eq!(
            excerpt(&"x".repeat(1000)).chars().count(),
            EXCERPT_CHARS + 1
        );
    }

    #[test]
    fn missing_key_names_the_environment_variable() {
        let mut config = HttpConfig::new("http://127.0.0.1:9/v1", "m");
        config.api_key_env = Some("VISS_TEST_UNSET_KEY".into());
        let error = HttpBackend::with_key_lookup(config, |_| None).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("set the environment variable VISS_TEST_UNSET_KEY"),
            "{error}"
        );
    }

    #[test]
    fn base_url_without_scheme_is_a_config_error() {
        let error =
            HttpBackend::with_key_lookup(HttpConfig::new("localhost:8000/v1", "m"), |_| None)
                .unwrap_err();
        assert!(matches!(error, LlmError::Config(_)), "{error}");
    }

    #[test]
    fn backoff_doubles_with_jitter_and_is_capped() {
        let mut config = HttpConfig::new("http://127.0.0.1:9/v1", "m");
        config.backoff_base = Duration::from_millis(100);
        let backend = HttpBackend::with_key_lookup(config, |_| None).unwrap();
        for _ in 0..20 {
            let third = backend.backoff(2);
            assert!(
                third >= Duration::from_millis(200) && third < Duration::from_millis(400),
                "{third:?}"
            );
            assert!(backend.backoff(40) <= MAX_BACKOFF);
        }
    }
}

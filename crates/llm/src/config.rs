//! The `[llm]` section of `viss.toml`: named OpenAI-compatible endpoints, which model plays
//! each role of the pipeline, and the embedded model's settings.
//!
//! A role names its model as `local` (the embedded GGUF model, the default, offline) or
//! `ENDPOINT:MODEL`, split at the first colon, so model ids keep their own colons and slashes
//! (`ollama:qwen2.5:7b`, `openrouter:qwen/qwen3-8b`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::backend::Price;
use super::http::HttpConfig;
use viss_engine::range::{BadSetting, Validate, check, check_table};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    /// OpenAI-compatible servers by name (`[llm.endpoints.openai]`).
    pub endpoints: BTreeMap<String, EndpointConfig>,
    pub roles: RolesConfig,
    pub local: LocalModelSettings,
    /// US dollars one build may spend on priced endpoints; unset: no cap. A request that could
    /// pass it is not sent, and the build exits non-zero saying what it spent and what is left
    /// (see `viss_llm::budget`). Needs a price for every endpoint model the build asks.
    pub max_cost: Option<f64>,
    /// A cap in US dollars per stage, by stage name (`[llm.max_cost_per_stage] simulate = 2`),
    /// beside `max_cost`.
    pub max_cost_per_stage: BTreeMap<String, f64>,
}

/// Which model plays each part. The paper used a small fast model to annotate, a large one to
/// write, several agents, a describer for verbalized vision, and three judges. The default
/// panel is one judge: the embedded model judging at temperature 0 three times would give the
/// same labels three times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolesConfig {
    pub annotator: ModelRef,
    pub writer: ModelRef,
    pub describer: ModelRef,
    pub agents: Vec<ModelRef>,
    pub judges: Vec<ModelRef>,
    /// Image generation and editing (`group_image`, `portraits`); unset: the local stylisation.
    pub image: Option<ModelRef>,
    pub image_edit: Option<ModelRef>,
}

impl Default for RolesConfig {
    fn default() -> Self {
        Self {
            annotator: ModelRef::Local,
            writer: ModelRef::Local,
            describer: ModelRef::Local,
            agents: vec![ModelRef::Local],
            judges: vec![ModelRef::Local],
            image: None,
            image_edit: None,
        }
    }
}

/// One OpenAI-compatible server. The key is read from the environment variable `api_key_env`
/// names, never from this file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EndpointConfig {
    /// E.g. `https://api.openai.com/v1`, `http://127.0.0.1:11434/v1` (Ollama).
    pub base_url: String,
    pub api_key_env: Option<String>,
    /// One request's limit, above 0 and at most 86400 (a day).
    pub timeout_seconds: f64,
    /// Requests at once, 1 to 1024.
    pub max_in_flight: usize,
    /// 0 to 1,000,000; 0: unlimited.
    pub requests_per_minute: u32,
    /// Estimated from the request size and max_tokens; 0 to 1,000,000,000; 0: unlimited.
    pub tokens_per_minute: u32,
    /// Retries after the first attempt, 0 to 100.
    pub max_retries: u32,
    /// The first retry waits this long, each later one twice as long (with jitter, at most 60 s);
    /// 0 to 60.
    pub retry_backoff_seconds: f64,
    /// A response body over this many MiB fails the request; 1 to 4096.
    pub max_response_mib: u32,
    /// US dollars per million tokens, by model id; models without a price cost "unknown". Each
    /// price is a finite number >= 0.
    pub prices: BTreeMap<String, Price>,
    /// Send the build's requests through the endpoint's batch API (OpenAI's files and batches,
    /// which vLLM and several providers also serve) instead of one call each: cheaper, slower,
    /// resumed by batch id after a kill (see `viss_llm::batch`).
    pub batch: bool,
    /// How long the first request waits for others to join its batch, 0 to 3600 seconds.
    pub batch_window_seconds: f64,
    /// Lines per batch at most, 1 to 50,000 (OpenAI's limit).
    pub batch_max_requests: u32,
    /// The first wait between two looks at a pending batch, doubled up to 10 minutes; above 0,
    /// at most 3600 seconds.
    pub batch_poll_seconds: f64,
    /// The batch price as a fraction of `prices`, 0 to 1 (OpenAI: 0.5).
    pub batch_discount: f64,
    /// How often a line a batch did not answer (expired, failed) is submitted again, 0 to 100.
    pub batch_resubmits: u32,
    /// Re-ask rounds of one question sent in batches, 0 to 5; the rest are asked online at the
    /// full price (5, the default: every round batched).
    pub batch_reask_rounds: u32,
}

/// The ranges of an endpoint's numbers (see the fields of [`EndpointConfig`]).
pub mod ranges {
    use viss_engine::range::Range;

    pub const TIMEOUT_SECONDS: Range = Range::above(0.0, 86_400.0);
    pub const MAX_IN_FLIGHT: Range = Range::new(1.0, 1024.0);
    pub const REQUESTS_PER_MINUTE: Range = Range::new(0.0, 1e6).note("0 = unlimited");
    pub const TOKENS_PER_MINUTE: Range = Range::new(0.0, 1e9).note("0 = unlimited");
    pub const MAX_RETRIES: Range = Range::new(0.0, 100.0);
    pub const RETRY_BACKOFF_SECONDS: Range = Range::new(0.0, 60.0);
    pub const MAX_RESPONSE_MIB: Range = Range::new(1.0, 4096.0);
    pub const PRICE: Range = Range::at_least(0.0).note("US dollars per million tokens");
    pub const BATCH_WINDOW_SECONDS: Range = Range::new(0.0, 3600.0);
    pub const BATCH_MAX_REQUESTS: Range = Range::new(1.0, 50_000.0);
    pub const BATCH_POLL_SECONDS: Range = Range::above(0.0, 3600.0);
    pub const BATCH_DISCOUNT: Range = Range::new(0.0, 1.0);
    pub const BATCH_RESUBMITS: Range = Range::new(0.0, 100.0);
    pub const BATCH_REASK_ROUNDS: Range = Range::new(0.0, 5.0);
    pub const MAX_COST: Range = Range::at_least(0.0).note("US dollars");
    pub const CONTEXT_TOKENS: Range = Range::new(64.0, 131_072.0);
    pub const LOCAL_MAX_TOKENS: Range = Range::new(1.0, 131_072.0);
    pub const DRY_MULTIPLIER: Range = Range::new(0.0, 5.0);
}

impl Validate for EndpointConfig {
    fn validate(&self) -> Result<(), BadSetting> {
        check(
            "timeout_seconds",
            self.timeout_seconds,
            ranges::TIMEOUT_SECONDS,
        )?;
        check("max_in_flight", self.max_in_flight, ranges::MAX_IN_FLIGHT)?;
        check(
            "requests_per_minute",
            self.requests_per_minute,
            ranges::REQUESTS_PER_MINUTE,
        )?;
        check(
            "tokens_per_minute",
            self.tokens_per_minute,
            ranges::TOKENS_PER_MINUTE,
        )?;
        check("max_retries", self.max_retries, ranges::MAX_RETRIES)?;
        check(
            "batch_window_seconds",
            self.batch_window_seconds,
            ranges::BATCH_WINDOW_SECONDS,
        )?;
        check(
            "batch_max_requests",
            self.batch_max_requests,
            ranges::BATCH_MAX_REQUESTS,
        )?;
        check(
            "batch_poll_seconds",
            self.batch_poll_seconds,
            ranges::BATCH_POLL_SECONDS,
        )?;
        check(
            "batch_discount",
            self.batch_discount,
            ranges::BATCH_DISCOUNT,
        )?;
        check(
            "batch_resubmits",
            self.batch_resubmits,
            ranges::BATCH_RESUBMITS,
        )?;
        check(
            "batch_reask_rounds",
            self.batch_reask_rounds,
            ranges::BATCH_REASK_ROUNDS,
        )?;
        check(
            "retry_backoff_seconds",
            self.retry_backoff_seconds,
            ranges::RETRY_BACKOFF_SECONDS,
        )?;
        check(
            "max_response_mib",
            self.max_response_mib,
            ranges::MAX_RESPONSE_MIB,
        )?;
        for (model, price) in &self.prices {
            let check_price = |key, value| check(key, value, ranges::PRICE);
            check_price("input_per_mtok", price.input_per_mtok)
                .and_then(|()| check_price("output_per_mtok", price.output_per_mtok))
                .map_err(|bad| bad.within(model).within("prices"))?;
        }
        Ok(())
    }
}

impl Validate for LocalModelSettings {
    fn validate(&self) -> Result<(), BadSetting> {
        check(
            "context_tokens",
            self.context_tokens,
            ranges::CONTEXT_TOKENS,
        )?;
        check("threads", self.threads, viss_engine::range::THREADS)?;
        check("max_tokens", self.max_tokens, ranges::LOCAL_MAX_TOKENS)?;
        check(
            "dry_multiplier",
            self.dry_multiplier,
            ranges::DRY_MULTIPLIER,
        )
    }
}

impl Validate for LlmConfig {
    fn validate(&self) -> Result<(), BadSetting> {
        for (name, endpoint) in &self.endpoints {
            endpoint
                .validate()
                .map_err(|bad| bad.within(name).within("endpoints"))?;
        }
        if let Some(max_cost) = self.max_cost {
            check("max_cost", max_cost, ranges::MAX_COST)?;
        }
        for (stage, max_cost) in &self.max_cost_per_stage {
            check(stage, *max_cost, ranges::MAX_COST)
                .map_err(|bad| bad.within("max_cost_per_stage"))?;
        }
        check_table("local", &self.local)
    }
}

impl Default for EndpointConfig {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            api_key_env: None,
            timeout_seconds: 120.0,
            max_in_flight: 8,
            requests_per_minute: 0,
            tokens_per_minute: 0,
            max_retries: 5,
            retry_backoff_seconds: 1.0,
            max_response_mib: (super::http::DEFAULT_MAX_RESPONSE_BYTES >> 20) as u32,
            prices: BTreeMap::new(),
            batch: false,
            batch_window_seconds: 2.0,
            batch_max_requests: 50_000,
            batch_poll_seconds: 30.0,
            batch_discount: 0.5,
            batch_resubmits: 3,
            batch_reask_rounds: crate::backend::MAX_REASKS,
        }
    }
}

impl EndpointConfig {
    /// What `model` costs here: its price, at the batch discount when the endpoint batches.
    pub fn price_of(&self, model: &str) -> Option<Price> {
        let scale = if self.batch { self.batch_discount } else { 1.0 };
        self.prices.get(model).map(|price| price.scaled(scale))
    }

    pub fn http_config(&self, model: &str) -> HttpConfig {
        let mut config = HttpConfig::new(self.base_url.clone(), model);
        config.api_key_env = self.api_key_env.clone();
        config.timeout = Duration::from_secs_f64(self.timeout_seconds.max(0.001));
        config.max_in_flight = self.max_in_flight.max(1);
        config.requests_per_minute = Some(self.requests_per_minute).filter(|&n| n > 0);
        config.tokens_per_minute = Some(self.tokens_per_minute).filter(|&n| n > 0);
        config.max_retries = self.max_retries;
        config.backoff_base = Duration::from_secs_f64(self.retry_backoff_seconds.max(0.0));
        config.prices = self.prices.get(model).copied();
        config.max_response_bytes = u64::from(self.max_response_mib) << 20;
        config.batch = self.batch.then(|| crate::batch::BatchSettings {
            window: Duration::from_secs_f64(self.batch_window_seconds.max(0.0)),
            max_requests: self.batch_max_requests.max(1) as usize,
            poll: Duration::from_secs_f64(self.batch_poll_seconds.max(0.001)),
            discount: self.batch_discount,
            resubmits: self.batch_resubmits,
            reask_rounds: self.batch_reask_rounds,
        });
        config
    }
}

/// The embedded model. Unset `model`: the default built-in model, fetched by
/// `viss models fetch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LocalModelSettings {
    /// A built-in model's name (`viss models list`; fetched on first use) or a GGUF file,
    /// relative to the project root.
    pub model: Option<PathBuf>,
    /// Prompt, re-asks and answer together, 64 to 131072 (the KV cache is sized for it).
    pub context_tokens: u32,
    /// 0 to 256; 0: one per core.
    pub threads: usize,
    /// Answer tokens when a step does not say, 1 to 131072.
    pub max_tokens: u32,
    /// DRY penalty on continuing a run of tokens the answer already wrote, 0 (off) to 5: a small
    /// model otherwise writes one sentence into every field. Part of the model's identity.
    pub dry_multiplier: f32,
}

impl Default for LocalModelSettings {
    fn default() -> Self {
        Self {
            model: None,
            // A step's prompt is 2,000-3,000 tokens on a demo-sized scene and every re-ask adds
            // the rejected answer and the problem to it: at 4096 the demo's bdi_risk and tasks
            // ran out of context on their second or third re-ask.
            context_tokens: 8192,
            threads: 0,
            max_tokens: 1024,
            // The default model is measured with it (docs/performance.md); off, it repeats a
            // clause inside a field and across its four tasks.
            dry_multiplier: 0.8,
        }
    }
}

/// A model as a role names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ModelRef {
    Local,
    Endpoint {
        endpoint: String,
        model: String,
    },
    /// A person at the terminal (`viss play`): a seat of a simulation run, never a role's model.
    Human,
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelRef::Local => f.write_str("local"),
            ModelRef::Endpoint { endpoint, model } => write!(f, "{endpoint}:{model}"),
            ModelRef::Human => f.write_str("human"),
        }
    }
}

impl std::str::FromStr for ModelRef {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text == "local" {
            return Ok(ModelRef::Local);
        }
        if text == "human" {
            return Ok(ModelRef::Human);
        }
        match text.split_once(':') {
            Some((endpoint, model)) if !endpoint.is_empty() && !model.is_empty() => {
                Ok(ModelRef::Endpoint {
                    endpoint: endpoint.to_string(),
                    model: model.to_string(),
                })
            }
            _ => Err(format!(
                "model {text:?} is neither \"local\" nor \"ENDPOINT:MODEL\" (e.g. \
                 \"openai:gpt-4o-mini\", with [llm.endpoints.openai] defined)"
            )),
        }
    }
}

impl Serialize for ModelRef {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ModelRef {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl LlmConfig {
    /// Every model a role of `[llm.roles]` names, with the role's name.
    fn role_models(&self) -> impl Iterator<Item = (&'static str, &ModelRef)> {
        let roles = &self.roles;
        [
            ("annotator", Some(&roles.annotator)),
            ("writer", Some(&roles.writer)),
            ("describer", Some(&roles.describer)),
            ("image", roles.image.as_ref()),
            ("image_edit", roles.image_edit.as_ref()),
        ]
        .into_iter()
        .filter_map(|(role, model)| Some((role, model?)))
        .chain(roles.agents.iter().map(|m| ("agents", m)))
        .chain(roles.judges.iter().map(|m| ("judges", m)))
    }

    /// The largest `max_in_flight` of the endpoints the roles name; 0 without any.
    pub fn most_in_flight(&self) -> usize {
        self.role_models()
            .filter_map(|(_, model)| match model {
                ModelRef::Endpoint { endpoint, .. } => self.endpoints.get(endpoint),
                ModelRef::Local | ModelRef::Human => None,
            })
            // A batched endpoint takes as many requests at once as a batch holds.
            .map(|endpoint| match endpoint.batch {
                true => endpoint.batch_max_requests as usize,
                false => endpoint.max_in_flight,
            })
            .max()
            .unwrap_or(0)
    }

    /// Every role must name a defined endpoint; checked when the project is opened so a typo
    /// fails before anything runs.
    pub fn check(&self) -> Result<(), String> {
        for (role, model) in self.role_models() {
            if *model == ModelRef::Human {
                return Err(format!(
                    "[llm.roles] {role} is \"human\": a person takes a seat in a simulation run \
                     with `viss play`, not a role; name \"local\" or \"ENDPOINT:MODEL\""
                ));
            }
            if let ModelRef::Endpoint { endpoint, .. } = model
                && !self.endpoints.contains_key(endpoint)
            {
                let known: Vec<&str> = self.endpoints.keys().map(String::as_str).collect();
                return Err(format!(
                    "[llm.roles] {role} uses endpoint {endpoint:?}, which is not defined: add \
                     [llm.endpoints.{endpoint}] with a base_url (defined: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ));
            }
        }
        for (name, endpoint) in &self.endpoints {
            if !(endpoint.base_url.starts_with("http://")
                || endpoint.base_url.starts_with("https://"))
            {
                return Err(format!(
                    "[llm.endpoints.{name}] base_url {:?} must start with http:// or https:// \
                     (e.g. https://api.openai.com/v1)",
                    endpoint.base_url
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_refs_split_at_the_first_colon() {
        assert_eq!("local".parse::<ModelRef>().unwrap(), ModelRef::Local);
        assert_eq!(
            "ollama:qwen2.5:7b".parse::<ModelRef>().unwrap(),
            ModelRef::Endpoint {
                endpoint: "ollama".into(),
                model: "qwen2.5:7b".into()
            }
        );
        assert!(
            "gpt-4o"
                .parse::<ModelRef>()
                .unwrap_err()
                .contains("ENDPOINT:MODEL")
        );
    }

    #[test]
    fn a_role_naming_an_undefined_endpoint_is_an_error_saying_what_to_add() {
        let config: LlmConfig =
            toml::from_str("[roles]\nannotator = \"openai:gpt-4o-mini\"\n").unwrap();
        let problem = config.check().unwrap_err();
        assert!(problem.contains("[llm.endpoints.openai]"), "{problem}");
    }

    #[test]
    fn endpoint_settings_become_the_http_config_with_the_models_price() {
        let config: LlmConfig = toml::from_str(
            "[endpoints.openai]\nbase_url = \"https://api.openai.com/v1\"\napi_key_env = \
             \"OPENAI_API_KEY\"\n\
             requests_per_minute = 500\n[endpoints.openai.prices.\"gpt-4o-mini\"]\ninput_per_mtok \
             = 0.15\noutput_per_mtok = 0.6\n\
             [roles]\nannotator = \"openai:gpt-4o-mini\"\n",
        )
        .unwrap();
        config.check().unwrap();
        let http = config.endpoints["openai"].http_config("gpt-4o-mini");
        assert_eq!(http.requests_per_minute, Some(500));
        assert_eq!(http.prices.unwrap().output_per_mtok, 0.6);
        assert!(
            config.endpoints["openai"]
                .http_config("gpt-4o")
                .prices
                .is_none()
        );
    }
}

//! What viss stores or prints never holds an API key: the engine's registry of secrets
//! ([`viss_engine::redact`], one per process), and the keys the project's LLM endpoints name.

pub use viss_engine::redact::*;

use crate::llm::LlmConfig;

/// Registers the value of every environment variable an endpoint of `llm` names in
/// `api_key_env`, where it is set.
pub fn register_configured_keys(llm: &LlmConfig) {
    register_keys_from(llm, |name| std::env::var(name).ok());
}

/// The environment's credentials for the remote cache (see `viss_remote`), whose values
/// nothing viss stores or prints may show.
pub const REMOTE_SECRETS: [&str; 2] = ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"];

/// Registers the remote cache's credentials the environment holds.
pub fn register_remote_credentials() {
    for name in REMOTE_SECRETS {
        if let Ok(value) = std::env::var(name) {
            register_secret(&value);
        }
    }
}

/// [`register_configured_keys`] with the variables looked up by `lookup`.
pub fn register_keys_from(llm: &LlmConfig, lookup: impl Fn(&str) -> Option<String>) {
    for endpoint in llm.endpoints.values() {
        if let Some(value) = endpoint.api_key_env.as_deref().and_then(&lookup) {
            register_secret(&value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_keys_are_read_from_the_variables_the_endpoints_name() {
        let config: LlmConfig = toml::from_str(
            "[endpoints.a]\nbase_url = \"http://127.0.0.1:9/v1\"\n\
             api_key_env = \"REDACT_TEST_A\"\n\
             [endpoints.b]\nbase_url = \"http://127.0.0.1:9/v1\"\n\
             api_key_env = \"REDACT_TEST_B\"\n",
        )
        .unwrap();
        register_keys_from(&config, |name| {
            (name == "REDACT_TEST_A").then(|| "redact-test-configured-a".to_string())
        });
        assert_eq!(redact("x redact-test-configured-a y"), "x <redacted> y");
    }
}

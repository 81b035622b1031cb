//! The embedded model as the pipeline uses it: which GGUF file (the configured one, or the
//! default fetched into the model cache), what names it in cache keys, and a [`ChatBackend`]
//! over [`LocalBackend`] that runs generation on the blocking pool.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::backend::{ChatBackend, RawAnswer, Usage};
use super::config::LocalModelSettings;
use super::error::LlmError;
use super::local::{LOCAL_BASE_URL, LocalBackend, LocalConfig};
use super::request::{ChatRequest, EndpointIdentity, Message};
use crate::models::ModelCache;

/// Hex digits of the file's blake3 in its identity (as [`super::local::local_identity`]).
const IDENTITY_HASH_HEX_DIGITS: usize = 16;

/// The GGUF file: the configured one (relative to the project root), or the default,
/// fetched and verified if missing.
pub fn resolve_path(settings: &LocalModelSettings, project_root: &Path) -> Result<PathBuf, LlmError> {
    match &settings.model {
        Some(path) => Ok(project_root.join(path)),
        None => ModelCache::from_env()
            .and_then(|cache| cache.ensure_local_llm())
            .map_err(|error| LlmError::Config(format!("the default local model: {error}"))),
    }
}

/// A local model is named by its file name and content hash, so replacing the file is a new
/// model for every cache key.
pub fn identity(path: &Path, content_hash_hex: &str) -> Result<EndpointIdentity, LlmError> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(EndpointIdentity {
        base_url: LOCAL_BASE_URL.to_string(),
        model: format!("{name}@{}", &content_hash_hex[..content_hash_hex.len().min(IDENTITY_HASH_HEX_DIGITS)]),
    })
}

/// Loads the model once for the build.
pub fn load(settings: &LocalModelSettings, project_root: &Path) -> Result<Arc<dyn ChatBackend>, LlmError> {
    let config = LocalConfig {
        model_path: resolve_path(settings, project_root)?,
        context_tokens: settings.context_tokens,
        threads: settings.threads,
        max_tokens: settings.max_tokens,
    };
    Ok(Arc::new(EmbeddedChat(Arc::new(LocalBackend::load(&config)?))))
}

struct EmbeddedChat(Arc<LocalBackend>);

#[async_trait::async_trait]
impl ChatBackend for EmbeddedChat {
    fn identity(&self) -> EndpointIdentity {
        self.0.identity()
    }

    async fn answer(
        &self,
        request: &ChatRequest,
        conversation: &[Message],
        usage: &mut Usage,
    ) -> Result<RawAnswer, LlmError> {
        let backend = self.0.clone();
        let conversation = conversation.to_vec();
        let schema = request.response_schema.as_ref().map(|(_, schema)| schema.clone());
        let (temperature, seed, max_tokens) = (request.temperature, request.seed, request.max_tokens);
        let answer = tokio::task::spawn_blocking(move || {
            backend.generate(&conversation, schema.as_ref(), temperature, seed, max_tokens)
        })
        .await
        .map_err(|error| LlmError::Config(format!("local generation panicked: {error}")))??;
        usage.add_call(answer.prompt_tokens as u64, answer.completion_tokens as u64, None);
        Ok(RawAnswer {
            text: answer.text,
            stopped_at_token_limit: answer.stopped_at_token_limit,
        })
    }
}

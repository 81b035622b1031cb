//! Where the embedded model comes from and what identifies it. Loading it is not wired yet:
//! the llama.cpp backend is being added, and until then `local` answers with a clear error.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::backend::ChatBackend;
use super::config::LocalModelSettings;
use super::error::LlmError;
use super::request::EndpointIdentity;

pub const LOCAL_BASE_URL: &str = "local:llama.cpp";

/// The GGUF file: the configured one (relative to the project root) or the default.
pub fn resolve_path(settings: &LocalModelSettings, project_root: &Path) -> Result<PathBuf, LlmError> {
    match &settings.model {
        Some(path) => Ok(project_root.join(path)),
        None => Err(LlmError::Config(
            "not yet: the embedded local model is not available in this build; \
             set [llm.roles] to an OpenAI-compatible endpoint in viss.toml"
                .into(),
        )),
    }
}

/// A local model is named by its file name and content hash, so replacing the file is a new
/// model for every cache key.
pub fn identity(path: &Path, content_hash_hex: &str) -> Result<EndpointIdentity, LlmError> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(EndpointIdentity {
        base_url: LOCAL_BASE_URL.to_string(),
        model: format!("{name}@{}", &content_hash_hex[..content_hash_hex.len().min(16)]),
    })
}

pub fn load(_settings: &LocalModelSettings, _project_root: &Path) -> Result<Arc<dyn ChatBackend>, LlmError> {
    Err(LlmError::Config(
        "not yet: the embedded local model is not available in this build; \
         set [llm.roles] to an OpenAI-compatible endpoint in viss.toml"
            .into(),
    ))
}

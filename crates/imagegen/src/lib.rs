//! Images viss makes rather than takes: a stylised copy of a frame (the group image G) and,
//! later, role portraits. One trait, two kinds of backend:
//!
//! - [`LocalStyliser`]: the offline default, the deterministic cartoon filter of
//!   [`viss_vision::stylise`];
//! - [`OpenAiImageEdit`]: an OpenAI-compatible image edit endpoint (`POST {base_url}/images/edits`,
//!   as gpt-image-1 takes it), configured like the LLM endpoints (`[llm.endpoints.NAME]`, the key
//!   from the environment only) and chosen by `[llm.roles] image_edit = "NAME:MODEL"`.
//!
//! Whatever made an image, its record says so and marks it synthetic
//! ([`viss_vision::synthetic`]).

pub mod openai;

use std::sync::{Arc, Mutex};

use viss_llm::{LlmConfig, ModelRef};
use viss_vision::encode_png;
use viss_vision::stylise::{STYLISE_ID, StyliseError, StyliseParams, stylise};

pub use openai::{ImageEditOptions, OpenAiImageEdit};

/// An image a backend made, as PNG.
#[derive(Debug, Clone, PartialEq)]
pub struct EditedImage {
    pub png: Vec<u8>,
    pub width: u32,
    pub height: u32,
    /// What the endpoint reported spending; `None` for the local filter.
    pub usage: Option<ImageUsage>,
}

/// Tokens an image endpoint billed for one edit (gpt-image-1 reports them), with their price
/// when the endpoint's config has one.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ImageUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum ImageGenError {
    #[error("invalid image endpoint configuration: {0}")]
    Config(String),
    #[error(
        "no API key for the image endpoint: set the environment variable {var} (named by \
         api_key_env in [llm.endpoints.*]), or remove api_key_env if the endpoint needs no key"
    )]
    MissingApiKey { var: String },
    #[error(
        "the image endpoint {endpoint} refused the credentials (HTTP {status}): {excerpt}; check \
         the API key in the environment variable named by api_key_env"
    )]
    Unauthorized {
        endpoint: String,
        status: u16,
        excerpt: String,
    },
    #[error(
        "the image endpoint {endpoint} rejected the edit (HTTP {status}): {excerpt}; retrying will \
         not help: check the model name, size and prompt"
    )]
    Rejected {
        endpoint: String,
        status: u16,
        excerpt: String,
    },
    #[error(
        "the image endpoint {endpoint} failed {attempts} times in a row (retries exhausted); last \
         failure: {last}; check that the server is up, or raise max_retries / timeout_seconds"
    )]
    RetriesExhausted {
        endpoint: String,
        attempts: u32,
        last: String,
    },
    #[error("the image endpoint {endpoint} refused: {refused}")]
    Redirect {
        endpoint: String,
        refused: Box<viss_llm::http::RefusedRedirect>,
    },
    #[error(
        "the image endpoint {endpoint} sent a response body over {limit} bytes (max_response_mib \
         in its [llm.endpoints.*] table); check base_url, or raise max_response_mib if its images \
         really are that large"
    )]
    ResponseTooLarge { endpoint: String, limit: u64 },
    #[error(
        "the image endpoint {endpoint} answered something that is not an image edit response: \
         {detail}; check that base_url points at an OpenAI-compatible API (it usually ends in /v1)"
    )]
    MalformedResponse { endpoint: String, detail: String },
    #[error(
        "the image endpoint {endpoint} returned data that is not a PNG or JPEG image ({reason}); \
         ask for PNG output"
    )]
    NotAnImage { endpoint: String, reason: String },
    #[error("the input image is not a readable PNG or JPEG: {0}")]
    Input(String),
    #[error(transparent)]
    Stylise(#[from] StyliseError),
}

/// Makes a stylised image from a frame.
#[async_trait::async_trait]
pub trait ImageBackend: Send + Sync {
    /// What made the image, as records name it: `local:cartoon/v1`, or `ENDPOINT:MODEL`.
    fn name(&self) -> String;

    /// Everything that decides the output (endpoint URL and model, or the filter and its
    /// parameters): part of the cache key of a stage that uses it.
    fn identity(&self) -> String;

    /// `image` (PNG or JPEG bytes) redrawn as `prompt` asks. The local filter ignores the prompt.
    async fn edit(&self, image: &[u8], prompt: &str) -> Result<EditedImage, ImageGenError>;
}

/// The offline backend: [`stylise`] with fixed parameters. Deterministic: the same frame gives
/// the same PNG bytes.
#[derive(Debug, Clone, Default)]
pub struct LocalStyliser {
    pub params: StyliseParams,
}

impl LocalStyliser {
    /// The filter on decoded pixels, as PNG: the blocking part of [`ImageBackend::edit`].
    pub fn stylise_png(&self, image: &[u8]) -> Result<EditedImage, ImageGenError> {
        let decoded = image::load_from_memory(image)
            .map_err(|error| ImageGenError::Input(error.to_string()))?
            .into_rgb8();
        let styled = stylise(&decoded, &self.params)?;
        Ok(EditedImage {
            png: encode_png(&styled),
            width: styled.width(),
            height: styled.height(),
            usage: None,
        })
    }
}

#[async_trait::async_trait]
impl ImageBackend for LocalStyliser {
    fn name(&self) -> String {
        STYLISE_ID.to_string()
    }

    fn identity(&self) -> String {
        format!(
            "{STYLISE_ID} {}",
            serde_json::to_string(&self.params).expect("params serialize")
        )
    }

    async fn edit(&self, image: &[u8], _prompt: &str) -> Result<EditedImage, ImageGenError> {
        let (styliser, image) = (self.clone(), image.to_vec());
        tokio::task::spawn_blocking(move || styliser.stylise_png(&image))
            .await
            .map_err(|error| {
                ImageGenError::Input(format!("the stylisation task failed: {error}"))
            })?
    }
}

/// What a stage drawing with the `image_edit` role puts in its cache key: the backend's identity
/// under the name `image_edit`, after checking the local filter's settings.
pub fn image_edit_models(
    config: &LlmConfig,
    local: &StyliseParams,
    options: &ImageEditOptions,
) -> Result<std::collections::BTreeMap<String, String>, ImageGenError> {
    local.check()?;
    let identity = backend_identity(config.roles.image_edit.as_ref(), config, local, options)?;
    Ok([("image_edit".to_string(), identity)].into())
}

/// The identity ([`ImageBackend::identity`]) of the backend a role names, without making it (no
/// API key needed): what a stage's cache key holds, computable for `viss status` too.
pub fn backend_identity(
    role: Option<&ModelRef>,
    config: &LlmConfig,
    local: &StyliseParams,
    options: &ImageEditOptions,
) -> Result<String, ImageGenError> {
    match role {
        None | Some(ModelRef::Local) => Ok(LocalStyliser {
            params: local.clone(),
        }
        .identity()),
        Some(ModelRef::Human) => Err(no_person()),
        Some(ModelRef::Endpoint { endpoint, model }) => {
            let settings = config
                .endpoints
                .get(endpoint)
                .ok_or_else(|| missing_endpoint(endpoint))?;
            Ok(openai::endpoint_identity(
                &settings.http_config(model),
                options,
            ))
        }
    }
}

fn no_person() -> ImageGenError {
    ImageGenError::Config(
        "image_edit is \"human\": name \"local\" or \"ENDPOINT:MODEL\"; a person only takes a \
         seat in a simulation run (`viss play`)"
            .to_string(),
    )
}

fn missing_endpoint(endpoint: &str) -> ImageGenError {
    ImageGenError::Config(format!(
        "no endpoint {endpoint:?}: add [llm.endpoints.{endpoint}] with a base_url to viss.toml"
    ))
}

/// The backend a role names: unset or `local` is the local filter; `ENDPOINT:MODEL` the image
/// edit endpoint defined under `[llm.endpoints.ENDPOINT]` (its key read from the environment).
pub fn backend_for(
    role: Option<&ModelRef>,
    config: &LlmConfig,
    local: &StyliseParams,
    options: &ImageEditOptions,
) -> Result<Box<dyn ImageBackend>, ImageGenError> {
    match role {
        None | Some(ModelRef::Local) => Ok(Box::new(LocalStyliser {
            params: local.clone(),
        })),
        Some(ModelRef::Human) => Err(no_person()),
        Some(ModelRef::Endpoint { endpoint, model }) => {
            let settings = config
                .endpoints
                .get(endpoint)
                .ok_or_else(|| missing_endpoint(endpoint))?;
            Ok(Box::new(OpenAiImageEdit::new(
                endpoint,
                settings.http_config(model),
                options.clone(),
            )?))
        }
    }
}

/// A stage's backend, made by [`backend_for`] on first use by one of its jobs and shared by all
/// of them (an endpoint's limits hold across the build). Not made in a stage's `models`: `viss
/// status` computes keys too, and must not need the API key.
#[derive(Default)]
pub struct LazyBackend(Mutex<Option<Arc<dyn ImageBackend>>>);

impl LazyBackend {
    /// The backend of `config`'s `image_edit` role (the local styliser without one), made once.
    pub fn get(
        &self,
        config: &LlmConfig,
        local: &StyliseParams,
        options: &ImageEditOptions,
    ) -> Result<Arc<dyn ImageBackend>, ImageGenError> {
        let mut slot = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(backend) = slot.as_ref() {
            return Ok(backend.clone());
        }
        let backend: Arc<dyn ImageBackend> = Arc::from(backend_for(
            config.roles.image_edit.as_ref(),
            config,
            local,
            options,
        )?);
        *slot = Some(backend.clone());
        Ok(backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_backend_stylises_deterministically_and_names_itself() {
        let frame = image::RgbImage::from_fn(96, 64, |x, y| {
            image::Rgb([(x * 2) as u8, (y * 3) as u8, 120])
        });
        let backend = LocalStyliser::default();
        let first = backend.edit(&encode_png(&frame), "ignored").await.unwrap();
        let second = backend
            .edit(&encode_png(&frame), "other prompt")
            .await
            .unwrap();
        assert_eq!(first, second);
        assert_eq!((first.width, first.height), (96, 64));
        assert_ne!(
            image::load_from_memory(&first.png).unwrap().into_rgb8(),
            frame
        );
        assert_eq!(backend.name(), "local:cartoon/v1");
        assert!(
            backend.identity().contains("\"levels\":6"),
            "{}",
            backend.identity()
        );
        let error = backend.edit(b"not an image", "").await.unwrap_err();
        assert!(matches!(error, ImageGenError::Input(_)), "{error}");
    }

    #[test]
    fn roles_choose_the_backend() {
        let config: LlmConfig =
            toml::from_str("[endpoints.openai]\nbase_url = \"https://api.openai.com/v1\"\n")
                .unwrap();
        let local = StyliseParams::default();
        let options = ImageEditOptions::default();
        assert_eq!(
            backend_for(None, &config, &local, &options).unwrap().name(),
            "local:cartoon/v1"
        );
        assert_eq!(
            backend_for(Some(&ModelRef::Local), &config, &local, &options)
                .unwrap()
                .name(),
            "local:cartoon/v1"
        );
        let model: ModelRef = "openai:gpt-image-1".parse().unwrap();
        let endpoint = backend_for(Some(&model), &config, &local, &options).unwrap();
        assert_eq!(endpoint.name(), "openai:gpt-image-1");
        assert_eq!(
            endpoint.identity(),
            "https://api.openai.com/v1#gpt-image-1 size=auto"
        );
        assert_eq!(
            backend_identity(Some(&model), &config, &local, &options).unwrap(),
            endpoint.identity()
        );
        assert_eq!(
            backend_identity(None, &config, &local, &options).unwrap(),
            LocalStyliser::default().identity()
        );
        let missing: ModelRef = "other:m".parse().unwrap();
        let error = backend_for(Some(&missing), &config, &local, &options)
            .err()
            .unwrap();
        assert!(
            error.to_string().contains("[llm.endpoints.other]"),
            "{error}"
        );
    }
}

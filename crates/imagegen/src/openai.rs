//! An OpenAI-compatible image edit endpoint: `POST {base_url}/images/edits` with a multipart
//! form (`model`, `prompt`, the `image` file, `n`, and the optional `size`, `quality`,
//! `response_format`), answered with `{"data": [{"b64_json": "..."}], "usage": {...}}` as
//! gpt-image-1 does.
//!
//! Transport failures (connection errors, timeouts, 408, 429, 5xx) are retried with exponential
//! backoff and jitter, honouring `Retry-After`; 401/403 and other 4xx are final. The key is read
//! from the environment variable the endpoint config names and never appears in errors.

use std::time::Duration;

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Semaphore;

use super::{EditedImage, ImageBackend, ImageGenError, ImageUsage};
use viss_llm::HttpConfig;
use viss_llm::http::{
    BodyError, backoff_delay, describe_transport_error, endpoint_client, excerpt, read_body_text,
    refused_redirect, retry_after,
};
use viss_vision::encode_png;

/// Form fields of an edit request beyond the model, prompt and image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ImageEditOptions {
    /// `auto`, or e.g. `1536x1024` (gpt-image-1's sizes).
    pub size: String,
    /// gpt-image-1: `low`, `medium`, `high` or `auto`; not sent when unset.
    #[schemars(example = &"medium")]
    pub quality: Option<String>,
    /// Only for servers that need it (dall-e-2: `b64_json`); gpt-image-1 always answers in
    /// base64 and rejects the field, so it is not sent when unset.
    #[schemars(example = &"b64_json")]
    pub response_format: Option<String>,
}

impl Default for ImageEditOptions {
    fn default() -> Self {
        Self {
            size: "auto".to_string(),
            quality: None,
            response_format: None,
        }
    }
}

/// What decides an endpoint's images, without its key: the URL, the model and the form options.
pub fn endpoint_identity(config: &HttpConfig, options: &ImageEditOptions) -> String {
    let mut identity = format!(
        "{}#{} size={}",
        config.base_url.trim_end_matches('/'),
        config.model,
        options.size
    );
    if let Some(quality) = &options.quality {
        identity.push_str(&format!(" quality={quality}"));
    }
    identity
}

pub struct OpenAiImageEdit {
    /// `ENDPOINT:MODEL`, as the role names it.
    name: String,
    config: HttpConfig,
    options: ImageEditOptions,
    edits_url: String,
    api_key: Option<String>,
    client: reqwest::Client,
    in_flight: Semaphore,
}

impl OpenAiImageEdit {
    /// Reads the API key from the environment variable `config.api_key_env` names.
    pub fn new(
        endpoint: &str,
        config: HttpConfig,
        options: ImageEditOptions,
    ) -> Result<Self, ImageGenError> {
        Self::with_key_lookup(endpoint, config, options, |name| std::env::var(name).ok())
    }

    /// [`Self::new`] with the key looked up by `lookup(variable name)` (tests, secret managers).
    pub fn with_key_lookup(
        endpoint: &str,
        config: HttpConfig,
        options: ImageEditOptions,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ImageGenError> {
        let base_url = config.base_url.trim_end_matches('/');
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(ImageGenError::Config(format!(
                "base_url {:?} must start with http:// or https:// (for example \
                 https://api.openai.com/v1)",
                config.base_url
            )));
        }
        let api_key = match &config.api_key_env {
            None => None,
            Some(variable) => Some(
                lookup(variable)
                    .map(|key| key.trim().to_string())
                    .filter(|key| !key.is_empty())
                    // Whatever this endpoint says back is scrubbed of the key it is sent.
                    .inspect(|key| viss_engine::redact::register_secret(key))
                    .ok_or_else(|| ImageGenError::MissingApiKey {
                        var: variable.clone(),
                    })?,
            ),
        };
        let client = endpoint_client(config.timeout).map_err(|error| {
            ImageGenError::Config(format!("cannot build the HTTP client: {error}"))
        })?;
        Ok(Self {
            name: format!("{endpoint}:{}", config.model),
            edits_url: format!("{base_url}/images/edits"),
            in_flight: Semaphore::new(config.max_in_flight.max(1)),
            api_key,
            client,
            options,
            config,
        })
    }

    fn form(&self, image: &[u8], prompt: &str) -> Result<reqwest::multipart::Form, ImageGenError> {
        let (mime, file_name) = if image.starts_with(b"\x89PNG") {
            ("image/png", "image.png")
        } else {
            ("image/jpeg", "image.jpg")
        };
        let part = reqwest::multipart::Part::bytes(image.to_vec())
            .file_name(file_name)
            .mime_str(mime)
            .map_err(|error| ImageGenError::Config(error.to_string()))?;
        let mut form = reqwest::multipart::Form::new()
            .text("model", self.config.model.clone())
            .text("prompt", prompt.to_string())
            .text("n", "1")
            .text("size", self.options.size.clone())
            .part("image", part);
        if let Some(quality) = &self.options.quality {
            form = form.text("quality", quality.clone());
        }
        if let Some(format) = &self.options.response_format {
            form = form.text("response_format", format.clone());
        }
        Ok(form)
    }

    /// The response body as JSON, after retrying what is worth retrying.
    async fn post(&self, image: &[u8], prompt: &str) -> Result<Value, ImageGenError> {
        let attempts = self.config.max_retries + 1;
        let mut last_failure = String::new();
        for attempt in 0..attempts {
            let permit = self
                .in_flight
                .acquire()
                .await
                .expect("the semaphore is never closed");
            let mut request = self
                .client
                .post(&self.edits_url)
                .multipart(self.form(image, prompt)?);
            if let Some(key) = &self.api_key {
                request = request.bearer_auth(key);
            }
            let delay = match request.send().await {
                Err(error) => match refused_redirect(&error) {
                    Some(refused) => {
                        return Err(ImageGenError::Redirect {
                            endpoint: self.edits_url.clone(),
                            refused: Box::new(refused),
                        });
                    }
                    None => {
                        last_failure = self.describe_transport_error(&error);
                        self.backoff(attempt)
                    }
                },
                Ok(response) => {
                    let status = response.status().as_u16();
                    let retry_after = retry_after(&response);
                    match read_body_text(response, self.config.max_response_bytes).await {
                        Err(BodyError::TooLarge { limit }) => {
                            return Err(ImageGenError::ResponseTooLarge {
                                endpoint: self.edits_url.clone(),
                                limit,
                            });
                        }
                        Err(BodyError::Transport(error)) => {
                            last_failure = self.describe_transport_error(&error);
                            self.backoff(attempt)
                        }
                        Ok(text) if (200..300).contains(&status) => {
                            match serde_json::from_str(&text) {
                                Ok(body) => return Ok(body),
                                Err(error) => {
                                    last_failure = format!(
                                        "HTTP {status} with a body that is not JSON ({error}): {}",
                                        self.excerpt(&text)
                                    );
                                    self.backoff(attempt)
                                }
                            }
                        }
                        Ok(text) if status == 429 || status == 408 || status >= 500 => {
                            last_failure = format!("HTTP {status}: {}", self.excerpt(&text));
                            retry_after.unwrap_or_else(|| self.backoff(attempt))
                        }
                        Ok(text) if status == 401 || status == 403 => {
                            return Err(ImageGenError::Unauthorized {
                                endpoint: self.edits_url.clone(),
                                status,
                                excerpt: self.excerpt(&text),
                            });
                        }
                        Ok(text) => {
                            return Err(ImageGenError::Rejected {
                                endpoint: self.edits_url.clone(),
                                status,
                                excerpt: self.excerpt(&text),
                            });
                        }
                    }
                }
            };
            drop(permit);
            if attempt + 1 < attempts {
                tracing::warn!(
                    attempt = attempt + 1, of = attempts, ?delay,
                    failure = %viss_engine::redact::for_terminal(&last_failure),
                    "image edit request failed; retrying"
                );
                tokio::time::sleep(delay).await;
            }
        }
        Err(ImageGenError::RetriesExhausted {
            endpoint: self.edits_url.clone(),
            attempts,
            last: last_failure,
        })
    }

    fn read_image(&self, body: &Value) -> Result<EditedImage, ImageGenError> {
        let malformed = |detail: String| ImageGenError::MalformedResponse {
            endpoint: self.edits_url.clone(),
            detail,
        };
        let encoded = body["data"][0]["b64_json"].as_str().ok_or_else(|| {
            let what = if body["data"][0]["url"].is_string() {
                "the image came as a URL, not base64; set response_format = \"b64_json\" in \
                 [params.endpoint]"
                    .to_string()
            } else {
                format!("no data[0].b64_json in {}", self.excerpt(&body.to_string()))
            };
            malformed(what)
        })?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|error| malformed(format!("data[0].b64_json is not base64: {error}")))?;
        let not_an_image = |reason: String| ImageGenError::NotAnImage {
            endpoint: self.edits_url.clone(),
            reason,
        };
        let format =
            image::guess_format(&bytes).map_err(|error| not_an_image(error.to_string()))?;
        let decoded = image::load_from_memory_with_format(&bytes, format)
            .map_err(|error| not_an_image(error.to_string()))?
            .into_rgb8();
        let png = if format == image::ImageFormat::Png {
            bytes
        } else {
            encode_png(&decoded)
        };
        let tokens = |name: &str| body["usage"][name].as_u64().unwrap_or(0);
        let usage = body.get("usage").map(|_| {
            let (input_tokens, output_tokens) = (tokens("input_tokens"), tokens("output_tokens"));
            let cost_usd = self.config.prices.map_or(0.0, |price| {
                (input_tokens as f64 * price.input_per_mtok
                    + output_tokens as f64 * price.output_per_mtok)
                    / 1e6
            });
            ImageUsage {
                input_tokens,
                output_tokens,
                cost_usd,
            }
        });
        Ok(EditedImage {
            png,
            width: decoded.width(),
            height: decoded.height(),
            usage,
        })
    }

    fn backoff(&self, attempt: u32) -> Duration {
        backoff_delay(self.config.backoff_base, attempt)
    }

    fn describe_transport_error(&self, error: &reqwest::Error) -> String {
        describe_transport_error(error, self.config.timeout)
    }

    fn excerpt(&self, text: &str) -> String {
        excerpt(text)
    }
}

#[async_trait::async_trait]
impl ImageBackend for OpenAiImageEdit {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn identity(&self) -> String {
        endpoint_identity(&self.config, &self.options)
    }

    async fn edit(&self, image: &[u8], prompt: &str) -> Result<EditedImage, ImageGenError> {
        let body = self.post(image, prompt).await?;
        self.read_image(&body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use viss_llm::mock_server::{MockHttp, MockReply, MockServer};

    fn png(width: u32, height: u32, colour: [u8; 3]) -> Vec<u8> {
        encode_png(&image::RgbImage::from_pixel(
            width,
            height,
            image::Rgb(colour),
        ))
    }

    fn edit_answer(png: &[u8]) -> MockReply {
        let body = serde_json::json!({
            "created": 1,
            "data": [{"b64_json": base64::engine::general_purpose::STANDARD.encode(png)}],
            "usage": {"input_tokens": 300, "output_tokens": 4000, "total_tokens": 4300}
        });
        MockReply::status(200, &body.to_string())
    }

    fn backend(server: &MockServer, key: Option<&str>) -> OpenAiImageEdit {
        let mut config = server.config();
        config.model = "gpt-image-1".to_string();
        config.api_key_env = key.map(|_| "VISS_TEST_IMAGE_KEY".to_string());
        config.prices = Some(viss_llm::Price {
            input_per_mtok: 10.0,
            output_per_mtok: 40.0,
        });
        let key = key.map(str::to_string);
        OpenAiImageEdit::with_key_lookup("mock", config, ImageEditOptions::default(), move |_| {
            key.clone()
        })
        .unwrap()
    }

    /// The parts of a multipart/form-data body: (name, file name, bytes).
    fn form_parts(content_type: &str, body: &[u8]) -> Vec<(String, Option<String>, Vec<u8>)> {
        let boundary = content_type
            .split("boundary=")
            .nth(1)
            .expect("a boundary")
            .trim_matches('"');
        let delimiter = format!("--{boundary}");
        let mut parts = Vec::new();
        let text = body;
        let positions: Vec<usize> = (0..text.len().saturating_sub(delimiter.len()))
            .filter(|&at| text[at..].starts_with(delimiter.as_bytes()))
            .collect();
        for pair in positions.windows(2) {
            let part = &text[pair[0] + delimiter.len() + 2..pair[1] - 2];
            let split = part
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .expect("part headers");
            let headers = String::from_utf8_lossy(&part[..split]).to_string();
            let disposition = headers
                .lines()
                .find(|line| line.to_ascii_lowercase().starts_with("content-disposition"))
                .expect("a content-disposition header")
                .to_string();
            let field = |key: &str| {
                disposition.split(';').find_map(|piece| {
                    piece
                        .trim()
                        .strip_prefix(&format!("{key}=\""))
                        .map(|v| v.trim_end_matches('"').to_string())
                })
            };
            let name = field("name").expect("a part name");
            parts.push((name, field("filename"), part[split + 4..].to_vec()));
        }
        parts
    }

    #[tokio::test]
    async fn mock_image_edit_uploads_the_png_and_prompt_and_decodes_the_answer() {
        let answer = png(64, 48, [10, 200, 30]);
        let reply = answer.clone();
        let server = MockServer::start(move |_, _| edit_answer(&reply)).await;
        let backend = backend(&server, Some("sk-test-123"));
        let input = png(32, 24, [200, 10, 10]);
        let edited = backend
            .edit(&input, "Redraw as a comic panel.")
            .await
            .unwrap();
        assert_eq!(edited.png, answer);
        assert_eq!((edited.width, edited.height), (64, 48));
        let usage = edited.usage.unwrap();
        assert_eq!((usage.input_tokens, usage.output_tokens), (300, 4000));
        assert!((usage.cost_usd - (300.0 * 10.0 + 4000.0 * 40.0) / 1e6).abs() < 1e-12);

        let requests = server.state.requests.lock().unwrap();
        assert_eq!(requests.len(), 1);
        let request = &requests[0];
        assert_eq!(request.path, "/v1/images/edits");
        assert_eq!(request.authorization.as_deref(), Some("Bearer sk-test-123"));
        let content_type = request.content_type.clone().unwrap();
        assert!(
            content_type.starts_with("multipart/form-data"),
            "{content_type}"
        );
        let parts = form_parts(&content_type, &request.raw);
        let part = |name: &str| {
            parts
                .iter()
                .find(|p| p.0 == name)
                .unwrap_or_else(|| panic!("no part {name}: {parts:?}"))
        };
        assert_eq!(part("model").2, b"gpt-image-1");
        assert_eq!(part("prompt").2, b"Redraw as a comic panel.");
        assert_eq!(part("n").2, b"1");
        assert_eq!(part("size").2, b"auto");
        assert_eq!(part("image").1.as_deref(), Some("image.png"));
        assert_eq!(part("image").2, input);
        assert!(
            !parts.iter().any(|p| p.0 == "response_format"),
            "gpt-image-1 rejects response_format"
        );
    }

    #[tokio::test]
    async fn mock_image_edit_retries_server_errors_and_stops_on_refusals() {
        let answer = png(8, 8, [1, 2, 3]);
        let reply = answer.clone();
        let server = MockServer::start(move |call, _| {
            if call < 2 {
                MockReply::status(503, "{\"error\": \"busy\"}")
            } else {
                edit_answer(&reply)
            }
        })
        .await;
        let edited = backend(&server, None)
            .edit(&png(4, 4, [0, 0, 0]), "p")
            .await
            .unwrap();
        assert_eq!(edited.png, answer);
        assert_eq!(server.request_count(), 3);

        let refusing = MockServer::start(|_, _| {
            MockReply::status(401, "{\"error\": \"bad key sk-test-123\"}")
        })
        .await;
        let error = backend(&refusing, Some("sk-test-123"))
            .edit(&png(4, 4, [0, 0, 0]), "p")
            .await
            .unwrap_err();
        assert!(
            matches!(error, ImageGenError::Unauthorized { status: 401, .. }),
            "{error}"
        );
        assert!(
            !error.to_string().contains("sk-test-123"),
            "the key leaked: {error}"
        );
        assert_eq!(refusing.request_count(), 1);

        let rejecting =
            MockServer::start(|_, _| MockReply::status(400, "{\"error\": \"unknown size\"}")).await;
        let error = backend(&rejecting, None)
            .edit(&png(4, 4, [0, 0, 0]), "p")
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("unknown size")
                && error.to_string().contains("/v1/images/edits"),
            "{error}"
        );

        let down = MockServer::start(|_, _| MockReply::status(500, "oops")).await;
        let error = backend(&down, None)
            .edit(&png(4, 4, [0, 0, 0]), "p")
            .await
            .unwrap_err();
        assert!(
            matches!(error, ImageGenError::RetriesExhausted { attempts: 4, .. }),
            "{error}"
        );
    }

    #[tokio::test]
    async fn mock_image_edit_answers_without_an_image_are_errors() {
        let url_only = MockServer::start(|_, _| {
            MockReply::status(200, "{\"data\": [{\"url\": \"https://x/y.png\"}]}")
        })
        .await;
        let error = backend(&url_only, None)
            .edit(&png(4, 4, [0, 0, 0]), "p")
            .await
            .unwrap_err();
        assert!(error.to_string().contains("response_format"), "{error}");

        let garbage = base64::engine::general_purpose::STANDARD.encode(b"definitely not pixels");
        let body = format!("{{\"data\": [{{\"b64_json\": \"{garbage}\"}}]}}");
        let not_image = MockServer::start(move |_, _| MockReply::status(200, &body)).await;
        let error = backend(&not_image, None)
            .edit(&png(4, 4, [0, 0, 0]), "p")
            .await
            .unwrap_err();
        assert!(matches!(error, ImageGenError::NotAnImage { .. }), "{error}");

        // A JPEG answer is converted to PNG.
        let mut jpeg = Vec::new();
        image::RgbImage::from_pixel(16, 8, image::Rgb([90, 90, 90]))
            .write_to(
                &mut std::io::Cursor::new(&mut jpeg),
                image::ImageFormat::Jpeg,
            )
            .unwrap();
        let body = serde_json::json!({
            "data": [{"b64_json": base64::engine::general_purpose::STANDARD.encode(&jpeg)}]
        })
        .to_string();
        let jpeg_server = MockServer::start(move |_, _| MockReply::status(200, &body)).await;
        let edited = backend(&jpeg_server, None)
            .edit(&png(4, 4, [0, 0, 0]), "p")
            .await
            .unwrap();
        assert!(edited.png.starts_with(b"\x89PNG"));
        assert_eq!((edited.width, edited.height, edited.usage), (16, 8, None));

        let error = OpenAiImageEdit::with_key_lookup(
            "mock",
            HttpConfig {
                api_key_env: Some("VISS_UNSET_IMAGE_KEY".to_string()),
                ..HttpConfig::new("http://127.0.0.1:9/v1", "m")
            },
            ImageEditOptions::default(),
            |_| None,
        )
        .err()
        .unwrap();
        assert!(
            error.to_string().contains("VISS_UNSET_IMAGE_KEY"),
            "{error}"
        );
    }
}

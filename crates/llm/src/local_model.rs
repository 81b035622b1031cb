//! The embedded model as the pipeline uses it: which GGUF file (the configured one, or the
//! default fetched into the model cache), and a [`ChatBackend`] over [`LocalBackend`] that runs
//! generation on the blocking pool.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::backend::{ChatBackend, RawAnswer, Usage};
use super::config::LocalModelSettings;
use super::error::LlmError;
use super::local::{LocalBackend, LocalConfig};
use super::local_record::{Question, Recorder};
use super::request::{ChatRequest, EndpointIdentity, Message};
use viss_models::ModelCache;

/// The GGUF file: a built-in model by name (fetched and verified if missing), a file relative to
/// the project root, or, unset, the default built-in model.
pub fn resolve_path(
    settings: &LocalModelSettings,
    project_root: &Path,
) -> Result<PathBuf, LlmError> {
    let spec = match &settings.model {
        Some(path) if !names_a_builtin_model(path) => return Ok(project_root.join(path)),
        Some(name) => viss_models::local_llm_by_name(&name.to_string_lossy())
            .map_err(|error| LlmError::Config(format!("[llm.local] model: {error}")))?,
        None => viss_models::DEFAULT_LOCAL_LLM,
    };
    built_in_model_path(spec)
        .map_err(|error| LlmError::Config(format!("the local model {}: {error}", spec.name)))
}

/// A bare name (no directory, no `.gguf`) names a built-in model; anything else is a file.
fn names_a_builtin_model(model: &Path) -> bool {
    model.components().count() == 1
        && !model
            .extension()
            .is_some_and(|extension| extension.eq_ignore_ascii_case("gguf"))
}

/// A built-in model's GGUF, verified once per process, model cache and model: every LLM stage
/// names its model when a build starts, and checking a gigabyte of sha256 once per stage was
/// most of a no-op build's time.
fn built_in_model_path(
    spec: &'static viss_models::ModelSpec,
) -> Result<PathBuf, viss_models::ModelError> {
    static VERIFIED: Mutex<BTreeMap<(PathBuf, &str), PathBuf>> = Mutex::new(BTreeMap::new());
    let cache = ModelCache::from_env()?;
    let mut verified = VERIFIED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let key = (cache.root().to_path_buf(), spec.name);
    if let Some(path) = verified.get(&key) {
        return Ok(path.clone());
    }
    let path = cache.ensure_named_local_llm(spec)?;
    verified.insert(key, path.clone());
    Ok(path)
}

/// How the embedded model runs under `settings`: its GGUF (fetched if it is a built-in model
/// not yet here) and the rest as set.
pub fn local_config(
    settings: &LocalModelSettings,
    project_root: &Path,
) -> Result<LocalConfig, LlmError> {
    Ok(LocalConfig {
        model_path: resolve_path(settings, project_root)?,
        context_tokens: settings.context_tokens,
        threads: viss_engine::range::threads(settings.threads),
        max_tokens: settings.max_tokens,
        dry_multiplier: settings.dry_multiplier,
    })
}

/// Loads the model once for the build.
pub fn load(
    settings: &LocalModelSettings,
    project_root: &Path,
) -> Result<Arc<dyn ChatBackend>, LlmError> {
    let config = local_config(settings, project_root)?;
    Ok(Arc::new(EmbeddedChat {
        backend: Arc::new(LocalBackend::load(&config)?),
        recorder: Recorder::from_env()?,
    }))
}

struct EmbeddedChat {
    backend: Arc<LocalBackend>,
    /// Where each question is written down, when [`super::local_record::RECORD_ENV`] asks.
    recorder: Option<Recorder>,
}

#[async_trait::async_trait]
impl ChatBackend for EmbeddedChat {
    fn identity(&self) -> EndpointIdentity {
        self.backend.identity()
    }

    async fn answer(
        &self,
        request: &ChatRequest,
        conversation: &[Message],
        usage: &mut Usage,
    ) -> Result<RawAnswer, LlmError> {
        let backend = self.backend.clone();
        let asked = conversation;
        let conversation = conversation.to_vec();
        let schema = request.decoder_schema.clone().or_else(|| {
            request
                .response_schema
                .as_ref()
                .map(|(_, schema)| schema.clone())
        });
        let (temperature, seed, max_tokens) =
            (request.temperature, request.seed, request.max_tokens);
        let avoid_words = request.avoid_words.clone();
        let (answer, schema, avoid_words) = tokio::task::spawn_blocking(move || {
            backend
                .generate_avoiding(
                    &conversation,
                    schema.as_ref(),
                    temperature,
                    seed,
                    max_tokens,
                    &avoid_words,
                )
                .map(|answer| (answer, schema, avoid_words))
        })
        .await
        .map_err(|error| LlmError::Config(format!("local generation panicked: {error}")))??;
        if let Some(recorder) = &self.recorder {
            let question = Question {
                step: request
                    .response_schema
                    .as_ref()
                    .map(|(name, _)| name.as_str()),
                conversation: asked,
                schema: schema.as_ref(),
                temperature,
                seed,
                max_tokens,
                avoid_words: &avoid_words,
            };
            recorder.record(question, &answer);
        }
        usage.add_call(
            answer.prompt_tokens as u64,
            answer.completion_tokens as u64,
            None,
        );
        Ok(RawAnswer {
            text: answer.text,
            stopped_at_token_limit: answer.stopped_at_token_limit,
        })
    }

    /// Greedy decoding, and each re-ask's sampling (at a raised temperature) seeded: the same
    /// question gets the same answers on this machine's thread count. Without a seed a re-ask
    /// samples at random.
    fn reproduces(&self, request: &ChatRequest) -> bool {
        request.seed.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(model: &str) -> LocalModelSettings {
        LocalModelSettings {
            model: Some(PathBuf::from(model)),
            ..LocalModelSettings::default()
        }
    }

    /// The embedded model with a seed gives the same answers to the same question: a call
    /// whose every answer was refused is replayed from the cache on a rebuild, nothing asked
    /// again, its failure the same; without a seed its re-asks sample at random, so a rebuild
    /// asks again.
    #[tokio::test]
    async fn a_seeded_question_the_embedded_model_never_answered_is_not_asked_twice() {
        let gguf = ModelCache::from_env()
            .and_then(|cache| {
                cache.ensure_named_local_llm(&viss_models::QWEN2_5_CODER_0_5B_INSTRUCT_Q4_K_M)
            })
            .expect("fetch the local LLM");
        let config = LocalConfig {
            context_tokens: 1024,
            max_tokens: 24,
            ..LocalConfig::new(gguf)
        };
        let chat = EmbeddedChat {
            backend: Arc::new(LocalBackend::load(&config).unwrap()),
            recorder: None,
        };
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"label": {"type": "string"}},
            "required": ["label"],
            "additionalProperties": false
        });
        let mut request = ChatRequest::new(vec![
            Message::system("Label the emotion in one word."),
            Message::user("I won the lottery!"),
        ])
        .with_schema("emotion_label", schema);
        request.max_reasks = 1;
        request.seed = Some(3);
        let never = |_: &serde_json::Value| -> Result<(), crate::Rejection> {
            Err(crate::Rejection::whole(
                "not_a_label",
                "no label is right here".to_string(),
            ))
        };
        let cache = crate::cache::MemoryResponseCache::new();
        let ask = |request: ChatRequest| {
            let (chat, cache) = (&chat, &cache);
            async move {
                let mut spent = Usage::default();
                let failure = crate::backend::complete_json_keeping(
                    chat, &request, cache, &never, None, &mut spent,
                )
                .await
                .unwrap_err();
                let LlmError::InvalidOutput { last_problem, .. } = failure else {
                    panic!("{failure}");
                };
                (spent.calls, last_problem)
            }
        };
        let (calls, first) = ask(request.clone()).await;
        assert_eq!(calls, 2);
        let (calls, again) = ask(request.clone()).await;
        assert_eq!(
            calls, 0,
            "a reproducible failure is replayed, not asked again"
        );
        assert_eq!(again, first);
        request.seed = None;
        let (calls, _) = ask(request.clone()).await;
        assert_eq!(calls, 2);
        let (calls, _) = ask(request).await;
        assert_eq!(calls, 2, "unseeded re-asks sample at random: asked again");
    }

    #[test]
    fn a_model_setting_is_a_builtin_name_or_a_file() {
        assert!(names_a_builtin_model(Path::new(
            "qwen2.5-coder-1.5b-instruct-q4_k_m"
        )));
        assert!(!names_a_builtin_model(Path::new("my-model.gguf")));
        assert!(!names_a_builtin_model(Path::new("models/my-model")));
        let root = Path::new("/projects/p");
        assert_eq!(
            resolve_path(&settings("models/my-model.gguf"), root).unwrap(),
            root.join("models/my-model.gguf")
        );
        let error = resolve_path(&settings("qwen-7b"), root)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("no local LLM named \"qwen-7b\"")
                && error.contains("qwen2.5-coder-0.5b-instruct-q4_k_m")
                && error.contains("qwen2.5-coder-1.5b-instruct-q4_k_m"),
            "{error}"
        );
    }
}

//! The embedded model as the pipeline uses it: which GGUF file (the configured one, or the
//! default fetched into the model cache), and a [`ChatBackend`] over [`LocalBackend`] that runs
//! generation on the blocking pool.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::backend::{ChatBackend, RawAnswer, Usage};
use super::config::LocalModelSettings;
use super::error::LlmError;
use super::local::{LocalAnswer, LocalBackend, LocalConfig};
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
        answered: Mutex::default(),
    }))
}

struct EmbeddedChat {
    backend: Arc<LocalBackend>,
    /// Where each question is written down, when [`super::local_record::RECORD_ENV`] asks.
    recorder: Option<Recorder>,
    /// The answers this process generated to questions the model answers the same way each
    /// time ([`reproduces`]).
    answered: Mutex<AnsweredQuestions>,
}

/// Answers to reproducible questions by the question's hash, the latest [`ANSWERED_KEPT`]: a
/// question asked again gets its answer without generating it again. A re-ask that shows the
/// model the answer it just gave, which it gives again, is the same question each round, and
/// the small model falls into that loop at the top re-ask temperature: on the demo a third of
/// the `goals` answers were such repeats (the request cache does not see them: they are
/// rounds inside one call).
#[derive(Default)]
struct AnsweredQuestions {
    answers: std::collections::HashMap<blake3::Hash, LocalAnswer>,
    order: std::collections::VecDeque<blake3::Hash>,
}

/// Answers [`AnsweredQuestions`] keeps: a few hundred kilobytes of text.
const ANSWERED_KEPT: usize = 512;

impl AnsweredQuestions {
    fn get(&self, question: &blake3::Hash) -> Option<LocalAnswer> {
        self.answers.get(question).cloned()
    }

    fn insert(&mut self, question: blake3::Hash, answer: LocalAnswer) {
        if self.answers.insert(question, answer).is_none() {
            self.order.push_back(question);
        }
        while self.order.len() > ANSWERED_KEPT {
            if let Some(oldest) = self.order.pop_front() {
                self.answers.remove(&oldest);
            }
        }
    }
}

/// Everything a generation's answer depends on, hashed: the conversation, the decoder's
/// schema, the sampling settings and the words kept out.
fn question_hash(
    conversation: &[Message],
    schema: Option<&serde_json::Value>,
    (temperature, seed, max_tokens): (f32, Option<u64>, Option<u32>),
    avoid_words: &[String],
) -> blake3::Hash {
    let mut hasher = blake3::Hasher::new();
    let mut field = |bytes: &[u8]| {
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    for message in conversation {
        field(format!("{:?}", message.role).as_bytes());
        for part in &message.content {
            match part {
                super::request::Part::Text(text) => field(text.as_bytes()),
                super::request::Part::ImagePng(png) => field(png),
            }
        }
    }
    field(
        schema
            .map(ToString::to_string)
            .unwrap_or_default()
            .as_bytes(),
    );
    field(&temperature.to_bits().to_le_bytes());
    field(format!("{seed:?} {max_tokens:?}").as_bytes());
    for word in avoid_words {
        field(word.as_bytes());
    }
    hasher.finalize()
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
        let question_key = reproduces(request).then(|| {
            question_hash(
                asked,
                schema.as_ref(),
                (temperature, seed, max_tokens),
                &avoid_words,
            )
        });
        let known = question_key.and_then(|key| {
            self.answered
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .get(&key)
        });
        if let Some(answer) = known {
            // The same answer, so the same tokens: a record of it reads the same either way.
            usage.add_call(
                answer.prompt_tokens as u64,
                answer.completion_tokens as u64,
                None,
            );
            return Ok(RawAnswer {
                text: answer.text,
                stopped_at_token_limit: answer.stopped_at_token_limit,
            });
        }
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
        if let Some(key) = question_key {
            self.answered
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(key, answer.clone());
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

    fn reproduces(&self, request: &ChatRequest) -> bool {
        reproduces(request)
    }
}

/// Whether the embedded model gives `request` the same answers each time it is asked
/// ([`ChatBackend::reproduces`]): greedy decoding, and each re-ask's sampling (at a raised
/// temperature) seeded, give the same answers on this machine's thread count. Without a seed a
/// re-ask samples at random.
pub fn reproduces(request: &ChatRequest) -> bool {
    request.seed.is_some()
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

    /// The 0.5B model, fetched if missing, with a short context and answers of 24 tokens at most.
    fn small_model(recorder: Option<Recorder>) -> EmbeddedChat {
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
        EmbeddedChat {
            backend: Arc::new(LocalBackend::load(&config).unwrap()),
            recorder,
            answered: Mutex::default(),
        }
    }

    /// The embedded model with a seed gives the same answers to the same question: a call
    /// whose every answer was refused is replayed from the cache on a rebuild, nothing asked
    /// again, its failure the same; without a seed its re-asks sample at random, so a rebuild
    /// asks again.
    #[tokio::test]
    async fn a_seeded_question_the_embedded_model_never_answered_is_not_asked_twice() {
        let chat = small_model(None);
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

    /// A reproducible question asked again (a re-ask loop that shows the model its own answer
    /// again) gets the answer it got, with its tokens, without generating it: the model is
    /// asked once, as the recording of what it generated shows. An unseeded one is generated
    /// each time.
    #[tokio::test]
    async fn a_seeded_question_asked_again_gets_its_answer_without_generating_it() {
        let recording = tempfile::NamedTempFile::new().unwrap();
        let chat = small_model(Some(Recorder::append_to(recording.path()).unwrap()));
        let mut request = ChatRequest::new(vec![
            Message::system("Name the emotion in one word."),
            Message::user("I won the lottery!"),
        ]);
        request.temperature = 0.8;
        request.seed = Some(11);
        let ask = |request: ChatRequest| {
            let chat = &chat;
            async move {
                let mut usage = Usage::default();
                let answer = chat
                    .answer(&request, &request.messages, &mut usage)
                    .await
                    .unwrap();
                (answer.text, usage)
            }
        };
        let generated = || {
            std::fs::read_to_string(recording.path())
                .unwrap()
                .lines()
                .count()
        };
        let (first, first_usage) = ask(request.clone()).await;
        let (again, again_usage) = ask(request.clone()).await;
        assert_eq!(again, first);
        assert_eq!(again_usage, first_usage, "the same tokens");
        assert_eq!(generated(), 1, "asked once");
        request.seed = Some(12);
        ask(request.clone()).await;
        assert_eq!(generated(), 2, "another seed is another question");
        request.seed = None;
        ask(request.clone()).await;
        ask(request).await;
        assert_eq!(generated(), 4, "unseeded sampling is generated every time");
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

//! In-process generation with a GGUF model through llama.cpp: answers without any endpoint.
//!
//! The model is loaded once (memory-mapped) and shared. One thread per loaded model keeps a
//! context whose KV cache holds the last prompt, so that a question sharing the start of the one
//! before (the parts of one answer asked one role at a time, a re-ask) decodes only what is new;
//! the prompt is decoded in fixed runs from its first token, which makes the kept part exactly
//! what decoding it again would give, so no answer depends on the question asked before it.
//! When a JSON schema is given, decoding is constrained by a grammar built from it, so a small
//! model cannot answer with something that does not parse. Calls are blocking (run them in
//! `spawn_blocking`) and one runs at a time: on a few cores, two generations side by side only
//! take turns at the same cores and each finishes later.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, mpsc};
use std::time::Instant;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::logit_bias::LlamaLogitBias;
use llama_cpp_2::vocab::LlamaVocab;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::error::LlmError;
use super::request::{EndpointIdentity, Message, Part};

/// The OpenMP wait policy llama.cpp's threads get unless the environment names one.
const OPENMP_WAIT_POLICY: &str = "PASSIVE";

/// Makes this process run again, from the start, with `OMP_WAIT_POLICY=PASSIVE`, unless the
/// environment already names a policy (`None`: nothing to do); returns an error only when it
/// cannot start again.
///
/// llama.cpp's threads wait for each other at every operation of a token. Waiting by spinning,
/// one preempted thread stalls the others while they burn their cores, so a build beside other
/// work slowed more than the CPU it lost (`viss bench local-llm` with one core busy: 2.06 times
/// the idle time spinning, 1.80 waiting passively, with the same answers; idle, 1% apart).
/// libgomp reads the policy once, when it is loaded, before `main`: the only way to set it from
/// inside is to start again with it set.
#[cfg(unix)]
pub fn restart_with_passive_waits() -> Option<std::io::Error> {
    use std::os::unix::process::CommandExt;
    const POLICY_ENV: &str = "OMP_WAIT_POLICY";
    if std::env::var_os(POLICY_ENV).is_some() {
        return None;
    }
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(error) => return Some(error),
    };
    let mut arguments = std::env::args_os();
    let mut command = std::process::Command::new(program);
    if let Some(name) = arguments.next() {
        command.arg0(name);
    }
    Some(
        command
            .args(arguments)
            .env(POLICY_ENV, OPENMP_WAIT_POLICY)
            .exec(),
    )
}

/// The `base_url` of every local model's identity: no server, so no URL.
pub const LOCAL_BASE_URL: &str = "local:llama.cpp";

/// Hex digits of the model file's blake3 kept in the identity: enough to tell files apart.
const IDENTITY_HASH_HEX_DIGITS: usize = 16;

/// llama.cpp reads this seed as "pick one at random", so a caller's seed must never become it.
const LLAMA_RANDOM_SEED: u32 = u32::MAX;

fn default_context_tokens() -> u32 {
    4096
}

fn default_max_tokens() -> u32 {
    1024
}

/// How to run a local GGUF model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalConfig {
    /// A GGUF file with a chat template (e.g. from `ModelCache::ensure_local_llm`).
    pub model_path: PathBuf,
    /// Prompt plus answer, in tokens; the KV cache is sized for this.
    #[serde(default = "default_context_tokens")]
    pub context_tokens: u32,
    /// Threads for llama.cpp; 0: every core this process may use.
    #[serde(default)]
    pub threads: usize,
    /// Answer tokens when a call does not say.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    /// Strength of the DRY ("don't repeat yourself") penalty on a token that would continue a run
    /// of tokens the answer has already written; 0: off. Part of the identity, so of every
    /// request key.
    #[serde(default)]
    pub dry_multiplier: f32,
}

/// The DRY penalty's growth per token beyond [`DRY_ALLOWED_LENGTH`] (llama.cpp's usual value).
const DRY_BASE: f32 = 1.75;
/// Repeats up to this many tokens (a name, a short phrase) go unpenalised.
const DRY_ALLOWED_LENGTH: i32 = 2;
/// A repeat never runs across these: a JSON answer's field names repeat by design, the
/// sentences inside its strings should not. (Not new lines or commas: a model that may start
/// a fresh run at each of them just repeats its clause once per line or per comma.)
const DRY_SEQUENCE_BREAKERS: [&str; 2] = ["\"", ":"];

impl LocalConfig {
    /// Defaults: 4096 context tokens, all cores, at most 1024 answer tokens.
    pub fn new(model_path: impl Into<PathBuf>) -> Self {
        Self {
            model_path: model_path.into(),
            context_tokens: default_context_tokens(),
            threads: 0,
            max_tokens: default_max_tokens(),
            dry_multiplier: 0.0,
        }
    }
}

/// One generated answer and what it took.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalAnswer {
    pub text: String,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// The answer was cut off by the token limit, not ended by the model: with a schema, the JSON
    /// is then incomplete.
    pub stopped_at_token_limit: bool,
    pub prompt_seconds: f64,
    pub generation_seconds: f64,
    /// Prompt tokens whose KV cache the question before left (not decoded again).
    pub reused_prompt_tokens: usize,
}

/// The prompt is decoded in runs of this many tokens, always counted from its first token (and
/// llama.cpp's micro-batches are as long), so that the KV cache of a whole run depends only on
/// the tokens up to its end: a run another prompt decoded is what decoding it again gives, and
/// only whole runs are kept for the next question.
const PROMPT_RUN_TOKENS: usize = 128;

/// A context the model's thread keeps between questions, the prompt tokens of the whole runs
/// its KV cache holds (at positions 0 on), and when it last answered.
struct Warm<'m> {
    context: LlamaContext<'m>,
    kept: Vec<LlamaToken>,
    last_used: u64,
}

/// How many contexts the model's thread keeps: a build runs a job per core, whose questions
/// take turns at the model, so each job's next question finds its own prompt still there.
const KEPT_CONTEXTS: usize = 3;

/// The contexts the model's thread keeps, and a clock of questions answered.
struct Contexts<'m> {
    warm: Vec<Warm<'m>>,
    clock: u64,
}

impl<'m> Contexts<'m> {
    /// The context holding the most whole runs of `prompt`, or else the one unused longest.
    fn for_prompt(&mut self, prompt: &[LlamaToken]) -> &mut Warm<'m> {
        self.clock += 1;
        let shared = |warm: &Warm<'_>| {
            let tokens = warm
                .kept
                .iter()
                .zip(prompt)
                .take_while(|(a, b)| a == b)
                .count();
            tokens / PROMPT_RUN_TOKENS
        };
        let most_shared = (0..self.warm.len()).max_by_key(|&index| {
            let warm = &self.warm[index];
            (shared(warm), std::cmp::Reverse(warm.last_used))
        });
        let best = match most_shared {
            Some(index) if shared(&self.warm[index]) > 0 => index,
            _ => (0..self.warm.len())
                .min_by_key(|&index| self.warm[index].last_used)
                .unwrap_or(0),
        };
        let warm = &mut self.warm[best];
        warm.last_used = self.clock;
        warm
    }
}

/// A generation for the model's thread.
type Job = Box<dyn for<'m> FnOnce(&mut Contexts<'m>) + Send>;

/// A GGUF model loaded in this process.
pub struct LocalBackend {
    model: Arc<LlamaModel>,
    chat_template: LlamaChatTemplate,
    config: LocalConfig,
    identity: EndpointIdentity,
    /// llama.cpp's threads (the configured count, or one per core).
    threads: i32,
    /// To the thread that owns the context: generations run there, one at a time.
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl std::fmt::Debug for LocalBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBackend")
            .field("identity", &self.identity)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// llama.cpp's global state may be initialised once per process; every backend shares it.
fn llama_backend() -> Result<&'static LlamaBackend, String> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            // llama.cpp prints pages of loading details to stderr; route them to tracing instead,
            // where they show only when asked for.
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|error| error.to_string())
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The identity a GGUF file answers under: its file name and the start of its blake3, so that
/// another file (another quantisation, a fine-tune) is another cache key while moving the file
/// is not; and the DRY penalty when it is on (`+dry0.8+respelled`: the penalty also covers each
/// spelling of the penalised word's start, see [`respellings`]), which changes every answer.
pub fn local_identity(
    model_path: &Path,
    dry_multiplier: f32,
) -> Result<EndpointIdentity, LlmError> {
    let unreadable = |error: std::io::Error| LlmError::LocalModel {
        path: model_path.to_path_buf(),
        detail: format!("cannot read it: {error}"),
    };
    let file = std::fs::File::open(model_path).map_err(unreadable)?;
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(file).map_err(unreadable)?;
    Ok(identity_from_hash(
        model_path,
        &hasher.finalize().to_hex(),
        dry_multiplier,
    ))
}

/// [`local_identity`] for a file whose blake3 is already known (the store keeps it, so a
/// build need not re-read 0.5 GB to name the model in its cache keys).
pub fn identity_from_hash(
    model_path: &Path,
    blake3_hex: &str,
    dry_multiplier: f32,
) -> EndpointIdentity {
    let file_name = model_path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let digits = blake3_hex.len().min(IDENTITY_HASH_HEX_DIGITS);
    let mut model = format!("{file_name}@{}", &blake3_hex[..digits]);
    if dry_multiplier > 0.0 {
        model.push_str(&format!("+dry{dry_multiplier}+respelled"));
    }
    EndpointIdentity {
        base_url: LOCAL_BASE_URL.to_string(),
        model,
    }
}

impl LocalBackend {
    /// Loads the model (memory-mapped), reads its chat template and hashes the file once for
    /// [`Self::identity`].
    pub fn load(config: &LocalConfig) -> Result<Self, LlmError> {
        let path = &config.model_path;
        let model_error = |detail: String| LlmError::LocalModel {
            path: path.clone(),
            detail,
        };
        if config.context_tokens < 64 {
            return Err(LlmError::Config(format!(
                "local LLM context_tokens is {}; it must be at least 64 (prompt and answer share \
                 it)",
                config.context_tokens
            )));
        }
        if config.max_tokens == 0 {
            return Err(LlmError::Config(
                "local LLM max_tokens is 0; it must be at least 1".to_string(),
            ));
        }
        match viss_engine::fsutil::regular_file(path) {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(model_error(
                    "the file does not exist; run `viss models fetch` or fix model_path"
                        .to_string(),
                ));
            }
            Err(problem) => return Err(model_error(format!("it {problem}"))),
        }
        let backend = llama_backend().map_err(|detail| {
            model_error(format!("llama.cpp could not be initialised: {detail}"))
        })?;
        let identity = local_identity(path, config.dry_multiplier)?;
        let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default())
            .map_err(|error| {
                model_error(format!(
                    "llama.cpp could not load it ({error}); it is not a GGUF file, is damaged, \
                     or uses an architecture this llama.cpp does not know"
                ))
            })?;
        let chat_template = model.chat_template(None).map_err(|error| {
            model_error(format!(
                "it has no usable chat template ({error}); use an instruction-tuned GGUF that \
                 carries one"
            ))
        })?;
        // llama.cpp recognises templates by their markers rather than running them; finding out
        // now that it does not know this one beats failing on the first question.
        let probe = [chat_message("user", "hi").map_err(&model_error)?];
        model
            .apply_chat_template(&chat_template, &probe, true)
            .map_err(|error| {
                model_error(format!(
                    "llama.cpp cannot apply its chat template ({error}); use a model whose \
                     template llama.cpp supports"
                ))
            })?;
        let threads = match config.threads {
            0 => std::thread::available_parallelism().map_or(1, |count| count.get()),
            threads => threads,
        };
        let threads = i32::try_from(threads).unwrap_or(i32::MAX);
        let model = Arc::new(model);
        let jobs = spawn_model_thread(Arc::clone(&model), backend, config.context_tokens, threads)
            .map_err(|detail| model_error(format!("cannot create a context for it ({detail})")))?;
        Ok(Self {
            model,
            chat_template,
            config: config.clone(),
            identity,
            threads,
            jobs: Mutex::new(jobs),
        })
    }

    /// Part of every cache key of answers from this model.
    pub fn identity(&self) -> EndpointIdentity {
        self.identity.clone()
    }

    pub fn config(&self) -> &LocalConfig {
        &self.config
    }

    /// The prompt the model would read for `conversation`, in tokens.
    pub fn prompt_tokens(&self, conversation: &[Message]) -> Result<usize, LlmError> {
        Ok(self.tokenize_prompt(conversation)?.len())
    }

    /// Answers `conversation`. With a `schema` the answer is JSON that matches it (unless cut off:
    /// see [`LocalAnswer::stopped_at_token_limit`]). Temperature 0 is greedy and deterministic;
    /// above 0 the sampling is seeded by `seed` (a random seed when `None`). Blocking.
    pub fn generate(
        &self,
        conversation: &[Message],
        schema: Option<&Value>,
        temperature: f32,
        seed: Option<u64>,
        max_tokens: Option<u32>,
    ) -> Result<LocalAnswer, LlmError> {
        self.generate_avoiding(conversation, schema, temperature, seed, max_tokens, &[])
    }

    /// [`Self::generate`], never writing any of `avoid_words` as a whole word, in any case and
    /// however the tokens spell it: a word the vocabulary holds as one token is barred outright
    /// (see [`Self::word_tokens`]); one spelled in several pieces by barring, at each step, the
    /// tokens that would finish it (see [`SpellingBar`]).
    pub fn generate_avoiding(
        &self,
        conversation: &[Message],
        schema: Option<&Value>,
        temperature: f32,
        seed: Option<u64>,
        max_tokens: Option<u32>,
        avoid_words: &[String],
    ) -> Result<LocalAnswer, LlmError> {
        let avoided = self.word_tokens(avoid_words);
        let spelled = SpellingBar::words_of(avoid_words);
        let prompt = self.tokenize_prompt(conversation)?;
        let context_tokens = self.config.context_tokens;
        if prompt.len() >= context_tokens as usize {
            return Err(LlmError::LocalPromptTooLong {
                prompt_tokens: prompt.len(),
                context_tokens,
            });
        }
        let room = context_tokens as usize - prompt.len();
        let limit = (max_tokens.unwrap_or(self.config.max_tokens) as usize).min(room);
        let model = Arc::clone(&self.model);
        let schema = schema.cloned();
        let dry_multiplier = self.config.dry_multiplier;
        let model_name = self.identity.model.clone();
        let failed = |detail: &str| LlmError::LocalInference {
            model: self.identity.model.clone(),
            detail: detail.to_string(),
        };
        let (reply, answer) = mpsc::channel();
        let job: Job = Box::new(move |contexts: &mut Contexts<'_>| {
            let warm = contexts.for_prompt(&prompt);
            let question = Question {
                prompt: &prompt,
                schema: schema.as_ref(),
                temperature,
                seed,
                limit,
                dry_multiplier,
                avoided: &avoided,
                spelled: &spelled,
            };
            let result = answer_in(&model, warm, &question).map_err(|detail| match detail {
                Failure::Inference(detail) => LlmError::LocalInference {
                    model: model_name.clone(),
                    detail,
                },
                Failure::Llm(error) => error,
            });
            // The caller may have gone; the answer then has nobody to go to.
            let _ = reply.send(result);
        });
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(job)
            .map_err(|_| {
                failed("the model's thread has stopped (an earlier generation panicked)")
            })?;
        answer
            .recv()
            .map_err(|_| failed("the model's thread stopped during the generation"))?
    }

    /// Forgets the prompts the contexts hold: the next question is decoded from its first token.
    pub fn forget_kept_prompt(&self) -> Result<(), LlmError> {
        let (reply, done) = mpsc::channel();
        let job: Job = Box::new(move |contexts: &mut Contexts<'_>| {
            for warm in &mut contexts.warm {
                warm.context.clear_kv_cache();
                warm.kept.clear();
            }
            let _ = reply.send(());
        });
        let stopped = || LlmError::LocalInference {
            model: self.identity.model.clone(),
            detail: "the model's thread has stopped".to_string(),
        };
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(job)
            .map_err(|_| stopped())?;
        done.recv().map_err(|_| stopped())
    }

    /// The tokens that are each one of `words` whole, as written inside a sentence or at its
    /// start (" worried", "worried", " Worried", "Worried"). A word the vocabulary splits into
    /// pieces is left out: barring its first piece would bar every word that starts with it.
    pub fn word_tokens(&self, words: &[String]) -> Vec<LlamaToken> {
        let vocab = self.model.vocab();
        let mut tokens: Vec<LlamaToken> = words
            .iter()
            .flat_map(|word| {
                let mut capitalised = word.chars();
                let capitalised: String = capitalised
                    .next()
                    .map(|first| first.to_uppercase().chain(capitalised).collect())
                    .unwrap_or_default();
                [word.clone(), capitalised]
            })
            .flat_map(|form| [format!(" {form}"), form])
            .filter_map(|form| single_token(&vocab, form.as_bytes()))
            .collect();
        tokens.sort_by_key(|token| token.0);
        tokens.dedup();
        tokens
    }

    /// The conversation in the model's own chat template, ending where the assistant speaks.
    fn tokenize_prompt(&self, conversation: &[Message]) -> Result<Vec<LlamaToken>, LlmError> {
        let mut messages = Vec::with_capacity(conversation.len());
        for (message_index, message) in conversation.iter().enumerate() {
            let mut texts = Vec::with_capacity(message.content.len());
            for part in &message.content {
                match part {
                    Part::Text(text) => texts.push(text.as_str()),
                    Part::ImagePng(_) => {
                        return Err(LlmError::LocalImagesUnsupported {
                            model: self.identity.model.clone(),
                            message_index,
                        });
                    }
                }
            }
            messages.push(
                chat_message(message.role.as_str(), &texts.join("\n")).map_err(|detail| {
                    LlmError::LocalInference {
                        model: self.identity.model.clone(),
                        detail: format!("message {message_index}: {detail}"),
                    }
                })?,
            );
        }
        if messages.is_empty() {
            return Err(LlmError::Config(
                "the conversation for the local model is empty; give it at least one message"
                    .to_string(),
            ));
        }
        let prompt = self
            .model
            .apply_chat_template(&self.chat_template, &messages, true)
            .map_err(|error| LlmError::LocalInference {
                model: self.identity.model.clone(),
                detail: format!("cannot apply the chat template ({error})"),
            })?;
        // The template writes the special tokens out as text; parse them back as tokens.
        Ok(self.model.vocab().tokenize(prompt.as_bytes(), true, true))
    }
}

/// Starts the thread that owns `model`'s context and runs its generations; returns where to send
/// them. The thread ends when the sender is dropped (with its backend).
fn spawn_model_thread(
    model: Arc<LlamaModel>,
    backend: &'static LlamaBackend,
    context_tokens: u32,
    threads: i32,
) -> Result<mpsc::Sender<Job>, String> {
    let (jobs, incoming) = mpsc::channel::<Job>();
    let (ready, started) = mpsc::channel::<Result<(), String>>();
    std::thread::Builder::new()
        .name("viss-llama".to_string())
        .spawn(move || {
            let run = u32::try_from(PROMPT_RUN_TOKENS).expect("a small constant");
            let params = context_params(context_tokens, run, threads);
            let mut contexts = Contexts {
                warm: Vec::with_capacity(KEPT_CONTEXTS),
                clock: 0,
            };
            for _ in 0..KEPT_CONTEXTS {
                match model.new_context(backend, params.clone()) {
                    Ok(context) => contexts.warm.push(Warm {
                        context,
                        kept: Vec::new(),
                        last_used: 0,
                    }),
                    Err(error) => {
                        let _ = ready.send(Err(error.to_string()));
                        return;
                    }
                }
            }
            let _ = ready.send(Ok(()));
            for job in incoming {
                job(&mut contexts);
            }
        })
        .map_err(|error| format!("cannot start its thread: {error}"))?;
    started
        .recv()
        .map_err(|_| "its thread ended while starting".to_string())??;
    Ok(jobs)
}

/// A context of `context_tokens` that decodes `batch_tokens` at a time (llama.cpp's batch and
/// micro-batch alike) on `threads` threads, for prompts and answers alike.
fn context_params(context_tokens: u32, batch_tokens: u32, threads: i32) -> LlamaContextParams {
    LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(context_tokens))
        .with_n_batch(batch_tokens)
        .with_n_ubatch(batch_tokens)
        .with_n_threads(threads)
        .with_n_threads_batch(threads)
}

/// One question as the model's thread answers it.
struct Question<'a> {
    prompt: &'a [LlamaToken],
    schema: Option<&'a Value>,
    temperature: f32,
    seed: Option<u64>,
    limit: usize,
    dry_multiplier: f32,
    /// Tokens never chosen.
    avoided: &'a [LlamaToken],
    /// Words never finished, however spelled ([`SpellingBar::words_of`]).
    spelled: &'a [Vec<u8>],
}

enum Failure {
    Inference(String),
    Llm(LlmError),
}

/// Answers `question` in `warm`'s context: keeps the whole prompt runs it shares with the prompt
/// before, decodes the rest run by run, then generates token by token.
fn answer_in(
    model: &LlamaModel,
    warm: &mut Warm<'_>,
    question: &Question<'_>,
) -> Result<LocalAnswer, Failure> {
    let result = decode_and_generate(model, warm, question);
    if result.is_err() {
        // Whatever the failure left in the cache is not to be trusted by the next question.
        warm.context.clear_kv_cache();
        warm.kept.clear();
    }
    result
}

fn decode_and_generate(
    model: &LlamaModel,
    warm: &mut Warm<'_>,
    question: &Question<'_>,
) -> Result<LocalAnswer, Failure> {
    let failed =
        |what: &str, error: &dyn std::fmt::Display| Failure::Inference(format!("{what} ({error})"));
    let Question { prompt, limit, .. } = *question;
    let mut chooser = new_chooser(model, question)?;

    let Some(last) = prompt.len().checked_sub(1) else {
        return Err(Failure::Inference("the prompt is empty".to_string()));
    };
    let prompt_started = Instant::now();
    let shared = warm
        .kept
        .iter()
        .zip(prompt)
        .take_while(|(kept, new)| kept == new)
        .count();
    // Whole runs only, and never the run with the last prompt token: its logits are needed.
    let reused = (shared.min(last) / PROMPT_RUN_TOKENS) * PROMPT_RUN_TOKENS;
    let position = |index: usize| u32::try_from(index).unwrap_or(u32::MAX);
    let removed = warm
        .context
        .clear_kv_cache_seq(Some(0), Some(position(reused)), None)
        .map_err(|error| failed("cannot trim the KV cache", &error))?;
    let reused = if removed {
        reused
    } else {
        warm.context.clear_kv_cache();
        0
    };
    warm.kept.truncate(reused);
    let mut batch = LlamaBatch::new(PROMPT_RUN_TOKENS, 1);
    for (run_index, run) in prompt[reused..].chunks(PROMPT_RUN_TOKENS).enumerate() {
        let start = reused + run_index * PROMPT_RUN_TOKENS;
        batch.clear();
        for (offset, token) in run.iter().enumerate() {
            let index = start + offset;
            batch
                .add(*token, position_of(index), &[0], index == last)
                .map_err(|error| failed("cannot fill the prompt batch", &error))?;
        }
        warm.context
            .decode(&mut batch)
            .map_err(|error| failed("decoding the prompt failed", &error))?;
        if run.len() == PROMPT_RUN_TOKENS {
            warm.kept.extend_from_slice(run);
        }
    }
    let prompt_seconds = prompt_started.elapsed().as_secs_f64();

    let generation_started = Instant::now();
    let vocab = model.vocab();
    let mut answer: Vec<LlamaToken> = Vec::new();
    let mut logits_index = batch.n_tokens() - 1;
    let mut stopped_at_token_limit = false;
    let mut respelling = Respelling::default();
    loop {
        if answer.len() >= limit {
            stopped_at_token_limit = true;
            break;
        }
        let here = answer.len();
        let token = match chooser
            .choose(&warm.context, logits_index, respelling.barred_at(here))
            .map_err(Failure::Llm)?
        {
            Some(token) => token,
            // Every way the grammar lets the answer go on starts the barred word: a name the
            // schema fixes. It is written.
            None => {
                respelling.forced.push(here);
                chooser
                    .choose(&warm.context, logits_index, &[])
                    .map_err(Failure::Llm)?
                    .ok_or_else(|| Failure::Llm(no_token_allowed()))?
            }
        };
        if let Some(begun) = chooser.barred_word_begun_at(token)
            && !respelling.forced.contains(&begun)
            && respelling.bars < MAX_RESPELLINGS
        {
            respelling.bar(begun, if begun == here { token } else { answer[begun] });
            if begun < here {
                // Back to where the word began, to write something else there.
                answer.truncate(begun);
                chooser = new_chooser(model, question)?;
                for token in &answer {
                    chooser.accept(*token).map_err(Failure::Llm)?;
                }
                let (before, at) = match begun.checked_sub(1) {
                    Some(previous) => (answer[previous], prompt.len() + previous),
                    None => (prompt[last], last),
                };
                let trimmed = warm
                    .context
                    .clear_kv_cache_seq(Some(0), Some(position(at)), None)
                    .map_err(|error| failed("cannot trim the KV cache", &error))?;
                if !trimmed {
                    return Err(Failure::Inference(
                        "the KV cache cannot be trimmed back to a barred word".to_string(),
                    ));
                }
                batch.clear();
                batch
                    .add(before, position_of(at), &[0], true)
                    .map_err(|error| failed("cannot fill the batch", &error))?;
                warm.context
                    .decode(&mut batch)
                    .map_err(|error| failed("decoding failed", &error))?;
                logits_index = 0;
            }
            continue;
        }
        chooser.accept(token).map_err(Failure::Llm)?;
        if vocab.is_eog(token) {
            break;
        }
        answer.push(token);
        if answer.len() >= limit {
            stopped_at_token_limit = true;
            break;
        }
        batch.clear();
        batch
            .add(
                token,
                position_of(prompt.len() + answer.len() - 1),
                &[0],
                true,
            )
            .map_err(|error| failed("cannot fill the batch", &error))?;
        warm.context
            .decode(&mut batch)
            .map_err(|error| failed("decoding failed", &error))?;
        logits_index = 0;
    }
    let generation_seconds = generation_started.elapsed().as_secs_f64();
    // Decoded as a whole: a character split across tokens is whole again. Lossy only matters
    // for an answer cut off inside a character.
    let text = String::from_utf8_lossy(&vocab.detokenize(&answer, false, false)).into_owned();
    Ok(LocalAnswer {
        text,
        prompt_tokens: prompt.len(),
        completion_tokens: answer.len(),
        stopped_at_token_limit,
        prompt_seconds,
        generation_seconds,
        reused_prompt_tokens: reused,
    })
}

/// What chooses `question`'s answer token by token, as it is before the first.
fn new_chooser<'m>(
    model: &'m LlamaModel,
    question: &Question<'_>,
) -> Result<TokenChooser<'m>, Failure> {
    let Question {
        schema,
        temperature,
        seed,
        limit,
        dry_multiplier,
        avoided,
        spelled,
        ..
    } = *question;
    let grammar = schema
        .map(|schema| grammar_sampler(model, schema))
        .transpose()
        .map_err(Failure::Llm)?;
    let dry = (dry_multiplier > 0.0).then(|| {
        LlamaSampler::dry(
            model,
            dry_multiplier,
            DRY_BASE,
            DRY_ALLOWED_LENGTH,
            // The whole answer (llama.cpp turns a negative window off, not to the context).
            i32::try_from(limit).unwrap_or(i32::MAX),
            DRY_SEQUENCE_BREAKERS,
        )
    });
    let avoid = (!avoided.is_empty()).then(|| {
        let biases: Vec<LlamaLogitBias> = avoided
            .iter()
            .map(|token| LlamaLogitBias::new(*token, f32::NEG_INFINITY))
            .collect();
        LlamaSampler::logit_bias(model.n_vocab(), &biases)
    });
    let mut chooser = TokenChooser::new(model, grammar, avoid, dry, temperature, seed);
    chooser.spelling = (!spelled.is_empty()).then(|| SpellingBar::new(spelled.to_vec()));
    Ok(chooser)
}

fn grammar_sampler(model: &LlamaModel, schema: &Value) -> Result<LlamaSampler, LlmError> {
    let mut schema = schema.clone();
    cap_free_text(&mut schema);
    let grammar = llama_cpp_2::json_schema_to_grammar(&schema.to_string()).map_err(|error| {
        LlmError::LocalSchema {
            detail: error.to_string(),
        }
    })?;
    LlamaSampler::grammar(model, &grammar, "root").map_err(|error| LlmError::LocalSchema {
        detail: format!("llama.cpp rejected the grammar made from it ({error})"),
    })
}

/// Longest free-text string the grammar lets the local model write. Greedy decoding of a small
/// model can fall into a loop inside a string and run to max_tokens; a bound in the grammar
/// makes it close the string and go on, and the validator still judges what it wrote. Only the
/// local grammar gets it: endpoints receive the schema as the stage wrote it.
/// 600 holds the four sentences a description may have; at 300 the default model's descriptions
/// were cut mid-sentence.
pub const LOCAL_MAX_STRING_CHARS: u64 = 600;

fn cap_free_text(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let is_free_string = map.get("type").and_then(Value::as_str) == Some("string")
                && !map.contains_key("enum")
                && !map.contains_key("pattern")
                && !map.contains_key("maxLength");
            if is_free_string {
                map.insert("maxLength".into(), Value::from(LOCAL_MAX_STRING_CHARS));
            }
            for value in map.values_mut() {
                cap_free_text(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(cap_free_text),
        _ => {}
    }
}

fn chat_message(role: &str, content: &str) -> Result<LlamaChatMessage, String> {
    LlamaChatMessage::new(role.to_string(), content.to_string())
        .map_err(|_| "it contains a NUL character, which llama.cpp cannot take".to_string())
}

fn position_of(index: usize) -> i32 {
    // Positions are below context_tokens, a u32 checked at load; i32 overflow would need a
    // context of two billion tokens.
    i32::try_from(index).unwrap_or(i32::MAX)
}

/// Picks each next token: greedy or seeded sampling, restricted to what the grammar allows.
struct TokenChooser<'m> {
    grammar: Option<LlamaSampler>,
    choice: Choice<'m>,
    spelling: Option<SpellingBar>,
}

/// Most tokens one answer bars where a barred word began; past it, what is written stays, for
/// the validator to judge.
const MAX_RESPELLINGS: usize = 24;

/// What one answer's generation has barred where, going back over barred words.
#[derive(Default)]
struct Respelling {
    /// By the answer's token index: tokens that began a barred word there.
    barred: HashMap<usize, Vec<LlamaToken>>,
    /// Token indices where the grammar left only barred words to write.
    forced: Vec<usize>,
    /// Tokens barred so far.
    bars: usize,
}

impl Respelling {
    fn barred_at(&self, index: usize) -> &[LlamaToken] {
        self.barred.get(&index).map_or(&[], Vec::as_slice)
    }

    /// Bars `token` at `index`; what was barred after it was barred in another answer's path.
    fn bar(&mut self, index: usize, token: LlamaToken) {
        self.barred.retain(|at, _| *at <= index);
        self.forced.retain(|at| *at <= index);
        self.barred.entry(index).or_default().push(token);
        self.bars += 1;
    }
}

/// Keeps an answer from writing barred words when the vocabulary spells them in several pieces
/// ("Noor" is " No" and "or" to Qwen), which a bar on single tokens cannot reach: barring a
/// first piece would bar every word that starts with it. Instead, when a token would finish a
/// barred word, the answer goes back to the token where the word began and bars that one there
/// ([`Respelling`]). Barring only the finishing token made the 1.5B model misspell the name
/// ("Noo wants to fix the van"); from the word's start it writes another word.
/// A word finishes with a piece that completes it, begun at a word boundary and ending at the
/// piece's end or before a character that is no letter or digit: a word the piece carries on
/// ("Noora", "Also" after "Al") is not the barred word. Case-insensitive for ASCII letters.
struct SpellingBar {
    /// The barred words, lowercased.
    words: Vec<Vec<u8>>,
    /// What the answer has written so far, ASCII-lowercased.
    written: Vec<u8>,
    /// Where each of the answer's tokens starts in `written`.
    token_starts: Vec<usize>,
}

impl SpellingBar {
    /// The words `avoid_words` bar, lowercased, without the empty.
    fn words_of(avoid_words: &[String]) -> Vec<Vec<u8>> {
        let mut words: Vec<Vec<u8>> = avoid_words
            .iter()
            .map(|word| word.trim().to_lowercase().into_bytes())
            .filter(|word| !word.is_empty())
            .collect();
        words.sort();
        words.dedup();
        words
    }

    fn new(words: Vec<Vec<u8>>) -> Self {
        Self {
            words,
            written: Vec::new(),
            token_starts: Vec::new(),
        }
    }

    /// Where in what is written the barred word that writing `piece` next would finish starts.
    fn finished_word_start(&self, piece: &[u8]) -> Option<usize> {
        let before = self.written.len();
        let mut text = self.written.clone();
        text.extend(piece.iter().map(u8::to_ascii_lowercase));
        let is_word_byte = |byte: u8| byte.is_ascii_alphanumeric() || byte >= 0x80;
        self.words.iter().find_map(|word| {
            let earliest = before.saturating_sub(word.len().saturating_sub(1));
            (earliest..text.len().saturating_sub(word.len() - 1)).find(|&start| {
                let end = start + word.len();
                end > before
                    && text[start..end] == word[..]
                    && (start == 0 || !is_word_byte(text[start - 1]))
                    && text.get(end).is_none_or(|next| !is_word_byte(*next))
            })
        })
    }

    /// The index of the token that wrote byte `start`; the next token's for a byte not yet
    /// written.
    fn token_holding(&self, start: usize) -> usize {
        if start >= self.written.len() {
            return self.token_starts.len();
        }
        self.token_starts
            .iter()
            .rposition(|token_start| *token_start <= start)
            .unwrap_or(0)
    }

    fn accept(&mut self, piece: &[u8]) {
        self.token_starts.push(self.written.len());
        self.written
            .extend(piece.iter().map(u8::to_ascii_lowercase));
    }
}

/// What picks a token from the model's scores: barred tokens and DRY first, then greedy or
/// seeded sampling.
struct Choice<'m> {
    model: &'m LlamaModel,
    /// Barred tokens (logit bias to minus infinity).
    bar: Option<LlamaSampler>,
    dry: Option<LlamaSampler>,
    pick: LlamaSampler,
    /// Per token DRY has penalised: the tokens that spell its start (see [`respellings`]).
    respelled: HashMap<LlamaToken, Vec<LlamaToken>>,
    /// The scores before DRY, kept between tokens: one vocabulary's worth (150k) a token.
    before_dry: Vec<f32>,
}

impl<'m> TokenChooser<'m> {
    /// `bar` and `dry` act on the model's scores before `temperature` and `seed` pick from them.
    fn new(
        model: &'m LlamaModel,
        grammar: Option<LlamaSampler>,
        bar: Option<LlamaSampler>,
        dry: Option<LlamaSampler>,
        temperature: f32,
        seed: Option<u64>,
    ) -> Self {
        let pick = if temperature > 0.0 {
            let seed = match seed {
                Some(seed) => fold_seed(seed),
                None => fastrand::u32(..LLAMA_RANDOM_SEED),
            };
            LlamaSampler::chain_simple([LlamaSampler::temp(temperature), LlamaSampler::dist(seed)])
        } else {
            LlamaSampler::greedy()
        };
        Self {
            grammar,
            choice: Choice {
                model,
                bar,
                dry,
                pick,
                respelled: HashMap::new(),
                before_dry: Vec::new(),
            },
            spelling: None,
        }
    }

    /// The next token, `barred` out of the running; `None` when the grammar allows only barred
    /// tokens.
    fn choose(
        &mut self,
        context: &LlamaContext<'_>,
        logits_index: i32,
        barred: &[LlamaToken],
    ) -> Result<Option<LlamaToken>, LlmError> {
        if barred.is_empty() {
            self.preferred(context, logits_index).map(Some)
        } else {
            self.preferred_without(context, logits_index, barred)
        }
    }

    /// Where the barred word that `token` would finish began: the index of the answer's token
    /// that holds its first letter (the answer's length when `token` does).
    fn barred_word_begun_at(&self, token: LlamaToken) -> Option<usize> {
        let spelling = self.spelling.as_ref()?;
        let piece = self.choice.model.vocab().token_to_piece(token, false, None);
        spelling
            .finished_word_start(&piece)
            .map(|start| spelling.token_holding(start))
    }

    /// Makes `token` the answer's next.
    fn accept(&mut self, token: LlamaToken) -> Result<(), LlmError> {
        if let Some(grammar) = &mut self.grammar {
            grammar
                .try_accept(token)
                .map_err(|error| LlmError::LocalSchema {
                    detail: format!("the grammar refused a token it had allowed ({error})"),
                })?;
        }
        self.choice.accept(token);
        if let Some(spelling) = &mut self.spelling {
            let piece = self.choice.model.vocab().token_to_piece(token, false, None);
            spelling.accept(&piece);
        }
        Ok(())
    }

    /// The token chosen from the model's scores that the grammar allows.
    ///
    /// The grammar is checked against the token the model prefers first, and applied to the whole
    /// vocabulary (150k tokens, the slow part) only when that token breaks it. Both ways give the
    /// same distribution: greedy's favourite that the grammar allows is its favourite among the
    /// allowed; a sample drawn again from the allowed set after a disallowed draw lands on each
    /// allowed token with probability p / P(allowed), as sampling from the allowed set would.
    fn preferred(
        &mut self,
        context: &LlamaContext<'_>,
        logits_index: i32,
    ) -> Result<LlamaToken, LlmError> {
        let mut candidates = context.token_data_array_ith(logits_index);
        self.choice.choose(&mut candidates);
        let token = selected(&candidates)?;
        let Some(grammar) = &mut self.grammar else {
            return Ok(token);
        };
        let mut single =
            LlamaTokenDataArray::new(vec![LlamaTokenData::new(token, 0.0, 0.0)], false);
        single.apply_sampler(grammar);
        let allowed = single
            .data
            .first()
            .is_some_and(|data| data.logit().is_finite());
        if allowed {
            return Ok(token);
        }
        let mut candidates = context.token_data_array_ith(logits_index);
        candidates.apply_sampler(grammar);
        self.choice.choose(&mut candidates);
        selected(&candidates)
    }

    /// [`Self::preferred`] with `barred` out of the running as well; `None` when nothing else is
    /// left (the grammar allows only barred tokens).
    fn preferred_without(
        &mut self,
        context: &LlamaContext<'_>,
        logits_index: i32,
        barred: &[LlamaToken],
    ) -> Result<Option<LlamaToken>, LlmError> {
        let mut candidates = context.token_data_array_ith(logits_index);
        if let Some(grammar) = &mut self.grammar {
            candidates.apply_sampler(grammar);
        }
        for data in &mut candidates.data {
            if barred.contains(&data.id()) {
                data.set_logit(f32::NEG_INFINITY);
            }
        }
        self.choice.score(&mut candidates);
        if !candidates.data.iter().any(|data| data.logit().is_finite()) {
            return Ok(None);
        }
        candidates.apply_sampler(&mut self.choice.pick);
        selected(&candidates).map(Some)
    }
}

impl Choice<'_> {
    fn accept(&mut self, token: LlamaToken) {
        for sampler in [&mut self.bar, &mut self.dry].into_iter().flatten() {
            sampler.accept(token);
        }
        self.pick.accept(token);
    }

    fn choose(&mut self, candidates: &mut LlamaTokenDataArray) {
        self.score(candidates);
        candidates.apply_sampler(&mut self.pick);
    }

    /// The model's scores with barred tokens out and DRY's penalties applied.
    fn score(&mut self, candidates: &mut LlamaTokenDataArray) {
        if let Some(bar) = &mut self.bar {
            candidates.apply_sampler(bar);
        }
        if let Some(dry) = &mut self.dry {
            let before = &mut self.before_dry;
            before.clear();
            before.extend(candidates.data.iter().map(LlamaTokenData::logit));
            candidates.apply_sampler(dry);
            let penalised: Vec<(LlamaToken, f32)> = candidates
                .data
                .iter()
                .zip(before.iter())
                .filter(|(after, before)| after.logit() < **before)
                .map(|(after, before)| (after.id(), before - after.logit()))
                .collect();
            if !penalised.is_empty() {
                let vocab = self.model.vocab();
                let mut penalties: HashMap<LlamaToken, f32> = HashMap::new();
                for (token, penalty) in penalised {
                    let spellings = self.respelled.entry(token).or_insert_with(|| {
                        respellings(&vocab.token_to_piece(token, false, None), |piece| {
                            single_token(&vocab, piece)
                        })
                    });
                    for spelling in spellings.iter() {
                        let entry = penalties.entry(*spelling).or_insert(0.0);
                        *entry = entry.max(penalty);
                    }
                }
                for (data, before) in candidates.data.iter_mut().zip(before.iter()) {
                    if let Some(penalty) = penalties.get(&data.id()) {
                        // A token DRY penalised itself keeps the larger of the two penalties.
                        data.set_logit(data.logit().min(before - penalty));
                    }
                }
            }
        }
    }
}

/// The tokens that spell the start of `piece`, with or without its leading space: DRY bars the
/// token that would continue a run the answer already wrote, and a small model then writes the
/// same word in other pieces instead (measured: "kerb" then "the" for " the", giving "kerbthe";
/// " ke" then "erb" for " kerb"; " any" then " thing" for " anything"). Penalising each of them
/// as much as the token itself leaves the model to write something else. `single_token` says
/// which token, if one, a byte string is.
fn respellings(
    piece: &[u8],
    single_token: impl Fn(&[u8]) -> Option<LlamaToken>,
) -> Vec<LlamaToken> {
    let bare = piece.strip_prefix(b" ").unwrap_or(piece);
    let spaced = [b" ".as_slice(), bare].concat();
    let mut tokens: Vec<LlamaToken> = (1..=bare.len())
        .flat_map(|end| [&bare[..end], &spaced[..=end]])
        // Not the bare space, nor a cut inside a UTF-8 character.
        .filter(|prefix| !prefix.trim_ascii().is_empty() && std::str::from_utf8(prefix).is_ok())
        .filter_map(single_token)
        .collect();
    tokens.sort_by_key(|token| token.0);
    tokens.dedup();
    tokens
}

/// The token that is exactly `text`, if the vocabulary holds it as one.
fn single_token(vocab: &LlamaVocab<'_>, text: &[u8]) -> Option<LlamaToken> {
    match vocab.tokenize(text, false, false)[..] {
        [token] => Some(token),
        _ => None,
    }
}

fn selected(candidates: &LlamaTokenDataArray) -> Result<LlamaToken, LlmError> {
    candidates.selected_token().ok_or_else(no_token_allowed)
}

fn no_token_allowed() -> LlmError {
    LlmError::LocalSchema {
        detail: "no token satisfies the grammar at this point; the schema may be unsatisfiable"
            .to_string(),
    }
}

/// llama.cpp seeds with 32 bits; both halves of the caller's seed count.
fn fold_seed(seed: u64) -> u32 {
    let folded = (seed ^ (seed >> 32)) as u32;
    if folded == LLAMA_RANDOM_SEED {
        folded - 1
    } else {
        folded
    }
}

/// Speed of one local generation, for `viss bench`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThroughputReport {
    pub model: String,
    pub threads: usize,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub prompt_seconds: f64,
    pub generation_seconds: f64,
    pub prompt_tokens_per_second: f64,
    pub generation_tokens_per_second: f64,
}

/// llama.cpp's own speed on this machine with this model, as `llama-bench` measures it: a
/// prompt of `prompt_tokens` decoded in one batch into an empty cache (pp512 for 512), then
/// `generated_tokens` chosen greedily one at a time with no grammar (tg128 for 128). The ceiling
/// a pipeline's prompts and answers are held against.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReferenceRates {
    pub threads: usize,
    pub prompt_tokens: usize,
    pub prompt_tokens_per_second: f64,
    pub generated_tokens: usize,
    pub generation_tokens_per_second: f64,
    /// The weights' bytes, all read once for every generated token.
    pub model_bytes: u64,
    pub model_parameters: u64,
}

impl LocalBackend {
    /// Measures [`ReferenceRates`] in a context of its own, on the model's thread (so no
    /// generation runs beside it). Run it twice and keep the second: the first maps the weights.
    pub fn reference_rates(
        &self,
        prompt_tokens: usize,
        generated_tokens: usize,
    ) -> Result<ReferenceRates, LlmError> {
        let model = Arc::clone(&self.model);
        let threads = self.threads;
        let failed = |detail: String| LlmError::LocalInference {
            model: self.identity.model.clone(),
            detail,
        };
        let backend = llama_backend().map_err(&failed)?;
        let (reply, answer) = mpsc::channel();
        let job: Job = Box::new(move |_: &mut Contexts<'_>| {
            let _ = reply.send(measure_reference(
                &model,
                backend,
                threads,
                prompt_tokens,
                generated_tokens,
            ));
        });
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(job)
            .map_err(|_| failed("the model's thread has stopped".to_string()))?;
        answer
            .recv()
            .map_err(|_| failed("the model's thread stopped while measuring".to_string()))?
            .map_err(failed)
    }
}

fn measure_reference(
    model: &LlamaModel,
    backend: &LlamaBackend,
    threads: i32,
    prompt_tokens: usize,
    generated_tokens: usize,
) -> Result<ReferenceRates, String> {
    let batch_tokens = u32::try_from(prompt_tokens.max(1)).map_err(|e| e.to_string())?;
    let context_tokens =
        u32::try_from(prompt_tokens + generated_tokens + 8).map_err(|e| e.to_string())?;
    let params = context_params(context_tokens, batch_tokens, threads);
    let mut context = model
        .new_context(backend, params)
        .map_err(|e| format!("cannot create a context ({e})"))?;
    // Ordinary words, repeated: what the tokens say does not change the arithmetic.
    let text = "The train stopped outside the station for two hours and nobody said a word. "
        .repeat(prompt_tokens / 8 + 1);
    let mut prompt = model.vocab().tokenize(text.as_bytes(), false, false);
    prompt.truncate(prompt_tokens);
    let mut batch = LlamaBatch::new(prompt.len().max(1), 1);
    for (index, token) in prompt.iter().enumerate() {
        batch
            .add(*token, position_of(index), &[0], index + 1 == prompt.len())
            .map_err(|e| e.to_string())?;
    }
    let started = Instant::now();
    context.decode(&mut batch).map_err(|e| e.to_string())?;
    let prompt_seconds = started.elapsed().as_secs_f64();
    let mut greedy = LlamaSampler::greedy();
    let mut logits_index = batch.n_tokens() - 1;
    let started = Instant::now();
    for step in 0..generated_tokens {
        let token = greedy.sample(&context, logits_index);
        batch.clear();
        batch
            .add(token, position_of(prompt.len() + step), &[0], true)
            .map_err(|e| e.to_string())?;
        context.decode(&mut batch).map_err(|e| e.to_string())?;
        logits_index = 0;
    }
    let generation_seconds = started.elapsed().as_secs_f64();
    Ok(ReferenceRates {
        threads: usize::try_from(threads).unwrap_or(0),
        prompt_tokens: prompt.len(),
        prompt_tokens_per_second: prompt.len() as f64 / prompt_seconds.max(f64::EPSILON),
        generated_tokens,
        generation_tokens_per_second: generated_tokens as f64
            / generation_seconds.max(f64::EPSILON),
        model_bytes: model.size(),
        model_parameters: model.n_params(),
    })
}

/// Times one schema-constrained, greedy generation for a prompt of about `prompt_tokens` tokens
/// and an answer of up to `answer_tokens`. A short generation first maps the weights in, so the
/// numbers are the steady state and not the first read of the file.
pub fn measure_throughput(
    backend: &LocalBackend,
    prompt_tokens: usize,
    answer_tokens: u32,
) -> Result<ThroughputReport, LlmError> {
    let schema = json!({
        "type": "object",
        "properties": {
            "lines": {"type": "array", "items": {"type": "string"}},
            "mood": {"enum": ["calm", "tense", "cheerful"]}
        },
        "required": ["lines", "mood"]
    });
    backend.generate(&[Message::user("Say hi.")], None, 0.0, None, Some(1))?;
    const SCENE: [&str; 4] = [
        "ANNA: You said you would be home by eight, and it is nearly midnight.",
        "BEN: The train stopped outside the station for two hours; my phone was dead.",
        "ANNA: You could have borrowed one. Everybody on that train had a phone.",
        "BEN: I know. I am sorry. I sat there thinking about how worried you would be.",
    ];
    let mut scene = String::new();
    let mut conversation = Vec::new();
    for line in SCENE.iter().cycle() {
        scene.push_str(line);
        scene.push('\n');
        conversation = vec![
            Message::system("You rewrite film dialogue. Answer with JSON only."),
            Message::user(format!(
                "Rewrite every line of this scene in plainer words, one string per line, \
                 and say how the scene feels.\n\n{scene}"
            )),
        ];
        if backend.prompt_tokens(&conversation)? >= prompt_tokens {
            break;
        }
    }
    let answer = backend.generate(&conversation, Some(&schema), 0.0, None, Some(answer_tokens))?;
    let per_second = |tokens: usize, seconds: f64| {
        if seconds > 0.0 {
            tokens as f64 / seconds
        } else {
            0.0
        }
    };
    Ok(ThroughputReport {
        model: backend.identity.model.clone(),
        threads: usize::try_from(backend.threads).unwrap_or(0),
        prompt_tokens: answer.prompt_tokens,
        completion_tokens: answer.completion_tokens,
        prompt_seconds: answer.prompt_seconds,
        generation_seconds: answer.generation_seconds,
        prompt_tokens_per_second: per_second(answer.prompt_tokens, answer.prompt_seconds),
        generation_tokens_per_second: per_second(
            answer.completion_tokens,
            answer.generation_seconds,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use viss_models::ModelCache;

    /// The fetched Qwen GGUF, loaded once per test process ($VISS_MODELS as everywhere), one
    /// test at a time: two llama.cpp generations at once on two cores spin against each other
    /// and together take more than twice as long as one after the other.
    fn shared_backend() -> ModelTurn {
        static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let turn = TURN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ModelTurn {
            _turn: turn,
            backend: loaded_backend(),
        }
    }

    struct ModelTurn {
        _turn: std::sync::MutexGuard<'static, ()>,
        backend: &'static LocalBackend,
    }

    impl std::ops::Deref for ModelTurn {
        type Target = LocalBackend;
        fn deref(&self) -> &LocalBackend {
            self.backend
        }
    }

    fn loaded_backend() -> &'static LocalBackend {
        static BACKEND: OnceLock<LocalBackend> = OnceLock::new();
        BACKEND.get_or_init(|| {
            // The smallest built-in model: these tests are of the backend (grammar, kept
            // prompts, DRY, seeds), which runs every GGUF the same way.
            let gguf = ModelCache::from_env()
                .and_then(|cache| {
                    cache.ensure_named_local_llm(&viss_models::QWEN2_5_CODER_0_5B_INSTRUCT_Q4_K_M)
                })
                .expect("fetch the local LLM");
            let config = LocalConfig {
                context_tokens: 2048,
                max_tokens: 256,
                ..LocalConfig::new(gguf)
            };
            LocalBackend::load(&config).expect("load the local LLM")
        })
    }

    fn labelling_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "speaker": {"type": "string"},
                "emotion": {"enum": ["joy", "anger", "sadness", "fear", "neutral"]},
                "cue_words": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["speaker", "emotion", "cue_words"],
            "additionalProperties": false
        })
    }

    fn labelling_conversation() -> Vec<Message> {
        vec![
            Message::system("You label lines of film dialogue. Answer with JSON only."),
            Message::user(
                "Line: MARY (shouting, slamming the door): Get out of my house, now!\n\
                 Who speaks, which emotion (joy, anger, sadness, fear or neutral) does the line \
                 show, \
                 and which words of the line show it?",
            ),
        ]
    }

    fn assert_matches_labelling_schema(text: &str) {
        let value: Value =
            serde_json::from_str(text).unwrap_or_else(|error| panic!("{error}: {text}"));
        let object = value
            .as_object()
            .unwrap_or_else(|| panic!("not an object: {text}"));
        let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["cue_words", "emotion", "speaker"], "{text}");
        assert!(object["speaker"].is_string(), "{text}");
        let emotion = object["emotion"]
            .as_str()
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            ["joy", "anger", "sadness", "fear", "neutral"].contains(&emotion),
            "{text}"
        );
        let cues = object["cue_words"]
            .as_array()
            .unwrap_or_else(|| panic!("{text}"));
        assert!(cues.iter().all(Value::is_string), "{text}");
    }

    #[test]
    fn schema_constrained_answer_parses_and_matches_the_schema() {
        let backend = shared_backend();
        let schema = labelling_schema();
        let conversation = labelling_conversation();
        let greedy = backend
            .generate(&conversation, Some(&schema), 0.0, None, None)
            .unwrap();
        assert!(!greedy.stopped_at_token_limit, "{greedy:?}");
        assert_matches_labelling_schema(&greedy.text);
        assert!(
            greedy.prompt_tokens > 40 && greedy.completion_tokens > 5,
            "{greedy:?}"
        );
        assert_eq!(
            greedy.prompt_tokens,
            backend.prompt_tokens(&conversation).unwrap()
        );
        // The prompt is read, not just the schema obeyed. (Which emotion a 0.5B model picks is
        // not asserted.)
        let value: Value = serde_json::from_str(&greedy.text).unwrap();
        assert!(
            value["speaker"]
                .as_str()
                .unwrap()
                .to_uppercase()
                .contains("MARY"),
            "{}",
            greedy.text
        );

        // Greedy is deterministic; seeded sampling is reproducible and still obeys the schema.
        let again = backend
            .generate(&conversation, Some(&schema), 0.0, None, None)
            .unwrap();
        assert_eq!(again.text, greedy.text);
        let sampled = backend
            .generate(&conversation, Some(&schema), 1.0, Some(7), None)
            .unwrap();
        assert_matches_labelling_schema(&sampled.text);
        let resampled = backend
            .generate(&conversation, Some(&schema), 1.0, Some(7), None)
            .unwrap();
        assert_eq!(sampled.text, resampled.text);
    }

    #[test]
    fn a_prompt_sharing_the_start_of_the_last_reuses_it_and_answers_as_if_asked_first() {
        let backend = shared_backend();
        let scene =
            "Line: MARY (shouting, slamming the door): Get out of my house, now!\n".repeat(40);
        let asking = |question: &str| {
            vec![
                Message::system("You label lines of film dialogue. Answer with JSON only."),
                Message::user(format!("{scene}{question}")),
            ]
        };
        let ask = |question: &str| {
            backend
                .generate(
                    &asking(question),
                    Some(&labelling_schema()),
                    0.0,
                    None,
                    Some(40),
                )
                .unwrap()
        };
        backend.forget_kept_prompt().unwrap();
        let first = ask("Who speaks in the first line, and with which emotion?");
        assert_eq!(first.reused_prompt_tokens, 0);
        // A question about another scene in between takes another context.
        let other = backend
            .generate(
                &labelling_conversation(),
                Some(&labelling_schema()),
                0.0,
                None,
                Some(40),
            )
            .unwrap();
        assert_eq!(other.reused_prompt_tokens, 0);
        let question = "Which words of the last line show the emotion, and who speaks it?";
        let second = ask(question);
        assert!(
            second.reused_prompt_tokens >= 3 * PROMPT_RUN_TOKENS
                && second.reused_prompt_tokens < second.prompt_tokens,
            "{second:?}"
        );
        backend.forget_kept_prompt().unwrap();
        let fresh = ask(question);
        assert_eq!(fresh.reused_prompt_tokens, 0);
        assert_eq!(second.text, fresh.text, "the kept runs change nothing");
        // The same question again keeps all but the run with its last token.
        let again = ask(question);
        assert_eq!(again.text, fresh.text);
        assert_eq!(
            again.reused_prompt_tokens,
            (again.prompt_tokens - 1) / PROMPT_RUN_TOKENS * PROMPT_RUN_TOKENS
        );
    }

    #[test]
    fn token_limit_cuts_the_answer_and_says_so() {
        let backend = shared_backend();
        let answer = backend
            .generate(
                &labelling_conversation(),
                Some(&labelling_schema()),
                0.0,
                None,
                Some(3),
            )
            .unwrap();
        assert_eq!(answer.completion_tokens, 3);
        assert!(answer.stopped_at_token_limit);
        assert!(answer.text.starts_with('{'), "{answer:?}");
    }

    /// How many times the answer's most repeated 4-word run occurs.
    fn most_repeated_run(text: &str) -> usize {
        let words: Vec<&str> = text.split_whitespace().collect();
        let mut counts = std::collections::HashMap::new();
        for run in words.windows(4) {
            *counts.entry(run.join(" ")).or_insert(0) += 1;
        }
        counts.into_values().max().unwrap_or(0)
    }

    #[test]
    fn the_dry_penalty_breaks_a_repeating_answer() {
        let turn = shared_backend();
        let conversation = [Message::user(
            "Write the sentence \"the van is parked on the kerb\" ten times, separated by \
             spaces, and nothing else.",
        )];
        let plain = turn
            .generate(&conversation, None, 0.0, None, Some(80))
            .unwrap();
        let with_dry = LocalBackend::load(&LocalConfig {
            dry_multiplier: 0.8,
            ..turn.config().clone()
        })
        .unwrap();
        let penalised = with_dry
            .generate(&conversation, None, 0.0, None, Some(80))
            .unwrap();
        assert!(
            most_repeated_run(&plain.text) >= 5,
            "the prompt should make the model repeat: {}",
            plain.text
        );
        assert!(
            most_repeated_run(&penalised.text) < most_repeated_run(&plain.text),
            "without DRY: {}\nwith DRY: {}",
            plain.text,
            penalised.text
        );
    }

    #[test]
    fn the_dry_penalty_does_not_glue_a_word_to_the_one_before() {
        let turn = shared_backend();
        let with_dry = LocalBackend::load(&LocalConfig {
            dry_multiplier: 0.8,
            ..turn.config().clone()
        })
        .unwrap();
        let conversation = [Message::user(
            "Repeat \"the box is on the stairs\" eight times on one line.",
        )];
        let answer = with_dry
            .generate(&conversation, None, 0.0, None, Some(100))
            .unwrap();
        // Barred from writing " box" after "The" again, the model wrote "box" without its
        // space ("Thebox", "Theboxes") until the penalty covered each spelling of the word.
        let glued = answer.text.split_whitespace().find(|word| {
            let word = word.to_lowercase();
            let parts = ["the", "box", "is", "on", "stairs"];
            word.len() > 3
                && parts.iter().any(|part| word.starts_with(part))
                && parts
                    .iter()
                    .any(|part| word.ends_with(part) && !word.starts_with(part))
        });
        assert_eq!(glued, None, "with DRY: {}", answer.text);
    }

    #[test]
    fn a_penalised_token_is_penalised_in_every_spelling_of_its_start() {
        let vocabulary = [
            " anything",
            "anything",
            " any",
            "any",
            " an",
            "a",
            " thing",
            " ",
        ];
        let token_of = |piece: &[u8]| {
            vocabulary
                .iter()
                .position(|known| known.as_bytes() == piece)
                .map(|index| LlamaToken(index as i32))
        };
        let spelled = |tokens: Vec<LlamaToken>| -> Vec<&str> {
            tokens.iter().map(|t| vocabulary[t.0 as usize]).collect()
        };
        // The word itself with and without its space, and each start of it; never the bare
        // space, nor a token spelling something else (" thing").
        assert_eq!(
            spelled(respellings(b" anything", token_of)),
            [" anything", "anything", " any", "any", " an", "a"]
        );
        assert_eq!(
            spelled(respellings(b"any", token_of)),
            [" any", "any", " an", "a"]
        );
        // A cut inside a UTF-8 character is no spelling.
        assert!(
            respellings(" é".as_bytes(), |piece| (piece == b" \xc3")
                .then_some(LlamaToken(0)))
            .is_empty()
        );
    }

    #[test]
    fn an_avoided_word_that_is_one_token_is_never_written() {
        let turn = shared_backend();
        let conversation = [Message::user(
            "Repeat this sentence exactly and write nothing else: Noor says he is worried about \
             the van and worried about the deposit.",
        )];
        let plain = turn
            .generate(&conversation, None, 0.0, None, Some(40))
            .unwrap();
        assert!(
            plain.text.matches(" worried").count() >= 2,
            "the prompt should make the model write the word: {}",
            plain.text
        );
        let avoid = ["worried".to_string()];
        // Qwen's vocabulary holds " worried" whole; "Worried" is three pieces, left to the
        // validator.
        assert_eq!(turn.word_tokens(&avoid).len(), 1);
        let avoiding = turn
            .generate_avoiding(&conversation, None, 0.0, None, Some(40), &avoid)
            .unwrap();
        assert!(!avoiding.text.contains(" worried"), "{}", avoiding.text);
        assert!(turn.word_tokens(&["zqxjkworried".to_string()]).is_empty());
    }

    #[test]
    fn a_barred_word_is_finished_only_whole_and_at_a_word_boundary() {
        let mut bar = SpellingBar::new(SpellingBar::words_of(&["Noor".into(), "Al".into()]));
        bar.accept(b"{\"goal\": \"To help");
        bar.accept(b" No");
        // The word starts after the space of " No", at byte 18, in the answer's second token.
        assert_eq!(bar.finished_word_start(b"or"), Some(18));
        assert_eq!(bar.token_holding(18), 1);
        assert_eq!(bar.token_holding(bar.written.len()), 2);
        assert!(bar.finished_word_start(b"OR.").is_some());
        assert!(bar.finished_word_start(b"or\"").is_some());
        // Another word that starts the same way is no barred word.
        assert!(bar.finished_word_start(b"ora").is_none());
        assert!(bar.finished_word_start(b"o").is_none());
        let mut inside = SpellingBar::new(SpellingBar::words_of(&["Noor".into()]));
        inside.accept(b"Mano");
        assert!(inside.finished_word_start(b"or").is_none());
        let mut short = SpellingBar::new(SpellingBar::words_of(&["Al".into()]));
        short.accept(b"said ");
        assert!(short.finished_word_start(b"Al").is_some());
        assert!(short.finished_word_start(b"al,").is_some());
        assert!(short.finished_word_start(b"Also").is_none());
        assert!(short.finished_word_start(b"Alison").is_none());
        // Whole in one piece after a boundary the answer already wrote.
        assert!(short.finished_word_start(b"AL ").is_some());
    }

    #[test]
    fn a_barred_word_spelled_in_several_tokens_is_never_written_unless_the_grammar_forces_it() {
        let turn = shared_backend();
        let vocab = turn.model.vocab();
        assert!(
            vocab.tokenize(b" Noor", false, false).len() > 1,
            "the test needs a name the vocabulary spells in pieces"
        );
        let conversation = [Message::user(
            "Write one sentence saying that Noor wants to fix the van before Noor's landlord \
             comes. Use the name Noor twice.",
        )];
        let plain = turn
            .generate(&conversation, None, 0.0, None, Some(40))
            .unwrap();
        assert!(plain.text.contains("Noor"), "{}", plain.text);
        let avoid = ["Noor".to_string()];
        assert!(turn.word_tokens(&avoid).is_empty());
        let avoiding = turn
            .generate_avoiding(&conversation, None, 0.0, None, Some(40), &avoid)
            .unwrap();
        let words = |text: &str| -> Vec<String> {
            text.split(|c: char| !c.is_alphanumeric())
                .map(str::to_lowercase)
                .collect()
        };
        // Nor misspelt: the answer went back to where the name began.
        assert!(
            !words(&avoiding.text)
                .iter()
                .any(|word| word.starts_with("noo")),
            "{}",
            avoiding.text
        );
        // A name the schema fixes is written all the same, and the free text still avoids it.
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"const": "Noor"},
                "sentence": {"type": "string", "maxLength": 200}
            },
            "required": ["name", "sentence"],
            "additionalProperties": false
        });
        let forced = turn
            .generate_avoiding(&conversation, Some(&schema), 0.0, None, Some(80), &avoid)
            .unwrap();
        let value: Value = serde_json::from_str(&forced.text).unwrap();
        assert_eq!(value["name"], "Noor", "{}", forced.text);
        let sentence = value["sentence"].as_str().unwrap();
        assert!(!words(sentence).contains(&"noor".to_string()), "{sentence}");
    }

    #[test]
    fn identity_names_the_file_and_its_contents() {
        let backend = shared_backend();
        let identity = backend.identity();
        assert_eq!(identity.base_url, LOCAL_BASE_URL);
        let (name, hash) = identity.model.split_once('@').unwrap();
        assert_eq!(name, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
        assert_eq!(hash.len(), 16);
        assert!(hash.bytes().all(|byte| byte.is_ascii_hexdigit()), "{hash}");
        assert_eq!(
            local_identity(&backend.config().model_path, 0.0).unwrap(),
            identity
        );

        let scratch = tempfile::tempdir().unwrap();
        let (first, second) = (scratch.path().join("a"), scratch.path().join("b"));
        std::fs::create_dir_all(&first).unwrap();
        std::fs::create_dir_all(&second).unwrap();
        std::fs::write(first.join("model.gguf"), b"GGUF one").unwrap();
        std::fs::write(second.join("model.gguf"), b"GGUF two").unwrap();
        let one = local_identity(&first.join("model.gguf"), 0.0).unwrap();
        assert_ne!(
            one,
            local_identity(&second.join("model.gguf"), 0.0).unwrap()
        );
        // Where the file lies is not part of it: a moved model keeps its cached answers.
        std::fs::write(second.join("model.gguf"), b"GGUF one").unwrap();
        assert_eq!(
            one,
            local_identity(&second.join("model.gguf"), 0.0).unwrap()
        );
        // The DRY penalty changes every answer, so it is part of the identity.
        let with_dry = local_identity(&first.join("model.gguf"), 0.8).unwrap();
        assert_eq!(with_dry.model, format!("{}+dry0.8+respelled", one.model));
    }

    #[test]
    fn images_are_refused_with_a_clear_error() {
        let backend = shared_backend();
        let conversation = [
            Message::system("Describe what you see."),
            Message::user_parts(vec![
                Part::Text("What is in this frame?".into()),
                Part::ImagePng(vec![0x89, b'P', b'N', b'G']),
            ]),
        ];
        let error = backend
            .generate(&conversation, None, 0.0, None, None)
            .unwrap_err();
        assert!(
            matches!(
                error,
                LlmError::LocalImagesUnsupported {
                    message_index: 1,
                    ..
                }
            ),
            "{error}"
        );
        let message = error.to_string();
        assert!(
            message.contains("reads text only") && message.contains("qwen2.5"),
            "{message}"
        );
    }

    #[test]
    fn a_prompt_longer_than_the_context_is_refused() {
        let backend = shared_backend();
        let long = "The night was long and the rain did not stop. ".repeat(300);
        let error = backend
            .generate(&[Message::user(long)], None, 0.0, None, None)
            .unwrap_err();
        assert!(
            matches!(
                error,
                LlmError::LocalPromptTooLong {
                    context_tokens: 2048,
                    ..
                }
            ),
            "{error}"
        );
        assert!(error.to_string().contains("context_tokens"), "{error}");
    }

    #[test]
    fn missing_and_broken_model_files_are_explained() {
        let scratch = tempfile::tempdir().unwrap();
        let missing = scratch.path().join("absent.gguf");
        let error = LocalBackend::load(&LocalConfig::new(&missing)).unwrap_err();
        assert!(matches!(error, LlmError::LocalModel { .. }), "{error}");
        let message = error.to_string();
        assert!(
            message.contains("absent.gguf") && message.contains("viss models fetch"),
            "{message}"
        );

        #[cfg(unix)]
        {
            let looped = scratch.path().join("loop.gguf");
            std::os::unix::fs::symlink(&looped, &looped).unwrap();
            let message = LocalBackend::load(&LocalConfig::new(&looped))
                .unwrap_err()
                .to_string();
            assert!(
                message.contains("loop.gguf: it is a symlink loop"),
                "{message}"
            );
        }

        let broken = scratch.path().join("broken.gguf");
        std::fs::write(&broken, b"GGUF\x03\x00\x00\x00 and then nothing sensible").unwrap();
        let error = LocalBackend::load(&LocalConfig::new(&broken)).unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, LlmError::LocalModel { .. }), "{message}");
        assert!(
            message.contains("broken.gguf") && message.contains("could not load"),
            "{message}"
        );
    }

    #[test]
    fn config_has_defaults_and_rejects_unknown_fields() {
        let config: LocalConfig = toml::from_str(r#"model_path = "/models/q.gguf""#).unwrap();
        assert_eq!(config, LocalConfig::new("/models/q.gguf"));
        assert_eq!(
            (config.context_tokens, config.threads, config.max_tokens),
            (4096, 0, 1024)
        );
        let error =
            toml::from_str::<LocalConfig>("model_path = \"q.gguf\"\ncontext = 10").unwrap_err();
        assert!(error.to_string().contains("unknown field"), "{error}");
    }

    #[test]
    fn throughput_is_measured_for_a_400_token_prompt() {
        let turn = shared_backend();
        let config = LocalConfig {
            threads: 2,
            ..turn.config().clone()
        };
        let backend = LocalBackend::load(&config).unwrap();
        let report = measure_throughput(&backend, 400, 150).unwrap();
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
        assert!((400..480).contains(&report.prompt_tokens), "{report:?}");
        assert!(report.completion_tokens > 20, "{report:?}");
        assert!(report.prompt_tokens_per_second > 0.0 && report.generation_tokens_per_second > 0.0);
        assert_eq!(report.threads, 2);
    }

    #[test]
    fn reference_rates_decode_the_whole_prompt_at_once_and_name_the_weights_read() {
        let turn = shared_backend();
        let rates = turn.reference_rates(64, 8).unwrap();
        assert_eq!((rates.prompt_tokens, rates.generated_tokens), (64, 8));
        assert!(rates.prompt_tokens_per_second > 0.0 && rates.generation_tokens_per_second > 0.0);
        let file_bytes = std::fs::metadata(&turn.config().model_path).unwrap().len();
        // The tensors are nearly the whole GGUF file.
        assert!(rates.model_bytes <= file_bytes && rates.model_bytes > file_bytes / 2);
        assert!(rates.model_parameters > 100_000_000, "{rates:?}");
    }

    /// What `viss bench local-llm` rests on: a recorded greedy question, asked again, gets the
    /// answer recorded, word for word.
    #[test]
    fn a_recorded_question_asked_again_gets_the_recorded_answer() {
        use crate::local_record::{Question, Recorder, read_recording};
        let turn = shared_backend();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("questions.jsonl");
        let recorder = Recorder::append_to(&path).unwrap();
        let schema = json!({"type": "object", "properties": {"mood": {"type": "string"}},
                            "required": ["mood"]});
        let conversation = [
            Message::system("Answer with JSON only."),
            Message::user("How does this line feel? \"You said eight, and it is midnight.\""),
        ];
        let answer = turn
            .generate(&conversation, Some(&schema), 0.0, None, Some(40))
            .unwrap();
        let question = Question {
            step: Some("mood"),
            conversation: &conversation,
            schema: Some(&schema),
            temperature: 0.0,
            seed: None,
            max_tokens: Some(40),
            avoid_words: &[],
        };
        recorder.record(question, &answer);
        let recorded = read_recording(&path).unwrap();
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].step.as_deref(), Some("mood"));
        turn.forget_kept_prompt().unwrap();
        let again = turn
            .generate(
                &recorded[0].conversation(),
                recorded[0].schema.as_ref(),
                recorded[0].temperature,
                recorded[0].seed,
                recorded[0].max_tokens,
            )
            .unwrap();
        assert_eq!(again.text, recorded[0].answer);
        std::fs::write(&path, "{\"step\": 3}\n").unwrap();
        let error = read_recording(&path).unwrap_err().to_string();
        assert!(error.contains("questions.jsonl line 1"), "{error}");
    }

    #[test]
    fn backend_can_be_shared_across_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<LocalBackend>();
    }

    #[test]
    fn seeds_never_become_the_random_seed() {
        assert_ne!(fold_seed(u64::from(u32::MAX)), LLAMA_RANDOM_SEED);
        assert_ne!(fold_seed(1), fold_seed(2));
        assert_ne!(fold_seed(1), fold_seed(1 << 32 | 2));
    }

    /// The casts' ages rest on it: a decoder schema's integer bounds become the grammar's, so
    /// the embedded model cannot write an age outside them.
    #[test]
    fn llama_cpp_grammars_keep_integers_within_their_bounds() {
        let schema = r#"{"type": "object", "properties": {"age": {"type": "integer",
            "minimum": 30, "maximum": 45}}, "required": ["age"], "additionalProperties": false}"#;
        let grammar = llama_cpp_2::json_schema_to_grammar(schema).unwrap();
        let age_rule = grammar
            .lines()
            .find(|line| line.starts_with("age ::="))
            .unwrap_or_else(|| panic!("no age rule in {grammar}"));
        assert!(age_rule.contains("[0-5]"), "{age_rule}");
        assert!(!age_rule.contains("integer"), "{age_rule}");
    }
}

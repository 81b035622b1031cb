//! Sentence embeddings through ONNX Runtime.
//!
//! Both embedders run any BERT-style encoder exported to ONNX whose graph yields per-token
//! states `[batch, seq, dim]` (all-MiniLM-L6-v2 by default, BGE-M3 when configured), pool them
//! into one vector per text and L2-normalise it, so cosine similarity is a dot product:
//! [`FastembedSentenceEmbedder`] (the default, [`EmbedderLibrary::Fastembed`]) through the
//! fastembed crate, and [`OnnxSentenceEmbedder`] (viss's own loop over `ort`, kept as the
//! reference `viss bench embed` compares against). [`load`] picks one by the options;
//! [`embed_cached`] puts a content-addressed cache in front of any embedder.

mod fastembed_embedder;

pub use fastembed_embedder::FastembedSentenceEmbedder;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ort::session::{Session, SessionInputValue};
use ort::value::{Tensor, TensorElementType, ValueType};
use tokenizers::Tokenizer;
use tokenizers::utils::truncation::TruncationParams;

use viss_engine::hash::ContentHash;
use viss_models::TextEmbedderFiles;
use viss_models::onnx_runtime::{self, OnnxRuntimeError};

/// Turns texts into unit-length vectors. Implementations must be deterministic for a given
/// [`identity`](SentenceEmbedder::identity): cached vectors are reused on that promise.
pub trait SentenceEmbedder: Send + Sync {
    /// Stable description of everything that shapes the vectors (model bytes, tokenizer,
    /// pooling, truncation); part of every cache key.
    fn identity(&self) -> String;
    fn dim(&self) -> usize;
    /// One vector per text, in the order given.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error(transparent)]
    OnnxRuntime(#[from] OnnxRuntimeError),

    #[error(
        "cannot read model file {path}: {source}; run `viss models fetch` or fix the path in the \
         config"
    )]
    ReadModelFile {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error(
        "cannot load ONNX model {model}: {reason}; the file may be incomplete (run `viss models \
         fetch`) or not an ONNX model"
    )]
    LoadModel { model: PathBuf, reason: String },

    #[error(
        "cannot load tokenizer {tokenizer}: {reason}; it must be a Hugging Face tokenizer.json \
         that belongs to the model"
    )]
    LoadTokenizer { tokenizer: PathBuf, reason: String },

    #[error("ONNX model {model} cannot be used as a sentence embedder: {reason}")]
    UnsupportedModel { model: PathBuf, reason: String },

    #[error("tokenizer {tokenizer} failed on a text: {reason}")]
    Tokenize { tokenizer: PathBuf, reason: String },

    #[error("running ONNX model {model} failed: {reason}")]
    Inference { model: PathBuf, reason: String },

    #[error("ONNX model {model} returned {reason}")]
    UnexpectedOutput { model: PathBuf, reason: String },
}

/// How token states become one sentence vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// Average of the states of real (unmasked) tokens: sentence-transformers MiniLM models.
    #[default]
    Mean,
    /// The first token's state: BGE / BGE-M3 dense embeddings.
    Cls,
}

impl fmt::Display for Pooling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
        })
    }
}

/// Which library turns token states into sentence vectors. Both read the same files and give
/// the same vectors to within float rounding (`viss bench embed` measures both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmbedderLibrary {
    /// The fastembed crate's user-defined text model.
    #[default]
    Fastembed,
    /// viss's own tokenise, batch and pool loop over `ort`.
    Ort,
}

impl EmbedderLibrary {
    /// What opens the identity of this library's embedders. fastembed's names the minor version
    /// Cargo.lock pins: another release may tokenise, pad or pool differently.
    fn identity_prefix(self) -> &'static str {
        match self {
            EmbedderLibrary::Fastembed => "fastembed/7.7",
            EmbedderLibrary::Ort => "onnx-sentence-embedder/v2",
        }
    }
}

impl fmt::Display for EmbedderLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EmbedderLibrary::Fastembed => "fastembed",
            EmbedderLibrary::Ort => "ort",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SentenceEmbedderOptions {
    /// "fastembed" (the default) or "ort"; part of the embedder's identity, so switching
    /// re-embeds.
    pub library: EmbedderLibrary,
    /// Texts longer than this many tokens (special tokens included) are truncated; 2 to 8192
    /// (BGE-M3 reads 8192, MiniLM 512).
    pub max_tokens: usize,
    /// Texts per ONNX Runtime call, 1 to 1024.
    pub batch_size: usize,
    /// ONNX Runtime intra-op threads, 0 to 256: 0 (the default) is one per core, and more than
    /// the cores are lowered to their count. Alignment embeds an episode's texts in one go, and
    /// on one thread a cold build waits on it (a season's align: about 34 s on one of two cores,
    /// 20 s on both).
    pub intra_threads: usize,
    pub pooling: Pooling,
}

impl Default for SentenceEmbedderOptions {
    fn default() -> Self {
        Self {
            library: EmbedderLibrary::default(),
            max_tokens: 256,
            batch_size: 32,
            intra_threads: 0,
            pooling: Pooling::Mean,
        }
    }
}

impl viss_engine::range::Validate for SentenceEmbedderOptions {
    fn validate(&self) -> Result<(), viss_engine::range::BadSetting> {
        use viss_engine::range::{Range, check};
        check("max_tokens", self.max_tokens, Range::new(2.0, 8192.0))?;
        check("batch_size", self.batch_size, Range::new(1.0, 1024.0))?;
        check(
            "intra_threads",
            self.intra_threads,
            viss_engine::range::THREADS,
        )
    }
}

/// The token inputs a BERT-style graph may declare; only the declared ones are fed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokenInput {
    InputIds,
    AttentionMask,
    TokenTypeIds,
}

impl TokenInput {
    fn from_name(name: &str) -> Option<Self> {
        match name {
            "input_ids" => Some(Self::InputIds),
            "attention_mask" => Some(Self::AttentionMask),
            "token_type_ids" => Some(Self::TokenTypeIds),
            _ => None,
        }
    }
}

/// Output names that carry per-token states in common exports, in order of preference.
const TOKEN_STATE_OUTPUTS: &[&str] = &["last_hidden_state", "token_embeddings"];

pub struct OnnxSentenceEmbedder {
    /// `Session::run` needs `&mut`: ONNX Runtime sessions are not safe to run concurrently.
    session: Mutex<Session>,
    tokenizer: Tokenizer,
    /// (graph input name, what to feed it), in the graph's declared order.
    fed_inputs: Vec<(String, TokenInput)>,
    output_name: String,
    dim: usize,
    identity: String,
    model_path: PathBuf,
    tokenizer_path: PathBuf,
    options: SentenceEmbedderOptions,
}

/// One tokenised text, before padding.
struct TokenizedText {
    ids: Vec<i64>,
    type_ids: Vec<i64>,
}

impl OnnxSentenceEmbedder {
    /// Loads the model whose [`identity_of`] the caller computed (hashing a large model's file
    /// once is enough).
    pub fn open(
        onnx_runtime_library: &Path,
        model_onnx: &Path,
        tokenizer_json: &Path,
        options: SentenceEmbedderOptions,
        identity: String,
    ) -> Result<Self, EmbedError> {
        let unsupported = |reason: String| EmbedError::UnsupportedModel {
            model: model_onnx.to_path_buf(),
            reason,
        };
        if options.max_tokens < 2 || options.batch_size == 0 {
            return Err(unsupported(format!(
                "options must have max_tokens >= 2 and batch_size >= 1 (got {options:?})"
            )));
        }
        let environment = onnx_runtime::environment(onnx_runtime_library)?;
        let load_error = |error: ort::Error| EmbedError::LoadModel {
            model: model_onnx.to_path_buf(),
            reason: error.to_string(),
        };
        let session = Session::builder(&environment)
            .map_err(load_error)?
            .with_intra_threads(viss_engine::range::threads(options.intra_threads))
            .map_err(|error| load_error(error.into()))?
            .with_inter_threads(1)
            .map_err(|error| load_error(error.into()))?
            .commit_from_file(model_onnx)
            .map_err(load_error)?;

        let mut fed_inputs = Vec::new();
        for input in session.inputs() {
            let Some(kind) = TokenInput::from_name(input.name()) else {
                return Err(unsupported(format!(
                    "it declares input `{}`, but only input_ids, attention_mask and token_type_ids \
                     can be fed",
                    input.name()
                )));
            };
            if input.dtype().tensor_type() != Some(TensorElementType::Int64) {
                return Err(unsupported(format!(
                    "input `{}` has type {:?}; only int64 token tensors are supported",
                    input.name(),
                    input.dtype()
                )));
            }
            fed_inputs.push((input.name().to_string(), kind));
        }
        if !fed_inputs
            .iter()
            .any(|(_, kind)| *kind == TokenInput::InputIds)
        {
            return Err(unsupported("it has no `input_ids` input".to_string()));
        }

        let (output_name, output_type) =
            choose_token_state_output(&session).map_err(unsupported)?;
        let dim = match output_type.tensor_shape().map(|shape| shape.to_vec()) {
            Some(shape) if shape.len() == 3 && shape[2] > 0 => shape[2] as usize,
            // A symbolic hidden size is learnt from a first run below.
            Some(shape) if shape.len() == 3 => 0,
            other => {
                return Err(unsupported(format!(
                    "output `{output_name}` has shape {other:?}; expected token states [batch, \
                     seq, dim]"
                )));
            }
        };
        if output_type.tensor_type() != Some(TensorElementType::Float32) {
            return Err(unsupported(format!(
                "output `{output_name}` is {output_type:?}; only float32 is supported"
            )));
        }

        let mut tokenizer =
            Tokenizer::from_file(tokenizer_json).map_err(|error| EmbedError::LoadTokenizer {
                tokenizer: tokenizer_json.to_path_buf(),
                reason: error.to_string(),
            })?;
        // tokenizer.json files often pad every text to a fixed length (MiniLM's pads to 128);
        // padding per batch here is cheaper and pooling ignores padding anyway.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: options.max_tokens,
                ..TruncationParams::default()
            }))
            .map_err(|error| EmbedError::LoadTokenizer {
                tokenizer: tokenizer_json.to_path_buf(),
                reason: error.to_string(),
            })?;

        let mut embedder = Self {
            session: Mutex::new(session),
            tokenizer,
            fed_inputs,
            output_name,
            dim,
            identity,
            model_path: model_onnx.to_path_buf(),
            tokenizer_path: tokenizer_json.to_path_buf(),
            options,
        };
        if embedder.dim == 0 {
            let probe = embedder.embed_unique(&["dimension probe"])?;
            embedder.dim = probe[0].len();
        }
        Ok(embedder)
    }

    pub fn options(&self) -> &SentenceEmbedderOptions {
        &self.options
    }

    pub fn model_path(&self) -> &Path {
        &self.model_path
    }

    fn tokenize(&self, text: &str) -> Result<TokenizedText, EmbedError> {
        let encoding = self
            .tokenizer
            .encode(text, true)
            .map_err(|error| EmbedError::Tokenize {
                tokenizer: self.tokenizer_path.clone(),
                reason: error.to_string(),
            })?;
        Ok(TokenizedText {
            ids: encoding.get_ids().iter().map(|&id| i64::from(id)).collect(),
            type_ids: encoding
                .get_type_ids()
                .iter()
                .map(|&id| i64::from(id))
                .collect(),
        })
    }

    /// Embeds texts that are already distinct, batching texts of similar length together.
    fn embed_unique(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let tokenized = texts
            .iter()
            .map(|text| self.tokenize(text))
            .collect::<Result<Vec<_>, _>>()?;
        // Sorting by length keeps padding (wasted compute) small within each batch.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&index| tokenized[index].ids.len());

        let mut vectors: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        for batch in order.chunks(self.options.batch_size) {
            let batch_texts: Vec<&TokenizedText> =
                batch.iter().map(|&index| &tokenized[index]).collect();
            let pooled = self.run_batch(&batch_texts)?;
            for (&index, vector) in batch.iter().zip(pooled) {
                vectors[index] = vector;
            }
        }
        Ok(vectors)
    }

    fn run_batch(&self, batch: &[&TokenizedText]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let batch_size = batch.len();
        let seq_len = batch
            .iter()
            .map(|text| text.ids.len())
            .max()
            .unwrap_or(0)
            .max(1);
        let mut ids = vec![0i64; batch_size * seq_len];
        let mut mask = vec![0i64; batch_size * seq_len];
        let mut type_ids = vec![0i64; batch_size * seq_len];
        for (row, text) in batch.iter().enumerate() {
            let start = row * seq_len;
            let count = text.ids.len();
            ids[start..start + count].copy_from_slice(&text.ids);
            type_ids[start..start + count].copy_from_slice(&text.type_ids);
            mask[start..start + count].fill(1);
        }

        let inference_error = |error: ort::Error| EmbedError::Inference {
            model: self.model_path.clone(),
            reason: error.to_string(),
        };
        let mut inputs: Vec<(Cow<'_, str>, SessionInputValue<'_>)> =
            Vec::with_capacity(self.fed_inputs.len());
        for (name, kind) in &self.fed_inputs {
            let data = match kind {
                TokenInput::InputIds => ids.clone(),
                TokenInput::AttentionMask => mask.clone(),
                TokenInput::TokenTypeIds => type_ids.clone(),
            };
            let tensor =
                Tensor::from_array(([batch_size, seq_len], data)).map_err(inference_error)?;
            inputs.push((Cow::Borrowed(name.as_str()), tensor.into()));
        }

        let mut session = self
            .session
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let outputs = session.run(inputs).map_err(inference_error)?;
        let output =
            outputs
                .get(&self.output_name)
                .ok_or_else(|| EmbedError::UnexpectedOutput {
                    model: self.model_path.clone(),
                    reason: format!("no output named `{}`", self.output_name),
                })?;
        let (shape, states) = output
            .try_extract_tensor::<f32>()
            .map_err(inference_error)?;
        let expected_prefix = [batch_size as i64, seq_len as i64];
        if shape.len() != 3
            || shape[..2] != expected_prefix
            || (self.dim != 0 && shape[2] as usize != self.dim)
        {
            return Err(EmbedError::UnexpectedOutput {
                model: self.model_path.clone(),
                reason: format!(
                    "`{}` with shape {:?}; expected [{batch_size}, {seq_len}, {}]",
                    self.output_name,
                    &shape[..],
                    self.dim
                ),
            });
        }
        let dim = shape[2] as usize;
        Ok((0..batch_size)
            .map(|row| {
                let row_states = &states[row * seq_len * dim..(row + 1) * seq_len * dim];
                let row_mask = &mask[row * seq_len..(row + 1) * seq_len];
                let mut vector = pool(row_states, row_mask, dim, self.options.pooling);
                l2_normalise(&mut vector);
                vector
            })
            .collect())
    }
}

impl SentenceEmbedder for OnnxSentenceEmbedder {
    fn identity(&self) -> String {
        self.identity.clone()
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        embed_each_distinct_once(texts, |unique| self.embed_unique(unique))
    }
}

/// Subtitles repeat ("Yeah.", "What?"): each distinct text is embedded once per call, by
/// `embed_unique`, and its vector copied to every place it occurs.
fn embed_each_distinct_once(
    texts: &[&str],
    embed_unique: impl FnOnce(&[&str]) -> Result<Vec<Vec<f32>>, EmbedError>,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    let mut slot_by_hash: HashMap<ContentHash, usize> = HashMap::new();
    let mut unique_texts: Vec<&str> = Vec::new();
    let slots: Vec<usize> = texts
        .iter()
        .map(|text| {
            *slot_by_hash
                .entry(ContentHash::of(text.as_bytes()))
                .or_insert_with(|| {
                    unique_texts.push(text);
                    unique_texts.len() - 1
                })
        })
        .collect();
    let unique_vectors = embed_unique(&unique_texts)?;
    Ok(slots
        .into_iter()
        .map(|slot| unique_vectors[slot].clone())
        .collect())
}

/// The identity of the embedder [`load`] gives for these files and options, without loading it
/// (so a build with nothing to embed does not pay for the model): the library, the files'
/// content hashes and every option that changes a vector. The output a model's vectors are
/// pooled from is chosen from the model file, so its hash covers that choice.
pub fn identity_of(
    files: &TextEmbedderFiles,
    options: &SentenceEmbedderOptions,
) -> Result<String, EmbedError> {
    Ok(format!(
        "{} model-blake3={} tokenizer-blake3={} pooling={} max-tokens={} l2-normalised",
        options.library.identity_prefix(),
        hash_file(&files.model_onnx)?.to_hex(),
        hash_file(&files.tokenizer_json)?.to_hex(),
        options.pooling,
        options.max_tokens
    ))
}

/// Loads the embedder `options.library` names. `identity` is [`identity_of`] the same files and
/// options when the caller has it (hashing a large model once is enough).
pub fn load(
    files: &TextEmbedderFiles,
    options: SentenceEmbedderOptions,
    identity: Option<String>,
) -> Result<Arc<dyn SentenceEmbedder>, EmbedError> {
    let identity = match identity {
        Some(identity) => identity,
        None => identity_of(files, &options)?,
    };
    Ok(match options.library {
        EmbedderLibrary::Fastembed => Arc::new(FastembedSentenceEmbedder::open(
            &files.onnx_runtime_library,
            &files.model_onnx,
            &files.tokenizer_json,
            options,
            identity,
        )?),
        EmbedderLibrary::Ort => Arc::new(OnnxSentenceEmbedder::open(
            &files.onnx_runtime_library,
            &files.model_onnx,
            &files.tokenizer_json,
            options,
            identity,
        )?),
    })
}

impl fmt::Debug for OnnxSentenceEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OnnxSentenceEmbedder")
            .field("model", &self.model_path)
            .field("tokenizer", &self.tokenizer_path)
            .field("dim", &self.dim)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn choose_token_state_output(session: &Session) -> Result<(String, ValueType), String> {
    let outputs = session.outputs();
    let by_name = TOKEN_STATE_OUTPUTS
        .iter()
        .find_map(|wanted| outputs.iter().find(|output| output.name() == *wanted));
    let rank_three = || {
        let mut candidates = outputs.iter().filter(|output| {
            output
                .dtype()
                .tensor_shape()
                .is_some_and(|shape| shape.len() == 3)
        });
        match (candidates.next(), candidates.next()) {
            (Some(only), None) => Some(only),
            _ => None,
        }
    };
    by_name
        .or_else(rank_three)
        .map(|output| (output.name().to_string(), output.dtype().clone()))
        .ok_or_else(|| {
            let names: Vec<&str> = outputs.iter().map(|output| output.name()).collect();
            format!(
                "none of its outputs {names:?} is a token-state tensor (last_hidden_state [batch, \
                 seq, dim])"
            )
        })
}

/// Pools one text's token states (`seq × dim`, row-major) into a vector of `dim`.
fn pool(states: &[f32], mask: &[i64], dim: usize, pooling: Pooling) -> Vec<f32> {
    match pooling {
        Pooling::Cls => states[..dim].to_vec(),
        Pooling::Mean => {
            let mut sum = vec![0f32; dim];
            let mut count = 0usize;
            for (token_states, &attended) in states.chunks_exact(dim).zip(mask) {
                if attended != 0 {
                    count += 1;
                    for (total, value) in sum.iter_mut().zip(token_states) {
                        *total += value;
                    }
                }
            }
            // Same guard as sentence-transformers (clamp the count at a tiny epsilon).
            let count = count.max(1) as f32;
            sum.iter_mut().for_each(|total| *total /= count);
            sum
        }
    }
}

/// Scales `vector` to unit length; false (and unchanged) when it is all zeros.
pub fn l2_normalise(vector: &mut [f32]) -> bool {
    let norm = vector.iter().map(|value| value * value).sum::<f32>().sqrt();
    if norm > 1e-12 {
        vector.iter_mut().for_each(|value| *value /= norm);
        true
    } else {
        false
    }
}

/// Cosine similarity; for unit vectors from a [`SentenceEmbedder`] this is the dot product.
pub fn cosine(left: &[f32], right: &[f32]) -> f32 {
    let dot: f32 = left.iter().zip(right).map(|(a, b)| a * b).sum();
    let left_norm = left.iter().map(|a| a * a).sum::<f32>().sqrt();
    let right_norm = right.iter().map(|b| b * b).sum::<f32>().sqrt();
    if left_norm == 0.0 || right_norm == 0.0 {
        0.0
    } else {
        dot / (left_norm * right_norm)
    }
}

fn hash_file(path: &Path) -> Result<ContentHash, EmbedError> {
    let read_error = |source| EmbedError::ReadModelFile {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(file).map_err(read_error)?;
    Ok(ContentHash::from_hasher(&hasher))
}

/// Stores vectors by key; the project backs this with its content-addressed store.
pub trait EmbeddingCache {
    fn get(&self, key: &ContentHash) -> Option<Vec<f32>>;
    fn put(&self, key: &ContentHash, vector: &[f32]);
}

/// An in-memory cache, for tests and one-off runs.
#[derive(Debug, Default)]
pub struct MemoryEmbeddingCache {
    vectors: Mutex<HashMap<ContentHash, Vec<f32>>>,
}

impl MemoryEmbeddingCache {
    pub fn len(&self) -> usize {
        self.vectors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl EmbeddingCache for MemoryEmbeddingCache {
    fn get(&self, key: &ContentHash) -> Option<Vec<f32>> {
        self.vectors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(key)
            .cloned()
    }

    fn put(&self, key: &ContentHash, vector: &[f32]) {
        self.vectors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(*key, vector.to_vec());
    }
}

/// blake3(identity ‖ NUL ‖ text): NUL cannot occur in the identity, so no two (identity, text)
/// pairs share a key.
pub fn embedding_cache_key(identity: &str, text: &str) -> ContentHash {
    let mut hasher = blake3::Hasher::new();
    hasher.update(identity.as_bytes());
    hasher.update(b"\0");
    hasher.update(text.as_bytes());
    ContentHash::from_hasher(&hasher)
}

/// Embeds `texts`, reusing cached vectors and embedding (once each) only the texts not cached.
pub fn embed_cached<E, C, T>(
    embedder: &E,
    cache: &C,
    texts: &[T],
) -> Result<Vec<Vec<f32>>, EmbedError>
where
    E: SentenceEmbedder + ?Sized,
    C: EmbeddingCache + ?Sized,
    T: AsRef<str>,
{
    let identity = embedder.identity();
    let dim = embedder.dim();
    let keys: Vec<ContentHash> = texts
        .iter()
        .map(|text| embedding_cache_key(&identity, text.as_ref()))
        .collect();
    let mut vectors: Vec<Option<Vec<f32>>> = keys
        .iter()
        // A vector of the wrong length cannot come from this embedder: treat it as a miss.
        .map(|key| cache.get(key).filter(|vector| vector.len() == dim))
        .collect();

    let missing: Vec<usize> = (0..texts.len())
        .filter(|&index| vectors[index].is_none())
        .collect();
    if !missing.is_empty() {
        let missing_texts: Vec<&str> = missing.iter().map(|&index| texts[index].as_ref()).collect();
        let fresh = embedder.embed(&missing_texts)?;
        if fresh.len() != missing.len() {
            return Err(EmbedError::UnexpectedOutput {
                model: PathBuf::from(identity),
                reason: format!("{} vectors for {} texts", fresh.len(), missing.len()),
            });
        }
        // A text repeated within the call is stored once.
        let mut stored: HashSet<ContentHash> = HashSet::new();
        for (index, vector) in missing.into_iter().zip(fresh) {
            if stored.insert(keys[index]) {
                cache.put(&keys[index], &vector);
            }
            vectors[index] = Some(vector);
        }
    }
    Ok(vectors
        .into_iter()
        .map(|vector| vector.unwrap_or_default())
        .collect())
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use viss_models::ALL_MINILM_L6_V2_INT8;

    /// One embedder per library and test process: the fetch runs once and ONNX Runtime loads
    /// once.
    fn minilm_from(library: EmbedderLibrary) -> &'static dyn SentenceEmbedder {
        static FASTEMBED: OnceLock<Arc<dyn SentenceEmbedder>> = OnceLock::new();
        static ORT: OnceLock<Arc<dyn SentenceEmbedder>> = OnceLock::new();
        let cell = match library {
            EmbedderLibrary::Fastembed => &FASTEMBED,
            EmbedderLibrary::Ort => &ORT,
        };
        cell.get_or_init(|| {
            let files =
                viss_models::ensure_text_embedder().expect("fetch the default text embedder");
            let options = SentenceEmbedderOptions {
                library,
                ..SentenceEmbedderOptions::default()
            };
            load(&files, options, None).expect("load MiniLM")
        })
        .as_ref()
    }

    /// The default embedder.
    fn minilm() -> &'static dyn SentenceEmbedder {
        minilm_from(EmbedderLibrary::default())
    }

    const LIBRARIES: [EmbedderLibrary; 2] = [EmbedderLibrary::Fastembed, EmbedderLibrary::Ort];

    fn max_abs_difference(left: &[Vec<f32>], right: &[Vec<f32>]) -> f32 {
        left.iter()
            .zip(right)
            .flat_map(|(a, b)| a.iter().zip(b).map(|(x, y)| (x - y).abs()))
            .fold(0.0, f32::max)
    }

    /// Issue 19: one thread made a cold align wait on embedding; the default is every core.
    #[test]
    fn the_embedder_uses_every_core_by_default() {
        let options = SentenceEmbedderOptions::default();
        assert_eq!(options.intra_threads, 0);
        assert_eq!(
            viss_engine::range::threads(options.intra_threads),
            viss_engine::range::cores()
        );
        // The identity is known without loading the model, and it is the loaded one's.
        let files = viss_models::ensure_text_embedder().unwrap();
        for library in LIBRARIES {
            let options = SentenceEmbedderOptions {
                library,
                ..SentenceEmbedderOptions::default()
            };
            let before = identity_of(&files, &options).unwrap();
            assert_eq!(before, minilm_from(library).identity());
        }
    }

    /// Issue 22: align's embeddings moved to fastembed; on the same files it must give the
    /// vectors viss's own loop gave, or cached vectors and alignments would silently change.
    #[test]
    fn fastembed_is_the_default_and_gives_the_vectors_of_the_ort_loop() {
        assert_eq!(
            SentenceEmbedderOptions::default().library,
            EmbedderLibrary::Fastembed
        );
        let texts = [
            "The lighthouse keeper waved at the ferry.",
            "",
            "Hmm.",
            "Hmm.",
            "I TOLD you the dent was there before, didn't I?",
            &"a very long line that runs on ".repeat(80),
        ];
        let fastembed = minilm_from(EmbedderLibrary::Fastembed);
        let ort = minilm_from(EmbedderLibrary::Ort);
        assert_eq!(fastembed.dim(), ort.dim());
        let from_fastembed = fastembed.embed(&texts).unwrap();
        let from_ort = ort.embed(&texts).unwrap();
        for ((text, a), b) in texts.iter().zip(&from_fastembed).zip(&from_ort) {
            assert!(cosine(a, b) > 0.99999, "{text:?}: cosine {}", cosine(a, b));
        }
        assert!(max_abs_difference(&from_fastembed, &from_ort) < 1e-4);
        // Different libraries are different cache keys, although their vectors agree.
        assert!(fastembed.identity().starts_with("fastembed/"));
        assert_ne!(fastembed.identity(), ort.identity());
    }

    #[test]
    fn vectors_have_384_dimensions_and_unit_norm() {
        let embedder = minilm();
        assert_eq!(embedder.dim(), 384);
        let vectors = embedder
            .embed(&["The lighthouse keeper waved at the ferry.", "", "Hmm."])
            .unwrap();
        for vector in &vectors {
            assert_eq!(vector.len(), 384);
            let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
        }
        assert!(embedder.embed(&[]).unwrap().is_empty());
    }

    #[test]
    fn paraphrases_score_higher_than_unrelated_lines() {
        let embedder = minilm();
        let vectors = embedder
            .embed(&[
                "I forgot my umbrella, so I got soaked on the way home.",
                "I left my umbrella behind and walked home drenched in the rain.",
                "The quarterly tax forms are due at the end of the month.",
                "Could you pass me the salt, please?",
                "Would you hand me the salt?",
            ])
            .unwrap();
        let umbrella_paraphrase = cosine(&vectors[0], &vectors[1]);
        let umbrella_vs_tax = cosine(&vectors[0], &vectors[2]);
        let salt_paraphrase = cosine(&vectors[3], &vectors[4]);
        let salt_vs_umbrella = cosine(&vectors[3], &vectors[1]);
        eprintln!(
            "umbrella paraphrase {umbrella_paraphrase:.3}, umbrella vs tax {umbrella_vs_tax:.3}, \
             salt paraphrase {salt_paraphrase:.3}, salt vs umbrella {salt_vs_umbrella:.3}"
        );
        assert!(
            umbrella_paraphrase > umbrella_vs_tax + 0.2,
            "{umbrella_paraphrase} vs {umbrella_vs_tax}"
        );
        assert!(
            salt_paraphrase > salt_vs_umbrella + 0.2,
            "{salt_paraphrase} vs {salt_vs_umbrella}"
        );
    }

    #[test]
    fn batching_order_and_duplicates_do_not_change_vectors() {
        let embedder = minilm();
        let lines = [
            "Get in the car. Now!",
            "We need to talk about what happened at the wedding last weekend.",
            "Yeah.",
            "Is that your final answer?",
            "Yeah.",
            "Nobody leaves this room until I find out who took the necklace from the safe.",
            "Get in the car. Now!",
        ];
        let together = embedder.embed(&lines).unwrap();
        let one_by_one: Vec<Vec<f32>> = lines
            .iter()
            .map(|line| embedder.embed(&[line]).unwrap().remove(0))
            .collect();
        let batch_vs_single = max_abs_difference(&together, &one_by_one);
        eprintln!("max |batch - one by one| = {batch_vs_single:e}");
        assert!(batch_vs_single < 1e-5);

        let mut reversed_lines = lines;
        reversed_lines.reverse();
        let mut reversed = embedder.embed(&reversed_lines).unwrap();
        reversed.reverse();
        assert!(max_abs_difference(&together, &reversed) < 1e-5);
        assert_eq!(
            together[2], together[4],
            "duplicates get the identical vector"
        );

        // Small batches force several ONNX Runtime calls within one embed call.
        let files = viss_models::ensure_text_embedder().unwrap();
        let small_batches = load(
            &files,
            SentenceEmbedderOptions {
                batch_size: 2,
                intra_threads: 2,
                ..SentenceEmbedderOptions::default()
            },
            None,
        )
        .unwrap();
        assert_eq!(
            small_batches.identity(),
            embedder.identity(),
            "batching is not part of the identity"
        );
        assert!(max_abs_difference(&together, &small_batches.embed(&lines).unwrap()) < 1e-5);
    }

    #[test]
    fn identity_names_model_pooling_and_truncation() {
        let identity = minilm().identity();
        assert!(
            identity.contains("pooling=mean") && identity.contains("max-tokens=256"),
            "{identity}"
        );
        assert_eq!(identity, minilm().identity());
    }

    #[test]
    fn long_texts_are_truncated_not_rejected() {
        let long_text = "and then the dog ran across the field ".repeat(200);
        let vectors = minilm().embed(&[long_text.as_str()]).unwrap();
        assert_eq!(vectors[0].len(), 384);
    }

    /// Counts the texts it is asked to embed, to prove the cache spares them.
    struct CountingEmbedder<'a> {
        inner: &'a dyn SentenceEmbedder,
        embedded_texts: AtomicUsize,
    }

    impl SentenceEmbedder for CountingEmbedder<'_> {
        fn identity(&self) -> String {
            self.inner.identity()
        }
        fn dim(&self) -> usize {
            self.inner.dim()
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.embedded_texts
                .fetch_add(texts.len(), Ordering::Relaxed);
            self.inner.embed(texts)
        }
    }

    #[test]
    fn cached_texts_are_not_embedded_again() {
        let counting = CountingEmbedder {
            inner: minilm(),
            embedded_texts: AtomicUsize::new(0),
        };
        let cache = MemoryEmbeddingCache::default();
        let first = embed_cached(
            &counting,
            &cache,
            &["Where were you last night?", "At the library."],
        )
        .unwrap();
        assert_eq!(counting.embedded_texts.load(Ordering::Relaxed), 2);
        assert_eq!(cache.len(), 2);

        let second = embed_cached(
            &counting,
            &cache,
            &["At the library.", "Liar.", "Where were you last night?"],
        )
        .unwrap();
        assert_eq!(
            counting.embedded_texts.load(Ordering::Relaxed),
            3,
            "only the new line is embedded"
        );
        assert_eq!(second[0], first[1]);
        assert_eq!(second[2], first[0]);
        assert_eq!(second[1], minilm().embed(&["Liar."]).unwrap()[0]);

        let key = embedding_cache_key(&counting.identity(), "Liar.");
        assert_eq!(cache.get(&key).unwrap(), second[1]);
        assert_ne!(key, embedding_cache_key("another model", "Liar."));
    }

    #[derive(serde::Deserialize)]
    struct Reference {
        model_sha256: String,
        tokenizer_sha256: String,
        max_tokens: usize,
        sentences: Vec<ReferenceSentence>,
    }

    #[derive(serde::Deserialize)]
    struct ReferenceSentence {
        text: String,
        embedding: Vec<f32>,
    }

    fn reference() -> Reference {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/embed/reference.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn matches_python_onnxruntime_reference() {
        let reference = reference();
        let spec_sha = |file_name: &str| {
            ALL_MINILM_L6_V2_INT8
                .member_files()
                .find(|member| member.file_name == file_name)
                .unwrap()
                .sha256
        };
        assert_eq!(
            reference.model_sha256,
            spec_sha("model.onnx"),
            "reference made from another model"
        );
        assert_eq!(reference.tokenizer_sha256, spec_sha("tokenizer.json"));
        assert_eq!(
            reference.max_tokens,
            SentenceEmbedderOptions::default().max_tokens
        );
        assert!(reference.sentences.len() >= 8);

        let texts: Vec<&str> = reference
            .sentences
            .iter()
            .map(|sentence| sentence.text.as_str())
            .collect();
        for library in LIBRARIES {
            let vectors = minilm_from(library).embed(&texts).unwrap();
            let mut lowest = f32::MAX;
            for (sentence, vector) in reference.sentences.iter().zip(&vectors) {
                let similarity = cosine(vector, &sentence.embedding);
                lowest = lowest.min(similarity);
                assert!(
                    similarity > 0.9999,
                    "{library}: cosine {similarity} for {:?}",
                    sentence.text
                );
            }
            let largest_difference = max_abs_difference(
                &vectors,
                &reference
                    .sentences
                    .iter()
                    .map(|sentence| sentence.embedding.clone())
                    .collect::<Vec<_>>(),
            );
            eprintln!(
                "{library}: parity with Python: lowest cosine {lowest:.7}, max abs difference \
                 {largest_difference:e}"
            );
        }
    }
}

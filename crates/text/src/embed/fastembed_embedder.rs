//! The default sentence embedder: fastembed's user-defined text model over the same files
//! (`model.onnx` + `tokenizer.json`) and the process's one ONNX Runtime environment.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ::fastembed::{
    InitOptionsUserDefined, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel,
};
use tokenizers::Tokenizer;

use viss_models::onnx_runtime;

use super::{
    EmbedError, Pooling, SentenceEmbedder, SentenceEmbedderOptions, embed_each_distinct_once,
};

/// Pad tokens of common tokenizers, tried when tokenizer.json declares no padding.
const PAD_TOKENS: &[&str] = &["[PAD]", "<pad>"];

pub struct FastembedSentenceEmbedder {
    /// `TextEmbedding::embed` needs `&mut`: its ONNX Runtime session runs one call at a time.
    model: Mutex<TextEmbedding>,
    dim: usize,
    identity: String,
    model_path: PathBuf,
    tokenizer_path: PathBuf,
    options: SentenceEmbedderOptions,
}

impl FastembedSentenceEmbedder {
    /// Loads the model whose [`super::identity_of`] the caller computed.
    pub fn open(
        onnx_runtime_library: &Path,
        model_onnx: &Path,
        tokenizer_json: &Path,
        options: SentenceEmbedderOptions,
        identity: String,
    ) -> Result<Self, EmbedError> {
        let load_error = |reason: String| EmbedError::LoadModel {
            model: model_onnx.to_path_buf(),
            reason,
        };
        let environment = onnx_runtime::environment(onnx_runtime_library)?;
        let onnx_file = std::fs::read(model_onnx).map_err(|source| EmbedError::ReadModelFile {
            path: model_onnx.to_path_buf(),
            source,
        })?;
        let pooling = match options.pooling {
            Pooling::Mean => ::fastembed::Pooling::Mean,
            Pooling::Cls => ::fastembed::Pooling::Cls,
        };
        let model = UserDefinedEmbeddingModel::new(
            onnx_file,
            tokenizer_files(tokenizer_json, options.max_tokens)?,
        )
        .with_pooling(pooling);
        let init = InitOptionsUserDefined::new()
            .with_environment(environment)
            .with_max_length(options.max_tokens)
            .with_intra_threads(viss_engine::range::threads(options.intra_threads));
        let text_embedding = TextEmbedding::try_new_from_user_defined(model, init)
            .map_err(|error| load_error(error.to_string()))?;
        let mut embedder = Self {
            model: Mutex::new(text_embedding),
            dim: 0,
            identity,
            model_path: model_onnx.to_path_buf(),
            tokenizer_path: tokenizer_json.to_path_buf(),
            options,
        };
        // fastembed does not say a model's width before it runs.
        embedder.dim = embedder.embed_unique(&["dimension probe"])?[0].len();
        Ok(embedder)
    }

    fn embed_unique(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let mut model = self
            .model
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Texts of similar token counts share a batch, so little of each batch is padding.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        let token_counts = texts
            .iter()
            .map(|text| {
                model
                    .tokenizer
                    .encode_fast(*text, true)
                    .map(|encoding| encoding.len())
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| EmbedError::Tokenize {
                tokenizer: self.tokenizer_path.clone(),
                reason: error.to_string(),
            })?;
        order.sort_by_key(|&index| token_counts[index]);
        let sorted: Vec<&str> = order.iter().map(|&index| texts[index]).collect();
        let vectors = model
            .embed(&sorted, Some(self.options.batch_size))
            .map_err(|error| EmbedError::Inference {
                model: self.model_path.clone(),
                reason: error.to_string(),
            })?;
        if vectors.len() != texts.len() {
            return Err(EmbedError::UnexpectedOutput {
                model: self.model_path.clone(),
                reason: format!("{} vectors for {} texts", vectors.len(), texts.len()),
            });
        }
        let mut in_order = vec![Vec::new(); texts.len()];
        for (index, vector) in order.into_iter().zip(vectors) {
            in_order[index] = vector;
        }
        Ok(in_order)
    }
}

/// fastembed reads a model directory's four tokenizer files; viss's configuration names only
/// tokenizer.json (which holds the vocabulary, normaliser and special tokens), so the other
/// three say no more than fastembed needs: the length limit and the pad token.
fn tokenizer_files(tokenizer_json: &Path, max_tokens: usize) -> Result<TokenizerFiles, EmbedError> {
    let tokenizer_error = |reason: String| EmbedError::LoadTokenizer {
        tokenizer: tokenizer_json.to_path_buf(),
        reason,
    };
    let tokenizer_file =
        std::fs::read(tokenizer_json).map_err(|source| EmbedError::ReadModelFile {
            path: tokenizer_json.to_path_buf(),
            source,
        })?;
    let tokenizer = Tokenizer::from_bytes(&tokenizer_file)
        .map_err(|error| tokenizer_error(error.to_string()))?;
    let declared = tokenizer
        .get_padding()
        .map(|padding| padding.pad_token.clone());
    let pad_token = declared
        .or_else(|| {
            PAD_TOKENS
                .iter()
                .find(|token| tokenizer.token_to_id(token).is_some())
                .map(|token| token.to_string())
        })
        .ok_or_else(|| {
            tokenizer_error(format!(
                "it declares no padding and has none of the pad tokens {PAD_TOKENS:?}, which \
                 batching needs"
            ))
        })?;
    let tokenizer_config = serde_json::json!({
        "model_max_length": max_tokens,
        "pad_token": pad_token,
    });
    Ok(TokenizerFiles {
        tokenizer_file,
        config_file: b"{}".to_vec(),
        special_tokens_map_file: b"{}".to_vec(),
        tokenizer_config_file: tokenizer_config.to_string().into_bytes(),
    })
}

impl SentenceEmbedder for FastembedSentenceEmbedder {
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

impl std::fmt::Debug for FastembedSentenceEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastembedSentenceEmbedder")
            .field("model", &self.model_path)
            .field("dim", &self.dim)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

//! Local sentence embeddings with candle's BERT (all-MiniLM-L6-v2 and similar).
//!
//! Owns: loading a BERT embedding model directory (`model.safetensors`, `tokenizer.json`,
//! `config.json`), batched encoding, mean pooling over the attention mask and L2
//! normalisation. Must not touch: the registry, the cache policy or ranking (`classify`).

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config, DTYPE};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::error::{InferenceError, Result};
use crate::registry::check_embedding_dir;

/// Texts encoded per forward pass; bounds peak memory on large inputs.
pub const EMBED_BATCH: usize = 32;
/// Most texts accepted in one call.
pub const MAX_TEXTS: usize = 4096;

/// A loaded BERT embedding model. `Send + Sync`; `embed` takes `&self`.
pub struct BertEmbedder {
    model: BertModel,
    tokenizer: Tokenizer,
    device: Device,
    dimension: usize,
}

impl std::fmt::Debug for BertEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BertEmbedder")
            .field("dimension", &self.dimension)
            .finish()
    }
}

fn engine(what: &str) -> impl Fn(candle_core::Error) -> InferenceError + '_ {
    move |e| InferenceError::Engine(format!("{what}: {e}"))
}

impl BertEmbedder {
    /// Loads the model directory on the CPU.
    pub fn load(dir: &Path) -> Result<Self> {
        check_embedding_dir(dir)?;
        let invalid = |reason: String| InferenceError::InvalidEmbeddingModel {
            path: dir.to_path_buf(),
            reason,
        };
        let config_text = std::fs::read_to_string(dir.join("config.json"))
            .map_err(|e| InferenceError::io(dir.join("config.json"), e))?;
        let config: Config =
            serde_json::from_str(&config_text).map_err(|e| invalid(format!("config.json: {e}")))?;
        let max_len = config.max_position_embeddings;
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| invalid(format!("tokenizer.json: {e}")))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..Default::default()
        }));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                ..Default::default()
            }))
            .map_err(|e| invalid(format!("tokenizer truncation: {e}")))?;
        let device = Device::Cpu;
        let weights_path = dir.join("model.safetensors");
        let weights =
            std::fs::read(&weights_path).map_err(|e| InferenceError::io(&weights_path, e))?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DTYPE, &device)
            .map_err(|e| invalid(format!("model.safetensors: {e}")))?;
        let model =
            BertModel::load(vb, &config).map_err(|e| invalid(format!("bert weights: {e}")))?;
        tracing::info!(path = %dir.display(), dimension = config.hidden_size, "embedding model loaded");
        Ok(Self {
            model,
            tokenizer,
            device,
            dimension: config.hidden_size,
        })
    }

    /// Length of every embedding vector.
    pub fn dimension(&self) -> usize {
        self.dimension
    }

    /// One L2-normalised, mean-pooled vector per text, in order.
    pub fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Err(InferenceError::invalid("texts", "must not be empty"));
        }
        if texts.len() > MAX_TEXTS {
            return Err(InferenceError::invalid(
                "texts",
                format!("{} given, at most {MAX_TEXTS} allowed", texts.len()),
            ));
        }
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(EMBED_BATCH) {
            out.extend(self.embed_batch(chunk)?);
        }
        Ok(out)
    }

    fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| InferenceError::Engine(format!("tokenizing failed: {e}")))?;
        let rows = encodings.len();
        let cols = encodings.first().map(|e| e.get_ids().len()).unwrap_or(0);
        let mut ids = Vec::with_capacity(rows * cols);
        let mut types = Vec::with_capacity(rows * cols);
        let mut mask = Vec::with_capacity(rows * cols);
        for e in &encodings {
            ids.extend_from_slice(e.get_ids());
            types.extend_from_slice(e.get_type_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        let shape = (rows, cols);
        let ids = Tensor::from_vec(ids, shape, &self.device).map_err(engine("input ids"))?;
        let types = Tensor::from_vec(types, shape, &self.device).map_err(engine("type ids"))?;
        let mask = Tensor::from_vec(mask, shape, &self.device).map_err(engine("mask"))?;
        let hidden = self
            .model
            .forward(&ids, &types, Some(&mask))
            .map_err(engine("bert forward"))?;
        pool_and_normalise(&hidden, &mask).map_err(engine("pooling"))
    }
}

/// Mean over the tokens the mask keeps, then divide by the L2 norm.
fn pool_and_normalise(hidden: &Tensor, mask: &Tensor) -> candle_core::Result<Vec<Vec<f32>>> {
    let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // (batch, seq, 1)
    let summed = hidden.broadcast_mul(&mask)?.sum(1)?; // (batch, hidden)
    let counts = mask.sum(1)?.clamp(1e-9, f32::MAX)?; // (batch, 1)
    let mean = summed.broadcast_div(&counts)?;
    let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f32::MAX)?;
    mean.broadcast_div(&norm)?.to_vec2::<f32>()
}

/// Cosine similarity of two vectors (dot product over the product of norms).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

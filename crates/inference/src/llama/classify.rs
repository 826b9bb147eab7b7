//! Zero-shot classification with a generative GGUF model: each label is scored by the
//! log-probability the model gives it as the answer to "which of these labels fits the
//! text?", and the scores are normalised with a softmax over the labels.
//!
//! The prompt is rendered with the model's chat template: a system turn naming the labels
//! and a user turn with the text, then the assistant's opening. For each label the prompt
//! plus the label's tokens are decoded once, with logits only where they are read; the
//! label's score is the mean per-token log-probability (so a long label is not penalised
//! for its length).

use llama_cpp_2::llama_batch::LlamaBatch;

use crate::classify::{ranked, LabelScore};
use crate::error::{InferenceError, Result};
use crate::generate::Message;
use crate::llama::{LlamaConfig, LlamaEngineModel, PROMPT_BATCH};

/// Most tokens a text and a label may take together.
const MAX_TOKENS: usize = 4096;

fn engine(detail: impl std::fmt::Display) -> InferenceError {
    InferenceError::Engine(detail.to_string())
}

/// log-softmax of `logits` at `token`.
fn log_prob(logits: &[f32], token: i32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|l| (*l as f64 - max).exp()).sum();
    logits[token as usize] as f64 - max - sum.ln()
}

impl LlamaEngineModel {
    /// `labels` scored for `text`, best first; scores sum to 1.
    pub fn classify(
        &self,
        text: &str,
        labels: &[String],
        config: &LlamaConfig,
    ) -> Result<Vec<LabelScore>> {
        let system = format!(
            "Classify the user's text. Answer with exactly one of these labels: {}.",
            labels.join(", ")
        );
        let prompt = self.render(&[Message::new("system", system), Message::new("user", text)])?;
        let vocab = self.core.model.vocab();
        let prompt_tokens: Vec<i32> = vocab
            .tokenize(prompt.as_bytes(), true, true)
            .into_iter()
            .map(|t| t.0)
            .collect();
        let mut means = Vec::with_capacity(labels.len());
        for label in labels {
            let label_tokens = self.tokenize(label);
            if label_tokens.is_empty() {
                return Err(InferenceError::invalid(
                    "labels",
                    format!("{label:?} has no tokens"),
                ));
            }
            let total = prompt_tokens.len() + label_tokens.len();
            if total > MAX_TOKENS || total as u32 >= self.core.model.n_ctx_train() {
                return Err(InferenceError::invalid(
                    "text",
                    format!("{total} tokens do not fit the classification window"),
                ));
            }
            let mut ctx = self.context(total as u32 + 1, config)?;
            // Everything but the prompt's last token without logits; then the last prompt
            // token and the label with logits: logits at j predict token j + 1.
            let (head, last) = prompt_tokens.split_at(prompt_tokens.len() - 1);
            let mut batch = LlamaBatch::new(PROMPT_BATCH as usize, 1);
            for (c, chunk) in head.chunks(PROMPT_BATCH as usize).enumerate() {
                batch.clear();
                for (j, token) in chunk.iter().enumerate() {
                    let pos = (c * PROMPT_BATCH as usize + j) as i32;
                    batch
                        .add(llama_cpp_2::token::LlamaToken(*token), pos, &[0], false)
                        .map_err(|e| engine(format!("batch: {e}")))?;
                }
                ctx.decode(&mut batch)
                    .map_err(|e| engine(format!("prompt decode failed: {e}")))?;
            }
            let tail: Vec<i32> = last.iter().chain(&label_tokens).copied().collect();
            let mut batch = LlamaBatch::new(tail.len().max(1), 1);
            for (j, token) in tail.iter().enumerate() {
                let pos = (head.len() + j) as i32;
                batch
                    .add(llama_cpp_2::token::LlamaToken(*token), pos, &[0], true)
                    .map_err(|e| engine(format!("batch: {e}")))?;
            }
            ctx.decode(&mut batch)
                .map_err(|e| engine(format!("label decode failed: {e}")))?;
            let sum: f64 = label_tokens
                .iter()
                .enumerate()
                .map(|(j, token)| log_prob(ctx.get_logits_ith(j as i32), *token))
                .sum();
            means.push((sum / label_tokens.len() as f64) as f32);
        }
        Ok(ranked(labels, &means, 1.0))
    }
}

//! Zero-shot classification by embedding similarity.
//!
//! Owns: turning "text vs candidate labels" into scores that sum to 1, best first. Must not
//! touch: how embeddings are computed (the caller passes an embedding function).
//!
//! Each label is embedded as written and compared with the text by cosine similarity. The
//! cosines of sentence embeddings sit in a narrow band (MiniLM: mostly 0.0–0.6), so a plain
//! softmax over them would be nearly uniform; they are divided by a temperature of 0.05
//! first (the scale sentence-transformers trains its contrastive objective with), which
//! turns a clear winner into a clear score while keeping the ranking unchanged.

use crate::embed::cosine;
use crate::error::{InferenceError, Result};

/// Softmax temperature applied to cosine similarities.
pub const CLASSIFY_TEMPERATURE: f32 = 0.05;
/// Most labels accepted in one call.
pub const MAX_LABELS: usize = 256;

pub use car_proto::methods::inference::LabelScore;

/// Scores `labels` for `text`, best first. `embed` must return one vector per input text.
pub fn classify(
    text: &str,
    labels: &[String],
    embed: impl FnOnce(&[String]) -> Result<Vec<Vec<f32>>>,
) -> Result<Vec<LabelScore>> {
    validate(text, labels)?;
    classify_checked(text, labels, embed)
}

/// The checks every classification applies: 1..=[`MAX_LABELS`] non-blank labels, a
/// non-blank text.
pub fn validate(text: &str, labels: &[String]) -> Result<()> {
    if labels.is_empty() {
        return Err(InferenceError::invalid("labels", "must not be empty"));
    }
    if labels.len() > MAX_LABELS {
        return Err(InferenceError::invalid(
            "labels",
            format!("{} given, at most {MAX_LABELS} allowed", labels.len()),
        ));
    }
    if let Some(i) = labels.iter().position(|l| l.trim().is_empty()) {
        return Err(InferenceError::invalid(
            "labels",
            format!("label {i} is empty"),
        ));
    }
    if text.trim().is_empty() {
        return Err(InferenceError::invalid("text", "must not be empty"));
    }
    Ok(())
}

fn classify_checked(
    text: &str,
    labels: &[String],
    embed: impl FnOnce(&[String]) -> Result<Vec<Vec<f32>>>,
) -> Result<Vec<LabelScore>> {
    let mut inputs = Vec::with_capacity(labels.len() + 1);
    inputs.push(text.to_owned());
    inputs.extend(labels.iter().cloned());
    let vectors = embed(&inputs)?;
    if vectors.len() != inputs.len() {
        return Err(InferenceError::Engine(format!(
            "embedding returned {} vectors for {} inputs",
            vectors.len(),
            inputs.len()
        )));
    }
    let sims: Vec<f32> = vectors[1..]
        .iter()
        .map(|v| cosine(&vectors[0], v))
        .collect();
    Ok(ranked(labels, &sims, CLASSIFY_TEMPERATURE))
}

/// `labels` with the softmax of their raw scores at `temperature`, best first.
pub fn ranked(labels: &[String], raw: &[f32], temperature: f32) -> Vec<LabelScore> {
    let mut scored: Vec<LabelScore> = labels
        .iter()
        .zip(softmax(raw, temperature))
        .map(|(label, score)| LabelScore {
            label: label.clone(),
            score,
        })
        .collect();
    scored.sort_by(|a, b| b.score.total_cmp(&a.score));
    scored
}

/// Numerically stable softmax of `values / temperature`.
pub fn softmax(values: &[f32], temperature: f32) -> Vec<f32> {
    let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = values
        .iter()
        .map(|v| ((v - max) / temperature).exp())
        .collect();
    let sum: f32 = exps.iter().sum();
    exps.into_iter().map(|e| e / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_sum_to_one_and_sort_best_first() {
        let fake = |inputs: &[String]| {
            Ok(inputs
                .iter()
                .map(|s| match s.as_str() {
                    "text" => vec![1.0, 0.0],
                    "near" => vec![0.9, 0.1],
                    _ => vec![0.0, 1.0],
                })
                .collect())
        };
        let labels = vec!["far".to_owned(), "near".to_owned()];
        let out = classify("text", &labels, fake).unwrap();
        assert_eq!(out[0].label, "near");
        let total: f32 = out.iter().map(|s| s.score).sum();
        assert!((total - 1.0).abs() < 1e-5);
        assert!(out[0].score > 0.99);
    }

    #[test]
    fn rejects_bad_inputs() {
        let never = |_: &[String]| -> Result<Vec<Vec<f32>>> { unreachable!() };
        assert_eq!(
            classify("t", &[], never).unwrap_err().to_string(),
            "invalid labels: must not be empty"
        );
        assert_eq!(
            classify("t", &["a".into(), " ".into()], never)
                .unwrap_err()
                .to_string(),
            "invalid labels: label 1 is empty"
        );
        assert_eq!(
            classify("", &["a".into()], never).unwrap_err().to_string(),
            "invalid text: must not be empty"
        );
    }
}

//! How alike a need and a capability text are, in [0, 1].
//!
//! With an embedding model registered the daemon compares embeddings ([`cosine`]);
//! without one it falls back to [`lexical`]: the cosine of the two texts' term counts,
//! terms being lower-cased alphanumeric words of two or more characters, minus a short
//! stop-word list, with a plural or `-ing` / `-ed` ending folded (`adds`, `adding`, `added`
//! count as `add`). Lexical similarity is crude but deterministic, and it needs no model.

use std::collections::HashMap;

const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "for", "from", "in", "into", "is",
    "it", "its", "of", "on", "or", "that", "the", "this", "to", "with", "you", "your", "me", "my",
    "i", "we", "our", "please", "what", "which", "who", "how",
];

fn fold(word: &str) -> String {
    for suffix in ["ing", "ed", "es", "s"] {
        if let Some(stem) = word.strip_suffix(suffix) {
            if stem.chars().count() >= 3 {
                return stem.to_string();
            }
        }
    }
    word.to_string()
}

/// The text's terms with their counts.
pub fn terms(text: &str) -> HashMap<String, f64> {
    let mut counts = HashMap::new();
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| w.chars().count() >= 2 && !STOP_WORDS.contains(&w.as_str()))
    {
        *counts.entry(fold(&word)).or_insert(0.0) += 1.0;
    }
    counts
}

/// Term-count cosine of `a` and `b` (0 when either has no terms).
pub fn lexical(a: &str, b: &str) -> f64 {
    let (ta, tb) = (terms(a), terms(b));
    let dot: f64 = ta
        .iter()
        .filter_map(|(t, x)| tb.get(t).map(|y| x * y))
        .sum();
    let norm = |t: &HashMap<String, f64>| t.values().map(|x| x * x).sum::<f64>().sqrt();
    let (na, nb) = (norm(&ta), norm(&tb));
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        (dot / (na * nb)).clamp(0.0, 1.0)
    }
}

/// Cosine of two embeddings, mapped to [0, 1] (negative cosines count as 0).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let (na, nb) = (norm(a), norm(b));
    if na == 0.0 || nb == 0.0 || a.len() != b.len() {
        0.0
    } else {
        (dot / (na * nb)).clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn related_texts_score_above_unrelated_ones() {
        let need = "add these numbers and calculate the total";
        let math = "Calculator. You add numbers and calculate sums. calculate";
        let files = "File writer. You write files into the workspace. write_file";
        assert!(lexical(need, math) > lexical(need, files));
        assert_eq!(lexical("", math), 0.0);
        assert_eq!(lexical("the of and", math), 0.0);
        assert!((lexical(math, math) - 1.0).abs() < 1e-9);
        assert_eq!(fold("adding"), "add");
        assert_eq!(fold("is"), "is");
    }

    #[test]
    fn cosine_is_bounded_and_rejects_mismatched_lengths() {
        assert!((cosine(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-9);
        assert_eq!(cosine(&[1.0, 0.0], &[-1.0, 0.0]), 0.0);
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), 0.0);
    }
}

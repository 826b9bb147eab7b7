//! The embedding seam and the fact-embedding cache.
//!
//! Owns the [`Embedder`] trait (the inference service implements it), the cache of fact
//! vectors keyed by a content hash (so a fact's text is embedded once, whichever scope holds
//! it) and cosine similarity. It must not rank or touch graphs: ranking asks it for vectors.
//!
//! Calls into an embedder are blocking and may be slow; callers on a tokio runtime run them
//! in `spawn_blocking` (the store does) and never under a graph lock.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// Turns texts into vectors. Implementations must return one vector per input text, all of
/// the same dimension, and be deterministic for a given `model_id`.
pub trait Embedder: Send + Sync {
    /// Embeds `texts` in one batch.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String>;
    /// Identifies the model; cached vectors are only reused for the same id.
    fn model_id(&self) -> &str;
}

/// SHA-256 of a fact's embedded text; the cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentHash(pub [u8; 32]);

impl ContentHash {
    /// Hashes the text that is embedded for a fact.
    pub fn of(text: &str) -> Self {
        Self(Sha256::digest(text.as_bytes()).into())
    }
}

/// The text embedded for a fact: subject, body and tags, one per line.
pub fn fact_text(subject: &str, body: &str, tags: &[String]) -> String {
    if tags.is_empty() {
        format!("{subject}\n{body}")
    } else {
        format!("{subject}\n{body}\n{}", tags.join(", "))
    }
}

/// An embedder plus the vectors it has already produced.
pub struct Embeddings {
    embedder: Arc<dyn Embedder>,
    model_id: String,
    // A std mutex: it is only held for map look-ups and inserts, never across an embed call.
    cache: Mutex<HashMap<ContentHash, Arc<[f32]>>>,
}

impl fmt::Debug for Embeddings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Embeddings")
            .field("model_id", &self.model_id)
            .field("cached", &self.cached_len())
            .finish()
    }
}

impl Embeddings {
    /// Wraps an embedder with an empty cache.
    pub fn new(embedder: Arc<dyn Embedder>) -> Self {
        let model_id = embedder.model_id().to_owned();
        Self {
            embedder,
            model_id,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The embedder's model id.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// How many fact vectors are cached.
    pub fn cached_len(&self) -> usize {
        self.lock().len()
    }

    /// The cached vector for `hash`, if any.
    pub fn get(&self, hash: &ContentHash) -> Option<Arc<[f32]>> {
        self.lock().get(hash).cloned()
    }

    /// Which of `hashes` have no cached vector yet, each once, in first-seen order.
    pub fn missing(&self, hashes: impl IntoIterator<Item = ContentHash>) -> Vec<ContentHash> {
        let cache = self.lock();
        let mut seen = std::collections::HashSet::new();
        hashes
            .into_iter()
            .filter(|h| !cache.contains_key(h) && seen.insert(*h))
            .collect()
    }

    /// Embeds the query and every missing fact text in one batch, caching the fact vectors,
    /// and returns the query vector. Blocking.
    pub fn prepare(
        &self,
        query: &str,
        missing: &[(ContentHash, String)],
    ) -> Result<Vec<f32>, String> {
        let mut texts: Vec<&str> = Vec::with_capacity(missing.len() + 1);
        texts.push(query);
        texts.extend(missing.iter().map(|(_, t)| t.as_str()));
        let mut vectors = self.embedder.embed(&texts)?;
        if vectors.len() != texts.len() {
            return Err(format!(
                "embedder {} returned {} vectors for {} texts",
                self.model_id,
                vectors.len(),
                texts.len()
            ));
        }
        let dim = vectors[0].len();
        if dim == 0 || vectors.iter().any(|v| v.len() != dim) {
            return Err(format!(
                "embedder {} returned vectors of mixed or zero dimension",
                self.model_id
            ));
        }
        let rest = vectors.split_off(1);
        let mut cache = self.lock();
        for ((hash, _), vector) in missing.iter().zip(rest) {
            cache.insert(*hash, vector.into());
        }
        Ok(vectors.pop().unwrap_or_default())
    }

    /// Drops every cached vector whose hash is not in `live`, so deleted and merged facts
    /// do not pin memory forever.
    pub fn retain(&self, live: &std::collections::HashSet<ContentHash>) {
        self.lock().retain(|h, _| live.contains(h));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ContentHash, Arc<[f32]>>> {
        // The map stays consistent even if a holder panicked: every write is one insert.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A query vector together with the cache its fact vectors come from.
#[derive(Debug, Clone, Copy)]
pub struct SemanticQuery<'a> {
    /// The query's embedding.
    pub vector: &'a [f32],
    /// Where fact vectors are looked up.
    pub embeddings: &'a Embeddings,
}

/// Cosine similarity clamped to [0, 1]: opposite and orthogonal vectors both mean "not
/// similar" for ranking. Zero vectors or mismatched dimensions give 0.
pub fn cosine01(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    (dot / (na.sqrt() * nb.sqrt())).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counting(AtomicUsize);
    impl Embedder for Counting {
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
            self.0.fetch_add(texts.len(), Ordering::SeqCst);
            Ok(texts.iter().map(|t| vec![t.len() as f32, 1.0]).collect())
        }
        fn model_id(&self) -> &str {
            "counting"
        }
    }

    #[test]
    fn fact_vectors_are_computed_once() {
        let counter = Arc::new(Counting(AtomicUsize::new(0)));
        let e = Embeddings::new(counter.clone());
        let h = ContentHash::of("a");
        assert_eq!(e.missing([h, h]), [h], "duplicates are embedded once");
        e.prepare("q", &[(h, "a".to_owned())]).unwrap();
        assert_eq!(counter.0.load(Ordering::SeqCst), 2);
        assert!(e.missing([h]).is_empty());
        e.prepare("q2", &[]).unwrap();
        assert_eq!(
            counter.0.load(Ordering::SeqCst),
            3,
            "only the query is embedded again"
        );
        e.retain(&Default::default());
        assert_eq!(e.cached_len(), 0);
    }

    #[test]
    fn bad_embedder_output_is_an_error() {
        struct Short;
        impl Embedder for Short {
            fn embed(&self, _: &[&str]) -> Result<Vec<Vec<f32>>, String> {
                Ok(vec![vec![1.0]])
            }
            fn model_id(&self) -> &str {
                "short"
            }
        }
        let e = Embeddings::new(Arc::new(Short));
        let err = e
            .prepare("q", &[(ContentHash::of("x"), "x".into())])
            .unwrap_err();
        assert!(err.contains("returned 1 vectors for 2 texts"), "{err}");
    }

    #[test]
    fn cosine_is_clamped() {
        assert_eq!(cosine01(&[1.0, 0.0], &[1.0, 0.0]), 1.0);
        assert_eq!(cosine01(&[1.0, 0.0], &[-1.0, 0.0]), 0.0);
        assert_eq!(cosine01(&[1.0, 0.0], &[0.0, 0.0]), 0.0);
        assert_eq!(cosine01(&[1.0], &[1.0, 0.0]), 0.0);
    }
}

//! Relevance scoring: BM25 over analysed fact text, normalised to [0, 1], optionally blended
//! with embedding similarity.
//!
//! Owns the lexical index statistics (document frequencies, lengths) and the score formula.
//! It must not own facts or decide what a hit looks like; the graph keeps one
//! `DocTerms` per fact and asks this module for scores.
//!
//! # Score formula
//! - A fact's document is its subject (counted twice: a subject match says more than a body match),
//!   its body and its tags, analysed by [`crate::text::terms`].
//! - BM25 with `k1 = 1.2`, `b = 0.75` and the always-positive idf `ln(1 + (N − df + 0.5) / (df +
//!   0.5))`.
//! - Normalisation: the raw score is divided by its upper bound for this query, `Σ idf(t) · qtf(t)
//!   · (k1 + 1)` over the query's terms, so a lexical score is the (saturating) fraction of the
//!   query's weight the fact matches: absolute, in [0, 1), and comparable across queries. Query
//!   terms absent from every fact still count in the bound.
//! - With an embedder: `score = (1 − w) · lexical + w · cos⁺(query, fact)` with `w =
//!   SEMANTIC_WEIGHT = 0.5` and `cos⁺` the cosine clamped to [0, 1]. A fact whose vector is not
//!   cached yet (added after the batch was prepared) scores lexically alone.
//! - Facts scoring 0 are not returned. Ties break on the stored confidence, then the most recent
//!   update, then the fact id, so results are deterministic.

use crate::embed::{cosine01, ContentHash, SemanticQuery};
use std::collections::HashMap;

/// BM25 term-frequency saturation.
pub const BM25_K1: f64 = 1.2;
/// BM25 length normalisation.
pub const BM25_B: f64 = 0.75;
/// Weight of embedding similarity in the blended score.
pub const SEMANTIC_WEIGHT: f64 = 0.5;
/// How many times a subject term counts relative to a body or tag term.
const SUBJECT_WEIGHT: u32 = 2;

/// The analysed terms of one fact.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct DocTerms {
    counts: HashMap<String, u32>,
    len: u32,
}

impl DocTerms {
    pub(crate) fn of_fact(subject: &str, body: &str, tags: &[String]) -> Self {
        let mut doc = DocTerms::default();
        for term in crate::text::terms(subject) {
            doc.push(term, SUBJECT_WEIGHT);
        }
        for term in crate::text::terms(body) {
            doc.push(term, 1);
        }
        for tag in tags {
            for term in crate::text::terms(tag) {
                doc.push(term, 1);
            }
        }
        doc
    }

    /// Each distinct term of the fact once with its (weighted) count, in no particular order.
    pub(crate) fn term_counts(&self) -> impl Iterator<Item = (&String, u32)> {
        self.counts.iter().map(|(t, n)| (t, *n))
    }

    /// Each distinct term of the fact once, in no particular order.
    pub(crate) fn distinct_terms(&self) -> impl Iterator<Item = &String> {
        self.counts.keys()
    }

    /// The document length BM25 normalises by (subject terms counted twice).
    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    fn push(&mut self, term: String, weight: u32) {
        *self.counts.entry(term).or_default() += weight;
        self.len += weight;
    }
}

/// A query's analysed terms with their multiplicity.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueryTerms(Vec<(String, u32)>);

impl QueryTerms {
    pub(crate) fn new(query: &str) -> Self {
        let mut counts: Vec<(String, u32)> = Vec::new();
        for term in crate::text::terms(query) {
            match counts.iter_mut().find(|(t, _)| *t == term) {
                Some((_, n)) => *n += 1,
                None => counts.push((term, 1)),
            }
        }
        Self(counts)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Corpus statistics for BM25, maintained incrementally as facts come and go.
#[derive(Debug, Clone, Default)]
pub(crate) struct LexicalIndex {
    df: HashMap<String, u32>,
    docs: u32,
    total_len: u64,
}

impl LexicalIndex {
    pub(crate) fn add(&mut self, doc: &DocTerms) {
        for term in doc.counts.keys() {
            *self.df.entry(term.clone()).or_default() += 1;
        }
        self.docs += 1;
        self.total_len += u64::from(doc.len);
    }

    pub(crate) fn remove(&mut self, doc: &DocTerms) {
        for term in doc.counts.keys() {
            if let Some(n) = self.df.get_mut(term) {
                *n -= 1;
                if *n == 0 {
                    self.df.remove(term);
                }
            }
        }
        self.docs = self.docs.saturating_sub(1);
        self.total_len = self.total_len.saturating_sub(u64::from(doc.len));
    }

    fn idf(&self, term: &str) -> f64 {
        let n = f64::from(self.docs);
        let df = f64::from(self.df.get(term).copied().unwrap_or(0));
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
    }

    /// The prepared per-query weights; computing idf once per query, not per document.
    pub(crate) fn prepare(&self, query: &QueryTerms) -> PreparedQuery {
        let terms: Vec<(String, f64)> = query
            .0
            .iter()
            .map(|(t, qtf)| (t.clone(), self.idf(t) * f64::from(*qtf)))
            .collect();
        let bound: f64 = terms.iter().map(|(_, w)| w * (BM25_K1 + 1.0)).sum();
        let avg_len = if self.docs == 0 {
            1.0
        } else {
            (self.total_len as f64 / f64::from(self.docs)).max(1.0)
        };
        PreparedQuery {
            terms,
            bound,
            avg_len,
        }
    }
}

impl LexicalIndex {
    /// A query prepared for judging relevance on its own scale (the proactive selector's
    /// threshold), not for ranking: terms no fact contains are left out of the bound, then
    /// the score is scaled by the share of query terms the index knows.
    /// Plain [`LexicalIndex::prepare`] lets an unknown term weigh most in a small index
    /// (its idf is the largest there is), which sinks every score below any fixed threshold
    /// until the bank holds many facts; here a bank of one fact and a query that matches it
    /// well still clear it, and a query mostly made of unknown words still counts for less.
    pub(crate) fn prepare_known(&self, query: &QueryTerms) -> (PreparedQuery, f64) {
        let total: u32 = query.0.iter().map(|(_, n)| n).sum();
        let known = QueryTerms(
            query
                .0
                .iter()
                .filter(|(t, _)| self.df.contains_key(t))
                .cloned()
                .collect(),
        );
        let known_count: u32 = known.0.iter().map(|(_, n)| n).sum();
        let coverage = if total == 0 {
            0.0
        } else {
            f64::from(known_count) / f64::from(total)
        };
        (self.prepare(&known), coverage)
    }
}

/// A query ready to score documents against one index state.
#[derive(Debug, Clone)]
pub(crate) struct PreparedQuery {
    terms: Vec<(String, f64)>,
    bound: f64,
    avg_len: f64,
}

impl PreparedQuery {
    /// Normalised BM25 of `doc` for this query, in [0, 1).
    pub(crate) fn lexical(&self, doc: &DocTerms) -> f64 {
        if self.bound <= 0.0 {
            return 0.0;
        }
        let raw: f64 = self
            .terms
            .iter()
            .filter_map(|(term, weight)| {
                Some(self.contribution(*weight, *doc.counts.get(term)?, doc.len))
            })
            .sum();
        self.normalise(raw)
    }

    /// The query's terms with their weights (idf × query term frequency), in query order:
    /// the order [`PreparedQuery::lexical`] sums contributions in.
    pub(crate) fn weighted_terms(&self) -> impl Iterator<Item = (&str, f64)> {
        self.terms.iter().map(|(t, w)| (t.as_str(), *w))
    }

    /// Whether no document can score above 0.
    pub(crate) fn is_void(&self) -> bool {
        self.bound <= 0.0
    }

    /// One query term's BM25 contribution for a document of `doc_len` where it occurs
    /// `tf` times; always positive. Summing these in [`PreparedQuery::weighted_terms`]
    /// order and passing the sum to [`PreparedQuery::normalise`] gives exactly
    /// [`PreparedQuery::lexical`] (the same operations on the same values), which is what
    /// lets the inverted index accumulate scores term by term.
    pub(crate) fn contribution(&self, weight: f64, tf: u32, doc_len: u32) -> f64 {
        let norm = BM25_K1 * (1.0 - BM25_B + BM25_B * f64::from(doc_len) / self.avg_len);
        let tf = f64::from(tf);
        weight * tf * (BM25_K1 + 1.0) / (tf + norm)
    }

    /// A raw BM25 sum normalised to [0, 1] by the query's bound.
    pub(crate) fn normalise(&self, raw: f64) -> f64 {
        (raw / self.bound).clamp(0.0, 1.0)
    }

    /// The blended score: lexical alone, or mixed with embedding similarity when a semantic
    /// query is given and the fact's vector is cached.
    pub(crate) fn score(
        &self,
        doc: &DocTerms,
        hash: &ContentHash,
        semantic: Option<&SemanticQuery<'_>>,
    ) -> f64 {
        let lexical = self.lexical(doc);
        match semantic.and_then(|s| s.embeddings.get(hash).map(|v| (s, v))) {
            Some((s, vector)) => {
                (1.0 - SEMANTIC_WEIGHT) * lexical + SEMANTIC_WEIGHT * cosine01(s.vector, &vector)
            }
            None => lexical,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(subject: &str, body: &str) -> DocTerms {
        DocTerms::of_fact(subject, body, &[])
    }

    #[test]
    fn scores_are_normalised_and_prefer_rarer_matches() {
        let docs = [
            doc(
                "retry policy",
                "retry failed tool calls three times with backoff",
            ),
            doc("tool calls", "tool calls time out after thirty seconds"),
            doc("editor", "use four spaces"),
        ];
        let mut index = LexicalIndex::default();
        docs.iter().for_each(|d| index.add(d));
        let q = index.prepare(&QueryTerms::new("how many retries for failing tool calls"));
        let scores: Vec<f64> = docs.iter().map(|d| q.lexical(d)).collect();
        assert!(scores.iter().all(|s| (0.0..1.0).contains(s)), "{scores:?}");
        assert!(scores[0] > scores[1], "{scores:?}");
        assert_eq!(scores[2], 0.0);
    }

    #[test]
    fn removing_restores_statistics() {
        let a = doc("a b", "c");
        let b = doc("b", "d");
        let mut index = LexicalIndex::default();
        index.add(&a);
        let before = (index.df.clone(), index.docs, index.total_len);
        index.add(&b);
        index.remove(&b);
        assert_eq!((index.df.clone(), index.docs, index.total_len), before);
    }

    #[test]
    fn empty_query_scores_zero() {
        let mut index = LexicalIndex::default();
        let d = doc("x", "y");
        index.add(&d);
        assert!(QueryTerms::new("the of and").is_empty());
        assert_eq!(index.prepare(&QueryTerms::new("the")).lexical(&d), 0.0);
    }
}

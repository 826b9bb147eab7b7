//! One memory graph: the facts and skills of a single scope, in memory.
//!
//! Owns fact storage ([`crate::fact_table`], with its inverted index), the lexical
//! statistics kept in step with it, the record of what changed since the last write
//! ([`crate::changes`]), the running snapshot length ([`crate::snapshot_size`]) and the
//! fact operations (`add_fact`, `delete`, `query`). Skills, consolidation and context building are
//! further `impl Graph` blocks in their own modules. It must not do I/O, locking or async: the
//! store wraps a graph in a lock and persists it; everything here is plain, synchronous and
//! deterministic given the clock value passed in.

use crate::changes::Changes;
use crate::embed::{fact_text, ContentHash, Embeddings, SemanticQuery};
use crate::error::ValidationError;
use crate::fact::{validate_query, Fact, FactHit, NewFact, MAX_K};
use crate::fact_table::FactTable;
use crate::proactive::DeletedKind;
use crate::ranking::{DocTerms, LexicalIndex, QueryTerms};
use crate::skills::Skill;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

/// A fact with what ranking needs precomputed.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) fact: Fact,
    pub(crate) terms: DocTerms,
    pub(crate) hash: ContentHash,
    /// The fact's length inside the snapshot ([`crate::snapshot_size::nested_len`]).
    pub(crate) encoded_len: u64,
}

impl Entry {
    pub(crate) fn new(fact: Fact) -> Self {
        let terms = DocTerms::of_fact(&fact.subject, &fact.body, &fact.tags);
        let hash = ContentHash::of(&fact_text(&fact.subject, &fact.body, &fact.tags));
        let encoded_len = crate::snapshot_size::nested_len(&fact);
        Self {
            fact,
            terms,
            hash,
            encoded_len,
        }
    }
}

/// The facts and skills of one scope.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub(crate) facts: FactTable,
    pub(crate) lexical: LexicalIndex,
    pub(crate) skills: BTreeMap<String, Skill>,
    /// What changed since the store last wrote this graph.
    pub(crate) changes: Changes,
    /// Σ [`Entry::encoded_len`] over the facts.
    pub(crate) fact_bytes: u64,
}

/// What `memory.delete` did: CAR's `{ id, deleted, kind, fact_count }`.
///
/// Deleting an id that names no fact is not an error: `deleted` is false and `kind` is
/// `None` (serialised `null`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteReport {
    /// The id the caller asked to delete, as sent.
    pub id: String,
    /// Whether a fact with that id existed and was removed.
    pub deleted: bool,
    /// The removed entry's kind (`status` for a proactive status slot); `None` when
    /// nothing was removed.
    pub kind: Option<DeletedKind>,
    /// How many facts remain.
    pub fact_count: usize,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a graph from stored records, refusing duplicate fact ids or skill names
    /// (a snapshot that has them is corrupt, not something to guess about). Each skill's
    /// `degraded` flag is recomputed from its counts (see [`crate::skills::is_degraded`]).
    pub fn from_records(facts: Vec<Fact>, skills: Vec<Skill>) -> Result<Self, String> {
        let mut graph = Graph::new();
        for fact in facts {
            if graph.facts.contains_key(&fact.fact_id) {
                return Err(format!("duplicate fact_id {:?}", fact.fact_id));
            }
            graph.insert_entry(Entry::new(fact));
        }
        for mut skill in skills {
            crate::skills::refresh_degraded(&mut skill);
            if graph.skills.contains_key(&skill.name) {
                return Err(format!("duplicate skill name {:?}", skill.name));
            }
            graph.skills.insert(skill.name.clone(), skill);
        }
        graph.changes = Changes::default();
        Ok(graph)
    }

    /// Every fact, oldest first (ties by id): the order snapshots are written in.
    pub fn facts(&self) -> Vec<&Fact> {
        let mut facts: Vec<&Fact> = self.facts.values().map(|e| &e.fact).collect();
        facts.sort_by(|a, b| {
            a.created_ms
                .cmp(&b.created_ms)
                .then_with(|| a.fact_id.cmp(&b.fact_id))
        });
        facts
    }

    /// The fact with this id.
    pub fn fact(&self, fact_id: &str) -> Option<&Fact> {
        self.facts.get(fact_id).map(|e| &e.fact)
    }

    /// How many facts the graph holds.
    pub fn fact_count(&self) -> usize {
        self.facts.len()
    }

    /// Adds a fact (or replaces the one with the same caller-chosen id) and returns the new
    /// fact count.
    pub fn add_fact(&mut self, fact: NewFact) -> usize {
        self.add_fact_at(fact, car_proto::clock::now_ms_u64())
    }

    /// [`Graph::add_fact`] with an explicit clock, for deterministic tests.
    pub fn add_fact_at(&mut self, new: NewFact, now_ms: u64) -> usize {
        let fact_id = match new.fact_id {
            Some(id) => id,
            None => self.fresh_fact_id(&new.subject, &new.body, now_ms),
        };
        // Replacing keeps the original creation time and injection count: it is the same
        // fact, corrected.
        let (created_ms, injections) = match self.remove_entry(&fact_id) {
            Some(old) => (old.fact.created_ms, old.fact.injections),
            None => (now_ms, 0),
        };
        self.insert_entry(Entry::new(Fact {
            fact_id,
            subject: new.subject,
            body: new.body,
            kind: new.kind,
            confidence: new.confidence,
            tags: new.tags,
            source: new.source,
            created_ms,
            updated_ms: now_ms,
            injections,
            proactive: new.proactive,
        }));
        self.facts.len()
    }

    /// Deletes a fact. An unknown id changes nothing and is not an error: the report says
    /// `deleted: false, kind: None`.
    pub fn delete(&mut self, fact_id: &str) -> DeleteReport {
        let removed = self.remove_entry(fact_id);
        DeleteReport {
            id: fact_id.to_owned(),
            deleted: removed.is_some(),
            kind: removed.map(|e| DeletedKind::Fact(e.fact.kind)),
            fact_count: self.facts.len(),
        }
    }

    /// The `k` facts most relevant to `query`, best first (see [`crate::ranking`] for the
    /// formula). `k` must already be validated (see [`crate::validate_k`]); it is clamped to
    /// [`MAX_K`] regardless. A blank query is an error.
    pub fn query(
        &self,
        query: &str,
        k: usize,
        semantic: Option<SemanticQuery<'_>>,
    ) -> Result<Vec<FactHit>, ValidationError> {
        validate_query(query)?;
        let ranked = self.rank_top(query, semantic.as_ref(), |_| true, k.clamp(1, MAX_K));
        Ok(ranked
            .into_iter()
            .map(|(score, e)| FactHit {
                fact_id: e.fact.fact_id.clone(),
                subject: e.fact.subject.clone(),
                body: e.fact.body.clone(),
                kind: e.fact.kind,
                confidence: score,
                tags: e.fact.tags.clone(),
                source: e.fact.source.clone(),
            })
            .collect())
    }

    /// [`Graph::query`] with an embedder, synchronously: embeds what is missing (blocking),
    /// then ranks. An embedder failure degrades to lexical ranking with a warning rather
    /// than failing the query. The store uses a two-phase variant that embeds outside locks.
    pub fn query_with(
        &self,
        query: &str,
        k: usize,
        embeddings: &Embeddings,
    ) -> Result<Vec<FactHit>, ValidationError> {
        validate_query(query)?;
        match embeddings.prepare(query, &self.missing_embeddings(embeddings)) {
            Ok(vector) => self.query(
                query,
                k,
                Some(SemanticQuery {
                    vector: &vector,
                    embeddings,
                }),
            ),
            Err(error) => {
                tracing::warn!(model = embeddings.model_id(), %error, "embedding failed; ranking lexically");
                self.query(query, k, None)
            }
        }
    }

    /// Fact texts whose vectors `embeddings` has not cached yet.
    pub fn missing_embeddings(&self, embeddings: &Embeddings) -> Vec<(ContentHash, String)> {
        let mut missing: std::collections::HashSet<ContentHash> = embeddings
            .missing(self.content_hashes())
            .into_iter()
            .collect();
        let mut texts: Vec<(ContentHash, String)> = Vec::with_capacity(missing.len());
        for e in self.facts.values() {
            if missing.remove(&e.hash) {
                texts.push((
                    e.hash,
                    fact_text(&e.fact.subject, &e.fact.body, &e.fact.tags),
                ));
            }
        }
        texts
    }

    /// The content hashes of every fact (to prune an embedding cache).
    pub fn content_hashes(&self) -> impl Iterator<Item = ContentHash> + '_ {
        self.facts.values().map(|e| e.hash)
    }

    /// Every fact passing `filter` with a positive score, best first.
    pub(crate) fn rank<'a>(
        &'a self,
        query: &str,
        semantic: Option<&SemanticQuery<'_>>,
        filter: impl Fn(&Fact) -> bool,
    ) -> Vec<(f64, &'a Entry)> {
        self.rank_top(query, semantic, filter, usize::MAX)
    }

    /// The first `limit` of [`Graph::rank`]'s list, in the same order. Lexical ranking
    /// scores only the facts sharing a query term, through the inverted index
    /// ([`FactTable::lexical_scores`], bit-identical scores): the others score 0 and would
    /// be dropped anyway. With a semantic query every fact is scored,
    /// since similarity alone can rank a fact. The best `limit` are selected before
    /// sorting; the order is total (ties end on the unique fact id), so selecting then
    /// sorting gives exactly the head of the fully sorted list.
    pub(crate) fn rank_top<'a>(
        &'a self,
        query: &str,
        semantic: Option<&SemanticQuery<'_>>,
        filter: impl Fn(&Fact) -> bool,
        limit: usize,
    ) -> Vec<(f64, &'a Entry)> {
        let terms = QueryTerms::new(query);
        if limit == 0 || (terms.is_empty() && semantic.is_none()) {
            return Vec::new();
        }
        let prepared = self.lexical.prepare(&terms);
        let score = |e: &'a Entry| (prepared.score(&e.terms, &e.hash, semantic), e);
        let mut scored: Vec<(f64, &Entry)> = match semantic {
            None => {
                let mut scored = self.facts.lexical_scores(&prepared);
                scored.retain(|(_, e)| filter(&e.fact));
                scored
            }
            Some(_) => self
                .facts
                .values()
                .filter(|e| filter(&e.fact))
                .map(score)
                .filter(|(s, _)| *s > 0.0)
                .collect(),
        };
        let order = |(sa, a): &(f64, &Entry), (sb, b): &(f64, &Entry)| {
            sb.partial_cmp(sa)
                .unwrap_or(Ordering::Equal)
                .then_with(|| {
                    b.fact
                        .confidence
                        .partial_cmp(&a.fact.confidence)
                        .unwrap_or(Ordering::Equal)
                })
                .then_with(|| b.fact.updated_ms.cmp(&a.fact.updated_ms))
                .then_with(|| a.fact.fact_id.cmp(&b.fact.fact_id))
        };
        if scored.len() > limit {
            scored.select_nth_unstable_by(limit - 1, order);
            scored.truncate(limit);
        }
        scored.sort_by(order);
        scored
    }

    /// Replaces this graph's whole content with `other`'s (for `memory.load`).
    pub fn replace_with(&mut self, other: Graph) {
        *self = other;
        self.changes = Changes {
            replaced: true,
            ..Changes::default()
        };
    }

    pub(crate) fn insert_entry(&mut self, entry: Entry) {
        self.changes.fact(&entry.fact.fact_id);
        self.lexical.add(&entry.terms);
        self.fact_bytes += entry.encoded_len;
        if let Some(old) = self.facts.insert(entry) {
            self.lexical.remove(&old.terms);
            self.fact_bytes -= old.encoded_len;
        }
    }

    pub(crate) fn remove_entry(&mut self, fact_id: &str) -> Option<Entry> {
        let entry = self.facts.remove(fact_id)?;
        self.changes.fact(fact_id);
        self.lexical.remove(&entry.terms);
        self.fact_bytes -= entry.encoded_len;
        Some(entry)
    }

    /// The exact length of [`crate::snapshot::encode`]'s output for this graph, without
    /// encoding the facts (skills, typically few, are measured each time).
    pub fn encoded_len(&self) -> u64 {
        let skill_bytes: u64 = self
            .skills
            .values()
            .map(crate::snapshot_size::nested_len)
            .sum();
        crate::snapshot_size::snapshot_len(
            self.facts.len() as u64,
            self.fact_bytes,
            self.skills.len() as u64,
            skill_bytes,
        )
    }

    /// A new id: `f-` and 16 hex digits of a hash over the content, the time and a
    /// process-wide counter, retried on the (astronomically unlikely) collision.
    fn fresh_fact_id(&self, subject: &str, body: &str, now_ms: u64) -> String {
        self.fresh_id("f", subject, body, now_ms)
    }

    /// [`Graph::fresh_fact_id`] with another prefix (`knowledge`, `procedural`).
    pub(crate) fn fresh_id(&self, prefix: &str, subject: &str, body: &str, now_ms: u64) -> String {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        loop {
            let n = COUNTER.fetch_add(1, AtomicOrdering::Relaxed);
            let mut h = Sha256::new();
            h.update(subject.as_bytes());
            h.update([0]);
            h.update(body.as_bytes());
            h.update(now_ms.to_le_bytes());
            h.update(n.to_le_bytes());
            h.update(std::process::id().to_le_bytes());
            let id = format!("{prefix}-{}", &hex::encode(h.finalize())[..16]);
            if !self.facts.contains_key(&id) {
                return id;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fact::{FactInput, FactKind};

    fn add(g: &mut Graph, input: FactInput, now: u64) -> usize {
        g.add_fact_at(input.validate().unwrap(), now)
    }

    #[test]
    fn add_returns_count_and_generates_ids() {
        let mut g = Graph::new();
        assert_eq!(add(&mut g, FactInput::new("a", "b"), 1), 1);
        assert_eq!(
            add(&mut g, FactInput::new("a", "b"), 1),
            2,
            "same text, new id"
        );
        assert!(g
            .facts()
            .iter()
            .all(|f| f.fact_id.starts_with("f-") && f.fact_id.len() == 18));
    }

    #[test]
    fn same_fact_id_replaces_and_keeps_created() {
        let mut g = Graph::new();
        add(&mut g, FactInput::new("editor", "tabs").fact_id("x"), 10);
        let n = add(
            &mut g,
            FactInput::new("editor", "spaces")
                .fact_id("x")
                .kind(FactKind::Preference),
            20,
        );
        assert_eq!(n, 1);
        let f = g.fact("x").unwrap();
        assert_eq!(
            (f.body.as_str(), f.kind, f.created_ms, f.updated_ms),
            ("spaces", FactKind::Preference, 10, 20)
        );
        assert!(
            g.query("tabs", 5, None).unwrap().is_empty(),
            "old text is unindexed"
        );
        assert_eq!(g.query("spaces", 5, None).unwrap().len(), 1);
    }

    #[test]
    fn delete_reports_kind_and_count_and_tolerates_unknown_ids() {
        let mut g = Graph::new();
        add(
            &mut g,
            FactInput::new("a", "b")
                .fact_id("gone")
                .kind(FactKind::Constraint),
            1,
        );
        add(&mut g, FactInput::new("c", "d").fact_id("kept"), 1);
        assert_eq!(
            g.delete("nope"),
            DeleteReport {
                id: "nope".into(),
                deleted: false,
                kind: None,
                fact_count: 2
            }
        );
        let report = g.delete("gone");
        assert_eq!(
            report,
            DeleteReport {
                id: "gone".into(),
                deleted: true,
                kind: Some(DeletedKind::Fact(FactKind::Constraint)),
                fact_count: 1
            }
        );
        assert_eq!(
            serde_json::to_value(&report).unwrap(),
            serde_json::json!({"id": "gone", "deleted": true, "kind": "constraint", "fact_count": 1})
        );
        assert_eq!(
            serde_json::to_value(g.delete("gone")).unwrap(),
            serde_json::json!({"id": "gone", "deleted": false, "kind": null, "fact_count": 1}),
            "a second delete of the same id is a no-op"
        );
        assert!(g.query("a", 5, None).unwrap().is_empty(), "unindexed");
        assert_eq!(g.query("c", 5, None).unwrap().len(), 1);
    }

    #[test]
    fn query_ranks_and_bounds_scores() {
        let mut g = Graph::new();
        add(
            &mut g,
            FactInput::new("retry policy", "retry tool calls three times").fact_id("r"),
            1,
        );
        add(
            &mut g,
            FactInput::new("tool timeout", "tool calls time out after 30s").fact_id("t"),
            1,
        );
        add(
            &mut g,
            FactInput::new("editor", "four spaces").fact_id("e"),
            1,
        );
        let hits = g.query("retrying tool calls", 2, None).unwrap();
        assert_eq!(
            hits.iter().map(|h| h.fact_id.as_str()).collect::<Vec<_>>(),
            ["r", "t"]
        );
        assert!(hits
            .iter()
            .all(|h| h.confidence > 0.0 && h.confidence <= 1.0));
        assert!(hits[0].confidence > hits[1].confidence);
        assert_eq!(
            g.query(" ", 5, None).unwrap_err().to_string(),
            "query: must not be empty"
        );
        assert!(
            g.query("the of", 5, None).unwrap().is_empty(),
            "stop words match nothing"
        );
    }

    #[test]
    fn from_records_refuses_duplicates() {
        let f = Fact {
            fact_id: "x".into(),
            subject: "s".into(),
            body: "b".into(),
            kind: FactKind::Fact,
            confidence: 0.5,
            tags: vec![],
            source: None,
            created_ms: 1,
            updated_ms: 1,
            injections: 0,
            proactive: None,
        };
        assert!(Graph::from_records(vec![f.clone(), f], vec![])
            .unwrap_err()
            .contains("duplicate fact_id"));
    }
}

/// Test support shared by the unit tests of this crate's modules.
#[cfg(test)]
pub(crate) mod test_support {
    use super::Graph;
    use crate::fact::{FactInput, FactKind};

    /// Adds a fact with a fixed id, kind and timestamp; panics on invalid input.
    pub(crate) fn add(
        g: &mut Graph,
        id: &str,
        subject: &str,
        body: &str,
        kind: FactKind,
        now: u64,
    ) {
        g.add_fact_at(
            FactInput::new(subject, body)
                .fact_id(id)
                .kind(kind)
                .validate()
                .unwrap(),
            now,
        );
    }
}

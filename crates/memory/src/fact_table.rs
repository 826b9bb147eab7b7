//! The fact table: one scope's facts by id, with an inverted index from term to fact.
//!
//! Owns where each [`Entry`] lives (a slab of slots, so a posting is a 4-byte slot number
//! instead of a copy of the fact id), the id → slot map and the postings (analysed term →
//! slots of the facts containing it). The postings are updated by [`FactTable::insert`] and
//! [`FactTable::remove`], the only ways in, so they cannot drift from the facts.
//!
//! Lexical ranking ([`FactTable::lexical_scores`]) walks the posting lists of the query's
//! terms, term by term in query order, accumulating each fact's BM25 sum in a dense array
//! from the posting's term frequency and the fact's length (both stored in the index, so
//! no entry is touched until the end): a fact sharing no term scores exactly 0 and is never
//! returned, and a fact's sum is built from the same contributions in the same order as
//! [`crate::ranking::PreparedQuery::lexical`], so scores are bit-identical to scoring every
//! fact. The formula is [`crate::ranking`]'s; ranking order is [`crate::graph`]'s.
//!
//! Cost: a query is O(postings of its terms) (about 2–3 ns each) plus one pass over a
//! zeroed array of one `f64` per slot; insert and remove are O(distinct terms of the fact)
//! plus, for remove, a scan of each of its terms' posting lists (a few microseconds for a
//! term shared by 100k facts); memory is 8 bytes per (fact, distinct term) pair and 4 per
//! slot on top of the entries.

use crate::graph::Entry;
use crate::ranking::PreparedQuery;
use std::collections::HashMap;

/// One fact containing a term: its slot and the term's (weighted) count in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Posting {
    slot: u32,
    tf: u32,
}

/// The facts of one scope, by id, with the term → fact postings.
#[derive(Debug, Clone, Default)]
pub(crate) struct FactTable {
    slots: Vec<Option<Entry>>,
    /// Each slot's document length (0 when free), beside the postings for locality.
    lens: Vec<u32>,
    free: Vec<u32>,
    by_id: HashMap<String, u32>,
    postings: HashMap<String, Vec<Posting>>,
}

impl FactTable {
    /// How many facts the table holds.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    pub(crate) fn contains_key(&self, fact_id: &str) -> bool {
        self.by_id.contains_key(fact_id)
    }

    pub(crate) fn get(&self, fact_id: &str) -> Option<&Entry> {
        let slot = *self.by_id.get(fact_id)?;
        self.slots[slot as usize].as_ref()
    }

    /// Mutable access for changes that keep the fact's text (its analysed terms) as it is,
    /// such as counting an injection; text changes go through [`FactTable::insert`].
    pub(crate) fn get_mut(&mut self, fact_id: &str) -> Option<&mut Entry> {
        let slot = *self.by_id.get(fact_id)?;
        self.slots[slot as usize].as_mut()
    }

    /// Every entry, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().filter_map(Option::as_ref)
    }

    /// Inserts `entry`, returning the entry it replaced (same fact id), if any.
    pub(crate) fn insert(&mut self, entry: Entry) -> Option<Entry> {
        let old = self.remove(&entry.fact.fact_id);
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(None);
                self.lens.push(0);
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        for (term, tf) in entry.terms.term_counts() {
            let posting = Posting { slot, tf };
            match self.postings.get_mut(term) {
                Some(list) => list.push(posting),
                None => {
                    self.postings.insert(term.clone(), vec![posting]);
                }
            }
        }
        self.lens[slot as usize] = entry.terms.len();
        self.by_id.insert(entry.fact.fact_id.clone(), slot);
        self.slots[slot as usize] = Some(entry);
        old
    }

    /// Removes and returns the fact with this id.
    pub(crate) fn remove(&mut self, fact_id: &str) -> Option<Entry> {
        let slot = self.by_id.remove(fact_id)?;
        let entry = self.slots[slot as usize].take()?;
        for term in entry.terms.distinct_terms() {
            if let Some(list) = self.postings.get_mut(term) {
                if let Some(at) = list.iter().position(|p| p.slot == slot) {
                    list.swap_remove(at);
                }
                if list.is_empty() {
                    self.postings.remove(term);
                }
            }
        }
        self.lens[slot as usize] = 0;
        self.free.push(slot);
        Some(entry)
    }

    /// Every fact with a positive lexical score for `query`, with that score (exactly
    /// [`PreparedQuery::lexical`]'s), in no particular order.
    pub(crate) fn lexical_scores(&self, query: &PreparedQuery) -> Vec<(f64, &Entry)> {
        if query.is_void() {
            return Vec::new();
        }
        let mut sums = vec![0.0f64; self.slots.len()];
        let mut touched: Vec<u32> = Vec::new();
        for (term, weight) in query.weighted_terms() {
            let Some(list) = self.postings.get(term) else {
                continue;
            };
            for p in list {
                let sum = &mut sums[p.slot as usize];
                if *sum == 0.0 {
                    touched.push(p.slot);
                }
                *sum += query.contribution(weight, p.tf, self.lens[p.slot as usize]);
            }
        }
        touched
            .into_iter()
            .filter_map(|slot| {
                let entry = self.slots[slot as usize].as_ref()?;
                let score = query.normalise(sums[slot as usize]);
                (score > 0.0).then_some((score, entry))
            })
            .collect()
    }

    /// Every fact containing at least one of `terms`, each once, in no particular order.
    #[cfg(test)]
    fn candidates<'t>(&self, terms: impl Iterator<Item = &'t str>) -> Vec<&Entry> {
        let mut slots: Vec<u32> = Vec::new();
        for term in terms {
            if let Some(list) = self.postings.get(term) {
                slots.extend(list.iter().map(|p| p.slot));
            }
        }
        slots.sort_unstable();
        slots.dedup();
        slots
            .into_iter()
            .filter_map(|slot| self.slots[slot as usize].as_ref())
            .collect()
    }

    /// How many slots are allocated (live plus free), for tests of slot reuse.
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fact::FactInput;
    use crate::graph::Graph;

    fn entry(id: &str, subject: &str, body: &str) -> Entry {
        let mut g = Graph::new();
        g.add_fact_at(
            FactInput::new(subject, body)
                .fact_id(id)
                .validate()
                .unwrap(),
            1,
        );
        g.facts.get(id).unwrap().clone()
    }

    fn ids<'a>(table: &'a FactTable, terms: &[&'a str]) -> Vec<String> {
        let mut ids: Vec<String> = table
            .candidates(terms.iter().copied())
            .into_iter()
            .map(|e| e.fact.fact_id.clone())
            .collect();
        ids.sort();
        ids
    }

    #[test]
    fn candidates_follow_inserts_replacements_and_removals() {
        let mut t = FactTable::default();
        t.insert(entry("a", "retry policy", "retry three times"));
        t.insert(entry("b", "tool timeout", "tools time out"));
        t.insert(entry("c", "editor", "four spaces"));
        assert_eq!(ids(&t, &["retri", "tool"]), ["a", "b"]);
        assert_eq!(ids(&t, &["unknown"]), Vec::<String>::new());
        let old = t.insert(entry("a", "editor", "tabs")).unwrap();
        assert_eq!(old.fact.subject, "retry policy");
        assert_eq!(
            ids(&t, &["retri"]),
            Vec::<String>::new(),
            "old text unindexed"
        );
        assert_eq!(ids(&t, &["editor"]), ["a", "c"]);
        assert_eq!(t.remove("c").unwrap().fact.fact_id, "c");
        assert!(t.remove("c").is_none());
        assert_eq!(ids(&t, &["editor", "space"]), ["a"]);
        assert_eq!(t.len(), 2);
        assert!(!t.postings.contains_key("space"), "empty lists are dropped");
    }

    /// The indexed, top-k ranking returns exactly what scoring and sorting every fact does.
    #[test]
    fn indexed_top_k_equals_the_full_scan() {
        use crate::ranking::QueryTerms;
        use std::cmp::Ordering;
        let words = [
            "retry", "tool", "deploy", "friday", "editor", "tabs", "spaces", "timeout", "cache",
            "index", "journal", "snapshot", "query", "agent", "model", "socket",
        ];
        let mut seed: u64 = 7;
        let mut next = move |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as usize) % n
        };
        let mut g = Graph::new();
        for i in 0..600 {
            let pick = |next: &mut dyn FnMut(usize) -> usize, n: usize| {
                (0..n)
                    .map(|_| words[next(words.len())])
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let subject = pick(&mut next, 2);
            let len = 1 + next(6);
            let body = pick(&mut next, len);
            let input = FactInput::new(subject, body)
                .fact_id(format!("f{}", i % 500))
                .confidence([0.5, 0.9, 1.0][next(3)]);
            g.add_fact_at(input.validate().unwrap(), (i % 7) as u64);
            if i % 50 == 0 {
                g.delete(&format!("f{}", next(500)));
            }
        }
        for query in [
            "retry tool",
            "deploy on friday",
            "tabs spaces editor cache",
            "model",
        ] {
            let terms = QueryTerms::new(query);
            let prepared = g.lexical.prepare(&terms);
            let mut full: Vec<(f64, &Entry)> = g
                .facts
                .values()
                .map(|e| (prepared.score(&e.terms, &e.hash, None), e))
                .filter(|(s, _)| *s > 0.0)
                .collect();
            full.sort_by(|(sa, a), (sb, b)| {
                sb.partial_cmp(sa)
                    .unwrap_or(Ordering::Equal)
                    .then_with(|| b.fact.confidence.partial_cmp(&a.fact.confidence).unwrap())
                    .then_with(|| b.fact.updated_ms.cmp(&a.fact.updated_ms))
                    .then_with(|| a.fact.fact_id.cmp(&b.fact.fact_id))
            });
            let key = |v: &[(f64, &Entry)]| -> Vec<(u64, String)> {
                v.iter()
                    .map(|(s, e)| (s.to_bits(), e.fact.fact_id.clone()))
                    .collect()
            };
            assert!(full.len() > 20, "{query}: {}", full.len());
            for k in [1, 5, 20, usize::MAX] {
                let top = g.rank_top(query, None, |_| true, k);
                let expected = &full[..k.min(full.len())];
                assert_eq!(key(&top), key(expected), "{query} k={k}");
            }
        }
    }

    #[test]
    fn removed_slots_are_reused() {
        let mut t = FactTable::default();
        for i in 0..10 {
            t.insert(entry(&format!("f{i}"), "subject", "body"));
        }
        for i in 0..5 {
            t.remove(&format!("f{i}"));
        }
        for i in 10..15 {
            t.insert(entry(&format!("f{i}"), "subject", "body"));
        }
        assert_eq!((t.len(), t.capacity()), (10, 10));
        assert_eq!(ids(&t, &["subject"]).len(), 10);
        assert_eq!(t.get("f12").unwrap().fact.fact_id, "f12");
        assert!(t.get("f3").is_none());
    }
}

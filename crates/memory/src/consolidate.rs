//! `memory.consolidate`: merging duplicate facts.
//!
//! Owns the duplicate rules and the merge. It must not touch skills (procedural memory is
//! replaced by name, never merged) or do I/O.
//!
//! # Rules
//! Two facts of the **same kind** are duplicates when
//! - *exact*: their subjects and bodies are equal after [`crate::text::normalise`] (case,
//!   punctuation and spacing ignored), or
//! - *near*: the Jaccard similarity of their analysed subject+body term sets
//!   ([`crate::text::terms`]: stemmed, stop words dropped; tags ignored) is at least
//!   [`NEAR_DUPLICATE_JACCARD`]. At 0.85 two facts of five or fewer distinct terms must have the
//!   same terms, so a short rule that differs by a `never` is never merged with its opposite.
//!
//! Duplicate pairs are grouped transitively. Each group becomes one fact that keeps the id
//! and `created_ms` of its earliest member, the subject and body of its most recently
//! updated member (the newest wording), the union of all tags (earliest member's first),
//! the highest confidence, the latest `updated_ms`, the first source present and the sum of
//! the members' injection counts. Proactive entries (knowledge, procedural) are never
//! merged: they are saved additively and addressed by id.
//! Candidate pairs are found with a prefix filter (rarest terms first), which is exact for
//! Jaccard thresholds and avoids comparing every pair.

use crate::fact::Fact;
use crate::graph::{Entry, Graph};
pub use car_proto::methods::memory::{ConsolidationReport, MergeReason, MergedGroup};
use std::collections::{HashMap, HashSet};

/// Jaccard similarity at or above which two same-kind facts are near-duplicates.
pub const NEAR_DUPLICATE_JACCARD: f64 = 0.85;

fn jaccard(a: &HashSet<String>, b: &HashSet<String>) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let inter = a.intersection(b).count() as f64;
    inter / (a.len() as f64 + b.len() as f64 - inter)
}

fn find(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

fn union(parent: &mut [usize], a: usize, b: usize) {
    let (ra, rb) = (find(parent, a), find(parent, b));
    if ra != rb {
        parent[ra.max(rb)] = ra.min(rb);
    }
}

impl Graph {
    /// Merges duplicate facts (rules in the module docs) and reports what it merged.
    pub fn consolidate(&mut self) -> ConsolidationReport {
        // Oldest first, so index order is the survivor order and reports are stable.
        let facts: Vec<Fact> = self.facts().into_iter().cloned().collect();
        let n = facts.len();
        // Proactive entries are addressed by id and saved additively: they never merge, so
        // each gets a key no other fact can share.
        let keys: Vec<String> = facts
            .iter()
            .map(|f| {
                if f.kind.is_proactive() {
                    return format!("\u{0}{}", f.fact_id);
                }
                format!(
                    "{}\n{}\n{}",
                    f.kind,
                    crate::text::normalise(&f.subject),
                    crate::text::normalise(&f.body)
                )
            })
            .collect();
        let sets: Vec<HashSet<String>> = facts
            .iter()
            .map(|f| {
                crate::text::terms(&format!("{}\n{}", f.subject, f.body))
                    .into_iter()
                    .collect()
            })
            .collect();
        let mut parent: Vec<usize> = (0..n).collect();

        let mut first_with_key: HashMap<&str, usize> = HashMap::new();
        for (i, key) in keys.iter().enumerate() {
            match first_with_key.get(key.as_str()) {
                Some(&j) => union(&mut parent, i, j),
                None => {
                    first_with_key.insert(key, i);
                }
            }
        }

        // Prefix filter: order each set's terms rarest first; two sets with Jaccard ≥ t
        // must share a term within their first |x| − ⌈t·|x|⌉ + 1 terms.
        let mut df: HashMap<&str, usize> = HashMap::new();
        for set in &sets {
            for term in set {
                *df.entry(term.as_str()).or_default() += 1;
            }
        }
        let mut index: HashMap<&str, Vec<usize>> = HashMap::new();
        for i in 0..n {
            let mut ordered: Vec<&str> = sets[i].iter().map(String::as_str).collect();
            ordered.sort_by(|a, b| df[a].cmp(&df[b]).then_with(|| a.cmp(b)));
            let size = ordered.len();
            let prefix = size - (NEAR_DUPLICATE_JACCARD * size as f64).ceil() as usize + 1;
            let prefix = &ordered[..prefix.min(size)];
            let mut candidates: HashSet<usize> = HashSet::new();
            for term in prefix {
                if let Some(list) = index.get(term) {
                    candidates.extend(list.iter().copied());
                }
            }
            for j in candidates {
                if facts[j].kind == facts[i].kind
                    && !facts[i].kind.is_proactive()
                    && jaccard(&sets[i], &sets[j]) >= NEAR_DUPLICATE_JACCARD
                {
                    union(&mut parent, i, j);
                }
            }
            for term in prefix {
                index.entry(term).or_default().push(i);
            }
        }

        let mut groups: HashMap<usize, Vec<usize>> = HashMap::new();
        for i in 0..n {
            let root = find(&mut parent, i);
            groups.entry(root).or_default().push(i);
        }
        let mut groups: Vec<Vec<usize>> = groups.into_values().filter(|g| g.len() > 1).collect();
        groups.sort_by_key(|g| g[0]);

        let mut report = ConsolidationReport::default();
        for members in groups {
            let survivor = members[0];
            let newest = *members
                .iter()
                .max_by(|&&a, &&b| {
                    facts[a]
                        .updated_ms
                        .cmp(&facts[b].updated_ms)
                        .then_with(|| a.cmp(&b))
                })
                .unwrap_or(&survivor);
            let mut merged = facts[survivor].clone();
            merged.subject = facts[newest].subject.clone();
            merged.body = facts[newest].body.clone();
            for &m in &members[1..] {
                let f = &facts[m];
                for tag in &f.tags {
                    if !merged.tags.contains(tag) {
                        merged.tags.push(tag.clone());
                    }
                }
                merged.confidence = merged.confidence.max(f.confidence);
                merged.created_ms = merged.created_ms.min(f.created_ms);
                merged.updated_ms = merged.updated_ms.max(f.updated_ms);
                merged.injections += f.injections;
                if merged.source.is_none() {
                    merged.source = f.source.clone();
                }
            }
            let reason = if members.iter().all(|&m| keys[m] == keys[survivor]) {
                MergeReason::Exact
            } else {
                MergeReason::Near
            };
            let similarity = members[1..]
                .iter()
                .map(|&m| jaccard(&sets[survivor], &sets[m]))
                .fold(1.0, f64::min);
            let removed: Vec<String> = members[1..]
                .iter()
                .map(|&m| facts[m].fact_id.clone())
                .collect();
            for id in &removed {
                self.remove_entry(id);
            }
            self.insert_entry(Entry::new(merged));
            report.removed_count += removed.len();
            report.merged.push(MergedGroup {
                kept: facts[survivor].fact_id.clone(),
                removed,
                reason,
                similarity,
            });
        }
        report.fact_count = self.fact_count();
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fact::{FactInput, FactKind};
    use crate::graph::test_support::add;

    #[test]
    fn jaccard_values() {
        let a: HashSet<String> = ["x", "y"].map(String::from).into();
        let b: HashSet<String> = ["x", "z"].map(String::from).into();
        assert!((jaccard(&a, &b) - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(jaccard(&a, &a), 1.0);
    }

    #[test]
    fn exact_and_near_duplicates_merge_but_opposites_do_not() {
        let mut g = Graph::new();
        add(
            &mut g,
            "a",
            "Editor",
            "Use tabs, not spaces.",
            FactKind::Preference,
            1,
        );
        add(
            &mut g,
            "b",
            "editor",
            "use TABS not spaces",
            FactKind::Preference,
            2,
        );
        add(
            &mut g,
            "c",
            "editor",
            "use tabs not spaces",
            FactKind::Fact,
            3,
        );
        add(
            &mut g,
            "d",
            "deploys",
            "never deploy to production on friday afternoons",
            FactKind::Constraint,
            4,
        );
        add(
            &mut g,
            "e",
            "deploys",
            "deploy to production on friday afternoons",
            FactKind::Constraint,
            5,
        );
        add(
            &mut g,
            "f",
            "ci cache",
            "the ci pipeline caches cargo registry and target directories between runs",
            FactKind::Pattern,
            6,
        );
        add(
            &mut g,
            "g",
            "ci cache",
            "the ci pipeline caches the cargo registry and the target directory between runs",
            FactKind::Pattern,
            7,
        );
        let report = g.consolidate();
        assert_eq!(report.removed_count, 2, "{report:?}");
        assert_eq!(report.fact_count, 5);
        assert_eq!(report.merged[0].kept, "a");
        assert_eq!(report.merged[0].removed, ["b"]);
        assert_eq!(report.merged[0].reason, MergeReason::Exact);
        assert_eq!(report.merged[1].kept, "f");
        assert_eq!(report.merged[1].reason, MergeReason::Near);
        assert!(g.fact("c").is_some(), "a different kind is never merged");
        assert!(
            g.fact("d").is_some() && g.fact("e").is_some(),
            "a negation keeps facts apart"
        );
        assert_eq!(
            g.fact("f").unwrap().body,
            "the ci pipeline caches the cargo registry and the target directory between runs"
        );
    }

    #[test]
    fn merge_keeps_union_of_tags_max_confidence_and_earliest_created() {
        let mut g = Graph::new();
        g.add_fact_at(
            FactInput::new("s", "same body")
                .fact_id("old")
                .tags(["x"])
                .confidence(0.2)
                .validate()
                .unwrap(),
            5,
        );
        g.add_fact_at(
            FactInput::new("S", "Same body!")
                .fact_id("new")
                .tags(["y", "x"])
                .confidence(0.9)
                .source("run-7")
                .validate()
                .unwrap(),
            9,
        );
        let report = g.consolidate();
        assert_eq!(report.removed_count, 1);
        let f = g.fact("old").unwrap();
        assert_eq!(f.tags, ["x", "y"]);
        assert_eq!((f.confidence, f.created_ms, f.updated_ms), (0.9, 5, 9));
        assert_eq!(f.source.as_deref(), Some("run-7"));
        assert_eq!(
            g.query("same body", 5, None).unwrap().len(),
            1,
            "index is updated"
        );
        assert_eq!(g.consolidate().removed_count, 0, "idempotent");
    }
}

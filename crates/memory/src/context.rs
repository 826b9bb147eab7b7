//! `memory.build_context`: a layered text block for a model prompt.
//!
//! Owns the budget rule, the layer order and the block's format. It must not rank on its
//! own (it asks the graph) or do I/O.
//!
//! # Budget rule
//! - The window is `model_context_window` (default [`DEFAULT_CONTEXT_WINDOW`] = 8192, accepted
//!   range [`MIN_CONTEXT_WINDOW`]..=[`MAX_CONTEXT_WINDOW`]). Memory gets a quarter of it
//!   ([`BUDGET_DIVISOR`]), leaving the rest for the prompt and the answer.
//! - Tokens are estimated conservatively as UTF-8 bytes / 3, rounded up
//!   ([`crate::text::estimate_tokens`]), always over the whole text built so far, so the reported
//!   `used_tokens` is exactly the estimate of the returned text.
//! - Every constraint is always included. When the constraint layer alone is larger than a quarter
//!   of the window, the budget is raised to exactly that layer's size (and nothing else fits);
//!   `budget_tokens` in the result reports the budget actually applied. When it is larger than the
//!   whole window, no valid block exists and the call fails with [`MemoryError::WindowTooSmall`]
//!   naming both numbers, rather than silently dropping a hard rule or overflowing the model. So
//!   `used_tokens ≤ budget_tokens ≤ window` and every constraint is present, always.
//!
//! # Layers, in order
//! 1. `## Constraints`: every `constraint` fact (and proactive entry saved with `is_constraint`),
//!    oldest first.
//! 2. `## Relevant memory`: facts of the other kinds except `unknown`, best first by
//!    [`crate::ranking`], at most [`MAX_RELEVANT`]; one that does not fit is skipped and smaller
//!    ones after it may still fit.
//! 3. `## Known unknowns`: `unknown` facts, those relevant to the query first (best first), then
//!    the rest newest first, while they fit.
//!
//! A layer with nothing in it (or whose header and first line do not fit) is left out.
//! Newlines inside a fact are flattened to spaces so each fact stays one list item.

use crate::embed::SemanticQuery;
use crate::error::{MemoryError, ValidationError};
use crate::fact::{Fact, FactKind};
use crate::graph::Graph;
use crate::text::{estimate_tokens, tokens_for_bytes};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// Window assumed when the caller gives none.
pub const DEFAULT_CONTEXT_WINDOW: usize = 8_192;
/// Smallest accepted window.
pub const MIN_CONTEXT_WINDOW: usize = 256;
/// Largest accepted window.
pub const MAX_CONTEXT_WINDOW: usize = 10_000_000;
/// The memory budget is the window divided by this.
pub const BUDGET_DIVISOR: usize = 4;
/// Most facts in the relevant layer.
pub const MAX_RELEVANT: usize = 50;

const CONSTRAINTS_HEADER: &str = "## Constraints (always follow)\n";
const RELEVANT_HEADER: &str = "## Relevant memory\n";
const UNKNOWNS_HEADER: &str = "## Known unknowns (open questions)\n";

/// How many facts each layer holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerCounts {
    /// Constraints (always all of them).
    pub constraints: usize,
    /// Relevant facts.
    pub relevant: usize,
    /// Known unknowns.
    pub unknowns: usize,
}

/// The `memory.build_context` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextBlock {
    /// The layered block.
    pub text: String,
    /// The window the budget was derived from.
    pub window_tokens: usize,
    /// The budget applied (see the module docs).
    pub budget_tokens: usize,
    /// Estimated tokens of `text`; never more than `budget_tokens`.
    pub used_tokens: usize,
    /// Facts included per layer.
    pub included: LayerCounts,
    /// Candidate facts left out for lack of budget, per layer (`constraints` is always 0).
    pub omitted: LayerCounts,
}

/// Validates `model_context_window`: absent → default, else within the accepted range.
pub fn validate_window(window: Option<i64>) -> Result<usize, ValidationError> {
    match window {
        None => Ok(DEFAULT_CONTEXT_WINDOW),
        Some(w) if (MIN_CONTEXT_WINDOW as i64..=MAX_CONTEXT_WINDOW as i64).contains(&w) => {
            Ok(w as usize)
        }
        Some(w) => Err(ValidationError::new(
            "model_context_window",
            format!("must be between {MIN_CONTEXT_WINDOW} and {MAX_CONTEXT_WINDOW} (got {w})"),
        )),
    }
}

fn line(fact: &Fact, with_kind: bool) -> String {
    let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    if with_kind {
        format!(
            "- [{}] {}: {}\n",
            fact.kind,
            flat(&fact.subject),
            flat(&fact.body)
        )
    } else {
        format!("- {}: {}\n", flat(&fact.subject), flat(&fact.body))
    }
}

/// Appends one layer greedily; returns (included, omitted).
fn push_layer<'a>(
    text: &mut String,
    budget: usize,
    header: &str,
    facts: impl Iterator<Item = &'a Fact>,
    with_kind: bool,
) -> (usize, usize) {
    let (mut included, mut omitted) = (0, 0);
    for fact in facts {
        let item = line(fact, with_kind);
        let prefix_len = if included == 0 {
            usize::from(!text.is_empty()) + header.len()
        } else {
            0
        };
        if tokens_for_bytes(text.len() + prefix_len + item.len()) > budget {
            omitted += 1;
            continue;
        }
        if included == 0 {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(header);
        }
        text.push_str(&item);
        included += 1;
    }
    (included, omitted)
}

impl Graph {
    /// Builds the layered context block for `query` within the budget derived from
    /// `window` (already validated by [`validate_window`]). A blank query is allowed: the
    /// relevant layer is then empty and unknowns come newest first.
    pub fn build_context(
        &self,
        query: &str,
        window: usize,
        semantic: Option<SemanticQuery<'_>>,
    ) -> Result<ContextBlock, MemoryError> {
        let window = window.clamp(MIN_CONTEXT_WINDOW, MAX_CONTEXT_WINDOW);
        let mut constraints: Vec<&Fact> = self
            .facts()
            .into_iter()
            .filter(|f| f.is_constraint())
            .collect();
        constraints.sort_by(|a, b| {
            a.created_ms
                .cmp(&b.created_ms)
                .then_with(|| a.fact_id.cmp(&b.fact_id))
        });

        let mut text = String::new();
        if !constraints.is_empty() {
            text.push_str(CONSTRAINTS_HEADER);
            for fact in &constraints {
                text.push_str(&line(fact, false));
            }
        }
        let needed = estimate_tokens(&text);
        if needed > window {
            return Err(MemoryError::WindowTooSmall { window, needed });
        }
        let budget = (window / BUDGET_DIVISOR).max(needed);

        let semantic = semantic.filter(|_| !query.trim().is_empty());
        let relevant: Vec<&Fact> = self
            .rank(query, semantic.as_ref(), |f| {
                !f.is_constraint() && f.kind != FactKind::Unknown
            })
            .into_iter()
            .take(MAX_RELEVANT)
            .map(|(_, e)| &e.fact)
            .collect();
        let (relevant_in, relevant_out) = push_layer(
            &mut text,
            budget,
            RELEVANT_HEADER,
            relevant.into_iter(),
            true,
        );

        let mut unknowns: Vec<&Fact> = self
            .rank(query, semantic.as_ref(), |f| f.kind == FactKind::Unknown)
            .into_iter()
            .map(|(_, e)| &e.fact)
            .collect();
        let ranked: HashSet<&str> = unknowns.iter().map(|f| f.fact_id.as_str()).collect();
        let mut rest: Vec<&Fact> = self
            .facts
            .values()
            .map(|e| &e.fact)
            .filter(|f| f.kind == FactKind::Unknown && !ranked.contains(f.fact_id.as_str()))
            .collect();
        rest.sort_by(|a, b| {
            b.updated_ms
                .cmp(&a.updated_ms)
                .then_with(|| a.fact_id.cmp(&b.fact_id))
        });
        unknowns.extend(rest);
        let (unknowns_in, unknowns_out) = push_layer(
            &mut text,
            budget,
            UNKNOWNS_HEADER,
            unknowns.into_iter(),
            false,
        );

        let used = estimate_tokens(&text);
        debug_assert!(used <= budget);
        Ok(ContextBlock {
            text,
            window_tokens: window,
            budget_tokens: budget,
            used_tokens: used,
            included: LayerCounts {
                constraints: constraints.len(),
                relevant: relevant_in,
                unknowns: unknowns_in,
            },
            omitted: LayerCounts {
                constraints: 0,
                relevant: relevant_out,
                unknowns: unknowns_out,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::test_support::add;

    #[test]
    fn layers_come_in_order() {
        let mut g = Graph::new();
        add(
            &mut g,
            "u",
            "flaky test",
            "why does the websocket test time out on ci",
            FactKind::Unknown,
            1,
        );
        add(
            &mut g,
            "p",
            "websocket",
            "the websocket server closes idle sockets after 60s",
            FactKind::Fact,
            2,
        );
        add(
            &mut g,
            "c",
            "main branch",
            "never push directly to main",
            FactKind::Constraint,
            3,
        );
        add(
            &mut g,
            "x",
            "coffee",
            "the user likes espresso",
            FactKind::Preference,
            4,
        );
        let block = g
            .build_context("websocket timeouts", DEFAULT_CONTEXT_WINDOW, None)
            .unwrap();
        let c = block.text.find("never push").unwrap();
        let p = block.text.find("closes idle").unwrap();
        let u = block.text.find("why does").unwrap();
        assert!(c < p && p < u, "{}", block.text);
        assert!(
            !block.text.contains("espresso"),
            "irrelevant facts stay out"
        );
        assert_eq!(
            block.included,
            LayerCounts {
                constraints: 1,
                relevant: 1,
                unknowns: 1
            }
        );
        assert_eq!(block.budget_tokens, 2048);
        assert_eq!(block.used_tokens, estimate_tokens(&block.text));
    }

    #[test]
    fn budget_holds_and_constraints_are_all_kept() {
        let mut g = Graph::new();
        for i in 0..40 {
            add(
                &mut g,
                &format!("c{i}"),
                &format!("rule {i}"),
                &"always sign commits with the release key ".repeat(3),
                FactKind::Constraint,
                i,
            );
            add(
                &mut g,
                &format!("f{i}"),
                &format!("commit note {i}"),
                &"commits are signed with a release key ".repeat(5),
                FactKind::Fact,
                i,
            );
            add(
                &mut g,
                &format!("u{i}"),
                &format!("question {i}"),
                "which key signs commits",
                FactKind::Unknown,
                i,
            );
        }
        for window in [256, 1000, 4000, 8192, 100_000] {
            match g.build_context("signing commits", window, None) {
                Ok(block) => {
                    assert!(
                        block.used_tokens <= block.budget_tokens && block.budget_tokens <= window
                    );
                    assert_eq!(block.included.constraints, 40);
                    for i in 0..40 {
                        assert!(
                            block.text.contains(&format!("rule {i}:")),
                            "window {window}"
                        );
                    }
                }
                Err(MemoryError::WindowTooSmall { window: w, needed }) => {
                    assert_eq!(w, window);
                    assert!(needed > window);
                }
                Err(other) => panic!("{other}"),
            }
        }
        let small = g.build_context("signing commits", 4000, None).unwrap();
        assert!(small.budget_tokens > 1000, "raised to the constraint layer");
        assert_eq!(small.included.relevant, 0);
        let err = g.build_context("x", 256, None).unwrap_err().to_string();
        assert!(
            err.starts_with("model_context_window: 256 is too small for the"),
            "{err}"
        );
    }

    #[test]
    fn window_rule() {
        assert_eq!(validate_window(None).unwrap(), 8192);
        assert_eq!(
            validate_window(Some(0)).unwrap_err().to_string(),
            "model_context_window: must be between 256 and 10000000 (got 0)"
        );
        assert!(validate_window(Some(1_000_000_000)).is_err());
    }

    #[test]
    fn empty_graph_gives_empty_text() {
        let block = Graph::new()
            .build_context("", DEFAULT_CONTEXT_WINDOW, None)
            .unwrap();
        assert_eq!((block.text.as_str(), block.used_tokens), ("", 0));
    }
}

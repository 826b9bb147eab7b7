//! `memory.intervene`: the proactive-memory selector, CAR's `ProactiveMemoryRequest` →
//! an inject or silent decision over the scope's durable facts.
//!
//! Owns the request's validation, the scoring, the threshold and the injection counter. It
//! must not write anything but that counter; the entries it chooses from are saved by
//! [`crate::proactive`], and [`crate::evaluate`] scores it offline.
//!
//! # Scoring
//! Deterministic and lexical only (the embedder is not consulted, so a decision never
//! depends on a model). A request sees plain facts, untenanted entries and the entries of
//! its own `tenant_id`. For every fact it sees:
//! - `relevance = max(bm25(query), RECENT_WEIGHT · bm25(recent joined))`, with `bm25` the
//!   normalised score of [`crate::ranking`] against the scope's index over the query terms some
//!   fact contains, times the share of query terms that are such (`LexicalIndex::prepare_known`: a
//!   fixed threshold must mean the same in a bank of one fact as in a bank of thousands);
//! - `score = min(1, relevance · (1 + boosts))`, the boosts being [`CONSTRAINT_BOOST`] for a
//!   constraint (plus [`HIGH_RISK_CONSTRAINT_BOOST`] under `high_risk_action`), [`KNOWLEDGE_BOOST`]
//!   for knowledge, [`GROUNDING_BOOST`] for knowledge and `unknown` facts under
//!   `explicit_uncertainty` or `context_shift`, and for procedural entries
//!   [`FAILURE_PROCEDURAL_BOOST`] under `tool_error` or `repeated_failures ≥ 1` plus
//!   [`REPEATED_FAILURE_BOOST`] when `repeated_failures ≥ 2`.
//!
//! Facts with relevance 0 are not candidates. The candidates are the best `max_candidates`
//! (1–32, default 8) by score, then relevance, stored confidence, latest update and id. The
//! decision is `inject` with the best candidate when its score is at least
//! [`INJECT_THRESHOLD`] (or `force` is set and there is a candidate); otherwise `silent`
//! with the first reason that applies: `empty_bank` (no fact visible to the request),
//! `no_query` (neither `query` nor `recent` has a searchable term), `no_candidates`,
//! `below_threshold`. Injecting increments the selected fact's injection counter, which is
//! persisted: `memory.intervene` is not idempotent. `bank` counts the whole scope's facts
//! by kind (plain facts, knowledge, procedural), whatever the tenant.

use crate::error::{MemoryError, ValidationError};
use crate::fact::{Fact, FactKind, MAX_BODY_CHARS};
use crate::graph::Graph;
use crate::proactive::optional_label;
use crate::ranking::QueryTerms;
use crate::store::{MemoryStore, Scope};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// `max_candidates` when absent.
pub const DEFAULT_MAX_CANDIDATES: usize = 8;
/// Largest accepted `max_candidates`.
pub const MAX_CANDIDATES: usize = 32;
/// Most `recent` entries in one request.
pub const MAX_RECENT: usize = 256;
/// The score the best candidate must reach to be injected without `force`.
pub const INJECT_THRESHOLD: f64 = 0.3;
/// How much a match against `recent` counts relative to a match against `query`.
pub const RECENT_WEIGHT: f64 = 0.8;
/// Boost for a constraint (a hard rule is worth an interruption sooner).
pub const CONSTRAINT_BOOST: f64 = 0.25;
/// Further boost for a constraint when the next action is high-risk.
pub const HIGH_RISK_CONSTRAINT_BOOST: f64 = 0.5;
/// Boost for a knowledge entry (requirements, verified facts).
pub const KNOWLEDGE_BOOST: f64 = 0.15;
/// Boost for knowledge and `unknown` facts under uncertainty or a context shift.
pub const GROUNDING_BOOST: f64 = 0.25;
/// Boost for a procedural entry after a tool error or a failure.
pub const FAILURE_PROCEDURAL_BOOST: f64 = 0.5;
/// Further boost for a procedural entry after two or more failures.
pub const REPEATED_FAILURE_BOOST: f64 = 0.25;

/// The runtime pressure signals of a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trigger {
    pub repeated_failures: u32,
    pub tool_error: bool,
    pub explicit_uncertainty: bool,
    pub high_risk_action: bool,
    pub context_shift: bool,
}

/// `memory.intervene` params (CAR's `ProactiveMemoryRequest`) before validation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestInput {
    pub query: Option<String>,
    /// Recent actions or observations, newest last.
    pub recent: Vec<String>,
    pub trigger: Trigger,
    pub force: bool,
    /// 1–32; [`DEFAULT_MAX_CANDIDATES`] when absent.
    pub max_candidates: Option<i64>,
    pub tenant_id: Option<String>,
}

/// A validated request; only [`RequestInput::validate`] makes one.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub(crate) query: String,
    pub(crate) recent: String,
    pub(crate) trigger: Trigger,
    pub(crate) force: bool,
    pub(crate) max_candidates: usize,
    pub(crate) tenant_id: Option<String>,
}

impl RequestInput {
    /// Checks every rule; the first broken one is returned, naming its field.
    pub fn validate(self) -> Result<Request, ValidationError> {
        let query = self.query.unwrap_or_default();
        check_chars("query", &query)?;
        if self.recent.len() > MAX_RECENT {
            return Err(ValidationError::new(
                "recent",
                format!(
                    "must have at most {MAX_RECENT} entries (got {})",
                    self.recent.len()
                ),
            ));
        }
        for line in &self.recent {
            check_chars("recent", line)?;
        }
        let max_candidates = match self.max_candidates {
            None => DEFAULT_MAX_CANDIDATES,
            Some(n) if (1..=MAX_CANDIDATES as i64).contains(&n) => n as usize,
            Some(n) => {
                return Err(ValidationError::new(
                    "max_candidates",
                    format!("must be between 1 and {MAX_CANDIDATES} (got {n})"),
                ))
            }
        };
        Ok(Request {
            query,
            recent: self.recent.join("\n"),
            trigger: self.trigger,
            force: self.force,
            max_candidates,
            tenant_id: optional_label("tenant_id", self.tenant_id)?,
        })
    }
}

fn check_chars(field: &'static str, text: &str) -> Result<(), ValidationError> {
    let n = text.chars().count();
    if n > MAX_BODY_CHARS {
        return Err(ValidationError::new(
            field,
            format!("must be at most {MAX_BODY_CHARS} characters (got {n})"),
        ));
    }
    Ok(())
}

/// One scored entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub fact_id: String,
    pub subject: String,
    pub body: String,
    pub kind: FactKind,
    /// The text match alone, in [0, 1].
    pub relevance: f64,
    /// The boosted score the selector ranks by, in [0, 1].
    pub score: f64,
}

/// Why the selector stayed silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SilentReason {
    EmptyBank,
    NoQuery,
    NoCandidates,
    BelowThreshold,
}

impl SilentReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SilentReason::EmptyBank => "empty_bank",
            SilentReason::NoQuery => "no_query",
            SilentReason::NoCandidates => "no_candidates",
            SilentReason::BelowThreshold => "below_threshold",
        }
    }
}

/// The selector's decision.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Interrupt with one reminder.
    Inject {
        reminder: String,
        selected: Candidate,
    },
    /// Stay silent.
    Silent(SilentReason),
}

/// How many facts of each class the scope holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bank {
    /// Plain facts (every non-proactive kind).
    pub facts: usize,
    pub knowledge: usize,
    pub procedural: usize,
}

/// One `memory.intervene` outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Intervention {
    pub decision: Decision,
    /// The candidates scored, best first.
    pub candidates: Vec<Candidate>,
    pub bank: Bank,
}

fn boost(fact: &Fact, t: &Trigger) -> f64 {
    let mut m = 1.0;
    if fact.is_constraint() {
        m += CONSTRAINT_BOOST;
        if t.high_risk_action {
            m += HIGH_RISK_CONSTRAINT_BOOST;
        }
    }
    let grounding = t.explicit_uncertainty || t.context_shift;
    match fact.kind {
        FactKind::Knowledge => {
            m += KNOWLEDGE_BOOST;
            if grounding {
                m += GROUNDING_BOOST;
            }
        }
        FactKind::Unknown if grounding => m += GROUNDING_BOOST,
        FactKind::Procedural => {
            if t.tool_error || t.repeated_failures >= 1 {
                m += FAILURE_PROCEDURAL_BOOST;
            }
            if t.repeated_failures >= 2 {
                m += REPEATED_FAILURE_BOOST;
            }
        }
        _ => {}
    }
    m
}

/// The reminder text for an injected candidate.
fn reminder(c: &Candidate) -> String {
    format!(
        "Remember ({}, {}): {}: {}",
        c.kind, c.fact_id, c.subject, c.body
    )
}

impl Graph {
    /// The scope's fact counts by class.
    pub fn bank(&self) -> Bank {
        let mut bank = Bank::default();
        for e in self.facts.values() {
            match e.fact.kind {
                FactKind::Knowledge => bank.knowledge += 1,
                FactKind::Procedural => bank.procedural += 1,
                _ => bank.facts += 1,
            }
        }
        bank
    }

    /// Runs the selector (module docs) without changing anything.
    pub fn select(&self, req: &Request) -> Intervention {
        let bank = self.bank();
        let silent = |reason, candidates| Intervention {
            decision: Decision::Silent(reason),
            candidates,
            bank,
        };
        let visible =
            |f: &Fact| f.tenant_id().is_none() || f.tenant_id() == req.tenant_id.as_deref();
        if !self.facts.values().any(|e| visible(&e.fact)) {
            return silent(SilentReason::EmptyBank, Vec::new());
        }
        let (query_terms, recent_terms) =
            (QueryTerms::new(&req.query), QueryTerms::new(&req.recent));
        if query_terms.is_empty() && recent_terms.is_empty() {
            return silent(SilentReason::NoQuery, Vec::new());
        }
        let ((query, query_coverage), (recent, recent_coverage)) = (
            self.lexical.prepare_known(&query_terms),
            self.lexical.prepare_known(&recent_terms),
        );
        let mut scored: Vec<(Candidate, &Fact)> = self
            .facts
            .values()
            .filter(|e| visible(&e.fact))
            .filter_map(|e| {
                let relevance = (query_coverage * query.lexical(&e.terms))
                    .max(RECENT_WEIGHT * recent_coverage * recent.lexical(&e.terms));
                (relevance > 0.0).then(|| {
                    let f = &e.fact;
                    let candidate = Candidate {
                        fact_id: f.fact_id.clone(),
                        subject: f.subject.clone(),
                        body: f.body.clone(),
                        kind: f.kind,
                        relevance,
                        score: (relevance * boost(f, &req.trigger)).min(1.0),
                    };
                    (candidate, f)
                })
            })
            .collect();
        let by = |a: f64, b: f64| b.partial_cmp(&a).unwrap_or(Ordering::Equal);
        scored.sort_by(|(a, fa), (b, fb)| {
            by(a.score, b.score)
                .then_with(|| by(a.relevance, b.relevance))
                .then_with(|| by(fa.confidence, fb.confidence))
                .then_with(|| fb.updated_ms.cmp(&fa.updated_ms))
                .then_with(|| a.fact_id.cmp(&b.fact_id))
        });
        let candidates: Vec<Candidate> = scored
            .into_iter()
            .take(req.max_candidates)
            .map(|(c, _)| c)
            .collect();
        let Some(best) = candidates.first() else {
            return silent(SilentReason::NoCandidates, candidates);
        };
        if !req.force && best.score < INJECT_THRESHOLD {
            return silent(SilentReason::BelowThreshold, candidates);
        }
        let decision = Decision::Inject {
            reminder: reminder(best),
            selected: best.clone(),
        };
        Intervention {
            decision,
            candidates,
            bank,
        }
    }

    /// Counts one injection of `fact_id`; false when there is no such fact.
    pub fn record_injection(&mut self, fact_id: &str) -> bool {
        match self.facts.get_mut(fact_id) {
            Some(e) => {
                e.fact.injections = e.fact.injections.saturating_add(1);
                let encoded_len = crate::snapshot_size::nested_len(&e.fact);
                self.fact_bytes = self.fact_bytes - e.encoded_len + encoded_len;
                e.encoded_len = encoded_len;
                self.changes.fact(fact_id);
                true
            }
            None => false,
        }
    }
}

impl MemoryStore {
    /// `memory.intervene`: selects and, on `inject`, durably counts the injection (the
    /// selection and the count happen under one lock, so the counted fact is the one
    /// returned). A silent decision writes nothing.
    pub async fn intervene(
        &self,
        scope: &Scope,
        req: &Request,
    ) -> Result<Intervention, MemoryError> {
        self.mutate_if_changed(scope, |g| {
            let outcome = g.select(req);
            let changed = match &outcome.decision {
                Decision::Inject { selected, .. } => g.record_injection(&selected.fact_id),
                Decision::Silent(_) => false,
            };
            Ok((outcome, changed))
        })
        .await
    }
}

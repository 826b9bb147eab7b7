//! `memory.evaluate`: the proactive selector ([`crate::intervene`]) against the paper-style
//! baselines on labelled next-action cases.
//!
//! Owns the counting rules below. It must not change the graph: the selector runs through
//! [`Graph::select`], which counts no injection, so evaluating is read-only and repeatable.
//!
//! # Counting
//! For each case the selector runs once on the case's request, giving its candidates `C`
//! (best first, at most `max_candidates`) and its decision. Each mode exposes a set `E` of
//! fact ids for the case:
//! - `selective`: `{selected}` when the decision is `inject` (the request as given, `force`
//!   included), else nothing;
//! - `always_inject`: `{C[0]}`, the best candidate whatever its score, when `C` is non-empty;
//! - `passive_retrieval`: all of `C` (no interruption policy);
//! - `no_memory`: nothing.
//!
//! With `R` the case's `relevant_fact_ids` (absent or empty: silence is right):
//! - an *intervention* is a case where `E` is non-empty;
//! - a *true positive* is an intervention with `E ∩ R ≠ ∅`;
//! - a *false positive* is an intervention with `E ∩ R = ∅` (every intervention when `R` is empty);
//! - a *false negative* is a case with `R ≠ ∅` and `E ∩ R = ∅`, so a wrong reminder is both a false
//!   positive and a false negative;
//! - `precision = TP / interventions`, `recall = TP / (cases with R ≠ ∅)`, `interruption_rate =
//!   interventions / cases`, `avg_candidates_exposed = Σ|E| / cases`; a ratio whose denominator is
//!   0 is 0.0.

use crate::error::{MemoryError, ValidationError};
use crate::graph::Graph;
use crate::intervene::{Decision, Request};
use crate::store::{MemoryStore, Scope};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// Most cases one evaluation runs.
pub const MAX_EVAL_CASES: usize = 1_000;

/// One labelled case.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalCase {
    /// The caller's label for the case.
    pub id: String,
    /// The request the selector answers.
    pub request: Request,
    /// The facts a good reminder would be; empty: silence is right.
    pub relevant_fact_ids: Vec<String>,
}

/// One mode's scores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ModeScore {
    pub interventions: usize,
    pub true_positives: usize,
    pub false_positives: usize,
    pub false_negatives: usize,
    pub precision: f64,
    pub recall: f64,
    pub interruption_rate: f64,
    pub avg_candidates_exposed: f64,
}

/// Every mode's scores over the cases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// How many cases ran.
    pub cases: usize,
    pub selective: ModeScore,
    pub always_inject: ModeScore,
    pub passive_retrieval: ModeScore,
    pub no_memory: ModeScore,
}

/// Running counts for one mode.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    cases: usize,
    labelled: usize,
    interventions: usize,
    true_positives: usize,
    false_positives: usize,
    false_negatives: usize,
    exposed: usize,
}

impl Tally {
    fn record(&mut self, exposed: &[&str], relevant: &HashSet<&str>) {
        self.cases += 1;
        self.exposed += exposed.len();
        let hit = exposed.iter().any(|id| relevant.contains(id));
        if !relevant.is_empty() {
            self.labelled += 1;
            if !hit {
                self.false_negatives += 1;
            }
        }
        if !exposed.is_empty() {
            self.interventions += 1;
            if hit {
                self.true_positives += 1;
            } else {
                self.false_positives += 1;
            }
        }
    }

    fn score(self) -> ModeScore {
        let ratio = |n: usize, d: usize| if d == 0 { 0.0 } else { n as f64 / d as f64 };
        ModeScore {
            interventions: self.interventions,
            true_positives: self.true_positives,
            false_positives: self.false_positives,
            false_negatives: self.false_negatives,
            precision: ratio(self.true_positives, self.interventions),
            recall: ratio(self.true_positives, self.labelled),
            interruption_rate: ratio(self.interventions, self.cases),
            avg_candidates_exposed: ratio(self.exposed, self.cases),
        }
    }
}

impl Graph {
    /// Scores every mode over `cases` (counting rules in the module docs).
    pub fn evaluate(&self, cases: &[EvalCase]) -> Evaluation {
        let [mut selective, mut always, mut passive, mut none] = [Tally::default(); 4];
        for case in cases {
            let relevant: HashSet<&str> =
                case.relevant_fact_ids.iter().map(String::as_str).collect();
            let outcome = self.select(&case.request);
            let all: Vec<&str> = outcome
                .candidates
                .iter()
                .map(|c| c.fact_id.as_str())
                .collect();
            let chosen: Vec<&str> = match &outcome.decision {
                Decision::Inject { selected, .. } => vec![selected.fact_id.as_str()],
                Decision::Silent(_) => Vec::new(),
            };
            selective.record(&chosen, &relevant);
            always.record(&all[..all.len().min(1)], &relevant);
            passive.record(&all, &relevant);
            none.record(&[], &relevant);
        }
        Evaluation {
            cases: cases.len(),
            selective: selective.score(),
            always_inject: always.score(),
            passive_retrieval: passive.score(),
            no_memory: none.score(),
        }
    }
}

/// Refuses more than [`MAX_EVAL_CASES`] cases, naming `cases`.
pub fn validate_case_count(n: usize) -> Result<(), ValidationError> {
    if n > MAX_EVAL_CASES {
        return Err(ValidationError::new(
            "cases",
            format!("must have at most {MAX_EVAL_CASES} entries (got {n})"),
        ));
    }
    Ok(())
}

impl MemoryStore {
    /// `memory.evaluate`: read-only, so no injection counter changes.
    pub async fn evaluate(
        &self,
        scope: &Scope,
        cases: &[EvalCase],
    ) -> Result<Evaluation, MemoryError> {
        validate_case_count(cases.len())?;
        self.read(scope, |g| g.evaluate(cases)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fact::FactKind;
    use crate::graph::test_support::add;
    use crate::intervene::{RequestInput, Trigger};
    use crate::proactive::SaveInput;

    fn request(query: &str, trigger: Trigger) -> Request {
        RequestInput {
            query: Some(query.to_owned()),
            trigger,
            ..RequestInput::default()
        }
        .validate()
        .unwrap()
    }

    fn case(id: &str, query: &str, trigger: Trigger, relevant: &[&str]) -> EvalCase {
        EvalCase {
            id: id.to_owned(),
            request: request(query, trigger),
            relevant_fact_ids: relevant.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn graph() -> Graph {
        let mut g = Graph::new();
        let save = |id: &str, s: &str, b: &str| SaveInput {
            id: Some(id.to_owned()),
            ..SaveInput::new(s, b)
        };
        g.save_proactive_at(
            FactKind::Procedural,
            save(
                "linker",
                "cargo linker error",
                "when the linker cc is not found install build-essential",
            )
            .validate()
            .unwrap(),
            1,
        );
        g.save_proactive_at(
            FactKind::Knowledge,
            save(
                "staging",
                "deploy target staging",
                "deploy to the staging cluster eu-west-2 first",
            )
            .validate()
            .unwrap(),
            1,
        );
        add(
            &mut g,
            "editor",
            "editor settings",
            "use four spaces in the editor",
            FactKind::Preference,
            1,
        );
        g
    }

    #[test]
    fn modes_count_as_documented() {
        let g = graph();
        let tool_error = Trigger {
            tool_error: true,
            ..Trigger::default()
        };
        let cases = [
            // Strong procedural match under a tool error: selective injects the right one.
            case("a", "cargo linker cc not found", tool_error, &["linker"]),
            // A one-word brush with the editor fact: selective stays silent, which is right.
            case("b", "editor theme colours", Trigger::default(), &[]),
            // Nothing matches, but a reminder was wanted: every mode misses it.
            case("c", "rotate the api keys", Trigger::default(), &["staging"]),
        ];
        let sel = g.select(&cases[1].request);
        assert_eq!(sel.candidates.len(), 1, "{sel:?}");
        assert!(matches!(sel.decision, Decision::Silent(_)), "{sel:?}");
        let e = g.evaluate(&cases);
        assert_eq!(e.cases, 3);
        let counts = |m: ModeScore| {
            (
                m.interventions,
                m.true_positives,
                m.false_positives,
                m.false_negatives,
            )
        };
        assert_eq!(counts(e.selective), (1, 1, 0, 1));
        assert_eq!((e.selective.precision, e.selective.recall), (1.0, 0.5));
        assert!((e.selective.interruption_rate - 1.0 / 3.0).abs() < 1e-12);
        assert!((e.selective.avg_candidates_exposed - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(counts(e.always_inject), (2, 1, 1, 1));
        assert_eq!(e.always_inject.precision, 0.5);
        let passive_exposed = g.select(&cases[0].request).candidates.len() + 1;
        assert_eq!(counts(e.passive_retrieval), (2, 1, 1, 1));
        assert!(
            (e.passive_retrieval.avg_candidates_exposed - passive_exposed as f64 / 3.0).abs()
                < 1e-12
        );
        assert_eq!(counts(e.no_memory), (0, 0, 0, 2));
        assert_eq!((e.no_memory.precision, e.no_memory.recall), (0.0, 0.0));
    }

    #[test]
    fn no_cases_score_zero_and_evaluation_changes_nothing() {
        let g = graph();
        assert_eq!(g.evaluate(&[]), Evaluation::default());
        let before: Vec<_> = g.facts().into_iter().cloned().collect();
        g.evaluate(&[case("a", "cargo linker", Trigger::default(), &["linker"])]);
        assert_eq!(g.facts().into_iter().cloned().collect::<Vec<_>>(), before);
        assert_eq!(
            validate_case_count(1_001).unwrap_err().to_string(),
            "cases: must have at most 1000 entries (got 1001)"
        );
    }
}

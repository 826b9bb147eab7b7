//! The router: which registered model answers a prompt when the caller names none
//! (`models.route`, and `infer` without `model`).
//!
//! 1. **Candidates**: every model that generates (local GGUF, remote, delegated; not embedding
//!    models).
//! 2. **Hard filter**: `intent.require` capabilities must all be among the model's declared
//!    `capabilities`; none left is an error naming them.
//! 3. **Soft filters**: `intent.exclude_models` (by id) and a declared `context_length` below the
//!    prompt's estimated size (4 bytes a token) drop models, unless that would leave none (then the
//!    filter is ignored; an oversized prompt sets `needs_compaction`).
//! 4. **Reliability**: the Beta(successes + 1, failures + 1) posterior mean of the model's resolved
//!    outcomes in the ledger (0.5 for a model never resolved). The **band** is every candidate
//!    within [`BAND`] of the best reliability (outcome first).
//! 5. **Score** = reliability + tie-breakers: cheaper priced models (up to +0.05; unpriced remote
//!    models count as dearest, local ones as free), a local model (+0.01, so it wins a tie; +0.2
//!    under `prefer_local`), lower mean latency under `prefer_fast` (up to +0.1), a model declaring
//!    the task (`code`, `reasoning`, …) as a capability (+0.1), and under `prefer_quality` /
//!    `high_stakes` reliability counted twice. The chosen model is the best-scored in the band;
//!    `fallbacks` are the rest of the band, then everyone else, by score.
//!
//! `task` is the intent's, else guessed from the prompt; `complexity` is `simple` (< 200
//! estimated tokens), `moderate` (< 2,000) or `complex`.

use car_proto::methods::inference::routing::{IntentHint, RouteCandidate, RouteDecision};
use car_proto::methods::models::ModelEntry;

use crate::outcomes::OutcomeLedger;

/// How far below the best reliability a model may be and stay in the band.
pub const BAND: f64 = 0.1;

/// A prompt's estimated size in tokens.
pub fn estimate_tokens(prompt: &str) -> u64 {
    (prompt.len() as u64).div_ceil(4)
}

fn guess_task(prompt: &str) -> &'static str {
    let p = prompt.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| p.contains(w));
    if has(&[
        "```",
        "fn ",
        "def ",
        "function",
        "compile",
        "code",
        "bug",
        "stack trace",
    ]) {
        "code"
    } else if has(&["summarize", "summarise", "summary", "tl;dr"]) {
        "summarize"
    } else if has(&["classify", "categorize", "which category", "label"]) {
        "classify"
    } else if has(&["extract", "pull out", "list every"]) {
        "extract"
    } else if has(&["why", "prove", "reason", "step by step", "derive"]) {
        "reasoning"
    } else {
        "chat"
    }
}

/// The route for `prompt` over `entries` (see the module docs); `price` is a model's
/// price per 1M tokens (input + output), `None` when unpriced.
pub fn route(
    entries: &[ModelEntry],
    ledger: &OutcomeLedger,
    prompt: &str,
    intent: Option<&IntentHint>,
    price: &dyn Fn(&ModelEntry) -> Option<f64>,
) -> Result<RouteDecision, String> {
    let default = IntentHint::default();
    let intent = intent.unwrap_or(&default);
    let mut pool: Vec<&ModelEntry> = entries
        .iter()
        .filter(|e| e.kind_name() != "embedding")
        .collect();
    if pool.is_empty() {
        return Err("model: no registered model can generate".into());
    }
    if !intent.require.is_empty() {
        pool.retain(|e| {
            let caps = e.meta.capabilities.as_deref().unwrap_or(&[]);
            intent.require.iter().all(|r| caps.iter().any(|c| c == r))
        });
        if pool.is_empty() {
            return Err(format!(
                "intent.require: no registered model declares {}",
                intent.require.join(", ")
            ));
        }
    }
    let soft = |pool: &mut Vec<&ModelEntry>, keep: &dyn Fn(&ModelEntry) -> bool| {
        let kept: Vec<&ModelEntry> = pool.iter().copied().filter(|e| keep(e)).collect();
        if !kept.is_empty() {
            *pool = kept;
        }
    };
    soft(&mut pool, &|e| !intent.exclude_models.contains(&e.id));
    let tokens = estimate_tokens(prompt);
    soft(&mut pool, &|e| {
        e.meta.context_length.is_none_or(|c| c >= tokens)
    });

    let quality = intent.prefer_quality == Some(true) || intent.high_stakes == Some(true);
    let task = intent
        .task
        .clone()
        .unwrap_or_else(|| guess_task(prompt).to_string());
    let prices: Vec<Option<f64>> = pool.iter().map(|e| price(e)).collect();
    let dearest = prices.iter().flatten().copied().fold(0.0, f64::max);
    let latencies: Vec<Option<f64>> = pool.iter().map(|e| ledger.avg_latency(&e.id)).collect();
    let slowest = latencies.iter().flatten().copied().fold(0.0, f64::max);
    let mut scored: Vec<(f64, f64, &ModelEntry)> = pool
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let (s, f) = ledger.counts(&e.id);
            let reliability = (s as f64 + 1.0) / ((s + f) as f64 + 2.0);
            let local = e.kind_name() == "gguf";
            let cost = match prices[i] {
                Some(p) => p,
                None if local => 0.0,
                None => dearest,
            };
            let mut score = if quality {
                2.0 * reliability
            } else {
                reliability
            };
            if dearest > 0.0 {
                score += 0.05 * (1.0 - cost / dearest);
            }
            if local {
                // Nothing else said: the local model (private, free) wins a tie, as the
                // engine's default (the first GGUF) did before routing.
                score += if intent.prefer_local == Some(true) {
                    0.2
                } else {
                    0.01
                };
            }
            if let (Some(lat), true, true) = (
                latencies[i],
                intent.prefer_fast == Some(true),
                slowest > 0.0,
            ) {
                score += 0.1 * (1.0 - lat / slowest);
            }
            let caps = e.meta.capabilities.as_deref().unwrap_or(&[]);
            if caps.contains(&task) {
                score += 0.1;
            }
            (reliability, score, *e)
        })
        .collect();
    let best = scored.iter().map(|s| s.0).fold(0.0, f64::max);
    let in_band = |r: f64| r >= best - BAND;
    scored.sort_by(|a, b| {
        in_band(b.0)
            .cmp(&in_band(a.0))
            .then(b.1.total_cmp(&a.1))
            .then_with(|| a.2.id.cmp(&b.2.id))
    });
    let (reliability, _, chosen) = scored[0];
    let context_length = chosen.meta.context_length;
    Ok(RouteDecision {
        model_id: chosen.id.clone(),
        model_name: chosen.id.clone(),
        complexity: match tokens {
            0..200 => "simple",
            200..2000 => "moderate",
            _ => "complex",
        }
        .into(),
        reason: format!(
            "highest score among {} model(s) within {BAND} of the best reliability ({best:.2}); task {task}",
            scored.iter().filter(|s| in_band(s.0)).count()
        ),
        task,
        strategy: "outcome_first".into(),
        predicted_quality: reliability,
        fallbacks: scored[1..].iter().map(|s| s.2.id.clone()).collect(),
        context_length,
        needs_compaction: context_length.is_some_and(|c| c < tokens),
        candidates: scored
            .iter()
            .enumerate()
            .map(|(i, (r, s, e))| RouteCandidate {
                model_id: e.id.clone(),
                reliability: *r,
                score: *s,
                selected: i == 0,
                in_band: in_band(*r),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(v: serde_json::Value) -> ModelEntry {
        serde_json::from_value(v).unwrap()
    }

    fn models() -> Vec<ModelEntry> {
        vec![
            entry(
                json!({"id": "cheap", "kind": "delegated", "capabilities": ["code"], "context_length": 100}),
            ),
            entry(json!({"id": "dear", "kind": "delegated", "capabilities": ["code", "vision"]})),
            entry(json!({"id": "emb", "kind": "delegated"})),
        ]
    }

    #[test]
    fn filters_bands_and_outcomes_decide() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = OutcomeLedger::open(&dir.path().join("l.jsonl"));
        let price = |e: &ModelEntry| match e.id.as_str() {
            "cheap" => Some(1.0),
            "dear" => Some(10.0),
            _ => None,
        };
        let m = models();
        let r = route(&m, &ledger, "fix this bug", None, &price).unwrap();
        assert_eq!((r.model_id.as_str(), r.task.as_str()), ("cheap", "code"));
        assert_eq!(r.candidates.len(), 3);
        let vision = IntentHint {
            require: vec!["vision".into()],
            ..Default::default()
        };
        assert_eq!(
            route(&m, &ledger, "x", Some(&vision), &price)
                .unwrap()
                .model_id,
            "dear"
        );
        let none = IntentHint {
            require: vec!["audio".into()],
            ..Default::default()
        };
        assert!(route(&m, &ledger, "x", Some(&none), &price)
            .unwrap_err()
            .starts_with("intent.require"));
        let all = IntentHint {
            exclude_models: vec!["cheap".into(), "dear".into(), "emb".into()],
            ..Default::default()
        };
        assert_eq!(
            route(&m, &ledger, "x", Some(&all), &price)
                .unwrap()
                .model_id,
            "cheap",
            "exclusion is soft"
        );
        let long = "word ".repeat(200);
        let r = route(&m, &ledger, &long, None, &price).unwrap();
        assert_ne!(r.model_id, "cheap", "cheap's context is too short");
        // Failures push cheap out of the band.
        for i in 0..4 {
            ledger.record_call("cheap", &format!("t{i}"), true, 1, 1, 1.0, Some(0.0));
        }
        let r = route(&m, &ledger, "fix this bug", None, &price).unwrap();
        assert_ne!(r.model_id, "cheap");
        assert!(r
            .candidates
            .iter()
            .any(|c| c.model_id == "cheap" && !c.in_band));
        assert_eq!(*r.fallbacks.last().unwrap(), "cheap");
    }
}

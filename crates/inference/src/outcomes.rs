//! The outcome ledger: one receipt per generation in `outcome_ledger.jsonl`, folded per
//! model, plus the live profiles `models.stats` answers.
//!
//! Lines (JSON, one per line, appended):
//! - `{"kind":"call", model_id, trace_id, outcome, input_tokens, output_tokens, latency_ms,
//!   cost_usd}`: `outcome` is `failure` (the generation errored) or `inconclusive` (it answered;
//!   nobody has said yet whether the answer was right);
//! - `{"kind":"resolve", trace_id, success, confidence}`: the verdict on a pending receipt
//!   (`outcomes.resolve_pending`); `confidence` is its quality score;
//! - `{"kind":"summary", model_id, …}`: a folded row, written when the file is compacted.
//!
//! The fold is kept in memory and every line goes to the file before it counts. A line that
//! does not parse is skipped. When the file passes [`COMPACT_BYTES`] at open it is rewritten
//! as one summary line per model plus the still-pending receipts (atomically). At most
//! [`MAX_PENDING`] receipts wait for a verdict; older ones stay inconclusive for good.
//!
//! Live profiles count since the process started: calls, successes (resolved), failures
//! (errors and resolved failures), latency, and an exponential moving average of resolved
//! quality.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use car_proto::methods::inference::routing::ModelStat;
use car_proto::methods::outcomes::{Scoreboard, ScoreboardRow};
use car_proto::safe_file::{self, ReadLimits};
use serde::{Deserialize, Serialize};

/// A ledger larger than this is compacted when opened.
pub const COMPACT_BYTES: u64 = 16 << 20;
/// The largest ledger read at all (a larger one is set aside, not parsed).
pub const MAX_READ_BYTES: u64 = 256 << 20;
/// Receipts waiting for a verdict at most.
pub const MAX_PENDING: usize = 10_000;
const EMA: f64 = 0.3;

/// Per-model totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub successes: u64,
    pub failures: u64,
    pub inconclusive: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub latency_ms_sum: f64,
    pub calls: u64,
    pub quality_sum: f64,
    pub quality_n: u64,
    /// Priced spend (`None` until a priced call).
    pub usd: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Line {
    Call {
        model_id: String,
        trace_id: String,
        outcome: String,
        input_tokens: u64,
        output_tokens: u64,
        latency_ms: f64,
        cost_usd: Option<f64>,
    },
    Resolve {
        trace_id: String,
        success: bool,
        confidence: f64,
    },
    Summary {
        model_id: String,
        #[serde(flatten)]
        row: Row,
    },
}

#[derive(Debug, Default)]
struct Live {
    calls: u64,
    successes: u64,
    failures: u64,
    latency_ms_sum: f64,
    ema_quality: Option<f64>,
}

#[derive(Debug, Default)]
struct Fold {
    rows: BTreeMap<String, Row>,
    /// trace id → model id.
    pending: HashMap<String, String>,
    order: VecDeque<String>,
    receipts: u64,
    live: BTreeMap<String, Live>,
}

impl Fold {
    fn apply(&mut self, line: &Line) {
        match line {
            Line::Call {
                model_id,
                trace_id,
                outcome,
                input_tokens,
                output_tokens,
                latency_ms,
                cost_usd,
            } => {
                self.receipts += 1;
                let row = self.rows.entry(model_id.clone()).or_default();
                row.calls += 1;
                row.input_tokens += input_tokens;
                row.output_tokens += output_tokens;
                row.latency_ms_sum += latency_ms;
                if let Some(c) = cost_usd {
                    row.usd = Some(row.usd.unwrap_or(0.0) + c);
                }
                if outcome == "failure" {
                    row.failures += 1;
                } else {
                    row.inconclusive += 1;
                    if !trace_id.is_empty() && !self.pending.contains_key(trace_id) {
                        self.pending.insert(trace_id.clone(), model_id.clone());
                        self.order.push_back(trace_id.clone());
                        while self.order.len() > MAX_PENDING {
                            if let Some(old) = self.order.pop_front() {
                                self.pending.remove(&old);
                            }
                        }
                    }
                }
            }
            Line::Resolve {
                trace_id,
                success,
                confidence,
            } => {
                let Some(model) = self.pending.remove(trace_id) else {
                    return;
                };
                self.order.retain(|t| t != trace_id);
                let row = self.rows.entry(model).or_default();
                row.inconclusive = row.inconclusive.saturating_sub(1);
                if *success {
                    row.successes += 1;
                } else {
                    row.failures += 1;
                }
                row.quality_sum += confidence.clamp(0.0, 1.0);
                row.quality_n += 1;
            }
            Line::Summary { model_id, row } => {
                self.rows.insert(model_id.clone(), row.clone());
                self.receipts += row.calls;
            }
        }
    }
}

/// The ledger.
#[derive(Debug)]
pub struct OutcomeLedger {
    path: PathBuf,
    fold: Mutex<Fold>,
}

fn mean(sum: f64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

impl OutcomeLedger {
    /// Opens (folds, and compacts when large) the ledger at `path`.
    pub fn open(path: &Path) -> Self {
        let mut fold = Fold::default();
        match safe_file::read(path, ReadLimits::cap(MAX_READ_BYTES)) {
            Ok(bytes) => {
                for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    match serde_json::from_slice::<Line>(line) {
                        Ok(line) => fold.apply(&line),
                        Err(e) => tracing::debug!(error = %e, "outcome ledger line skipped"),
                    }
                }
                if bytes.len() as u64 > COMPACT_BYTES {
                    compact(path, &fold);
                }
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "outcome ledger unreadable; starting empty")
            }
        }
        OutcomeLedger {
            path: path.to_path_buf(),
            fold: Mutex::new(fold),
        }
    }

    fn append(&self, fold: &mut Fold, line: Line) {
        let text = serde_json::to_string(&line).expect("a ledger line encodes");
        let written = (|| -> std::io::Result<()> {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut f = match safe_file::open_append(&self.path) {
                Ok(f) => f,
                Err(e) if e.is_not_found() => {
                    match safe_file::create_exclusive(&self.path, 0o600) {
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                            safe_file::open_append(&self.path).map_err(std::io::Error::other)?
                        }
                        other => other?,
                    }
                }
                Err(e) => return Err(std::io::Error::other(e)),
            };
            f.write_all(format!("{text}\n").as_bytes())
        })();
        if let Err(e) = written {
            tracing::warn!(file = %self.path.display(), error = %e, "outcome receipt not written");
        }
        fold.apply(&line);
    }

    /// Records one generation: `failed` when it errored, else pending under `trace_id`.
    #[allow(clippy::too_many_arguments)]
    pub fn record_call(
        &self,
        model_id: &str,
        trace_id: &str,
        failed: bool,
        input_tokens: u64,
        output_tokens: u64,
        latency_ms: f64,
        cost_usd: Option<f64>,
    ) {
        let mut fold = self.fold.lock().expect("ledger lock");
        let live = fold.live.entry(model_id.to_string()).or_default();
        live.calls += 1;
        live.latency_ms_sum += latency_ms;
        if failed {
            live.failures += 1;
        }
        self.append(
            &mut fold,
            Line::Call {
                model_id: model_id.to_string(),
                trace_id: trace_id.to_string(),
                outcome: if failed { "failure" } else { "inconclusive" }.into(),
                input_tokens,
                output_tokens,
                latency_ms,
                cost_usd,
            },
        );
    }

    /// Resolves pending receipts; answers how many it resolved.
    pub fn resolve(&self, verdicts: &[(String, bool, f64)]) -> u64 {
        let mut fold = self.fold.lock().expect("ledger lock");
        let mut resolved = 0;
        for (trace_id, success, confidence) in verdicts {
            let Some(model) = fold.pending.get(trace_id).cloned() else {
                continue;
            };
            let live = fold.live.entry(model).or_default();
            if *success {
                live.successes += 1;
            } else {
                live.failures += 1;
            }
            let q = confidence.clamp(0.0, 1.0);
            live.ema_quality = Some(live.ema_quality.map_or(q, |e| e + EMA * (q - e)));
            self.append(
                &mut fold,
                Line::Resolve {
                    trace_id: trace_id.clone(),
                    success: *success,
                    confidence: *confidence,
                },
            );
            resolved += 1;
        }
        resolved
    }

    /// A model's durable (successes, failures).
    pub fn counts(&self, model_id: &str) -> (u64, u64) {
        let fold = self.fold.lock().expect("ledger lock");
        fold.rows
            .get(model_id)
            .map_or((0, 0), |r| (r.successes, r.failures))
    }

    /// A model's mean latency over its recorded calls (`None` before any).
    pub fn avg_latency(&self, model_id: &str) -> Option<f64> {
        let fold = self.fold.lock().expect("ledger lock");
        fold.rows
            .get(model_id)
            .filter(|r| r.calls > 0)
            .map(|r| mean(r.latency_ms_sum, r.calls))
    }

    /// `models.stats`: the live profiles, by model id.
    pub fn live_stats(&self) -> Vec<ModelStat> {
        let fold = self.fold.lock().expect("ledger lock");
        fold.live
            .iter()
            .map(|(id, l)| ModelStat {
                model_id: id.clone(),
                total_calls: l.calls,
                success_count: l.successes,
                fail_count: l.failures,
                success_rate: (l.successes + l.failures > 0)
                    .then(|| l.successes as f64 / (l.successes + l.failures) as f64),
                avg_latency_ms: mean(l.latency_ms_sum, l.calls),
                ema_quality: l.ema_quality,
            })
            .collect()
    }

    /// `outcomes.scoreboard`, cheapest correct outcome first.
    pub fn scoreboard(&self) -> Scoreboard {
        let fold = self.fold.lock().expect("ledger lock");
        let mut rows: Vec<ScoreboardRow> = fold
            .rows
            .iter()
            .map(|(id, r)| {
                let resolved = r.successes + r.failures;
                ScoreboardRow {
                    model_id: id.clone(),
                    success_count: r.successes,
                    fail_count: r.failures,
                    inconclusive_count: r.inconclusive,
                    total_input_tokens: r.input_tokens,
                    total_output_tokens: r.output_tokens,
                    avg_quality: (r.quality_n > 0).then(|| mean(r.quality_sum, r.quality_n)),
                    avg_latency_ms: mean(r.latency_ms_sum, r.calls),
                    success_rate: (resolved > 0).then(|| r.successes as f64 / resolved as f64),
                    tokens_per_success: (r.successes > 0)
                        .then(|| (r.input_tokens + r.output_tokens) as f64 / r.successes as f64),
                    usd_per_success: r
                        .usd
                        .filter(|_| r.successes > 0)
                        .map(|usd| usd / r.successes as f64),
                    usd_is_estimate: false,
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            let key = |r: &ScoreboardRow| r.usd_per_success.unwrap_or(f64::INFINITY);
            key(a)
                .total_cmp(&key(b))
                .then_with(|| {
                    b.success_rate
                        .unwrap_or(-1.0)
                        .total_cmp(&a.success_rate.unwrap_or(-1.0))
                })
                .then_with(|| a.model_id.cmp(&b.model_id))
        });
        let total_successes = rows.iter().map(|r| r.success_count).sum();
        let total_usd = fold
            .rows
            .values()
            .filter_map(|r| r.usd)
            .reduce(|a, b| a + b);
        Scoreboard {
            total_failures: rows.iter().map(|r| r.fail_count).sum(),
            total_inconclusive: rows.iter().map(|r| r.inconclusive_count).sum(),
            overall_usd_per_success: total_usd
                .filter(|_| total_successes > 0)
                .map(|usd| usd / total_successes as f64),
            total_usd,
            total_usd_is_estimate: false,
            model_count: rows.len() as u64,
            receipts: fold.receipts,
            total_successes,
            rows,
        }
    }
}

/// Rewrites the ledger as summaries plus the pending receipts (see the module docs).
fn compact(path: &Path, fold: &Fold) {
    let mut text = String::new();
    for (model_id, row) in &fold.rows {
        let mut row = row.clone();
        // Pending receipts are written back as calls below; their counts leave the summary.
        let pending = fold.pending.values().filter(|m| *m == model_id).count() as u64;
        row.inconclusive = row.inconclusive.saturating_sub(pending);
        row.calls = row.calls.saturating_sub(pending);
        let line = Line::Summary {
            model_id: model_id.clone(),
            row,
        };
        text.push_str(&serde_json::to_string(&line).expect("encodes"));
        text.push('\n');
    }
    for trace_id in &fold.order {
        if let Some(model_id) = fold.pending.get(trace_id) {
            let line = Line::Call {
                model_id: model_id.clone(),
                trace_id: trace_id.clone(),
                outcome: "inconclusive".into(),
                input_tokens: 0,
                output_tokens: 0,
                latency_ms: 0.0,
                cost_usd: None,
            };
            text.push_str(&serde_json::to_string(&line).expect("encodes"));
            text.push('\n');
        }
    }
    if let Err(e) = safe_file::write_atomic(path, text.as_bytes(), 0o600) {
        tracing::warn!(file = %path.display(), error = %e, "outcome ledger not compacted");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_resolve_survive_a_restart_and_price_successes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outcome_ledger.jsonl");
        let ledger = OutcomeLedger::open(&path);
        ledger.record_call("a", "t1", false, 10, 5, 100.0, Some(0.002));
        ledger.record_call("a", "t2", false, 10, 5, 300.0, Some(0.002));
        ledger.record_call("b", "t3", true, 10, 0, 50.0, None);
        ledger.record_call("b", "t4", false, 10, 5, 50.0, None);
        assert_eq!(
            ledger.resolve(&[("t1".into(), true, 0.8), ("nope".into(), true, 1.0)]),
            1
        );
        let stats = ledger.live_stats();
        assert_eq!(stats[0].success_rate, Some(1.0));
        assert_eq!(stats[1].success_rate, Some(0.0));
        assert_eq!(stats[0].avg_latency_ms, 200.0);

        let reopened = OutcomeLedger::open(&path);
        assert!(
            reopened.live_stats().is_empty(),
            "live profiles start empty"
        );
        let board = reopened.scoreboard();
        assert_eq!(board.receipts, 4);
        let a = &board.rows[0];
        assert_eq!(
            (a.model_id.as_str(), a.success_count, a.inconclusive_count),
            ("a", 1, 1)
        );
        assert!((a.usd_per_success.unwrap() - 0.004).abs() < 1e-12);
        assert_eq!(a.avg_quality, Some(0.8));
        let b = &board.rows[1];
        assert_eq!(
            (b.fail_count, b.usd_per_success, b.success_rate),
            (1, None, Some(0.0))
        );
        // t2 is still pending after the restart.
        assert_eq!(reopened.resolve(&[("t2".into(), false, 0.1)]), 1);
        assert_eq!(reopened.counts("a"), (1, 1));
    }

    #[test]
    fn a_large_ledger_is_compacted_without_losing_counts_or_pending_receipts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outcome_ledger.jsonl");
        {
            let ledger = OutcomeLedger::open(&path);
            ledger.record_call("a", "keep", false, 1, 1, 1.0, None);
            let filler = "x".repeat(600);
            for i in 0..30_000 {
                ledger.record_call("a", &format!("{filler}{i}"), true, 1, 1, 1.0, None);
            }
        }
        assert!(std::fs::metadata(&path).unwrap().len() > COMPACT_BYTES);
        let ledger = OutcomeLedger::open(&path);
        assert!(std::fs::metadata(&path).unwrap().len() < 4096);
        assert_eq!(ledger.counts("a"), (0, 30_000));
        assert_eq!(ledger.resolve(&[("keep".into(), true, 1.0)]), 1);
        let again = OutcomeLedger::open(&path);
        assert_eq!(again.counts("a"), (1, 30_000));
        assert_eq!(again.scoreboard().receipts, 30_001);
    }
}

//! The routing learning store (`$CAR_HOME/routing.json`) and the ranking it feeds.
//!
//! Keys are agent ids (outcomes of `declagents.invoke` / `route`) and `agentdns://`
//! identifiers (outcomes reported with `discovery.report`). Each key keeps raw
//! success/failure counts, an exponential moving average of its outcomes (shown by
//! `declagents.routing_stats`, not ranked by), and the last [`NEEDS_KEPT`] needs it
//! succeeded at (its learned capability profile). Directed edges `from → to` keep a
//! delegation weight in [0, 1], moved toward 1 by a success and toward 0 by a failure.
//!
//! Ranking ([`score`]): `0.7·similarity + 0.3·success_rate + 0.2·edge_weight`, where
//! `success_rate` is the mean of the Beta(successes + 1, failures + 1) posterior over the
//! counts of every key naming the same service (an agent's id and its
//! `agentdns://local/agent/<id>` identifier fold together): exactly 0.5 for a service never
//! seen, above it after successes, below after failures. (CAR names an upper confidence
//! bound; its documented cold start, 0.5, is the posterior mean, which is what is used here.)
//! A learned profile blends in as `0.6·cold + 0.4·learned` similarity once a service has
//! succeeded.
//!
//! Every change is written atomically before it is answered. At most [`MAX_KEYS`] keys
//! are kept; beyond them the least recently updated goes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use car_proto::methods::declagents::{AgentStats, StatsReply};
use car_proto::safe_file::{self, ReadLimits};
use serde::{Deserialize, Serialize};

/// Needs remembered per key.
pub const NEEDS_KEPT: usize = 16;
/// Keys kept at most.
pub const MAX_KEYS: usize = 4096;
/// Weight of a new outcome in the moving average and in an edge.
pub const LEARNING_RATE: f64 = 0.3;
/// The most bytes of `routing.json` read.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub successes: u64,
    pub failures: u64,
    pub ema_success_rate: f64,
    #[serde(default)]
    pub needs: Vec<String>,
    /// Bumped on every update (eviction order).
    #[serde(default)]
    pub touched: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Data {
    #[serde(default)]
    agents: BTreeMap<String, Record>,
    #[serde(default)]
    edges: BTreeMap<String, BTreeMap<String, f64>>,
    #[serde(default)]
    clock: u64,
}

/// The store.
#[derive(Debug)]
pub struct RoutingStore {
    path: PathBuf,
    data: Mutex<Data>,
}

/// The ranking score (see the module docs).
pub fn score(similarity: f64, success_rate: f64, edge_weight: f64) -> f64 {
    0.7 * similarity + 0.3 * success_rate + 0.2 * edge_weight
}

/// Blends a cold-start similarity with a learned one (when there is one).
pub fn blend(cold: f64, learned: Option<f64>) -> f64 {
    match learned {
        Some(l) => 0.6 * cold + 0.4 * l,
        None => cold,
    }
}

/// The identifier `discovery.*` names a declarative agent by.
pub fn agent_identifier(id: &str) -> String {
    format!("agentdns://local/agent/{id}")
}

impl RoutingStore {
    /// Opens `path` (a missing or unreadable file is an empty store, logged).
    pub fn open(path: &Path) -> Self {
        let data = match safe_file::read(path, ReadLimits::cap(MAX_FILE_BYTES)) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(file = %path.display(), error = %e, "routing store does not parse; starting empty");
                Data::default()
            }),
            Err(e) if e.is_not_found() => Data::default(),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "routing store unreadable; starting empty");
                Data::default()
            }
        };
        RoutingStore {
            path: path.to_path_buf(),
            data: Mutex::new(data),
        }
    }

    /// Records one outcome under `key` (and the need it was for, on success); answers the
    /// key's record.
    pub fn record(&self, key: &str, success: bool, need: Option<&str>) -> Result<Record, String> {
        self.update(|data| {
            data.clock += 1;
            let clock = data.clock;
            let fresh = !data.agents.contains_key(key);
            let r = data.agents.entry(key.to_string()).or_insert(Record {
                ema_success_rate: 0.5,
                ..Record::default()
            });
            if success {
                r.successes += 1;
            } else {
                r.failures += 1;
            }
            let x = if success { 1.0 } else { 0.0 };
            r.ema_success_rate += LEARNING_RATE * (x - r.ema_success_rate);
            if let (true, Some(need)) = (success, need) {
                let need: String = need.chars().take(2000).collect();
                r.needs.retain(|n| *n != need);
                r.needs.push(need);
                let excess = r.needs.len().saturating_sub(NEEDS_KEPT);
                r.needs.drain(..excess);
            }
            r.touched = clock;
            let out = r.clone();
            if fresh && data.agents.len() > MAX_KEYS {
                if let Some(oldest) = data
                    .agents
                    .iter()
                    .min_by_key(|(_, r)| r.touched)
                    .map(|(k, _)| k.clone())
                {
                    data.agents.remove(&oldest);
                }
            }
            out
        })
    }

    /// Moves edge `from → to` toward the outcome.
    pub fn record_edge(&self, from: &str, to: &str, success: bool) -> Result<(), String> {
        self.update(|data| {
            let edges = data.edges.entry(from.to_string()).or_default();
            if !edges.contains_key(to) && edges.len() >= 256 {
                return;
            }
            let w = edges.entry(to.to_string()).or_insert(0.0);
            let x = if success { 1.0 } else { 0.0 };
            *w = (*w + LEARNING_RATE * (x - *w)).clamp(0.0, 1.0);
        })
    }

    /// The posterior-mean success rate over the summed counts of `keys`.
    pub fn success_rate(&self, keys: &[&str]) -> f64 {
        let data = self.data.lock().expect("routing lock");
        let (s, f) = keys
            .iter()
            .filter_map(|k| data.agents.get(*k))
            .fold((0u64, 0u64), |(s, f), r| (s + r.successes, f + r.failures));
        (s as f64 + 1.0) / ((s + f) as f64 + 2.0)
    }

    /// The needs `keys` succeeded at (their learned profile).
    pub fn learned_needs(&self, keys: &[&str]) -> Vec<String> {
        let data = self.data.lock().expect("routing lock");
        keys.iter()
            .filter_map(|k| data.agents.get(*k))
            .flat_map(|r| r.needs.iter().cloned())
            .collect()
    }

    pub fn edge(&self, from: &str, to: &str) -> f64 {
        let data = self.data.lock().expect("routing lock");
        data.edges
            .get(from)
            .and_then(|e| e.get(to))
            .copied()
            .unwrap_or(0.0)
    }

    /// One key's raw counts.
    pub fn counts(&self, key: &str) -> (u64, u64) {
        let data = self.data.lock().expect("routing lock");
        data.agents
            .get(key)
            .map_or((0, 0), |r| (r.successes, r.failures))
    }

    /// `declagents.routing_stats`.
    pub fn stats(&self) -> StatsReply {
        let data = self.data.lock().expect("routing lock");
        StatsReply {
            agents: data
                .agents
                .iter()
                .map(|(k, r)| {
                    (
                        k.clone(),
                        AgentStats {
                            successes: r.successes,
                            failures: r.failures,
                            ema_success_rate: r.ema_success_rate,
                            learned: !r.needs.is_empty(),
                        },
                    )
                })
                .collect(),
            edges: data.edges.clone(),
        }
    }

    fn update<T>(&self, f: impl FnOnce(&mut Data) -> T) -> Result<T, String> {
        let mut data = self.data.lock().expect("routing lock");
        let mut next = data.clone();
        let out = f(&mut next);
        crate::save_json(&self.path, &next)?;
        *data = next;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priors_start_neutral_and_follow_outcomes_across_keys_and_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("routing.json");
        let store = RoutingStore::open(&path);
        let id = "adder";
        let dns = agent_identifier(id);
        assert_eq!(store.success_rate(&[id, &dns]), 0.5);
        store.record(id, true, Some("add two numbers")).unwrap();
        store.record(&dns, true, None).unwrap();
        store.record(id, false, Some("ignored on failure")).unwrap();
        // Beta(2 + 1, 1 + 1): 3 / 5.
        assert!((store.success_rate(&[id, &dns]) - 0.6).abs() < 1e-9);
        assert_eq!(store.learned_needs(&[id]), ["add two numbers"]);
        store.record_edge("a", "b", true).unwrap();
        let reopened = RoutingStore::open(&path);
        assert_eq!(reopened.counts(id), (1, 1));
        assert!((reopened.edge("a", "b") - LEARNING_RATE).abs() < 1e-9);
        let stats = reopened.stats();
        assert!(stats.agents[id].learned && !stats.agents[&dns].learned);
        assert!(stats.agents[id].ema_success_rate < 0.5 + LEARNING_RATE);
    }

    #[test]
    fn the_score_weights_similarity_most() {
        assert!(score(0.9, 0.5, 0.0) > score(0.5, 1.0, 0.0));
        assert!((score(1.0, 1.0, 1.0) - 1.2).abs() < 1e-9);
        assert_eq!(blend(0.5, None), 0.5);
        assert!((blend(0.5, Some(1.0)) - 0.7).abs() < 1e-9);
    }
}

//! Issue 17 acceptance 3: a `memory.add_fact` acknowledged to the caller survives `kill -9`.
//!
//! A real `car-server` on a temporary `CAR_HOME` takes sequential adds, a delete and
//! concurrent pipelined adds from several connections; it is SIGKILLed right after the
//! last answer arrives (no shutdown flush runs), restarted on the same `CAR_HOME`, and
//! every acknowledged fact must be there, the deleted one absent. A second case makes the
//! journal compact (pass its size limit) before the kill, so both the snapshot and the
//! journal written after it are exercised.

mod common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};

/// A word that appears in exactly one fact, so a query for it finds that fact alone.
fn marker(id: &str) -> String {
    format!("zq{}x", id.replace('-', "q"))
}

/// Sends every add on `ws` before reading any answer; returns the ids acknowledged.
async fn pipelined_adds(ws: &mut Ws, ids: &[String], body_len: usize) -> Vec<String> {
    let mut pending = std::collections::HashMap::new();
    for id in ids {
        let body = format!("{} {}", marker(id), "x".repeat(body_len));
        let request = ws
            .request(
                "memory.add_fact",
                json!({"subject": format!("fact {id}"), "body": body, "fact_id": id}),
            )
            .await;
        pending.insert(request, id.clone());
    }
    let mut acked = Vec::new();
    while !pending.is_empty() {
        let r = ws.recv_json().await;
        let Some(id) = r["id"].as_u64().and_then(|n| pending.remove(&n)) else {
            continue;
        };
        assert!(r["result"].is_u64(), "add {id}: {r}");
        acked.push(id);
    }
    acked
}

/// Runs `per_connection` pipelined adds on each of `connections` connections at once.
async fn concurrent_adds(
    d: &Daemon,
    prefix: &str,
    connections: usize,
    per_connection: usize,
) -> Vec<String> {
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..connections {
        let mut ws = Ws::authed(d).await;
        let ids: Vec<String> = (0..per_connection)
            .map(|i| format!("{prefix}-{c}-{i}"))
            .collect();
        tasks.spawn(async move { pipelined_adds(&mut ws, &ids, 40).await });
    }
    let mut acked = Vec::new();
    while let Some(ids) = tasks.join_next().await {
        acked.extend(ids.expect("adds task"));
    }
    acked
}

/// After the restart: every id in `present` is found by its marker, none in `absent`.
async fn check_after_restart(home: &Path, present: &[String], absent: &[&str]) {
    let d = Daemon::builder().home(home).start();
    let mut ws = Ws::authed(&d).await;
    let count = ws.call("memory.fact_count", json!({})).await;
    assert_eq!(count["result"], present.len(), "{count}");
    for id in present {
        let hits = ws
            .call("memory.query", json!({"query": marker(id), "k": 2}))
            .await;
        let ids: Vec<&str> = hits["result"]
            .as_array()
            .unwrap_or_else(|| panic!("{hits}"))
            .iter()
            .filter_map(|h| h["fact_id"].as_str())
            .collect();
        assert_eq!(ids, [id.as_str()], "query for {id}");
    }
    for id in absent {
        let hits = ws
            .call("memory.query", json!({"query": marker(id), "k": 2}))
            .await;
        assert_eq!(hits["result"], json!([]), "{id} was deleted: {hits}");
    }
}

fn memory_file(home: &Path, name: &str) -> std::path::PathBuf {
    home.join("memory").join(name)
}

fn snapshot_fact_count(home: &Path) -> usize {
    let text = std::fs::read_to_string(memory_file(home, "shared.json")).expect("snapshot");
    let v: Value = serde_json::from_str(&text).expect("snapshot JSON");
    v["facts"].as_array().expect("facts").len()
}

#[tokio::test]
async fn every_acknowledged_add_survives_sigkill() {
    let home = tempfile::tempdir().unwrap();
    let mut d = Daemon::builder().home(home.path()).start();
    let mut ws = Ws::authed(&d).await;
    let mut present = Vec::new();
    for i in 0..20 {
        let id = format!("seq-{i}");
        let r = ws
            .call(
                "memory.add_fact",
                json!({"subject": "sequential", "body": marker(&id), "fact_id": id}),
            )
            .await;
        assert_eq!(r["result"], i + 1, "{r}");
        present.push(id);
    }
    let r = ws.call("memory.delete", json!({"id": "seq-3"})).await;
    assert_eq!(r["result"]["deleted"], true, "{r}");
    present.retain(|id| id != "seq-3");
    present.extend(concurrent_adds(&d, "conc", 4, 15).await);
    // The last acknowledged add, then SIGKILL at once: no shutdown flush.
    present.extend(pipelined_adds(&mut ws, &["last".to_owned()], 10).await);
    d.kill();

    assert!(
        memory_file(home.path(), "shared.json.journal").is_file(),
        "the adds after the first went to the journal"
    );
    assert_eq!(present.len(), 20 - 1 + 60 + 1);
    check_after_restart(home.path(), &present, &["seq-3"]).await;
}

#[tokio::test]
async fn acknowledged_adds_survive_sigkill_after_a_compaction() {
    let home = tempfile::tempdir().unwrap();
    let mut d = Daemon::builder().home(home.path()).start();
    let mut ws = Ws::authed(&d).await;
    // 90 facts of ~15 KB each pass the journal's 1 MiB limit: at least one compaction.
    let big: Vec<String> = (0..90).map(|i| format!("big-{i}")).collect();
    let mut present = pipelined_adds(&mut ws, &big, 15_000).await;
    assert_eq!(present.len(), 90);
    let compacted = snapshot_fact_count(home.path());
    assert!(
        compacted > 1,
        "the snapshot holds more than the first write ({compacted} facts): a compaction ran"
    );
    let r = ws.call("memory.delete", json!({"id": "big-0"})).await;
    assert_eq!(r["result"]["deleted"], true, "{r}");
    present.retain(|id| id != "big-0");
    present.extend(concurrent_adds(&d, "after", 3, 10).await);
    present.extend(pipelined_adds(&mut ws, &["last".to_owned()], 10).await);
    d.kill();

    assert!(memory_file(home.path(), "shared.json.journal").is_file());
    assert_eq!(
        snapshot_fact_count(home.path()),
        compacted,
        "the later adds live only in the journal"
    );
    check_after_restart(home.path(), &present, &["big-0"]).await;
}

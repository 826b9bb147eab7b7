//! Issue 24: the event log was daemon-wide for every caller and never shrank. An agent
//! session now reads only the events its agent caused, and the log keeps the newest
//! `--max-events`. Drives a real daemon.

mod common;

use common::*;
use serde_json::{json, Value};

async fn submit(ws: &mut Ws, id: &str) {
    let r = ws
        .call(
            "proposal.submit",
            json!({"proposal": {"id": id, "actions": [
                {"id": format!("{id}-w"), "type": "state_write", "key": "k", "value": 1}]}}),
        )
        .await;
    assert_eq!(r["result"]["proposal_id"], id, "{r}");
}

async fn proposals_seen(ws: &mut Ws) -> Vec<String> {
    let r = ws.call("events.query", json!({})).await;
    let events = r["result"]["events"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .clone();
    let mut ids: Vec<String> = events
        .iter()
        .filter_map(|e| e["proposal_id"].as_str().map(str::to_string))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

async fn total(ws: &mut Ws, method: &str) -> Value {
    ws.call(method, json!({})).await["result"].clone()
}

#[tokio::test]
async fn an_agent_reads_only_the_events_its_agent_caused() {
    let d = Daemon::start();
    let mut host = Ws::host(&d).await;
    let mut a = registered_agent(&d, &mut host, "events-a").await;
    let mut b = registered_agent(&d, &mut host, "events-b").await;
    let mut op = Ws::authed(&d).await;
    submit(&mut a, "from-a").await;
    submit(&mut b, "from-b").await;
    submit(&mut op, "from-user").await;

    assert_eq!(proposals_seen(&mut a).await, ["from-a"]);
    assert_eq!(proposals_seen(&mut b).await, ["from-b"]);
    assert_eq!(
        proposals_seen(&mut op).await,
        ["from-a", "from-b", "from-user"]
    );
    // Asking for another agent's proposal by id finds nothing.
    let r = a
        .call("events.query", json!({"proposal_id": "from-b"}))
        .await;
    assert_eq!(r["result"]["count"], 0, "{r}");
    // count and stats are scoped the same way.
    let mine = total(&mut a, "events.count").await.as_u64().unwrap();
    let all = total(&mut op, "events.count").await.as_u64().unwrap();
    assert!(mine > 0 && mine < all, "{mine} of {all}");
    assert_eq!(total(&mut a, "events.stats").await["total"], mine);
}

#[tokio::test]
async fn the_event_log_keeps_the_newest_max_events() {
    let d = Daemon::builder().args(["--max-events", "20"]).start();
    let mut op = Ws::authed(&d).await;
    for i in 0..30 {
        submit(&mut op, &format!("p{i:02}")).await;
    }
    let count = total(&mut op, "events.count").await.as_u64().unwrap();
    assert!(count <= 20, "{count}");
    let seen = proposals_seen(&mut op).await;
    assert!(
        seen.contains(&"p29".to_string()),
        "the newest stay: {seen:?}"
    );
    assert!(
        !seen.contains(&"p00".to_string()),
        "the oldest go: {seen:?}"
    );

    let (status, stderr) = Daemon::builder()
        .args(["--max-events", "0"])
        .spawn()
        .unwrap_err();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--max-events"), "{stderr}");
}

#[tokio::test]
async fn events_older_than_the_max_age_are_deleted() {
    let d = Daemon::builder().args(["--event-max-age", "3s"]).start();
    let mut op = Ws::authed(&d).await;
    submit(&mut op, "p-old").await;
    assert!(proposals_seen(&mut op).await.contains(&"p-old".to_string()));
    // Only a lower bound on elapsed time: p-old is over the age when p-new's batch commits.
    tokio::time::sleep(std::time::Duration::from_millis(3500)).await;
    submit(&mut op, "p-new").await;
    let seen = proposals_seen(&mut op).await;
    assert!(!seen.contains(&"p-old".to_string()), "{seen:?}");
    assert!(seen.contains(&"p-new".to_string()), "{seen:?}");
}

//! Issue 24: `host.request_approval` had no cap on `context` and its rows outlived the
//! connection (60 × 7 MiB raised the daemon's RSS by 460 MB, and it stayed). Now the
//! context is capped, a session holds a bounded number of pending approvals, and they
//! expire when it closes. Drives a real daemon.

mod common;

use common::*;
use serde_json::{json, Value};

async fn request(ws: &mut Ws, title: &str, context: Value) -> Value {
    ws.call(
        "host.request_approval",
        json!({"title": title, "context": context}),
    )
    .await
}

#[tokio::test]
async fn oversized_contexts_and_floods_are_refused_and_a_closed_sessions_approvals_expire() {
    let d = Daemon::start();
    let mut a = Ws::authed(&d).await;
    let r = request(&mut a, "huge", json!({"blob": "x".repeat(70 * 1024)})).await;
    assert_eq!(code(&r), -32602, "{r}");
    assert!(message(&r).contains("context"), "{r}");
    let r = a
        .call(
            "host.request_approval",
            json!({"title": "t", "description": "d".repeat(70 * 1024)}),
        )
        .await;
    assert!(message(&r).contains("description"), "{r}");

    let mut kept = Vec::new();
    for i in 0..64 {
        let r = request(&mut a, &format!("ask {i}"), json!({"n": i})).await;
        kept.push(
            r["result"]["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{r}"))
                .to_string(),
        );
    }
    let r = request(&mut a, "one too many", json!({})).await;
    assert_eq!(code(&r), -32603, "{r}");
    assert_eq!(r["error"]["data"]["reason"], "too_many_approvals", "{r}");
    // Resolving one makes room.
    let r = a
        .call(
            "host.resolve_approval",
            json!({"approval_id": kept[0], "approved": true}),
        )
        .await;
    assert_eq!(r["result"]["status"], "approved", "{r}");
    let r = request(&mut a, "room again", json!({})).await;
    assert!(r["result"]["id"].is_string(), "{r}");

    // The session closes: its pending approvals expire; the resolved one stays.
    let mut host = Ws::host(&d).await;
    let r = host.call("server.handshake", handshake_params()).await;
    assert!(r.get("error").is_none(), "{r}");
    let r = host.call("host.subscribe", json!({})).await;
    assert!(r.get("error").is_none(), "{r}");
    drop(a);
    let mut expired = 0;
    while expired < 64 {
        let v = host.recv_json().await;
        if v["method"] == "host.event" && v["params"]["kind"] == "approval.expired" {
            assert_eq!(v["params"]["payload"]["reason"], "session_closed", "{v}");
            expired += 1;
        }
    }
    let r = host.call("host.approvals", json!({})).await;
    let left: Vec<&Value> = r["result"]["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    assert_eq!(left.len(), 1, "{r}");
    assert_eq!(left[0]["id"], kept[0].as_str(), "{r}");
}

//! Helpers for the run tests (`run_lifecycle`, `run_resume`).

#![allow(dead_code)]

use serde_json::{json, Value};

use super::*;

/// Handshakes asking for `optional`; returns what was negotiated.
pub async fn negotiate(ws: &mut Ws, optional: &[&str]) -> Value {
    let r = ws
        .call(
            "server.handshake",
            json!({"protocol_version": 3, "optional_capabilities": optional}),
        )
        .await;
    r["result"]["negotiated_capabilities"].clone()
}

/// A host session that negotiated `runs.cancel.v1`.
pub async fn canceller(d: &Daemon) -> Ws {
    let mut host = Ws::host(d).await;
    negotiate(&mut host, &["runs.cancel.v1"]).await;
    host
}

/// A no-auth connection bound to `agent`; returns it and its client id.
pub async fn agent(d: &Daemon, agent: &str, optional: &[&str]) -> (Ws, String) {
    let mut ws = Ws::tcp(&d.ws_url).await;
    let r = ws
        .call("session.auth", json!({"token": "x", "agent_id": agent}))
        .await;
    assert_eq!(r["result"]["agent_id"], agent, "{r}");
    negotiate(&mut ws, optional).await;
    let init = ws.call("session.init", json!({})).await;
    let label = init["result"]["session_id"].as_str().unwrap().to_string();
    (ws, label)
}

/// The record kinds of a run's trace, read by `reader`.
pub async fn kinds(reader: &mut Ws, run_id: &str) -> Vec<String> {
    let trace = reader
        .call("runs.get_trace", json!({"run_id": run_id}))
        .await;
    trace["result"]["records"]
        .as_array()
        .unwrap_or_else(|| panic!("{trace}"))
        .iter()
        .map(|r| r["record"].as_str().unwrap().to_string())
        .collect()
}

/// The next `runs.trace.event` params on `ws`.
pub async fn trace_event(ws: &mut Ws) -> Value {
    loop {
        let msg = ws.recv_json().await;
        if msg["method"] == "runs.trace.event" {
            return msg["params"].clone();
        }
    }
}

/// An error's `(code, message, data.reason)`.
pub fn refusal(r: &Value) -> (i64, String, Value) {
    (code(r), message(r), r["error"]["data"]["reason"].clone())
}

//! Helpers for tests that run proposals on a raw connection and answer its
//! `tools.execute` reverse calls by hand.

#![allow(dead_code)]

use serde_json::{json, Value};

use super::*;

/// Registers `names` as tools of this connection.
pub async fn register(ws: &mut Ws, names: &[&str]) {
    let tools: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
    let r = ws.call("tools.register", Value::Array(tools)).await;
    assert!(r["error"].is_null(), "{r}");
}

/// A tool-call action.
pub fn call(id: &str, tool: &str, parameters: Value) -> Value {
    json!({"id": id, "type": "tool_call", "tool": tool, "parameters": parameters})
}

/// Waits for the response to request `id`, answering every `tools.execute` with
/// `{"ran": <tool>}` meanwhile; returns the response and the `tools.execute` params seen.
pub async fn finish(ws: &mut Ws, id: u64) -> (Value, Vec<Value>) {
    let mut calls = Vec::new();
    loop {
        let frame = ws.recv_json().await;
        if frame["method"] == "tools.execute" {
            let reply = json!({"jsonrpc": "2.0", "id": frame["id"], "result": {"ran": frame["params"]["tool"]}});
            calls.push(frame["params"].clone());
            ws.send_text(reply.to_string()).await;
        } else if frame["id"] == json!(id) {
            return (frame, calls);
        }
    }
}

/// Submits `actions` and waits for the answer (see [`finish`]).
pub async fn submit(ws: &mut Ws, actions: Vec<Value>) -> (Value, Vec<Value>) {
    let id = ws
        .request("proposal.submit", json!({"proposal": {"actions": actions}}))
        .await;
    finish(ws, id).await
}

/// The result row of action `id`.
pub fn result_of(reply: &Value, id: &str) -> Value {
    reply["result"]["results"]
        .as_array()
        .unwrap_or_else(|| panic!("{reply}"))
        .iter()
        .find(|r| r["action_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no result for {id}: {reply}"))
}

/// Asserts `r` is `-32602` naming `field`.
pub fn assert_names(r: &Value, field: &str) {
    assert_eq!(code(r), -32602, "{r}");
    assert!(message(r).contains(field), "expected {field:?} in {r}");
}

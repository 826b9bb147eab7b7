//! The daemon's MCP endpoint (issue 16, acceptance 5): bad input over HTTP gets the
//! reference's status and body, and the daemon keeps serving both `/mcp` and the WebSocket.
//! (Every rule is also unit-tested in `car-mcp`; this proves them on `car-server` itself.)

mod common;

use car_test_harness::http_wire::request;
use common::*;
use serde_json::{json, Value};

fn rpc(id: u64, method: &str, params: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        .to_string()
        .into_bytes()
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

#[tokio::test]
async fn bad_http_input_is_refused_and_the_daemon_stays_up() {
    let d = Daemon::builder()
        .args(["--mcp-bind", "127.0.0.1:0"])
        .start();
    let url = d.mcp_url.clone().expect("the MCP endpoint is served");
    let base = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let post =
        |headers: &[(&str, &str)], body: &[u8]| request(&base, "POST", "/mcp", headers, body);

    // The happy path first: initialize mints a session id.
    let init = post(
        &[JSON],
        &rpc(1, "initialize", json!({"protocolVersion": "2025-06-18"})),
    );
    assert_eq!(init.status, 200);
    assert_eq!(init.json()["result"]["protocolVersion"], "2025-06-18");
    let session = init
        .header("mcp-session-id")
        .expect("Mcp-Session-Id")
        .to_string();
    assert!(session.len() >= 32 && session.bytes().all(|b| b.is_ascii_graphic()));

    // Oversized (5 MiB against the 4 MiB limit).
    let big = vec![b' '; 5 << 20];
    assert_eq!(post(&[JSON], &big).status, 413);
    // Wrong content types.
    for ct in ["text/plain", "application/x-www-form-urlencoded"] {
        let r = post(&[("Content-Type", ct)], &rpc(2, "ping", json!({})));
        assert_eq!(r.status, 415, "{ct}");
    }
    // A batch.
    let batch = format!(
        "[{}]",
        String::from_utf8(rpc(3, "ping", json!({}))).unwrap()
    );
    let r = post(&[JSON], batch.as_bytes());
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32600);
    // Non-UTF-8 and non-JSON.
    let r = post(
        &[JSON],
        b"{\"jsonrpc\": \"2.0\", \"id\": 4, \"method\": \"\xff\xfe\"}",
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32700);
    // An unknown session id.
    let r = post(
        &[JSON, ("Mcp-Session-Id", "0123456789abcdef0123456789abcdef")],
        &rpc(5, "ping", json!({})),
    );
    assert_eq!(r.status, 404);
    // A version header it does not speak: 400 naming what it does; absent is fine.
    let r = post(
        &[JSON, ("MCP-Protocol-Version", "2025-03-26")],
        &rpc(6, "ping", json!({})),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["requested"], "2025-03-26");
    assert_eq!(
        r.json()["supported"],
        json!(["2024-11-05", "2025-06-18", "2025-11-25"])
    );
    let r = post(&[JSON], &rpc(7, "ping", json!({})));
    assert_eq!((r.status, r.json()["result"].clone()), (200, json!({})));
    // A foreign Origin, a notification, GET.
    let r = post(
        &[JSON, ("Origin", "https://evil.example")],
        &rpc(8, "ping", json!({})),
    );
    assert_eq!(
        (r.status, r.json()),
        (403, json!({"error": "origin not allowed"}))
    );
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let r = post(&[JSON], note.as_bytes());
    assert_eq!((r.status, r.body.len()), (202, 0));
    let r = request(&base, "GET", "/mcp", &[], b"");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST, DELETE"));

    // Still up: the session works, a tool call (with the daemon token: every MCP call needs
    // one) reaches the daemon, the WebSocket serves.
    let bearer = format!("Bearer {}", d.token().trim());
    let r = post(
        &[
            JSON,
            ("Mcp-Session-Id", &session),
            ("Authorization", &bearer),
        ],
        &rpc(
            9,
            "tools/call",
            json!({"name": "memory_add_fact", "arguments": {"subject": "mcp", "body": "survived the bad input"}}),
        ),
    );
    assert_eq!(r.json()["result"]["isError"], false, "{}", r.json());
    let health = request(&base, "GET", "/mcp/health", &[], b"");
    assert_eq!(health.json()["status"], "ok");
    let mut ws = Ws::authed(&d).await;
    let hits = ws
        .call("memory.query", json!({"query": "survived bad input"}))
        .await;
    assert!(
        hits.to_string().contains("survived the bad input"),
        "{hits}"
    );
    // DELETE ends the session; the id is then unknown.
    let r = request(
        &base,
        "DELETE",
        "/mcp",
        &[("Mcp-Session-Id", &session)],
        b"",
    );
    assert_eq!(r.status, 204);
    let r = post(
        &[JSON, ("Mcp-Session-Id", &session)],
        &rpc(10, "ping", json!({})),
    );
    assert_eq!(r.status, 404);
}

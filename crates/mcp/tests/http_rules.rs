//! The Streamable HTTP endpoint's request rules, driven over raw HTTP: every refusal the
//! crate docs list (Origin, MCP-Protocol-Version, sessions, Content-Type, body size, parse
//! errors, batches, notifications, methods, paths), with no daemon behind the endpoint (none
//! of these reach a tool).

mod common;

use common::{endpoint, endpoint_with, post, send, send_raw};
use serde_json::{json, Value};

const NO_DAEMON: &str = "ws://127.0.0.1:9";

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
}

fn ping() -> Value {
    json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})
}

#[tokio::test]
async fn origin_rule_guards_post_and_delete() {
    let e = endpoint(NO_DAEMON, false).await;
    for origin in [
        "http://evil.example.com",
        "null",
        "http://localhost.evil.com:80",
    ] {
        let r = post(e.addr, &[("Origin", origin)], &ping()).await;
        assert_eq!(r.status, 403, "{origin}");
        assert_eq!(r.json(), json!({"error": "origin not allowed"}));
        let r = send(
            e.addr,
            "DELETE",
            "/mcp",
            &[("Origin", origin), ("Mcp-Session-Id", "x")],
            b"",
        )
        .await;
        assert_eq!(r.status, 403, "{origin}");
    }
    for origin in [
        "http://localhost:5173",
        "https://127.0.0.2",
        "http://[::1]:1",
    ] {
        let r = post(e.addr, &[("Origin", origin)], &ping()).await;
        assert_eq!(r.status, 200, "{origin}");
    }
    assert_eq!(post(e.addr, &[], &ping()).await.status, 200);
}

#[tokio::test]
async fn protocol_version_rule_runs_before_the_body_is_parsed() {
    let e = endpoint(NO_DAEMON, false).await;
    for version in ["2024-11-05", "2025-06-18", "2025-11-25"] {
        assert_eq!(
            post(e.addr, &[("MCP-Protocol-Version", version)], &ping())
                .await
                .status,
            200
        );
    }
    let r = send(
        e.addr,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("MCP-Protocol-Version", "2025-03-26"),
        ],
        b"{not even json",
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        json!({"error": "unsupported MCP-Protocol-Version", "requested": "2025-03-26",
               "supported": ["2024-11-05", "2025-06-18", "2025-11-25"]})
    );
    let mut bytes = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nMCP-Protocol-Version: ",
        e.addr
    )
    .into_bytes();
    bytes.push(0xff);
    bytes.extend_from_slice(b"\r\nContent-Length: 2\r\n\r\n");
    let r = send_raw(e.addr, &bytes, b"{}").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"], "unsupported MCP-Protocol-Version");
    let r = send(
        e.addr,
        "DELETE",
        "/mcp",
        &[
            ("MCP-Protocol-Version", "1999-01-01"),
            ("Mcp-Session-Id", "x"),
        ],
        b"",
    )
    .await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn sessions_are_minted_checked_and_ended() {
    let e = endpoint(NO_DAEMON, false).await;
    let r = post(e.addr, &[], &initialize()).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let id = r
        .header("mcp-session-id")
        .expect("initialize mints a session")
        .to_string();
    assert!(id.len() >= 32 && id.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-11-25");
    let other = post(e.addr, &[], &initialize()).await;
    assert_ne!(other.header("mcp-session-id"), Some(id.as_str()));

    assert_eq!(
        post(e.addr, &[("Mcp-Session-Id", &id)], &ping())
            .await
            .status,
        200
    );
    let r = post(e.addr, &[("Mcp-Session-Id", "not-a-session")], &ping()).await;
    assert_eq!(r.status, 404);
    // Without the header the non-peer surface still works.
    assert_eq!(post(e.addr, &[], &ping()).await.status, 200);

    assert_eq!(send(e.addr, "DELETE", "/mcp", &[], b"").await.status, 400);
    assert_eq!(
        send(e.addr, "DELETE", "/mcp", &[("Mcp-Session-Id", &id)], b"")
            .await
            .status,
        204
    );
    assert_eq!(
        send(e.addr, "DELETE", "/mcp", &[("Mcp-Session-Id", &id)], b"")
            .await
            .status,
        404
    );
    assert_eq!(
        post(e.addr, &[("Mcp-Session-Id", &id)], &ping())
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn notifications_and_responses_are_accepted_with_an_empty_body() {
    let e = endpoint(NO_DAEMON, false).await;
    for message in [
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}),
        json!({"jsonrpc": "2.0", "id": 9, "result": {}}),
    ] {
        let r = post(e.addr, &[], &message).await;
        assert_eq!(r.status, 202, "{message}");
        assert!(r.body.is_empty());
    }
}

#[tokio::test]
async fn malformed_bodies_get_json_rpc_errors() {
    let e = endpoint(NO_DAEMON, false).await;
    let json_post = |body: &'static [u8]| {
        send(
            e.addr,
            "POST",
            "/mcp",
            &[("Content-Type", "application/json")],
            body,
        )
    };
    let r = json_post(b"{\"jsonrpc\":").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32700);
    let r = json_post(b"\xff\xfe{}").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32700);
    let r = json_post(b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]").await;
    assert_eq!(r.status, 400);
    let body = r.json();
    assert_eq!(body["error"]["code"], -32600);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("batches are not supported"));
    let r = json_post(b"42").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32600);
    let r = json_post(b"{\"jsonrpc\":\"1.0\",\"id\":5,\"method\":\"ping\"}").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["id"], 5);
    let r = send(
        e.addr,
        "POST",
        "/mcp",
        &[("Content-Type", "text/plain")],
        ping().to_string().as_bytes(),
    )
    .await;
    assert_eq!(r.status, 415);
    assert_eq!(
        send(e.addr, "POST", "/mcp", &[], ping().to_string().as_bytes())
            .await
            .status,
        415
    );
}

#[tokio::test]
async fn oversized_bodies_are_refused_by_declared_and_actual_length() {
    let e = endpoint_with(NO_DAEMON, false, 1024).await;
    let big = vec![b' '; 4096];
    let r = send(
        e.addr,
        "POST",
        "/mcp",
        &[("Content-Type", "application/json")],
        &big,
    )
    .await;
    assert_eq!(r.status, 413);
    // A declared length far beyond the limit is refused before any body is read.
    let r = send(
        e.addr,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", "10000000000"),
        ],
        b"",
    )
    .await;
    assert_eq!(r.status, 413);
    // Chunked bodies carry no length: the limit applies while reading.
    let mut chunked = Vec::new();
    for _ in 0..8 {
        chunked.extend_from_slice(format!("{:x}\r\n", 512).as_bytes());
        chunked.extend_from_slice(&[b' '; 512]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        e.addr
    );
    let r = send_raw(e.addr, head.as_bytes(), &chunked).await;
    assert_eq!(r.status, 413);
    // Under the limit the same endpoint answers normally.
    assert_eq!(post(e.addr, &[], &ping()).await.status, 200);
}

#[tokio::test]
async fn get_is_405_and_health_is_exempt() {
    let e = endpoint(NO_DAEMON, false).await;
    let r = send(
        e.addr,
        "GET",
        "/mcp",
        &[("Accept", "text/event-stream")],
        b"",
    )
    .await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST, DELETE"));
    assert_eq!(send(e.addr, "PUT", "/mcp", &[], b"").await.status, 405);
    let r = send(
        e.addr,
        "GET",
        "/mcp/health",
        &[
            ("Origin", "http://evil.example.com"),
            ("MCP-Protocol-Version", "bogus"),
        ],
        b"",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        json!({"status": "ok", "protocol_version": "2025-11-25",
               "supported_versions": ["2024-11-05", "2025-06-18", "2025-11-25"]})
    );
    assert_eq!(
        send(e.addr, "GET", "/elsewhere", &[], b"").await.status,
        404
    );
}

#[tokio::test]
async fn tool_call_envelope_errors_are_invalid_params() {
    let e = endpoint(NO_DAEMON, false).await;
    for params in [
        json!({}),
        json!({"name": "no_such_tool"}),
        json!({"name": "memory_query", "arguments": [1]}),
    ] {
        let r = post(
            e.addr,
            &[],
            &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params}),
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["error"]["code"], -32602, "{params}");
    }
    // Mutations are off: the tool is absent, and calling it is method-not-found.
    let r = post(e.addr, &[], &common::call(4, "workflow_run", json!({}))).await;
    assert_eq!(r.json()["error"]["code"], -32601);
}

//! Acceptance: the framing rules (docs/protocol-choices.md, "Framing") against a real daemon (issue
//! 2 §7).

mod common;

use common::*;
use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test]
async fn parse_errors_invalid_requests_and_batches() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    ws.send_text("{nope").await;
    let r = ws.recv_json().await;
    assert_eq!((code(&r), r["id"].clone()), (-32700, Value::Null));
    assert!(message(&r).starts_with("parse error:"));
    ws.send_text(r#"[{"jsonrpc":"2.0","id":1,"method":"server.schema"}]"#)
        .await;
    let r = ws.recv_json().await;
    assert_eq!(code(&r), -32600);
    assert_eq!(
        message(&r),
        "invalid request: batch requests are not supported"
    );
    assert_eq!(r["id"], Value::Null);
    for (text, id, needle) in [
        (
            r#"{"jsonrpc":"2.0","id":9}"#,
            json!(9),
            "method is required",
        ),
        (
            r#"{"id":"s","method":"server.schema"}"#,
            json!("s"),
            "jsonrpc is required",
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":7}"#,
            json!(3),
            "method must be a string",
        ),
        (
            r#"{"jsonrpc":"2.0","id":[1],"method":"server.schema"}"#,
            Value::Null,
            "id must be",
        ),
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"server.schema","params":"x"}"#,
            json!(4),
            "params must be",
        ),
        ("42", Value::Null, "expected a JSON object"),
    ] {
        ws.send_text(text).await;
        let r = ws.recv_json().await;
        assert_eq!(code(&r), -32600, "{text} → {r}");
        assert_eq!(r["id"], id, "{text} → {r}");
        assert!(message(&r).contains(needle), "{text} → {r}");
    }
    // Still serving on the same connection.
    assert!(ws.call("server.schema", json!({})).await["result"].is_object());
}

#[tokio::test]
async fn ids_are_echoed_with_their_type_and_notifications_are_never_answered() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    for id in [
        json!("abc"),
        json!(7),
        json!(-12),
        json!(12345678901234u64),
        json!(1.5),
        json!(""),
    ] {
        ws.send_text(json!({"jsonrpc":"2.0","id":id,"method":"capabilities.list"}).to_string())
            .await;
        let r = ws.recv_json().await;
        assert_eq!(r["id"], id);
        assert!(r["result"].is_object());
    }
    // A known notification, an unknown one, and a failing one: no answers at all.
    ws.send_text(r#"{"jsonrpc":"2.0","method":"capabilities.list"}"#)
        .await;
    ws.send_text(r#"{"jsonrpc":"2.0","method":"no.such.notification","params":{}}"#)
        .await;
    ws.send_text(
        r#"{"jsonrpc":"2.0","method":"server.handshake","params":{"protocol_version":"x"}}"#,
    )
    .await;
    ws.send_text(r#"{"jsonrpc":"2.0","id":"after","method":"server.schema"}"#)
        .await;
    assert_eq!(ws.recv_json().await["id"], "after");
    // A response to an unknown reverse-call id is dropped.
    ws.send_text(r#"{"jsonrpc":"2.0","id":"cb-999999","result":{}}"#)
        .await;
    assert!(ws.call("server.schema", json!({})).await["result"].is_object());
}

#[tokio::test]
async fn deep_nesting_is_a_parse_error_and_the_daemon_keeps_serving() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    ws.send_text(deep).await;
    let r = ws.recv_json().await;
    assert_eq!(code(&r), -32700);
    assert!(message(&r).contains("128"));
    let nested_params = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"server.schema","params":{{"a":{}1{}}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    ws.send_text(nested_params).await;
    assert_eq!(code(&ws.recv_json().await), -32700);
    assert!(ws.call("server.schema", json!({})).await["result"].is_object());
    assert!(Ws::authed(&d).await.call("server.schema", json!({})).await["result"].is_object());
}

#[tokio::test]
async fn oversized_message_closes_with_1009() {
    let d = Daemon::start();
    let ws = Ws::authed(&d).await;
    let big = "x".repeat(17 * 1024 * 1024);
    let (mut sink, mut stream) = futures_util::StreamExt::split(ws.ws);
    let writer = tokio::spawn(async move {
        let _ = sink.send(Message::text(big)).await;
    });
    let mut close = None;
    while let Some(Ok(m)) = tokio::time::timeout(WAIT, futures_util::StreamExt::next(&mut stream))
        .await
        .expect("answer in time")
    {
        if let Message::Close(frame) = m {
            close = frame.map(|f| u16::from(f.code));
            break;
        }
    }
    assert_eq!(close, Some(1009));
    writer.abort();
    assert!(Ws::authed(&d).await.call("server.schema", json!({})).await["result"].is_object());
}

#[tokio::test]
async fn a_limit_set_by_flag_is_enforced() {
    let d = Daemon::builder()
        .args(["--max-message-bytes", "4096"])
        .start();
    let mut ws = Ws::authed(&d).await;
    let ok = json!({"jsonrpc":"2.0","id":1,"method":"capabilities.list","params":{"pad":"y".repeat(3000)}});
    ws.send_text(ok.to_string()).await;
    assert_eq!(ws.recv_json().await["id"], 1);
    ws.send_text(json!({"jsonrpc":"2.0","id":2,"method":"capabilities.list","params":{"pad":"y".repeat(5000)}}).to_string()).await;
    assert_eq!(ws.closed_with().await, Some(1009));
}

#[tokio::test]
async fn invalid_utf8_closes_with_1007() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let frame = Frame::message(vec![b'{', 0xff, 0xfe, b'}'], OpCode::Data(Data::Text), true);
    ws.ws.send(Message::Frame(frame)).await.unwrap();
    assert_eq!(ws.closed_with().await, Some(1007));
    assert!(Ws::authed(&d).await.call("server.schema", json!({})).await["result"].is_object());
}

#[tokio::test]
async fn a_client_that_never_reads_is_closed_instead_of_growing_memory() {
    // The bound holds one `server.schema` answer (over 100 KiB) but not many.
    let d = Daemon::builder()
        .args(["--max-outbound-bytes", "1048576"])
        .start();
    let ws = Ws::authed(&d).await;
    let request = json!({"jsonrpc":"2.0","id":1,"method":"server.schema"}).to_string();
    // 20,000 unread answers would be gigabytes.
    let (mut sink, mut stream) = futures_util::StreamExt::split(ws.ws);
    let writer = tokio::spawn(async move {
        for _ in 0..20_000 {
            if sink.send(Message::text(request.clone())).await.is_err() {
                break;
            }
        }
    });
    let _ = tokio::time::timeout(WAIT, writer)
        .await
        .expect("writes stop once the daemon closes");
    // Now read: the connection ends before anything like 20,000 answers arrive.
    let mut answers = 0;
    loop {
        match tokio::time::timeout(WAIT, futures_util::StreamExt::next(&mut stream))
            .await
            .expect("stream ends in time")
        {
            Some(Ok(Message::Text(_))) => answers += 1,
            Some(Ok(_)) => {}
            Some(Err(_)) | None => break,
        }
    }
    assert!(answers < 20_000, "read {answers} answers");
    assert!(d.stderr().contains("slow consumer"), "{}", d.stderr());
    assert!(Ws::authed(&d).await.call("server.schema", json!({})).await["result"].is_object());
}

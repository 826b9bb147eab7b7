//! The pre-auth budget (issue 24, `crate::state::pre_auth`): strangers that never authenticate
//! cannot pin the daemon's memory with unfinished frames, cannot hold more than
//! `--max-unauthenticated` connections, and are closed at `--auth-deadline`.

mod common;

use common::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A raw TCP connection that completed the WebSocket upgrade, unauthenticated.
async fn upgraded(d: &Daemon) -> TcpStream {
    let mut tcp = TcpStream::connect(("127.0.0.1", d.port)).await.unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        d.port
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tcp.read(&mut byte).await.unwrap();
        assert_eq!(n, 1, "upgrade answered: {}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    tcp
}

/// Starts a masked text frame declaring `len` bytes and sends all but its last byte (or
/// until the daemon stops reading); returns how many payload bytes were written.
async fn unfinished_frame(tcp: &mut TcpStream, len: u64) -> u64 {
    let mut header = vec![0x81, 0xFF];
    header.extend_from_slice(&len.to_be_bytes());
    header.extend_from_slice(&[1, 2, 3, 4]);
    if tcp.write_all(&header).await.is_err() {
        return 0;
    }
    let chunk = vec![b'x'; 64 * 1024];
    let mut sent = 0u64;
    while sent + (chunk.len() as u64) < len {
        match tcp.write_all(&chunk).await {
            Ok(()) => sent += chunk.len() as u64,
            Err(_) => break,
        }
    }
    sent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_frames_from_strangers_pin_no_memory() {
    let d = Daemon::start();
    let before = rss_kib(d.pid());
    let mut held = Vec::new();
    let mut sends = Vec::new();
    for _ in 0..24 {
        let d_port = d.port;
        let _ = d_port;
        let mut tcp = upgraded(&d).await;
        sends.push(tokio::spawn(async move {
            let sent = unfinished_frame(&mut tcp, 15 * 1024 * 1024).await;
            (tcp, sent)
        }));
    }
    for send in sends {
        held.push(send.await.unwrap());
    }
    // Every stranger was cut off well before its frame was whole.
    for (_, sent) in &held {
        assert!(*sent < 15 * 1024 * 1024 - 64 * 1024, "sent {sent}");
    }
    let after = rss_kib(d.pid());
    let grown_mib = after.saturating_sub(before) / 1024;
    assert!(
        grown_mib < 64,
        "24 unfinished 15 MiB frames grew the daemon by {grown_mib} MiB"
    );
    // The daemon still serves.
    let mut ws = Ws::authed(&d).await;
    let r = ws.call("server.status", json!({})).await;
    assert!(r["result"].is_object(), "{r}");
    drop(held);
}

#[tokio::test]
async fn unauthenticated_connections_are_capped_and_authenticated_ones_are_not() {
    let d = Daemon::builder()
        .args(["--max-unauthenticated", "3", "--auth-deadline", "1h"])
        .start();
    let mut waiting = Vec::new();
    for _ in 0..3 {
        waiting.push(Ws::tcp(&d.ws_url).await);
    }
    // A fourth stranger is closed before its upgrade is answered.
    let refused = tokio_tungstenite::connect_async(&d.ws_url).await;
    assert!(
        refused.is_err(),
        "a fourth unauthenticated connection is refused"
    );
    // One authenticates: its slot is freed, and it stays served.
    let r = waiting[0]
        .call("session.auth", json!({"token": d.token()}))
        .await;
    assert_eq!(r["result"]["ok"], true, "{r}");
    let mut fourth = Ws::authed(&d).await;
    // Authenticated connections hold no slot: more of them than the cap are all served.
    let mut authed = Vec::new();
    for _ in 0..4 {
        authed.push(Ws::authed(&d).await);
    }
    for ws in authed.iter_mut().chain([&mut fourth, &mut waiting[0]]) {
        let r = ws.call("server.status", json!({})).await;
        assert!(r["result"].is_object(), "{r}");
    }
    assert!(d.stderr().contains("too many unauthenticated connections"));
}

#[tokio::test]
async fn a_connection_that_never_authenticates_is_closed_at_the_deadline() {
    let d = Daemon::builder().args(["--auth-deadline", "1s"]).start();
    let mut stranger = Ws::tcp(&d.ws_url).await;
    assert_eq!(stranger.closed_with().await, Some(1008));
    // An authenticated one outlives the deadline (it answers after the stranger's close).
    let mut ws = Ws::authed(&d).await;
    let mut late = Ws::tcp(&d.ws_url).await;
    assert_eq!(late.closed_with().await, Some(1008));
    let r = ws.call("server.status", json!({})).await;
    assert!(r["result"].is_object(), "{r}");
}

#[tokio::test]
async fn bad_budget_flags_are_refused_by_name() {
    for (flag, value) in [("--max-unauthenticated", "0"), ("--auth-deadline", "0s")] {
        let Err(err) = Daemon::builder().args([flag, value]).spawn() else {
            panic!("{flag} {value} was accepted");
        };
        assert!(err.1.contains(flag), "{flag}: {}", err.1);
    }
}

//! Acceptance: ping/idle liveness, stall compensation and handler deadlines (issue 2 §10).

mod common;

use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

fn fast_liveness() -> car_test_harness::DaemonBuilder {
    Daemon::builder().args(["--ping-interval", "200ms", "--idle-timeout", "1s"])
}

/// Reads (so tungstenite answers Pings with Pongs) until `count` Pings arrived; panics if
/// the connection closes meanwhile (or nothing arrives within [`WAIT`]).
async fn answer_pings(ws: &mut Ws, count: usize) {
    let mut pings = 0;
    while pings < count {
        let next = tokio::time::timeout(WAIT, ws.ws.next())
            .await
            .expect("a Ping arrives in time");
        match next {
            Some(Ok(Message::Ping(_))) => pings += 1,
            Some(Ok(Message::Close(f))) => panic!("closed while answering pings: {f:?}"),
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("connection failed while answering pings: {e}"),
            None => panic!("connection ended while answering pings"),
        }
    }
}

/// Keeps answering Pings, counting them, until the future is dropped.
async fn keep_answering(ws: &mut Ws, pings: &mut usize) {
    loop {
        answer_pings(ws, 1).await;
        *pings += 1;
    }
}

#[tokio::test]
async fn an_idle_peer_is_closed_and_an_answering_peer_is_kept() {
    let d = fast_liveness().start();
    // The silent peer authenticates, then its writes are dropped: it keeps reading (so its
    // close is seen at once) but never answers a Ping.
    let (mut silent, mute) = Ws::tcp_mutable(&d.ws_url).await;
    let r = silent
        .call("session.auth", json!({"token": d.token()}))
        .await;
    assert_eq!(r["result"]["ok"], true, "{r}");
    mute.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut answering = Ws::authed(&d).await;
    // The answering peer answers Pings for as long as it takes the silent one to be closed.
    let mut pings = 0;
    let ending = {
        let answer = keep_answering(&mut answering, &mut pings);
        tokio::pin!(answer);
        tokio::select! {
            ending = silent.closed_with() => ending,
            _ = &mut answer => unreachable!("keep_answering never returns"),
        }
    };
    assert_eq!(ending, Some(1000), "the idle peer is closed with 1000");
    assert!(pings >= 1, "pings arrive while the idle window runs");
    assert!(d.stderr().contains("closing idle peer"), "{}", d.stderr());
    // The answering peer outlived the idle window and still works.
    assert!(answering.call("server.schema", json!({})).await["result"].is_object());
}

#[tokio::test]
async fn a_stalled_daemon_does_not_blame_its_peers() {
    // The stimulus, not a synchronization: the daemon is frozen for longer than its idle
    // window (1 s) and than two ping intervals, so on resuming it must tell it was stalled.
    const FREEZE: Duration = Duration::from_millis(2500);
    let d = fast_liveness().start();
    let mut ws = Ws::authed(&d).await;
    answer_pings(&mut ws, 1).await; // liveness is running
    d.send_signal(libc::SIGSTOP);
    tokio::time::sleep(FREEZE).await;
    d.send_signal(libc::SIGCONT);
    // At most one Ping was in flight when the daemon froze, so three Pings mean it ran at
    // least two liveness ticks after resuming, and the first of them did not close us.
    answer_pings(&mut ws, 3).await;
    assert!(ws.call("server.schema", json!({})).await["result"].is_object());
    assert!(d.stderr().contains("was stalled"), "{}", d.stderr());
}

#[tokio::test]
async fn an_overrunning_handler_gets_32004_and_the_connection_stays_usable() {
    let d = Daemon::builder()
        .args(["--debug-methods", "--handler-timeout", "300ms"])
        .start();
    let mut ws = Ws::authed(&d).await;
    let slow = ws.request("debug.sleep", json!({"ms": 5000})).await;
    // Other calls on the same connection are answered meanwhile.
    let r = ws.call("debug.echo", json!({"still": "here"})).await;
    assert_eq!(r["result"], json!({"still": "here"}));
    let r = loop {
        let r = ws.recv_json().await;
        if r["id"] == json!(slow) {
            break r;
        }
    };
    assert_eq!(code(&r), -32004);
    assert!(
        message(&r).starts_with("handler 'debug.sleep' exceeded its 300ms response deadline"),
        "{r}"
    );
    assert_eq!(
        ws.call("debug.sleep", json!({"ms": 10})).await["result"],
        json!({"slept_ms": 10})
    );
}

#[tokio::test]
async fn the_handler_deadline_comes_from_car_handler_timeout() {
    let d = Daemon::builder()
        .args(["--debug-methods"])
        .env("CAR_HANDLER_TIMEOUT", "1")
        .start();
    let mut ws = Ws::authed(&d).await;
    let r = ws.call("debug.sleep", json!({"ms": 3000})).await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (
            -32004,
            "handler 'debug.sleep' exceeded its 1s response deadline; the operation may have committed, so read its state before retrying"
        )
    );
    let r = ws.call("debug.sleep", json!({"ms": "soon"})).await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (
            -32602,
            "invalid params: ms: invalid type: string \"soon\", expected u64"
        )
    );
}

#[tokio::test]
async fn reverse_calls_and_notifications_reach_the_client() {
    let d = Daemon::builder().args(["--debug-methods"]).start();
    let mut ws = Ws::authed(&d).await;
    let id = ws
        .request(
            "debug.call_client",
            json!({"method": "tools.execute", "params": {"tool": "t"}}),
        )
        .await;
    let request = ws.recv_json().await;
    assert_eq!(request["method"], "tools.execute");
    let cb = request["id"].as_str().unwrap().to_string();
    assert!(cb.starts_with("cb-"), "{request}");
    ws.send_text(json!({"jsonrpc":"2.0","id":cb,"error":{"code":-32000,"message":"boom","data":{"terminal":true}}}).to_string()).await;
    let r = ws.recv_json().await;
    assert_eq!(r["id"], json!(id));
    assert_eq!(r["result"]["error"]["data"]["terminal"], true);

    let id = ws
        .request(
            "debug.notify_client",
            json!({"method": "infer.progress", "params": {"id": 5}}),
        )
        .await;
    // The notification is queued before the answer.
    let n = ws.recv_json().await;
    assert_eq!(
        n,
        json!({"jsonrpc": "2.0", "method": "infer.progress", "params": {"id": 5}})
    );
    let r = ws.recv_json().await;
    assert_eq!(
        (r["id"].clone(), r["result"]["sent"].clone()),
        (json!(id), json!(true))
    );

    // A reverse call the client never answers fails on its timeout.
    let r = ws
        .call(
            "debug.call_client",
            json!({"method": "x", "timeout_ms": 100}),
        )
        .await;
    assert!(message(&r).contains("did not answer within 100ms"), "{r}");
}

#[tokio::test]
async fn replies_to_reverse_calls_still_flow_when_every_handler_slot_is_taken() {
    // More handlers than may run at once, each waiting on a reverse call: the reader must
    // keep reading the client's replies or every one of them would time out.
    let d = Daemon::builder().args(["--debug-methods"]).start();
    let mut ws = Ws::authed(&d).await;
    let n = car_server::transport::connection::MAX_RUNNING + 44;
    for i in 0..n {
        ws.request(
            "debug.call_client",
            json!({"method": "echo", "params": {"i": i}, "timeout_ms": 20000}),
        )
        .await;
    }
    let (mut answered, mut results) = (0, 0);
    while results < n {
        let f = ws.recv_json().await;
        if f["method"] == "echo" {
            ws.send_text(
                json!({"jsonrpc": "2.0", "id": f["id"], "result": f["params"]}).to_string(),
            )
            .await;
            answered += 1;
        } else {
            assert!(f["result"]["result"]["i"].is_u64(), "{f}");
            results += 1;
        }
    }
    assert_eq!(answered, n);
}

#[tokio::test]
async fn a_connection_with_too_many_requests_in_flight_is_told_the_server_is_busy() {
    let d = Daemon::builder().args(["--debug-methods"]).start();
    let mut ws = Ws::authed(&d).await;
    let limit = car_server::transport::connection::MAX_QUEUED;
    for _ in 0..limit + 3 {
        ws.request("debug.sleep", json!({"ms": 3000})).await;
    }
    let mut busy = 0;
    while busy < 3 {
        let f = ws.recv_json().await;
        assert_eq!(code(&f), -32603, "{f}");
        assert!(message(&f).contains("server busy"), "{f}");
        busy += 1;
    }
    // The daemon keeps serving other connections meanwhile.
    assert!(Ws::authed(&d).await.call("server.schema", json!({})).await["result"].is_object());
}

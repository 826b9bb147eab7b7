//! The call path's fast paths keep their guarantees (issue 17, "The call path"): handlers
//! that finish in their first poll are answered from the reader, the writer batches
//! what is queued, and neither loses, duplicates or holds back an answer; a handler that
//! suspends moves to its own task and does not hold up later calls; calls beyond the
//! running-slot limit wait their turn and are all answered.

mod common;

use std::collections::BTreeMap;

use common::*;
use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

fn daemon() -> Daemon {
    Daemon::builder().args(["--debug-methods"]).start()
}

/// Reads `n` responses; returns them by id (panics on a duplicate id).
async fn responses(ws: &mut Ws, n: usize) -> BTreeMap<u64, Value> {
    let mut by_id = BTreeMap::new();
    while by_id.len() < n {
        let r = ws.recv_json().await;
        let id = r["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("no numeric id: {r}"));
        assert!(by_id.insert(id, r).is_none(), "id {id} answered twice");
    }
    by_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_burst_gets_one_answer_per_request_with_its_own_params() {
    const N: u64 = 3000;
    let d = daemon();
    let mut ws = Ws::authed(&d).await;
    // Every request is written before any answer is read, so the daemon's reader sees
    // them back to back and its writer has whole batches queued.
    for id in 1..=N {
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": "debug.echo",
                           "params": {"n": id, "pad": "x".repeat((id % 7) as usize * 100)}});
        ws.ws.feed(Message::text(frame.to_string())).await.unwrap();
    }
    ws.ws.flush().await.unwrap();
    let answers = responses(&mut ws, N as usize).await;
    assert_eq!(answers.len() as u64, N);
    for (id, r) in answers {
        assert_eq!(r["result"]["n"], json!(id), "{r}");
        assert_eq!(
            r["result"]["pad"].as_str().unwrap().len(),
            (id % 7) as usize * 100
        );
    }
    // The connection is still in order afterwards.
    assert_eq!(
        ws.call("debug.echo", json!({"after": true})).await["result"],
        json!({"after": true})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_handler_does_not_hold_up_the_calls_behind_it() {
    let d = daemon();
    let mut ws = Ws::authed(&d).await;
    let slow = ws.request("debug.sleep", json!({"ms": 400})).await;
    let quick: Vec<u64> = {
        let mut ids = Vec::new();
        for i in 0..20 {
            ids.push(ws.request("debug.echo", json!({"i": i})).await);
        }
        ids
    };
    // The echoes were sent after the sleep and finish in their first poll: all of them
    // are answered before the sleep's answer, which arrives last.
    let mut order = Vec::new();
    let answers = loop {
        let r = ws.recv_json().await;
        order.push(r["id"].as_u64().unwrap());
        if order.len() == quick.len() + 1 {
            break order;
        }
    };
    assert_eq!(answers.last(), Some(&slow), "{answers:?}");
    let mut echoed = answers[..quick.len()].to_vec();
    echoed.sort_unstable();
    assert_eq!(echoed, quick);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_beyond_the_running_limit_wait_their_turn_and_are_all_answered() {
    // car_server::transport::connection::MAX_RUNNING is 256: the later sleeps and the echo behind
    // them find no free slot, wait in their own tasks, and still get answered.
    const SLEEPS: u64 = 300;
    let d = daemon();
    let mut ws = Ws::authed(&d).await;
    for id in 1..=SLEEPS {
        let frame =
            json!({"jsonrpc": "2.0", "id": id, "method": "debug.sleep", "params": {"ms": 200}});
        ws.ws.feed(Message::text(frame.to_string())).await.unwrap();
    }
    let echo =
        json!({"jsonrpc": "2.0", "id": SLEEPS + 1, "method": "debug.echo", "params": {"last": 1}});
    ws.ws.feed(Message::text(echo.to_string())).await.unwrap();
    ws.ws.flush().await.unwrap();
    let answers = responses(&mut ws, SLEEPS as usize + 1).await;
    for id in 1..=SLEEPS {
        assert_eq!(
            answers[&id]["result"]["slept_ms"],
            json!(200),
            "{}",
            answers[&id]
        );
    }
    assert_eq!(answers[&(SLEEPS + 1)]["result"], json!({"last": 1}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_refusals_and_notifications_still_take_the_inline_path_correctly() {
    let d = daemon();
    let mut ws = Ws::tcp(&d.ws_url).await;
    // Before auth: the gate refuses and closes, whatever follows in the same burst.
    ws.ws
        .feed(Message::text(
            json!({"jsonrpc": "2.0", "id": 1, "method": "debug.echo", "params": {}}).to_string(),
        ))
        .await
        .unwrap();
    ws.ws
        .feed(Message::text(
            json!({"jsonrpc": "2.0", "id": 2, "method": "debug.echo", "params": {}}).to_string(),
        ))
        .await
        .unwrap();
    ws.ws.flush().await.unwrap();
    let r = ws.recv_json().await;
    assert_eq!((r["id"].clone(), code(&r)), (json!(1), -32001), "{r}");
    assert_eq!(ws.closed_with().await, Some(1008));

    // Authenticated: a notification is never answered, an unknown method is refused,
    // and the echo behind both is answered.
    let mut ws = Ws::authed(&d).await;
    ws.send_text(json!({"jsonrpc": "2.0", "method": "debug.echo", "params": {"n": 1}}).to_string())
        .await;
    let unknown = ws.call("no.such.method", json!({})).await;
    assert_eq!(code(&unknown), -32601, "{unknown}");
    let r = ws.call("debug.echo", json!({"n": 2})).await;
    assert_eq!(r["result"], json!({"n": 2}), "{r}");
}

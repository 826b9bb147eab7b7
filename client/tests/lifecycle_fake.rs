//! Acceptance 4 against a daemon that drops its socket: every pending call fails with a
//! transport error when the socket closes (not by timing out: their deadline is 30
//! minutes away), the next call reconnects with auth and handshake again and handlers
//! kept; `close()` is idempotent; dropping the client ends its tasks.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use car_daemon_client::{Client, Error};
use serde_json::json;
use support::{within, write_token_file, FakeConn, FakeDaemon};
use tokio::sync::mpsc;

const PENDING: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropped_socket_fails_every_pending_call_then_reconnects() {
    let closed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let closed = closed_at.clone();
    let fake = FakeDaemon::start(move |mut conn: FakeConn| {
        let closed = closed.clone();
        async move {
            conn.accept_handshake().await;
            if conn.index == 0 {
                // Take every call, answer none, then vanish without a close frame.
                for _ in 0..PENDING {
                    conn.recv().await.unwrap();
                }
                *closed.lock().unwrap() = Some(Instant::now());
                conn.drop_socket();
            } else {
                // The reconnected session calls the client's handler, then serves.
                conn.send(json!({"jsonrpc": "2.0", "id": "cb-1", "method": "my.tool", "params": {"n": 2}}))
                    .await;
                conn.serve().await;
            }
        }
    })
    .await;
    let home = tempfile::tempdir().unwrap();
    write_token_file(home.path(), "tok");
    let client = Client::new(support::config_for(&fake.url, home.path()));
    client.register_handler("my.tool", |p| {
        Ok(json!({"doubled": p["n"].as_i64().unwrap() * 2}))
    });
    client.connect().await.unwrap();

    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..PENDING {
        let (client, tx) = (client.clone(), tx.clone());
        tokio::spawn(async move {
            let r = client
                .call("debug.sleep", json!({"ms": 60_000, "i": i}))
                .await;
            let _ = tx.send((r, Instant::now()));
        });
    }
    drop(tx);
    // The calls wait on a 30-minute deadline: only the closed socket can end them within
    // the hang guard, so each ending in a transport error is the behaviour under test.
    let failures = within("every pending call to fail", async {
        let mut failures = Vec::new();
        while let Some(f) = rx.recv().await {
            failures.push(f);
        }
        failures
    })
    .await;
    assert_eq!(failures.len(), PENDING);
    let closed_at = closed_at.lock().unwrap().expect("fake closed the socket");
    for (result, _) in &failures {
        assert!(matches!(result, Err(Error::Transport(_))), "{result:?}");
    }
    let slowest = failures
        .iter()
        .map(|(_, at)| at.saturating_duration_since(closed_at))
        .max()
        .unwrap();
    eprintln!("the last of {PENDING} pending calls failed {slowest:?} after the socket closed");
    assert!(!client.is_connected());

    // The next call reconnects: session.auth and server.handshake again, handler kept.
    assert_eq!(
        client.call("debug.echo", json!({"a": 1})).await.unwrap(),
        json!({"a": 1})
    );
    let second: Vec<String> = fake
        .frames()
        .into_iter()
        .filter(|(i, _, _)| *i == 1)
        .filter_map(|(_, _, v)| v["method"].as_str().map(str::to_string))
        .collect();
    assert_eq!(&second[..2], ["session.auth", "server.handshake"]);
    assert!(client.has_handler("my.tool"));
    let answer = json!({"jsonrpc": "2.0", "id": "cb-1", "result": {"doubled": 4}});
    fake.wait_for("the handler's answer on the new connection", |frames| {
        frames.iter().any(|(i, _, v)| *i == 1 && *v == answer)
    })
    .await;
}

async fn serving_fake() -> FakeDaemon {
    FakeDaemon::start(|mut conn: FakeConn| async move {
        conn.accept_handshake().await;
        conn.serve().await;
    })
    .await
}

#[tokio::test]
async fn close_fails_pending_calls_and_is_idempotent() {
    let fake = serving_fake().await;
    let home = tempfile::tempdir().unwrap();
    let client = Client::new(support::config_for(&fake.url, home.path()));
    client.connect().await.unwrap();
    let pending = tokio::spawn({
        let client = client.clone();
        async move { client.call("debug.sleep", json!({"ms": 60_000})).await }
    });
    // Close while the call is in flight: wait until the fake has it.
    fake.wait_for("the call to reach the daemon", |frames| {
        frames.iter().any(|(_, _, v)| v["method"] == "debug.sleep")
    })
    .await;
    client.close();
    client.close();
    // Its deadline is 30 minutes away: ending inside the hang guard, with Closed, is the
    // close failing it.
    assert_eq!(
        within("the pending call to fail", pending).await.unwrap(),
        Err(Error::Closed)
    );
    assert_eq!(
        client.call("debug.echo", json!({})).await,
        Err(Error::Closed)
    );
    assert!(client.is_closed() && !client.is_connected());
}

#[tokio::test]
async fn disconnect_then_the_next_call_reconnects() {
    let fake = serving_fake().await;
    let home = tempfile::tempdir().unwrap();
    let client = Client::new(support::config_for(&fake.url, home.path()));
    assert_eq!(
        client.call("debug.echo", json!([1])).await.unwrap(),
        json!([1])
    );
    client.disconnect();
    assert!(!client.is_connected());
    assert_eq!(
        client.call("debug.echo", json!([2])).await.unwrap(),
        json!([2])
    );
    let connections: std::collections::BTreeSet<usize> =
        fake.frames().into_iter().map(|(i, _, _)| i).collect();
    assert_eq!(connections.len(), 2);
}

#[tokio::test]
async fn dropping_the_client_closes_the_socket() {
    let (gone_tx, mut gone_rx) = mpsc::unbounded_channel();
    let fake = FakeDaemon::start(move |mut conn: FakeConn| {
        let gone_tx = gone_tx.clone();
        async move {
            conn.accept_handshake().await;
            // recv() returns None only when the client's socket is gone.
            while conn.recv().await.is_some() {}
            let _ = gone_tx.send(());
        }
    })
    .await;
    let home = tempfile::tempdir().unwrap();
    let client = Client::new(support::config_for(&fake.url, home.path()));
    client.connect().await.unwrap();
    drop(client);
    within("the client's tasks to end with the client", gone_rx.recv())
        .await
        .unwrap();
}

//! Acceptance 4 against the real `car-server`: killing the daemon mid-call fails every
//! pending call within 100 ms of the socket closing; after a restart on the same
//! `CAR_HOME` (same socket path, fresh token file) the next call reconnects and succeeds,
//! and handlers registered before the kill still answer.

mod support;

use std::time::{Duration, Instant};

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::Daemon;
use serde_json::json;
use tokio::sync::mpsc;

const PENDING: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_fails_pending_calls_then_restart_reconnects_with_handlers() {
    let mut d = Daemon::builder().args(["--debug-methods"]).start();
    let home = d.home.clone();
    let client = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&home)));
    client.register_handler("t.alive", |_| Ok(json!("still here")));
    let first = client.connect().await.unwrap();

    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..PENDING {
        let (client, tx) = (client.clone(), tx.clone());
        tokio::spawn(async move {
            let r = client
                .call("debug.sleep", json!({"ms": 600_000, "i": i}))
                .await;
            let _ = tx.send((r, Instant::now()));
        });
    }
    drop(tx);
    // Make sure the sleeps were written before killing: the writer is FIFO, so once a
    // later call has its answer the earlier frames reached the daemon.
    tokio::time::sleep(Duration::from_millis(50)).await;
    client.call("debug.echo", json!({})).await.unwrap();

    // kill() returns once the process is reaped, so its socket is closed by then.
    tokio::task::block_in_place(|| d.kill());
    let closed_at = Instant::now();
    let mut failures = Vec::new();
    while let Some(f) = rx.recv().await {
        failures.push(f);
    }
    assert_eq!(failures.len(), PENDING);
    for (result, at) in &failures {
        assert!(matches!(result, Err(Error::Transport(_))), "{result:?}");
        let late = at.saturating_duration_since(closed_at);
        assert!(
            late < Duration::from_millis(100),
            "failed {late:?} after the kill"
        );
    }
    assert!(!client.is_connected());
    let old_token = first.auth.clone();

    // Restart on the same CAR_HOME: same socket path, new token in the same file.
    let d2 = Daemon::builder()
        .home(&home)
        .args(["--debug-methods"])
        .start();
    assert_eq!(
        client
            .call("debug.echo", json!({"back": true}))
            .await
            .unwrap(),
        json!({"back": true})
    );
    let second = client.session().unwrap();
    assert_eq!(second.endpoint, first.endpoint);
    assert!(second.auth.is_some() && old_token.is_some());
    let alive = client
        .call(
            "debug.call_client",
            json!({"method": "t.alive", "params": {}, "timeout_ms": 10_000}),
        )
        .await
        .unwrap();
    assert_eq!(alive, json!({"result": "still here"}));
    drop(d2);
}

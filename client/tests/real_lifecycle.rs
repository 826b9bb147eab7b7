//! Acceptance 4 against the real `car-server`: killing the daemon mid-call fails every
//! pending call with a transport error (not a timeout: their deadline is 30 minutes away);
//! after a restart on the same `CAR_HOME` (same socket path, fresh token file) the next
//! call reconnects and succeeds, and handlers registered before the kill still answer.
//! How long the failures take after the kill is measured by
//! `cargo bench -p car-daemon-client --bench teardown`, not asserted here.

mod support;

use std::time::Instant;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error, HandlerResult};
use car_test_harness::Daemon;
use serde_json::json;
use support::within;
use tokio::sync::mpsc;

const PENDING: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_fails_pending_calls_then_restart_reconnects_with_handlers() {
    let mut d = Daemon::builder().args(["--debug-methods"]).start();
    let home = d.home.clone();
    let old_token = d.token();
    let client = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&home)));
    client.register_handler("t.alive", |_| Ok(json!("still here")));
    // Each pending call is a `debug.call_client` that the daemon holds open on a reverse
    // call to `t.hold`, which reports its arrival and never answers: once all PENDING have
    // reported, every call is in flight inside the daemon.
    let (held_tx, mut held_rx) = mpsc::unbounded_channel();
    client.register_async_handler("t.hold", move |params| {
        let held_tx = held_tx.clone();
        async move {
            let _ = held_tx.send(params["i"].as_u64().unwrap());
            std::future::pending::<HandlerResult>().await
        }
    });
    let first = client.connect().await.unwrap();

    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..PENDING {
        let (client, tx) = (client.clone(), tx.clone());
        tokio::spawn(async move {
            let r = client
                .call(
                    "debug.call_client",
                    json!({"method": "t.hold", "params": {"i": i}, "timeout_ms": 600_000}),
                )
                .await;
            let _ = tx.send((r, Instant::now()));
        });
    }
    drop(tx);
    let mut held = within("every call to reach the daemon", async {
        let mut held = Vec::new();
        while held.len() < PENDING {
            held.push(held_rx.recv().await.unwrap());
        }
        held
    })
    .await;
    held.sort_unstable();
    assert_eq!(held, (0..PENDING as u64).collect::<Vec<_>>());

    // kill() returns once the process is reaped, so its socket is closed by then.
    let killed = Instant::now();
    tokio::task::block_in_place(|| d.kill());
    // Only the closed socket can end these calls within the hang guard.
    let failures = within("every pending call to fail after the kill", async {
        let mut failures = Vec::new();
        while let Some(f) = rx.recv().await {
            failures.push(f);
        }
        failures
    })
    .await;
    assert_eq!(failures.len(), PENDING);
    for (result, _) in &failures {
        assert!(matches!(result, Err(Error::Transport(_))), "{result:?}");
    }
    let slowest = failures
        .iter()
        .map(|(_, at)| at.saturating_duration_since(killed))
        .max()
        .unwrap();
    eprintln!("the last of {PENDING} pending calls failed {slowest:?} after SIGKILL");
    assert!(!client.is_connected());

    // Restart on the same CAR_HOME: same socket path, new token in the same file.
    let d2 = Daemon::builder()
        .home(&home)
        .args(["--debug-methods"])
        .start();
    assert_ne!(
        d2.token(),
        old_token,
        "the restarted daemon wrote a new token"
    );
    assert_eq!(
        client
            .call("debug.echo", json!({"back": true}))
            .await
            .unwrap(),
        json!({"back": true})
    );
    // The new daemon accepted the session, so the client read the new token from the file.
    let second = client.session().unwrap();
    assert_eq!(second.endpoint, first.endpoint);
    assert_eq!(second.auth.unwrap()["ok"], true);
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

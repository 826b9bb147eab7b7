//! How soon pending calls fail once the daemon dies (the figure `tests/real_lifecycle.rs`
//! used to assert as "within 100 ms"). Each round starts a real `car-server`, parks
//! `PENDING` calls inside it (each a `debug.call_client` waiting on a reverse call the
//! client never answers), SIGKILLs it, and records when each call gets its
//! `Error::Transport`. Beside them, in the same round, a bare tokio-tungstenite connection
//! to the same daemon socket records when its read sees the end: the floor, the kernel
//! telling a reader that the peer is gone. Times run from just before the kill.
//!
//! `cargo bench -p car-daemon-client --bench teardown` runs 30 rounds; without `--bench`
//! (as `cargo test --all-targets` runs it) a 2-round smoke pass.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error, HandlerResult};
use car_test_harness::Daemon;
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;

const PENDING: usize = 20;

struct Round {
    /// Kill → the bare connection's read ends.
    floor: Duration,
    /// Kill → the first and the last pending call fail.
    first: Duration,
    last: Duration,
}

async fn round() -> Round {
    let mut d = Daemon::builder().args(["--debug-methods"]).start();
    let client = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)));
    let (held_tx, mut held_rx) = mpsc::unbounded_channel();
    client.register_async_handler("t.hold", move |_| {
        let held_tx = held_tx.clone();
        async move {
            let _ = held_tx.send(());
            std::future::pending::<HandlerResult>().await
        }
    });
    client.connect().await.unwrap();
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
    for _ in 0..PENDING {
        held_rx.recv().await.unwrap();
    }

    // The floor: an idle WebSocket on the same Unix socket, waiting for its next frame.
    let raw = tokio::net::UnixStream::connect(&d.socket).await.unwrap();
    let (ws, _) = tokio_tungstenite::client_async("ws://localhost/", raw)
        .await
        .unwrap();
    let (raw_tx, raw_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (_sink, mut source) = ws.split();
        while let Some(Ok(_)) = source.next().await {}
        let _ = raw_tx.send(Instant::now());
    });

    let killed = Instant::now();
    tokio::task::block_in_place(|| d.kill());
    let mut ends = Vec::with_capacity(PENDING);
    while let Some((r, at)) = rx.recv().await {
        assert!(matches!(r, Err(Error::Transport(_))), "{r:?}");
        ends.push(at.saturating_duration_since(killed));
    }
    assert_eq!(ends.len(), PENDING);
    let floor = raw_rx.await.unwrap().saturating_duration_since(killed);
    Round {
        floor,
        first: ends.iter().copied().min().unwrap(),
        last: ends.iter().copied().max().unwrap(),
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let rounds = if full { 30 } else { 2 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let results: Vec<Round> = rt.block_on(async {
        let mut results = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            results.push(round().await);
        }
        results
    });
    let floor = median(results.iter().map(|r| r.floor).collect());
    let first = median(results.iter().map(|r| r.first).collect());
    let last = median(results.iter().map(|r| r.last).collect());
    let worst = results.iter().map(|r| r.last).max().unwrap();
    println!("car-daemon-client teardown: {rounds} rounds, {PENDING} pending calls, SIGKILL");
    println!("bare socket sees the end (floor)   median {:>9}", ms(floor));
    println!(
        "first pending call fails          median {:>9} ({:.2}x floor)",
        ms(first),
        first.as_secs_f64() / floor.as_secs_f64()
    );
    println!(
        "last pending call fails           median {:>9} ({:.2}x floor), worst {}",
        ms(last),
        last.as_secs_f64() / floor.as_secs_f64(),
        ms(worst)
    );
}

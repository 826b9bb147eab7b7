//! How soon a cancel takes effect (the figures `tests/generate.rs` and `tests/remote.rs`
//! used to assert as "within 1 s"):
//!
//! - local: SmolLM2 streams a long sampled story; after `AFTER` pieces another thread sets the
//!   cancel token, and the time until `generate` returns is recorded beside the median interval
//!   between pieces of the same run (the baseline: the engine checks the token once per token, so
//!   the expected latency is about one token);
//! - remote: a scripted provider sends one SSE event and then goes quiet for an hour; the cancel is
//!   set 100–149 ms into the silence (a different offset each run, as a cancel arrives at no
//!   particular point of the engine's wait), and the time until `generate` returns is recorded
//!   beside the engine's 50 ms polling step (its designed bound).
//!
//! Run: `eval "$(scripts/fetch-models)"; cargo bench -p car-inference --bench cancel`
//! Env: `CAR_BENCH_THREADS` (default: all cores), `CAR_BENCH_RUNS` (default 10). Without
//! `--bench` (as `cargo test --all-targets` runs it) a 2-run smoke pass.
#![allow(clippy::print_stdout)]

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use car_inference::{
    CancelToken, EngineConfig, GenerateRequest, InferenceEngine, RegisterRequest, RemoteConfig,
    StopReason, StreamControl,
};
use car_test_harness::bench::{env_num, median, threads, STORY_PROMPT};
use car_test_harness::http_script::{Reply, Server};
use serde_json::json;

/// Pieces streamed before the cancel.
const AFTER: usize = 16;
/// The remote engine's polling step while a stream is open.
const REMOTE_STEP: Duration = Duration::from_millis(50);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One local run: (cancel → return, median interval between pieces before the cancel).
fn local_run(engine: &InferenceEngine, seed: u32) -> (Duration, Duration) {
    let req = GenerateRequest {
        prompt: Some(STORY_PROMPT.into()),
        max_tokens: Some(2000),
        temperature: Some(1.5),
        top_p: Some(1.0),
        seed: Some(seed),
        ..Default::default()
    };
    let cancel = CancelToken::new();
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        let worker = s.spawn(|| {
            let mut stamps: Vec<Instant> = Vec::new();
            let mut tx = Some(tx);
            let mut cb = |_: &str| {
                stamps.push(Instant::now());
                if stamps.len() == AFTER {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(());
                    }
                }
                StreamControl::Continue
            };
            let out = engine
                .generate(Some("smollm2"), &req, &cancel, Some(&mut cb))
                .expect("generate");
            (out, stamps, Instant::now())
        });
        rx.recv().expect("the run ended before the cancel point");
        let fired = Instant::now();
        cancel.cancel();
        let (out, stamps, returned) = worker.join().unwrap();
        assert_eq!(out.stop_reason, StopReason::Cancelled);
        let gaps: Vec<f64> = stamps[..AFTER]
            .windows(2)
            .map(|w| w[1].duration_since(w[0]).as_secs_f64())
            .collect();
        (
            returned.duration_since(fired),
            Duration::from_secs_f64(median(gaps)),
        )
    })
}

/// One remote run against a provider that stalls after its first event; the cancel comes
/// `into_stall` after the first piece.
fn remote_run(into_stall: Duration) -> Duration {
    let mut reply = Reply::sse(
        &[json!({"choices": [{"index": 0, "delta": {"content": "first"}, "finish_reason": null}]})],
        Duration::ZERO,
    );
    reply
        .chunks
        .insert(1, (Duration::from_secs(3600), b": still here\n\n".to_vec()));
    let server = Server::start(vec![reply]);
    let home = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        home.path().join("env"),
        "CAR_BENCH_REMOTE_API_KEY=sk-bench\n",
    )
    .expect("env");
    let mut config = EngineConfig::new(home.path());
    config.remote = RemoteConfig {
        max_retries: 0,
        ..RemoteConfig::default()
    };
    let engine = InferenceEngine::open(config).expect("engine");
    engine
        .register(&RegisterRequest {
            id: Some("remote".into()),
            base_url: Some(format!("{}/v1", server.base_url)),
            model: Some("m".into()),
            api_key_env: Some("CAR_BENCH_REMOTE_API_KEY".into()),
            ..Default::default()
        })
        .expect("register");
    let req = GenerateRequest {
        prompt: Some("hi".into()),
        max_tokens: Some(20),
        ..Default::default()
    };
    let cancel = CancelToken::new();
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        let worker = s.spawn(|| {
            let mut tx = Some(tx);
            let mut cb = |_: &str| {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(());
                }
                StreamControl::Continue
            };
            let out = engine
                .generate(Some("remote"), &req, &cancel, Some(&mut cb))
                .expect("generate");
            (out, Instant::now())
        });
        rx.recv().expect("no piece");
        std::thread::sleep(into_stall);
        let fired = Instant::now();
        cancel.cancel();
        let (out, returned) = worker.join().unwrap();
        assert_eq!(out.stop_reason, StopReason::Cancelled);
        returned.duration_since(fired)
    })
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let runs = if full {
        env_num("CAR_BENCH_RUNS", 10).max(1)
    } else {
        2
    };
    let threads = threads();
    let (_home, engine) = common::engine(threads, &[("smollm2", "CAR_TEST_GGUF")]);
    // Load and warm up, not measured.
    local_run(&engine, 0);

    let mut latency = Vec::new();
    let mut token = Vec::new();
    for run in 0..runs {
        let (l, t) = local_run(&engine, 1 + run);
        println!(
            "local run {run}: cancel took {:.1} ms, one token {:.1} ms",
            ms(l),
            ms(t)
        );
        latency.push(l.as_secs_f64());
        token.push(t.as_secs_f64());
    }
    let worst_local = latency.iter().copied().fold(0.0, f64::max);
    let (latency, token) = (median(latency), median(token));

    let mut remote = Vec::new();
    for run in 0..runs {
        let l = remote_run(Duration::from_millis(100 + u64::from(run * 17 % 50)));
        println!("remote run {run}: cancel took {:.1} ms", ms(l));
        remote.push(l.as_secs_f64());
    }
    let worst_remote = remote.iter().copied().fold(0.0, f64::max);
    let remote = median(remote);

    println!("threads: {threads}, runs: {runs}");
    println!(
        "local cancel: median {:.1} ms ({:.2}x one token of {:.1} ms), worst {:.1} ms",
        latency * 1e3,
        latency / token,
        token * 1e3,
        worst_local * 1e3
    );
    println!(
        "remote cancel on a stalled stream: median {:.1} ms ({:.2}x the {} ms polling step), worst {:.1} ms",
        remote * 1e3,
        remote / REMOTE_STEP.as_secs_f64(),
        REMOTE_STEP.as_millis(),
        worst_remote * 1e3
    );
}

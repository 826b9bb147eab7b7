//! End-to-end inference benchmark: SmolLM2 decode tokens/s and time to first token, and
//! MiniLM embeddings/s, through a real `car-server` over its WebSocket, against baselines
//! measured in the same run on the same GGUF file with the same thread count:
//!
//! - the same engine called in-process (`car_inference::InferenceEngine`), always: the ratio is
//!   what the socket, JSON-RPC and the daemon's admission cost;
//! - llama-cpp-python, when `CAR_BENCH_PYTHON` names a Python that has it installed
//!   (`crates/inference/bench_llama_cpp_python.py`, the same prompt, token budget and sampling).
//!
//! It also measures continuous batching: 1, 2 and 4 concurrent `infer_stream` calls on the
//! same model through the daemon (`--max-generations 4`), each with its own seed and
//! `cache_control: false` (prefix reuse is not what is measured). Aggregate tokens/s is
//! the completion tokens of all calls over the wall time from sending them to the last
//! answer; `aggregate_4_over_1` is the batching gain.
//!
//! Blocks alternate (daemon, engine, llama-cpp-python, concurrency; `CAR_BENCH_ROUNDS`
//! times) so drift on a shared machine hits each side alike. Definitions match the engine
//! benchmark's: time to first token is from sending the request to the first text piece
//! arriving; decode tokens/s is (completion tokens − 1) over the time from the first piece
//! to the answer.
//!
//! Run it with `scripts/bench-inference` (builds the release daemon first). Env:
//! `CAR_TEST_GGUF`, `CAR_TEST_EMBED_DIR` (from `scripts/fetch-models`), `CAR_BENCH_THREADS`
//! (default: all cores), `CAR_BENCH_RUNS` per block (default 3), `CAR_BENCH_ROUNDS`
//! (default 2), `CAR_BENCH_TOKENS` (default 128), `CAR_BENCH_PYTHON`. `CAR_BENCH_QUICK=1`:
//! one round of one run of 32 tokens (the `scripts/bench --quick` smoke run). With
//! `CAR_BENCH_OUT` set, one JSON object `{"component": "inference", "metrics": {...}}` is
//! written there (the `scripts/bench` convention).
#![allow(clippy::print_stdout)]

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use car_daemon_client::{CallOptions, Client, ClientConfig, EnvSnapshot};
use car_inference::{
    CancelToken, EngineConfig, GenerateRequest, InferenceEngine, LlamaConfig, RegisterRequest,
    StreamControl,
};
use car_test_harness::bench::{env_num, env_path, median, sentences, threads, STORY_PROMPT};
use car_test_harness::Daemon;
use serde_json::{json, Value};

/// One generation's figures.
struct Run {
    ttft_ms: f64,
    decode_tps: Option<f64>,
}

impl Run {
    fn new(started: Instant, first: Option<Instant>, ended: Instant, tokens: u64) -> Self {
        let first = first.unwrap_or(ended);
        let after_first = ended.duration_since(first).as_secs_f64();
        let n = tokens.saturating_sub(1);
        Self {
            ttft_ms: first.duration_since(started).as_secs_f64() * 1000.0,
            decode_tps: (after_first > 0.0 && n > 0).then(|| n as f64 / after_first),
        }
    }
}

#[derive(Default)]
struct Figures {
    ttft_ms: Vec<f64>,
    decode_tps: Vec<f64>,
    embeds_per_s: Vec<f64>,
}

impl Figures {
    fn push(&mut self, run: Run) {
        self.ttft_ms.push(run.ttft_ms);
        self.decode_tps.extend(run.decode_tps);
    }
}

struct Daemonside {
    _daemon: Daemon,
    client: Client,
}

async fn start_daemon(threads: u32) -> Daemonside {
    let daemon = Daemon::builder()
        .args([
            "--llama-threads".to_string(),
            threads.to_string(),
            "--max-generations".to_string(),
            WIDTHS[WIDTHS.len() - 1].to_string(),
        ])
        .start();
    let client = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(
        &daemon.home,
    )));
    for (id, var) in [("smol", "CAR_TEST_GGUF"), ("minilm", "CAR_TEST_EMBED_DIR")] {
        client
            .call("models.register", json!({"id": id, "path": env_path(var)}))
            .await
            .expect("models.register");
    }
    // Cold load + warm-up, not measured.
    client
        .call(
            "infer",
            json!({"model": "smol", "prompt": "Hi", "max_tokens": 4}),
        )
        .await
        .expect("warm-up");
    client
        .call(
            "embed",
            json!({"model": "minilm", "texts": &sentences()[..8]}),
        )
        .await
        .expect("embed warm-up");
    Daemonside {
        _daemon: daemon,
        client,
    }
}

/// `n` concurrent `infer_stream` calls through the daemon; returns the aggregate
/// completion tokens/s (all calls' tokens over the block's wall time).
async fn concurrent_block(d: &Daemonside, n: u32, tokens: u32, seed0: u32) -> f64 {
    let started = Instant::now();
    let calls: Vec<_> = (0..n)
        .map(|i| {
            let client = d.client.clone();
            let params = json!({"model": "smol", "prompt": STORY_PROMPT, "max_tokens": tokens,
                "temperature": 0.8, "seed": seed0 + i, "cache_control": false});
            tokio::spawn(async move {
                client
                    .call_streaming("infer_stream", params, CallOptions::default(), |_| {})
                    .await
                    .expect("infer_stream")
            })
        })
        .collect();
    let mut total = 0;
    for call in calls {
        let result = call.await.expect("call task");
        total += result["usage"]["completion_tokens"].as_u64().unwrap_or(0);
    }
    total as f64 / started.elapsed().as_secs_f64()
}

async fn daemon_block(d: &Daemonside, runs: u32, tokens: u32, seed0: u32, out: &mut Figures) {
    for run in 0..runs {
        let first: Arc<Mutex<Option<Instant>>> = Arc::default();
        let seen = Arc::clone(&first);
        let params = json!({"model": "smol", "prompt": STORY_PROMPT, "max_tokens": tokens,
            "temperature": 0.8, "seed": seed0 + run});
        let started = Instant::now();
        let result = d
            .client
            .call_streaming(
                "infer_stream",
                params,
                CallOptions::default(),
                move |e: Value| {
                    if e["event"]["type"] == "text" {
                        seen.lock().unwrap().get_or_insert_with(Instant::now);
                    }
                },
            )
            .await
            .expect("infer_stream");
        let ended = Instant::now();
        let n = result["usage"]["completion_tokens"].as_u64().unwrap_or(0);
        let first = *first.lock().unwrap();
        out.push(Run::new(started, first, ended, n));
    }
    let texts = sentences();
    for _ in 0..runs {
        let started = Instant::now();
        d.client
            .call("embed", json!({"model": "minilm", "texts": texts}))
            .await
            .expect("embed");
        out.embeds_per_s
            .push(texts.len() as f64 / started.elapsed().as_secs_f64());
    }
}

fn open_engine(threads: u32) -> (tempfile::TempDir, InferenceEngine) {
    let home = tempfile::tempdir().expect("temp dir");
    let mut config = EngineConfig::new(home.path());
    config.llama = LlamaConfig {
        n_threads: threads,
        ..LlamaConfig::default()
    };
    let engine = InferenceEngine::open(config).expect("engine");
    for (id, var) in [("smol", "CAR_TEST_GGUF"), ("minilm", "CAR_TEST_EMBED_DIR")] {
        engine
            .register(&RegisterRequest {
                id: Some(id.into()),
                path: Some(env_path(var)),
                ..Default::default()
            })
            .expect("register");
    }
    let warm = GenerateRequest {
        prompt: Some("Hi".into()),
        max_tokens: Some(4),
        ..Default::default()
    };
    engine
        .generate(Some("smol"), &warm, &CancelToken::new(), None)
        .expect("warm-up");
    engine
        .embed(Some("minilm"), &sentences()[..8])
        .expect("embed warm-up");
    (home, engine)
}

fn engine_block(engine: &InferenceEngine, runs: u32, tokens: u32, seed0: u32, out: &mut Figures) {
    for run in 0..runs {
        let req = GenerateRequest {
            prompt: Some(STORY_PROMPT.into()),
            max_tokens: Some(tokens),
            temperature: Some(0.8),
            seed: Some(seed0 + run),
            ..Default::default()
        };
        let mut first = None;
        let mut cb = |_: &str| {
            first.get_or_insert_with(Instant::now);
            StreamControl::Continue
        };
        let started = Instant::now();
        let result = engine
            .generate(Some("smol"), &req, &CancelToken::new(), Some(&mut cb))
            .expect("generate");
        let ended = Instant::now();
        out.push(Run::new(
            started,
            first,
            ended,
            u64::from(result.usage.completion_tokens),
        ));
    }
    let texts = sentences();
    for _ in 0..runs {
        let started = Instant::now();
        engine.embed(Some("minilm"), &texts).expect("embed");
        out.embeds_per_s
            .push(texts.len() as f64 / started.elapsed().as_secs_f64());
    }
}

/// Runs the llama-cpp-python script once (`runs` generations) and reads its JSON line.
fn python_block(python: &str, threads: u32, runs: u32, tokens: u32, out: &mut Figures) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crates/inference/bench_llama_cpp_python.py"
    );
    let output = Command::new(python)
        .arg(script)
        .env("CAR_BENCH_THREADS", threads.to_string())
        .env("CAR_BENCH_RUNS", runs.to_string())
        .env("CAR_BENCH_TOKENS", tokens.to_string())
        .output()
        .expect("run the llama-cpp-python benchmark");
    assert!(
        output.status.success(),
        "llama-cpp-python benchmark failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .expect("a JSON result line");
    let v: Value = serde_json::from_str(line).expect("JSON result line");
    // The script reports medians of its block; weigh them as one sample per run.
    for _ in 0..runs {
        out.ttft_ms
            .push(v["time_to_first_token_ms"].as_f64().unwrap_or(0.0));
        out.decode_tps
            .push(v["decode_tokens_per_s"].as_f64().unwrap_or(0.0));
    }
}

fn report(name: &str, f: &Figures) -> (f64, f64, f64) {
    let (tps, ttft, eps) = (
        median(f.decode_tps.clone()),
        median(f.ttft_ms.clone()),
        median(f.embeds_per_s.clone()),
    );
    let embeddings = if f.embeds_per_s.is_empty() {
        String::new()
    } else {
        format!(", embeddings {eps:.1}/s")
    };
    println!("{name}: decode {tps:.1} tok/s, ttft {ttft:.1} ms{embeddings}");
    (tps, ttft, eps)
}

/// Widths of the concurrency blocks.
const WIDTHS: [u32; 3] = [1, 2, 4];

fn main() {
    let threads = threads();
    let quick = std::env::var("CAR_BENCH_QUICK").is_ok_and(|v| v == "1");
    let (runs, rounds, tokens) = if quick {
        (1, 1, 32)
    } else {
        (
            env_num("CAR_BENCH_RUNS", 3).max(1),
            env_num("CAR_BENCH_ROUNDS", 2).max(1),
            env_num("CAR_BENCH_TOKENS", 128),
        )
    };
    let python = std::env::var("CAR_BENCH_PYTHON").ok();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");

    let daemon = rt.block_on(start_daemon(threads));
    let (_home, engine) = open_engine(threads);
    let (mut over_socket, mut in_process, mut llama_cpp_python) =
        (Figures::default(), Figures::default(), Figures::default());
    let mut aggregate: Vec<Vec<f64>> = vec![Vec::new(); WIDTHS.len()];
    for round in 0..rounds {
        let seed0 = 1234 + round * runs;
        rt.block_on(daemon_block(&daemon, runs, tokens, seed0, &mut over_socket));
        engine_block(&engine, runs, tokens, seed0, &mut in_process);
        if let Some(python) = &python {
            python_block(python, threads, runs, tokens, &mut llama_cpp_python);
        }
        for run in 0..runs {
            for (w, n) in WIDTHS.iter().enumerate() {
                let tps = rt.block_on(concurrent_block(&daemon, *n, tokens, seed0 + 100 * run));
                aggregate[w].push(tps);
            }
        }
    }
    let aggregate: Vec<f64> = aggregate.into_iter().map(median).collect();

    println!("threads: {threads}, {rounds} rounds × {runs} runs, {tokens} tokens");
    let (d_tps, d_ttft, d_eps) = report("daemon over the socket", &over_socket);
    let (e_tps, e_ttft, e_eps) = report("engine in-process", &in_process);
    let mut summary = json!({
        "threads": threads,
        "daemon": {"decode_tokens_per_s": d_tps, "time_to_first_token_ms": d_ttft, "embeddings_per_s": d_eps},
        "engine": {"decode_tokens_per_s": e_tps, "time_to_first_token_ms": e_ttft, "embeddings_per_s": e_eps},
        "daemon_over_engine": {"decode": d_tps / e_tps, "ttft": d_ttft / e_ttft, "embeddings": d_eps / e_eps},
    });
    println!(
        "daemon / engine: decode {:.2}×, ttft {:.2}×, embeddings {:.2}×",
        d_tps / e_tps,
        d_ttft / e_ttft,
        d_eps / e_eps
    );
    for (n, tps) in WIDTHS.iter().zip(&aggregate) {
        println!(
            "{n} concurrent stream(s) through the daemon: {tps:.1} tok/s aggregate ({:.2}× one)",
            tps / aggregate[0]
        );
    }
    summary["aggregate_tokens_per_s"] =
        json!({"1": aggregate[0], "2": aggregate[1], "4": aggregate[2]});
    let metric = |value: f64, unit: &str| json!({"value": value, "unit": unit});
    let mut metrics = json!({
        "decode_tok_s_daemon_1": metric(d_tps, "tok/s"),
        "decode_tok_s_engine_1": metric(e_tps, "tok/s"),
        "daemon_over_engine_decode": metric(d_tps / e_tps, "ratio"),
        "ttft_ms_daemon": metric(d_ttft, "ms"),
        "ttft_ms_engine": metric(e_ttft, "ms"),
        "embeddings_per_s_daemon": metric(d_eps, "calls/s"),
        "embeddings_per_s_engine": metric(e_eps, "calls/s"),
        "aggregate_tok_s_1": metric(aggregate[0], "tok/s"),
        "aggregate_tok_s_2": metric(aggregate[1], "tok/s"),
        "aggregate_tok_s_4": metric(aggregate[2], "tok/s"),
        "aggregate_4_over_1": metric(aggregate[2] / aggregate[0], "ratio"),
    });
    if python.is_some() {
        let (p_tps, p_ttft, _) = report("llama-cpp-python", &llama_cpp_python);
        metrics["decode_tok_s_llama_cpp_python"] = metric(p_tps, "tok/s");
        metrics["ttft_ms_llama_cpp_python"] = metric(p_ttft, "ms");
        metrics["daemon_over_llama_cpp_python_decode"] = metric(d_tps / p_tps, "ratio");
        println!(
            "daemon / llama-cpp-python: decode {:.2}×, ttft {:.2}×",
            d_tps / p_tps,
            d_ttft / p_ttft
        );
        summary["llama_cpp_python"] =
            json!({"decode_tokens_per_s": p_tps, "time_to_first_token_ms": p_ttft});
        summary["daemon_over_llama_cpp_python"] =
            json!({"decode": d_tps / p_tps, "ttft": d_ttft / p_ttft});
    } else {
        println!("llama-cpp-python: not measured (set CAR_BENCH_PYTHON)");
    }
    println!("{summary}");
    if let Some(path) = std::env::var_os("CAR_BENCH_OUT") {
        let report = json!({"component": "inference", "metrics": metrics});
        std::fs::write(&path, format!("{report}\n")).expect("write CAR_BENCH_OUT");
    }
}

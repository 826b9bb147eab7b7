//! Call round-trip latency (p50/p99) and pipelined throughput of `car-daemon-client`
//! against a real `car-server`, over TCP and over the Unix socket, beside a raw
//! tokio-tungstenite echo client/server measured in the same run as the floor; and the
//! round trip of a call that makes the daemon call the client back once (`tools.execute`
//! through the client's registered tool handler), against a plain call measured
//! alternately with it.
//!
//! - `cargo bench -p car-daemon-client --bench roundtrip`: the full measurement;
//!   `CAR_BENCH_QUICK=1` shrinks it (same metrics, well under 20 s);
//! - without `--bench` (as `cargo test --all-targets` runs it): a short smoke pass;
//! - `CAR_BENCH_OUT=<path>`: also writes this run's figures there as one JSON object,
//!   `{"component": "roundtrip", "metrics": {name: {"value", "unit"}}}` (the convention
//!   `scripts/bench` aggregates).
//!
//! The ratios compare figures taken minutes apart at most, on the same machine: on a
//! shared machine only they, not the absolute times, mean something. Each transport's
//! floor is measured right before the client on it. A diagnostic row sends the same
//! frame from a bare tokio-tungstenite client to the daemon, splitting the client's
//! share of the cost from the daemon's.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use car_daemon_client::{Client, ClientConfig, EnvSnapshot};
use car_test_harness::Daemon;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::Message;

/// Calls discarded before each sequential measurement (connection and allocator warm-up).
const WARMUP: usize = 200;

struct Sizes {
    sequential: usize,
    pipelined: usize,
    window: usize,
    /// Pairs of (plain call, call with one callback), measured alternately.
    callbacks: usize,
}

impl Sizes {
    fn from_env() -> Self {
        let full = std::env::args().any(|a| a == "--bench");
        let quick = std::env::var("CAR_BENCH_QUICK").is_ok_and(|v| v == "1");
        match (full, quick) {
            (true, false) => Sizes {
                sequential: 20_000,
                pipelined: 100_000,
                window: 64,
                callbacks: 5_000,
            },
            (true, true) => Sizes {
                sequential: 3_000,
                pipelined: 20_000,
                window: 64,
                callbacks: 1_000,
            },
            (false, _) => Sizes {
                sequential: 200,
                pipelined: 1_000,
                window: 16,
                callbacks: 100,
            },
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Figures {
    p50: Duration,
    p99: Duration,
    per_sec: f64,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn summarize(mut samples: Vec<Duration>, per_sec: f64) -> Figures {
    samples.sort();
    Figures {
        p50: percentile(&samples, 0.50),
        p99: percentile(&samples, 0.99),
        per_sec,
    }
}

fn echo_params() -> Value {
    json!({"k": "v"})
}

async fn measure_client(client: &Client, sizes: &Sizes) -> Figures {
    let params = echo_params();
    for _ in 0..WARMUP {
        client.call("debug.echo", params.clone()).await.unwrap();
    }
    let mut samples = Vec::with_capacity(sizes.sequential);
    for _ in 0..sizes.sequential {
        let t = Instant::now();
        client.call("debug.echo", params.clone()).await.unwrap();
        samples.push(t.elapsed());
    }
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..sizes.window)
        .map(|_| {
            let (client, done, params) = (client.clone(), done.clone(), params.clone());
            let total = sizes.pipelined;
            tokio::spawn(async move {
                while done.fetch_add(1, Ordering::Relaxed) < total {
                    client.call("debug.echo", params.clone()).await.unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    summarize(
        samples,
        sizes.pipelined as f64 / started.elapsed().as_secs_f64(),
    )
}

/// Plain calls and calls that make the daemon call this client's tool handler once,
/// alternately (so both see the same machine load); returns (plain, with callback).
async fn measure_callbacks(client: &Client, sizes: &Sizes) -> (Figures, Figures) {
    client.register_tool_handler(|call| Ok(json!({"ok": call.tool})));
    let plain = echo_params();
    let with_callback = json!({
        "method": "tools.execute",
        "params": {"tool": "bench.noop", "parameters": {"k": "v"}, "action_id": "a0"},
        "timeout_ms": 30_000,
    });
    let answer = client
        .call("debug.call_client", with_callback.clone())
        .await
        .unwrap();
    assert_eq!(answer, json!({"result": {"ok": "bench.noop"}}), "{answer}");
    let (mut plain_samples, mut callback_samples) = (Vec::new(), Vec::new());
    for i in 0..sizes.callbacks + WARMUP {
        let t = Instant::now();
        client.call("debug.echo", plain.clone()).await.unwrap();
        let plain_rtt = t.elapsed();
        let t = Instant::now();
        client
            .call("debug.call_client", with_callback.clone())
            .await
            .unwrap();
        let callback_rtt = t.elapsed();
        if i >= WARMUP {
            plain_samples.push(plain_rtt);
            callback_samples.push(callback_rtt);
        }
    }
    (
        summarize(plain_samples, 0.0),
        summarize(callback_samples, 0.0),
    )
}

/// Sequential and pipelined round trips of `frame` over a bare tokio-tungstenite
/// connection; `auth` frames are sent (and answered) first.
async fn measure_raw<S>(stream: S, sizes: &Sizes, auth: Option<String>) -> Figures
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (ws, _) = tokio_tungstenite::client_async("ws://localhost/", stream)
        .await
        .unwrap();
    let (mut sink, mut source) = ws.split();
    if let Some(auth) = auth {
        sink.send(Message::text(auth)).await.unwrap();
        let answer = source.next().await.unwrap().unwrap();
        assert!(answer.to_text().unwrap().contains("\"result\""), "{answer}");
    }
    let frame = json!({"jsonrpc": "2.0", "id": 1, "method": "debug.echo", "params": echo_params()})
        .to_string();
    let mut samples = Vec::with_capacity(sizes.sequential);
    for i in 0..sizes.sequential + WARMUP {
        let t = Instant::now();
        sink.send(Message::text(frame.clone())).await.unwrap();
        let answer = source.next().await.unwrap().unwrap();
        if i >= WARMUP {
            samples.push(t.elapsed());
        }
        if i == 0 {
            assert!(answer.to_text().unwrap().contains("\"k\""), "{answer}");
        }
    }
    // Pipelined: keep at most `window` frames in flight, like the client's workers.
    let started = Instant::now();
    let total = sizes.pipelined;
    let credits = Arc::new(tokio::sync::Semaphore::new(sizes.window));
    let writer = {
        let credits = credits.clone();
        tokio::spawn(async move {
            for _ in 0..total {
                credits.acquire().await.unwrap().forget();
                sink.send(Message::text(frame.clone())).await.unwrap();
            }
            sink
        })
    };
    for _ in 0..total {
        source.next().await.unwrap().unwrap();
        credits.add_permits(1);
    }
    drop(writer.await.unwrap());
    summarize(samples, total as f64 / started.elapsed().as_secs_f64())
}

async fn echo_server<S>(stream: S)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Ok(ws) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    let (mut sink, mut source) = ws.split();
    while let Some(Ok(msg)) = source.next().await {
        if msg.is_text() && sink.send(msg).await.is_err() {
            return;
        }
    }
}

/// Starts the raw echo servers on their own runtime thread, like a separate process.
fn start_echo(dir: &Path) -> (u16, PathBuf) {
    let socket = dir.join("echo.sock");
    let (tx, rx) = std::sync::mpsc::channel();
    let path = socket.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let unix = tokio::net::UnixListener::bind(&path).unwrap();
            tx.send(tcp.local_addr().unwrap().port()).unwrap();
            tokio::spawn(async move {
                while let Ok((s, _)) = unix.accept().await {
                    tokio::spawn(echo_server(s));
                }
            });
            while let Ok((s, _)) = tcp.accept().await {
                s.set_nodelay(true).unwrap();
                tokio::spawn(echo_server(s));
            }
        });
    });
    (rx.recv().unwrap(), socket)
}

async fn tcp(port: u16) -> tokio::net::TcpStream {
    let s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn row(name: &str, f: Figures, floor: Figures) {
    println!(
        "{name:<30} p50 {:>8.1} µs ({:>4.2}x)  p99 {:>8.1} µs ({:>4.2}x)  pipelined {:>9.0} calls/s ({:>4.2}x of floor)",
        us(f.p50),
        f.p50.as_secs_f64() / floor.p50.as_secs_f64(),
        us(f.p99),
        f.p99.as_secs_f64() / floor.p99.as_secs_f64(),
        f.per_sec,
        f.per_sec / floor.per_sec,
    );
}

/// The metrics of one run, in the `scripts/bench` convention.
#[derive(Default)]
struct Report(Map<String, Value>);

impl Report {
    fn put(&mut self, name: &str, value: f64, unit: &str) {
        self.0
            .insert(name.into(), json!({"value": value, "unit": unit}));
    }

    fn transport(&mut self, prefix: &str, client: Figures, floor: Figures) {
        self.put(&format!("{prefix}_p50_us"), us(client.p50), "µs");
        self.put(&format!("{prefix}_p99_us"), us(client.p99), "µs");
        self.put(&format!("{prefix}_echo_p50_us"), us(floor.p50), "µs");
        self.put(
            &format!("{prefix}_p50_over_echo"),
            client.p50.as_secs_f64() / floor.p50.as_secs_f64(),
            "ratio",
        );
        self.put(
            &format!("{prefix}_pipelined_calls_s"),
            client.per_sec,
            "calls/s",
        );
        self.put(
            &format!("{prefix}_echo_pipelined_calls_s"),
            floor.per_sec,
            "calls/s",
        );
        self.put(
            &format!("{prefix}_pipelined_over_echo"),
            client.per_sec / floor.per_sec,
            "ratio",
        );
    }

    fn write(self, path: &Path) {
        let report = json!({"component": "roundtrip", "metrics": Value::Object(self.0)});
        std::fs::write(path, format!("{report:#}\n"))
            .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
}

fn main() {
    let sizes = Sizes::from_env();
    let scratch = tempfile::tempdir().unwrap();
    let (echo_port, echo_socket) = start_echo(scratch.path());
    let daemon = Daemon::builder().args(["--debug-methods"]).start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut report = Report::default();
    rt.block_on(async {
        let env = EnvSnapshot::with_car_home(&daemon.home);
        let unix_client = Client::new(ClientConfig::with_env(env.clone()));
        let tcp_client = Client::new(ClientConfig::with_env(env).url(&daemon.ws_url));

        let tcp_floor = measure_raw(tcp(echo_port).await, &sizes, None).await;
        let tcp_figures = measure_client(&tcp_client, &sizes).await;
        let auth = json!({"jsonrpc": "2.0", "id": 0, "method": "session.auth",
                          "params": {"token": daemon.token()}})
        .to_string();
        let tcp_raw = measure_raw(tcp(daemon.port).await, &sizes, Some(auth)).await;
        let unix_floor = measure_raw(
            tokio::net::UnixStream::connect(&echo_socket).await.unwrap(),
            &sizes,
            None,
        )
        .await;
        let unix_figures = measure_client(&unix_client, &sizes).await;
        let (plain, callback) = measure_callbacks(&tcp_client, &sizes).await;

        println!(
            "car-daemon-client round trip ({} sequential calls, {} pipelined with {} in flight)",
            sizes.sequential, sizes.pipelined, sizes.window
        );
        row("raw echo floor, TCP", tcp_floor, tcp_floor);
        row("client -> car-server, TCP", tcp_figures, tcp_floor);
        row("raw ws -> car-server, TCP", tcp_raw, tcp_floor);
        row("raw echo floor, Unix", unix_floor, unix_floor);
        row("client -> car-server, Unix", unix_figures, unix_floor);
        println!(
            "call with one tools.execute callback (TCP, {} alternated with a plain call): p50 {:.1} µs, plain call p50 {:.1} µs ({:.2}x)",
            sizes.callbacks,
            us(callback.p50),
            us(plain.p50),
            callback.p50.as_secs_f64() / plain.p50.as_secs_f64()
        );

        report.transport("tcp", tcp_figures, tcp_floor);
        report.transport("uds", unix_figures, unix_floor);
        report.put("tcp_raw_daemon_p50_us", us(tcp_raw.p50), "µs");
        report.put("tcp_raw_daemon_pipelined_calls_s", tcp_raw.per_sec, "calls/s");
        report.put("callback_rtt_p50_us", us(callback.p50), "µs");
        report.put("callback_plain_call_p50_us", us(plain.p50), "µs");
        report.put(
            "callback_over_call",
            callback.p50.as_secs_f64() / plain.p50.as_secs_f64(),
            "ratio",
        );
    });
    if let Some(path) = std::env::var_os("CAR_BENCH_OUT") {
        report.write(Path::new(&path));
    }
}

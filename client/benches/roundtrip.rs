//! Call round-trip latency (p50/p99) and pipelined throughput of `car-daemon-client`
//! against a real `car-server`, over TCP and over the Unix socket, beside a raw
//! tokio-tungstenite echo client/server measured in the same run as the floor.
//!
//! `cargo bench -p car-daemon-client --bench roundtrip` runs the full measurement; without
//! `--bench` (as `cargo test --all-targets` runs it) it does a short smoke pass.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use car_daemon_client::{Client, ClientConfig, EnvSnapshot};
use car_test_harness::Daemon;
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::Message;

struct Sizes {
    sequential: usize,
    pipelined: usize,
    window: usize,
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

async fn measure_client(client: &Client, sizes: &Sizes) -> Figures {
    let params = json!({"k": "v"});
    for _ in 0..200 {
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

/// The floor: the same JSON text frame echoed by a bare tokio-tungstenite server.
async fn measure_raw<S>(stream: S, sizes: &Sizes) -> Figures
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (ws, _) = tokio_tungstenite::client_async("ws://localhost/", stream)
        .await
        .unwrap();
    let (mut sink, mut source) = ws.split();
    let frame = json!({"jsonrpc": "2.0", "id": 1, "method": "debug.echo", "params": {"k": "v"}})
        .to_string();
    let mut samples = Vec::with_capacity(sizes.sequential);
    for i in 0..sizes.sequential + 200 {
        let t = Instant::now();
        sink.send(Message::text(frame.clone())).await.unwrap();
        source.next().await.unwrap().unwrap();
        if i >= 200 {
            samples.push(t.elapsed());
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

fn ms(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn row(name: &str, f: Figures, floor: Figures) {
    println!(
        "{name:<28} p50 {:>10} ({:>4.2}x)  p99 {:>10} ({:>4.2}x)  pipelined {:>9.0} calls/s ({:>4.2}x of floor)",
        ms(f.p50),
        f.p50.as_secs_f64() / floor.p50.as_secs_f64(),
        ms(f.p99),
        f.p99.as_secs_f64() / floor.p99.as_secs_f64(),
        f.per_sec,
        f.per_sec / floor.per_sec,
    );
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let sizes = if full {
        Sizes {
            sequential: 20_000,
            pipelined: 100_000,
            window: 64,
        }
    } else {
        Sizes {
            sequential: 200,
            pipelined: 1_000,
            window: 16,
        }
    };
    let scratch = tempfile::tempdir().unwrap();
    let (echo_port, echo_socket) = start_echo(scratch.path());
    let daemon = Daemon::builder().args(["--debug-methods"]).start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp_floor = measure_raw(
            {
                let s = tokio::net::TcpStream::connect(("127.0.0.1", echo_port))
                    .await
                    .unwrap();
                s.set_nodelay(true).unwrap();
                s
            },
            &sizes,
        )
        .await;
        let unix_floor = measure_raw(
            tokio::net::UnixStream::connect(&echo_socket).await.unwrap(),
            &sizes,
        )
        .await;

        let env = EnvSnapshot::with_car_home(&daemon.home);
        let unix_client = Client::new(ClientConfig::with_env(env.clone()));
        let tcp_client = Client::new(ClientConfig::with_env(env).url(&daemon.ws_url));
        let tcp = measure_client(&tcp_client, &sizes).await;
        let unix = measure_client(&unix_client, &sizes).await;
        println!(
            "car-daemon-client round trip ({} sequential calls, {} pipelined with {} in flight)",
            sizes.sequential, sizes.pipelined, sizes.window
        );
        row("raw echo floor, TCP", tcp_floor, tcp_floor);
        row("client -> car-server, TCP", tcp, tcp_floor);
        row("raw echo floor, Unix", unix_floor, unix_floor);
        row("client -> car-server, Unix", unix, unix_floor);
    });
}

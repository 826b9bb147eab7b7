//! Test support: a scripted fake daemon for what a real daemon must never do (malformed
//! handshakes, dropped sockets, silent calls), and helpers to build client configs from
//! explicit environment snapshots so the developer's own variables never leak in.
//!
//! Tests synchronise on events (a frame arriving at the fake, a channel message), never on
//! fixed sleeps. The only clock they use is [`SAFETY`], a hang guard far beyond anything a
//! slow machine needs: reaching it means the awaited thing did not happen, not that it was
//! slow.
#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use car_daemon_client::{ClientConfig, EnvSnapshot, TimeoutPolicy};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

type Script = Arc<dyn Fn(FakeConn) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Which listener a fake connection arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Tcp,
    Unix,
}

/// How long a test waits for something that must happen before declaring it never will.
/// A hang guard, not a speed bound: nothing asserts how much of it was used.
pub const SAFETY: Duration = Duration::from_secs(60);

/// Awaits `fut`, panicking with `what` if it has not finished within [`SAFETY`].
pub async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(SAFETY, fut).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: not done after {SAFETY:?} (a hang guard, not a speed bound)"),
    }
}

/// One frame the fake received: connection index, listener, the JSON.
pub type Frame = (usize, Via, Value);

/// Every frame the fake received, per connection, in order. A watch channel, so a test
/// can wait for a frame instead of polling for it.
pub type Log = Arc<watch::Sender<Vec<Frame>>>;

/// One accepted connection, driven by a test's script.
pub struct FakeConn {
    ws: WebSocketStream<Box<dyn Io>>,
    pub index: usize,
    pub via: Via,
    log: Log,
}

impl FakeConn {
    /// The next JSON text frame, or `None` when the client went away.
    pub async fn recv(&mut self) -> Option<Value> {
        loop {
            match self.ws.next().await? {
                Ok(Message::Text(t)) => {
                    let v: Value = serde_json::from_str(t.as_str()).expect("client sent json");
                    let frame = (self.index, self.via, v.clone());
                    self.log.send_modify(|frames| frames.push(frame));
                    return Some(v);
                }
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    pub async fn send(&mut self, v: Value) {
        let _ = self.ws.send(Message::text(v.to_string())).await;
    }

    pub async fn reply(&mut self, req: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": req["id"], "result": result}))
            .await;
    }

    pub async fn reply_error(&mut self, req: &Value, code: i64, message: &str) {
        self.send(
            json!({"jsonrpc": "2.0", "id": req["id"], "error": {"code": code, "message": message}}),
        )
        .await;
    }

    /// Answers an optional `session.auth` and then `server.handshake` like a good daemon.
    pub async fn accept_handshake(&mut self) {
        let mut req = self.recv().await.expect("first frame");
        if req["method"] == "session.auth" {
            self.reply(&req, json!({"ok": true, "auth_enabled": true}))
                .await;
            req = self.recv().await.expect("handshake frame");
        }
        assert_eq!(req["method"], "server.handshake", "{req}");
        self.reply(&req, good_handshake_reply()).await;
    }

    /// Serves a connected client until it leaves: `debug.echo` echoes, `debug.sleep`
    /// answers after `ms`, anything else gets `-32601`.
    pub async fn serve(mut self) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
        loop {
            tokio::select! {
                req = self.recv() => {
                    let Some(req) = req else { return };
                    if req.get("method").is_none() {
                        continue;
                    }
                    match req["method"].as_str().unwrap_or_default() {
                        "debug.echo" => self.reply(&req, req["params"].clone()).await,
                        "debug.sleep" => {
                            let tx = tx.clone();
                            tokio::spawn(async move {
                                let ms = req["params"]["ms"].as_u64().unwrap_or(0);
                                tokio::time::sleep(Duration::from_millis(ms)).await;
                                let _ = tx.send(json!({"jsonrpc": "2.0", "id": req["id"], "result": {"slept_ms": ms}}));
                            });
                        }
                        m => self.reply_error(&req, -32601, &format!("unknown method: {m}")).await,
                    }
                }
                Some(frame) = rx.recv() => self.send(frame).await,
            }
        }
    }

    /// Drops the socket without a close frame.
    pub fn drop_socket(self) {}
}

pub fn good_handshake_reply() -> Value {
    json!({
        "protocol_version": 3,
        "server_version": "0.1.0",
        "client_protocol_version": 3,
        "client_version": "test",
        "negotiated_capabilities": ["infer.cancel.v1", "infer.model-identity.v1", "models.catalog-identity.v1"],
    })
}

/// A scripted daemon on an ephemeral TCP port and, optionally, a Unix socket.
pub struct FakeDaemon {
    pub url: String,
    pub port: u16,
    pub socket: Option<PathBuf>,
    pub log: Log,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for FakeDaemon {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl FakeDaemon {
    /// Runs `script` for every accepted TCP connection.
    pub async fn start<F, Fut>(script: F) -> Self
    where
        F: Fn(FakeConn) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self::start_with_socket(None, script).await
    }

    /// Like [`FakeDaemon::start`], also listening on the Unix socket `socket`.
    pub async fn start_with_socket<F, Fut>(socket: Option<&Path>, script: F) -> Self
    where
        F: Fn(FakeConn) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let script: Script = Arc::new(move |c| Box::pin(script(c)));
        let log: Log = Arc::new(watch::Sender::new(Vec::new()));
        let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = tcp.local_addr().unwrap().port();
        let mut tasks = Vec::new();
        {
            let (script, log, counter) = (script.clone(), log.clone(), counter.clone());
            tasks.push(tokio::spawn(async move {
                while let Ok((s, _)) = tcp.accept().await {
                    s.set_nodelay(true).unwrap();
                    spawn_conn(Box::new(s), Via::Tcp, &script, &log, &counter);
                }
            }));
        }
        if let Some(path) = socket {
            let unix = tokio::net::UnixListener::bind(path).unwrap();
            let (script, log, counter) = (script.clone(), log.clone(), counter.clone());
            tasks.push(tokio::spawn(async move {
                while let Ok((s, _)) = unix.accept().await {
                    spawn_conn(Box::new(s), Via::Unix, &script, &log, &counter);
                }
            }));
        }
        FakeDaemon {
            url: format!("ws://127.0.0.1:{port}"),
            port,
            socket: socket.map(Path::to_path_buf),
            log,
            tasks,
        }
    }

    /// The frames received so far.
    pub fn frames(&self) -> Vec<Frame> {
        self.log.borrow().clone()
    }

    /// Waits until `done` holds for the frames received so far, re-checking on every new
    /// frame; panics naming `what` after [`SAFETY`].
    pub async fn wait_for(&self, what: &str, mut done: impl FnMut(&[Frame]) -> bool) {
        let mut rx = self.log.subscribe();
        let waited = tokio::time::timeout(SAFETY, async {
            // The sender lives as long as `self`, so this cannot fail while we wait.
            let _ = rx.wait_for(|frames| done(frames)).await;
        })
        .await;
        if waited.is_err() {
            panic!(
                "{what}: not seen after {SAFETY:?} (a hang guard, not a speed bound); frames: {:?}",
                self.frames()
            );
        }
    }

    /// The methods received so far, in order.
    pub fn methods(&self) -> Vec<String> {
        self.frames()
            .into_iter()
            .filter_map(|(_, _, v)| v["method"].as_str().map(str::to_string))
            .collect()
    }
}

fn spawn_conn(
    io: Box<dyn Io>,
    via: Via,
    script: &Script,
    log: &Log,
    counter: &Arc<std::sync::atomic::AtomicUsize>,
) {
    let (script, log) = (script.clone(), log.clone());
    let index = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    tokio::spawn(async move {
        let Ok(ws) = tokio_tungstenite::accept_async(io).await else {
            return;
        };
        script(FakeConn {
            ws,
            index,
            via,
            log,
        })
        .await;
    });
}

/// A config whose environment is empty except `CAR_HOME` (a fresh temp dir per test).
pub fn isolated_config(car_home: &Path) -> ClientConfig {
    ClientConfig::with_env(EnvSnapshot::with_car_home(car_home))
}

/// A config pointing at `url` with no token anywhere.
pub fn config_for(url: &str, car_home: &Path) -> ClientConfig {
    isolated_config(car_home).url(url)
}

/// Short connect-phase bounds, only for tests whose expected outcome *is* a connect-phase
/// timeout (a fake that never answers the handshake). A test that expects the handshake to
/// succeed keeps the default bounds, so a busy machine cannot turn its success into a
/// timeout.
pub fn quick_timeouts() -> TimeoutPolicy {
    TimeoutPolicy {
        handshake: Duration::from_millis(500),
        connect: Duration::from_secs(2),
        ..TimeoutPolicy::default()
    }
}

/// Writes the daemon token file under `car_home`, as the daemon would.
pub fn write_token_file(car_home: &Path, text: &str) {
    let dir = car_home.join("ai.parslee.car");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("auth-token"), text).unwrap();
}

/// Registers agent `id` (`agents.upsert` over `host`'s host connection, command `/bin/sh`,
/// never started) and returns a client bound to it with its own token, on `car_home`'s
/// daemon.
pub async fn agent_client(
    car_home: &Path,
    host: &car_daemon_client::Client,
    id: &str,
) -> car_daemon_client::Client {
    let managed = host
        .call_host_management(
            "agents.upsert",
            json!({"id": id, "name": id, "command": "/bin/sh"}),
        )
        .await
        .unwrap();
    let token = std::fs::read_to_string(managed["token_path"].as_str().unwrap()).unwrap();
    car_daemon_client::Client::new(
        ClientConfig::with_env(EnvSnapshot::with_car_home(car_home)).agent(id, token.trim()),
    )
}

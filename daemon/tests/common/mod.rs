//! A minimal raw WebSocket JSON-RPC client for driving a real `car-server` in tests.
//! Deliberately independent of `car-daemon-client`: these tests pin the wire itself.

#![allow(dead_code)]

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub use car_test_harness::Daemon;

pub mod runs;
pub mod tools;

/// How long any single wait in a test may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(120);

pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub struct Ws {
    pub ws: WebSocketStream<Box<dyn Io>>,
    next_id: u64,
}

impl Ws {
    pub async fn tcp(url: &str) -> Ws {
        let (ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("connect");
        let ws = match ws.into_inner() {
            MaybeTlsStream::Plain(tcp) => tcp,
            _ => unreachable!("plain ws"),
        };
        Self::wrap(Box::new(ws)).await
    }

    async fn wrap(stream: Box<dyn Io>) -> Ws {
        // The stream already completed the upgrade; re-wrap it without a handshake.
        let ws = WebSocketStream::from_raw_socket(
            stream,
            tokio_tungstenite::tungstenite::protocol::Role::Client,
            None,
        )
        .await;
        Ws { ws, next_id: 1 }
    }

    pub async fn unix(path: &std::path::Path) -> Ws {
        let stream = UnixStream::connect(path)
            .await
            .expect("connect unix socket");
        let request = "ws://localhost/".into_client_request().unwrap();
        let (ws, _) = tokio_tungstenite::client_async(request, Box::new(stream) as Box<dyn Io>)
            .await
            .expect("upgrade over unix socket");
        Ws { ws, next_id: 1 }
    }

    /// Connects over TCP through a [`Mutable`] stream; setting the returned flag silences
    /// every later write (the peer keeps reading but never answers, not even Pings).
    pub async fn tcp_mutable(url: &str) -> (Ws, Arc<AtomicBool>) {
        let addr = url
            .strip_prefix("ws://")
            .and_then(|rest| rest.split('/').next())
            .expect("a ws:// url");
        let inner = TcpStream::connect(addr).await.expect("connect");
        let mute = Arc::new(AtomicBool::new(false));
        let stream = Mutable {
            inner,
            mute: mute.clone(),
        };
        let request = url.into_client_request().unwrap();
        let (ws, _) = tokio_tungstenite::client_async(request, Box::new(stream) as Box<dyn Io>)
            .await
            .expect("upgrade");
        (Ws { ws, next_id: 1 }, mute)
    }

    /// Connects over TCP and authenticates with the daemon token.
    pub async fn authed(d: &Daemon) -> Ws {
        let mut ws = Ws::tcp(&d.ws_url).await;
        let r = ws.call("session.auth", json!({"token": d.token()})).await;
        assert_eq!(r["result"]["ok"], true, "{r}");
        ws
    }

    /// Connects, authenticates with the host token and negotiates.
    pub async fn host(d: &Daemon) -> Ws {
        let mut ws = Ws::tcp(&d.ws_url).await;
        let r = ws
            .call("session.auth", json!({"host_token": d.host_token()}))
            .await;
        assert_eq!(r["result"]["role"], "host", "{r}");
        ws
    }

    pub async fn send_text(&mut self, text: impl Into<String>) {
        self.ws
            .send(Message::text(text.into()))
            .await
            .expect("send");
    }

    /// Sends a request with a fresh numeric id; returns the id.
    pub async fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send_text(
            json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string(),
        )
        .await;
        id
    }

    /// Sends a request and waits for the response with its id (the whole envelope).
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params).await;
        loop {
            let v = self.recv_json().await;
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    /// The next text frame as JSON; panics on anything else or after [`WAIT`].
    pub async fn recv_json(&mut self) -> Value {
        match self.recv().await {
            Some(Message::Text(t)) => serde_json::from_str(t.as_str()).expect("daemon sent JSON"),
            other => panic!("expected a text frame, got {other:?}"),
        }
    }

    /// The next non-ping/pong message, `None` at end of stream or on a read error.
    pub async fn recv(&mut self) -> Option<Message> {
        loop {
            let next = tokio::time::timeout(WAIT, self.ws.next())
                .await
                .expect("daemon answered in time");
            match next {
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(m)) => return Some(m),
                Some(Err(_)) | None => return None,
            }
        }
    }

    /// Reads until the connection ends; returns the Close frame's code if one came.
    pub async fn closed_with(&mut self) -> Option<u16> {
        loop {
            match self.recv().await {
                Some(Message::Close(frame)) => return frame.map(|f| u16::from(f.code)),
                Some(_) => continue,
                None => return None,
            }
        }
    }
}

/// An error response's code.
/// The token an `agents.upsert` reply's `token_path` holds.
pub fn agent_token(agent: &Value) -> String {
    let path = agent["token_path"]
        .as_str()
        .unwrap_or_else(|| panic!("{agent}"));
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

/// A connection authenticated as the registered agent `id` with its own token.
pub async fn as_agent(d: &Daemon, id: &str, token: &str) -> Ws {
    let mut ws = Ws::tcp(&d.ws_url).await;
    let r = ws
        .call("session.auth", json!({"token": token, "agent_id": id}))
        .await;
    assert_eq!(r["result"]["agent_id"], id, "{r}");
    ws
}

/// Registers agent `id` through `host` (a host session: its own `agents.upsert` is not held
/// by the approval gate) and returns a connection authenticated as it.
pub async fn registered_agent(d: &Daemon, host: &mut Ws, id: &str) -> Ws {
    let r = host
        .call(
            "agents.upsert",
            json!({"id": id, "name": id, "command": "/bin/true"}),
        )
        .await;
    as_agent(d, id, &agent_token(&r["result"])).await
}

/// The resident set of process `pid`, in KiB (`/proc/<pid>/status`).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Makes a FIFO at `path` (with `mkfifo(1)`: the tests need no libc binding).
pub fn mkfifo(path: &std::path::Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

pub fn code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected an error, got {response}"))
}

/// An error response's message.
pub fn message(response: &Value) -> String {
    response["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `server.handshake` params as the bundled client sends them.
pub fn handshake_params() -> Value {
    json!({
        "protocol_version": 3,
        "client_version": "test",
        "required_capabilities": ["infer.model-identity.v1", "models.catalog-identity.v1"],
        "optional_capabilities": [],
    })
}

pub type TcpWs = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A TCP stream whose writes are discarded (reported as written) once `mute` is set.
pub struct Mutable {
    inner: TcpStream,
    mute: Arc<AtomicBool>,
}

impl Mutable {
    fn muted(&self) -> bool {
        self.mute.load(Ordering::SeqCst)
    }
}

impl AsyncRead for Mutable {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Mutable {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if this.muted() {
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.muted() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

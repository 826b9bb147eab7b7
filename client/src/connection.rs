//! One WebSocket to the daemon (TCP or Unix socket) and the tasks that serve it.
//!
//! This module owns the socket, one reader task, one writer task fed by a bounded queue,
//! and one notification task; the id-routed table of pending calls and the [`Peer`] handle
//! are `peer`'s (shared with `handlers`). It knows nothing about
//! auth, handshakes or reconnects (that is `client`) and runs no user code itself (that is
//! `handlers`).
//!
//! Invariants:
//! - every pending call ends: with its answer, its own timeout, or the connection's end — the
//!   moment the reader sees EOF, a read error or a close frame, every pending call is failed at
//!   once and later calls are refused without being sent;
//! - an inference call's idle window is reset by `infer.progress {id}` and `inference.stream.event`
//!   notifications naming its id;
//! - dropping the [`Connection`] cancels and aborts every task it started;
//! - a reverse call's handler may be given the [`Peer`] it arrived on (to send notifications up
//!   that same connection and to learn when it ended); a reply's follow-up
//!   (`handlers::Answer::after`) runs only once the reply is queued, so nothing it sends can
//!   overtake the reply.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use car_proto::jsonrpc::{classify, request_frame, Incoming, Rejected};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;

use crate::discovery::Endpoint;
use crate::error::Error;
use crate::handlers::{self, HandlerRegistry};
use crate::peer::{Outcome, Peer, Pending, PendingCalls, PendingGuard};
use crate::timeouts::Wait;

/// Frames queued for the writer before callers wait for room.
const OUTBOUND_QUEUE: usize = 1024;
/// The socket read buffer. tungstenite zero-fills the free part of its read buffer
/// before every read attempt, including the one that finds the socket empty, so its
/// 128 KiB default cost two 128 KiB memsets per answered call (the largest user-space
/// entry in the client's profile). A bigger frame is still read whole, in more reads.
const READ_BUFFER_BYTES: usize = 8 * 1024;

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(READ_BUFFER_BYTES)
}
/// Notifications that reset an inference call's idle window.
const PROGRESS_METHODS: &[&str] = &["infer.progress", "inference.stream.event"];
/// Stream events routed to the call they name when it asked for them.
const STREAM_EVENT: &str = "inference.stream.event";

/// An open connection. Cheap to share behind an `Arc`.
pub(crate) struct Connection {
    outbound: mpsc::Sender<Message>,
    pending: Arc<PendingCalls>,
    next_id: AtomicU64,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("closed", &self.is_closed())
            .field("pending", &self.pending.lock().calls.len())
            .finish()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.pending.fail_all(Error::Closed);
        self.shutdown.cancel();
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Opens the socket and the WebSocket, then starts the connection's tasks.
pub(crate) async fn open(
    endpoint: &Endpoint,
    registry: Arc<HandlerRegistry>,
    connect_timeout: Duration,
) -> Result<Connection, Error> {
    let connecting = async {
        match endpoint {
            Endpoint::Tcp { url, addr } => {
                let stream = tokio::net::TcpStream::connect(addr.as_str())
                    .await
                    .map_err(|e| Error::Transport(format!("connect to {addr}: {e}")))?;
                // Calls are small frames; Nagle's algorithm would add up to 40 ms to each.
                let _ = stream.set_nodelay(true);
                let (ws, _) = tokio_tungstenite::client_async_with_config(
                    url.as_str(),
                    stream,
                    Some(ws_config()),
                )
                .await
                .map_err(|e| Error::Transport(format!("websocket upgrade at {url}: {e}")))?;
                Ok(Connection::start(ws, registry))
            }
            #[cfg(unix)]
            Endpoint::Unix { path } => {
                let stream = tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(|e| Error::Transport(format!("connect to {}: {e}", path.display())))?;
                // The daemon only accepts loopback Host headers (docs/protocol-choices.md, "Auth
                // and upgrade checks").
                let (ws, _) = tokio_tungstenite::client_async_with_config(
                    "ws://localhost/",
                    stream,
                    Some(ws_config()),
                )
                .await
                .map_err(|e| {
                    Error::Transport(format!("websocket upgrade at {}: {e}", path.display()))
                })?;
                Ok(Connection::start(ws, registry))
            }
            #[cfg(not(unix))]
            Endpoint::Unix { path } => Err(Error::Transport(format!(
                "unix sockets are not available on this platform: {}",
                path.display()
            ))),
        }
    };
    match tokio::time::timeout(connect_timeout, connecting).await {
        Ok(result) => result,
        Err(_) => Err(Error::Transport(format!(
            "connect timed out after {}ms",
            connect_timeout.as_millis()
        ))),
    }
}

impl Connection {
    fn start<S>(ws: WebSocketStream<S>, registry: Arc<HandlerRegistry>) -> Self
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (sink, stream) = ws.split();
        let (outbound, outbound_rx) = mpsc::channel(OUTBOUND_QUEUE);
        let (notify_tx, notify_rx) = mpsc::unbounded_channel();
        let pending = Arc::new(PendingCalls::default());
        let shutdown = CancellationToken::new();
        let writer = tokio::spawn(write_loop(
            sink,
            outbound_rx,
            pending.clone(),
            shutdown.clone(),
        ));
        let reader = tokio::spawn(read_loop(
            stream,
            ReaderCtx {
                pending: pending.clone(),
                registry: registry.clone(),
                outbound: outbound.clone(),
                notify_tx,
                shutdown: shutdown.clone(),
            },
        ));
        let notifier = tokio::spawn(notify_loop(notify_rx, registry, shutdown.clone()));
        Self {
            outbound,
            pending,
            next_id: AtomicU64::new(0),
            shutdown,
            tasks: vec![writer, reader, notifier],
        }
    }

    /// True once the connection ended (peer gone, error, or [`Connection::close`]).
    pub(crate) fn is_closed(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// Cancelled when the connection ends.
    pub(crate) fn ended(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Ends the connection: pending calls fail with `reason`, tasks stop.
    pub(crate) fn close(&self, reason: Error) {
        self.pending.fail_all(reason);
        self.shutdown.cancel();
    }

    /// Queues one notification for the socket (see [`Peer::notify`]).
    pub(crate) async fn notify(&self, method: &str, params: &Value) -> Result<(), Error> {
        Peer {
            outbound: self.outbound.clone(),
            pending: self.pending.clone(),
            shutdown: self.shutdown.clone(),
        }
        .notify(method, params)
        .await
    }

    /// Sends one request and waits for its answer under `wait`.
    pub(crate) async fn call(&self, method: &str, params: Value, wait: Wait) -> Outcome {
        self.call_with_events(method, params, wait, None).await
    }

    /// [`Connection::call`] that also receives the call's `inference.stream.event`
    /// notifications on `events`; every event the daemon sent before its answer is queued
    /// there before the answer completes the call.
    pub(crate) async fn call_with_events(
        &self,
        method: &str,
        params: Value,
        wait: Wait,
        events: Option<mpsc::UnboundedSender<Value>>,
    ) -> Outcome {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, mut rx) = oneshot::channel();
        let activity = matches!(wait, Wait::Idle(_)).then(|| Arc::new(Notify::new()));
        self.pending.insert(
            id,
            Pending {
                tx,
                activity: activity.clone(),
                events,
            },
        )?;
        let _guard = PendingGuard {
            pending: &self.pending,
            id,
        };
        let frame = Message::text(request_frame(&Value::from(id), method, &params));
        tokio::select! {
            sent = self.outbound.send(frame) => {
                if sent.is_err() {
                    return Err(self.pending.closed_reason());
                }
            }
            // The connection may die while the queue is full.
            outcome = &mut rx => return flatten(outcome, &self.pending),
        }
        let timed_out = |after| Error::Timeout {
            method: method.to_string(),
            after,
        };
        match wait {
            Wait::Unbounded => flatten(rx.await, &self.pending),
            Wait::Absolute(after) => match tokio::time::timeout(after, &mut rx).await {
                Ok(outcome) => flatten(outcome, &self.pending),
                Err(_) => Err(timed_out(after)),
            },
            Wait::Idle(window) => {
                let activity = activity.unwrap_or_default();
                loop {
                    tokio::select! {
                        biased;
                        outcome = &mut rx => return flatten(outcome, &self.pending),
                        // A progress event restarts the window: loop and sleep afresh.
                        () = activity.notified() => {}
                        () = tokio::time::sleep(window) => return Err(timed_out(window)),
                    }
                }
            }
        }
    }
}

fn flatten(outcome: Result<Outcome, oneshot::error::RecvError>, pending: &PendingCalls) -> Outcome {
    outcome.unwrap_or_else(|_| Err(pending.closed_reason()))
}

async fn write_loop<S>(
    mut sink: futures_util::stream::SplitSink<WebSocketStream<S>, Message>,
    mut rx: mpsc::Receiver<Message>,
    pending: Arc<PendingCalls>,
    shutdown: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        let first = tokio::select! {
            () = shutdown.cancelled() => break,
            msg = rx.recv() => match msg {
                Some(m) => m,
                None => break,
            },
        };
        // Feed everything already queued, then flush once: pipelined calls share syscalls.
        let mut result = sink.feed(first).await;
        while result.is_ok() {
            match rx.try_recv() {
                Ok(m) => result = sink.feed(m).await,
                Err(_) => break,
            }
        }
        if let Err(e) = result.and(sink.flush().await) {
            tracing::debug!(error = %e, "websocket write failed");
            pending.fail_all(Error::Transport(format!("write failed: {e}")));
            shutdown.cancel();
            return;
        }
    }
    // Best effort: tell the daemon we are going; a dead peer must not delay shutdown.
    let _ = tokio::time::timeout(Duration::from_millis(100), sink.close()).await;
}

struct ReaderCtx {
    pending: Arc<PendingCalls>,
    registry: Arc<HandlerRegistry>,
    outbound: mpsc::Sender<Message>,
    notify_tx: mpsc::UnboundedSender<(String, Value)>,
    shutdown: CancellationToken,
}

async fn read_loop<S>(
    mut stream: futures_util::stream::SplitStream<WebSocketStream<S>>,
    ctx: ReaderCtx,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let reason = loop {
        let msg = tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            msg = stream.next() => msg,
        };
        match msg {
            Some(Ok(Message::Text(text))) => ctx.dispatch(text.as_str()),
            Some(Ok(Message::Close(frame))) => {
                break match frame {
                    Some(f) => format!("daemon closed the connection ({}: {})", f.code, f.reason),
                    None => "daemon closed the connection".to_string(),
                }
            }
            Some(Ok(Message::Binary(b))) => {
                tracing::debug!(bytes = b.len(), "binary frame ignored")
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => break format!("read failed: {e}"),
            None => break "connection closed by the daemon".to_string(),
        }
    };
    tracing::debug!(%reason, "connection ended");
    ctx.pending.fail_all(Error::Transport(reason));
    ctx.shutdown.cancel();
}

impl ReaderCtx {
    fn peer(&self) -> Peer {
        Peer {
            outbound: self.outbound.clone(),
            pending: self.pending.clone(),
            shutdown: self.shutdown.clone(),
        }
    }

    fn dispatch(&self, text: &str) {
        match classify(text) {
            Ok(Incoming::Response { id, outcome }) => {
                let routed = id
                    .as_u64()
                    .is_some_and(|n| self.pending.complete(n, outcome.map_err(Error::from)));
                if !routed {
                    tracing::debug!(%id, "response to an unknown or abandoned id dropped");
                }
            }
            Ok(Incoming::Request { id, method, params }) => {
                let registry = self.registry.clone();
                let peer = self.peer();
                tokio::spawn(async move {
                    let shutdown = peer.shutdown.clone();
                    shutdown
                        .run_until_cancelled(async move {
                            let answer =
                                handlers::answer(&registry, id, method, params, &peer).await;
                            let queued = peer.outbound.send(Message::text(answer.frame)).await;
                            if let (Ok(()), Some(after)) = (queued, answer.after) {
                                after();
                            }
                        })
                        .await;
                });
            }
            Ok(Incoming::Notification { method, params }) => {
                if PROGRESS_METHODS.contains(&method.as_str()) {
                    let id = params.get("id").or_else(|| params.get("request_id"));
                    if let Some(n) = id.and_then(Value::as_u64) {
                        self.pending.touch(n);
                        // Routed here, in the reader, so it is queued before the response.
                        if method == STREAM_EVENT && self.pending.route_event(n, &params) {
                            return;
                        }
                    }
                }
                let _ = self.notify_tx.send((method, params));
            }
            Err(rejected) => self.malformed(text, rejected),
        }
    }
}

impl ReaderCtx {
    /// A frame `classify` refused. A malformed request with a usable id is answered with
    /// the refusal so the daemon is not left waiting; a malformed response fails the call
    /// it names; anything else is logged and dropped.
    fn malformed(&self, text: &str, rejected: Rejected) {
        tracing::warn!(error = %rejected.error, "malformed frame from the daemon");
        if rejected.id.is_null() {
            return;
        }
        let is_request =
            serde_json::from_str::<Value>(text).is_ok_and(|v| v.get("method").is_some());
        if is_request {
            let outbound = self.outbound.clone();
            let frame = Message::text(rejected.to_frame());
            tokio::spawn(async move {
                let _ = outbound.send(frame).await;
            });
        } else if let Some(n) = rejected.id.as_u64() {
            let err = Error::Transport(format!(
                "malformed response from the daemon: {}",
                rejected.error.message
            ));
            self.pending.complete(n, Err(err));
        }
    }
}

async fn notify_loop(
    mut rx: mpsc::UnboundedReceiver<(String, Value)>,
    registry: Arc<HandlerRegistry>,
    shutdown: CancellationToken,
) {
    shutdown
        .run_until_cancelled(async move {
            while let Some((method, params)) = rx.recv().await {
                handlers::deliver(&registry, method, params).await;
            }
        })
        .await;
}

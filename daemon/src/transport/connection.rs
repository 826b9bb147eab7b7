//! One WebSocket connection: the reader loop, the writer task, liveness and teardown.
//!
//! - **Reader** (this task): reads frames, classifies them (`car_proto::jsonrpc`), runs the
//!   dispatch gates and immediate handlers inline, and routes responses to the session's reverse
//!   calls. An async handler that gets a running slot at once is polled once right here: most calls
//!   (state, memory reads, echo) finish in that first poll, and then cost no task, no join-set
//!   entry and no wake-up of another worker. One that returns `Pending` is moved, as it is, into
//!   its own task (its next poll registers that task's waker; the first poll used a no-op one, so
//!   nothing waits on the reader). So a handler's synchronous part runs on the reader: handlers
//!   must not block, which they already must not on a tokio worker (blocking work goes to
//!   `spawn_blocking`). At most [`MAX_RUNNING`] handlers of one connection run at once; later ones
//!   wait their turn in their own task. The reader itself never waits for a slot — it must keep
//!   reading, because the replies to the running handlers' reverse calls arrive on the same socket.
//!   A connection with [`MAX_QUEUED`] requests already in flight gets `-32603 server busy` for the
//!   next one.
//! - **Writer** (spawned): the only code that writes to the socket, fed by the byte-bounded
//!   outbound queue (`crate::state::outbound`). It writes every frame already queued (up to
//!   [`WRITE_BATCH_BYTES`]) and flushes once per batch, so pipelined replies share write syscalls;
//!   a lone reply is flushed at once.
//! - **Liveness**: a Ping every `ping_interval`; a peer with no inbound frame for `idle_timeout` is
//!   closed. The select is biased toward reading, so already-readable frames are drained before the
//!   idle decision. A tick that arrives more than two ping intervals after the previous one means
//!   this loop itself was stalled: the idle window restarts instead of blaming the peer.
//! - **Teardown**: in-flight handlers are aborted and pending reverse calls failed at once; a Close
//!   frame is sent when the daemon ends the connection (1001 shutdown, 1008 policy, 1009 too big,
//!   1007 bad UTF-8, 1000 idle); after a protocol violation the socket is drained briefly so the
//!   peer reads the Close frame instead of a reset.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use car_proto::errors::RpcError;
use car_proto::jsonrpc::{classify, error_frame, result_frame, Incoming};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;

use crate::dispatch::{Dispatch, Verdict};
use crate::handler::{Call, Handler};
use crate::state::outbound::{self, OutFrame, OutboundReceiver};
use crate::state::session::Session;
use crate::state::ServerState;

/// Most handlers one connection may have running at once.
pub const MAX_RUNNING: usize = 256;
/// Most requests one connection may have in flight (running or waiting to run).
pub const MAX_QUEUED: usize = 4096;
/// How long teardown waits for the writer to flush and for the peer's bytes to drain.
const LINGER: Duration = Duration::from_secs(2);
/// Most bytes the writer feeds to the socket before it flushes.
pub const WRITE_BATCH_BYTES: usize = 256 * 1024;

/// Why the reader stopped, and the Close frame (if any) the daemon sends.
#[derive(Debug)]
enum Ending {
    /// The peer closed or the socket failed: nothing more to send.
    PeerGone,
    /// The daemon closes with this code and reason; `drain` when the peer violated the
    /// protocol and may still be sending.
    Close {
        code: u16,
        reason: String,
        drain: bool,
    },
    /// Slow consumer: the socket is not being read, so nothing can be sent.
    Abort,
}

/// Serves one upgraded connection until it ends.
pub async fn serve<S>(
    ws: WebSocketStream<S>,
    ticket: crate::state::pre_auth::Ticket,
    state: Arc<ServerState>,
    dispatch: Arc<Dispatch>,
    transport: &'static str,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let abort = CancellationToken::new();
    let closed = CancellationToken::new();
    let (slot, authenticated) = ticket.into_parts();
    let (queue, out_rx) = outbound::channel(state.daemon.config.max_outbound_bytes, abort.clone());
    let session = Arc::new(Session::new(
        state.daemon.next_session_id(),
        transport,
        state.daemon.auth_enabled(),
        queue,
        closed.clone(),
        authenticated.clone(),
        Some(slot),
    ));
    state.daemon.sessions.add(&session);
    state.data.connectors.install_into(&session);
    // The pre-auth slot is held until the session authenticates; one still
    // unauthenticated at the deadline is closed (`crate::state::pre_auth`).
    let deadline_session = Arc::downgrade(&session);
    tokio::spawn(crate::state::pre_auth::enforce_deadline(
        authenticated,
        state.daemon.config.auth_deadline,
        closed.clone(),
        move || {
            if let Some(session) = deadline_session.upgrade() {
                session.evict_with(1008, "authentication deadline passed");
            }
        },
    ));
    tracing::debug!(session = session.id, transport, "connection opened");
    let (sink, mut stream) = ws.split();
    let writer = tokio::spawn(write_loop(sink, out_rx, abort.clone()));
    let mut handlers = JoinSet::new();
    let ending = read_loop(
        &mut stream,
        &session,
        &state,
        &dispatch,
        &abort,
        &mut handlers,
    )
    .await;

    // Teardown: nothing of this connection may outlive it.
    state.daemon.sessions.remove(session.id);
    session.release_pre_auth_slot();
    closed.cancel();
    handlers.abort_all();
    session.fail_reverse_calls();
    crate::services::on_session_closed(&session, &state).await;
    let drain = match &ending {
        Ending::Close {
            code,
            reason,
            drain,
        } => {
            session
                .outbound()
                .send_control(OutFrame::Close(*code, reason.clone()));
            *drain
        }
        Ending::PeerGone => {
            session
                .outbound()
                .send_control(OutFrame::Close(1000, String::new()));
            false
        }
        Ending::Abort => {
            abort.cancel();
            false
        }
    };
    let sink = match tokio::time::timeout(LINGER, writer).await {
        Ok(Ok(sink)) => Some(sink),
        _ => None,
    };
    abort.cancel();
    if let (true, Some(sink)) = (drain, sink) {
        if let Ok(ws) = stream.reunite(sink) {
            linger_drain(ws.into_inner()).await;
        }
    }
    tracing::debug!(session = session.id, ending = ?ending, "connection closed");
}

async fn read_loop<S>(
    stream: &mut SplitStream<WebSocketStream<S>>,
    session: &Arc<Session>,
    state: &Arc<ServerState>,
    dispatch: &Arc<Dispatch>,
    abort: &CancellationToken,
    handlers: &mut JoinSet<()>,
) -> Ending
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let ping_every = state.daemon.config.ping_interval;
    let idle_after = state.daemon.config.idle_timeout;
    let mut ticker = tokio::time::interval_at(Instant::now() + ping_every, ping_every);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last_inbound = Instant::now();
    let mut last_tick = Instant::now();
    let permits = Slots {
        running: Arc::new(Semaphore::new(MAX_RUNNING)),
        queued: Arc::new(Semaphore::new(MAX_QUEUED)),
    };
    // Created once, not per frame: each creation registers with its token's tree (the
    // shutdown token's is shared by every connection).
    let mut aborted = std::pin::pin!(abort.cancelled());
    let mut shutdown = std::pin::pin!(state.daemon.shutdown.cancelled());
    let mut evicted = std::pin::pin!(session.evicted());
    loop {
        // Reap finished handler tasks so the set does not grow with the connection's age.
        while handlers.try_join_next().is_some() {}
        tokio::select! {
            biased;
            _ = &mut aborted => return Ending::Abort,
            _ = &mut shutdown => {
                return Ending::Close { code: 1001, reason: "daemon shutting down".into(), drain: false }
            }
            (code, reason) = &mut evicted => {
                tracing::info!(session = session.id, %reason, "closing the connection");
                return Ending::Close { code, reason, drain: false };
            }
            frame = stream.next() => {
                last_inbound = Instant::now();
                match frame {
                    None => return Ending::PeerGone,
                    Some(Err(e)) => return ending_for_read_error(e, session),
                    Some(Ok(Message::Text(text))) => {
                        if let Some(ending) = on_text(text.as_str(), session, state, dispatch, handlers, &permits).await {
                            return ending;
                        }
                    }
                    Some(Ok(Message::Binary(bytes))) => on_binary(&bytes, session),
                    Some(Ok(Message::Close(_))) => return Ending::PeerGone,
                    // Pongs need no answer; Pings are answered by tungstenite itself.
                    Some(Ok(_)) => {}
                }
            }
            _ = ticker.tick() => {
                let now = Instant::now();
                if now.duration_since(last_tick) > ping_every * 2 {
                    tracing::warn!(session = session.id, stalled = ?now.duration_since(last_tick), "connection loop was stalled; restarting the idle window");
                    last_inbound = now;
                }
                last_tick = now;
                if now.duration_since(last_inbound) >= idle_after {
                    tracing::info!(session = session.id, idle = ?now.duration_since(last_inbound), "closing idle peer");
                    return Ending::Close { code: 1000, reason: "idle timeout".into(), drain: false };
                }
                session.outbound().send_control(OutFrame::Ping);
            }
        }
    }
}

fn ending_for_read_error(e: WsError, session: &Session) -> Ending {
    match e {
        WsError::Capacity(CapacityError::MessageTooLong { size, max_size }) => {
            tracing::warn!(
                session = session.id,
                size,
                max_size,
                "message too big; closing with 1009"
            );
            Ending::Close {
                code: 1009,
                reason: format!("message too big: limit is {max_size} bytes"),
                drain: true,
            }
        }
        WsError::Utf8(_) => {
            tracing::warn!(
                session = session.id,
                "text frame is not UTF-8; closing with 1007"
            );
            Ending::Close {
                code: 1007,
                reason: "text frame is not valid UTF-8".into(),
                drain: true,
            }
        }
        WsError::Protocol(p) => {
            tracing::warn!(session = session.id, error = %p, "websocket protocol violation; closing with 1002");
            Ending::Close {
                code: 1002,
                reason: "protocol error".into(),
                drain: true,
            }
        }
        other => {
            tracing::debug!(session = session.id, error = %other, "read failed");
            Ending::PeerGone
        }
    }
}

/// Binary frames carry audio for streaming voice methods, none of which this daemon
/// serves; a frame is parsed (so a malformed one is reported precisely) and dropped.
fn on_binary(bytes: &[u8], session: &Session) {
    match car_proto::frame::parse_frame(bytes) {
        Ok(frame) => {
            tracing::debug!(session = session.id, frame_type = ?frame.frame_type, "binary frame for no open stream dropped")
        }
        Err(e) => {
            tracing::debug!(session = session.id, error = %e, "malformed binary frame dropped")
        }
    }
}

/// The per-connection handler slots (see the module docs).
struct Slots {
    running: Arc<Semaphore>,
    queued: Arc<Semaphore>,
}

/// Handles one text frame; returns an ending when the connection must close.
async fn on_text(
    text: &str,
    session: &Arc<Session>,
    state: &Arc<ServerState>,
    dispatch: &Arc<Dispatch>,
    handlers: &mut JoinSet<()>,
    permits: &Slots,
) -> Option<Ending> {
    let (id, method, params) = match classify(text) {
        Err(rejected) => {
            session.outbound().send_text(rejected.to_frame());
            return None;
        }
        Ok(Incoming::Response { id, outcome }) => {
            session.complete_reverse_call(&id, outcome);
            return None;
        }
        Ok(Incoming::Request { id, method, params }) => (Some(id), method, params),
        Ok(Incoming::Notification { method, params }) => (None, method, params),
    };
    let reply = |outcome: Result<Value, RpcError>| {
        if let Some(id) = &id {
            let frame = match &outcome {
                Ok(result) => result_frame(id, result),
                Err(error) => error_frame(id, error),
            };
            session.outbound().send_text(frame);
        } else if let Err(error) = &outcome {
            tracing::debug!(session = session.id, %method, error = %error, "notification failed");
        }
    };
    match dispatch.gate(session, &method, &params) {
        Verdict::CloseUnauthenticated => {
            tracing::info!(session = session.id, %method, "call before session.auth; closing");
            reply(Err(RpcError::auth_required()));
            Some(Ending::Close {
                code: 1008,
                reason: "auth required".into(),
                drain: false,
            })
        }
        Verdict::GrantEnded => {
            reply(Err(RpcError::new(
                car_proto::errors::AUTH_REQUIRED,
                "auth required: this socket's inference-consumer grant ended (revoked, expired or its agent disconnected)",
            )));
            Some(Ending::Close {
                code: 1008,
                reason: "consumer grant ended".into(),
                drain: false,
            })
        }
        Verdict::Refuse(error) => {
            // Unknown client notifications are dropped silently (docs/protocol-choices.md,
            // "Framing").
            reply(Err(error));
            None
        }
        Verdict::Run(_, Handler::Immediate(handler)) => {
            reply(handler(session, state, params));
            None
        }
        Verdict::Run(spec, Handler::Async(handler)) => {
            let Ok(queued) = permits.queued.clone().try_acquire_owned() else {
                tracing::warn!(
                    session = session.id,
                    "{MAX_QUEUED} requests in flight; refusing more"
                );
                reply(Err(RpcError::internal(format!(
                    "server busy: this connection already has {MAX_QUEUED} requests in flight"
                ))));
                return None;
            };
            let call = Call {
                session: session.clone(),
                state: state.clone(),
                method: spec,
                id: id.clone(),
                invoke: dispatch.clone(),
            };
            let session = session.clone();
            let running = permits.running.clone();
            // A free slot now means the handler may start now, here (see the module docs).
            let slot = running.clone().try_acquire_owned().ok();
            let inline = slot.is_some();
            let mut task: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
                let permit = match slot {
                    Some(permit) => permit,
                    None => running
                        .acquire_owned()
                        .await
                        .expect("semaphore never closed"),
                };
                let outcome = crate::dispatch::run(call, handler, params).await;
                drop((permit, queued));
                match (&id, outcome) {
                    (Some(id), Ok(result)) => {
                        session.outbound().send_text(result_frame(id, &result));
                    }
                    (Some(id), Err(error)) => {
                        session.outbound().send_text(error_frame(id, &error));
                    }
                    (None, Err(error)) => {
                        tracing::debug!(session = session.id, method = spec.name, error = %error, "notification failed")
                    }
                    (None, Ok(_)) => {}
                }
            });
            if inline && poll_once(task.as_mut()).is_ready() {
                return None;
            }
            handlers.spawn(task);
            None
        }
    }
}

/// Polls `task` once with a waker that does nothing: if it is not done, whoever polls it
/// next (its own task) registers a real waker, and every future re-checks its readiness
/// when polled, so no wake-up is lost.
fn poll_once(task: Pin<&mut (dyn Future<Output = ()> + Send)>) -> Poll<()> {
    task.poll(&mut Context::from_waker(Waker::noop()))
}

type Sink<S> = SplitSink<WebSocketStream<S>, Message>;

/// The writer task: drains the outbound queue to the socket; returns the sink so teardown
/// can reunite the stream for a lingering drain.
async fn write_loop<S>(
    mut sink: Sink<S>,
    mut queue: OutboundReceiver,
    abort: CancellationToken,
) -> Sink<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    loop {
        let first = tokio::select! {
            _ = abort.cancelled() => break,
            frame = queue.rx.recv() => match frame {
                Some(frame) => frame,
                None => break,
            },
        };
        let mut batch = Batch::default();
        let sent = tokio::select! {
            _ = abort.cancelled() => break,
            sent = write_batch(&mut sink, &mut queue, first, &mut batch) => sent,
        };
        queue.written(batch.text_bytes);
        if let Err(e) = sent {
            tracing::debug!(error = %e, "write failed");
            break;
        }
        if batch.closed {
            break;
        }
    }
    sink
}

/// What one batch wrote.
#[derive(Default)]
struct Batch {
    /// Bytes of text frames (they count against the outbound limit).
    text_bytes: usize,
    /// The batch ended with a Close frame: nothing more may be written.
    closed: bool,
}

/// Feeds `first` and every frame already queued behind it (up to [`WRITE_BATCH_BYTES`],
/// stopping after a Close frame), then flushes once.
async fn write_batch<S>(
    sink: &mut Sink<S>,
    queue: &mut OutboundReceiver,
    first: OutFrame,
    batch: &mut Batch,
) -> Result<(), WsError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut frame = first;
    loop {
        let message = match frame {
            OutFrame::Text(text) => {
                batch.text_bytes += text.len();
                Message::text(text)
            }
            OutFrame::Ping => Message::Ping(Default::default()),
            OutFrame::Close(code, reason) => {
                batch.closed = true;
                Message::Close(Some(CloseFrame {
                    code: CloseCode::from(code),
                    reason: reason.into(),
                }))
            }
        };
        sink.feed(message).await?;
        if batch.closed || batch.text_bytes >= WRITE_BATCH_BYTES {
            break;
        }
        match queue.rx.try_recv() {
            Ok(next) => frame = next,
            Err(_) => break,
        }
    }
    sink.flush().await
}

/// After closing a peer that violated the protocol, read and discard what it is still
/// sending (up to [`LINGER`]) so it receives our Close frame rather than a TCP reset.
async fn linger_drain<S: AsyncRead + AsyncWrite + Unpin>(mut raw: S) {
    let _ = raw.flush().await;
    let mut buf = vec![0u8; 64 * 1024];
    let _ = tokio::time::timeout(LINGER, async {
        loop {
            match raw.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    let _ = raw.shutdown().await;
}

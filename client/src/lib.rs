//! `car-daemon-client`: the shared client through which every language binding talks to
//! the local daemon `car-server`.
//!
//! Owns: the one connection logic every binding shares: discovery, auth and handshake,
//! timeouts, reverse-call and notification handlers, reconnects, typed members, the agent loop
//! and chat serving. Must not touch: any language runtime (bindings translate), the daemon's
//! files (it reads only the token files discovery names), or blocking waits on a tokio worker.
//!
//! Everything protocol-shaped lives here so each binding only translates types:
//!
//! - [`discovery`]: daemon address, Unix-socket preference, token, host token, memory namespace — a
//!   pure function of explicit settings and an environment snapshot;
//! - `connection` (private): one socket, a reader task, a writer task and an id-routed table of
//!   pending calls that all fail at once when the socket dies;
//! - [`Client`]: lazy connect (`session.auth` → `server.handshake`, failing closed), calls from any
//!   number of tasks, per-call timeouts, reconnect, `close()`;
//! - handler registration for reverse calls (`tools.execute`, `tools.cancel`, anything else) and
//!   notifications;
//! - [`timeouts`]: the per-method wait rules (docs/protocol-choices.md, "Reverse calls and
//!   heartbeats");
//! - [`typed`]: the contract's typed members (build params from arguments, project the result),
//!   which every binding's generated members call through [`Client::call_member`];
//! - [`Error`]: `Rpc` / `Transport` / `Timeout` / `Closed` / `Handshake` / `Refused` /
//!   `InvalidArgument` / `UnexpectedResult`, and [`ErrorReport`], the one structured projection
//!   every binding maps;
//! - [`agent_loop`]: the agent loop (propose → verify → execute → observe, `finish`, run
//!   bracketing) every binding wraps: [`Client::run_agent`];
//! - [`chat`]: serving the chat turns the daemon routes to this agent (`agent.chat`, its events,
//!   cancels and approvals): [`Client::serve_chat`] and the standard runner
//!   [`Client::serve_chat_with_agent_loop`];
//! - [`BlockingClient`]: the same API for threads without a runtime.

pub mod agent_loop;
mod blocking;
pub mod chat;
mod client;
mod connection;
pub mod discovery;
mod error;
mod handlers;
mod peer;
mod proposals;
pub mod timeouts;
pub mod typed;

pub use agent_loop::{AgentConfig, AgentMetrics, AgentOutcome, ChatTurn};
pub use blocking::BlockingClient;
pub use car_proto::handshake::HandshakeReply;
pub use chat::{ChatGoal, ChatHandler, ChatParams, ChatThreadLimits, ChatTurnContext};
pub use client::{CallOptions, Client, ClientConfig, Session};
pub use discovery::{AgentIdentity, Endpoint, EnvSnapshot};
pub use error::{Error, ErrorKind, ErrorReport, HandlerError, HANDLER_ERROR_CODE};
pub use handlers::{panic_text, AbortSignal, BoxFuture, HandlerResult, ToolCall, ToolCancel};
pub use timeouts::{TimeoutPolicy, Wait};
pub use typed::{Naming, Projected};

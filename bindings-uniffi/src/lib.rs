//! `car-runtime-uniffi`: the UniFFI library through which Swift and Kotlin apps reach the
//! local daemon (docs/protocol-choices.md, "Bindings").
//!
//! Owns: translation between Swift/Kotlin and the shared client, and the process's one tokio
//! runtime for it. Must not touch: protocol logic (it is the shared client's), or a foreign
//! callback while holding a lock.
//!
//! This crate is a translation layer over `car-daemon-client` and owns nothing else:
//!
//! - [`CarDaemonClient`] (`client`): the generic bridge (`daemon_call`,
//!   `daemon_call_host_management`, handler registration, `close`, `connection_epoch`), plus the
//!   members in `generated` (written by `cargo xtask codegen` from the daemon's method contract,
//!   never by hand): CAR's typed members, which run `car_daemon_client::typed` through `client`'s
//!   `member_*` helpers, and a JSON-string wrapper for every other method;
//! - [`HostClient`] (`host`): CAR's host-authority client over a `CarDaemonClient`'s
//!   host-management connection, with the `host` methods' generated members (host methods stay off
//!   `CarDaemonClient`, as CAR keeps them off `CarRuntime`);
//! - [`DaemonHandler`] / [`DaemonNotificationHandler`] (`handlers`): the callback interfaces
//!   foreign code implements, and their adapters onto the client's registry;
//! - [`CarError`] (`error`): the client's error taxonomy as one enum, and the translation of a
//!   foreign handler's failure into the JSON-RPC error the daemon receives;
//! - [`AgentLoop`] (`agent_loop`): CAR's agent loop on the shared Rust loop
//!   (`car_daemon_client::Client::run_agent`), with its typed config and outcome records and the
//!   [`AgentTool`] callback interface foreign code implements;
//! - [`ChatHandler`] / [`ChatTurn`] (`chat`): serving the daemon's chat turns (the agent side of
//!   `agents.chat`) with a callback interface foreign code implements;
//! - [`AgentRunner`] (`agent_runner`): running the agents of the daemon's `multi.*` and
//!   `workflow.*` calls (the `multi.run_agent` reverse call) with a callback interface foreign code
//!   implements, registered with `registerAgentRunner`;
//! - `runtime`: the one tokio runtime of the process.
//!
//! Structured values cross the boundary as JSON strings so the native ABI stays stable as
//! daemon shapes grow. Every export is synchronous: it runs on the foreign caller's thread
//! and blocks it (never a tokio worker) while the runtime's tasks do the I/O.

// Containment needs unwinding: with `panic = "abort"` a panic anywhere in the library (or a
// foreign exception UniFFI could not map) would kill the host app instead of becoming an
// error, so such a build is refused.
#[cfg(not(panic = "unwind"))]
compile_error!("car-runtime-uniffi must be built with panic = \"unwind\"");

mod agent_loop;
mod agent_runner;
mod chat;
mod client;
mod error;
// Written by the codegen as it stands; `cargo fmt` leaves it alone so `codegen --check`
// and the format check agree.
#[rustfmt::skip]
mod generated;
mod handlers;
mod host;
mod tokio_runtime;

pub use agent_loop::{
    AgentLoop, AgentLoopConfig, AgentMetrics, AgentOutcome, AgentTool, ToolAbort,
};
pub use agent_runner::AgentRunner;
pub use chat::{ChatHandler, ChatTurn};
pub use client::CarDaemonClient;
pub use error::CarError;
pub use handlers::{DaemonHandler, DaemonNotificationHandler};
pub use host::HostClient;

uniffi::setup_scaffolding!();

/// The wire protocol version this library speaks (`server.handshake`).
#[uniffi::export]
pub fn protocol_version() -> u32 {
    // The protocol version is a small integer in the wire contract; u32 keeps Swift and
    // Kotlin signatures plain (`UInt32`/`UInt`) without a lossy cast.
    u32::try_from(car_proto::PROTOCOL_VERSION).unwrap_or(u32::MAX)
}

/// This library's version (the workspace version shared by every package).
#[uniffi::export]
pub fn client_version() -> String {
    car_proto::CAR_VERSION.to_string()
}

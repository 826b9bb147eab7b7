//! `car-proto`: the car-runtime wire contract and nothing else.
//!
//! This crate owns what the daemon (`car-server`), the shared client
//! (`car-daemon-client`) and every binding must agree on byte for byte:
//!
//! - [`jsonrpc`]: JSON-RPC 2.0 envelopes and the classification of an inbound text frame;
//! - [`errors`]: the one table of error codes and the [`errors::RpcError`] value;
//! - [`capabilities`]: handshake capability names and what the daemon supports;
//! - [`methods`]: **the typed method contract**: every method declared once with its params and
//!   result types, from which dispatch, `capabilities.list`, `server.schema`, client timeouts and
//!   every binding's members are derived;
//! - [`clock`]: the one clock and timestamp format (chrono), and `strftime` for templates;
//! - [`deadline`]: the deadline rules the daemon and the client share;
//! - [`handshake`]: the `server.handshake` negotiation rule;
//! - [`schema`]: the `server.schema` document and its SHA-256 digest;
//! - [`paths`]: state-root, token and socket path resolution for Linux, macOS and Windows;
//! - [`namespace`]: the memory-namespace file-name encoding;
//! - [`frame`]: the 26-byte binary frame header codec;
//! - [`redact`]: [`redact::Redacted`], the wrapper that keeps secrets out of `Debug` output;
//! - [`safe_file`]: the one safe-file API every crate uses for paths a caller named;
//! - [`token`]: minting bearer secrets and comparing them in constant time.
//!
//! It must not touch sockets, threads, async runtimes or the file system (reading the wall
//! clock in [`clock`] is not I/O) (path resolution
//! is pure: it is handed the environment it reads), with two exceptions: [`safe_file`], the
//! blocking open/read/replace rules every engine shares (engines depend on this crate only),
//! and [`token::mint_token`], which reads the operating system's random source.

pub mod capabilities;
pub mod clock;
pub mod deadline;
pub mod errors;
pub mod frame;
pub mod handshake;
pub mod jsonrpc;
pub mod loopback;
pub mod methods;
pub mod namespace;
pub mod paths;
pub mod policy_rules;
pub mod pricing;
pub mod redact;
pub mod safe_file;
pub mod schema;
pub mod token;

/// The wire protocol version. Bumped only on a backward-incompatible change to request or
/// response shapes; independent of the package version.
pub const PROTOCOL_VERSION: u64 = 3;

/// The package version shared by every crate of the workspace (`server_version`,
/// `car_version`, `client_version`).
pub const CAR_VERSION: &str = env!("CARGO_PKG_VERSION");

//! MCP connectors: the daemon as an MCP **client** of remote servers (Streamable HTTP) and
//! local ones (stdio child processes), on the official Rust SDK (`rmcp`), whose client
//! implements both transports, the protocol-version negotiation and pagination.
//!
//! - [`manifest`]: what a connector is (`connectors.json`, `.car/connectors.toml`), slugs and
//!   canonical tool names `mcp_{slug}_{tool}`;
//! - [`live`]: one connection: handshake, `tools/list`, `tools/call`, each bounded in time;
//! - [`registry`]: the daemon's set, which tools are enabled, calls by canonical name;
//! - [`oauth`]: OAuth 2.1 for remote servers: discovery, dynamic client registration, the PKCE
//!   authorization URL, the code exchange and refreshes, into serialisable [`Credentials`] the
//!   daemon keeps in its secret store.
//!
//! The engine holds no secrets of its own (an OAuth flow in progress and the credentials it
//! ends in are values the daemon keeps) and spawns nothing by itself: the daemon hands it
//! a [`Launch`] with the headers filled in, or a command whose environment it has set.

pub mod live;
pub mod manifest;
pub mod oauth;
pub mod registry;

pub use live::{Launch, Live, ToolInfo};
pub use manifest::{canonical, slug_of, Definition, Manifest, Transport};
pub use oauth::{Credentials, PendingFlow};
pub use registry::{Connectors, EnabledTool};

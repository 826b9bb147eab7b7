//! Services: one module per method namespace. A service implements the rows of the method
//! table in its namespace and never touches a socket: it gets the caller's [`Session`]
//! (identity, negotiated capabilities, reverse calls, notifications) and the shared
//! [`ServerState`].
//!
//! [`handler_for`] is the only place a method name meets its implementation.
//!
//! [`Session`]: crate::session::Session
//! [`ServerState`]: crate::state::ServerState

mod debug;
mod host;
mod server;
mod session;

use crate::dispatch::Handler;

/// Every method name that has a handler (checked against the method table by tests).
pub const HANDLED: &[&str] = &[
    "capabilities.list",
    "debug.call_client",
    "debug.echo",
    "debug.notify_client",
    "debug.sleep",
    "host.subscribe",
    "server.handshake",
    "server.schema",
    "session.auth",
];

/// The handler implementing a method table row.
pub fn handler_for(method: &str) -> Option<Handler> {
    Some(match method {
        "capabilities.list" => Handler::Async(server::capabilities_list),
        "server.handshake" => Handler::Immediate(server::handshake),
        "server.schema" => Handler::Async(server::schema),
        "session.auth" => Handler::Immediate(session::auth),
        "host.subscribe" => Handler::Async(host::subscribe),
        "debug.call_client" => Handler::Async(debug::call_client),
        "debug.echo" => Handler::Async(debug::echo),
        "debug.notify_client" => Handler::Async(debug::notify_client),
        "debug.sleep" => Handler::Async(debug::sleep),
        _ => return None,
    })
}

/// Reads `params` as an object (`null` counts as `{}`), naming the problem otherwise.
pub(crate) fn object(
    params: serde_json::Value,
) -> Result<serde_json::Map<String, serde_json::Value>, car_proto::errors::RpcError> {
    match params {
        serde_json::Value::Object(map) => Ok(map),
        serde_json::Value::Null => Ok(serde_json::Map::new()),
        other => Err(car_proto::errors::RpcError::invalid_params(format!(
            "params must be an object, got {}",
            car_proto::jsonrpc::json_type(&other)
        ))),
    }
}

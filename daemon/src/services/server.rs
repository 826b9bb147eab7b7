//! `server.*` and `capabilities.list`: protocol negotiation and self-description.

use car_proto::errors::RpcError;
use car_proto::methods;
use serde_json::{json, Value};

use crate::dispatch::{Call, HandlerFuture};
use crate::session::Session;
use crate::state::ServerState;

/// `server.handshake`: exact-version negotiation. A failure leaves the session's earlier
/// negotiation (if any) untouched; a repeat with the same params is idempotent.
pub fn handshake(
    session: &Session,
    _state: &ServerState,
    params: Value,
) -> Result<Value, RpcError> {
    let reply = car_proto::handshake::negotiate(&params)?;
    session.set_negotiated(reply.negotiated_capabilities.clone());
    tracing::debug!(session = session.id, client_version = %reply.client_version, caps = ?reply.negotiated_capabilities, "negotiated");
    Ok(serde_json::to_value(reply).expect("handshake reply serializes"))
}

/// `server.schema`: `{schema, digest, digest_algorithm, car_version}`.
pub fn schema(call: Call, _params: Value) -> HandlerFuture {
    Box::pin(async move { Ok(call.state.schema_reply.clone()) })
}

/// `capabilities.list`: `{caller_role, count, methods: [{method, role}]}`, sorted, filtered
/// by the caller's role.
pub fn capabilities_list(call: Call, _params: Value) -> HandlerFuture {
    Box::pin(async move {
        let role = call.session.identity().role;
        let rows: Vec<Value> = methods::active(call.state.config.debug_methods)
            .filter(|m| role.sees(m.role))
            .map(|m| json!({"method": m.name, "role": m.role.as_str()}))
            .collect();
        Ok(json!({"caller_role": role.as_str(), "count": rows.len(), "methods": rows}))
    })
}

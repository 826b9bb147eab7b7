//! `server.handshake`, `server.schema` and `capabilities.list`: protocol negotiation and
//! self-description, generated from the method contract.

use car_proto::errors::RpcError;
use car_proto::handshake::HandshakeReply;
use car_proto::methods;
use car_proto::methods::fields::NoParams;
use car_proto::methods::server::{self as m, CapabilitiesReply, CapabilityRow, SchemaReply};
use serde_json::Value;

use crate::handler::{Call, Routes};
use crate::state::session::Session;
use crate::state::ServerState;

pub fn register(routes: &mut Routes) {
    routes
        .immediate::<m::Handshake, _>(handshake)
        .add::<m::Schema, _, _>(schema)
        .add::<m::CapabilitiesList, _, _>(capabilities_list)
        .add::<m::Status, _, _>(status);
}

/// `server.status`: the open connections and the admission queue.
async fn status(call: Call, _: NoParams) -> Result<m::StatusReply, RpcError> {
    let state = &call.state;
    let capacity = state.daemon.config.max_generations;
    let running = capacity.saturating_sub(state.inference.admission.available_permits());
    let waiting_or_running = state.inference.in_flight();
    Ok(m::StatusReply {
        car_version: car_proto::CAR_VERSION.to_string(),
        uptime_ms: state.daemon.started.elapsed().as_millis() as u64,
        sessions: state.daemon.sessions.rows(),
        admission: m::AdmissionStatus {
            running,
            queued: waiting_or_running.saturating_sub(running),
            capacity,
        },
    })
}

/// `server.handshake`: exact-version negotiation. A failure leaves the session's earlier
/// negotiation (if any) untouched; a repeat with the same params is idempotent.
fn handshake(
    session: &std::sync::Arc<Session>,
    _: &ServerState,
    params: Value,
) -> Result<HandshakeReply, RpcError> {
    let reply = car_proto::handshake::negotiate(&params)?;
    session.set_negotiated(reply.negotiated_capabilities.clone());
    session.set_client_version(reply.client_version.clone());
    tracing::debug!(session = session.id, client_version = %reply.client_version, caps = ?reply.negotiated_capabilities, "negotiated");
    Ok(reply)
}

/// `server.schema`: `{schema, digest, digest_algorithm, car_version}`, computed at start.
async fn schema(call: Call, _: NoParams) -> Result<SchemaReply, RpcError> {
    Ok(call.state.daemon.schema_reply.clone())
}

/// `capabilities.list`: `{caller_role, count, methods: [{method, role}]}`, sorted, filtered
/// by the caller's role.
async fn capabilities_list(call: Call, _: NoParams) -> Result<CapabilitiesReply, RpcError> {
    let role = call.session.identity().role;
    let rows: Vec<CapabilityRow> = methods::active(call.state.daemon.config.debug_methods)
        .filter(|d| role.sees(d.spec.role))
        .map(|d| CapabilityRow {
            method: d.name().to_string(),
            role: d.spec.role.as_str().to_string(),
        })
        .collect();
    Ok(CapabilitiesReply {
        caller_role: role.as_str().to_string(),
        count: rows.len(),
        methods: rows,
    })
}

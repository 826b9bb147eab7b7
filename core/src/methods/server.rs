//! `server.handshake`, `server.schema`, `capabilities.list`: negotiation and
//! self-description.

use crate::methods::Access;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, NoParams};
use super::member::{json, member};
use super::{op, DeadlineClass, Declaration};

/// One `capabilities.list` row.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct CapabilityRow {
    pub method: String,
    /// CAR's role label: `agent`, `owner`, `operator` or `host`.
    pub role: String,
}

/// `capabilities.list` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct CapabilitiesReply {
    pub caller_role: String,
    pub count: usize,
    /// Sorted by method.
    pub methods: Vec<CapabilityRow>,
}

/// `server.schema` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SchemaReply {
    /// The contract document (see `car_proto::schema`).
    pub schema: Json,
    /// Lower-case hex SHA-256 of the document's canonical JSON.
    pub digest: String,
    pub digest_algorithm: String,
    pub car_version: String,
}

/// One live connection in `server.status`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SessionRow {
    /// The daemon's connection id.
    pub id: u64,
    /// `tcp` or `unix`.
    pub transport: String,
    /// `operator`, `agent`, `host` or `observer` (the dashboard's read-only token);
    /// `unauthenticated` before `session.auth`.
    pub role: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// What the client reported in `server.handshake`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub connected_at_ms: u64,
}

/// The admission queue for local generation.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct AdmissionStatus {
    /// Generations holding a permit.
    pub running: usize,
    /// Generation calls waiting for a permit.
    pub queued: usize,
    /// Permits (`--max-generations`).
    pub capacity: usize,
}

/// `server.status` result (ours: CAR publishes no such method).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct StatusReply {
    pub car_version: String,
    pub uptime_ms: u64,
    /// Sorted by id.
    pub sessions: Vec<SessionRow>,
    pub admission: AdmissionStatus,
}

/// `server.handshake` params: `{protocol_version, client_version?, required_capabilities?,
/// optional_capabilities?}`, checked by `car_proto::handshake` (a non-numeric version is
/// `-32006`, so the params are taken as JSON and checked there).
pub type HandshakeParams = Json;

crate::method!(
    /// `server.handshake` → the negotiation reply.
    Handshake = op("server.handshake", "negotiate the exact protocol version and capabilities for this connection")
        .deadline(DeadlineClass::Immediate);
    access: Access::session().observer();
    HandshakeParams => crate::handshake::HandshakeReply
);
crate::method!(
    /// `server.schema` → `{schema, digest, digest_algorithm, car_version}`.
    Schema = op("server.schema", "the method contract as a schema document with its sha-256 digest");
    access: Access::daemon().observer();
    NoParams => SchemaReply;
    member("server_schema", &[], json())
);
crate::method!(
    /// `capabilities.list` → `{caller_role, count, methods}`.
    CapabilitiesList = op("capabilities.list", "list the methods this session's role can see, with their roles");
    access: Access::daemon().observer();
    NoParams => CapabilitiesReply;
    member("capabilities", &[], json())
);

crate::method!(
    /// `server.status` → live connections and the admission queue (the dashboard's view).
    Status = op("server.status", "live connections and the admission queue for local generation");
    access: Access::daemon().observer();
    NoParams => StatusReply;
    member("server_status", &[], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Handshake>(),
    Declaration::of::<Status>(),
    Declaration::of::<Schema>(),
    Declaration::of::<CapabilitiesList>(),
];

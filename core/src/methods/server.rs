//! `server.handshake`, `server.schema`, `capabilities.list`: negotiation and
//! self-description.

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

/// `server.handshake` params: `{protocol_version, client_version?, required_capabilities?,
/// optional_capabilities?}`, checked by `car_proto::handshake` (a non-numeric version is
/// `-32006`, so the params are taken as JSON and checked there).
pub type HandshakeParams = Json;

crate::method!(
    /// `server.handshake` → the negotiation reply.
    Handshake = op("server.handshake", "negotiate the exact protocol version and capabilities for this connection")
        .deadline(DeadlineClass::Immediate);
    HandshakeParams => crate::handshake::HandshakeReply
);
crate::method!(
    /// `server.schema` → `{schema, digest, digest_algorithm, car_version}`.
    Schema = op("server.schema", "the method contract as a schema document with its sha-256 digest");
    NoParams => SchemaReply;
    member("server_schema", &[], json())
);
crate::method!(
    /// `capabilities.list` → `{caller_role, count, methods}`.
    CapabilitiesList = op("capabilities.list", "list the methods this session's role can see, with their roles");
    NoParams => CapabilitiesReply;
    member("capabilities", &[], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Handshake>(),
    Declaration::of::<Schema>(),
    Declaration::of::<CapabilitiesList>(),
];

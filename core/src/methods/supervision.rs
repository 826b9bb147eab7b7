//! `supervision.*`: the proposal admission gate as an out-of-process subscription
//! (reference "supervision").
//!
//! A connection subscribes with a filter; every proposal submitted on any connection that
//! matches at least one supervisor's filter becomes an intent, sent to the matching
//! supervisors as a `supervision.intent` notification, and the submit parks until a
//! supervisor decides: `allow` (the other gates still apply), `deny` (the proposal is
//! rejected), `escalate` (a host approval decides). No decision within
//! `decision_timeout_ms` rejects it (fail-closed); a supervisor that disconnects does not
//! release what it left parked. An intent carries parameter key names and a digest, never
//! parameter values. With no supervisor the gate costs nothing.

use crate::methods::{Access, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, Name, NoParams};
use super::member::{json, member, whole};
use super::permission::Reversibility;
use super::{op, Declaration};

/// Which proposals a supervisor sees; absent or empty parts match everything, and the
/// parts combine with AND.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct Filter {
    /// A proposal matches when one of its actions calls one of these tools.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// A proposal matches when it runs under one of these execution session ids (the
    /// submit's `session_id`, else `sess-<n>`).
    #[serde(default)]
    pub sessions: Option<Vec<String>>,
    /// A proposal matches when its reversibility is this or worse.
    #[serde(default)]
    pub min_reversibility: Option<Reversibility>,
}

/// `supervision.subscribe` params.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct SubscribeParams {
    #[serde(default)]
    pub filter: Option<Filter>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SubscribeReply {
    pub subscribed: bool,
    pub decision_timeout_ms: u64,
    /// Supervisors subscribed now, this one included.
    pub supervisors: usize,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct UnsubscribeReply {
    pub subscribed: bool,
    pub was_subscribed: bool,
}

/// One action of an intent: no parameter values.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct IntentAction {
    pub id: String,
    /// `tool_call`, `state_write` or `state_delete`.
    pub action_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    pub reversibility: Reversibility,
    /// The parameter map's top-level key names, sorted (`key`, `value` for state actions).
    pub parameter_keys: Vec<String>,
    /// SHA-256 hex of the canonical JSON of the parameter map.
    pub parameters_digest: String,
}

/// CAR's `SupervisionIntent`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct SupervisionIntent {
    pub id: String,
    pub proposal_id: String,
    /// The proposal's `source`, else the submitter (`agent:<id>` or `conn:<n>`).
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Json>,
    /// The worst of the actions'.
    pub reversibility: Reversibility,
    /// RFC 3339, UTC.
    pub created_at: String,
    pub actions: Vec<IntentAction>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PendingReply {
    /// Oldest first.
    pub intents: Vec<SupervisionIntent>,
}

/// A supervisor's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    Allow,
    Deny,
    Escalate,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct Decision {
    pub kind: DecisionKind,
    /// Required for `deny` and `escalate`.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `supervision.decide` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct DecideParams {
    pub intent_id: Name,
    pub decision: Decision,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct DecideReply {
    pub decided: bool,
}

crate::method!(
    /// `supervision.subscribe {filter?}` → `{subscribed, decision_timeout_ms, supervisors}`;
    /// intents then arrive as `supervision.intent` notifications.
    Subscribe = op("supervision.subscribe", "supervise proposal admission: matching proposals park until this connection decides");
    access: Access::owned(Resource::Supervision);
    SubscribeParams => SubscribeReply;
    member("supervision_subscribe", &[whole("request_json")], json())
);
crate::method!(
    /// `supervision.unsubscribe` → `{subscribed: false, was_subscribed}`.
    Unsubscribe = op("supervision.unsubscribe", "stop supervising (parked intents still time out)");
    access: Access::owned(Resource::Supervision);
    NoParams => UnsubscribeReply;
    member("supervision_unsubscribe", &[whole("request_json")], json())
);
crate::method!(
    /// `supervision.pending` → `{intents}`, oldest first.
    Pending = op("supervision.pending", "the intents parked on this supervisor's decision, oldest first");
    access: Access::owned(Resource::Supervision).observer();
    NoParams => PendingReply;
    member("supervision_pending", &[whole("request_json")], json())
);
crate::method!(
    /// `supervision.decide {intent_id, decision}` → `{decided: true}`.
    Decide = op("supervision.decide", "allow, deny or escalate one parked intent");
    access: Access::owned(Resource::Supervision);
    DecideParams => DecideReply;
    member("supervision_decide", &[whole("request_json")], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Subscribe>(),
    Declaration::of::<Unsubscribe>(),
    Declaration::of::<Pending>(),
    Declaration::of::<Decide>(),
];

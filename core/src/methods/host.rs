//! `host.*`: the host surface. Only `host.subscribe` is served so far, and nothing
//! publishes `host.event` yet (agent registry, approvals and notifications come with the
//! host surface): a subscription succeeds and stays silent.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::NoParams;
use super::{op, Declaration};

/// `host.subscribe` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SubscribeReply {
    pub subscribed: bool,
}

crate::method!(
    /// `host.subscribe` → `{subscribed: true}`; needs `server.handshake` first.
    Subscribe = op("host.subscribe", "subscribe this session to host.event notifications (none are published yet)")
        .handshake();
    NoParams => SubscribeReply
);

pub const DECLARATIONS: &[Declaration] = &[Declaration::of::<Subscribe>()];

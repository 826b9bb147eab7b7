//! `host.*`: host-management sessions.
//!
//! `host.subscribe` attaches the session to the daemon's `host.event` channel: every
//! event published on `ServerState::host_events` from then on is forwarded to it as a
//! `host.event` notification until the connection closes. Publishers arrive with the
//! services that own agents and approvals.

use serde_json::{json, Value};

use crate::dispatch::{Call, HandlerFuture};

pub fn subscribe(call: Call, _params: Value) -> HandlerFuture {
    Box::pin(async move {
        if call.session.subscribe_host_events() {
            let events = call.state.host_events.subscribe();
            call.session
                .forward(events, "host.event", |_, event| Some(event));
        }
        Ok(json!({"subscribed": true}))
    })
}

//! `host.*`: host-management sessions.
//!
//! `host.subscribe` attaches the session to the daemon's `host.event` channel: every
//! event published on `ServerState::host_events` from then on is forwarded to it as a
//! `host.event` notification until the connection closes. Publishers arrive with the
//! services that own agents and approvals.

use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use crate::dispatch::{Call, HandlerFuture};

pub fn subscribe(call: Call, _params: Value) -> HandlerFuture {
    Box::pin(async move {
        if call.session.subscribe_host_events() {
            let mut events = call.state.host_events.subscribe();
            let session = call.session.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = session.closed.cancelled() => break,
                        event = events.recv() => match event {
                            Ok(event) => {
                                if !session.notify("host.event", &event) {
                                    break;
                                }
                            }
                            Err(RecvError::Lagged(n)) => tracing::warn!(session = session.id, missed = n, "host.event subscriber lagged"),
                            Err(RecvError::Closed) => break,
                        }
                    }
                }
            });
        }
        Ok(json!({"subscribed": true}))
    })
}

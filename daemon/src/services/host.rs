//! `host.*`: the host surface.
//!
//! `host.subscribe` attaches the session to the daemon's `host.event` channel: every
//! event published on `ServerState::host_events` from then on is forwarded to it as a
//! `host.event` notification until the connection closes. Nothing publishes on it yet
//! (agents, approvals and notifications come with the host surface), so a subscription
//! succeeds and stays silent; the schema's summary says so.

use car_proto::errors::RpcError;
use car_proto::methods::fields::NoParams;
use car_proto::methods::host::{self as m, SubscribeReply};

use crate::handler::{Call, Routes};

pub fn register(routes: &mut Routes) {
    routes.add::<m::Subscribe, _, _>(subscribe);
}

async fn subscribe(call: Call, _: NoParams) -> Result<SubscribeReply, RpcError> {
    if call.session.subscribe_host_events() {
        let events = call.state.host_events.subscribe();
        call.session
            .forward(events, "host.event", |_, event| Some(event));
    }
    Ok(SubscribeReply { subscribed: true })
}

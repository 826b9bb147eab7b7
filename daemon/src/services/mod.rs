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
mod events;
mod host;
mod inference;
mod memory;
pub mod params;
mod policy;
pub mod proposal;
pub mod runs;
mod server;
mod session;
mod state;
mod tools;

use crate::dispatch::Handler;

/// Every method name that has a handler (checked against the method table by tests).
pub const HANDLED: &[&str] = &[
    "capabilities.list",
    "classify",
    "debug.call_client",
    "debug.echo",
    "debug.notify_client",
    "debug.sleep",
    "detokenize",
    "embed",
    "events.count",
    "events.query",
    "events.stats",
    "host.subscribe",
    "infer",
    "infer.cancel",
    "infer.deadline",
    "infer_stream",
    "memory.add_fact",
    "memory.build_context",
    "memory.consolidate",
    "memory.delete",
    "memory.fact_count",
    "memory.load",
    "memory.persist",
    "memory.query",
    "models.list",
    "models.register",
    "models.remove",
    "policy.list",
    "policy.register",
    "policy.unregister",
    "proposal.submit",
    "runs.complete",
    "runs.get_trace",
    "runs.list",
    "runs.start",
    "runs.subscribe",
    "server.handshake",
    "server.schema",
    "session.auth",
    "session.clear_halt",
    "session.init",
    "skill.find",
    "skill.ingest",
    "skill.report",
    "skills.list",
    "state.exists",
    "state.get",
    "state.keys",
    "state.set",
    "state.snapshot",
    "tokenize",
    "tools.list",
    "tools.register",
    "tools.unregister",
    "verify",
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
        "memory.add_fact" => Handler::Async(memory::add_fact),
        "memory.build_context" => Handler::Async(memory::build_context),
        "memory.consolidate" => Handler::Async(memory::consolidate),
        "memory.delete" => Handler::Async(memory::delete),
        "memory.fact_count" => Handler::Async(memory::fact_count),
        "memory.load" => Handler::Async(memory::load),
        "memory.persist" => Handler::Async(memory::persist),
        "memory.query" => Handler::Async(memory::query),
        "skill.find" => Handler::Async(memory::skill_find),
        "skill.ingest" => Handler::Async(memory::skill_ingest),
        "skill.report" => Handler::Async(memory::skill_report),
        "skills.list" => Handler::Async(memory::skills_list),
        "classify" => Handler::Async(inference::classify),
        "detokenize" => Handler::Async(inference::detokenize),
        "embed" => Handler::Async(inference::embed),
        "infer" => Handler::Async(inference::infer),
        "infer.cancel" => Handler::Async(inference::cancel),
        "infer.deadline" => Handler::Async(inference::deadline),
        "infer_stream" => Handler::Async(inference::infer_stream),
        "models.list" => Handler::Async(inference::models_list),
        "models.register" => Handler::Async(inference::models_register),
        "models.remove" => Handler::Async(inference::models_remove),
        "tokenize" => Handler::Async(inference::tokenize),
        "events.count" => Handler::Async(events::count),
        "events.query" => Handler::Async(events::query),
        "events.stats" => Handler::Async(events::stats),
        "policy.list" => Handler::Async(policy::list),
        "policy.register" => Handler::Async(policy::register),
        "policy.unregister" => Handler::Async(policy::unregister),
        "proposal.submit" => Handler::Async(proposal::submit),
        "runs.complete" => Handler::Async(runs::complete),
        "runs.get_trace" => Handler::Async(runs::get_trace),
        "runs.list" => Handler::Async(runs::list),
        "runs.start" => Handler::Async(runs::start),
        "runs.subscribe" => Handler::Async(runs::subscribe),
        "session.clear_halt" => Handler::Async(session::clear_halt),
        "session.init" => Handler::Async(session::init),
        "state.exists" => Handler::Async(state::exists),
        "state.get" => Handler::Async(state::get),
        "state.keys" => Handler::Async(state::keys),
        "state.set" => Handler::Async(state::set),
        "state.snapshot" => Handler::Async(state::snapshot),
        "tools.list" => Handler::Async(tools::list),
        "tools.register" => Handler::Async(tools::register),
        "tools.unregister" => Handler::Async(tools::unregister),
        "verify" => Handler::Async(proposal::verify),
        _ => return None,
    })
}

/// Connection teardown: what services must do when a session ends.
pub async fn on_session_closed(
    session: &crate::session::Session,
    state: &crate::state::ServerState,
) {
    runs::on_session_closed(session, state).await;
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

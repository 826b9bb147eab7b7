//! **The method table**: every daemon method, declared once.
//!
//! Each row names the method, the role that may call it, the handshake capability it needs,
//! whether it needs `server.handshake` at all, and its deadline class. From this table:
//! the daemon builds its dispatch map and gates, `capabilities.list` filters its rows,
//! `server.schema` is generated, the client derives its per-call timeouts, and the binding
//! wrappers are generated. A method that is not a row here does not exist (`-32601`).
//!
//! Rows marked [`MethodSpec::debug`] exist only on a daemon started with
//! `--debug-methods`; they let tests drive deadlines, slow handlers and reverse calls
//! through a real daemon and are never advertised otherwise.

use serde::Serialize;

use crate::capabilities;

/// Who may call a method, in the reference's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Only a session bound to an agent identity (`session.auth` with `agent_id`).
    Agent,
    /// A caller that owns the concrete resource; ownership is checked by the handler.
    Owner,
    /// Any authenticated session (the ordinary SDK connection).
    Operator,
    /// Only a host-management session (`session.auth` with `host_token`).
    Host,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Owner => "owner",
            Role::Operator => "operator",
            Role::Host => "host",
        }
    }
}

/// The role a session holds, derived from how it authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CallerRole {
    /// Bound to an agent identity.
    Agent,
    /// Authenticated with the daemon token (or auth off), bound to nothing.
    Operator,
    /// Authenticated with the host token.
    Host,
}

impl CallerRole {
    pub fn as_str(self) -> &'static str {
        match self {
            CallerRole::Agent => "agent",
            CallerRole::Operator => "operator",
            CallerRole::Host => "host",
        }
    }

    /// Which rows `capabilities.list` shows this caller (the reference's filtering rule):
    /// an agent sees agent, owner and operator rows; an unbound session sees operator
    /// rows; a host session sees host, owner and operator rows.
    pub fn sees(self, role: Role) -> bool {
        match self {
            CallerRole::Agent => role != Role::Host,
            CallerRole::Operator => role == Role::Operator,
            CallerRole::Host => role != Role::Agent,
        }
    }

    /// Whether dispatch lets this caller run a method of `role`. Owner methods are
    /// admitted here and checked against the concrete resource by their handler.
    pub fn may_call(self, role: Role) -> bool {
        match role {
            Role::Operator | Role::Owner => true,
            Role::Agent => self == CallerRole::Agent,
            Role::Host => self == CallerRole::Host,
        }
    }
}

/// How long a call may run, which sets the daemon's handler deadline and the client's
/// read timeout (DECISIONS 15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadlineClass {
    /// Answered inline by the connection's reader, before any other frame is read.
    Immediate,
    /// The daemon's handler deadline (30 min, `CAR_HANDLER_TIMEOUT`); client adds 30 s grace.
    Standard,
    /// Inference: the client holds an idle timeout reset by `infer.progress` events.
    Inference,
    /// Derived from the submitted proposal's action budgets.
    Proposal,
}

/// One row of the method table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MethodSpec {
    pub name: &'static str,
    pub role: Role,
    /// The handshake capability the session must have negotiated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capability: Option<&'static str>,
    /// The method refuses with `-32005` until the session negotiated the protocol.
    pub handshake_required: bool,
    pub deadline: DeadlineClass,
    /// Only present on a daemon started with `--debug-methods`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub debug: bool,
    /// One sentence for humans and generated docs.
    pub summary: &'static str,
}

const fn row(
    name: &'static str,
    role: Role,
    deadline: DeadlineClass,
    summary: &'static str,
) -> MethodSpec {
    MethodSpec {
        name,
        role,
        capability: None,
        handshake_required: false,
        deadline,
        debug: false,
        summary,
    }
}

const fn handshake_gated(mut spec: MethodSpec) -> MethodSpec {
    spec.handshake_required = true;
    spec
}

const fn capability_gated(mut spec: MethodSpec, capability: &'static str) -> MethodSpec {
    spec.capability = Some(capability);
    spec
}

const fn debug_only(mut spec: MethodSpec) -> MethodSpec {
    spec.debug = true;
    spec
}

use DeadlineClass::{Immediate, Inference, Proposal, Standard};
use Role::{Host, Operator, Owner};

/// Every daemon method, sorted by name. Later issues add rows here and nowhere else.
pub const METHODS: &[MethodSpec] = &[
    row(
        "capabilities.list",
        Operator,
        Standard,
        "list the methods this session's role can see, with their roles",
    ),
    row(
        "classify",
        Operator,
        Standard,
        "zero-shot classification of text against labels by embedding similarity",
    ),
    debug_only(row(
        "debug.call_client",
        Operator,
        Standard,
        "send a reverse call to this connection's client and return its answer",
    )),
    debug_only(row(
        "debug.echo",
        Operator,
        Standard,
        "return the params unchanged",
    )),
    debug_only(row(
        "debug.notify_client",
        Operator,
        Standard,
        "send a notification to this connection's client",
    )),
    debug_only(row(
        "debug.sleep",
        Operator,
        Standard,
        "wait for params.ms milliseconds, then return {slept_ms}",
    )),
    row(
        "detokenize",
        Operator,
        Standard,
        "text of token ids under a local model's vocabulary",
    ),
    row(
        "embed",
        Operator,
        Standard,
        "embedding vectors for texts from a local or remote embedding model",
    ),
    row(
        "events.count",
        Operator,
        Standard,
        "the number of events in the durable event log",
    ),
    row(
        "events.query",
        Operator,
        Standard,
        "events newest first, filtered by kinds, ids and time",
    ),
    row(
        "events.stats",
        Operator,
        Standard,
        "event totals by kind and the time span of the log",
    ),
    handshake_gated(row(
        "host.subscribe",
        Host,
        Standard,
        "subscribe this host session to host.event notifications",
    )),
    row(
        "infer",
        Operator,
        Inference,
        "generate text; infer.progress heartbeats while it runs",
    ),
    capability_gated(
        row(
            "infer.cancel",
            Operator,
            Standard,
            "stop a running infer call of this connection",
        ),
        capabilities::INFER_CANCEL_V1,
    ),
    capability_gated(
        row(
            "infer.deadline",
            Operator,
            Standard,
            "stop a running infer call once a deadline passes",
        ),
        capabilities::INFER_DEADLINE_V1,
    ),
    row(
        "infer_stream",
        Operator,
        Inference,
        "generate text with inference.stream.event notifications",
    ),
    row(
        "memory.add_fact",
        Operator,
        Standard,
        "add a fact to this connection's memory graph; returns the new count",
    ),
    row(
        "memory.build_context",
        Operator,
        Standard,
        "a layered context block (constraints, relevant facts, unknowns) within a token budget",
    ),
    row(
        "memory.consolidate",
        Operator,
        Standard,
        "merge duplicate facts and report what merged",
    ),
    row("memory.delete", Operator, Standard, "delete a fact by id"),
    row(
        "memory.fact_count",
        Operator,
        Standard,
        "the number of facts in this connection's memory graph",
    ),
    row(
        "memory.load",
        Operator,
        Standard,
        "replace the memory graph with a snapshot under CAR_HOME/memory",
    ),
    row(
        "memory.persist",
        Operator,
        Standard,
        "write the memory graph to a snapshot under CAR_HOME/memory",
    ),
    row(
        "memory.query",
        Operator,
        Standard,
        "facts ranked by relevance to a query",
    ),
    row(
        "models.list",
        Operator,
        Standard,
        "registered models with their immutable identities",
    ),
    row(
        "models.register",
        Operator,
        Standard,
        "register a local gguf or embedding model, or a remote endpoint",
    ),
    row("models.remove", Operator, Standard, "unregister a model"),
    row(
        "policy.list",
        Operator,
        Standard,
        "this connection's policies, sorted by name",
    ),
    row(
        "policy.register",
        Operator,
        Standard,
        "add a deny_tool, deny_tool_param or require_state policy",
    ),
    row(
        "policy.unregister",
        Operator,
        Standard,
        "remove a policy by name",
    ),
    row(
        "proposal.submit",
        Operator,
        Proposal,
        "run a proposal, calling tools back on this connection",
    ),
    row(
        "runs.complete",
        Operator,
        Standard,
        "complete a run with its outcome",
    ),
    row(
        "runs.get_trace",
        Owner,
        Standard,
        "a run and its trace records",
    ),
    row(
        "runs.list",
        Owner,
        Standard,
        "runs visible to this session, newest first",
    ),
    row(
        "runs.start",
        Operator,
        Standard,
        "start a durable run record, idempotent by key",
    ),
    row(
        "runs.subscribe",
        Owner,
        Standard,
        "receive runs.trace.event notifications",
    ),
    row(
        "server.handshake",
        Operator,
        Immediate,
        "negotiate the exact protocol version and capabilities for this connection",
    ),
    row(
        "server.schema",
        Operator,
        Standard,
        "the method table as a schema document with its sha-256 digest",
    ),
    row(
        "session.auth",
        Operator,
        Immediate,
        "authenticate this connection with the daemon token or the host token",
    ),
    row(
        "session.clear_halt",
        Host,
        Standard,
        "lift this connection's halt after a terminal tool error",
    ),
    row(
        "session.init",
        Operator,
        Standard,
        "register tools and policies in one call",
    ),
    row(
        "skill.find",
        Operator,
        Standard,
        "skills matching a persona, url and task, best first",
    ),
    row(
        "skill.ingest",
        Operator,
        Standard,
        "add or replace a skill in procedural memory",
    ),
    row(
        "skill.report",
        Operator,
        Standard,
        "record a skill outcome; returns its counts and degraded flag",
    ),
    row(
        "skills.list",
        Operator,
        Standard,
        "the skills in memory, optionally for one domain",
    ),
    row(
        "state.exists",
        Operator,
        Standard,
        "whether a state key is set",
    ),
    row("state.get", Operator, Standard, "a state value, or null"),
    row("state.keys", Operator, Standard, "the state keys, sorted"),
    row("state.set", Operator, Standard, "set a state value"),
    row(
        "state.snapshot",
        Operator,
        Standard,
        "the whole state partition as an object",
    ),
    row(
        "tokenize",
        Operator,
        Standard,
        "token ids of text under a local model's vocabulary",
    ),
    row(
        "tools.list",
        Operator,
        Standard,
        "this connection's tools, sorted by name",
    ),
    row(
        "tools.register",
        Operator,
        Standard,
        "register one tool descriptor or an array of them",
    ),
    row(
        "tools.unregister",
        Operator,
        Standard,
        "remove a tool by name",
    ),
    row(
        "verify",
        Operator,
        Standard,
        "check a proposal without running it",
    ),
];

/// The rows a daemon serves: all of them with `debug`, else the non-debug rows.
pub fn active(debug: bool) -> impl Iterator<Item = &'static MethodSpec> {
    METHODS.iter().filter(move |m| debug || !m.debug)
}

/// Looks a method up in the full table (callers check [`MethodSpec::debug`]).
pub fn lookup(name: &str) -> Option<&'static MethodSpec> {
    METHODS
        .binary_search_by(|m| m.name.cmp(name))
        .ok()
        .map(|i| &METHODS[i])
}

/// The capability names the table's gates refer to must be ones the daemon supports.
pub fn referenced_capabilities() -> impl Iterator<Item = &'static str> {
    METHODS.iter().filter_map(|m| m.capability)
}

/// Checked by tests: a capability gate on an unsupported capability would be unreachable.
pub fn gates_are_supported() -> bool {
    referenced_capabilities().all(capabilities::is_supported)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_unique_and_consistent() {
        for pair in METHODS.windows(2) {
            assert!(
                pair[0].name < pair[1].name,
                "{} !< {}",
                pair[0].name,
                pair[1].name
            );
        }
        assert!(gates_are_supported());
        for m in METHODS {
            assert!(
                !m.summary.is_empty() && !m.summary.ends_with('.'),
                "{}",
                m.name
            );
            assert_eq!(lookup(m.name), Some(m));
        }
        assert_eq!(lookup("nope"), None);
    }

    #[test]
    fn role_filtering_follows_the_reference() {
        use CallerRole as C;
        assert!(C::Operator.sees(Role::Operator));
        assert!(!C::Operator.sees(Role::Host) && !C::Operator.sees(Role::Owner));
        assert!(!C::Operator.sees(Role::Agent));
        assert!(
            C::Host.sees(Role::Host) && C::Host.sees(Role::Owner) && !C::Host.sees(Role::Agent)
        );
        assert!(
            C::Agent.sees(Role::Agent) && C::Agent.sees(Role::Owner) && !C::Agent.sees(Role::Host)
        );
        assert!(!C::Operator.may_call(Role::Host) && C::Host.may_call(Role::Host));
        assert!(!C::Host.may_call(Role::Agent) && C::Agent.may_call(Role::Agent));
    }

    #[test]
    fn debug_rows_are_hidden_by_default() {
        assert!(active(false).all(|m| !m.debug));
        assert!(active(true).count() > active(false).count());
    }
}

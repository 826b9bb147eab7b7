//! The columns every declaration has: who may call it, which gates it passes, how long it
//! may run.

use serde::Serialize;

/// CAR's role label for a method (`capabilities.json`), published by `capabilities.list`.
///
/// Enforcement (docs/security.md, "One access rule per method"): `host` methods need a session
/// authenticated with the host token; `owner` methods are admitted and check the concrete
/// resource's owner in their handler; `agent` and `operator` methods are callable by any
/// authenticated session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Meant for a session bound to an agent identity.
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

    /// Whether dispatch lets this caller run a method labelled `role`: only `host`
    /// methods are refused by label (to a non-host session); owner methods check the
    /// resource in their handler.
    pub fn may_call(self, role: Role) -> bool {
        role != Role::Host || self == CallerRole::Host
    }
}

/// How long a call may run: the daemon's handler deadline and the client's read timeout.
///
/// - `Immediate`: answered inline by the connection's reader, before any other frame is read; the
///   client waits the standard bound.
/// - `Standard`: the daemon's handler deadline (30 min, `CAR_HANDLER_TIMEOUT`); the client adds 30
///   s of grace.
/// - `Inference`: the client holds an idle window reset by `infer.progress` heartbeats and stream
///   events instead of an absolute deadline.
/// - `Proposal`: derived from the submitted proposal's action budgets
///   ([`crate::deadline::proposal_budget`]), on both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadlineClass {
    Immediate,
    Standard,
    Inference,
    Proposal,
}

/// The columns of one declaration.
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
    /// Who may call it and on whose rows it acts (every declaration states one; the
    /// `method!` macro does not compile without it).
    pub access: Access,
}

impl MethodSpec {
    /// A standard-deadline method with CAR's `role` label.
    pub const fn new(name: &'static str, role: Role, summary: &'static str) -> Self {
        MethodSpec {
            name,
            role,
            capability: None,
            handshake_required: false,
            deadline: DeadlineClass::Standard,
            debug: false,
            summary,
            access: Access::daemon(),
        }
    }

    /// Sets the access rule (the `method!` macro calls this with the declaration's
    /// `access:` line).
    pub const fn with_access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    pub const fn deadline(mut self, deadline: DeadlineClass) -> Self {
        self.deadline = deadline;
        self
    }

    /// Refused with `-32005` until `server.handshake` succeeded.
    pub const fn handshake(mut self) -> Self {
        self.handshake_required = true;
        self
    }

    /// Refused with `-32008` unless `capability` was negotiated.
    pub const fn capability(mut self, capability: &'static str) -> Self {
        self.capability = Some(capability);
        self
    }

    /// Only on a daemon started with `--debug-methods`.
    pub const fn debug(mut self) -> Self {
        self.debug = true;
        self
    }
}

/// An `operator` method (CAR's label).
pub const fn op(name: &'static str, summary: &'static str) -> MethodSpec {
    MethodSpec::new(name, Role::Operator, summary)
}

/// An `agent` method (CAR's label; callable by any authenticated session).
pub const fn agent(name: &'static str, summary: &'static str) -> MethodSpec {
    MethodSpec::new(name, Role::Agent, summary)
}

/// An `owner` method (CAR's label; the handler checks the resource's owner).
pub const fn owner(name: &'static str, summary: &'static str) -> MethodSpec {
    MethodSpec::new(name, Role::Owner, summary)
}

/// A `host` method (needs a host-management session).
pub const fn host(name: &'static str, summary: &'static str) -> MethodSpec {
    MethodSpec::new(name, Role::Host, summary)
}

/// Whose rows a method reads or changes, which decides what dispatch and the handler let
/// each principal do (docs/security.md, "Principals").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "resource")]
pub enum Scope {
    /// Daemon-wide state or behaviour with no per-principal rows (the server's status,
    /// tools, policies, inference).
    Daemon,
    /// The calling connection's own state (handshake, auth, subscriptions, `state.*`).
    Session,
    /// Rows that belong to a principal: an agent session sees and changes only its own;
    /// operator and host sessions see all.
    Owned(Resource),
}

/// A kind of row that belongs to a principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    Agents,
    AgentLogs,
    Approvals,
    Events,
    Goals,
    Memory,
    Messages,
    Models,
    Runs,
    Secrets,
    Supervision,
    Tasks,
    Workflows,
}

/// A params field whose values under some prefixes only the daemon itself may use (e.g.
/// `host.notify {kind: "approval.resolved"}`): dispatch refuses them with `-32602` before
/// the handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Reserved {
    pub field: &'static str,
    pub prefixes: &'static [&'static str],
}

impl Reserved {
    /// Whether `value` falls under a reserved prefix (compared case-insensitively and
    /// after trimming, so ` Approval.x` cannot slip past).
    pub fn covers(&self, value: &str) -> bool {
        let lower = value.trim().to_ascii_lowercase();
        self.prefixes.iter().any(|p| lower.starts_with(p))
    }
}

/// One method's whole access rule, beside CAR's [`Role`] label: dispatch enforces it
/// before any handler runs (role, observer, grant, gate, reserved values); the handler
/// applies [`Scope::Owned`] to the rows it touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Access {
    pub scope: Scope,
    /// A read the dashboard's observer session may call.
    pub observer: bool,
    /// Waits for a host's approval by default (`--approval-methods` overrides the set).
    pub gated: bool,
    /// May be carried by a consumer grant (`session.consumer.issue`).
    pub grantable: bool,
    /// An agent session may call it (true unless declared [`Access::not_for_agents`]).
    pub agents: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved: Option<Reserved>,
}

impl Access {
    const fn scoped(scope: Scope) -> Self {
        Access {
            scope,
            observer: false,
            gated: false,
            grantable: false,
            agents: true,
            reserved: None,
        }
    }

    /// Daemon-wide: no per-principal rows.
    pub const fn daemon() -> Self {
        Self::scoped(Scope::Daemon)
    }

    /// The calling connection's own state.
    pub const fn session() -> Self {
        Self::scoped(Scope::Session)
    }

    /// Rows of `resource`, owner-scoped for agents.
    pub const fn owned(resource: Resource) -> Self {
        Self::scoped(Scope::Owned(resource))
    }

    /// The observer (dashboard) session may call it: a read.
    pub const fn observer(mut self) -> Self {
        self.observer = true;
        self
    }

    /// Held for a host's approval by default.
    pub const fn gated(mut self) -> Self {
        self.gated = true;
        self
    }

    /// A consumer grant may carry it.
    pub const fn grantable(mut self) -> Self {
        self.grantable = true;
        self
    }

    /// Agent sessions may not call it (stricter than CAR, docs/security.md): dispatch
    /// refuses them with `agent_not_allowed` before the handler runs.
    pub const fn not_for_agents(mut self) -> Self {
        self.agents = false;
        self
    }

    /// Values of params field `field` under `prefixes` are the daemon's own.
    pub const fn reserved(
        mut self,
        field: &'static str,
        prefixes: &'static [&'static str],
    ) -> Self {
        self.reserved = Some(Reserved { field, prefixes });
        self
    }

    /// Whether `params` uses a reserved value (the field read at the top level).
    pub fn is_reserved(&self, params: &serde_json::Value) -> bool {
        self.reserved.is_some_and(|r| {
            params
                .get(r.field)
                .and_then(serde_json::Value::as_str)
                .is_some_and(|v| r.covers(v))
        })
    }
}

//! One connection's session: who it is (auth state, role, namespace), what it negotiated,
//! how to reach its peer (the outbound queue), and its table of reverse calls.
//!
//! Services receive an `Arc<Session>`; they never touch the socket. Reverse calls
//! (daemon → client requests such as `tools.execute`) get ids `"cb-<n>"`, unique per
//! daemon process (docs/protocol-choices.md, "Reverse calls and heartbeats"); each waits on a
//! oneshot in [`ReverseCalls`]. When the connection dies the table is failed as a whole, so no
//! reverse call outlives its peer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use car_proto::errors::RpcError;
use car_proto::jsonrpc::{notification_frame, request_frame};
use car_proto::methods::CallerRole;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::state::outbound::Outbound;
use crate::state::per_connection::Runtime;

/// Ids for daemon-originated requests, shared by every session of the process.
static NEXT_CALLBACK_ID: AtomicU64 = AtomicU64::new(1);

/// How this session authenticated.
#[derive(Debug, Clone)]
pub struct Identity {
    pub authenticated: bool,
    pub role: CallerRole,
    pub agent_id: Option<String>,
    pub memory_namespace: Option<String>,
    /// The bound agent's `method_allowlist`: when present, dispatch refuses every other
    /// method (`session.auth` and `server.handshake` always pass).
    pub method_allowlist: Option<std::sync::Arc<[String]>>,
    /// Authenticated with the dashboard's read-only token: host visibility, and dispatch
    /// admits only the methods declared `observer`.
    pub observer: bool,
    /// The inference-consumer grant this socket authenticated with.
    pub grant: Option<std::sync::Arc<crate::state::consumer_grants::Grant>>,
}

impl Identity {
    /// The memory graph this identity reads and writes (docs/protocol-choices.md, "Memory
    /// scope"): its namespace, else its agent's graph, else the shared one.
    pub fn memory_scope(&self) -> car_memory::Scope {
        match (&self.memory_namespace, &self.agent_id) {
            (Some(ns), _) => car_memory::Scope::Namespace(ns.clone()),
            (None, Some(agent)) => car_memory::Scope::Agent(agent.clone()),
            (None, None) => car_memory::Scope::Shared,
        }
    }

    /// The principal that owns what this identity starts (runs, prompt tasks):
    /// `agent:<id>` for a session bound to an agent, `user` otherwise.
    pub fn owner_key(&self) -> String {
        match (&self.role, &self.agent_id) {
            (CallerRole::Agent, Some(agent)) => format!("agent:{agent}"),
            _ => "user".into(),
        }
    }
}

/// Per-connection state.
#[derive(Debug)]
pub struct Session {
    pub id: u64,
    /// `tcp` or `unix`, for logs.
    pub transport: &'static str,
    identity: Mutex<Identity>,
    negotiated: Mutex<Option<Vec<String>>>,
    /// The `client_version` the client reported in `server.handshake`.
    client_version: Mutex<Option<String>>,
    /// The `host.subscribe` forwarder's stop token (a new subscription replaces it).
    host_subscription: Mutex<Option<CancellationToken>>,
    outbound: Outbound,
    reverse: ReverseCalls,
    runtime: Mutex<Runtime>,
    /// Runs started on this connection and not yet completed (marked incomplete on close).
    open_runs: Mutex<Vec<String>>,
    /// `runs.subscribe` subscriptions (the run, or every run), each stopped by its token.
    run_subscriptions: Mutex<Vec<(Option<String>, CancellationToken)>>,
    /// `tools.execute` calls waiting for their answer, oldest first.
    callbacks: Mutex<Vec<ActiveCallback>>,
    /// Cancelled when the connection ends; long-lived session tasks watch it.
    pub closed: CancellationToken,
    /// Cancelled once the session has authenticated (lifts the pre-auth budget,
    /// `crate::state::pre_auth`).
    authenticated: CancellationToken,
    /// The pre-auth slot (`crate::state::pre_auth`), given back at authentication or teardown.
    pre_auth_slot: Mutex<Option<tokio::sync::OwnedSemaphorePermit>>,
    /// Cancelled to make the daemon close this connection ([`Session::evict`]).
    evicted: CancellationToken,
    evict_reason: Mutex<(u16, String)>,
    /// What this session's built-in tools have read (their read-before-edit guard).
    read_ledger: car_builtin_tools::ReadLedger,
    /// The root this session's built-in tools act under, when it is not the daemon's (a
    /// declarative agent's scratch workspace).
    workspace: std::sync::OnceLock<Arc<car_builtin_tools::Workspace>>,
    /// Open `session.policy.open` ids.
    policy_scopes: Mutex<std::collections::BTreeSet<String>>,
    /// The standing permission tier proposals on this connection are judged against
    /// (`permission.*`; default `sandbox_edit`).
    permission_tier: Mutex<car_proto::methods::permission::Tier>,
}

/// Policy-scoping ids one connection may hold open.
pub const MAX_POLICY_SCOPES: usize = 1024;

impl Session {
    /// A session that starts authenticated (auth off: every session may call everything)
    /// or unauthenticated (auth on).
    pub fn new(
        id: u64,
        transport: &'static str,
        auth_enabled: bool,
        outbound: Outbound,
        closed: CancellationToken,
        authenticated: CancellationToken,
        pre_auth_slot: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Self {
        if !auth_enabled {
            authenticated.cancel();
        }
        let identity = Identity {
            authenticated: !auth_enabled,
            role: if auth_enabled {
                CallerRole::Operator
            } else {
                CallerRole::Host
            },
            agent_id: None,
            memory_namespace: None,
            method_allowlist: None,
            observer: false,
            grant: None,
        };
        Session {
            id,
            transport,
            identity: Mutex::new(identity),
            negotiated: Mutex::new(None),
            client_version: Mutex::new(None),
            host_subscription: Mutex::new(None),
            outbound,
            reverse: ReverseCalls::default(),
            runtime: Mutex::new(Runtime::default()),
            open_runs: Mutex::new(Vec::new()),
            run_subscriptions: Mutex::new(Vec::new()),
            callbacks: Mutex::new(Vec::new()),
            closed,
            authenticated,
            pre_auth_slot: Mutex::new(if auth_enabled { pre_auth_slot } else { None }),
            evicted: CancellationToken::new(),
            evict_reason: Mutex::new((1000, String::new())),
            read_ledger: car_builtin_tools::ReadLedger::new(),
            workspace: std::sync::OnceLock::new(),
            policy_scopes: Mutex::new(Default::default()),
            permission_tier: Mutex::new(car_proto::methods::permission::Tier::SandboxEdit),
        }
    }

    /// Asks the connection to close (code 1000, `reason`), e.g. when a newer connection
    /// took over this session's agent identity.
    pub fn evict(&self, reason: &str) {
        self.evict_with(1000, reason);
    }

    /// Gives the pre-auth slot back (authenticated, or the connection ended).
    pub fn release_pre_auth_slot(&self) {
        self.pre_auth_slot.lock().expect("slot lock").take();
    }

    /// [`Session::evict`] with a chosen Close code.
    pub fn evict_with(&self, code: u16, reason: &str) {
        *self.evict_reason.lock().expect("evict lock") = (code, reason.to_string());
        self.evicted.cancel();
    }

    /// Resolves when [`Session::evict`] was called; yields the Close code and reason.
    pub async fn evicted(&self) -> (u16, String) {
        self.evicted.cancelled().await;
        self.evict_reason.lock().expect("evict lock").clone()
    }

    /// Opens a policy-scoping id (at most [`MAX_POLICY_SCOPES`] per connection).
    pub fn open_policy_scope(&self, id: &str) -> Result<(), RpcError> {
        let mut scopes = self.policy_scopes.lock().expect("scopes lock");
        if scopes.len() >= MAX_POLICY_SCOPES {
            return Err(RpcError::invalid_params(format!(
                "a connection may hold at most {MAX_POLICY_SCOPES} open policy sessions"
            )));
        }
        scopes.insert(id.to_string());
        Ok(())
    }

    /// Closes a policy-scoping id; false when it was not open.
    pub fn close_policy_scope(&self, id: &str) -> bool {
        self.policy_scopes.lock().expect("scopes lock").remove(id)
    }

    /// The standing permission tier (`permission.get_tier`).
    pub fn permission_tier(&self) -> car_proto::methods::permission::Tier {
        *self.permission_tier.lock().expect("tier lock")
    }

    pub fn set_permission_tier(&self, tier: car_proto::methods::permission::Tier) {
        *self.permission_tier.lock().expect("tier lock") = tier;
    }

    pub fn read_ledger(&self) -> &car_builtin_tools::ReadLedger {
        &self.read_ledger
    }

    /// Roots this session's built-in tools at `workspace` instead of the daemon's (once).
    pub fn set_workspace(&self, workspace: Arc<car_builtin_tools::Workspace>) {
        let _ = self.workspace.set(workspace);
    }

    /// The root this session's built-in tools act under, when it has its own.
    pub fn workspace(&self) -> Option<Arc<car_builtin_tools::Workspace>> {
        self.workspace.get().cloned()
    }

    pub fn identity(&self) -> Identity {
        self.identity.lock().expect("identity lock").clone()
    }

    /// Runs `f` on the identity under its lock, without cloning it (dispatch's gates run
    /// this on every call). `f` must not block.
    pub fn with_identity<R>(&self, f: impl FnOnce(&Identity) -> R) -> R {
        f(&self.identity.lock().expect("identity lock"))
    }

    pub fn set_identity(&self, identity: Identity) {
        let authenticated = identity.authenticated;
        *self.identity.lock().expect("identity lock") = identity;
        if authenticated {
            self.authenticated.cancel();
            self.release_pre_auth_slot();
        }
    }

    /// The negotiated capabilities, or `None` before a successful `server.handshake`.
    pub fn negotiated(&self) -> Option<Vec<String>> {
        self.negotiated.lock().expect("negotiated lock").clone()
    }

    /// Runs `f` on the negotiated capabilities (`None` before the handshake) under their
    /// lock, without cloning them. `f` must not block.
    pub fn with_negotiated<R>(&self, f: impl FnOnce(Option<&[String]>) -> R) -> R {
        f(self.negotiated.lock().expect("negotiated lock").as_deref())
    }

    pub fn set_negotiated(&self, caps: Vec<String>) {
        *self.negotiated.lock().expect("negotiated lock") = Some(caps);
    }

    pub fn client_version(&self) -> Option<String> {
        self.client_version
            .lock()
            .expect("client version lock")
            .clone()
    }

    pub fn set_client_version(&self, version: String) {
        *self.client_version.lock().expect("client version lock") = Some(version);
    }

    /// The execution-session id stamped on reverse calls when the caller names none.
    pub fn label(&self) -> String {
        format!("sess-{}", self.id)
    }

    /// The agent this connection is bound to, if any.
    pub fn agent_id(&self) -> Option<String> {
        self.with_identity(|identity| identity.agent_id.clone())
    }

    /// This connection as an approval party: its label, the credential it authenticated
    /// with (every socket holding the same token shares it) and whether that is the host
    /// token (not the dashboard's observer view of it).
    pub fn principal(&self) -> crate::state::host_state::Principal {
        self.with_identity(|identity| {
            let is_host = identity.role == CallerRole::Host && !identity.observer;
            let credential = if identity.observer {
                "observer".to_string()
            } else if let Some(grant) = &identity.grant {
                format!("grant:{}", grant.consumer_id)
            } else {
                match identity.role {
                    CallerRole::Host => "host".to_string(),
                    CallerRole::Operator => "operator".to_string(),
                    CallerRole::Agent => {
                        format!("agent:{}", identity.agent_id.as_deref().unwrap_or(""))
                    }
                }
            };
            crate::state::host_state::Principal {
                session: self.label(),
                credential,
                is_host,
            }
        })
    }

    /// Runs `f` on this connection's runtime under its lock. `f` must not block.
    pub fn runtime<R>(&self, f: impl FnOnce(&mut Runtime) -> R) -> R {
        f(&mut self.runtime.lock().expect("runtime lock"))
    }

    /// Remembers a run started on this connection.
    pub fn track_run(&self, run_id: &str) {
        self.open_runs
            .lock()
            .expect("runs lock")
            .push(run_id.to_string());
    }

    /// Forgets a run that was completed.
    pub fn untrack_run(&self, run_id: &str) {
        self.open_runs
            .lock()
            .expect("runs lock")
            .retain(|r| r != run_id);
    }

    /// The run this connection started most recently and has not completed: proposals
    /// submitted on the connection are recorded under it.
    pub fn current_run(&self) -> Option<String> {
        self.open_runs.lock().expect("runs lock").last().cloned()
    }

    /// Whether the session negotiated `capability` in its handshake.
    pub fn negotiated_capability(&self, capability: &str) -> bool {
        self.negotiated
            .lock()
            .expect("negotiated lock")
            .as_ref()
            .is_some_and(|caps| caps.iter().any(|c| c == capability))
    }

    /// Remembers a `runs.subscribe` subscription, replacing an earlier one for the same
    /// run (one subscriber per connection and run); the returned token stops it.
    pub fn add_run_subscription(&self, run_id: Option<String>) -> CancellationToken {
        let stop = self.closed.child_token();
        let mut subs = self.run_subscriptions.lock().expect("subscriptions lock");
        subs.retain(|(r, old)| {
            let same = *r == run_id;
            if same {
                old.cancel();
            }
            !same
        });
        subs.push((run_id, stop.clone()));
        stop
    }

    /// A `tools.execute` call for `action_id` (of a proposal recorded under `run_id`) is
    /// waiting for its answer.
    pub fn begin_callback(&self, request_id: &str, action_id: &str, run_id: Option<&str>) {
        self.callbacks
            .lock()
            .expect("callbacks lock")
            .push(ActiveCallback {
                request_id: request_id.to_string(),
                action_id: action_id.to_string(),
                run_id: run_id.map(str::to_string),
            });
    }

    /// The call ended; false when it had already been withdrawn.
    pub fn end_callback(&self, request_id: &str) -> bool {
        let mut calls = self.callbacks.lock().expect("callbacks lock");
        let before = calls.len();
        calls.retain(|c| c.request_id != request_id);
        calls.len() != before
    }

    /// Withdraws the waiting calls of `run_id`'s proposals, oldest first: each waiter is
    /// answered with `error` (the caller tells the client with `tools.cancel`).
    pub fn withdraw_callbacks(&self, run_id: &str, error: &RpcError) -> Vec<ActiveCallback> {
        let withdrawn: Vec<ActiveCallback> = {
            let mut calls = self.callbacks.lock().expect("callbacks lock");
            let (mine, rest) = std::mem::take(&mut *calls)
                .into_iter()
                .partition(|c| c.run_id.as_deref() == Some(run_id));
            *calls = rest;
            mine
        };
        for c in &withdrawn {
            if let Some(tx) = self.reverse.remove(&c.request_id) {
                let _ = tx.send(Err(error.clone()));
            }
        }
        withdrawn
    }

    /// Stops the subscriptions to `run_id` (`None`: the all-runs one); true if any.
    pub fn remove_run_subscriptions(&self, run_id: Option<&str>) -> bool {
        let mut subs = self.run_subscriptions.lock().expect("subscriptions lock");
        let before = subs.len();
        subs.retain(|(r, stop)| {
            let matches = r.as_deref() == run_id;
            if matches {
                stop.cancel();
            }
            !matches
        });
        subs.len() != before
    }

    /// The runs still open when the connection ends.
    pub fn take_open_runs(&self) -> Vec<String> {
        std::mem::take(&mut *self.open_runs.lock().expect("runs lock"))
    }

    /// Stops this session's `host.event` forwarder, if any, and returns the stop token
    /// of the one that replaces it.
    pub fn replace_host_subscription(&self) -> CancellationToken {
        let stop = self.closed.child_token();
        if let Some(old) = self
            .host_subscription
            .lock()
            .expect("host subscription lock")
            .replace(stop.clone())
        {
            old.cancel();
        }
        stop
    }

    pub fn outbound(&self) -> &Outbound {
        &self.outbound
    }

    /// Forwards a broadcast channel to this peer as `method` notifications until the
    /// connection closes: `to_params` picks and shapes each item (`None` skips it). Shared
    /// by every subscription method (`host.subscribe`, `runs.subscribe`).
    pub fn forward<T, F>(
        self: &std::sync::Arc<Self>,
        items: tokio::sync::broadcast::Receiver<T>,
        method: &'static str,
        to_params: F,
    ) where
        T: Clone + Send + 'static,
        F: Fn(&Session, T) -> Option<Value> + Send + 'static,
    {
        self.forward_until(items, method, to_params, self.closed.child_token());
    }

    /// [`Session::forward`] until `stop` is cancelled (or the connection ends).
    pub fn forward_until<T, F>(
        self: &std::sync::Arc<Self>,
        mut items: tokio::sync::broadcast::Receiver<T>,
        method: &'static str,
        to_params: F,
        stop: CancellationToken,
    ) where
        T: Clone + Send + 'static,
        F: Fn(&Session, T) -> Option<Value> + Send + 'static,
    {
        use tokio::sync::broadcast::error::RecvError;
        let session = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    // A stopped subscription forwards nothing more, even when items wait.
                    biased;
                    _ = stop.cancelled() => break,
                    _ = session.closed.cancelled() => break,
                    item = items.recv() => match item {
                        Ok(item) => {
                            if let Some(params) = to_params(&session, item) {
                                if !session.notify(method, &params) {
                                    break;
                                }
                            }
                        }
                        Err(RecvError::Lagged(n)) => tracing::warn!(session = session.id, missed = n, method, "subscriber lagged"),
                        Err(RecvError::Closed) => break,
                    }
                }
            }
        });
    }

    /// Sends a notification to the peer; false when the connection is gone.
    pub fn notify(&self, method: &str, params: &Value) -> bool {
        self.outbound.send_text(notification_frame(method, params))
    }

    /// A fresh daemon-originated request id, `"cb-<n>"`.
    pub fn next_callback_id() -> String {
        format!("cb-{}", NEXT_CALLBACK_ID.fetch_add(1, Ordering::Relaxed))
    }

    /// Sends a request to the peer and waits for its answer: `Ok(Ok(result))`,
    /// `Ok(Err(the peer's error object))`, or `Err` when the call could not complete
    /// (timeout, connection closed).
    pub async fn call_client(
        &self,
        method: &str,
        params: &Value,
        timeout: Duration,
    ) -> Result<Result<Value, RpcError>, ReverseCallError> {
        self.call_client_as(Self::next_callback_id(), method, params, timeout)
            .await
    }

    /// [`Session::call_client`] with a caller-chosen id (from [`Session::next_callback_id`]),
    /// for params that must carry their own request id.
    pub async fn call_client_as(
        &self,
        id: String,
        method: &str,
        params: &Value,
        timeout: Duration,
    ) -> Result<Result<Value, RpcError>, ReverseCallError> {
        let rx = self.reverse.insert(id.clone());
        // Removes the table entry however this future ends: answered, timed out, or
        // dropped by an enclosing timeout or an aborted handler.
        let _pending = PendingEntry {
            table: &self.reverse,
            id: id.clone(),
        };
        if !self
            .outbound
            .send_text(request_frame(&Value::String(id.clone()), method, params))
        {
            return Err(ReverseCallError::Closed);
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(ReverseCallError::Closed),
            Err(_) => Err(ReverseCallError::TimedOut(timeout)),
        }
    }

    /// Routes a response frame from the peer to the reverse call waiting for it.
    pub fn complete_reverse_call(&self, id: &Value, outcome: Result<Value, RpcError>) {
        let waiter = id.as_str().and_then(|id| self.reverse.remove(id));
        match waiter {
            Some(tx) => {
                let _ = tx.send(outcome);
            }
            None => {
                tracing::debug!(session = self.id, %id, "response to an unknown reverse-call id dropped")
            }
        }
    }

    /// Fails every pending reverse call at once (the connection ended).
    pub fn fail_reverse_calls(&self) {
        self.reverse.clear();
    }
}

/// A `tools.execute` call waiting for its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveCallback {
    pub request_id: String,
    pub action_id: String,
    pub run_id: Option<String>,
}

type Waiter = oneshot::Sender<Result<Value, RpcError>>;

struct PendingEntry<'a> {
    table: &'a ReverseCalls,
    id: String,
}

impl Drop for PendingEntry<'_> {
    fn drop(&mut self) {
        self.table.remove(&self.id);
    }
}

/// `request id → waiter` for daemon → client requests.
#[derive(Debug, Default)]
struct ReverseCalls {
    waiting: Mutex<HashMap<String, Waiter>>,
}

impl ReverseCalls {
    fn insert(&self, id: String) -> oneshot::Receiver<Result<Value, RpcError>> {
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().expect("reverse lock").insert(id, tx);
        rx
    }

    fn remove(&self, id: &str) -> Option<Waiter> {
        self.waiting.lock().expect("reverse lock").remove(id)
    }

    fn clear(&self) {
        // Dropping the senders wakes every waiter with a closed-channel error.
        let drained: Vec<Waiter> = self
            .waiting
            .lock()
            .expect("reverse lock")
            .drain()
            .map(|(_, tx)| tx)
            .collect();
        drop(drained);
    }
}

/// Why a reverse call produced no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReverseCallError {
    #[error("the connection closed before the client answered")]
    Closed,
    #[error("the client did not answer within {}ms", .0.as_millis())]
    TimedOut(Duration),
}

//! The public async client: lazy connect, auth and handshake, calls, handler registration,
//! reconnect and close.
//!
//! This module owns the connection lifecycle. A [`Client`] holds at most one operator
//! connection (authenticated with the daemon token) and one host-management connection
//! (authenticated with the host token), each opened on first use and re-opened by the next
//! call after it dropped. Opening runs discovery afresh (so a restarted daemon's new token
//! is read), sends `session.auth` when a token exists and awaits it, then `server.handshake`
//! requiring [`CLIENT_REQUIRED`](car_proto::capabilities::CLIENT_REQUIRED) and requesting
//! [`CLIENT_OPTIONAL`](car_proto::capabilities::CLIENT_OPTIONAL); any refusal, malformed
//! success, missing capability or timeout fails closed with [`Error::Handshake`] and the
//! socket is dropped unused. Handlers live in a registry shared by every connection, so
//! they survive reconnects. Each operator connection that opens gets the next
//! [`Client::connection_epoch`], so callers can tell a new daemon session (whose
//! per-connection state starts afresh) from the old one. [`Client::disconnect`] drops the
//! connections and the next call reconnects — what every binding's `close()` does (CAR's
//! rule) — while [`Client::close`] ends the client for good. Typed members
//! ([`Client::call_member`]) run `typed` around an ordinary call. [`Client::notify`] sends
//! a notification (no id, no answer) on the operator connection. The connect sequence
//! itself, including the `session.auth` frame (an agent identity's token replacing the
//! daemon token), is the `connect` submodule. It must not touch the socket directly
//! (that is `connection`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use car_proto::handshake::HandshakeReply;
use car_proto::methods::{self, Role};
use serde_json::Value;

use crate::connection::Connection;
use crate::discovery::{AgentIdentity, Endpoint, EnvSnapshot, Overrides, Secret};
use crate::error::Error;
use crate::handlers::{self, HandlerRegistry, HandlerResult, ToolCall, ToolCancel};
use crate::timeouts::{self, TimeoutPolicy, Wait};
use crate::typed::{self, Naming, Projected};

mod connect;
mod extensions;
mod host;

pub(crate) use extensions::LocalRoute;
use extensions::{Extensions, LocalRoutes};

/// How to find, authenticate to and wait for the daemon.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Explicit settings; each wins over the environment.
    pub overrides: Overrides,
    /// The environment discovery reads (captured at construction).
    pub env: EnvSnapshot,
    pub timeouts: TimeoutPolicy,
    /// Sent as `client_version` in `server.handshake`.
    pub client_version: String,
}

impl ClientConfig {
    /// Discovery from this process's environment.
    pub fn from_env() -> Self {
        Self::with_env(EnvSnapshot::from_process())
    }

    /// Discovery from an explicit environment snapshot (what tests use).
    pub fn with_env(env: EnvSnapshot) -> Self {
        Self {
            overrides: Overrides::default(),
            timeouts: TimeoutPolicy::with_env(&env),
            env,
            client_version: format!("car-daemon-client/{}", car_proto::CAR_VERSION),
        }
    }

    /// The daemon URL, overriding `CAR_DAEMON_URL`.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.overrides.url = Some(url.into());
        self
    }

    /// The token, overriding `CAR_AUTH_TOKEN` and the token file.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.overrides.token = Some(Secret::new(token.into()));
        self
    }

    /// Authenticate as the lifecycle agent `agent_id` with its own `token`, overriding
    /// `CAR_AGENT_ID` / `CAR_AGENT_TOKEN`: `session.auth` then sends `{token, agent_id}`
    /// with this token in place of the daemon token.
    pub fn agent(mut self, agent_id: impl Into<String>, token: impl Into<String>) -> Self {
        self.overrides.agent = Some(AgentIdentity::new(agent_id, token));
        self
    }

    /// The memory namespace, overriding `CAR_MEMORY_NAMESPACE`.
    pub fn memory_namespace(mut self, ns: impl Into<String>) -> Self {
        self.overrides.memory_namespace = Some(ns.into());
        self
    }

    pub fn timeouts(mut self, timeouts: TimeoutPolicy) -> Self {
        self.timeouts = timeouts;
        self
    }
}

/// Per-call settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallOptions {
    /// Replaces the wait the method's deadline class would give it.
    pub wait: Option<Wait>,
}

impl CallOptions {
    /// Give up `after` this long.
    pub fn timeout(after: std::time::Duration) -> Self {
        Self {
            wait: Some(Wait::Absolute(after)),
        }
    }

    /// Give up after `window` without an answer or a progress event.
    pub fn idle_timeout(window: std::time::Duration) -> Self {
        Self {
            wait: Some(Wait::Idle(window)),
        }
    }

    /// Wait until the answer or the connection's end.
    pub fn unbounded() -> Self {
        Self {
            wait: Some(Wait::Unbounded),
        }
    }
}

/// What a successful connect negotiated.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    pub endpoint: Endpoint,
    /// The `session.auth` result; `None` when no token was found and no auth frame sent.
    pub auth: Option<Value>,
    pub handshake: HandshakeReply,
}

impl Session {
    pub fn has_capability(&self, name: &str) -> bool {
        self.handshake
            .negotiated_capabilities
            .iter()
            .any(|c| c == name)
    }
}

/// Which credential a connection presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Credential {
    Token,
    HostToken,
}

struct Live {
    conn: Connection,
    session: Session,
    /// Which connection of its credential this is: [`Client::connection_epoch`] for the
    /// operator connection, [`Client::host_connection_epoch`] for the host one.
    epoch: u64,
}

/// One lazily opened connection and the lock that serialises opening it.
#[derive(Default)]
struct Slot {
    current: Mutex<Option<Arc<Live>>>,
    opening: tokio::sync::Mutex<()>,
}

impl Slot {
    fn get(&self) -> Option<Arc<Live>> {
        let guard = self.current.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().filter(|l| !l.conn.is_closed()).cloned()
    }

    fn set(&self, live: Option<Arc<Live>>) -> Option<Arc<Live>> {
        let mut guard = self.current.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *guard, live)
    }
}

struct Inner {
    config: ClientConfig,
    registry: Arc<HandlerRegistry>,
    operator: Slot,
    host: Slot,
    closed: AtomicBool,
    /// Operator connections opened so far (connect, auth and handshake all succeeded).
    epochs: AtomicU64,
    /// Host-token connections opened so far (see [`Client::host_connection_epoch`]).
    host_epochs: AtomicU64,
    /// State the features built on this client keep (see `extensions`).
    extensions: Extensions,
    /// Methods a feature answers in this process (see `extensions`).
    local: LocalRoutes,
}

/// The shared daemon client. Cheap to clone; the last clone's drop stops every task.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

/// A [`Client`] that is not kept alive by this handle (see [`Client::downgrade`]).
#[derive(Clone)]
pub(crate) struct WeakClient(std::sync::Weak<Inner>);

impl WeakClient {
    pub(crate) fn upgrade(&self) -> Option<Client> {
        self.0.upgrade().map(|inner| Client { inner })
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.inner.config)
            .field("connected", &self.is_connected())
            .field("closed", &self.inner.closed.load(Ordering::SeqCst))
            .field("handlers", &self.inner.registry)
            .finish()
    }
}

impl Client {
    /// A client that connects on its first call.
    pub fn new(config: ClientConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                registry: Arc::new(HandlerRegistry::default()),
                operator: Slot::default(),
                host: Slot::default(),
                closed: AtomicBool::new(false),
                epochs: AtomicU64::new(0),
                host_epochs: AtomicU64::new(0),
                extensions: Extensions::default(),
                local: LocalRoutes::default(),
            }),
        }
    }

    /// A client configured from this process's environment.
    pub fn from_env() -> Self {
        Self::new(ClientConfig::from_env())
    }

    /// A handle that does not keep the client alive: what handlers stored in the client's
    /// own registry hold, so the registry never owns the client it belongs to.
    pub(crate) fn downgrade(&self) -> WeakClient {
        WeakClient(Arc::downgrade(&self.inner))
    }

    /// This client's `T` (created on first use): where a feature keeps its per-client
    /// state.
    pub(crate) fn extension<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        self.inner.extensions.get::<T>()
    }

    /// Answers `method` in this process whenever `route` takes its params.
    pub(crate) fn route_locally(&self, method: &'static str, route: LocalRoute) {
        self.inner.local.set(method, route);
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// Calls `method` with the wait its deadline class gives it.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, Error> {
        self.call_with(method, params, CallOptions::default()).await
    }

    /// Calls `method` with per-call options.
    pub async fn call_with(
        &self,
        method: &str,
        params: Value,
        options: CallOptions,
    ) -> Result<Value, Error> {
        if self.inner.local.take(method, &params) {
            return Ok(Value::Null);
        }
        let live = self.live(Credential::Token).await?;
        let wait = self.wait_for(method, &params, options);
        live.conn.call(method, params, wait).await
    }

    /// Sends the notification `method` (a JSON-RPC frame without an id: nothing answers
    /// it) on the operator connection, connecting first when there is none. `Ok` means the
    /// frame was queued for the socket; an error when the client is closed or the
    /// connection cannot be opened or has ended.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), Error> {
        if self.inner.local.take(method, &params) {
            return Ok(());
        }
        let live = self.live(Credential::Token).await?;
        live.conn.notify(method, &params).await
    }

    /// Calls a streaming method (`infer_stream`): `on_event` receives each of this call's
    /// `inference.stream.event` params in order, all of them before this returns; concurrent
    /// streams on one connection never see each other's events. `on_event` runs on the
    /// calling task, never on the connection's reader.
    pub async fn call_streaming<F>(
        &self,
        method: &str,
        params: Value,
        options: CallOptions,
        mut on_event: F,
    ) -> Result<Value, Error>
    where
        F: FnMut(Value) + Send,
    {
        let live = self.live(Credential::Token).await?;
        let wait = self.wait_for(method, &params, options);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let call = live.conn.call_with_events(method, params, wait, Some(tx));
        tokio::pin!(call);
        loop {
            tokio::select! {
                biased;
                Some(event) = rx.recv() => on_event(event),
                outcome = &mut call => {
                    while let Ok(event) = rx.try_recv() {
                        on_event(event);
                    }
                    return outcome;
                }
            }
        }
    }

    /// Calls a host-management method over the connection authenticated with the host
    /// token. Methods the method table does not give the host (or owner) role are refused
    /// before the host token is read or sent.
    pub async fn call_host_management(&self, method: &str, params: Value) -> Result<Value, Error> {
        match methods::lookup(method) {
            Some(spec) if matches!(spec.spec.role, Role::Host | Role::Owner) => {}
            _ => {
                return Err(Error::Refused(format!(
                    "{method} is not a host-management method"
                )))
            }
        }
        let live = self.live(Credential::HostToken).await?;
        let wait = self.wait_for(method, &params, CallOptions::default());
        live.conn.call(method, params, wait).await
    }

    /// Calls the typed member `member` (CAR's Python name) of `method` with `args` in
    /// declaration order (`None` for an absent optional argument): the params are built and
    /// the result projected by [`typed`], and `host` methods go over the host-management
    /// connection. `naming` spells argument names in error messages the caller's way.
    pub async fn call_member(
        &self,
        method: &str,
        member: &str,
        args: &[Option<Value>],
        naming: Naming,
    ) -> Result<Projected, Error> {
        let (decl, found) = typed::lookup(method, member)?;
        let params = typed::build_params(found, args, naming)?;
        let result = if decl.spec.role == Role::Host {
            self.call_host_management(method, params).await?
        } else {
            self.call(method, params).await?
        };
        typed::project(method, found, result)
    }

    /// The current operator connection's epoch, connecting first when there is none: 1 for
    /// the first connection this client opened, and one more for each connection opened
    /// after it (after [`Client::disconnect`], or after a reconnect following the
    /// daemon's restart). A change tells the caller that per-connection daemon state
    /// (tools, policies, state, halts) was lost.
    pub async fn connection_epoch(&self) -> Result<u64, Error> {
        Ok(self.live(Credential::Token).await?.epoch)
    }

    /// Connects now (if not connected) and returns what was negotiated.
    pub async fn connect(&self) -> Result<Session, Error> {
        Ok(self.live(Credential::Token).await?.session.clone())
    }

    /// The current operator connection's negotiated result, if connected.
    pub fn session(&self) -> Option<Session> {
        self.inner.operator.get().map(|l| l.session.clone())
    }

    pub fn is_connected(&self) -> bool {
        self.inner.operator.get().is_some()
    }

    /// Drops the current connections (their pending calls fail with [`Error::Closed`]);
    /// the next call reconnects. Handlers stay registered.
    pub fn disconnect(&self) {
        for slot in [&self.inner.operator, &self.inner.host] {
            if let Some(live) = slot.set(None) {
                live.conn.close(Error::Closed);
            }
        }
    }

    /// Closes the client for good: pending calls fail with [`Error::Closed`] and every
    /// later call returns it. Idempotent.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        self.disconnect();
    }

    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::SeqCst)
    }

    /// Registers the handler for daemon→client requests named `method`, replacing any
    /// earlier one. It runs on the blocking pool, so it may block.
    pub fn register_handler<F>(&self, method: &str, handler: F)
    where
        F: Fn(Value) -> HandlerResult + Send + Sync + 'static,
    {
        self.inner
            .registry
            .set_request(method, Some(handlers::sync_handler(handler)));
    }

    /// Registers an async handler for daemon→client requests named `method`.
    pub fn register_async_handler<F, Fut>(&self, method: &str, handler: F)
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.inner
            .registry
            .set_request(method, Some(handlers::async_handler(handler)));
    }

    pub fn unregister_handler(&self, method: &str) {
        self.inner.registry.set_request(method, None);
    }

    /// True when a handler for `method` is registered.
    pub fn has_handler(&self, method: &str) -> bool {
        self.inner.registry.has_request(method)
    }

    /// Registers the `tools.execute` handler; arguments arrive normalised in [`ToolCall`]
    /// whether the daemon sent them under `parameters` or `params`.
    pub fn register_tool_handler<F>(&self, handler: F)
    where
        F: Fn(ToolCall) -> HandlerResult + Send + Sync + 'static,
    {
        self.inner
            .registry
            .set_request("tools.execute", Some(handlers::tool_handler(handler)));
    }

    pub fn unregister_tool_handler(&self) {
        self.unregister_handler("tools.execute");
    }

    /// Registers the subscriber for `tools.cancel` notifications.
    pub fn register_tool_cancel_handler<F>(&self, handler: F)
    where
        F: Fn(ToolCancel) + Send + Sync + 'static,
    {
        self.register_notification_handler("tools.cancel", move |params| {
            handler(ToolCancel::from_params(&params))
        });
    }

    pub fn unregister_tool_cancel_handler(&self) {
        self.unregister_notification_handler("tools.cancel");
    }

    /// Registers the one subscriber for notifications named `method`, replacing any
    /// earlier one. Notifications run one at a time in arrival order on the blocking
    /// pool; a panic is logged and does not stop later notifications.
    pub fn register_notification_handler<F>(&self, method: &str, handler: F)
    where
        F: Fn(Value) + Send + Sync + 'static,
    {
        self.inner
            .registry
            .set_notification(method, Some(Arc::new(handler)));
    }

    pub fn unregister_notification_handler(&self, method: &str) {
        self.inner.registry.set_notification(method, None);
    }

    /// The handler registry every connection of this client dispatches to.
    pub(crate) fn registry(&self) -> &Arc<HandlerRegistry> {
        &self.inner.registry
    }

    fn wait_for(&self, method: &str, params: &Value, options: CallOptions) -> Wait {
        options
            .wait
            .unwrap_or_else(|| timeouts::wait_for(method, params, &self.inner.config.timeouts))
    }

    /// The open connection for `credential`, opening it when there is none.
    async fn live(&self, credential: Credential) -> Result<Arc<Live>, Error> {
        let slot = match credential {
            Credential::Token => &self.inner.operator,
            Credential::HostToken => &self.inner.host,
        };
        if self.is_closed() {
            return Err(Error::Closed);
        }
        if let Some(live) = slot.get() {
            return Ok(live);
        }
        // One opener at a time; callers that queued behind it reuse its connection.
        let _opening = slot.opening.lock().await;
        if self.is_closed() {
            return Err(Error::Closed);
        }
        if let Some(live) = slot.get() {
            return Ok(live);
        }
        let mut opened = self.open(credential).await?;
        opened.epoch = match credential {
            Credential::Token => self.inner.epochs.fetch_add(1, Ordering::SeqCst) + 1,
            Credential::HostToken => self.inner.host_epochs.fetch_add(1, Ordering::SeqCst) + 1,
        };
        let live = Arc::new(opened);
        slot.set(Some(live.clone()));
        // close() may have run while we were opening; it must win.
        if self.is_closed() {
            if let Some(l) = slot.set(None) {
                l.conn.close(Error::Closed);
            }
            return Err(Error::Closed);
        }
        Ok(live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_debug_output_never_shows_a_token() {
        let mut env = EnvSnapshot::with_car_home("/car-home");
        env.auth_token = Some(Secret::new("env-s3cret".into()));
        env.agent_id = Some("agent-env".into());
        env.agent_token = Some(Secret::new("agent-env-s3cret".into()));
        let config = ClientConfig::with_env(env)
            .token("arg-s3cret")
            .agent("agent-arg", "agent-arg-s3cret");
        let client = Client::new(config.clone());
        for shown in [
            format!("{config:?}"),
            format!("{config:#?}"),
            format!("{client:?}"),
        ] {
            assert!(!shown.contains("s3cret"), "{shown}");
            assert!(
                shown.contains("agent-arg") && shown.contains("[redacted]"),
                "{shown}"
            );
        }
    }
}

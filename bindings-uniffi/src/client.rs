//! [`CarDaemonClient`]: the generic daemon bridge exported to Swift and Kotlin.
//!
//! This module owns the translation of each bridge call: JSON text in, the shared
//! client's blocking facade on the process runtime, JSON text or a [`CarError`] out.
//! Discovery, auth, handshake, reconnect and timeouts are the shared client's; handler
//! rules are `handlers`'. The generated JSON-string wrappers (`generated`) go through
//! [`CarDaemonClient::daemon_call`] (`host` methods' through
//! [`crate::HostClient::daemon_call_host_management`]), the generated typed members through
//! the `member_*` helpers of [`MemberCalls`] here, which run `car_daemon_client::typed`
//! (params built and the result projected there, exactly as for Python and Node).

use std::sync::Arc;

use car_daemon_client::discovery::parse_ws_url;
use car_daemon_client::{BlockingClient, ClientConfig, Naming, Projected};
use serde_json::Value;

use crate::error::CarError;
use crate::handlers::{self, DaemonHandler, DaemonNotificationHandler};
use crate::tokio_runtime;

/// A connection to the local daemon, opened on the first call and re-opened by the next
/// call after it dropped. Handlers survive reconnects. Safe to share between threads.
#[derive(Debug, uniffi::Object)]
pub struct CarDaemonClient {
    inner: BlockingClient,
}

#[uniffi::export]
impl CarDaemonClient {
    /// A client for the daemon at `url` (`ws://host:port`), else `CAR_DAEMON_URL`, else the
    /// local default (preferring the daemon's Unix socket when it exists). The token comes
    /// from `CAR_AUTH_TOKEN` or the token file under `CAR_HOME`, read at each connect.
    /// Nothing is opened until the first call; a malformed `url` is `Refused` here.
    #[uniffi::constructor(default(url = None))]
    pub fn new(url: Option<String>) -> Result<Arc<Self>, CarError> {
        let mut config = ClientConfig::from_env();
        config.client_version = format!("car-runtime-uniffi/{}", car_proto::CAR_VERSION);
        if let Some(url) = url {
            parse_ws_url(&url)?;
            config = config.url(url);
        }
        Self::with_config(config)
    }

    /// Calls `method` with `params_json` (a JSON value, usually an object) and returns the
    /// result as JSON.
    pub fn daemon_call(&self, method: String, params_json: String) -> Result<String, CarError> {
        let params = parse_params(&params_json)?;
        let result = self.inner.call(&method, params)?;
        Ok(result.to_string())
    }

    /// Calls a host-management method over the connection authenticated with the host
    /// token (the `host-token` file beside the token file). Other methods are refused
    /// before the host token is read.
    pub fn daemon_call_host_management(
        &self,
        method: String,
        params_json: String,
    ) -> Result<String, CarError> {
        let params = parse_params(&params_json)?;
        let result = self.inner.call_host_management(&method, params)?;
        Ok(result.to_string())
    }

    /// Answers the daemon's `method` requests with `handler`, replacing any earlier one.
    /// `tools.execute` handlers receive the normalised `call_json`.
    pub fn register_daemon_handler(&self, method: String, handler: Arc<dyn DaemonHandler>) {
        handlers::register(self.inner.client(), &method, handler);
    }

    /// Delivers the daemon's `method` notifications to `handler`, replacing any earlier one.
    pub fn register_daemon_notification_handler(
        &self,
        method: String,
        handler: Arc<dyn DaemonNotificationHandler>,
    ) {
        handlers::register_notification(self.inner.client(), &method, handler);
    }

    /// Drops the connections (CAR's rule): pending calls fail with `Closed`, and the next
    /// call connects again. Registered handlers stay; per-connection daemon state (tools,
    /// policies, state) does not, which `connection_epoch` shows. Idempotent.
    pub fn close(&self) {
        self.inner.disconnect();
    }

    /// The current connection's epoch, connecting first when there is none: it changes
    /// whenever a new daemon session is established (after `close`, or after a reconnect
    /// following a daemon restart).
    pub fn connection_epoch(&self) -> Result<u64, CarError> {
        Ok(self.inner.connection_epoch()?)
    }
}

impl CarDaemonClient {
    /// A client with an explicit configuration (Rust callers and tests; not exported, since
    /// foreign code configures the client through its environment).
    pub fn with_config(config: ClientConfig) -> Result<Arc<Self>, CarError> {
        Ok(Arc::new(Self {
            inner: BlockingClient::with_handle(config, tokio_runtime::handle()?),
        }))
    }

    /// The async client underneath (the agent loop runs it on the shared runtime).
    pub(crate) fn client(&self) -> &car_daemon_client::Client {
        self.inner.client()
    }

    /// The blocking facade ([`crate::HostClient`] calls through it).
    pub(crate) fn blocking(&self) -> &BlockingClient {
        &self.inner
    }
}

/// The typed members' one path (see the module docs): the generated members of
/// [`CarDaemonClient`] and [`crate::HostClient`] call these helpers, one per result kind,
/// through [`MemberCalls::member`].
pub(crate) trait MemberCalls {
    /// Runs `member` of `method` with `args` through the shared client.
    fn member(
        &self,
        method: &str,
        member: &str,
        args: Vec<Option<Value>>,
    ) -> Result<Projected, CarError>;

    fn member_unit(
        &self,
        method: &str,
        member: &str,
        args: Vec<Option<Value>>,
    ) -> Result<(), CarError> {
        match self.member(method, member, args)? {
            Projected::Unit => Ok(()),
            other => Err(wrong_kind(method, &other)),
        }
    }

    fn member_string(
        &self,
        method: &str,
        member: &str,
        args: Vec<Option<Value>>,
    ) -> Result<String, CarError> {
        match self.member(method, member, args)? {
            Projected::Json(text) | Projected::Text(text) => Ok(text),
            other => Err(wrong_kind(method, &other)),
        }
    }

    fn member_int(
        &self,
        method: &str,
        member: &str,
        args: Vec<Option<Value>>,
    ) -> Result<i64, CarError> {
        match self.member(method, member, args)? {
            Projected::Int(n) => Ok(n),
            other => Err(wrong_kind(method, &other)),
        }
    }

    fn member_bool(
        &self,
        method: &str,
        member: &str,
        args: Vec<Option<Value>>,
    ) -> Result<bool, CarError> {
        match self.member(method, member, args)? {
            Projected::Bool(b) => Ok(b),
            other => Err(wrong_kind(method, &other)),
        }
    }

    fn member_str_list(
        &self,
        method: &str,
        member: &str,
        args: Vec<Option<Value>>,
    ) -> Result<Vec<String>, CarError> {
        match self.member(method, member, args)? {
            Projected::StrList(items) => Ok(items),
            other => Err(wrong_kind(method, &other)),
        }
    }
}

impl MemberCalls for CarDaemonClient {
    fn member(
        &self,
        method: &str,
        member: &str,
        args: Vec<Option<Value>>,
    ) -> Result<Projected, CarError> {
        Ok(self
            .inner
            .call_member(method, member, &args, Naming::Camel)?)
    }
}

/// A projection of another kind than the generated member returns (a codegen defect).
fn wrong_kind(method: &str, got: &Projected) -> CarError {
    CarError::UnexpectedResult {
        method: method.to_string(),
        detail: format!("a result the generated member cannot return: {got:?}"),
    }
}

pub(crate) fn parse_params(params_json: &str) -> Result<Value, CarError> {
    serde_json::from_str(params_json).map_err(|e| CarError::InvalidArgument {
        detail: format!("params_json is not valid JSON: {e}"),
    })
}

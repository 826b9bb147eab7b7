//! The blocking facade bindings use from plain threads (a Python thread, a JVM thread).
//!
//! This module owns the bridge from a blocking caller to the async [`Client`]: each call
//! runs on a tokio runtime the facade owns (or one the binding hands it) via
//! `Handle::block_on`, so the caller's thread waits while the connection's tasks run on the
//! runtime's workers. `block_on` never runs on a thread that belongs to a runtime: a call
//! made there (typically a synchronous reverse-call handler calling back into the daemon)
//! waits on a helper thread instead. Async code should use [`Client`] directly.

use serde_json::Value;
use tokio::runtime::{Handle, Runtime};

use crate::client::{CallOptions, Client, ClientConfig, Session};
use crate::error::Error;
use crate::typed::{Naming, Projected};

/// A [`Client`] whose calls block the calling thread.
#[derive(Debug)]
pub struct BlockingClient {
    client: Client,
    handle: Handle,
    /// Present when the facade built its own runtime.
    runtime: Option<Runtime>,
}

impl BlockingClient {
    /// A client with its own two-worker runtime.
    pub fn new(config: ClientConfig) -> Result<Self, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("car-daemon-client")
            .enable_all()
            .build()
            .map_err(|e| Error::Transport(format!("cannot start the client runtime: {e}")))?;
        Ok(Self {
            client: Client::new(config),
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
        })
    }

    /// A client on a runtime the caller owns (a binding's one runtime per process).
    pub fn with_handle(config: ClientConfig, handle: Handle) -> Self {
        Self {
            client: Client::new(config),
            handle,
            runtime: None,
        }
    }

    /// The async client underneath, for handler registration or async use.
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn call(&self, method: &str, params: Value) -> Result<Value, Error> {
        self.block_on(self.client.call(method, params))
    }

    pub fn call_with(
        &self,
        method: &str,
        params: Value,
        options: CallOptions,
    ) -> Result<Value, Error> {
        self.block_on(self.client.call_with(method, params, options))
    }

    /// [`Client::notify`], blocking.
    pub fn notify(&self, method: &str, params: Value) -> Result<(), Error> {
        self.block_on(self.client.notify(method, params))
    }

    pub fn call_host_management(&self, method: &str, params: Value) -> Result<Value, Error> {
        self.block_on(self.client.call_host_management(method, params))
    }

    /// [`Client::call_member`], blocking.
    pub fn call_member(
        &self,
        method: &str,
        member: &str,
        args: &[Option<Value>],
        naming: Naming,
    ) -> Result<Projected, Error> {
        self.block_on(self.client.call_member(method, member, args, naming))
    }

    /// [`Client::connection_epoch`], blocking.
    pub fn connection_epoch(&self) -> Result<u64, Error> {
        self.block_on(self.client.connection_epoch())
    }

    /// [`Client::call_streaming`], blocking; `on_event` runs on the calling thread.
    pub fn call_streaming<F>(
        &self,
        method: &str,
        params: Value,
        options: CallOptions,
        on_event: F,
    ) -> Result<Value, Error>
    where
        F: FnMut(Value) + Send,
    {
        self.block_on(
            self.client
                .call_streaming(method, params, options, on_event),
        )
    }

    /// [`Client::execute_proposal`], blocking.
    pub fn execute_proposal<F>(
        &self,
        proposal: Value,
        session_id: Option<String>,
        tool_fn: F,
    ) -> Result<Value, Error>
    where
        F: Fn(crate::ToolCall) -> crate::HandlerResult + Send + Sync + 'static,
    {
        self.block_on(self.client.execute_proposal(proposal, session_id, tool_fn))
    }

    pub fn connect(&self) -> Result<Session, Error> {
        self.block_on(self.client.connect())
    }

    pub fn disconnect(&self) {
        self.client.disconnect();
    }

    pub fn close(&self) {
        self.client.close();
    }

    fn block_on<T: Send>(
        &self,
        fut: impl std::future::Future<Output = Result<T, Error>> + Send,
    ) -> Result<T, Error> {
        if Handle::try_current().is_err() {
            return self.handle.block_on(fut);
        }
        // This thread belongs to a runtime: most often a blocking-pool thread running a
        // synchronous handler that calls back into the daemon. `block_on` must not run
        // here, so the wait happens on a short-lived helper thread instead.
        std::thread::scope(|scope| {
            scope
                .spawn(|| self.handle.block_on(fut))
                .join()
                .unwrap_or_else(|_| Err(Error::Transport("blocking call panicked".into())))
        })
    }
}

impl Drop for BlockingClient {
    fn drop(&mut self) {
        self.client.close();
        // Dropping a runtime inside another runtime's context panics; shutting it down in
        // the background is safe anywhere and does not wait for blocked handler threads.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

//! What every command shares: the one `car_daemon_client::Client` (whose host-token
//! connection every call uses), the output mode, connecting (with `--start-server`), and
//! how a failure is reported.
//!
//! Calls go through [`Client::call_as_host_with`] and wait at most [`CALL_TIMEOUT`] (the
//! client's default would be the daemon's 30-minute handler deadline: too long for a
//! terminal command facing a wedged daemon).
//!
//! Failure reporting: stderr only, `car-host: error: <message>` — or, with `--json`, one
//! line `{"error": {kind, message, code?, data?}}` built from the client's
//! [`ErrorReport`](car_daemon_client::ErrorReport), so a script can read the daemon's
//! `data.reason` (`not_found`, `already_resolved`, …). The exit code is 1.

use std::sync::Mutex;
use std::time::Duration;

use car_daemon_client::{CallOptions, Client, ClientConfig, Error};
use serde_json::{json, Value};

use crate::output::Out;
use crate::reach::{self, OpenError};
use crate::server::{self, StartOptions, Started};

/// How long an ordinary call (`host.agents`, `host.resolve_approval`, …) may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a command failed.
#[derive(Debug)]
pub enum Failure {
    /// A call or connect failed as the client reports it.
    Client(Error),
    /// Anything else, already worded for the user.
    Message(String),
    /// Writing stdout failed (a broken pipe is not reported).
    Output(std::io::Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Client(e)
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Output(e)
    }
}

impl Failure {
    /// True when stdout's reader went away: a normal end for a watcher behind a pipe.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Failure::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }

    /// The `--json` error object.
    pub fn to_json(&self) -> Value {
        let error = match self {
            Failure::Client(e) => {
                let report = e.report();
                let mut obj = json!({"kind": report.kind.as_str(), "message": report.message});
                if let Some(code) = report.code {
                    obj["code"] = json!(code);
                }
                if let Some(data) = report.data {
                    obj["data"] = data;
                }
                obj
            }
            Failure::Message(m) => json!({"kind": "car_host", "message": m}),
            Failure::Output(e) => json!({"kind": "output", "message": e.to_string()}),
        };
        json!({ "error": error })
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Client(e) => write!(f, "{e}"),
            Failure::Message(m) => f.write_str(m),
            Failure::Output(e) => write!(f, "cannot write stdout: {e}"),
        }
    }
}

/// Shared by every command.
#[derive(Debug)]
pub struct Ctx {
    /// The daemon client; every call goes over its host-token connection.
    pub client: Client,
    pub out: Out,
    /// `Some` when `--start-server` was given.
    pub start: Option<StartOptions>,
    /// The daemon this process started, if any.
    started: Mutex<Option<Started>>,
}

impl Ctx {
    pub fn new(config: ClientConfig, out: Out, start: Option<StartOptions>) -> Self {
        Self {
            client: Client::new(config),
            out,
            start,
            started: Mutex::new(None),
        }
    }

    /// The daemon this process started, if any.
    pub fn started(&self) -> Option<Started> {
        self.started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Opens the host connection unless one is open; its epoch. When nothing listens and
    /// `may_start` with `--start-server`, starts the daemon first (once per process).
    pub async fn connect(&self, may_start: bool) -> Result<u64, Failure> {
        let err = match reach::open(&self.client).await {
            Ok(epoch) => return Ok(epoch),
            Err(err) => err,
        };
        match (err, &self.start) {
            (OpenError::Unreachable { .. }, Some(options))
                if may_start && self.started().is_none() =>
            {
                let started = server::start(self.client.config(), options)
                    .await
                    .map_err(Failure::Message)?;
                eprintln!(
                    "car-host: started car-server (pid {}) at {}{}",
                    started.pid,
                    started.ws_url,
                    started
                        .log
                        .as_ref()
                        .map(|l| format!("; log: {}", l.display()))
                        .unwrap_or_default()
                );
                *self.started.lock().unwrap_or_else(|e| e.into_inner()) = Some(started);
                reach::open(&self.client).await.map_err(|e| match e {
                    OpenError::Failed(e) => Failure::Client(e),
                    unreachable => Failure::Message(unreachable.to_string()),
                })
            }
            (err @ OpenError::Unreachable { .. }, _) => Err(Failure::Message(format!(
                "{err}\nis car-server running? start it, or pass --start-server"
            ))),
            (OpenError::Failed(e), _) => Err(Failure::Client(e)),
        }
    }

    /// Calls `method` over the host connection and decodes the result as `T`, keeping the
    /// raw value for `--json`.
    pub async fn call_decoded<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<(T, Value), Failure> {
        let raw = self
            .client
            .call_as_host_with(method, params, CallOptions::timeout(CALL_TIMEOUT))
            .await?;
        let decoded = serde_json::from_value(raw.clone()).map_err(|e| {
            Failure::Client(Error::UnexpectedResult {
                method: method.to_string(),
                detail: format!("a reply car-host cannot read ({e}): {raw}"),
            })
        })?;
        Ok((decoded, raw))
    }

    /// Names the daemon's endpoint (URL or Unix socket), for stderr notes.
    pub fn where_(&self) -> String {
        reach::endpoint(self.client.config())
            .map(|e| reach::describe(&e))
            .unwrap_or_else(|e| e.to_string())
    }
}

//! How client failures cross into JavaScript.
//!
//! This module owns the translation of a [`car_daemon_client::Error`] into the JS error a
//! Promise rejects with. The error's structured [`ErrorReport`] goes, as an object
//! (`{kind, message, code?, data?, refusal?, method?, afterMs?}`), to the factory
//! `lib/errors.js` registers once at load (`setErrorFactory`); the factory returns an
//! instance of the matching class (`DaemonRpcError` with `.code` and `.data` exactly as the
//! daemon sent them, `DaemonConnectionError`, `DaemonTimeoutError`, `InvalidArgumentError`,
//! …) and the Promise rejects with that very object. No text is parsed on either side, and
//! a JSON-RPC code is only ever attached when the daemon sent one.
//!
//! The factory is only called on the JS thread (from a Promise's settle callback).
//!
//! `#[napi]` expands to unsafe FFI glue, hence the module-level `allow(unsafe_code)`; no
//! hand-written code here is unsafe.
#![allow(unsafe_code)]

use std::sync::RwLock;

use car_daemon_client::{Error, ErrorReport};
use napi::bindgen_prelude::{FunctionRef, Unknown};
use napi::Env;
use napi_derive::napi;
use serde_json::Value;

/// The daemon's refusal behind a failed handshake.
#[napi(object)]
#[derive(Debug)]
pub struct Refusal {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

/// One client error as the factory receives it (see the module docs).
#[napi(object)]
#[derive(Debug)]
pub struct ErrorObject {
    /// `rpc`, `transport`, `timeout`, `closed`, `handshake`, `refused`,
    /// `invalid_argument` or `unexpected_result`.
    pub kind: String,
    pub message: String,
    pub code: Option<i64>,
    pub data: Option<Value>,
    pub refusal: Option<Refusal>,
    pub method: Option<String>,
    pub after_ms: Option<f64>,
}

impl From<ErrorReport> for ErrorObject {
    fn from(r: ErrorReport) -> Self {
        ErrorObject {
            kind: r.kind.as_str().to_string(),
            message: r.message,
            code: r.code,
            data: r.data,
            refusal: r.refusal.map(|e| Refusal {
                code: e.code,
                message: e.message,
                data: e.data,
            }),
            method: r.method,
            // Milliseconds as a JS number (exact below 2^53 ms).
            after_ms: r.after.map(|d| d.as_millis() as f64),
        }
    }
}

type Factory = FunctionRef<ErrorObject, Unknown<'static>>;

static FACTORY: RwLock<Option<Factory>> = RwLock::new(None);

/// The JS error for `err`, built by the registered factory (a plain `Error` carrying the
/// message if none is registered or it failed).
pub fn to_js(env: &Env, err: Error) -> napi::Error {
    let message = err.to_string();
    let object = ErrorObject::from(err.report());
    let guard = FACTORY.read().unwrap_or_else(|e| e.into_inner());
    let Some(factory) = guard.as_ref() else {
        return napi::Error::from_reason(message);
    };
    match factory.borrow_back(env).and_then(|f| f.call(object)) {
        Ok(value) => napi::Error::from(value),
        Err(e) => napi::Error::from_reason(format!("{message} (error factory failed: {e})")),
    }
}

/// A caller's argument that cannot be sent.
pub fn invalid_argument(message: impl Into<String>) -> Error {
    Error::InvalidArgument(message.into())
}

/// Parses a JSON argument, naming it when it is not JSON.
pub fn parse_json(name: &str, text: &str) -> Result<Value, Error> {
    serde_json::from_str(text)
        .map_err(|e| invalid_argument(format!("{name} is not valid JSON: {e}")))
}

/// Registers the function that turns an error object into the package's error class
/// (called once by `lib/errors.js`).
#[napi]
pub fn set_error_factory(factory: Factory) {
    let old = {
        let mut guard = FACTORY.write().unwrap_or_else(|e| e.into_inner());
        guard.replace(factory)
    };
    // Released outside the lock.
    drop(old);
}

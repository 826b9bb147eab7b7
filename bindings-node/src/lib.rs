//! The native half of the Node package `car-runtime`: a napi-rs translation layer around
//! `car-daemon-client`.
//!
//! Owns: translation between JavaScript and the shared client. Must not touch: protocol logic
//! (it is the shared client's), or the JS thread from a non-JS thread (results settle through
//! napi's thread-safe functions).
//!
//! This crate owns only translation: JS values to `serde_json::Value` and back, client
//! errors to instances of the package's error classes (see [`error`]), and JS functions
//! to reverse-call and notification handlers (see [`callbacks`]), and the process-wide chat
//! handler to the client's chat turns (see [`chat`]). Every protocol rule
//! (discovery, handshake, timeouts, reconnect, reverse-call routing, typed members' params
//! and result projection) lives in the client crate; the idiomatic surface (`CarRuntime`,
//! error classes, `TerminalToolError`) lives in `index.js` and `lib/`, the generated
//! members in `generated.js`. Calls return Promises settled from napi's tokio runtime,
//! which is also the runtime every client task runs on.
//!
//! `#[napi]` expands to `unsafe` FFI glue (value conversions, registration constructors), so
//! the modules holding `#[napi]` items allow `unsafe_code`; no hand-written code here is
//! unsafe.

pub mod callbacks;
pub mod calls;
pub mod chat;
pub mod client;
pub mod error;

#[allow(unsafe_code)] // `#[napi]` expands to unsafe FFI glue; nothing here is hand-written unsafe.
pub mod exports {
    use napi_derive::napi;

    /// The daemon protocol version this package speaks.
    #[napi]
    pub fn protocol_version() -> u32 {
        // The protocol version is a small integer (3); the cast cannot truncate.
        car_proto::PROTOCOL_VERSION as u32
    }

    /// The version of this package and of the client crate it wraps.
    #[napi]
    pub fn client_version() -> String {
        car_proto::CAR_VERSION.to_string()
    }

    /// The daemon methods of the compiled-in contract (debug-only ones excluded), so tests
    /// can check that the generated members cover every one.
    #[napi]
    pub fn method_table() -> Vec<String> {
        car_proto::methods::active(false)
            .map(|d| d.spec.name.to_string())
            .collect()
    }
}

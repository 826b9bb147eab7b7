//! The header rules of `POST` / `DELETE /mcp`, as pure functions of header values:
//! `Origin` (DNS-rebinding protection), `MCP-Protocol-Version`, `Content-Type`, and the
//! caller credentials (`Authorization: Bearer`, `X-Car-Agent-Id`).
//!
//! This module owns the decisions, not the responses (`http` turns a refusal into its status
//! and body). Both header rules are absent-permissive and present-strict:
//!
//! - `Origin`: absent, or `http`/`https` on `localhost`, `127.0.0.0/8` or `[::1]` with any port, is
//!   allowed; anything else, the literal `null`, a non-UTF-8 value and a repeated header included,
//!   is refused;
//! - `MCP-Protocol-Version`: absent or one of [`SUPPORTED_VERSIONS`] is allowed; anything else
//!   (empty, non-UTF-8, repeated) is refused, reporting what was sent.

use hyper::header::{HeaderMap, HeaderName, AUTHORIZATION, CONTENT_TYPE, ORIGIN};

use crate::daemon::Caller;
use crate::SUPPORTED_VERSIONS;

/// The protocol-version request header.
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
/// The session header.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// A supervised agent's identity header (refused by the daemon tools).
pub const AGENT_ID_HEADER: &str = "x-car-agent-id";

/// Whether the request's `Origin` may reach dispatch.
pub fn origin_allowed(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(ORIGIN).iter();
    match (values.next(), values.next()) {
        (None, _) => true,
        (Some(value), None) => value.to_str().is_ok_and(is_loopback_origin),
        (Some(_), Some(_)) => false,
    }
}

/// `http(s)://` + `localhost`, `127.0.0.0/8` or `[::1]`, any port (the reference's table).
pub use car_proto::loopback::is_loopback_origin;

/// The `MCP-Protocol-Version` check: `Err(requested)` (what the client sent, lossily
/// decoded) when the value is not one this server speaks.
pub fn protocol_version(headers: &HeaderMap) -> Result<(), String> {
    let name = HeaderName::from_static(PROTOCOL_VERSION_HEADER);
    let mut values = headers.get_all(&name).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(()),
        (Some(value), None) => match value.to_str() {
            Ok(v) if SUPPORTED_VERSIONS.contains(&v) => Ok(()),
            _ => Err(String::from_utf8_lossy(value.as_bytes()).into_owned()),
        },
        (Some(first), Some(_)) => Err(String::from_utf8_lossy(first.as_bytes()).into_owned()),
    }
}

/// Whether the body is declared `application/json` (parameters such as `charset` allowed).
pub fn is_json_content(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// The session id a request names: `Some(Err(()))` for a header that cannot be an id.
pub fn session_id(headers: &HeaderMap) -> Option<Result<String, ()>> {
    let value = headers.get(SESSION_HEADER)?;
    Some(
        value
            .to_str()
            .ok()
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .ok_or(()),
    )
}

/// The caller's credentials: the bearer token (scheme case-insensitive, token trimmed and
/// non-empty) and whether `X-Car-Agent-Id` was sent.
pub fn caller(headers: &HeaderMap) -> Caller {
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    Caller {
        bearer,
        agent_header: headers.contains_key(AGENT_ID_HEADER),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    #[test]
    fn loopback_origins_any_port_are_allowed() {
        for origin in [
            "http://localhost",
            "http://localhost:3000",
            "https://LOCALHOST:1",
            "http://127.0.0.1:9102",
            "http://127.255.3.4",
            "https://[::1]:8080",
            "http://[::1]",
        ] {
            assert!(is_loopback_origin(origin), "{origin}");
        }
    }

    #[test]
    fn everything_else_is_refused() {
        for origin in [
            "null",
            "",
            "http://evil.example.com",
            "http://localhost.evil.com",
            "http://128.0.0.1",
            "ftp://localhost",
            "http://localhost:99999",
            "http://localhost:",
            "http://localhost:80/path",
            "http://user@localhost",
            "http://[::2]",
            "http://[::1",
            "http://0.0.0.0",
            "file://",
            "localhost",
        ] {
            assert!(!is_loopback_origin(origin), "{origin}");
        }
    }

    #[test]
    fn origin_header_rules() {
        let mut h = HeaderMap::new();
        assert!(origin_allowed(&h));
        h.insert(ORIGIN, HeaderValue::from_static("http://127.0.0.1:1"));
        assert!(origin_allowed(&h));
        h.append(ORIGIN, HeaderValue::from_static("http://127.0.0.1:1"));
        assert!(!origin_allowed(&h));
        let mut h = HeaderMap::new();
        h.insert(ORIGIN, HeaderValue::from_bytes(b"http://\xff").unwrap());
        assert!(!origin_allowed(&h));
    }

    #[test]
    fn version_header_rules() {
        let mut h = HeaderMap::new();
        assert_eq!(protocol_version(&h), Ok(()));
        for v in SUPPORTED_VERSIONS {
            h.insert(PROTOCOL_VERSION_HEADER, HeaderValue::from_static(v));
            assert_eq!(protocol_version(&h), Ok(()));
        }
        for bad in ["2025-03-26", "", "latest"] {
            h.insert(PROTOCOL_VERSION_HEADER, HeaderValue::from_str(bad).unwrap());
            assert_eq!(protocol_version(&h), Err(bad.to_string()));
        }
        h.insert(
            PROTOCOL_VERSION_HEADER,
            HeaderValue::from_bytes(b"\xfe").unwrap(),
        );
        assert!(protocol_version(&h).is_err());
    }

    #[test]
    fn content_type_and_credentials() {
        let mut h = HeaderMap::new();
        assert!(!is_json_content(&h));
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("Application/JSON; charset=utf-8"),
        );
        assert!(is_json_content(&h));
        h.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(!is_json_content(&h));
        assert_eq!(caller(&h).bearer, None);
        h.insert(AUTHORIZATION, HeaderValue::from_static("bearer  abc "));
        assert_eq!(caller(&h).bearer.as_deref(), Some("abc"));
        h.insert(AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(caller(&h).bearer, None);
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(caller(&h).bearer, None);
        h.insert(AGENT_ID_HEADER, HeaderValue::from_static("a1"));
        assert!(caller(&h).agent_header);
    }
}

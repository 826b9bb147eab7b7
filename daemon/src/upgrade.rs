//! WebSocket upgrade checks, before any JSON-RPC (docs/protocol-choices.md, "Auth and upgrade checks").
//!
//! A browser will open a WebSocket to `localhost` for any page, and a DNS-rebinding page
//! can make its own host name resolve to `127.0.0.1`. So, while the daemon is bound to
//! loopback: an `Origin` header that is present and not a loopback origin is refused with
//! HTTP 403 (no `Origin` — a native client — is allowed), and a `Host` header that is not
//! a loopback name or address is refused with HTTP 403. Ports are not checked.

use std::net::IpAddr;

/// True for `localhost`, any `127.0.0.0/8` address and `::1`, with or without a port.
pub fn is_loopback_authority(authority: &str) -> bool {
    let authority = authority.trim();
    let host = if let Some(rest) = authority.strip_prefix('[') {
        // "[::1]" or "[::1]:9100"
        match rest.split_once(']') {
            Some((host, tail)) if tail.is_empty() || valid_port(tail) => host,
            _ => return false,
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) if valid_port(&format!(":{port}")) => host,
            Some(_) => return false,
            None => authority,
        }
    };
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<IpAddr>()
        .map(|ip| ip.is_loopback())
        .unwrap_or(false)
}

fn valid_port(tail: &str) -> bool {
    tail.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// True for `http(s)://` + a loopback authority, nothing after it but an optional `/`.
pub fn is_loopback_origin(origin: &str) -> bool {
    let rest = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    match rest {
        Some(rest) => is_loopback_authority(rest.strip_suffix('/').unwrap_or(rest)),
        None => false,
    }
}

/// The reason an upgrade is refused, or `None` to accept it.
pub fn refusal(
    origin: Option<&str>,
    host: Option<&str>,
    bound_to_loopback: bool,
) -> Option<String> {
    if !bound_to_loopback {
        return None;
    }
    if let Some(origin) = origin {
        if !is_loopback_origin(origin) {
            return Some(format!(
                "cross-origin upgrade refused: Origin {origin:?} is not loopback"
            ));
        }
    }
    if let Some(host) = host {
        if !is_loopback_authority(host) {
            return Some(format!(
                "upgrade refused: Host {host:?} is not a loopback name"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_authorities() {
        for ok in [
            "localhost",
            "LOCALHOST:9100",
            "127.0.0.1",
            "127.8.9.10:1",
            "[::1]",
            "[::1]:9100",
        ] {
            assert!(is_loopback_authority(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:9100",
            "localhost.evil.example",
            "10.0.0.1",
            "[::2]:1",
            "127.0.0.1:x",
            "127.0.0.1:",
            "",
            "[::1]x",
        ] {
            assert!(!is_loopback_authority(bad), "{bad}");
        }
    }

    #[test]
    fn origins() {
        for ok in [
            "http://localhost",
            "https://127.0.0.1:3000",
            "http://[::1]:8080/",
            "http://localhost:9101",
        ] {
            assert!(is_loopback_origin(ok), "{ok}");
        }
        for bad in [
            "https://evil.example",
            "null",
            "file://",
            "http://localhost.evil.example",
            "ws://localhost",
            "http://localhost/path",
        ] {
            assert!(!is_loopback_origin(bad), "{bad}");
        }
    }

    #[test]
    fn refusal_rules() {
        assert!(refusal(None, None, true).is_none());
        assert!(refusal(None, Some("127.0.0.1:9100"), true).is_none());
        assert!(refusal(Some("https://evil.example"), Some("localhost"), true).is_some());
        assert!(refusal(None, Some("evil.example"), true).is_some());
        assert!(refusal(Some("https://evil.example"), None, false).is_none());
    }
}

//! Loopback authorities and origins: the DNS-rebinding and cross-site checks every
//! loopback server of the daemon applies — the WebSocket upgrade (`car-server`), the
//! dashboard (`car-dashboard`) and the MCP endpoint (`car-mcp`).
//!
//! - [`is_loopback_authority`]: a `Host` (or request target) naming `localhost`, `127.0.0.0/8` or
//!   `[::1]`, with an optional port — what DNS rebinding cannot forge;
//! - [`is_loopback_origin`]: an `http`/`https` origin on such a host, any port (the MCP endpoint's
//!   rule, the reference's table);
//! - [`is_own_origin`]: exactly the page of one loopback listener — `http`, its port, and
//!   `localhost` or its own address (another process may serve pages on `[::1]` or `127.0.0.2` at
//!   the same port number). The dashboard hands its token only to that origin, and the WebSocket
//!   admits only the dashboard's.

use std::net::{IpAddr, SocketAddr};

/// True for `localhost`, any `127.0.0.0/8` address and `::1`, with or without a port.
pub fn is_loopback_authority(authority: &str) -> bool {
    split_authority(authority).is_some_and(|(host, _)| is_loopback_host(host))
}

/// True for `http://` or `https://` (any case) followed by a loopback authority and nothing
/// else: no path, no trailing `/`. `null` and every other scheme are false.
pub fn is_loopback_origin(origin: &str) -> bool {
    let lower = origin.to_ascii_lowercase();
    lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
        .is_some_and(is_loopback_authority)
}

/// True when `origin` is exactly `http://<host>:<own.port()>` where `host` is `localhost`
/// or `own`'s loopback address (no path, no trailing slash; a missing port means 80).
/// `null`, `https`, any other scheme, address or port is false.
pub fn is_own_origin(origin: &str, own: SocketAddr) -> bool {
    let Some(authority) = origin.strip_prefix("http://") else {
        return false;
    };
    let Some((host, port)) = split_authority(authority) else {
        return false;
    };
    let host_is_own = host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip == own.ip());
    own.ip().is_loopback() && host_is_own && port.unwrap_or(80) == own.port()
}

/// The host and optional port of `host[:port]` or `[v6][:port]`; `None` when malformed
/// (an empty or non-numeric port, anything after the bracket, a path).
fn split_authority(authority: &str) -> Option<(&str, Option<u16>)> {
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
        return None;
    }
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, tail) = rest.split_once(']')?;
        return match tail {
            "" => Some((host, None)),
            tail => Some((host, Some(parse_port(tail.strip_prefix(':')?)?))),
        };
    }
    match authority.rsplit_once(':') {
        // An unbracketed IPv6 address is not a valid authority.
        Some((host, _)) if host.contains(':') => None,
        Some((host, port)) => Some((host, Some(parse_port(port)?))),
        None => Some((authority, None)),
    }
}

fn parse_port(port: &str) -> Option<u16> {
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    port.parse().ok()
}

fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_authorities() {
        for ok in [
            "localhost",
            "LOCALHOST:9101",
            "127.0.0.1",
            "127.8.9.10:1",
            "[::1]",
            "[::1]:9101",
        ] {
            assert!(is_loopback_authority(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:9101",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "10.0.0.1",
            "[::2]:1",
            "::1",
            "127.0.0.1:x",
            "127.0.0.1:",
            "127.0.0.1:99999",
            "",
            "[::1]x",
            "[::1]:",
            "user@127.0.0.1",
            "127.0.0.1/path",
        ] {
            assert!(!is_loopback_authority(bad), "{bad}");
        }
    }

    #[test]
    fn loopback_origins_any_port() {
        for ok in [
            "http://localhost",
            "https://127.0.0.1:3000",
            "http://[::1]:8080",
            "HTTP://LOCALHOST:9101",
            "http://127.8.9.10:1",
        ] {
            assert!(is_loopback_origin(ok), "{ok}");
        }
        for bad in [
            "https://evil.example",
            "null",
            "",
            "file://",
            "http://localhost.evil.example",
            "ws://localhost",
            "http://localhost/path",
            "http://localhost/",
            "http://127.0.0.1:99999",
            "http://user@127.0.0.1",
        ] {
            assert!(!is_loopback_origin(bad), "{bad}");
        }
    }

    #[test]
    fn own_origin_needs_http_this_address_and_this_port() {
        let own: SocketAddr = "127.0.0.1:9101".parse().unwrap();
        for ok in [
            "http://127.0.0.1:9101",
            "http://localhost:9101",
            "http://LocalHost:9101",
        ] {
            assert!(is_own_origin(ok, own), "{ok}");
        }
        for bad in [
            "null",
            "",
            "http://127.0.0.1:9100",
            "http://127.0.0.1",
            "https://127.0.0.1:9101",
            "ws://127.0.0.1:9101",
            "http://evil.example:9101",
            "http://127.0.0.1:9101/",
            "http://127.0.0.1:9101/app",
            "http://[::1]:9101",
            "http://127.0.0.2:9101",
            "file://",
            "HTTP://127.0.0.1:9101x",
        ] {
            assert!(!is_own_origin(bad, own), "{bad}");
        }
        let v6: SocketAddr = "[::1]:9101".parse().unwrap();
        assert!(is_own_origin("http://[::1]:9101", v6));
        assert!(!is_own_origin("http://127.0.0.1:9101", v6));
        assert!(is_own_origin(
            "http://localhost",
            "127.0.0.1:80".parse().unwrap()
        ));
        // Never for a listener that is not on loopback.
        assert!(!is_own_origin(
            "http://10.0.0.1:9101",
            "10.0.0.1:9101".parse().unwrap()
        ));
    }
}

//! WebSocket upgrade checks, before any JSON-RPC (docs/protocol-choices.md, "Auth and upgrade
//! checks").
//!
//! A browser will open a WebSocket to `localhost` for any page, and a DNS-rebinding page
//! can make its own host name resolve to `127.0.0.1`. So, while the daemon is bound to
//! loopback: an `Origin` header (only browsers send one; native clients do not) is accepted
//! only when it is the daemon's own dashboard page — `http://127.0.0.1:<dashboard port>` or
//! `http://localhost:<dashboard port>` (`car_proto::loopback::is_own_origin`) — or one of
//! the `--allow-origin` origins; any other `Origin`, including other
//! loopback ports and `null`, is refused with HTTP 403. A `Host` header that is not a
//! loopback name or address is refused with HTTP 403 (DNS rebinding).
//!
//! CAR accepts any loopback origin here and relies on the token (a page cannot read it);
//! refusing at the upgrade means a hostile local page never reaches JSON-RPC at all.

use std::net::{Ipv4Addr, SocketAddr};

use car_proto::loopback::{is_loopback_authority, is_own_origin};

/// The browser pages allowed to open the WebSocket.
#[derive(Debug, Clone, Default)]
pub struct PageOrigins<'a> {
    /// The dashboard's port: a loopback origin on it is the daemon's own page.
    pub dashboard_port: Option<u16>,
    /// `--allow-origin` values, lower-case, without a trailing `/`.
    pub allowed: &'a [String],
}

impl PageOrigins<'_> {
    /// The dashboard serves plain HTTP on `127.0.0.1` only, so its page's origin is exactly
    /// `http://127.0.0.1:<port>` or `http://localhost:<port>`; another loopback address or
    /// `https` on that port number would be some other local server's page.
    fn admits(&self, origin: &str) -> bool {
        let normalised = origin.trim_end_matches('/').to_ascii_lowercase();
        if self.allowed.contains(&normalised) {
            return true;
        }
        self.dashboard_port.is_some_and(|port| {
            is_own_origin(&normalised, SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
        })
    }
}

/// The reason an upgrade is refused, or `None` to accept it.
pub fn refusal(
    origin: Option<&str>,
    host: Option<&str>,
    bound_to_loopback: bool,
    pages: &PageOrigins<'_>,
) -> Option<String> {
    if !bound_to_loopback {
        return None;
    }
    if let Some(origin) = origin {
        if !pages.admits(origin) {
            return Some(format!(
                "cross-origin upgrade refused: Origin {origin:?} is not this daemon's dashboard"
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
    fn refusal_rules() {
        let none = PageOrigins::default();
        assert!(refusal(None, None, true, &none).is_none());
        assert!(refusal(None, Some("127.0.0.1:9100"), true, &none).is_none());
        assert!(refusal(Some("https://evil.example"), Some("localhost"), true, &none).is_some());
        assert!(refusal(None, Some("evil.example"), true, &none).is_some());
        assert!(refusal(Some("https://evil.example"), None, false, &none).is_none());
        // Loopback pages: only the dashboard's port, or an allowed origin.
        let allowed = vec!["http://localhost:5173".to_string()];
        let pages = PageOrigins {
            dashboard_port: Some(9101),
            allowed: &allowed,
        };
        for ok in [
            "http://127.0.0.1:9101",
            "http://localhost:9101/",
            "http://LOCALHOST:5173",
        ] {
            assert!(refusal(Some(ok), None, true, &pages).is_none(), "{ok}");
        }
        for bad in [
            "http://127.0.0.1:9102",
            "http://127.0.0.1",
            "http://[::1]:9101",
            "http://127.0.0.2:9101",
            "https://127.0.0.1:9101",
            "http://evil.example:9101",
            "null",
            "http://localhost:5174",
        ] {
            assert!(refusal(Some(bad), None, true, &pages).is_some(), "{bad}");
        }
        assert!(refusal(Some("http://127.0.0.1:9101"), None, true, &none).is_some());
    }
}

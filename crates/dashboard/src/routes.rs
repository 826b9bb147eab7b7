//! Request → response: the dashboard's whole HTTP surface, as a pure function of the
//! request line and headers (no socket, no body), so every rule is unit-tested directly.
//!
//! Order of checks: the `Host` header (and an absolute-form request target's authority)
//! must be loopback, else 403 — a DNS-rebinding page reaches us under its own host name;
//! then the path (404), then the method (405, `Allow: GET`); `GET /auth-token` adds the
//! cross-site checks (`Origin` exactly this dashboard's own origin when present,
//! `Sec-Fetch-Site` `same-origin` or `none` when present) and then, while auth is on, the
//! one-time login ([`crate::login`]): without the current login secret in `X-Car-Login` the
//! answer is 401 and carries no token. Every response carries the same
//! security headers and a strict CSP; no response ever carries CORS headers, so a foreign
//! page can never read one.

use std::net::SocketAddr;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Response, StatusCode, Uri};
use serde_json::json;

use crate::assets::Assets;
use crate::login::{Exchange, Login, LOGIN_HEADER};
use car_proto::loopback::{is_loopback_authority, is_own_origin};

/// What a response is built from: fixed at start-up.
#[derive(Debug)]
pub struct Site {
    pub ws_port: u16,
    /// The address this dashboard listens on: its own origin's port (and address).
    pub own_addr: SocketAddr,
    pub token: Option<String>,
    /// The one-time login guarding `token` (present exactly when `token` is).
    pub login: Option<Login>,
    pub assets: Assets,
    csp: HeaderValue,
}

impl Site {
    /// The site for a dashboard on `own_addr`; with a `token`, a [`Login`] is minted and
    /// published in `login_file`.
    pub fn new(
        ws_port: u16,
        own_addr: SocketAddr,
        token: Option<String>,
        login_file: Option<std::path::PathBuf>,
    ) -> Self {
        let csp = format!(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self' ws://127.0.0.1:{ws_port} ws://localhost:{ws_port}; \
             object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        );
        let login = token
            .is_some()
            .then(|| Login::new(format!("http://{own_addr}/"), login_file));
        Site {
            ws_port,
            own_addr,
            token,
            login,
            assets: Assets::new(),
            csp: HeaderValue::from_str(&csp).expect("the CSP is ASCII"),
        }
    }

    /// The WebSocket URL the page connects to.
    pub fn ws_url(&self) -> String {
        format!("ws://127.0.0.1:{}", self.ws_port)
    }
}

/// The paths this server knows.
const AUTH_TOKEN_PATH: &str = "/auth-token";

/// Answers one request.
pub fn respond(
    site: &Site,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Response<Full<Bytes>> {
    let mut response = route(site, method, uri, headers);
    secure(site, response.headers_mut());
    response
}

fn route(site: &Site, method: &Method, uri: &Uri, headers: &HeaderMap) -> Response<Full<Bytes>> {
    if let Some(reason) = host_refusal(uri, headers) {
        tracing::debug!(%reason, "dashboard request refused");
        return error(StatusCode::FORBIDDEN, &reason);
    }
    let path = uri.path();
    let asset = site.assets.get(path);
    if asset.is_none() && path != AUTH_TOKEN_PATH {
        return error(StatusCode::NOT_FOUND, &format!("no such path: {path}"));
    }
    if method != Method::GET {
        let mut response = error(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("method {method} not allowed on {path}"),
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    match asset {
        Some(asset) => {
            let mut response = Response::new(Full::new(Bytes::from(asset.body.clone())));
            let h = response.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            );
            // Always revalidate: a daemon upgrade must never run an old page.
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        }
        None => auth_token(site, headers),
    }
}

/// Why the request's `Host` is refused, if it is.
fn host_refusal(uri: &Uri, headers: &HeaderMap) -> Option<String> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let host = match (hosts.next(), hosts.next()) {
        (None, _) => return Some("Host header is required".into()),
        (Some(_), Some(_)) => return Some("more than one Host header".into()),
        (Some(host), None) => host,
    };
    let Ok(host) = host.to_str() else {
        return Some("Host header is not text".into());
    };
    if !is_loopback_authority(host) {
        return Some(format!("Host {host:?} is not a loopback name"));
    }
    // An absolute-form request target names the authority that wins over Host (RFC 9112).
    if let Some(authority) = uri.authority() {
        if !is_loopback_authority(authority.as_str()) {
            return Some(format!(
                "request target {authority:?} is not a loopback name"
            ));
        }
    }
    None
}

/// `GET /auth-token`: the read-only dashboard token, for this dashboard's own page or a
/// native client only, in exchange for the current one-time login secret.
fn auth_token(site: &Site, headers: &HeaderMap) -> Response<Full<Bytes>> {
    if let Some(reason) = cross_site_refusal(site.own_addr, headers) {
        tracing::warn!(%reason, "dashboard token request refused");
        let mut response = error(StatusCode::FORBIDDEN, &reason);
        no_store(response.headers_mut());
        return response;
    }
    if let Some(login) = &site.login {
        let where_ = match login.file() {
            Some(file) => format!(
                "the login URL in {} (also in the daemon's log)",
                file.display()
            ),
            None => "the login URL in the daemon's log".to_string(),
        };
        let refusal = match presented_login(headers) {
            Err(reason) => Some(reason),
            Ok(presented) => match login.exchange(presented) {
                Exchange::Accepted => None,
                Exchange::Missing => Some(format!("login required: open {where_}")),
                Exchange::Refused => Some(format!(
                    "this login link is not valid (each one opens the dashboard once): open {where_}"
                )),
            },
        };
        if let Some(reason) = refusal {
            tracing::info!(%reason, "dashboard token request refused");
            let mut response = error(StatusCode::UNAUTHORIZED, &reason);
            no_store(response.headers_mut());
            return response;
        }
    }
    let body = json!({"token": site.token, "ws_url": site.ws_url()});
    let mut response = json_response(StatusCode::OK, &body);
    no_store(response.headers_mut());
    response
}

/// Why a token request looks cross-site, if it does. A request with neither `Origin` nor
/// `Sec-Fetch-Site` is a native client (curl, a test) and is allowed: only browsers attach
/// them, and a browser always does on the requests a foreign page could make.
fn cross_site_refusal(own: SocketAddr, headers: &HeaderMap) -> Option<String> {
    let mut origins = headers.get_all(header::ORIGIN).iter();
    match (origins.next(), origins.next()) {
        (Some(_), Some(_)) => return Some("more than one Origin header".into()),
        (Some(origin), None) => match origin.to_str() {
            Ok(origin) if is_own_origin(origin, own) => {}
            Ok(origin) => {
                return Some(format!(
                    "cross-origin token request refused: Origin {origin:?} is not this dashboard"
                ))
            }
            Err(_) => return Some("Origin header is not text".into()),
        },
        (None, _) => {}
    }
    let mut sites = headers.get_all("sec-fetch-site").iter();
    match (sites.next(), sites.next()) {
        (Some(_), Some(_)) => Some("more than one Sec-Fetch-Site header".into()),
        (Some(site), None) => match site.to_str() {
            Ok("same-origin" | "none") => None,
            Ok(other) => Some(format!(
                "cross-site token request refused: Sec-Fetch-Site {other:?}"
            )),
            Err(_) => Some("Sec-Fetch-Site header is not text".into()),
        },
        (None, _) => None,
    }
}

/// The `X-Car-Login` value, if one was sent; more than one, or one that is not text, is
/// refused.
fn presented_login(headers: &HeaderMap) -> Result<Option<&str>, String> {
    let mut values = headers.get_all(LOGIN_HEADER).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(None),
        (Some(_), Some(_)) => Err("more than one X-Car-Login header".into()),
        (Some(value), None) => value
            .to_str()
            .map(|v| Some(v.trim()))
            .map_err(|_| "X-Car-Login header is not text".into()),
    }
}

fn no_store(headers: &mut HeaderMap) {
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

fn error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    json_response(status, &json!({"error": message}))
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The headers every response carries.
fn secure(site: &Site, headers: &mut HeaderMap) {
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CONTENT_SECURITY_POLICY, site.csp.clone());
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
}

#[cfg(test)]
mod tests;

//! Unit tests of every routing rule, without sockets.

use super::*;

const WS: u16 = 9100;
fn site(token: Option<&str>) -> Site {
    Site::new(
        WS,
        "127.0.0.1:9101".parse().unwrap(),
        token.map(str::to_string),
        None,
    )
}

/// The current login secret of `site` (as the page reads it from its URL fragment).
fn login_secret(site: &Site) -> String {
    let url = site.login.as_ref().expect("a login while auth is on").url();
    url.split_once("#login=").unwrap().1.to_string()
}

fn get(site: &Site, path: &str, headers: &[(&str, &str)]) -> Response<Full<Bytes>> {
    request(site, Method::GET, path, headers)
}

fn request(
    site: &Site,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> Response<Full<Bytes>> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.append(
            header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    let uri: Uri = path.parse().unwrap();
    respond(site, &method, &uri, &map)
}

fn body(response: Response<Full<Bytes>>) -> serde_json::Value {
    use http_body_util::BodyExt;
    let bytes = block_on(response.into_body().collect()).unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

/// `Full` resolves on its first poll, so a current-thread runtime is all it needs.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

fn header<'a>(response: &'a Response<Full<Bytes>>, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

const LOCAL: (&str, &str) = ("host", "127.0.0.1:9101");

#[test]
fn assets_have_their_content_types() {
    let site = site(Some("t"));
    for (path, ty) in [
        ("/", "text/html; charset=utf-8"),
        ("/app.js", "text/javascript; charset=utf-8"),
        ("/app.css", "text/css; charset=utf-8"),
        ("/?x=1", "text/html; charset=utf-8"),
    ] {
        let response = get(&site, path, &[LOCAL]);
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(header(&response, "content-type"), Some(ty), "{path}");
    }
}

#[test]
fn every_response_has_the_security_headers_and_no_cors() {
    let site = site(Some("t"));
    let cases = [
        get(&site, "/", &[LOCAL]),
        get(&site, "/auth-token", &[LOCAL]),
        get(
            &site,
            "/auth-token",
            &[LOCAL, ("origin", "https://evil.example")],
        ),
        get(&site, "/missing", &[LOCAL]),
        get(&site, "/", &[("host", "evil.example")]),
        request(&site, Method::POST, "/", &[LOCAL]),
    ];
    for response in cases {
        assert_eq!(header(&response, "x-content-type-options"), Some("nosniff"));
        assert_eq!(header(&response, "referrer-policy"), Some("no-referrer"));
        assert_eq!(header(&response, "x-frame-options"), Some("DENY"));
        let csp = header(&response, "content-security-policy").unwrap();
        assert!(
            csp.starts_with("default-src 'self'; script-src 'self';"),
            "{csp}"
        );
        assert!(
            csp.contains("connect-src 'self' ws://127.0.0.1:9100 ws://localhost:9100;"),
            "{csp}"
        );
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        for (name, _) in response.headers() {
            assert!(
                !name.as_str().starts_with("access-control-"),
                "CORS header {name}"
            );
        }
    }
}

#[test]
fn host_must_be_loopback() {
    let site = site(Some("t"));
    for host in [
        "evil.example",
        "evil.example:9101",
        "localhost.evil.example",
        "10.0.0.2:9101",
    ] {
        for path in ["/", "/auth-token", "/missing"] {
            let response = get(&site, path, &[("host", host)]);
            assert_eq!(response.status(), StatusCode::FORBIDDEN, "{host} {path}");
        }
    }
    assert_eq!(
        get(&site, "/", &[]).status(),
        StatusCode::FORBIDDEN,
        "missing Host"
    );
    let two = [("host", "127.0.0.1:9101"), ("host", "evil.example")];
    assert_eq!(
        get(&site, "/", &two).status(),
        StatusCode::FORBIDDEN,
        "two Hosts"
    );
    // Absolute-form: the target's authority counts too.
    let response = get(&site, "http://evil.example/auth-token", &[LOCAL]);
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    for host in ["localhost:9101", "127.0.0.1", "[::1]:9101", "LOCALHOST"] {
        assert_eq!(
            get(&site, "/", &[("host", host)]).status(),
            StatusCode::OK,
            "{host}"
        );
    }
}

#[test]
fn auth_token_for_native_clients_and_the_own_page() {
    let site = site(Some("dash-token"));
    for headers in [
        vec![LOCAL],
        vec![LOCAL, ("origin", "http://127.0.0.1:9101")],
        vec![
            LOCAL,
            ("origin", "http://localhost:9101"),
            ("sec-fetch-site", "same-origin"),
        ],
        vec![LOCAL, ("sec-fetch-site", "none")],
    ] {
        let secret = login_secret(&site);
        let mut headers = headers;
        headers.push(("x-car-login", secret.as_str()));
        let response = get(&site, "/auth-token", &headers);
        assert_eq!(response.status(), StatusCode::OK, "{headers:?}");
        assert_eq!(header(&response, "cache-control"), Some("no-store"));
        assert_eq!(header(&response, "content-type"), Some("application/json"));
        assert_eq!(
            body(response),
            json!({"token": "dash-token", "ws_url": "ws://127.0.0.1:9100"})
        );
    }
}

#[test]
fn auth_token_refuses_cross_site_requests() {
    let site = site(Some("dash-token"));
    for headers in [
        vec![LOCAL, ("origin", "https://evil.example")],
        vec![LOCAL, ("origin", "null")],
        vec![LOCAL, ("origin", "http://127.0.0.1:9100")],
        vec![LOCAL, ("origin", "http://127.0.0.1:5555")],
        vec![LOCAL, ("origin", "https://127.0.0.1:9101")],
        vec![LOCAL, ("origin", "http://[::1]:9101")],
        vec![LOCAL, ("origin", "http://127.0.0.2:9101")],
        vec![
            LOCAL,
            ("origin", "http://127.0.0.1:9101"),
            ("origin", "http://127.0.0.1:9101"),
        ],
        vec![LOCAL, ("sec-fetch-site", "cross-site")],
        vec![LOCAL, ("sec-fetch-site", "same-site")],
        vec![
            LOCAL,
            ("origin", "http://127.0.0.1:9101"),
            ("sec-fetch-site", "cross-site"),
        ],
    ] {
        let response = get(&site, "/auth-token", &headers);
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{headers:?}");
        assert_eq!(header(&response, "cache-control"), Some("no-store"));
        let body = body(response);
        assert!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{body}"
        );
        assert!(body.get("token").is_none(), "{body}");
    }
}

/// CAR serves the dashboard token to any local process that asks; here only the current
/// one-time login secret opens it, once.
#[test]
fn without_the_current_login_secret_no_token_is_served() {
    let site = site(Some("dash-token"));
    let spent = login_secret(&site);
    let response = get(&site, "/auth-token", &[LOCAL, ("x-car-login", &spent)]);
    assert_eq!(response.status(), StatusCode::OK);
    let current = login_secret(&site);
    assert_ne!(current, spent, "an exchange mints the next secret");
    for headers in [
        vec![LOCAL],
        vec![LOCAL, ("sec-fetch-site", "none")],
        vec![LOCAL, ("x-car-login", spent.as_str())],
        vec![LOCAL, ("x-car-login", "guess")],
        vec![LOCAL, ("x-car-login", "")],
        vec![
            LOCAL,
            ("x-car-login", current.as_str()),
            ("x-car-login", current.as_str()),
        ],
    ] {
        let response = get(&site, "/auth-token", &headers);
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{headers:?}");
        assert_eq!(header(&response, "cache-control"), Some("no-store"));
        let body = body(response);
        assert!(!body.to_string().contains("dash-token"), "{body}");
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|e| e.to_lowercase().contains("login")),
            "{body}"
        );
    }
    // The refusals did not spend the current secret.
    assert_eq!(login_secret(&site), current);
    // A cross-site request is refused before the secret is even looked at.
    let response = get(
        &site,
        "/auth-token",
        &[
            LOCAL,
            ("origin", "https://evil.example"),
            ("x-car-login", &current),
        ],
    );
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(login_secret(&site), current);
}

#[test]
fn auth_token_is_null_when_auth_is_off() {
    let response = get(&site(None), "/auth-token", &[LOCAL]);
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        body(response),
        json!({"token": null, "ws_url": "ws://127.0.0.1:9100"})
    );
}

#[test]
fn other_methods_are_405_and_unknown_paths_404() {
    let site = site(Some("t"));
    for method in [
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::HEAD,
        Method::OPTIONS,
    ] {
        for path in ["/", "/auth-token", "/app.js", "/app.css"] {
            let response = request(&site, method.clone(), path, &[LOCAL]);
            assert_eq!(
                response.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}"
            );
            assert_eq!(header(&response, "allow"), Some("GET"));
        }
    }
    for path in ["/missing", "/auth-token/", "/app.js/x", "/..%2fCargo.toml"] {
        assert_eq!(
            get(&site, path, &[LOCAL]).status(),
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
    assert_eq!(
        request(&site, Method::POST, "/missing", &[LOCAL]).status(),
        StatusCode::NOT_FOUND
    );
}

//! The dashboard over a real socket: `serve` on a bound loopback listener, driven by a
//! minimal HTTP/1.1 client written over `TcpStream` (one request per connection,
//! `Connection: close`, the response read to EOF), so what is tested is exactly what
//! hyper puts on the wire.

use std::time::Duration;

use car_dashboard::{serve, DashboardConfig};
use car_test_harness::http_wire::{parse_response, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A running dashboard.
struct Dashboard {
    port: u16,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
    /// Holds the login file.
    dir: tempfile::TempDir,
}

impl Dashboard {
    async fn start(token: Option<&str>) -> Dashboard {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shutdown = CancellationToken::new();
        let dir = tempfile::tempdir().unwrap();
        let config = DashboardConfig {
            ws_port: 9100,
            token: token.map(str::to_string),
            login_file: Some(dir.path().join(car_dashboard::login::LOGIN_FILE)),
        };
        let task = tokio::spawn(serve(listener, config, shutdown.clone()));
        Dashboard {
            port,
            shutdown,
            task,
            dir,
        }
    }

    /// The login URL the dashboard published.
    fn login_url(&self) -> String {
        let file = self.dir.path().join(car_dashboard::login::LOGIN_FILE);
        std::fs::read_to_string(file).unwrap().trim().to_string()
    }

    /// The current login secret (the URL's fragment).
    fn login_secret(&self) -> String {
        let url = self.login_url();
        url.split_once("#login=").unwrap().1.to_string()
    }

    fn own_origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Sends `method path` with `headers` (a `Host` only if given) and reads the response.
    async fn request(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        send(self.port, request.as_bytes()).await
    }

    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        let host = self.host();
        let mut all = vec![("Host", host.as_str())];
        all.extend_from_slice(headers);
        self.request("GET", path, &all).await
    }
}

/// Sends one request and reads its response (the dashboard closes the connection after it).
async fn send(port: u16, request: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .expect("the dashboard closes the connection after the response")
        .unwrap();
    parse_response(&raw)
}

fn assert_security_headers(reply: &Reply) {
    assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(reply.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(reply.header("x-frame-options"), Some("DENY"));
    let csp = reply.header("content-security-policy").unwrap();
    assert!(csp.contains("default-src 'self'"), "{csp}");
    assert!(
        csp.contains("connect-src 'self' ws://127.0.0.1:9100 ws://localhost:9100"),
        "{csp}"
    );
    assert!(
        !reply
            .headers
            .iter()
            .any(|(k, _)| k.starts_with("access-control-")),
        "CORS headers: {:?}",
        reply.headers
    );
}

#[tokio::test]
async fn serves_the_page_and_its_assets() {
    let dash = Dashboard::start(Some("dash-token")).await;
    for (path, ty, marker) in [
        ("/", "text/html; charset=utf-8", "<script src=\"/app.js\""),
        ("/app.js", "text/javascript; charset=utf-8", "session.auth"),
        ("/app.css", "text/css; charset=utf-8", ".tool-call"),
    ] {
        let reply = dash.get(path, &[]).await;
        assert_eq!(reply.status, 200, "{path}");
        assert_eq!(reply.header("content-type"), Some(ty), "{path}");
        assert!(
            String::from_utf8_lossy(&reply.body).contains(marker),
            "{path}"
        );
        assert_security_headers(&reply);
    }
}

#[tokio::test]
async fn host_must_be_a_loopback_name() {
    let dash = Dashboard::start(Some("dash-token")).await;
    let rebinding = format!("evil.example:{}", dash.port);
    for path in ["/", "/auth-token", "/app.js", "/nope"] {
        let reply = dash
            .request(
                "GET",
                path,
                &[
                    ("Host", &rebinding),
                    ("Origin", &format!("http://{rebinding}")),
                ],
            )
            .await;
        assert_eq!(reply.status, 403, "{path}");
        assert!(reply.json()["error"]
            .as_str()
            .unwrap()
            .contains("evil.example"));
        assert_security_headers(&reply);
    }
    let missing = dash.request("GET", "/", &[]).await;
    assert_eq!(missing.status, 403, "a request without Host");
    for host in [
        format!("localhost:{}", dash.port),
        format!("[::1]:{}", dash.port),
    ] {
        assert_eq!(
            dash.request("GET", "/", &[("Host", &host)]).await.status,
            200,
            "{host}"
        );
    }
}

#[tokio::test]
async fn auth_token_rules() {
    let dash = Dashboard::start(Some("dash-token")).await;
    let own = dash.own_origin();
    let localhost_own = format!("http://localhost:{}", dash.port);
    let next_port = format!("http://127.0.0.1:{}", dash.port.wrapping_add(1));
    let other_loopback = format!("http://[::1]:{}", dash.port);
    let allowed: [&[(&str, &str)]; 4] = [
        &[],
        &[("Origin", &own)],
        &[
            ("Origin", &localhost_own),
            ("Sec-Fetch-Site", "same-origin"),
        ],
        &[("Sec-Fetch-Site", "none")],
    ];
    for headers in allowed {
        let secret = dash.login_secret();
        let mut headers = headers.to_vec();
        headers.push(("X-Car-Login", &secret));
        let reply = dash.get("/auth-token", &headers).await;
        assert_eq!(reply.status, 200, "{headers:?}");
        assert_eq!(reply.header("content-type"), Some("application/json"));
        assert_eq!(reply.header("cache-control"), Some("no-store"));
        assert_eq!(
            reply.json(),
            serde_json::json!({"token": "dash-token", "ws_url": "ws://127.0.0.1:9100"})
        );
        assert_security_headers(&reply);
    }
    let refused: [&[(&str, &str)]; 7] = [
        &[("Origin", &other_loopback)],
        &[("Origin", "http://evil.example")],
        &[("Origin", "null")],
        &[("Origin", &next_port)],
        &[("Origin", "http://127.0.0.1:9100")],
        &[("Sec-Fetch-Site", "cross-site")],
        &[("Origin", &own), ("Sec-Fetch-Site", "same-site")],
    ];
    let secret = dash.login_secret();
    for headers in refused {
        let mut headers = headers.to_vec();
        headers.push(("X-Car-Login", &secret));
        let reply = dash.get("/auth-token", &headers).await;
        assert_eq!(reply.status, 403, "{headers:?}");
        assert_eq!(reply.header("cache-control"), Some("no-store"));
        let body = reply.json();
        assert!(body["error"].is_string(), "{body}");
        assert!(!String::from_utf8_lossy(&reply.body).contains("dash-token"));
        assert_security_headers(&reply);
    }
}

/// The one-time login over a real socket: the published URL names this dashboard, the file
/// is `0600`, a credential-less request (CAR's `GET /auth-token`) gets a 401 with no token,
/// and each secret opens the token once.
#[tokio::test]
async fn the_token_is_served_once_per_login_secret() {
    use std::os::unix::fs::PermissionsExt;
    let dash = Dashboard::start(Some("dash-token")).await;
    let url = dash.login_url();
    assert!(
        url.starts_with(&format!("http://127.0.0.1:{}/#login=", dash.port)),
        "{url}"
    );
    let file = dash.dir.path().join(car_dashboard::login::LOGIN_FILE);
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    for headers in [vec![], vec![("Sec-Fetch-Site", "none")]] {
        let reply = dash.get("/auth-token", &headers).await;
        assert_eq!(reply.status, 401, "{headers:?}");
        assert!(!String::from_utf8_lossy(&reply.body).contains("dash-token"));
        assert!(
            reply.json()["error"]
                .as_str()
                .unwrap()
                .contains(&file.display().to_string()),
            "the refusal says where the login URL is"
        );
    }
    let secret = dash.login_secret();
    let reply = dash.get("/auth-token", &[("X-Car-Login", &secret)]).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["token"], "dash-token");
    let again = dash.get("/auth-token", &[("X-Car-Login", &secret)]).await;
    assert_eq!(again.status, 401, "a login secret opens the token once");
    assert!(!String::from_utf8_lossy(&again.body).contains("dash-token"));
    assert_ne!(
        dash.login_secret(),
        secret,
        "the file holds the next secret"
    );
}

#[tokio::test]
async fn auth_token_is_null_with_auth_off() {
    let dash = Dashboard::start(None).await;
    let reply = dash.get("/auth-token", &[]).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    assert_eq!(
        reply.json(),
        serde_json::json!({"token": null, "ws_url": "ws://127.0.0.1:9100"})
    );
}

#[tokio::test]
async fn wrong_methods_and_paths() {
    let dash = Dashboard::start(Some("dash-token")).await;
    let host = dash.host();
    for method in ["POST", "PUT", "DELETE", "PATCH", "HEAD"] {
        for path in ["/", "/auth-token", "/app.js", "/app.css"] {
            let reply = dash.request(method, path, &[("Host", &host)]).await;
            assert_eq!(reply.status, 405, "{method} {path}");
            assert_eq!(reply.header("allow"), Some("GET"), "{method} {path}");
            assert_security_headers(&reply);
        }
    }
    // A body is never read, and it does not change the answer.
    let post = format!(
        "POST /auth-token HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{{\"token\":\"x\"}}"
    );
    let reply = send(dash.port, post.as_bytes()).await;
    assert_eq!(reply.status, 405);
    for path in ["/missing", "/auth-token/", "/index.js", "/app.js/"] {
        let reply = dash.get(path, &[]).await;
        assert_eq!(reply.status, 404, "{path}");
        assert_security_headers(&reply);
    }
}

#[tokio::test]
async fn shutdown_stops_accepting() {
    let dash = Dashboard::start(Some("dash-token")).await;
    assert_eq!(dash.get("/", &[]).await.status, 200);
    // A connection that never sends a request is closed at shutdown, not kept open.
    let mut idle = TcpStream::connect(("127.0.0.1", dash.port)).await.unwrap();
    dash.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), dash.task)
        .await
        .expect("serve returns after shutdown")
        .unwrap();
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(30), idle.read(&mut buf))
        .await
        .expect("the idle connection is closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(
        TcpStream::connect(("127.0.0.1", dash.port)).await.is_err(),
        "the listener is closed"
    );
}

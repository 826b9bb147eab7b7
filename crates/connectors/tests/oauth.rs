//! OAuth against a real third-party authorization server: `tests/mcp-servers/oauth_server.py`,
//! an MCP server on the official MCP Python SDK that is its own OAuth authorization server
//! (`mcp.server.auth`, auto-approving), run from the venv `scripts/fetch-mcp-servers`
//! makes (`CAR_TEST_MCP_OAUTH_PY`): discovery, registration, the PKCE authorization URL,
//! the redirect's code and state, the exchange, a connection with the token, refreshes
//! (rotated tokens work, old ones stop working), and the errors for bad inputs, a wrong
//! code, a server without OAuth and one that never answers.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use car_connectors::oauth::{self, Credentials};
use car_connectors::{Launch, Live};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

const T: Duration = Duration::from_secs(20);
const REDIRECT: &str = "http://127.0.0.1:9/callback";

fn python() -> String {
    std::env::var("CAR_TEST_MCP_OAUTH_PY").unwrap_or_else(|_| {
        panic!("CAR_TEST_MCP_OAUTH_PY is not set: run `eval \"$(scripts/fetch-mcp-servers)\"` before the tests")
    })
}

/// The fixture on an ephemeral port; killed on drop (and it exits when its stdin closes).
struct Server {
    _child: Child,
    _stdin: ChildStdin,
    url: String,
}

impl Server {
    async fn start(args: &[&str]) -> Self {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp-servers/oauth_server.py");
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut child = Command::new(python())
            .arg(&script)
            .args(["--port", "0", "--exit-with-stdin"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log.reopen().unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", script.display()));
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await;
        let url = match first {
            Ok(Ok(Some(line))) if line.starts_with("http://") => line,
            other => panic!(
                "oauth_server.py printed no URL ({other:?}); its stderr:\n{}",
                std::fs::read_to_string(log.path()).unwrap_or_default()
            ),
        };
        Server {
            _child: child,
            _stdin: stdin,
            url,
        }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn param(url: &str, name: &str) -> Option<String> {
    url::Url::parse(url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// Opens the authorization URL as a browser would, but stops at the redirect: its
/// `Location` (the redirect_uri with `code` and `state`).
async fn approve(authorize_url: &str) -> String {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(T)
        .build()
        .unwrap();
    let response = client.get(authorize_url).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 302, "{response:?}");
    response.headers()["location"].to_str().unwrap().to_string()
}

/// `begin`, the approval, `complete`: the credentials and the authorization URL.
async fn authorize(server: &Server) -> (Credentials, String) {
    let (authorize_url, state, flow) = oauth::begin(&server.url, REDIRECT, "car-test", T)
        .await
        .unwrap();
    let location = approve(&authorize_url).await;
    assert_eq!(param(&location, "state").as_deref(), Some(state.as_str()));
    let code = param(&location, "code").expect("the redirect carries a code");
    let creds = oauth::complete(flow, &code, T).await.unwrap();
    (creds, authorize_url)
}

async fn connect(url: &str, token: Option<&str>) -> Result<Live, String> {
    let headers = token
        .map(|t| vec![("Authorization".to_string(), format!("Bearer {t}"))])
        .unwrap_or_default();
    Live::connect(
        Launch::Http {
            url: url.to_string(),
            headers,
        },
        T,
    )
    .await
}

/// A tool's text result, whether the SDK sent it as `{"result": …}` or as text.
async fn call_text(live: &Live, tool: &str, arguments: Value) -> String {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    let out = live.call(tool, arguments, T).await.unwrap();
    match out {
        Value::String(s) => s,
        Value::Object(o) => o["result"].as_str().unwrap().to_string(),
        other => panic!("unexpected {tool} output {other}"),
    }
}

#[tokio::test]
async fn authorizes_connects_calls_and_refreshes() {
    let server = Server::start(&["--access-token-ttl", "30"]).await;
    let (creds, authorize_url) = authorize(&server).await;

    // The authorization URL: PKCE S256, bound to this resource, for the registered client.
    assert_eq!(
        param(&authorize_url, "code_challenge_method").as_deref(),
        Some("S256")
    );
    assert!(param(&authorize_url, "code_challenge").is_some_and(|c| c.len() >= 43));
    assert_eq!(
        param(&authorize_url, "resource").as_deref(),
        Some(server.url.as_str())
    );
    assert_eq!(
        param(&authorize_url, "redirect_uri").as_deref(),
        Some(REDIRECT)
    );
    assert_eq!(
        param(&authorize_url, "client_id").as_deref(),
        Some(creds.client_id.as_str())
    );
    assert!(!authorize_url.contains("code_verifier"));

    // The credentials: everything a refresh needs, and they survive JSON.
    assert_eq!(creds.resource, server.url);
    assert!(creds.token_endpoint.ends_with("/token"), "{creds:?}");
    assert!(creds.refresh_token.is_some());
    assert_eq!(creds.scopes, vec!["user".to_string()]);
    let expires_at = creds.expires_at.expect("the server gives expires_in");
    assert!(
        (now() + 25..=now() + 31).contains(&expires_at),
        "{expires_at}"
    );
    assert!(creds.needs_refresh(now()), "30 s left is within the margin");
    assert!(!creds.needs_refresh(expires_at - 61));
    let json = serde_json::to_string(&creds).unwrap();
    let creds: Credentials = serde_json::from_str(&json).unwrap();

    // Connect with the token: tools/list and tools/call, as the registered client.
    let live = connect(&server.url, Some(&creds.access_token))
        .await
        .unwrap();
    let mut names: Vec<String> = live
        .tools(T)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    names.sort();
    assert_eq!(names, ["echo", "whoami"]);
    assert_eq!(call_text(&live, "whoami", json!({})).await, creds.client_id);
    assert_eq!(
        call_text(&live, "echo", json!({"text": "hello"})).await,
        "hello"
    );
    drop(live);

    // Without a token, or with a made-up one, the server refuses the connection.
    for token in [None, Some("made-up")] {
        let e = connect(&server.url, token).await.unwrap_err();
        assert!(e.contains("requires OAuth authorization"), "{e}");
    }

    // A refresh: new tokens that work; the old ones no longer do.
    let fresh = oauth::refresh(&creds, T).await.unwrap();
    assert_ne!(fresh.access_token, creds.access_token);
    assert_ne!(fresh.refresh_token, creds.refresh_token);
    assert!(fresh.refresh_token.is_some());
    assert_eq!(fresh.client_id, creds.client_id);
    assert_eq!(fresh.resource, creds.resource);
    assert!(fresh.expires_at.is_some_and(|at| at >= expires_at));
    let live = connect(&server.url, Some(&fresh.access_token))
        .await
        .unwrap();
    assert_eq!(call_text(&live, "whoami", json!({})).await, creds.client_id);
    drop(live);
    let e = connect(&server.url, Some(&creds.access_token))
        .await
        .unwrap_err();
    assert!(e.contains("requires OAuth authorization"), "{e}");

    // The rotated-out refresh token is refused, in a sentence without any secret.
    let e = oauth::refresh(&creds, T).await.unwrap_err();
    assert!(e.contains("refused the refresh token"), "{e}");
    assert!(e.contains("invalid_grant"), "{e}");
    for secret in [
        creds.access_token.as_str(),
        creds.refresh_token.as_deref().unwrap(),
    ] {
        assert!(!e.contains(secret), "{e}");
    }

    // And the new credentials refresh again.
    let again = oauth::refresh(&fresh, T).await.unwrap();
    assert!(connect(&server.url, Some(&again.access_token))
        .await
        .is_ok());
}

#[tokio::test]
async fn a_wrong_code_fails_clearly_without_secrets() {
    let server = Server::start(&[]).await;
    let (authorize_url, state, flow) = oauth::begin(&server.url, REDIRECT, "car-test", T)
        .await
        .unwrap();
    let printed = format!("{flow:?}");
    assert!(
        printed.contains("[redacted]") && printed.contains(&state),
        "{printed}"
    );
    // The real code is issued but never presented.
    let location = approve(&authorize_url).await;
    let real_code = param(&location, "code").unwrap();
    let wrong = "not-the-code-0123456789";
    let e = oauth::complete(flow, wrong, T).await.unwrap_err();
    assert!(e.contains("refused the authorization code"), "{e}");
    assert!(e.contains("invalid_grant"), "{e}");
    assert!(!e.contains(wrong) && !e.contains(&real_code), "{e}");
    assert!(!e.contains('\n'), "{e}");
}

#[tokio::test]
async fn bad_inputs_are_refused_before_any_request() {
    for url in [
        "ftp://127.0.0.1/mcp",
        "file:///etc/passwd",
        "not a url",
        "127.0.0.1:8080/mcp",
        "",
    ] {
        let e = oauth::begin(url, REDIRECT, "car-test", T)
            .await
            .unwrap_err();
        assert!(e.contains("is not an http(s) URL"), "{url}: {e}");
    }
    for redirect in ["/callback", "callback?x=1", ""] {
        let e = oauth::begin("http://127.0.0.1:9/mcp", redirect, "car-test", T)
            .await
            .unwrap_err();
        assert!(e.contains("is not an absolute URL"), "{redirect}: {e}");
    }
    let e = oauth::begin(
        "http://127.0.0.1:9/mcp",
        "http://127.0.0.1:9/cb#frag",
        "car-test",
        T,
    )
    .await
    .unwrap_err();
    assert!(e.contains("fragment"), "{e}");
}

#[tokio::test]
async fn a_server_without_oauth_metadata_is_refused() {
    let server = Server::start(&["--no-auth"]).await;
    let e = oauth::begin(&server.url, REDIRECT, "car-test", T)
        .await
        .unwrap_err();
    assert_eq!(
        e,
        format!(
            "the server at {} publishes no OAuth authorization server metadata",
            server.url
        )
    );
    // It is a working MCP server all the same.
    let live = connect(&server.url, None).await.unwrap();
    assert_eq!(call_text(&live, "echo", json!({"text": "hi"})).await, "hi");
}

#[tokio::test]
async fn registration_refused_or_unavailable_fails_clearly() {
    let server = Server::start(&["--registration", "reject"]).await;
    let e = oauth::begin(&server.url, REDIRECT, "car-test", T)
        .await
        .unwrap_err();
    assert!(
        e.starts_with("dynamic client registration failed: 400 Bad Request"),
        "{e}"
    );
    assert!(e.contains("invalid_client_metadata"), "{e}");

    let server = Server::start(&["--registration", "off"]).await;
    let e = oauth::begin(&server.url, REDIRECT, "car-test", T)
        .await
        .unwrap_err();
    let issuer = server.url.trim_end_matches("mcp");
    assert_eq!(
        e,
        format!("the authorization server {issuer} does not offer dynamic client registration")
    );
}

#[tokio::test]
async fn a_silent_server_fails_within_the_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    // Accepts and never answers.
    let hold = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let started = std::time::Instant::now();
    let e = oauth::begin(&url, REDIRECT, "car-test", Duration::from_millis(500))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "{e}");
    assert_eq!(
        e,
        format!("OAuth discovery for {url} did not finish within 500 ms")
    );
    hold.abort();
}

#[tokio::test]
async fn an_unreachable_server_fails_clearly() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let e = oauth::begin(&url, REDIRECT, "car-test", T)
        .await
        .unwrap_err();
    assert!(
        e.starts_with(&format!("OAuth discovery for {url} failed: ")),
        "{e}"
    );
}

#[tokio::test]
async fn a_refresh_against_a_dead_token_endpoint_fails_clearly() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let creds: Credentials = serde_json::from_value(json!({
        "access_token": "at-0123456789", "refresh_token": "rt-0123456789", "expires_at": 0,
        "token_endpoint": format!("http://127.0.0.1:{port}/token"), "client_id": "c",
        "client_secret": "cs-0123456789", "resource": format!("http://127.0.0.1:{port}/mcp"),
    }))
    .unwrap();
    assert!(creds.needs_refresh(now()));
    let e = oauth::refresh(&creds, T).await.unwrap_err();
    assert_eq!(
        e,
        format!("the token endpoint http://127.0.0.1:{port}/token did not answer")
    );
    for secret in ["at-0123456789", "rt-0123456789", "cs-0123456789"] {
        assert!(!e.contains(secret), "{e}");
    }
}

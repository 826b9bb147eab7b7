//! OAuth 2.1 connectors against a real `car-server` and a real authorization server: the MCP
//! Python SDK's own (`tests/mcp-servers/oauth_server.py`, built on `mcp.server.auth`).
//! `connectors.authenticate` discovers and registers and answers the authorize URL; the test
//! plays the browser (it follows the URL to its redirect); `connectors.complete_authentication`
//! exchanges the code and adds the connector with its tokens in the secret store. Its tools
//! run in a proposal; a short-lived access token is refreshed before use (the server revokes
//! the old one on refresh, so a call with a stale token would fail); bad input is refused by
//! field and no secret reaches `connectors.json` or an error.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::Daemon;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

const REDIRECT: &str = "http://127.0.0.1:9/callback";

fn client(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

/// The fixture on an ephemeral port, killed on drop.
struct Server {
    _child: Child,
    _stdin: ChildStdin,
    url: String,
}

impl Server {
    async fn start(args: &[&str]) -> Self {
        let python = std::env::var("CAR_TEST_MCP_OAUTH_PY").unwrap_or_else(|_| {
            panic!("CAR_TEST_MCP_OAUTH_PY is not set: run `eval \"$(scripts/fetch-mcp-servers)\"` before the tests")
        });
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp-servers/oauth_server.py");
        let mut child = Command::new(python)
            .arg(&script)
            .args(["--port", "0", "--exit-with-stdin"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("oauth_server.py printed its URL")
            .unwrap()
            .expect("a first line");
        Server {
            _child: child,
            _stdin: stdin,
            url,
        }
    }
}

fn param(url: &str, name: &str) -> Option<String> {
    url::Url::parse(url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// The browser's part: open the authorize URL and stop at the redirect to `REDIRECT`.
async fn approve(authorize_url: &str) -> String {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let response = http.get(authorize_url).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 302, "{response:?}");
    response.headers()["location"].to_str().unwrap().to_string()
}

fn rpc(r: Result<Value, Error>) -> (i64, String, Option<Value>) {
    match r {
        Err(Error::Rpc {
            code,
            message,
            data,
        }) => (code, message, data),
        other => panic!("expected an RPC error, got {other:?}"),
    }
}

async fn authenticate(c: &Client, server: &Server, name: &str) -> (String, String) {
    let begun = c
        .call(
            "connectors.authenticate",
            json!({"name": name, "url": server.url, "redirect_uri": REDIRECT}),
        )
        .await
        .unwrap();
    let authorize_url = begun["authorize_url"].as_str().unwrap().to_string();
    let state = begun["state"].as_str().unwrap().to_string();
    assert_eq!(
        param(&authorize_url, "code_challenge_method").as_deref(),
        Some("S256")
    );
    assert_eq!(
        param(&authorize_url, "state").as_deref(),
        Some(state.as_str())
    );
    let location = approve(&authorize_url).await;
    assert_eq!(param(&location, "state").as_deref(), Some(state.as_str()));
    (state, param(&location, "code").expect("a code"))
}

/// A proposal that calls the connector's `whoami` tool.
async fn whoami(c: &Client) -> Value {
    c.call(
        "proposal.submit",
        json!({"proposal": {"actions": [
            {"id": "a", "type": "tool_call", "tool": "mcp_guarded_whoami", "parameters": {}}
        ]}}),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn an_oauth_connector_is_authorized_refreshed_before_use_and_keeps_its_tokens_secret() {
    // Access tokens live 2 s (inside the refresh margin): the token the first connection
    // used is dead by the second round, so that round's call works only if the daemon
    // reconnected with a refreshed one.
    let server = Server::start(&["--access-token-ttl", "2"]).await;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("car-home");
    let d = Daemon::builder().home(&home).start();
    let c = client(&d);
    let (state, code) = authenticate(&c, &server, "Guarded").await;
    let status = c
        .call(
            "connectors.complete_authentication",
            json!({"state": state, "code": code}),
        )
        .await
        .unwrap();
    assert_eq!(status["slug"], "guarded", "{status}");
    assert_eq!(status["connected"], true, "{status}");
    assert!(status["tool_count"].as_u64().unwrap() >= 2, "{status}");

    // The code was taken once.
    let (code_again, message, _) = rpc(c
        .call(
            "connectors.complete_authentication",
            json!({"state": state, "code": code}),
        )
        .await);
    assert_eq!(code_again, -32602);
    assert!(message.contains("state"), "{message}");

    c.call(
        "connectors.enable_tools",
        json!({"slug": "guarded", "tools": ["whoami"]}),
    )
    .await
    .unwrap();
    for round in 0..2 {
        if round == 1 {
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        let r = whoami(&c).await;
        assert_eq!(r["results"][0]["status"], "succeeded", "round {round}: {r}");
    }

    let manifest = std::fs::read_to_string(d.home.join("connectors.json")).unwrap();
    assert!(manifest.contains("\"oauth\": true"), "{manifest}");
    assert!(!manifest.contains("token"), "{manifest}");
    assert!(!manifest.contains(&code), "{manifest}");

    // Across a restart the tokens come back from the secret store (the daemon connects its
    // connectors in the background at startup).
    drop(c);
    drop(d);
    let d = Daemon::builder().home(&home).start();
    let c = client(&d);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let listed = c.call("connectors.list", json!({})).await.unwrap();
        if listed["connectors"][0]["connected"] == true {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the OAuth connector did not reconnect after a restart: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = whoami(&c).await;
    assert_eq!(
        r["results"][0]["status"], "succeeded",
        "after a restart: {r}"
    );

    // Removing it deletes the tokens too: authenticating again is needed.
    c.call("connectors.remove", json!({"slug": "guarded"}))
        .await
        .unwrap();
    assert_eq!(
        c.call("connectors.list", json!({})).await.unwrap()["connectors"],
        json!([])
    );
}

#[tokio::test]
async fn bad_oauth_input_is_refused_by_field_and_failures_name_no_secret() {
    let server = Server::start(&[]).await;
    let plain = Server::start(&["--no-auth"]).await;
    let d = Daemon::start();
    let c = client(&d);
    for (params, field) in [
        (
            json!({"name": "x", "url": "ftp://h/mcp", "redirect_uri": REDIRECT}),
            "url",
        ),
        (
            json!({"name": "x", "url": server.url, "redirect_uri": "/relative"}),
            "redirect_uri",
        ),
        (
            json!({"name": "--", "url": server.url, "redirect_uri": REDIRECT}),
            "name",
        ),
        (json!({"name": "x", "url": server.url}), "redirect_uri"),
    ] {
        let (code, message, _) = rpc(c.call("connectors.authenticate", params.clone()).await);
        assert_eq!(code, -32602, "{params}: {message}");
        assert!(message.contains(field), "{params}: {message}");
    }
    for (params, field) in [
        (json!({"state": "nope", "code": "c"}), "state"),
        (json!({"state": "nope", "code": ""}), "code"),
        (json!({"code": "c"}), "state"),
    ] {
        let (code, message, _) = rpc(c
            .call("connectors.complete_authentication", params.clone())
            .await);
        assert_eq!(code, -32602, "{params}: {message}");
        assert!(message.contains(field), "{params}: {message}");
    }

    // A server without OAuth: a clear failure, nothing added.
    let (code, message, data) = rpc(c
        .call(
            "connectors.authenticate",
            json!({"name": "plain", "url": plain.url, "redirect_uri": REDIRECT}),
        )
        .await);
    assert_eq!(code, -32603, "{message}");
    assert_eq!(data.unwrap()["reason"], "oauth_failed");
    assert!(message.contains("OAuth"), "{message}");

    // A wrong code: refused by the authorization server, the code not repeated.
    let (state, _code) = authenticate(&c, &server, "Wrong").await;
    let bogus = "bogus-code-0123456789";
    let (code, message, _) = rpc(c
        .call(
            "connectors.complete_authentication",
            json!({"state": state, "code": bogus}),
        )
        .await);
    assert_eq!(code, -32603, "{message}");
    assert!(!message.contains(bogus), "{message}");
    assert_eq!(
        c.call("connectors.list", json!({})).await.unwrap()["connectors"],
        json!([])
    );
}

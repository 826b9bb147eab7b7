//! The dashboard's read-only token (issue 16): served by `GET /auth-token` on the dashboard
//! port in exchange for the one-time login secret (issue 24), distinct from the daemon and
//! host tokens; a session holding it sees what a host sees (every agent's runs) and is
//! refused every method that is not a read.

mod common;

use common::*;
use serde_json::{json, Value};

/// `GET path` on `base` (`http://127.0.0.1:port/`); the status and the body.
fn get(base: &str, path: &str) -> (u16, String) {
    let authority = base.trim_start_matches("http://").trim_end_matches('/');
    let r = car_test_harness::http_wire::request(authority, "GET", path, &[], b"");
    (r.status, r.text())
}

/// CAR's `GET /auth-token` hands the observer token to any local process that omits
/// `Origin`; here a request without the login secret gets a 401 whose body authenticates
/// nothing, and the login URL the daemon wrote (`0600`, also in its log) opens it once.
#[tokio::test]
async fn a_credential_less_auth_token_request_yields_nothing_that_authenticates() {
    use std::os::unix::fs::PermissionsExt;
    let mut d = Daemon::start();
    let base = d.dashboard_url.clone().expect("dashboard");
    let (status, body) = get(&base, "/auth-token");
    assert_eq!(status, 401, "{body}");
    // Nothing in the answer opens a session.
    let mut ws = Ws::tcp(&d.ws_url).await;
    let reply: Value = serde_json::from_str(&body).unwrap();
    for candidate in [reply["token"].as_str().unwrap_or(""), body.as_str()] {
        let r = ws.call("session.auth", json!({"token": candidate})).await;
        assert!(r.get("error").is_some(), "{r}");
        ws = Ws::tcp(&d.ws_url).await;
    }

    let login = d.dashboard_login_url();
    assert!(login.starts_with(&format!("{base}#login=")), "{login}");
    let mode = std::fs::metadata(d.dashboard_login_path())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(d.stderr().contains(&login), "the daemon logs the login URL");
    let token = d.observer_token().expect("a token while auth is on");
    let r = ws.call("session.auth", json!({"token": token})).await;
    assert_eq!(r["result"]["role"], "observer", "{r}");
    // The login URL was spent; the file now holds the next one.
    assert_ne!(d.dashboard_login_url(), login);
    let secret = login.split_once("#login=").unwrap().1;
    let authority = base.trim_start_matches("http://").trim_end_matches('/');
    let r = car_test_harness::http_wire::request(
        authority,
        "GET",
        "/auth-token",
        &[("X-Car-Login", secret)],
        b"",
    );
    assert_eq!(r.status, 401, "a spent login opens nothing: {}", r.text());

    // The login file goes with the daemon.
    let path = d.dashboard_login_path();
    assert!(d.terminate().success());
    assert!(!path.exists(), "the login file is removed at shutdown");
}

#[tokio::test]
async fn the_dashboard_token_reads_everything_and_changes_nothing() {
    let d = Daemon::start();
    let token = d.observer_token().expect("a token while auth is on");
    assert_ne!(token, d.token());
    assert_ne!(token, d.host_token());

    // A run started by an ordinary session, for an agent the observer is not bound to.
    let mut op = Ws::authed(&d).await;
    let started = op
        .call(
            "runs.start",
            json!({"agent_name": "dash-worker", "intent": "index the docs"}),
        )
        .await;
    let run_id = started["result"]["run_id"]
        .as_str()
        .expect("run id")
        .to_string();

    let mut ws = Ws::tcp(&d.ws_url).await;
    let r = ws.call("session.auth", json!({"token": token})).await;
    assert_eq!(r["result"]["ok"], true, "{r}");
    assert_eq!(r["result"]["role"], "observer", "{r}");
    let r = ws.call("runs.list", json!({})).await;
    let runs = r["result"]["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(runs.iter().any(|run| run["run_id"] == run_id), "{r}");
    let r = ws.call("runs.get_trace", json!({"run_id": run_id})).await;
    assert_eq!(r["result"]["run_id"], run_id, "{r}");

    let r = ws.call("server.status", Value::Null).await;
    let status = &r["result"];
    let sessions = status["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"));
    let roles: Vec<&str> = sessions.iter().filter_map(|s| s["role"].as_str()).collect();
    assert!(roles.contains(&"observer"), "{r}");
    assert!(roles.contains(&"operator"), "{r}");
    assert!(
        status["admission"]["capacity"].as_u64().unwrap() >= 1,
        "{r}"
    );
    assert_eq!(status["admission"]["running"], 0, "{r}");

    for (method, params) in [
        ("memory.add_fact", json!({"subject": "s", "body": "b"})),
        ("runs.start", json!({"agent_name": "intruder"})),
        ("host.notify", json!({"kind": "x"})),
        ("agents.upsert", json!({"id": "a", "command": "/bin/true"})),
    ] {
        let r = ws.call(method, params).await;
        assert_eq!(r["error"]["code"], -32603, "{method}: {r}");
        assert_eq!(r["error"]["data"]["reason"], "read_only", "{method}: {r}");
    }
    // The refusals changed nothing, and the connection is still served.
    let r = op.call("memory.fact_count", Value::Null).await;
    assert_eq!(r["result"], 0, "{r}");
    let r = ws.call("host.agents", Value::Null).await;
    assert!(r.get("result").is_some(), "{r}");
}

#[tokio::test]
async fn without_auth_the_dashboard_serves_no_token() {
    let d = Daemon::builder().args(["--no-auth"]).start();
    assert_eq!(d.observer_token(), None);
    let (status, body) = get(d.dashboard_url.as_deref().unwrap(), "/auth-token");
    assert_eq!(status, 200, "{body}");
    assert!(!d.dashboard_login_path().exists(), "no login without auth");
}

#[tokio::test]
async fn an_explicit_sibling_address_that_is_taken_stops_the_daemon() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let (status, stderr) = Daemon::builder()
        .args(["--dashboard-port", &port.to_string()])
        .spawn()
        .unwrap_err();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("dashboard"), "{stderr}");
    let (status, stderr) = Daemon::builder()
        .args(["--mcp-bind", &format!("127.0.0.1:{port}")])
        .spawn()
        .unwrap_err();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("MCP"), "{stderr}");
}

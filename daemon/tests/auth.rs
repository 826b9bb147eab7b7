//! Acceptance: auth gate, session.auth shapes, token files, Unix socket (issue 2 §1–3, §9).

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;
use serde_json::json;

#[tokio::test]
async fn first_call_before_auth_gets_32001_then_the_connection_closes() {
    let d = Daemon::start();
    let mut ws = Ws::tcp(&d.ws_url).await;
    let r = ws.call("capabilities.list", json!({})).await;
    assert_eq!(code(&r), -32001);
    assert_eq!(message(&r), "auth required: send session.auth first");
    assert!(ws.closed_with().await.is_some_and(|c| c == 1008));
    // An unknown method is refused the same way: nothing is reachable before auth.
    let mut ws = Ws::tcp(&d.ws_url).await;
    assert_eq!(code(&ws.call("no.such_method", json!({})).await), -32001);
}

#[tokio::test]
async fn wrong_token_then_right_token_then_host_token() {
    let d = Daemon::start();
    let mut ws = Ws::tcp(&d.ws_url).await;
    let r = ws
        .call("session.auth", json!({"token": "x".repeat(43)}))
        .await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (-32603, "auth failed: token mismatch")
    );
    // Still unauthenticated: the next non-auth call closes it.
    assert_eq!(code(&ws.call("server.schema", json!({})).await), -32001);

    let mut ws = Ws::tcp(&d.ws_url).await;
    let r = ws.call("session.auth", json!({"token": "short"})).await;
    assert_eq!(code(&r), -32603);
    let r = ws.call("session.auth", json!({"token": d.token()})).await;
    assert_eq!(r["result"], json!({"ok": true, "auth_enabled": true}));
    assert!(ws.call("server.schema", json!({})).await["result"]["digest"].is_string());

    let mut ws = Ws::tcp(&d.ws_url).await;
    let r = ws
        .call(
            "session.auth",
            json!({"host_token": d.host_token(), "memory_namespace": "Proj/A"}),
        )
        .await;
    assert_eq!(
        r["result"],
        json!({"ok": true, "auth_enabled": true, "role": "host", "memory_namespace": "Proj/A"})
    );
    // The daemon token is not the host token.
    let mut ws = Ws::tcp(&d.ws_url).await;
    assert_eq!(
        code(
            &ws.call("session.auth", json!({"host_token": d.token()}))
                .await
        ),
        -32603
    );
}

#[tokio::test]
async fn malformed_auth_params_name_the_field() {
    let d = Daemon::start();
    let mut ws = Ws::tcp(&d.ws_url).await;
    for (params, expected) in [
        (
            json!({"token": "a", "host_token": "b"}),
            "invalid params: host_token: cannot be combined with token",
        ),
        (
            json!({"host_token": "b", "agent_id": "a"}),
            "invalid params: host_token: cannot be combined with agent_id",
        ),
        (
            json!({"token": 5}),
            "invalid params: token: invalid type: integer `5`, expected a string",
        ),
        (
            json!({}),
            "invalid params: token: is required (or host_token)",
        ),
        (
            json!({"token": null}),
            "invalid params: token: is required (or host_token)",
        ),
        (
            json!({"token": ""}),
            "invalid params: token: must not be empty",
        ),
        (
            json!({"consumer_id": "c", "token": "t", "agent_id": "a"}),
            "invalid params: agent_id: cannot be combined with consumer_id",
        ),
        (
            json!({"consumer_id": "c"}),
            "invalid params: token: is required with consumer_id",
        ),
        (
            json!({"token": "a", "memory_namespace": "n".repeat(300)}),
            "invalid params: memory_namespace: is too long (300 bytes encoded, at most 250)",
        ),
    ] {
        let r = ws.call("session.auth", params.clone()).await;
        assert_eq!(
            (code(&r), message(&r).as_str()),
            (-32602, expected),
            "{params} → {r}"
        );
    }
    // Params that are not a structure are refused by the JSON-RPC layer.
    let r = ws.call("session.auth", json!("token")).await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (
            -32600,
            "invalid request: params must be an object or array, got a string"
        )
    );
    // An unknown field is ignored: the credential beside it is checked as usual.
    let r = ws
        .call("session.auth", json!({"token": "a", "bogus": 1}))
        .await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (-32603, "auth failed: token mismatch")
    );
    // Bad params never authenticate and never crash the daemon.
    assert_eq!(code(&ws.call("server.schema", json!({})).await), -32001);
    let mut ok = Ws::tcp(&d.ws_url).await;
    let r = ok
        .call("session.auth", json!({"token": d.token(), "bogus": 1}))
        .await;
    assert_eq!(r["result"], json!({"ok": true, "auth_enabled": true}));
    assert!(ok.call("server.schema", json!({})).await["result"].is_object());
}

#[tokio::test]
async fn auth_off_accepts_any_token() {
    let d = Daemon::builder().args(["--no-auth"]).start();
    assert!(!d.token_path().exists(), "no token file with auth off");
    let mut ws = Ws::tcp(&d.ws_url).await;
    let r = ws.call("session.auth", json!({"token": "anything"})).await;
    assert_eq!(r["result"], json!({"ok": true, "auth_enabled": false}));
    // With auth off no session.auth is needed at all.
    let mut ws = Ws::tcp(&d.ws_url).await;
    assert!(ws.call("server.schema", json!({})).await["result"].is_object());
    let d = Daemon::builder().env("CAR_NO_AUTH", "1").start();
    let mut ws = Ws::tcp(&d.ws_url).await;
    assert_eq!(
        ws.call("session.auth", json!({"token": "x"})).await["result"]["auth_enabled"],
        false
    );
}

#[tokio::test]
async fn token_files_are_private_distinct_and_removed_on_sigterm() {
    let mut d = Daemon::start();
    let (token, host) = (d.token(), d.host_token());
    for (path, value) in [(d.token_path(), &token), (d.host_token_path(), &host)] {
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600,
            "{path:?}"
        );
        assert_eq!(value.len(), 43);
        assert!(value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    }
    assert_ne!(token, host);
    let socket = d.socket.clone();
    assert!(socket.exists());
    let mut open = Ws::authed(&d).await;
    let status = d.terminate();
    assert!(status.success(), "{status:?}");
    assert!(!d.token_path().exists() && !d.host_token_path().exists());
    assert!(!socket.exists());
    // Open connections were told the daemon is going away.
    assert_eq!(open.closed_with().await, Some(1001));
    // A restart mints a fresh token.
    let d2 = Daemon::builder().home(d.home.clone()).start();
    assert_ne!(d2.token(), token);
}

#[tokio::test]
async fn a_symlink_planted_at_the_token_path_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let token_dir = home.path().join("ai.parslee.car");
    std::fs::create_dir_all(&token_dir).unwrap();
    let victim = home.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, token_dir.join("auth-token")).unwrap();
    let Err((status, stderr)) = Daemon::builder().home(home.path()).spawn() else {
        panic!("daemon started despite a planted symlink")
    };
    assert_eq!(status.code(), Some(1));
    assert!(stderr.contains("symbolic link"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}

#[tokio::test]
async fn the_unix_socket_serves_the_same_protocol_with_the_same_auth() {
    let d = Daemon::start();
    let mut ws = Ws::unix(&d.socket).await;
    assert_eq!(code(&ws.call("server.schema", json!({})).await), -32001);
    let mut ws = Ws::unix(&d.socket).await;
    assert_eq!(
        code(&ws.call("session.auth", json!({"token": "nope"})).await),
        -32603
    );
    let r = ws.call("session.auth", json!({"token": d.token()})).await;
    assert_eq!(r["result"]["ok"], true);
    let r = ws.call("server.handshake", handshake_params()).await;
    assert_eq!(r["result"]["protocol_version"], 3);
    let tcp_schema = Ws::authed(&d).await.call("server.schema", json!({})).await;
    assert_eq!(
        ws.call("server.schema", json!({})).await["result"],
        tcp_schema["result"]
    );
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[tokio::test]
async fn sigint_also_removes_the_token_files() {
    let mut d = Daemon::start();
    assert!(d.token_path().exists());
    assert!(d.signal(libc::SIGINT).success());
    assert!(!d.token_path().exists() && !d.host_token_path().exists());
}

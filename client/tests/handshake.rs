//! Acceptance 2: the connect phase fails closed on `-32601`, a malformed success, a success
//! missing a required capability, and a timeout (scripted fake daemon); a good daemon's
//! negotiated result is exposed.

mod support;

use car_daemon_client::{Client, Error, TimeoutPolicy};
use serde_json::{json, Value};
use support::{config_for, good_handshake_reply, quick_timeouts, within, FakeConn, FakeDaemon};

/// A fake that answers `server.handshake` with `reply` (or not at all when `None`) and
/// answers `debug.echo` afterwards, so a test can prove no call went through.
async fn fake_replying(reply: Option<Value>) -> FakeDaemon {
    FakeDaemon::start(move |mut conn: FakeConn| {
        let reply = reply.clone();
        async move {
            let req = conn.recv().await.expect("handshake frame");
            assert_eq!(req["method"], "server.handshake");
            match reply {
                Some(Value::Number(code)) => {
                    conn.reply_error(
                        &req,
                        code.as_i64().unwrap(),
                        "unknown method: server.handshake",
                    )
                    .await
                }
                Some(result) => conn.reply(&req, result).await,
                None => {}
            }
            conn.serve().await;
        }
    })
    .await
}

/// The error a first call gets from `fake` under `timeouts`.
async fn connect_error_with(fake: &FakeDaemon, timeouts: TimeoutPolicy) -> Error {
    let home = tempfile::tempdir().unwrap();
    let client = Client::new(config_for(&fake.url, home.path()).timeouts(timeouts));
    let err = within(
        "the first call to fail",
        client.call("debug.echo", json!({"x": 1})),
    )
    .await
    .unwrap_err();
    // Fail closed: the call itself never reached the daemon.
    assert!(
        !fake.methods().contains(&"debug.echo".to_string()),
        "{:?}",
        fake.methods()
    );
    assert!(!client.is_connected());
    err
}

/// The error a first call gets from a fake that answers the handshake: default bounds, so
/// however slow the machine, the outcome is the fake's answer and never a timeout.
async fn connect_error(fake: &FakeDaemon) -> Error {
    connect_error_with(fake, TimeoutPolicy::default()).await
}

#[tokio::test]
async fn unknown_method_fails_closed() {
    let fake = fake_replying(Some(json!(-32601))).await;
    match connect_error(&fake).await {
        Error::Handshake { reason, rpc } => {
            assert_eq!(rpc.unwrap().code, -32601);
            assert!(reason.contains("server.handshake refused"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn malformed_success_fails_closed() {
    for malformed in [
        json!({"ok": true}),
        json!("yes"),
        json!({"protocol_version": "3"}),
    ] {
        let fake = fake_replying(Some(malformed)).await;
        match connect_error(&fake).await {
            Error::Handshake { reason, rpc: None } => {
                assert!(reason.contains("malformed"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }
    let mut wrong_version = good_handshake_reply();
    wrong_version["protocol_version"] = json!(2);
    let fake = fake_replying(Some(wrong_version)).await;
    match connect_error(&fake).await {
        Error::Handshake { reason, rpc: None } => {
            assert!(reason.contains("protocol 2"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn missing_required_capability_fails_closed() {
    let mut reply = good_handshake_reply();
    reply["negotiated_capabilities"] = json!(["infer.model-identity.v1"]);
    let fake = fake_replying(Some(reply)).await;
    match connect_error(&fake).await {
        Error::Handshake { reason, .. } => {
            assert!(reason.contains("models.catalog-identity.v1"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn handshake_timeout_fails_closed() {
    let fake = fake_replying(None).await;
    // The reason names the bound that fired: the 500 ms handshake step of quick_timeouts(),
    // not the 30-minute call deadline (which `within`'s hang guard would also catch).
    match connect_error_with(&fake, quick_timeouts()).await {
        Error::Handshake { reason, rpc: None } => {
            assert_eq!(reason, "server.handshake timed out after 500ms")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn negotiated_result_is_exposed_and_the_next_call_retries_after_a_failure() {
    // First connection: the handshake is refused. Second: a good daemon.
    let fake = FakeDaemon::start(|mut conn: FakeConn| async move {
        if conn.index == 0 {
            let req = conn.recv().await.unwrap();
            conn.reply_error(&req, -32601, "unknown method: server.handshake")
                .await;
            conn.serve().await;
        } else {
            conn.accept_handshake().await;
            conn.serve().await;
        }
    })
    .await;
    let home = tempfile::tempdir().unwrap();
    let client = Client::new(config_for(&fake.url, home.path()));
    match client.connect().await {
        Err(Error::Handshake { rpc: Some(rpc), .. }) => assert_eq!(rpc.code, -32601),
        other => panic!("{other:?}"),
    }
    let session = client.connect().await.unwrap();
    assert_eq!(session.handshake.protocol_version, 3);
    assert!(session.has_capability("models.catalog-identity.v1"));
    assert!(session.has_capability("infer.cancel.v1"));
    assert!(session.auth.is_none());
    assert_eq!(client.session().unwrap(), session);
    assert_eq!(
        client.call("debug.echo", json!([1])).await.unwrap(),
        json!([1])
    );
    // The handshake frame carried the protocol version and both capability lists.
    let hs = fake
        .frames()
        .into_iter()
        .map(|(_, _, v)| v)
        .find(|v| v["method"] == "server.handshake")
        .unwrap();
    assert_eq!(hs["params"]["protocol_version"], 3);
    assert_eq!(
        hs["params"]["required_capabilities"],
        json!(["infer.model-identity.v1", "models.catalog-identity.v1"])
    );
    assert_eq!(
        hs["params"]["optional_capabilities"],
        json!(["infer.cancel.v1", "infer.deadline.v1"])
    );
    assert!(hs["params"]["client_version"]
        .as_str()
        .unwrap()
        .contains("car-daemon-client"));
}

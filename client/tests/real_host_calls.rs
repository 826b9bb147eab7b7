//! A host program's calls against the real `car-server`: `call_as_host` sends any method
//! over the host-token connection (`host.subscribe`, then `host.event`s reach the
//! notification handlers; `host.resolve_approval` of a system approval), and
//! `host_connection_closed` resolves when that connection ends.

mod support;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::Daemon;
use serde_json::{json, Value};
use support::within;
use tokio::sync::mpsc;

fn client(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

#[tokio::test]
async fn a_host_subscribes_resolves_approvals_and_sees_its_connection_end() {
    let mut d = Daemon::start();
    let host = client(&d);
    let (tx, mut events) = mpsc::unbounded_channel::<Value>();
    host.register_notification_handler("host.event", move |e| {
        let _ = tx.send(e);
    });
    let snapshot = host
        .call_as_host("host.subscribe", json!({}))
        .await
        .unwrap();
    assert_eq!(snapshot["subscribed"], true, "{snapshot}");
    assert_eq!(host.host_connection_epoch().await.unwrap(), 1);

    // A gated call from an ordinary (daemon-token) connection parks; this host approves it.
    // (A host's own calls are never held: it is the approver.)
    let other = client(&d);
    let parked = tokio::spawn(async move {
        other
            .call("scheduler.os_uninstall", json!({"label": "x"}))
            .await
    });
    let approval = loop {
        let e = within("approval.requested", events.recv()).await.unwrap();
        if e["kind"] == "approval.requested" {
            break e["payload"]["id"].as_str().unwrap().to_string();
        }
    };
    let resolved = host
        .call_as_host(
            "host.resolve_approval",
            json!({"approval_id": approval, "approved": true}),
        )
        .await
        .unwrap();
    assert_eq!(resolved["status"], "approved", "{resolved}");
    let ran = within("the parked call", parked).await.unwrap().unwrap();
    assert_eq!(ran["removed"], false, "{ran}");
    let agent = host
        .call_host_management(
            "agents.upsert",
            json!({"id": "x", "name": "X", "command": "/bin/sh"}),
        )
        .await
        .unwrap();
    assert_eq!(agent["spec"]["id"], "x", "{agent}");

    // Undeclared methods are refused before anything is sent.
    match host.call_as_host("no.such.method", json!({})).await {
        Err(Error::Refused(m)) => assert!(m.contains("no.such.method"), "{m}"),
        other => panic!("{other:?}"),
    }

    let closed = host.clone();
    let watcher = tokio::spawn(async move { closed.host_connection_closed().await });
    d.terminate();
    within("host_connection_closed", watcher).await.unwrap();
}

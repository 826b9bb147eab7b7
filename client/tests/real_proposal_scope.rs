//! `proposal.submit`'s `scope.tenantId` against a real `car-server`: the proposal's state
//! actions, its `require_state` policies and its `final_state` use that tenant's partition
//! (the one `state.*` reaches with `tenant_id`), never the default one.

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::Daemon;
use serde_json::{json, Value};

#[tokio::test]
async fn a_scoped_proposal_reads_and_writes_its_tenants_state() {
    let d = Daemon::start();
    let c = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)));
    c.call("state.set", json!({"key": "mode", "value": "default"}))
        .await
        .unwrap();
    let submit = |scope: Value| {
        let c = c.clone();
        async move {
            c.call(
                "proposal.submit",
                json!({"proposal": {"actions": [
                    {"id": "w", "type": "state_write", "key": "owner", "value": "acme-bot"}
                ]}, "scope": scope}),
            )
            .await
        }
    };
    let r = submit(json!({"tenantId": "acme", "callerId": "svc"}))
        .await
        .unwrap();
    assert_eq!(r["final_state"], json!({"owner": "acme-bot"}), "{r}");
    let scoped = c
        .call("state.get", json!({"key": "owner", "tenant_id": "acme"}))
        .await
        .unwrap();
    assert_eq!(scoped, json!("acme-bot"));
    let unscoped = c.call("state.get", json!({"key": "owner"})).await.unwrap();
    assert_eq!(unscoped, Value::Null, "the default partition was written");
    assert_eq!(
        c.call("state.get", json!({"key": "mode"})).await.unwrap(),
        json!("default")
    );
    // No scope (or an empty tenant) is the default partition, as before.
    let r = submit(json!({"tenantId": ""})).await.unwrap();
    assert_eq!(r["final_state"]["mode"], "default", "{r}");

    let e = submit(json!({"tenantId": 7})).await.unwrap_err();
    match e {
        Error::Rpc { code, message, .. } => {
            assert_eq!(code, -32602);
            assert!(message.contains("scope.tenantId"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

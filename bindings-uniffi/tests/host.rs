//! `HostClient` against a real `car-server`: the `host` methods' generated members and
//! `daemon_call_host_management` go over the client's host-management connection, the
//! client itself is refused them (`data.reason: host_required`), and the host token is
//! read only for host calls.

use std::sync::Arc;

use car_daemon_client::{ClientConfig, EnvSnapshot};
use car_runtime_uniffi::{CarDaemonClient, CarError, HostClient};
use car_test_harness::Daemon;
use serde_json::{json, Value};

fn client_for(d: &Daemon) -> Arc<CarDaemonClient> {
    CarDaemonClient::with_config(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
        .expect("client")
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).expect("results are JSON")
}

/// The daemon's refusal reason of a failed call.
fn reason(err: &CarError) -> Value {
    let CarError::DaemonRpc { data_json, .. } = err else {
        panic!("{err:?}");
    };
    parse(data_json)["reason"].clone()
}

#[test]
fn host_members_go_over_the_host_connection_and_the_client_is_refused_them() {
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let c = client_for(&d);
    let host = HostClient::new(c.clone());
    let reply = host
        .daemon_call_host_management("session.clear_halt".into(), "{}".into())
        .unwrap();
    assert_eq!(parse(&reply), json!({"cleared": false}));
    assert_eq!(
        parse(&host.session_clear_halt("{}".into()).unwrap()),
        json!({"cleared": false})
    );
    let err = c
        .daemon_call("session.clear_halt".into(), "{}".into())
        .unwrap_err();
    assert_eq!(reason(&err), json!("host_required"), "{err:?}");

    // agents.upsert (a typed member of a host method) registers an agent the client lists.
    let spec = json!({"id": "uniffi-agent", "name": "UniFFI", "command": "/bin/sh"});
    let agent = parse(&host.agents_upsert(spec.to_string()).unwrap());
    assert_eq!(agent["spec"]["id"], "uniffi-agent");
    let token = std::fs::read_to_string(agent["token_path"].as_str().unwrap()).unwrap();
    assert!(token.trim().len() >= 32);
    let listed = parse(&c.agents_list("{}".into()).unwrap());
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["spec"]["id"] == "uniffi-agent"),
        "{listed}"
    );
    let err = c
        .daemon_call("agents.upsert".into(), spec.to_string())
        .unwrap_err();
    assert_eq!(reason(&err), json!("host_required"), "{err:?}");
    let removed = host
        .agents_remove(json!({"id": "uniffi-agent"}).to_string())
        .unwrap();
    assert_eq!(parse(&removed), json!({"removed": true}));

    // A host-only method works only through the host client.
    assert!(parse(&host.diagnostics_secret_store_activity("{}".into()).unwrap()).is_object());
    let err = c
        .daemon_call("diagnostics.secret_store_activity".into(), "{}".into())
        .unwrap_err();
    assert_eq!(reason(&err), json!("host_required"), "{err:?}");

    // `remove_model` stays the client's (CAR's CarRuntime has it) and passes the role check.
    let err = c.remove_model("no-such-model".into()).unwrap_err();
    assert_ne!(reason(&err), json!("host_required"), "{err:?}");

    // Not a host-management method: refused before the host token is read.
    let err = host
        .daemon_call_host_management("state.get".into(), "{}".into())
        .unwrap_err();
    assert!(
        matches!(&err, CarError::Refused { detail } if detail.contains("not a host-management method")),
        "{err:?}"
    );
}

#[test]
fn the_host_token_is_read_only_for_host_calls() {
    let d = Daemon::builder().start();
    let saved = std::fs::read(d.host_token_path()).unwrap();
    std::fs::remove_file(d.host_token_path()).unwrap();
    let c = client_for(&d);
    let host = HostClient::new(c.clone());
    assert_eq!(parse(&c.agents_list("{}".into()).unwrap()), json!([]));
    let err = host.session_clear_halt("{}".into()).unwrap_err();
    assert!(
        matches!(&err, CarError::Refused { detail } if detail.contains("host-token")),
        "{err:?}"
    );
    std::fs::write(d.host_token_path(), saved).unwrap();
    assert_eq!(
        parse(&host.session_clear_halt("{}".into()).unwrap()),
        json!({"cleared": false})
    );
}

//! Acceptance: server.handshake, capabilities.list and server.schema (issue 2 §5–6).

mod common;

use common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn version_must_be_exactly_3() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    for params in [
        json!({}),
        json!({"protocol_version": "3"}),
        json!({"protocol_version": 2}),
        json!({"protocol_version": 4}),
        json!({"protocol_version": 3.5}),
        json!({"protocol_version": null}),
    ] {
        let r = ws.call("server.handshake", params.clone()).await;
        assert_eq!(code(&r), -32006, "{params} → {r}");
        assert!(message(&r).starts_with("protocol version mismatch:"), "{r}");
    }
    // None of those negotiated the session.
    let mut host = Ws::host(&d).await;
    assert_eq!(
        code(
            &host
                .call("server.handshake", json!({"protocol_version": "3"}))
                .await
        ),
        -32006
    );
    assert_eq!(code(&host.call("host.subscribe", json!({})).await), -32005);
}

#[tokio::test]
async fn capabilities_are_negotiated_sorted_and_deduplicated() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let r = ws
        .call(
            "server.handshake",
            json!({
                "protocol_version": 3,
                "client_version": "c".repeat(100),
                "required_capabilities": ["models.catalog-identity.v1", "infer.model-identity.v1", "infer.model-identity.v1"],
                "optional_capabilities": ["infer.deadline.v1", "made.up.v9"],
            }),
        )
        .await;
    let result = &r["result"];
    assert_eq!(
        result["negotiated_capabilities"],
        json!([
            "infer.deadline.v1",
            "infer.model-identity.v1",
            "models.catalog-identity.v1"
        ])
    );
    assert_eq!(result["protocol_version"], 3);
    assert_eq!(result["client_protocol_version"], 3);
    assert_eq!(result["client_version"], "c".repeat(64));
    assert_eq!(result["server_version"], car_proto::CAR_VERSION);
    // An idempotent repeat.
    let again = ws.call("server.handshake", json!({"protocol_version": 3, "required_capabilities": ["infer.model-identity.v1", "models.catalog-identity.v1"]})).await;
    assert_eq!(again["result"]["client_version"], "unknown");
    assert_eq!(
        again["result"]["negotiated_capabilities"],
        json!(["infer.model-identity.v1", "models.catalog-identity.v1"])
    );

    let r = ws
        .call(
            "server.handshake",
            json!({"protocol_version": 3, "required_capabilities": ["feedback.v1"]}),
        )
        .await;
    assert_eq!(code(&r), -32008);
    assert!(
        message(&r).starts_with("protocol capability mismatch:")
            && message(&r).contains("feedback.v1")
    );
    let r = ws
        .call(
            "server.handshake",
            json!({"protocol_version": 3, "optional_capabilities": [""]}),
        )
        .await;
    assert_eq!(code(&r), -32602);
    assert!(message(&r).contains("optional_capabilities[0]"));
}

#[tokio::test]
async fn host_subscribe_needs_the_handshake_and_the_host_role_gate_names_its_reason() {
    let d = Daemon::start();
    let mut host = Ws::host(&d).await;
    let r = host.call("host.subscribe", json!({})).await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (
            -32005,
            "protocol handshake required: call server.handshake before host.subscribe"
        )
    );
    // A failed handshake does not negotiate; a good one does.
    assert_eq!(
        code(
            &host
                .call(
                    "server.handshake",
                    json!({"protocol_version": 3, "required_capabilities": ["nope.v1"]})
                )
                .await
        ),
        -32008
    );
    assert_eq!(code(&host.call("host.subscribe", json!({})).await), -32005);
    assert!(host.call("server.handshake", handshake_params()).await["result"].is_object());
    let snapshot = host.call("host.subscribe", json!({})).await["result"].clone();
    assert_eq!(snapshot["subscribed"], true, "{snapshot}");
    assert_eq!(snapshot["agents"], json!([]), "{snapshot}");
    // host.subscribe is an operator method (CAR's label): a negotiated operator session may
    // subscribe too, but not before its own handshake.
    let mut op = Ws::authed(&d).await;
    assert_eq!(code(&op.call("host.subscribe", json!({})).await), -32005);
    op.call("server.handshake", handshake_params()).await;
    assert_eq!(
        op.call("host.subscribe", json!({})).await["result"]["subscribed"],
        true
    );
    // A host-labelled method refuses a non-host session with -32603 and data.reason, before
    // and after the handshake (the host gate does not depend on negotiation).
    let mut fresh = Ws::authed(&d).await;
    for ws in [&mut fresh, &mut op] {
        for method in ["models.remove", "session.clear_halt"] {
            let r = ws.call(method, json!({"id": "m"})).await;
            assert_eq!(
                r["error"],
                json!({
                    "code": -32603,
                    "message": format!("permission denied: {method} needs a host session, this session is operator"),
                    "data": {"reason": "host_required"},
                }),
                "{r}"
            );
        }
    }
    // The gate order: an unknown method is -32601 whatever the session negotiated, and a
    // host method is refused by role before its params are read.
    assert_eq!(code(&fresh.call("host.nope", json!({})).await), -32601);
    let r = fresh.call("models.remove", json!({"id": 5})).await;
    assert_eq!(r["error"]["data"]["reason"], "host_required", "{r}");
    // The capability gate comes after the host gate: an operator without infer.cancel.v1
    // gets -32008 for infer.cancel, whose role it may call.
    let r = op.call("infer.cancel", json!({"id": 1})).await;
    assert_eq!(code(&r), -32008, "{r}");
}

#[tokio::test]
async fn pipelined_handshake_right_behind_auth_is_not_raced() {
    let d = Daemon::start();
    let mut ws = Ws::tcp(&d.ws_url).await;
    ws.request("session.auth", json!({"token": d.token()}))
        .await;
    ws.request("server.handshake", handshake_params()).await;
    let auth = ws.recv_json().await;
    let hs = ws.recv_json().await;
    assert_eq!(auth["result"]["ok"], true);
    assert_eq!(hs["result"]["protocol_version"], 3, "{hs}");
}

fn rows(list: &Value) -> Vec<(String, String)> {
    list["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["method"].as_str().unwrap().to_string(),
                m["role"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The rows `role` should see, from the contract itself.
fn expected_rows(caller: car_proto::methods::CallerRole) -> Vec<(String, String)> {
    car_proto::methods::active(false)
        .filter(|d| caller.sees(d.spec.role))
        .map(|d| (d.name().to_string(), d.spec.role.as_str().to_string()))
        .collect()
}

#[tokio::test]
async fn capabilities_list_is_filtered_by_role() {
    use car_proto::methods::CallerRole;
    let d = Daemon::start();
    let operator = Ws::authed(&d)
        .await
        .call("capabilities.list", json!({}))
        .await["result"]
        .clone();
    let host = Ws::host(&d)
        .await
        .call("capabilities.list", json!({}))
        .await["result"]
        .clone();
    assert_eq!(operator["caller_role"], "operator");
    assert_eq!(host["caller_role"], "host");
    let (op_rows, host_rows) = (rows(&operator), rows(&host));
    assert_eq!(op_rows, expected_rows(CallerRole::Operator));
    assert_eq!(host_rows, expected_rows(CallerRole::Host));
    assert_eq!(operator["count"].as_u64().unwrap() as usize, op_rows.len());
    assert_eq!(host["count"].as_u64().unwrap() as usize, host_rows.len());
    // CAR's labels: an operator session sees only operator rows.
    assert!(
        op_rows.iter().all(|(_, role)| role == "operator"),
        "{op_rows:?}"
    );
    let row = |m: &str, r: &str| (m.to_string(), r.to_string());
    assert!(op_rows.contains(&row("host.subscribe", "operator")));
    assert!(!op_rows
        .iter()
        .any(|(m, _)| m == "infer" || m == "models.remove"));
    // A host session sees host, owner and operator rows, never agent rows.
    assert!(host_rows.iter().all(|(_, role)| role != "agent"));
    for (m, r) in [
        ("models.remove", "host"),
        ("session.clear_halt", "host"),
        ("proposal.submit", "owner"),
        ("runs.complete", "owner"),
        ("runs.list", "owner"),
        ("host.subscribe", "operator"),
        ("models.unregister", "operator"),
    ] {
        assert!(host_rows.contains(&row(m, r)), "{m} {r} in {host_rows:?}");
    }
    for m in ["infer", "memory.add_fact", "runs.start", "session.auth"] {
        assert!(!host_rows.iter().any(|(n, _)| n == m), "{m}");
    }
    let mut sorted = host_rows.clone();
    sorted.sort();
    assert_eq!(sorted, host_rows);
    assert!(
        !host_rows.iter().any(|(m, _)| m.starts_with("debug.")),
        "debug rows are hidden by default"
    );
    // An agent session (auth off binds the agent it names) sees agent, owner and operator
    // rows, never host rows.
    let d = Daemon::builder().args(["--no-auth"]).start();
    let mut agent = Ws::tcp(&d.ws_url).await;
    agent
        .call("session.auth", json!({"token": "x", "agent_id": "a1"}))
        .await;
    let list = agent.call("capabilities.list", json!({})).await["result"].clone();
    assert_eq!(list["caller_role"], "agent");
    let agent_rows = rows(&list);
    assert_eq!(agent_rows, expected_rows(CallerRole::Agent));
    for (m, r) in [
        ("infer", "agent"),
        ("memory.add_fact", "agent"),
        ("runs.start", "agent"),
        ("session.auth", "agent"),
        ("proposal.submit", "owner"),
    ] {
        assert!(agent_rows.contains(&row(m, r)), "{m} {r} in {agent_rows:?}");
    }
    assert!(agent_rows.iter().all(|(_, role)| role != "host"));
}

#[tokio::test]
async fn schema_digest_is_stable_across_runs_and_tracks_the_table() {
    let digest_of = |d: &Daemon| {
        let url = d.ws_url.clone();
        let token = d.token();
        async move {
            let mut ws = Ws::tcp(&url).await;
            ws.call("session.auth", json!({"token": token})).await;
            ws.call("server.schema", json!({})).await["result"].clone()
        }
    };
    let a = digest_of(&Daemon::start()).await;
    let b = digest_of(&Daemon::start()).await;
    assert_eq!(a["digest"], b["digest"]);
    assert_eq!(a["digest_algorithm"], "sha256");
    assert_eq!(a["car_version"], car_proto::CAR_VERSION);
    assert_eq!(
        a["digest"].as_str().unwrap(),
        car_proto::schema::digest(&a["schema"])
    );
    // A daemon whose table has more rows (the debug methods) publishes another digest.
    let debug = digest_of(&Daemon::builder().args(["--debug-methods"]).start()).await;
    assert_ne!(a["digest"], debug["digest"]);
    assert!(
        debug["schema"]["methods"].as_array().unwrap().len()
            > a["schema"]["methods"].as_array().unwrap().len()
    );
}

#[tokio::test]
async fn unknown_methods_and_capability_gates() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let r = ws.call("voice.transcribe", json!({})).await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (-32601, "unknown method: voice.transcribe")
    );
    // debug rows do not exist on a default daemon.
    assert_eq!(code(&ws.call("debug.echo", json!({})).await), -32601);
}

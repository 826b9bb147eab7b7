//! The host surface against a real daemon: the per-session ACL on host state, the
//! `host.event` stream with `seq`/`epoch` and replay after a reconnect, and the approval
//! gate (approve, deny, timeout, `--no-approvals`).

mod common;

use common::{code, message, Daemon, Ws};
use serde_json::{json, Value};

/// The next `host.event` notification (responses and other notifications are skipped).
async fn host_event(ws: &mut Ws) -> Value {
    loop {
        let v = ws.recv_json().await;
        if v["method"] == "host.event" {
            return v["params"].clone();
        }
    }
}

async fn subscribed_host(d: &Daemon, params: Value) -> (Ws, Value) {
    let (ws, reply, replayed) = subscribe_collecting(d, params).await;
    assert!(replayed.is_empty(), "{replayed:?}");
    (ws, reply)
}

/// Subscribes a new host session; also returns the `host.event`s queued before the
/// reply (a replay is sent ahead of it).
async fn subscribe_collecting(d: &Daemon, params: Value) -> (Ws, Value, Vec<Value>) {
    let mut ws = Ws::host(d).await;
    let r = ws
        .call("server.handshake", common::handshake_params())
        .await;
    assert!(r["result"].is_object(), "{r}");
    let id = ws.request("host.subscribe", params).await;
    let mut before = Vec::new();
    loop {
        let v = ws.recv_json().await;
        if v["method"] == "host.event" {
            before.push(v["params"].clone());
        } else if v["id"] == json!(id) {
            assert_eq!(v["result"]["subscribed"], true, "{v}");
            return (ws, v["result"].clone(), before);
        }
    }
}

fn agent(id: &str) -> Value {
    json!({"id": id, "name": format!("Agent {id}"), "kind": "callback", "capabilities": ["chat"]})
}

#[tokio::test]
async fn two_sessions_share_the_registry_but_only_owners_mutate_and_hosts_see_every_change() {
    let d = Daemon::start();
    let (mut host, snapshot) = subscribed_host(&d, json!({})).await;
    assert_eq!(snapshot["agents"], json!([]));
    assert!(snapshot["epoch"].as_str().unwrap().starts_with("epoch-"));
    assert_eq!(snapshot["identity"]["pid"], d.pid());
    let mut a = Ws::authed(&d).await;
    let mut b = Ws::authed(&d).await;

    let r = a.call("host.register_agent", agent("alpha")).await;
    assert_eq!(r["result"]["id"], "alpha", "{r}");
    assert_eq!(r["result"]["status"], "idle");
    let r = b.call("host.register_agent", agent("beta")).await;
    assert_eq!(r["result"]["id"], "beta", "{r}");

    for ws in [&mut a, &mut b] {
        let r = ws.call("host.agents", json!(null)).await;
        let ids: Vec<&str> = r["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, vec!["alpha", "beta"], "{r}");
    }

    // b cannot touch a's agent, nor take its id over.
    for (method, params) in [
        (
            "host.set_status",
            json!({"agent_id": "alpha", "status": "running"}),
        ),
        ("host.unregister_agent", json!({"agent_id": "alpha"})),
        ("host.register_agent", agent("alpha")),
    ] {
        let r = b.call(method, params).await;
        assert_eq!(code(&r), -32603, "{method}: {r}");
        assert!(
            message(&r).contains("agent 'alpha' is owned by another session"),
            "{r}"
        );
        assert_eq!(r["error"]["data"]["reason"], "not_owner");
    }

    let r = a
        .call(
            "host.set_status",
            json!({"agent_id": "alpha", "status": "running", "current_task": "indexing"}),
        )
        .await;
    assert_eq!(r["result"]["status"], "running", "{r}");
    assert_eq!(r["result"]["current_task"], "indexing");
    let r = a
        .call(
            "host.notify",
            json!({"message": "hello", "agent_id": "alpha"}),
        )
        .await;
    assert_eq!(r["result"]["kind"], "host.notification", "{r}");
    let r = b
        .call("host.unregister_agent", json!({"agent_id": "beta"}))
        .await;
    assert_eq!(r["result"]["ok"], true, "{r}");

    let mut seen = Vec::new();
    for _ in 0..5 {
        let e = host_event(&mut host).await;
        seen.push((
            e["seq"].as_u64().unwrap(),
            e["kind"].as_str().unwrap().to_string(),
            e["agent_id"].as_str().unwrap_or("").to_string(),
        ));
        assert_eq!(e["sequence"], e["seq"]);
        assert_eq!(e["epoch"], snapshot["epoch"]);
    }
    let expected = [
        "agent.registered:alpha",
        "agent.registered:beta",
        "agent.status_changed:alpha",
        "host.notification:alpha",
        "agent.unregistered:beta",
    ];
    let got: Vec<String> = seen.iter().map(|(_, k, a)| format!("{k}:{a}")).collect();
    assert_eq!(got, expected);
    let seqs: Vec<u64> = seen.iter().map(|(s, _, _)| *s).collect();
    let first = seqs[0];
    assert_eq!(seqs, (first..first + 5).collect::<Vec<_>>(), "gap-free");

    // When its owner disconnects, the agent goes.
    drop(a);
    let e = host_event(&mut host).await;
    assert_eq!(e["kind"], "agent.unregistered");
    assert_eq!(e["agent_id"], "alpha");
    assert_eq!(e["payload"]["reason"], "session_closed");
    let r = b.call("host.agents", json!({})).await;
    assert_eq!(r["result"], json!([]));
}

#[tokio::test]
async fn a_reconnecting_host_gets_exactly_what_it_missed_then_live_events() {
    let d = Daemon::start();
    let (mut host, snapshot) = subscribed_host(&d, json!({})).await;
    let epoch = snapshot["epoch"].as_str().unwrap().to_string();
    let mut a = Ws::authed(&d).await;
    for i in 0..3 {
        a.call("host.notify", json!({"message": format!("before-{i}")}))
            .await;
    }
    let mut last = 0;
    for _ in 0..3 {
        last = host_event(&mut host).await["seq"].as_u64().unwrap();
    }
    drop(host);
    for i in 0..4 {
        a.call("host.notify", json!({"message": format!("missed-{i}")}))
            .await;
    }

    let (mut host, reply, mut events) =
        subscribe_collecting(&d, json!({"after_seq": last, "epoch": epoch})).await;
    assert_eq!(reply["replayed"], true, "{reply}");
    assert_eq!(reply["replayed_count"], 4);
    a.call("host.notify", json!({"message": "live"})).await;
    while events.len() < 5 {
        events.push(host_event(&mut host).await);
    }
    let messages: Vec<String> = events
        .iter()
        .map(|e| e["message"].as_str().unwrap().to_string())
        .collect();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        messages,
        ["missed-0", "missed-1", "missed-2", "missed-3", "live"]
    );
    assert_eq!(seqs, (last + 1..last + 6).collect::<Vec<_>>());

    // Another epoch, or a cursor the ring cannot serve, is refused (and still subscribes).
    let (_, reply) = subscribed_host(&d, json!({"after_seq": 1, "epoch": "epoch-old"})).await;
    assert_eq!(reply["replayed"], false);
    assert_eq!(reply["reason"], "epoch");
    let (_, reply) = subscribed_host(&d, json!({"after_seq": 1_000_000, "epoch": epoch})).await;
    assert_eq!(reply["replayed"], false);
    assert_eq!(reply["reason"], "gap");
}

#[tokio::test]
async fn host_methods_refuse_bad_input_naming_the_field() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let cases = [
        ("host.register_agent", json!({"kind": "x"}), "name"),
        (
            "host.register_agent",
            json!({"name": "", "kind": "x"}),
            "name",
        ),
        (
            "host.register_agent",
            json!({"name": "n", "kind": "x", "metadata": [1]}),
            "metadata",
        ),
        (
            "host.set_status",
            json!({"agent_id": "a", "status": "sleeping"}),
            "status",
        ),
        (
            "host.set_status",
            json!({"agent_id": "nobody", "status": "idle"}),
            "agent_id",
        ),
        ("host.unregister_agent", json!({}), "agent_id"),
        ("host.events", json!({"limit": 0}), "limit"),
        ("host.events", json!({"limit": "ten"}), "limit"),
        ("host.request_approval", json!({}), "title"),
        (
            "host.request_approval",
            json!({"title": "t", "required_approvals": 0}),
            "required_approvals",
        ),
        (
            "host.resolve_approval",
            json!({"approval_id": "x"}),
            "approved",
        ),
        (
            "host.resolve_approval",
            json!({"approval_id": "approval-none", "approved": true}),
            "approval_id",
        ),
        (
            "host.update_device",
            json!({"device_id": "d0"}),
            "device_id",
        ),
        ("host.register_device", json!({"name": "phone"}), "platform"),
    ];
    for (method, params, field) in cases {
        let r = ws.call(method, params.clone()).await;
        assert_eq!(code(&r), -32602, "{method} {params}: {r}");
        assert!(
            message(&r).contains(field),
            "{method} {params}: {} should name {field}",
            message(&r)
        );
    }
    // host.subscribe needs the handshake and refuses epoch without after_seq.
    let r = ws.call("host.subscribe", json!({})).await;
    assert_eq!(code(&r), -32005, "{r}");
    ws.call("server.handshake", common::handshake_params())
        .await;
    let r = ws.call("host.subscribe", json!({"epoch": "e"})).await;
    assert_eq!(code(&r), -32602, "{r}");
    assert!(message(&r).contains("after_seq"));
    // Nothing was lost or created by the refusals.
    let r = ws.call("host.agents", json!({})).await;
    assert_eq!(r["result"], json!([]));
}

#[tokio::test]
async fn an_approval_belongs_to_the_session_that_raised_it() {
    let d = Daemon::start();
    let (mut host, _) = subscribed_host(&d, json!({})).await;
    let mut a = Ws::authed(&d).await;
    let mut b = Ws::authed(&d).await;
    a.call("host.register_agent", agent("alpha")).await;
    let r = a
        .call(
            "host.request_approval",
            json!({"agent_id": "alpha", "title": "Run cargo test", "context": {"command": "cargo test"}}),
        )
        .await;
    let approval = r["result"].clone();
    assert_eq!(approval["status"], "pending", "{r}");
    assert_eq!(approval["action"], "Run cargo test");
    assert_eq!(approval["details"]["command"], "cargo test");
    assert_eq!(approval["options"], json!(["approve", "deny"]));
    let r = a.call("host.agents", json!({})).await;
    assert_eq!(r["result"][0]["status"], "waiting_for_approval");
    let id = approval["id"].as_str().unwrap();
    let r = b
        .call(
            "host.resolve_approval",
            json!({"approval_id": id, "approved": true}),
        )
        .await;
    assert_eq!(r["error"]["data"]["reason"], "not_owner", "{r}");
    let r = a
        .call(
            "host.resolve_approval",
            json!({"approval_id": id, "approved": false, "notes": "not now"}),
        )
        .await;
    assert_eq!(r["result"]["status"], "denied", "{r}");
    let r = a.call("host.approvals", json!({})).await;
    assert_eq!(r["result"]["approvals"][0]["notes"], "not now");
    let kinds: Vec<String> = {
        let mut k = Vec::new();
        for _ in 0..3 {
            k.push(
                host_event(&mut host).await["kind"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
        k
    };
    assert_eq!(
        kinds,
        [
            "agent.registered",
            "approval.requested",
            "approval.resolved"
        ]
    );
}

fn upsert_params(id: &str) -> Value {
    json!({"id": id, "name": id, "command": "/bin/sh"})
}

/// Waits for the next `approval.requested` and returns its approval id.
async fn next_request(host: &mut Ws) -> (String, Value) {
    loop {
        let e = host_event(host).await;
        if e["kind"] == "approval.requested" {
            return (e["payload"]["id"].as_str().unwrap().to_string(), e);
        }
    }
}

fn uninstall_params(label: &str) -> Value {
    json!({"label": label})
}

/// Waits on `ws` for the reply to request `id`.
async fn reply_to(ws: &mut Ws, id: u64) -> Value {
    loop {
        let v = ws.recv_json().await;
        if v["id"] == json!(id) {
            return v;
        }
    }
}

/// Issue 24: CAR lets any authenticated session resolve a gate approval, so a caller
/// approved its own gated call from a second socket with the same token. Only a host
/// session resolves one here, never one holding the parked call's credential.
#[tokio::test]
async fn a_gated_call_is_approved_only_by_a_host_never_by_its_own_credential() {
    let d = Daemon::start();
    let (mut host, _) = subscribed_host(&d, json!({})).await;
    let mut caller = Ws::authed(&d).await;

    let id = caller
        .request("scheduler.os_uninstall", uninstall_params("gated-one"))
        .await;
    let (approval, event) = next_request(&mut host).await;
    assert_eq!(
        event["payload"]["action"],
        "ws.method:scheduler.os_uninstall"
    );
    assert_eq!(event["payload"]["client_id"], Value::Null);
    let approve = json!({"approval_id": approval, "resolution": "approve"});
    // The parked socket, and a second socket with the same (daemon) token: self-approval.
    let mut second = Ws::authed(&d).await;
    for ws in [&mut caller, &mut second] {
        let r = ws.call("host.resolve_approval", approve.clone()).await;
        assert_eq!(code(&r), -32603, "{r}");
        assert_eq!(r["error"]["data"]["reason"], "self_approval", "{r}");
    }
    // An agent, and the dashboard's observer: not a host.
    let mut registrar = Ws::host(&d).await;
    let mut agent = common::registered_agent(&d, &mut registrar, "approver-agent").await;
    let r = agent.call("host.resolve_approval", approve.clone()).await;
    assert_eq!(r["error"]["data"]["reason"], "host_only", "{r}");
    let mut observer = Ws::tcp(&d.ws_url).await;
    let token = d.observer_token().unwrap();
    observer.call("session.auth", json!({"token": token})).await;
    let r = observer
        .call("host.resolve_approval", approve.clone())
        .await;
    assert!(r.get("error").is_some(), "{r}");
    // Still pending; the host approves and the call runs.
    let r = host.call("host.approvals", json!({})).await;
    assert_eq!(r["result"]["approvals"][0]["status"], "pending", "{r}");
    let r = host.call("host.resolve_approval", approve).await;
    assert_eq!(r["result"]["status"], "approved", "{r}");
    let r = reply_to(&mut caller, id).await;
    assert_eq!(
        r["result"]["removed"], false,
        "approved: the handler ran: {r}"
    );

    // Denied: -32003, the connection stays usable.
    let id = caller
        .request("scheduler.os_uninstall", uninstall_params("gated-two"))
        .await;
    let (approval, _) = next_request(&mut host).await;
    host.call(
        "host.resolve_approval",
        json!({"approval_id": approval, "approved": false}),
    )
    .await;
    let r = reply_to(&mut caller, id).await;
    assert_eq!(code(&r), -32003, "{r}");
    assert_eq!(r["error"]["data"]["reason"], "approval_denied");
    assert_eq!(r["error"]["data"]["approval_id"], approval.as_str());
    let r = caller.call("tasks.list", json!({})).await;
    assert!(r.get("result").is_some(), "{r}");

    // The host's own call of a gated method is not held (it is the approver).
    let r = host
        .call("scheduler.os_uninstall", uninstall_params("host-own"))
        .await;
    assert_eq!(r["result"]["removed"], false, "{r}");
    let r = host.call("agents.upsert", upsert_params("host-own")).await;
    assert_eq!(r["result"]["spec"]["id"], "host-own", "{r}");
}

#[tokio::test]
async fn an_unanswered_approval_times_out_and_no_approvals_runs_at_once() {
    let d = Daemon::builder()
        .args(["--approval-timeout", "300ms"])
        .start();
    let mut caller = Ws::authed(&d).await;
    let r = caller
        .call("scheduler.os_uninstall", uninstall_params("late"))
        .await;
    assert_eq!(code(&r), -32003, "{r}");
    assert_eq!(r["error"]["data"]["reason"], "approval_timeout");
    let r = caller.call("host.approvals", json!({})).await;
    assert_eq!(
        r["result"]["approvals"][0]["status"], "pending",
        "kept for forensics: {r}"
    );

    let d = Daemon::builder().args(["--no-approvals"]).start();
    let mut caller = Ws::authed(&d).await;
    let r = caller
        .call("scheduler.os_uninstall", uninstall_params("free"))
        .await;
    assert_eq!(r["result"]["removed"], false, "{r}");
    let r = caller.call("host.approvals", json!({})).await;
    assert_eq!(r["result"]["approvals"], json!([]));
}

/// Issue 24: 150 padding `args` used to push the `program` an attacker chose past the
/// preview's cut; `details.decisive` always shows it, with the `env` names (not values).
#[tokio::test]
async fn a_padded_approval_still_shows_what_would_run() {
    let d = Daemon::start();
    let (mut host, _) = subscribed_host(&d, json!({})).await;
    let mut caller = Ws::authed(&d).await;
    let padding: Vec<Value> = (0..150).map(|i| json!(format!("padding-{i:04}"))).collect();
    caller
        .request(
            "scheduler.os_install",
            json!({"args": padding, "program": "/tmp/evil-program",
                   "task": {"id": "padded", "env": {"LD_PRELOAD": "/tmp/evil.so"}}}),
        )
        .await;
    let (_, event) = next_request(&mut host).await;
    let details = &event["payload"]["details"];
    assert!(
        !details["params"].to_string().contains("/tmp/evil-program"),
        "the padding pushes command past the cut: {details}"
    );
    let decisive = &details["decisive"];
    assert_eq!(decisive["program"], "/tmp/evil-program", "{details}");
    assert_eq!(decisive["args_count"], 150, "{details}");
    assert_eq!(decisive["args"][0], "padding-0000", "{details}");
    assert_eq!(decisive["env_names"], json!(["LD_PRELOAD"]), "{details}");
    assert!(!event.to_string().contains("evil.so"), "{event}");
}

//! The access matrix (issue 24): every declared method × every principal against one real
//! daemon, with the expected answer derived from the method's declaration
//! (`car_proto::methods::Access` and CAR's role label) — so a new method is covered with no
//! edit here, and a method without a declared rule does not compile.
//!
//! Principals: a stranger (no `session.auth`), the dashboard's observer, an inference
//! consumer grant, an agent, an operator (daemon token), a host (host token).
//!
//! How a call is classified without timing anything: the call is sent, then a
//! `server.handshake` probe on the same socket. Dispatch's gates run in the connection's
//! reader, which answers a refusal before it reads the next frame; so if the call's answer
//! arrives before the probe's, it was answered at once (a gate refusal, or a handler that
//! finished in its first poll), and if the probe's answer comes first, the call was admitted
//! and is still running. A gate refusal is `-32001`, or an error whose `data.reason` is one
//! of [`GATE_REASONS`]; anything else (a handler's `-32602` for the empty params, a
//! capability refusal every principal gets alike) means the gates let the call through.
//! Gated declarations are checked to reach the approval gate: the host sees an approval
//! for `ws.method:<name>`.

mod common;

use std::collections::BTreeMap;

use car_proto::methods::{self, Declaration, Role};
use common::*;
use serde_json::{json, Value};

/// `data.reason`s of dispatch's access refusals.
const GATE_REASONS: &[&str] = &[
    "read_only",
    "host_required",
    "agent_method_not_allowed",
    "agent_not_allowed",
    "not_grantable",
    "reserved",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Principal {
    Stranger,
    Observer,
    Consumer,
    Agent,
    Operator,
    Host,
}

const PRINCIPALS: [Principal; 6] = [
    Principal::Stranger,
    Principal::Observer,
    Principal::Consumer,
    Principal::Agent,
    Principal::Operator,
    Principal::Host,
];

/// What the gates did with one call.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// Refused by an access gate (the error).
    Refused(Value),
    /// Let through: answered by the handler, or still running.
    Admitted,
}

/// Whether the declaration lets `p` through dispatch's access gates.
fn admits(p: Principal, d: &Declaration) -> bool {
    let a = d.spec.access;
    let implicit = matches!(d.name(), "session.auth" | "server.handshake");
    match p {
        Principal::Stranger => d.name() == "session.auth",
        Principal::Observer => a.observer || implicit,
        Principal::Consumer => a.grantable || implicit,
        Principal::Agent => d.spec.role != Role::Host && a.agents,
        Principal::Operator => d.spec.role != Role::Host,
        Principal::Host => true,
    }
}

fn refused_by_gate(answer: &Value) -> bool {
    let error = &answer["error"];
    if error.is_null() {
        return false;
    }
    error["code"] == json!(-32001)
        || error["data"]["reason"]
            .as_str()
            .is_some_and(|r| GATE_REASONS.contains(&r))
}

/// The credentials each principal authenticates with.
struct Credentials {
    observer: String,
    agent: (String, String),
    consumer: Value,
}

async fn connect(d: &Daemon, p: Principal, creds: &Credentials) -> Ws {
    let mut ws = Ws::tcp(&d.ws_url).await;
    let auth = match p {
        Principal::Stranger => return ws,
        Principal::Observer => json!({"token": creds.observer}),
        Principal::Consumer => json!({
            "consumer_id": creds.consumer["consumer_id"],
            "token": creds.consumer["token"],
        }),
        Principal::Agent => json!({"token": creds.agent.1, "agent_id": creds.agent.0}),
        Principal::Operator => json!({"token": d.token()}),
        Principal::Host => json!({"host_token": d.host_token()}),
    };
    let r = ws.call("session.auth", auth).await;
    assert_eq!(r["result"]["ok"], true, "{p:?} authenticates: {r}");
    let r = ws.call("server.handshake", handshake_params()).await;
    assert!(r["result"].is_object(), "{p:?} negotiates: {r}");
    ws
}

/// Sends `method {}` then the probe; classifies the call (see the module docs). The
/// socket is returned so a parked gated call stays parked until the caller drops it.
async fn probe(ws: &mut Ws, method: &str, params: Value) -> Outcome {
    let call = ws.request(method, params).await;
    let probe = ws.request("server.handshake", handshake_params()).await;
    loop {
        let Some(frame) = ws.recv().await else {
            // Closed: only an unauthenticated call closes the socket, after its -32001.
            panic!("{method}: the socket closed with no answer");
        };
        let tokio_tungstenite::tungstenite::Message::Text(text) = frame else {
            continue;
        };
        let v: Value = serde_json::from_str(text.as_str()).unwrap();
        if v["id"] == json!(call) {
            return if refused_by_gate(&v) {
                Outcome::Refused(v)
            } else {
                Outcome::Admitted
            };
        }
        if v["id"] == json!(probe) {
            return Outcome::Admitted;
        }
    }
}

/// A stranger's call: answered `-32001` and closed, except `session.auth`.
async fn stranger(d: &Daemon, method: &str) -> Outcome {
    let mut ws = Ws::tcp(&d.ws_url).await;
    let id = ws.request(method, json!({})).await;
    loop {
        match ws.recv().await {
            Some(tokio_tungstenite::tungstenite::Message::Text(text)) => {
                let v: Value = serde_json::from_str(text.as_str()).unwrap();
                if v["id"] == json!(id) {
                    return if refused_by_gate(&v) {
                        Outcome::Refused(v)
                    } else {
                        Outcome::Admitted
                    };
                }
            }
            Some(_) => continue,
            None => panic!("{method}: a stranger's socket closed with no answer"),
        }
    }
}

fn agent_token(agent: &Value) -> String {
    let path = agent["token_path"]
        .as_str()
        .unwrap_or_else(|| panic!("{agent}"));
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

/// The dashboard's observer token, as its page obtains it (the one-time login exchanged).
fn observer_token(d: &Daemon) -> String {
    d.observer_token().expect("a token while auth is on")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_method_answers_every_principal_as_declared() {
    // The agent is registered on a first daemon without the approval gate (agents.upsert
    // is gated), then the matrix runs on a second one with the gate on, same state root.
    let home = tempfile::tempdir().unwrap();
    // Two agents: a newer connection takes an agent identity over (closing the older one),
    // so the consumer grant's issuer is not the agent whose calls are probed.
    let (agent, issuer_agent) = {
        let d = Daemon::builder()
            .home(home.path())
            .args(["--no-approvals"])
            .start();
        let mut host = Ws::host(&d).await;
        let mut upsert = async |id: &str| {
            let r = host
                .call(
                    "agents.upsert",
                    json!({"id": id, "name": id, "command": "/bin/sh"}),
                )
                .await;
            assert!(r["result"].is_object(), "{r}");
            (id.to_string(), agent_token(&r["result"]))
        };
        (upsert("matrix-agent").await, upsert("matrix-issuer").await)
    };
    let d = Daemon::builder()
        .home(home.path())
        .args(["--debug-methods", "--approval-timeout", "1h"])
        .start();
    let mut issuer = Ws::tcp(&d.ws_url).await;
    let r = issuer
        .call(
            "session.auth",
            json!({"token": issuer_agent.1, "agent_id": issuer_agent.0}),
        )
        .await;
    assert_eq!(r["result"]["ok"], true, "{r}");
    let grantable: Vec<&str> = methods::grantable_methods().map(|d| d.name()).collect();
    let r = issuer
        .call("session.consumer.issue", json!({"methods": grantable}))
        .await;
    let consumer = r["result"].clone();
    assert!(consumer["token"].is_string(), "{r}");
    let creds = Credentials {
        observer: observer_token(&d),
        agent,
        consumer,
    };

    let mut wrong: BTreeMap<(String, Principal), String> = BTreeMap::new();
    let mut parked = Vec::new();
    for decl in methods::all() {
        for p in PRINCIPALS {
            let outcome = if p == Principal::Stranger {
                stranger(&d, decl.name()).await
            } else {
                let mut ws = connect(&d, p, &creds).await;
                let outcome = probe(&mut ws, decl.name(), json!({})).await;
                if decl.spec.access.gated && outcome == Outcome::Admitted {
                    parked.push((decl.name(), p, ws));
                }
                outcome
            };
            let expected = admits(p, decl);
            let got = outcome == Outcome::Admitted;
            if expected != got {
                wrong.insert(
                    (decl.name().to_string(), p),
                    format!("expected admitted={expected}, got {outcome:?}"),
                );
            }
        }
    }
    assert!(wrong.is_empty(), "access matrix mismatches: {wrong:#?}");

    // Every gated declaration reached the approval gate for each principal it admits, except
    // the host: it is the approver, and its own calls are not held.
    let mut host = connect(&d, Principal::Host, &creds).await;
    let approvals = host.call("host.approvals", json!({})).await;
    let actions: Vec<String> = approvals["result"]["approvals"]
        .as_array()
        .unwrap_or_else(|| panic!("{approvals}"))
        .iter()
        .filter_map(|a| a["action"].as_str().map(str::to_string))
        .collect();
    let gated: Vec<_> = methods::gated_methods().map(|d| d.name()).collect();
    assert!(!gated.is_empty());
    for name in &gated {
        let waiting = actions
            .iter()
            .filter(|a| *a == &format!("ws.method:{name}"))
            .count();
        let admitted = parked
            .iter()
            .filter(|(n, p, _)| n == name && *p != Principal::Host)
            .count();
        assert!(admitted > 0, "{name}: no principal reached it");
        assert_eq!(
            waiting, admitted,
            "{name}: every admitted call waits for approval"
        );
    }
    drop(parked);
}

#[tokio::test]
async fn reserved_values_are_refused_to_every_principal() {
    let d = Daemon::start();
    let reserving: Vec<_> = methods::all()
        .filter(|d| d.spec.access.reserved.is_some())
        .collect();
    assert!(!reserving.is_empty());
    for decl in reserving {
        let r = decl.spec.access.reserved.unwrap();
        for prefix in r.prefixes {
            for mut ws in [Ws::authed(&d).await, Ws::host(&d).await] {
                let value = format!("{prefix}forged");
                let answer = ws.call(decl.name(), json!({ r.field: value })).await;
                assert_eq!(code(&answer), -32602, "{answer}");
                assert_eq!(answer["error"]["data"]["reason"], "reserved", "{answer}");
                assert!(message(&answer).contains(r.field), "{answer}");
            }
        }
    }
    // An ordinary kind still goes through.
    let mut ws = Ws::authed(&d).await;
    let ok = ws
        .call("host.notify", json!({"kind": "custom.build_finished"}))
        .await;
    assert!(ok["error"].is_null(), "{ok}");
}

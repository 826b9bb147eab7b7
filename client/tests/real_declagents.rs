//! Declarative agents against a real `car-server`: the daemon runs them with its own agent
//! loop in a scratch workspace, re-drives one whose goal check fails until it passes,
//! routes needs between agents by capability and learns from the outcomes, and streams a
//! chat turn to a declarative agent as `agents.chat.event`.
//!
//! The model is a delegated one served by this test program (`inference.register_runner`),
//! so each turn's answer is scripted while everything else — the loop, proposals, the
//! built-in tools, the confined check, the routing store — is the daemon's own.

mod support;

use std::sync::Arc;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::Daemon;
use serde_json::{json, Value};
use support::within;
use tokio::sync::mpsc;

fn client(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

/// One scripted answer: `{text, tool_calls}`.
fn call(name: &str, arguments: Value) -> Value {
    json!({"text": "", "tool_calls": [{"id": format!("c-{name}"), "name": name, "arguments": arguments}]})
}

fn finish(answer: &str) -> Value {
    call("finish", json!({"answer": answer}))
}

/// What the scripted model answers a request: the last message decides.
fn scripted(request: &Value) -> Value {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let said = request.to_string();
    if said.contains("Split the task") {
        let split =
            json!({"subtasks": ["add 2 and 3 with the calculator", "write and save a text file"]});
        return json!({"text": split.to_string(), "tool_calls": []});
    }
    if last["role"] == "tool_result" {
        return finish("wrote done.txt");
    }
    if said.contains("did not meet the completion check") {
        return call("write_file", json!({"path": "done.txt", "content": "ok\n"}));
    }
    if said.contains("calculator") || said.contains("add 2 and 3") {
        return finish("5");
    }
    finish("I believe it is done")
}

/// Registers the delegated model `dlg` and serves its calls with [`scripted`] until the
/// test ends; the requests seen go to the returned receiver.
async fn scripted_model(d: &Daemon) -> (Arc<Client>, mpsc::UnboundedReceiver<Value>) {
    let runner = Arc::new(client(d));
    runner
        .call(
            "models.register",
            json!({"id": "dlg", "source": {"type": "delegated"}}),
        )
        .await
        .unwrap();
    let (tx, mut invokes) = mpsc::unbounded_channel::<Value>();
    runner.register_notification_handler("inference.runner.invoke", move |params| {
        let _ = tx.send(params);
    });
    runner
        .call("inference.register_runner", json!({}))
        .await
        .unwrap();
    let (seen_tx, seen) = mpsc::unbounded_channel();
    let serving = runner.clone();
    tokio::spawn(async move {
        while let Some(invoke) = invokes.recv().await {
            let request = invoke["request"].clone();
            let _ = seen_tx.send(request.clone());
            let result = scripted(&request);
            let _ = serving
                .call(
                    "inference.runner.complete",
                    json!({"call_id": invoke["call_id"], "result": result}),
                )
                .await;
        }
    });
    (runner, seen)
}

/// A host connection that approves every `tool:write_file` approval; counts them.
async fn approve_writes(d: &Daemon) -> Arc<std::sync::atomic::AtomicUsize> {
    let host = Arc::new(client(d));
    let (tx, mut events) = mpsc::unbounded_channel::<Value>();
    host.register_notification_handler("host.event", move |e| {
        let _ = tx.send(e);
    });
    host.call_as_host("host.subscribe", json!({}))
        .await
        .unwrap();
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            if e["kind"] == "approval.requested" && e["payload"]["action"] == "tool:write_file" {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let id = e["payload"]["id"].clone();
                host.call_as_host(
                    "host.resolve_approval",
                    json!({"approval_id": id, "approved": true}),
                )
                .await
                .unwrap();
            }
        }
    });
    count
}

async fn register(host: &Client, spec: Value) -> Value {
    host.call_as_host("declagents.register", json!({"spec": spec}))
        .await
        .unwrap()
}

fn scribe() -> Value {
    json!({
        "id": "scribe",
        "name": "Scribe",
        "identity": "You write files into your workspace.",
        "standing_goal": "write and save text files",
        "tools": ["write_file", "read_file"],
        "goal": {"check": "test -f done.txt && grep -q ok done.txt", "max_iterations": 3},
        "model": "dlg",
        "max_turns": 4,
    })
}

fn calc() -> Value {
    json!({
        "id": "calc",
        "identity": "You are an arithmetic calculator: you add, subtract and multiply numbers.",
        "tools": ["calculate"],
        "model": "dlg",
        "scenarios": [
            {"name": "sum", "input": "add 2 and 3", "expect": "5"},
            {"name": "wrong", "input": "add 2 and 3", "expect": "6"}
        ],
    })
}

fn rpc_error(e: Error) -> (i64, String, Value) {
    match e {
        Error::Rpc {
            code,
            message,
            data,
        } => (code, message, data.unwrap_or(Value::Null)),
        other => panic!("not an RPC error: {other:?}"),
    }
}

#[tokio::test]
async fn a_goal_check_that_fails_re_drives_the_agent_until_it_is_met() {
    let d = Daemon::builder().start();
    let (_runner, mut requests) = scripted_model(&d).await;
    let host = client(&d);
    let reg = register(&host, scribe()).await;
    assert_eq!(reg["replaced"], false, "{reg}");
    assert!(reg["registry_path"]
        .as_str()
        .unwrap()
        .ends_with("declagents/scribe.json"));

    let approved = approve_writes(&d).await;
    let reply = within(
        "the invocation",
        host.call(
            "declagents.invoke",
            json!({"id": "scribe", "input": "write done.txt"}),
        ),
    )
    .await
    .unwrap();
    // The agent's write passed the same approval gate as any caller's.
    assert_eq!(approved.load(std::sync::atomic::Ordering::SeqCst), 1);
    let goal = &reply["goal"];
    assert_eq!(goal["met"], true, "{reply}");
    assert_eq!(goal["grounded"], true);
    assert_eq!(
        goal["iterations"], 2,
        "the first pass did not write: {reply}"
    );
    assert_eq!(goal["last_exit_code"], 0);
    assert!(reply.get("error").is_none(), "{reply}");
    // finish, then write_file and finish: the loop counts every call.
    assert_eq!(reply["tool_calls"], 3, "{reply}");
    assert!(reply["turns"].as_u64().unwrap() >= 3, "{reply}");
    assert_eq!(reply["run_ids"].as_array().unwrap().len(), 2);

    // The model saw the spec's identity, its standing goal and only its allowed tools
    // (plus finish), and the second pass carried the check's verdict.
    let first = within("the first request", requests.recv()).await.unwrap();
    let system = first.to_string();
    assert!(
        system.contains("You write files") && system.contains("standing goal"),
        "{first}"
    );
    let mut tools: Vec<String> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            t["name"]
                .as_str()
                .or(t["function"]["name"].as_str())
                .unwrap()
                .to_string()
        })
        .collect();
    tools.sort();
    assert_eq!(tools, ["finish", "read_file", "write_file"]);

    // The work happened in a scratch workspace, which is gone; the daemon's own workspace
    // is untouched.
    assert!(!d.home.join("workspace/done.txt").exists());
    let scratch = d.home.join("declagents-scratch");
    for _ in 0..100 {
        if std::fs::read_dir(&scratch).map_or(true, |mut r| r.next().is_none()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        std::fs::read_dir(&scratch).map_or(true, |mut r| r.next().is_none()),
        "a scratch workspace was left behind"
    );

    let stats = host
        .call("declagents.routing_stats", json!({}))
        .await
        .unwrap();
    assert_eq!(stats["agents"]["scribe"]["successes"], 1, "{stats}");
    assert_eq!(stats["agents"]["scribe"]["learned"], true);

    // A check that can never pass: every pass runs, and the error says so.
    let mut never = scribe();
    never["goal"] = json!({"check": "exit 7", "max_iterations": 2});
    assert_eq!(register(&host, never).await["replaced"], true);
    let reply = host
        .call(
            "declagents.invoke",
            json!({"id": "scribe", "input": "anything"}),
        )
        .await
        .unwrap();
    assert_eq!(reply["goal"]["met"], false, "{reply}");
    assert_eq!(reply["goal"]["iterations"], 2);
    assert_eq!(reply["goal"]["last_exit_code"], 7);
    assert!(
        reply["error"].as_str().unwrap().starts_with("goal_not_met"),
        "{reply}"
    );
    let reverted = host
        .call_as_host("declagents.revert", json!({"id": "scribe"}))
        .await
        .unwrap();
    assert_eq!(reverted["spec"]["goal"]["check"], scribe()["goal"]["check"]);
}

#[tokio::test]
async fn routing_picks_by_capability_learns_outcomes_and_discovery_ranks_the_same() {
    let d = Daemon::builder().start();
    let (_runner, _requests) = scripted_model(&d).await;
    let host = client(&d);
    register(&host, scribe()).await;
    register(&host, calc()).await;

    let routed = host
        .call(
            "declagents.route",
            json!({"need": "add 2 and 3 with the calculator", "invoke": true}),
        )
        .await
        .unwrap();
    assert_eq!(routed["chosen"], "calc", "{routed}");
    assert_eq!(routed["invoked"], true);
    assert_eq!(routed["result"]["output"], "5", "{routed}");
    assert_eq!(routed["next_visited"], json!(["calc"]));
    let candidates = routed["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 2);
    assert!(candidates[0]["score"].as_f64() > candidates[1]["score"].as_f64());
    assert_eq!(candidates[0]["success_rate"], 0.5, "cold start is neutral");

    let routed = host
        .call(
            "declagents.route",
            json!({"need": "write and save a text file", "from": "calc", "visited": ["calc"]}),
        )
        .await
        .unwrap();
    assert_eq!(routed["chosen"], "scribe", "{routed}");
    assert_eq!(routed["next_visited"], json!(["calc", "scribe"]));
    assert!(routed.get("result").is_none());

    let stats = host
        .call("declagents.routing_stats", json!({}))
        .await
        .unwrap();
    assert_eq!(
        (
            stats["agents"]["calc"]["successes"].as_u64(),
            stats["agents"]["calc"]["failures"].as_u64()
        ),
        (Some(1), Some(0)),
        "{stats}"
    );
    // The learned prior now lifts calc for the same need.
    let again = host
        .call(
            "declagents.route",
            json!({"need": "add 2 and 3 with the calculator"}),
        )
        .await
        .unwrap();
    assert!(
        again["candidates"][0]["success_rate"].as_f64().unwrap() > 0.5,
        "{again}"
    );

    // Scenarios: one passes, one expects the wrong answer.
    let runs = host
        .call("declagents.run_scenarios", json!({"id": "calc"}))
        .await
        .unwrap();
    assert_eq!(
        (runs["passed"].as_u64(), runs["failed"].as_u64()),
        (Some(1), Some(1)),
        "{runs}"
    );
    assert!(runs["results"][1]["error"]
        .as_str()
        .unwrap()
        .contains("does not contain"));

    let found = host
        .call(
            "discovery.resolve",
            json!({"need": "multiply numbers", "limit": 1}),
        )
        .await
        .unwrap();
    assert_eq!(found["count"], 1);
    assert_eq!(
        found["services"][0]["identifier"], "agentdns://local/agent/calc",
        "{found}"
    );
    assert_eq!(found["services"][0]["protocol"], "in-daemon");

    let reported = host
        .call(
            "discovery.report",
            json!({"identifier": "agentdns://files/tool/write", "outcome": "failure"}),
        )
        .await
        .unwrap();
    assert_eq!(
        reported,
        json!({"identifier": "agentdns://files/tool/write", "outcome": "failure", "successes": 0, "failures": 1})
    );
    for (identifier, outcome, field) in [
        ("agentdns://local/agent/calc", "success", "identifier"),
        ("http://x/y/z", "success", "identifier"),
        ("agentdns://a/b", "success", "identifier"),
        ("agentdns://a/b/c", "maybe", "outcome"),
    ] {
        let (code, message, _) = rpc_error(
            host.call(
                "discovery.report",
                json!({"identifier": identifier, "outcome": outcome}),
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(code, -32602, "{identifier}: {message}");
        assert!(message.contains(field), "{identifier}: {message}");
    }

    // The hop cap, and a path that excludes everyone.
    let (code, message, data) = rpc_error(
        host.call(
            "declagents.route",
            json!({"need": "x", "visited": ["a", "b", "c", "d"]}),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        (code, data["reason"].as_str()),
        (-32602, Some("hop_limit")),
        "{message}"
    );
    let (_, _, data) = rpc_error(
        host.call(
            "declagents.route",
            json!({"need": "x", "visited": ["calc"], "from": "scribe"}),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(data["reason"], "no_agents");
}

#[tokio::test]
async fn agents_chat_reaches_a_declarative_agent_and_streams_its_turn() {
    let d = Daemon::builder().start();
    let (_runner, _requests) = scripted_model(&d).await;
    let _approver = approve_writes(&d).await;
    let host = client(&d);
    register(&host, scribe()).await;
    let (tx, mut events) = mpsc::unbounded_channel();
    host.register_notification_handler("agents.chat.event", move |e| {
        let _ = tx.send(e);
    });
    let ack = host
        .call(
            "agents.chat",
            json!({"agent_id": "scribe", "prompt": "write done.txt", "session_id": "chat-1"}),
        )
        .await
        .unwrap();
    assert_eq!(ack, json!({"accepted": true, "session_id": "chat-1"}));
    let mut kinds = Vec::new();
    let mut verdicts = Vec::new();
    loop {
        let e = within("the chat events", events.recv()).await.unwrap();
        assert_eq!(
            (e["session_id"].as_str(), e["agent_id"].as_str()),
            (Some("chat-1"), Some("scribe"))
        );
        let kind = e["kind"].as_str().unwrap().to_string();
        if kind == "goal_evaluated" {
            verdicts.push(e["met"].as_bool().unwrap());
        }
        kinds.push(kind.clone());
        if kind == "done" || kind == "error" {
            assert_eq!(kind, "done", "{e}");
            assert_eq!(e["delta"], "wrote done.txt", "{e}");
            break;
        }
    }
    assert_eq!(verdicts, [false, true]);
    assert_eq!(kinds, ["goal_evaluated", "goal_evaluated", "token", "done"]);
    let cancelled = host
        .call("agents.chat.cancel", json!({"session_id": "chat-1"}))
        .await
        .unwrap();
    assert_eq!(cancelled["cancelled"], false, "the turn had ended");

    // Inline goals belong to the spec; a disabled agent refuses to chat.
    let (code, message, _) = rpc_error(
        host.call(
            "agents.chat",
            json!({"agent_id": "scribe", "prompt": "x", "goal": {"check": "true"}}),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, -32602, "{message}");
    host.call_as_host(
        "declagents.set_enabled",
        json!({"id": "scribe", "enabled": false}),
    )
    .await
    .unwrap();
    let (_, _, data) = rpc_error(
        host.call("agents.chat", json!({"agent_id": "scribe", "prompt": "x"}))
            .await
            .unwrap_err(),
    );
    assert_eq!(data["reason"], "agent_disabled");
    let listed = host.call("declagents.list", json!(null)).await.unwrap();
    assert_eq!(listed["agents"][0]["enabled"], false, "{listed}");
    assert_eq!(listed["agents"][0]["kind"], "declarative");
    // agents.list read-merges it (CAR's rule), `enabled` in place of a process status.
    let agents = host.call("agents.list", json!({})).await.unwrap();
    let merged: Vec<&Value> = agents
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "declarative")
        .collect();
    assert_eq!(merged.len(), 1, "{agents}");
    assert_eq!(merged[0]["id"], "scribe");
    assert_eq!(merged[0]["enabled"], false);
    assert_eq!(merged[0]["capabilities"], json!(["chat"]));
}

#[tokio::test]
async fn bad_specs_and_callers_are_refused_by_field_and_allowlists_are_strict() {
    let d = Daemon::builder().start();
    let (_runner, mut requests) = scripted_model(&d).await;
    let host = client(&d);

    // Only a host may register, remove or toggle.
    let (_, _, data) = rpc_error(
        host.call("declagents.register", json!({"spec": calc()}))
            .await
            .unwrap_err(),
    );
    assert_eq!(data["reason"], "host_required");
    for (spec, field) in [
        (json!({"id": "../x"}), "spec.id"),
        (
            json!({"id": "a", "tools": ["ok", "two words"]}),
            "spec.tools[1]",
        ),
        (json!({"id": "a", "max_turns": 1000}), "spec.max_turns"),
        (
            json!({"id": "a", "goal": {"check": "   "}}),
            "spec.goal.check",
        ),
        (json!({"identity": "no id"}), "spec"),
    ] {
        let (code, message, _) = rpc_error(
            host.call_as_host("declagents.register", json!({"spec": spec.clone()}))
                .await
                .unwrap_err(),
        );
        assert_eq!(code, -32602, "{spec}: {message}");
        assert!(message.contains(field), "{spec}: {message}");
    }
    for (method, params) in [
        ("declagents.get", json!({"id": "nobody"})),
        ("declagents.invoke", json!({"id": "nobody", "input": "x"})),
    ] {
        let (code, _, data) = rpc_error(host.call(method, params).await.unwrap_err());
        assert_eq!(
            (code, data["reason"].as_str()),
            (-32602, Some("not_found")),
            "{method}"
        );
    }

    // An empty allowlist is no tools at all (only finish reaches the model).
    register(&host, json!({"id": "bare", "model": "dlg", "tools": []})).await;
    let reply = host
        .call("declagents.invoke", json!({"id": "bare", "input": "hello"}))
        .await
        .unwrap();
    assert_eq!(reply["output"], "I believe it is done", "{reply}");
    let request = within("the request", requests.recv()).await.unwrap();
    let names: Vec<&str> = request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            t["name"]
                .as_str()
                .or(t["function"]["name"].as_str())
                .unwrap()
        })
        .collect();
    assert_eq!(names, ["finish"]);

    // A name that is no tool the daemon has fails before a turn is spent.
    register(
        &host,
        json!({"id": "typo", "model": "dlg", "tools": ["wirte_file"]}),
    )
    .await;
    let (code, message, data) = rpc_error(
        host.call("declagents.invoke", json!({"id": "typo", "input": "x"}))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (code, data["reason"].as_str()),
        (-32602, Some("tool_unavailable")),
        "{message}"
    );

    let got = host
        .call("declagents.get", json!({"id": "bare"}))
        .await
        .unwrap();
    assert_eq!(
        (got["id"].as_str(), got["enabled"].as_bool()),
        (Some("bare"), Some(true))
    );
    let removed = host
        .call_as_host("declagents.remove", json!({"id": "bare"}))
        .await
        .unwrap();
    assert_eq!(removed, json!({"removed": true}));
    let (_, message, _) = rpc_error(
        host.call_as_host("declagents.revert", json!({"id": "typo"}))
            .await
            .unwrap_err(),
    );
    assert!(message.contains("no previous spec"), "{message}");
}

#[tokio::test]
async fn standing_goals_are_set_suggested_and_cleared() {
    let home = tempfile::tempdir().unwrap();
    let d = Daemon::builder().home(home.path().join("car")).start();
    let c = client(&d);
    let set = c
        .call(
            "goal.set",
            json!({"session_id": "s1", "check": " test -f out ", "max_iterations": 99}),
        )
        .await
        .unwrap();
    assert_eq!(set["goal"]["check"], "test -f out");
    assert_eq!(set["goal"]["max_iterations"], 50);
    assert_eq!(set["goal"]["status"], "active");
    let one = c
        .call("goal.status", json!({"session_id": "s1"}))
        .await
        .unwrap();
    assert_eq!(one["goal"]["session_id"], "s1", "{one}");
    let none = c
        .call("goal.status", json!({"session_id": "s2"}))
        .await
        .unwrap();
    assert_eq!(none, json!({"session_id": "s2", "goal": null}));

    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("Cargo.toml"),
        "[package]\nname = \"x\"\n",
    )
    .unwrap();
    let suggested = c
        .call(
            "goal.suggest",
            json!({"objective": "create src/lib.rs", "working_dir": project.path(), "session_id": "s2", "set": true}),
        )
        .await
        .unwrap();
    assert_eq!(
        suggested["goal"]["check"], "test -f src/lib.rs && cargo test -q",
        "{suggested}"
    );
    assert_eq!(suggested["confidence"], "high");
    assert_eq!(suggested["stored_goal"]["session_id"], "s2");
    let vague = c
        .call("goal.suggest", json!({"prompt": "be nicer"}))
        .await
        .unwrap();
    assert_eq!(
        (vague["suggested"].as_bool(), vague["confidence"].as_str()),
        (Some(false), Some("none"))
    );

    let all = c.call("goal.status", json!(null)).await.unwrap();
    assert_eq!(all["goals"].as_array().unwrap().len(), 2, "{all}");
    // The goals survive a restart.
    drop(c);
    drop(d);
    let d = Daemon::builder().home(home.path().join("car")).start();
    let c = client(&d);
    let cleared = c
        .call("goal.clear", json!({"session_id": "s1"}))
        .await
        .unwrap();
    assert_eq!(cleared, json!({"cleared": true, "session_id": "s1"}));
    let cleared = c.call("goal.clear", json!({})).await.unwrap();
    assert_eq!(cleared, json!({"cleared": 1}));

    for (params, field) in [
        (json!({"session_id": "s"}), "goal"),
        (json!({"session_id": "s", "check": ""}), "check"),
        (json!({"check": "true"}), "session_id"),
    ] {
        let (code, message, _) = rpc_error(c.call("goal.set", params.clone()).await.unwrap_err());
        assert_eq!(code, -32602, "{params}: {message}");
        assert!(message.contains(field), "{params}: {message}");
    }
    for (params, field) in [
        (json!({}), "prompt"),
        (
            json!({"prompt": "x", "working_dir": "rel/dir"}),
            "working_dir",
        ),
        (json!({"prompt": "x", "set": true}), "session_id"),
    ] {
        let (code, message, _) =
            rpc_error(c.call("goal.suggest", params.clone()).await.unwrap_err());
        assert_eq!(code, -32602, "{params}: {message}");
        assert!(message.contains(field), "{params}: {message}");
    }
}

#[tokio::test]
async fn an_agent_sees_only_its_own_goals_and_may_not_probe_paths() {
    let d = Daemon::builder().start();
    let user = client(&d);
    user.call("goal.set", json!({"session_id": "users", "check": "true"}))
        .await
        .unwrap();
    let agent = support::agent_client(&d.home, &user, "worker").await;
    agent
        .call("goal.set", json!({"session_id": "mine", "check": "true"}))
        .await
        .unwrap();
    let seen = agent.call("goal.status", json!({})).await.unwrap();
    let ids: Vec<&str> = seen["goals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["mine"], "{seen}");
    let theirs = agent
        .call("goal.status", json!({"session_id": "users"}))
        .await
        .unwrap();
    assert_eq!(theirs["goal"], Value::Null);
    let (_, _, data) = rpc_error(
        agent
            .call("goal.set", json!({"session_id": "users", "check": "false"}))
            .await
            .unwrap_err(),
    );
    assert_eq!(data["reason"], "not_owner");
    assert_eq!(
        agent.call("goal.clear", json!({})).await.unwrap(),
        json!({"cleared": 1})
    );
    let all = user.call("goal.status", json!({})).await.unwrap();
    assert_eq!(
        all["goals"].as_array().unwrap().len(),
        1,
        "the user's goal stayed: {all}"
    );
    let (_, _, data) = rpc_error(
        agent
            .call(
                "goal.suggest",
                json!({"prompt": "fix tests", "working_dir": "/etc"}),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(data["reason"], "agent_not_allowed");
    let (_, _, data) = rpc_error(
        agent
            .call(
                "discovery.report",
                json!({"identifier": "agentdns://a/tool/b", "outcome": "success"}),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(data["reason"], "agent_not_allowed");
}

#[tokio::test]
async fn a_split_need_routes_each_subtask_and_compose_plans_the_services() {
    let d = Daemon::builder().start();
    let (_runner, _requests) = scripted_model(&d).await;
    let _approver = approve_writes(&d).await;
    let host = client(&d);
    register(&host, scribe()).await;
    register(&host, calc()).await;
    let split = within(
        "route_split",
        host.call(
            "declagents.route_split",
            json!({"need": "add 2 and 3, then save the result to a file", "invoke": true}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(split["count"], 2, "{split}");
    let chosen: Vec<&str> = split["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["chosen"].as_str().unwrap())
        .collect();
    assert_eq!(chosen, ["calc", "scribe"], "{split}");
    assert_eq!(split["subtasks"][0]["result"]["output"], "5", "{split}");
    assert_eq!(split["decomposition_mode"], "vanilla");

    let sad = host
        .call(
            "declagents.route_split",
            json!({"need": "add 2 and 3, then save it", "decomposition_mode": "sad", "sad_iterations": 2}),
        )
        .await
        .unwrap();
    assert!(sad["rounds"].as_u64().unwrap() >= 2, "{sad}");
    assert!(!sad["hints"].as_array().unwrap().is_empty(), "{sad}");
    assert!(sad["subtasks"][0].get("result").is_none());

    let plan = host
        .call(
            "discovery.route_compose",
            json!({"need": "add 2 and 3, then save the result", "candidates_per_step": 1}),
        )
        .await
        .unwrap();
    let steps = plan["plan"]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{plan}");
    assert_eq!(steps[0]["service"], "agentdns://local/agent/calc", "{plan}");
    assert_eq!(steps[0]["invoke_kind"], "declagents.invoke");
    assert_eq!(steps[1]["invoke_target"], "scribe");
    assert_eq!(plan["candidates"]["step-1"].as_array().unwrap().len(), 1);

    for (method, params, field) in [
        (
            "declagents.route_split",
            json!({"need": "x", "decomposition_mode": "fancy"}),
            "decomposition_mode",
        ),
        (
            "discovery.route_compose",
            json!({"need": "x", "rerank": true}),
            "rerank",
        ),
        ("discovery.route_compose", json!({"need": " "}), "need"),
    ] {
        let (code, message, _) = rpc_error(host.call(method, params.clone()).await.unwrap_err());
        assert_eq!(code, -32602, "{params}: {message}");
        assert!(message.contains(field), "{params}: {message}");
    }
}

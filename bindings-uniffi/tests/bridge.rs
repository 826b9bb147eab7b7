//! The exported bridge against a real `car-server`, driven from Rust through the same
//! callback traits foreign code implements: results, generated typed members and
//! wrappers, error variants (role refusals keep `data.reason`), reverse calls with
//! declared and undeclared failures, `tools.execute` call_json, notifications, the
//! host-management refusal (`HostClient`'s calls: `tests/host.rs`), bad arguments, `close` (which
//! drops the connection; the next call reconnects under a new `connection_epoch`), and `AgentLoop`
//! runs against a scripted OpenAI-compatible model.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use car_daemon_client::{ClientConfig, EnvSnapshot};
use car_runtime_uniffi::{
    client_version, protocol_version, AgentLoop, AgentLoopConfig, AgentTool, CarDaemonClient,
    CarError, DaemonHandler, DaemonNotificationHandler, ToolAbort,
};
use car_test_harness::http_script::{Reply, Server};
use car_test_harness::Daemon;
use serde_json::{json, Value};

mod support;

fn daemon() -> Daemon {
    Daemon::builder().args(["--debug-methods"]).start()
}

fn client_for(d: &Daemon) -> Arc<CarDaemonClient> {
    CarDaemonClient::with_config(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
        .expect("client")
}

fn call(c: &CarDaemonClient, method: &str, params: Value) -> Result<Value, CarError> {
    let text = c.daemon_call(method.into(), params.to_string())?;
    Ok(serde_json::from_str(&text).expect("results are JSON"))
}

struct FnHandler<F>(F);
impl<F: Fn(String) -> Result<String, CarError> + Send + Sync> DaemonHandler for FnHandler<F> {
    fn handle(&self, params_json: String) -> Result<String, CarError> {
        (self.0)(params_json)
    }
}

struct Notes(Mutex<mpsc::Sender<String>>);
impl DaemonNotificationHandler for Notes {
    fn notify(&self, params_json: String) -> Result<(), CarError> {
        if params_json.contains("boom") {
            return Err(CarError::Handler {
                detail: "notification handler failed".into(),
                terminal: false,
            });
        }
        let _ = self.0.lock().unwrap().send(params_json);
        Ok(())
    }
}

#[test]
fn versions() {
    assert_eq!(u64::from(protocol_version()), car_proto::PROTOCOL_VERSION);
    assert_eq!(client_version(), car_proto::CAR_VERSION);
}

#[test]
fn calls_results_and_daemon_errors() {
    let d = daemon();
    let c = client_for(&d);
    assert_eq!(
        call(&c, "state.set", json!({"key": "k", "value": {"n": 1}})).unwrap(),
        json!("ok")
    );
    assert_eq!(
        call(&c, "state.get", json!({"key": "k"})).unwrap(),
        json!({"n": 1})
    );
    // A generated typed member goes through the shared client's typed path.
    assert_eq!(c.state_keys(None).unwrap(), vec!["k".to_string()]);
    // A generated JSON-string wrapper through the same bridge.
    let events = c.events_stats("{}".into()).unwrap();
    assert!(serde_json::from_str::<Value>(&events).is_ok(), "{events}");

    let err = call(&c, "no.such.method", json!({})).unwrap_err();
    assert!(
        matches!(&err, CarError::DaemonRpc { code: -32601, data_json, .. } if data_json == "null"),
        "{err:?}"
    );
    let err = call(&c, "state.get", json!({})).unwrap_err();
    assert!(
        matches!(&err, CarError::DaemonRpc { code: -32602, detail, .. } if detail.contains("key")),
        "{err:?}"
    );
}

#[test]
fn typed_members_build_params_and_project_results() {
    let d = daemon();
    let c = client_for(&d);
    assert_eq!(c.fact_count().unwrap(), 0);
    let tags = Some(vec!["uniffi".to_string()]);
    assert_eq!(
        c.add_fact(
            "kotlin".into(),
            "typed members".into(),
            "fact".into(),
            Some(0.5),
            None,
            tags,
            None
        )
        .unwrap(),
        1
    );
    let hits: Value =
        serde_json::from_str(&c.query_facts("typed members".into(), Some(3)).unwrap()).unwrap();
    assert_eq!(hits[0]["subject"], json!("kotlin"), "{hits}");
    assert_eq!(hits[0]["tags"], json!(["uniffi"]), "{hits}");
    let context = c.build_context("typed".into(), None).unwrap();
    assert!(context.contains("typed members"), "{context}");
    c.state_set("k".into(), r#"{"n":1}"#.into(), None).unwrap();
    assert!(c.state_exists("k".into(), None).unwrap());
    assert_eq!(c.state_get("k".into(), None).unwrap(), r#"{"n":1}"#);
    c.register_tool("lookup".into()).unwrap();
    let tools: Value = serde_json::from_str(&c.list_tools().unwrap()).unwrap();
    assert_eq!(tools[0]["name"], json!("lookup"), "{tools}");
    assert_eq!(c.unregister_tool("lookup".into()).unwrap(), 1);
    assert_eq!(c.unregister_tool("lookup".into()).unwrap(), 0);
    let start = r#"{"intent":"uniffi","agent_id":"kotlin-agent"}"#;
    let run: Value = serde_json::from_str(&c.runs_start(start.into()).unwrap()).unwrap();
    assert_eq!(run["agent_id"], json!("kotlin-agent"), "{run}");
    let outcome =
        json!({"run_id": run["run_id"], "outcome": {"status": "success", "summary": "ok"}});
    let done: Value = serde_json::from_str(&c.runs_complete(outcome.to_string()).unwrap()).unwrap();
    assert_eq!(
        (&done["run_id"], &done["ok"], &done["outcome"]),
        (&run["run_id"], &json!(true), &json!("success")),
        "{done}"
    );
}

#[test]
fn bad_arguments_are_refused_precisely() {
    let d = daemon();
    let c = client_for(&d);
    let err = c
        .daemon_call("state.get".into(), "{key".into())
        .unwrap_err();
    assert!(
        matches!(&err, CarError::InvalidArgument { detail } if detail.starts_with("params_json is not valid JSON")),
        "{err:?}"
    );
    let err = c
        .state_set("k".into(), "not json".into(), None)
        .unwrap_err();
    assert!(
        matches!(&err, CarError::InvalidArgument { detail } if detail.starts_with("stateSet: valueJson is not valid JSON")),
        "{err:?}"
    );
    let err = c
        .daemon_call_host_management("state.get".into(), "{}".into())
        .unwrap_err();
    assert!(
        matches!(&err, CarError::Refused { detail } if detail.contains("state.get is not a host-management method")),
        "{err:?}"
    );
    let err = CarDaemonClient::new(Some("http://127.0.0.1:1".into())).unwrap_err();
    assert!(
        matches!(&err, CarError::Refused { detail } if detail.contains("ws://")),
        "{err:?}"
    );
    let err = c
        .daemon_call("debug.sleep".into(), r#"{"ms": "long"}"#.into())
        .unwrap_err();
    assert!(
        matches!(&err, CarError::DaemonRpc { code: -32602, .. }),
        "{err:?}"
    );
}

#[test]
fn reverse_calls_answer_results_and_declared_errors() {
    let d = daemon();
    let c = client_for(&d);
    c.register_daemon_handler(
        "t.echo".into(),
        Arc::new(FnHandler(|p: String| Ok(format!(r#"{{"got":{p}}}"#)))),
    );
    c.register_daemon_handler(
        "t.fail".into(),
        Arc::new(FnHandler(|_| {
            Err(CarError::Handler {
                detail: "disk full".into(),
                terminal: false,
            })
        })),
    );
    c.register_daemon_handler(
        "t.terminal".into(),
        Arc::new(FnHandler(|_| {
            Err(CarError::Handler {
                detail: "journal gone".into(),
                terminal: true,
            })
        })),
    );
    c.register_daemon_handler(
        "t.code".into(),
        Arc::new(FnHandler(|_| {
            Err(CarError::DaemonRpc {
                code: -32010,
                detail: "custom".into(),
                data_json: r#"{"why":"because"}"#.into(),
            })
        })),
    );
    c.register_daemon_handler(
        "t.garbage".into(),
        Arc::new(FnHandler(|_| Ok("not json".into()))),
    );
    // A handler that calls back into the daemon: it runs on the blocking pool, so the
    // nested call neither deadlocks nor blocks a runtime worker.
    let nested = client_for(&d);
    c.register_daemon_handler(
        "t.nested".into(),
        Arc::new(FnHandler(move |_| {
            nested.daemon_call("debug.echo".into(), r#"{"inner":true}"#.into())
        })),
    );
    let via = |method: &str| {
        call(
            &c,
            "debug.call_client",
            json!({"method": method, "params": {"x": 1}, "timeout_ms": 10_000}),
        )
        .unwrap()
    };
    assert_eq!(via("t.echo"), json!({"result": {"got": {"x": 1}}}));
    assert_eq!(
        via("t.fail"),
        json!({"error": {"code": -32000, "message": "disk full"}})
    );
    assert_eq!(
        via("t.terminal"),
        json!({"error": {"code": -32000, "message": "journal gone", "data": {"terminal": true}}})
    );
    assert_eq!(
        via("t.code"),
        json!({"error": {"code": -32010, "message": "custom", "data": {"why": "because"}}})
    );
    let garbage = via("t.garbage");
    assert_eq!(garbage["error"]["code"], json!(-32603));
    assert!(garbage["error"]["message"]
        .as_str()
        .unwrap()
        .contains("handler for t.garbage returned a result that is not JSON"));
    assert_eq!(via("t.nested"), json!({"result": {"inner": true}}));
    assert_eq!(via("t.nobody")["error"]["code"], json!(-32601));
}

#[test]
fn tools_execute_handlers_serve_a_proposal_with_call_json() {
    let d = daemon();
    let c = client_for(&d);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    c.register_daemon_handler(
        "tools.execute".into(),
        Arc::new(FnHandler(move |call_json: String| {
            let call: Value = serde_json::from_str(&call_json).unwrap();
            log.lock().unwrap().push(call.clone());
            let x = call["params"]["x"].as_i64().unwrap_or(0);
            Ok(json!({"doubled": x * 2}).to_string())
        })),
    );
    call(&c, "tools.register", json!({"name": "double"})).unwrap();
    let proposal = json!({"actions": [
        {"id": "a1", "type": "tool_call", "tool": "double", "parameters": {"x": 21}}
    ]});
    let out = call(&c, "proposal.submit", json!({"proposal": proposal})).unwrap();
    assert_eq!(out["results"][0]["status"], json!("succeeded"), "{out}");
    assert_eq!(out["results"][0]["output"], json!({"doubled": 42}), "{out}");
    let calls = seen.lock().unwrap();
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert_eq!(
        (
            &call["tool"],
            &call["params"],
            &call["action_id"],
            &call["attempt"]
        ),
        (&json!("double"), &json!({"x": 21}), &json!("a1"), &json!(1))
    );
    for field in ["request_id", "timeout_ms", "session_id"] {
        assert!(call.get(field).is_some(), "call_json lacks {field}: {call}");
    }
}

#[test]
fn a_terminal_tool_failure_stops_retries() {
    let d = daemon();
    let c = client_for(&d);
    let attempts = Arc::new(Mutex::new(0));
    let count = attempts.clone();
    c.register_daemon_handler(
        "tools.execute".into(),
        Arc::new(FnHandler(move |_| {
            *count.lock().unwrap() += 1;
            Err(CarError::Handler {
                detail: "receipt journal is unavailable".into(),
                terminal: true,
            })
        })),
    );
    // A read-only tool name: the daemon's permission gate holds `pay`-like tools for a human.
    call(&c, "tools.register", json!({"name": "receipt_lookup"})).unwrap();
    let proposal = json!({"actions": [{"id": "p", "type": "tool_call", "tool": "receipt_lookup",
        "failure_behavior": "retry", "max_retries": 3}]});
    let out = call(&c, "proposal.submit", json!({"proposal": proposal})).unwrap();
    let r = &out["results"][0];
    assert_eq!(
        (&r["status"], &r["terminal"], &r["attempts"]),
        (&json!("failed"), &json!(true), &json!(1)),
        "{out}"
    );
    assert!(r["error"]
        .as_str()
        .unwrap_or_default()
        .contains("receipt journal is unavailable"));
    assert_eq!(*attempts.lock().unwrap(), 1);
}

#[test]
fn notifications_arrive_in_order() {
    let d = daemon();
    let c = client_for(&d);
    let (tx, rx) = mpsc::channel();
    c.register_daemon_notification_handler("t.note".into(), Arc::new(Notes(Mutex::new(tx))));
    for n in [
        json!(0),
        json!("boom"),
        json!(1),
        json!(2),
        json!(3),
        json!(4),
    ] {
        call(
            &c,
            "debug.notify_client",
            json!({"method": "t.note", "params": {"n": n}}),
        )
        .unwrap();
    }
    for n in 0..5 {
        let got = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("notification");
        assert_eq!(
            serde_json::from_str::<Value>(&got).unwrap(),
            json!({"n": n})
        );
    }
}

#[test]
fn close_fails_pending_calls_and_the_next_call_reconnects() {
    let d = daemon();
    let c = client_for(&d);
    let first = c.connection_epoch().unwrap();
    assert_eq!(
        c.connection_epoch().unwrap(),
        first,
        "same connection, same epoch"
    );
    c.register_daemon_handler(
        "t.alive".into(),
        Arc::new(FnHandler(|_| Ok("\"still here\"".into()))),
    );
    call(&c, "state.set", json!({"key": "k", "value": 1})).unwrap();
    let pending = {
        let c = c.clone();
        std::thread::spawn(move || call(&c, "debug.sleep", json!({"ms": 600_000})))
    };
    std::thread::sleep(Duration::from_millis(200));
    c.close();
    assert_eq!(pending.join().unwrap(), Err(CarError::Closed));
    c.close();
    // A later call reconnects: a new session, so a new epoch and fresh per-connection state,
    // and the handler registered before close still answers.
    assert_eq!(
        call(&c, "state.get", json!({"key": "k"})).unwrap(),
        Value::Null
    );
    let second = c.connection_epoch().unwrap();
    assert!(second > first, "{first} then {second}");
    assert_eq!(
        call(&c, "debug.call_client", json!({"method": "t.alive"})).unwrap(),
        json!({"result": "still here"})
    );
}

/// One streamed tool call from the scripted model.
fn model_call(id: &str, name: &str, arguments: Value) -> Reply {
    let call = json!({"index": 0, "id": id, "type": "function",
        "function": {"name": name, "arguments": arguments.to_string()}});
    Reply::sse(
        &[
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ],
        Duration::ZERO,
    )
}

struct FnTool<F>(F);
impl<F: Fn(Value, Value) -> Result<String, CarError> + Send + Sync> AgentTool for FnTool<F> {
    fn call(
        &self,
        params_json: String,
        call_json: String,
        _abort: Arc<ToolAbort>,
    ) -> Result<String, CarError> {
        let params = serde_json::from_str(&params_json).expect("params are JSON");
        (self.0)(
            params,
            serde_json::from_str(&call_json).expect("call_json is JSON"),
        )
    }
}

fn tools(add: impl AgentTool + 'static) -> HashMap<String, Arc<dyn AgentTool>> {
    HashMap::from([("add".to_string(), Arc::new(add) as Arc<dyn AgentTool>)])
}

fn calc_config() -> AgentLoopConfig {
    AgentLoopConfig {
        agent_name: "calc".into(),
        identity: "You are a calculator.".into(),
        agent_id: None,
        tool_schemas_json: json!([{"name": "add", "description": "add two numbers", "parameters": {
            "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"]}}])
        .to_string(),
        policies_json: "[]".into(),
        default_model: Some("scripted".into()),
        max_tokens: 64,
        max_turns: 4,
        target_outcome: "the sum".into(),
        tool_choice: None,
        temperature: None,
        parallel_tool_calls: None,
    }
}

/// The `tool` message of one request the scripted model received.
fn observed(server: &Server, request: usize) -> Value {
    let requests = server.requests();
    let messages = requests[request].body["messages"]
        .as_array()
        .unwrap()
        .clone();
    messages
        .into_iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("request {request} has no tool message"))
}

#[test]
fn an_agent_loop_runs_tools_observes_results_and_finishes() {
    let server = Server::start(vec![
        model_call("call_1", "add", json!({"a": 2, "b": 3})),
        model_call("call_2", "finish", json!({"answer": "the sum is 5"})),
        model_call("call_3", "add", json!({"a": 2, "b": 3})),
        model_call("call_4", "finish", json!({"answer": "the adder failed"})),
    ]);
    let d = daemon();
    let c = client_for(&d);
    // A remote endpoint is registered by a host session.
    let model =
        json!({"id": "scripted", "base_url": format!("{}/v1", server.base_url), "model": "m"});
    assert_eq!(
        support::host_call(&d, "models.register", model)["registered"],
        true
    );

    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let add = FnTool(move |params: Value, call: Value| {
        log.lock().unwrap().push((params.clone(), call));
        let sum = params["a"].as_i64().unwrap() + params["b"].as_i64().unwrap();
        Ok(json!({"sum": sum}).to_string())
    });
    let agent = AgentLoop::new(c.clone(), tools(add));
    let outcome = agent
        .run(calc_config(), "add 2 and 3".into(), None)
        .unwrap();
    assert_eq!(
        (outcome.status.as_str(), outcome.summary.as_str()),
        ("success", "the sum is 5"),
        "{outcome:?}"
    );
    assert_eq!(outcome.tools_called, ["add", "finish"]);
    let m = outcome.metrics;
    assert_eq!(
        (m.turns, m.tool_calls, m.actions_succeeded, m.actions_failed),
        (2, 2, 2, 0)
    );
    let evidence: Value = serde_json::from_str(&outcome.evidence_json).unwrap();
    assert_eq!(evidence[0]["data"]["answer"], "the sum is 5", "{evidence}");
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0, json!({"a": 2, "b": 3}));
        assert_eq!(
            (&seen[0].1["tool"], &seen[0].1["action_id"]),
            (&json!("add"), &json!("call_1"))
        );
    }
    // The model observed the tool's output, linked to its call.
    let result = observed(&server, 1);
    assert_eq!(result["tool_call_id"], "call_1", "{result}");
    assert_eq!(result["content"], r#"{"sum":5}"#, "{result}");

    // The run's trace: a host session may read it (the operator session may not: CAR's
    // rule), with its model turns and tool call in order and the outcome recorded.
    let run_id = outcome.run_id.clone().expect("run id");
    let trace = c
        .daemon_call_host_management(
            "runs.get_trace".into(),
            json!({"run_id": run_id}).to_string(),
        )
        .unwrap();
    let trace: Value = serde_json::from_str(&trace).unwrap();
    let kinds: Vec<&str> = trace["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["record"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["started", "model_turn", "turn", "model_turn", "ended"],
        "{trace}"
    );
    assert_eq!(trace["records"][4]["outcome"]["summary"], "the sum is 5");
    let err = c
        .runs_get_trace(json!({"run_id": run_id}).to_string())
        .unwrap_err();
    assert!(
        matches!(&err, CarError::DaemonRpc { data_json, .. } if data_json.contains("not_owner")),
        "{err:?}"
    );

    // A tool that throws fails its action; the model observes the error and the run still
    // ends, as a new run.
    let broken = FnTool(|_: Value, _: Value| {
        Err(CarError::Handler {
            detail: "the adder is broken".into(),
            terminal: false,
        })
    });
    let failing = AgentLoop::new(c.clone(), tools(broken))
        .run(calc_config(), "add 2 and 3".into(), Some(3))
        .unwrap();
    assert_eq!(
        (failing.status.as_str(), failing.summary.as_str()),
        ("success", "the adder failed"),
        "{failing:?}"
    );
    assert_ne!(failing.run_id, outcome.run_id);
    let m = failing.metrics;
    assert_eq!((m.actions_succeeded, m.actions_failed), (1, 1), "{m:?}");
    let result = observed(&server, 3);
    assert_eq!(result["tool_call_id"], "call_3", "{result}");
    let content: Value = serde_json::from_str(result["content"].as_str().unwrap()).unwrap();
    assert!(
        content["error"]
            .as_str()
            .is_some_and(|e| e.contains("the adder is broken")),
        "{content}"
    );

    // A config that cannot be sent is refused before anything is sent.
    let bad = AgentLoopConfig {
        tool_schemas_json: r#"{"name":"add"}"#.into(),
        ..calc_config()
    };
    let err = agent.run(bad, "add".into(), None).unwrap_err();
    assert!(
        matches!(&err, CarError::InvalidArgument { detail } if detail.starts_with("AgentLoopConfig: toolSchemasJson must be a JSON array")),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 4);
}

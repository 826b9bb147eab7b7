//! Running the daemon's agents through the `AgentRunner` callback interface against a real
//! `car-server`: `multi.swarm` through the generated wrapper sends each agent to the
//! registered runner as `multi.run_agent {spec, task}` and builds its result from the
//! runner's replies (an `AgentOutput` object or a bare answer), a runner's error is that
//! agent's output `error`, and once the runner is unregistered a `runner: "caller"` call
//! gets the client's `-32601` as every agent's error.

use std::sync::{Arc, Mutex};

use car_daemon_client::{ClientConfig, EnvSnapshot};
use car_runtime_uniffi::{AgentRunner, CarDaemonClient, CarError};
use car_test_harness::Daemon;
use serde_json::{json, Value};

/// An agent runner from a closure.
struct FnRunner<F>(F);
impl<F: Fn(String, String) -> Result<String, CarError> + Send + Sync> AgentRunner for FnRunner<F> {
    fn run(&self, spec_json: String, task: String) -> Result<String, CarError> {
        (self.0)(spec_json, task)
    }
}

fn client_for(d: &Daemon) -> Arc<CarDaemonClient> {
    CarDaemonClient::with_config(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
        .expect("client")
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).expect("results are JSON")
}

fn swarm_params(task: &str) -> String {
    json!({
        "mode": "parallel",
        "agents": [{"name": "a", "role": "optimist"}, {"name": "b", "system_prompt": "Be brief."}],
        "task": task,
    })
    .to_string()
}

#[test]
fn a_registered_runner_runs_a_swarms_agents_and_its_errors_are_the_agents() {
    let d = Daemon::builder().start();
    let c = client_for(&d);
    let seen: Arc<Mutex<Vec<(Value, String)>>> = Arc::default();
    let log = Arc::clone(&seen);
    // A second client for the runner's own daemon calls (a runner may call the daemon;
    // state is per connection, so it is read back on the same client).
    let other = client_for(&d);
    let runner_client = Arc::clone(&other);
    c.register_agent_runner(Arc::new(FnRunner(move |spec: String, task: String| {
        let spec: Value = serde_json::from_str(&spec).expect("specJson is JSON");
        log.lock().unwrap().push((spec.clone(), task.clone()));
        let name = spec["name"].as_str().unwrap_or_default().to_string();
        if task == "fail b" && name == "b" {
            return Err(CarError::Handler {
                detail: "b is broken".into(),
                terminal: false,
            });
        }
        runner_client.daemon_call(
            "state.set".into(),
            json!({"key": format!("ran_{name}"), "value": true}).to_string(),
        )?;
        Ok(match name.as_str() {
            // An AgentOutput object...
            "a" => {
                json!({"name": "a", "answer": format!("A on {task}"), "turns": 2, "tool_calls": 1})
                    .to_string()
            }
            // ...or plain text, taken as the answer.
            _ => format!("B on {task}"),
        })
    })));

    let out = json_of(&c.multi_swarm(swarm_params("the plan")).unwrap());
    assert_eq!(out["task"], "the plan");
    assert_eq!(
        out["final_summary"],
        "## a\nA on the plan\n\n## b\nB on the plan"
    );
    let outputs = out["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 2, "{out}");
    assert_eq!(
        (
            &outputs[0]["name"],
            &outputs[0]["answer"],
            &outputs[0]["turns"],
            &outputs[0]["tool_calls"],
            &outputs[0]["error"]
        ),
        (
            &json!("a"),
            &json!("A on the plan"),
            &json!(2),
            &json!(1),
            &Value::Null
        )
    );
    assert_eq!(
        (
            &outputs[1]["name"],
            &outputs[1]["answer"],
            &outputs[1]["error"]
        ),
        (&json!("b"), &json!("B on the plan"), &Value::Null)
    );
    // Each agent reached the runner once, with its spec as the daemon sent it (CAR's
    // defaults filled in, fields beyond CAR's kept) and the swarm's task.
    let mut calls = std::mem::take(&mut *seen.lock().unwrap());
    calls.sort_by(|x, y| x.0["name"].as_str().cmp(&y.0["name"].as_str()));
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(
        (&calls[0].0["role"], &calls[0].0["max_turns"], &calls[0].1),
        (&json!("optimist"), &json!(10), &"the plan".to_string())
    );
    assert_eq!(calls[1].0["system_prompt"], "Be brief.");
    assert_eq!(
        other
            .daemon_call("state.get".into(), r#"{"key":"ran_b"}"#.into())
            .unwrap(),
        "true"
    );

    // A runner's error fails only that agent; the daemon records it in its output.
    let out = json_of(&c.multi_swarm(swarm_params("fail b")).unwrap());
    let outputs = out["outputs"].as_array().unwrap();
    assert_eq!(outputs[0]["answer"], "A on fail b", "{out}");
    assert_eq!(outputs[0]["error"], Value::Null, "{out}");
    assert_eq!(
        (
            &outputs[1]["name"],
            &outputs[1]["answer"],
            &outputs[1]["error"]
        ),
        (
            &json!("b"),
            &json!(""),
            &json!("agent 'b' failed: b is broken")
        ),
        "{out}"
    );
    assert_eq!(out["final_summary"], "## a\nA on fail b");

    // Without a runner the client answers -32601; `runner: "caller"` forbids the daemon's
    // fallback, so every stage fails with that answer and the pipeline has no final answer.
    c.unregister_agent_runner();
    let calls_before = seen.lock().unwrap().len();
    let params = json!({
        "stages": [{"name": "draft"}, {"name": "edit"}],
        "task": "write it",
        "runner": "caller",
    });
    let out = json_of(&c.multi_pipeline(params.to_string()).unwrap());
    let stages = out["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 2, "{out}");
    for (stage, name) in stages.iter().zip(["draft", "edit"]) {
        assert_eq!(
            (&stage["name"], &stage["answer"], &stage["error"]),
            (
                &json!(name),
                &json!(""),
                &json!(format!(
                    "agent '{name}' failed: unknown method: multi.run_agent"
                ))
            ),
            "{out}"
        );
    }
    assert_eq!(out["final_answer"], "", "{out}");
    assert_eq!(
        seen.lock().unwrap().len(),
        calls_before,
        "the runner was called"
    );
}

//! The loop against scripted services: every branch of a run (finish alone, finish beside
//! other calls, a turn without calls, running out of turns, a proposal that does not
//! verify, a failing daemon call) and what each records and spends. The same loop runs
//! against a real daemon in `client/tests/real_agent_loop.rs` (over the wire) and
//! `daemon/tests/daemon_agents.rs` (in-process).

use std::collections::VecDeque;
use std::sync::Mutex;

use car_agent_loop::{run, AgentConfig, Services, Task};
use futures_util::future::BoxFuture;
use serde_json::{json, Value};

/// Answers `infer` from a script, `verify` with `valid`, `proposal.submit` by echoing each
/// action's parameters as its output, and records every call.
struct Scripted {
    replies: Mutex<VecDeque<Value>>,
    valid: bool,
    calls: Mutex<Vec<(String, Value)>>,
}

impl Scripted {
    fn new(replies: Vec<Value>) -> Self {
        Scripted {
            replies: Mutex::new(replies.into()),
            valid: true,
            calls: Mutex::new(Vec::new()),
        }
    }
    fn methods(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|(m, _)| m.clone())
            .collect()
    }
    fn params_of(&self, method: &str) -> Vec<Value> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|(m, _)| m == method)
            .map(|(_, p)| p.clone())
            .collect()
    }
}

impl Services for Scripted {
    type Error = String;

    fn prepare<'a>(
        &'a self,
        schemas: &'a [Value],
        policies: &'a [Value],
    ) -> BoxFuture<'a, Result<(), String>> {
        self.calls.lock().unwrap().push((
            "prepare".into(),
            json!({"schemas": schemas, "policies": policies}),
        ));
        Box::pin(async { Ok(()) })
    }

    fn call<'a>(
        &'a self,
        method: &'static str,
        params: Value,
    ) -> BoxFuture<'a, Result<Value, String>> {
        self.calls.lock().unwrap().push((method.into(), params));
        let reply = match method {
            "runs.start" => Ok(json!({"run_id": "run-1"})),
            "infer" => self
                .replies
                .lock()
                .unwrap()
                .pop_front()
                .ok_or_else(|| "model offline".to_string()),
            "verify" => Ok(
                json!({"valid": self.valid, "issues": if self.valid { json!([]) } else { json!(["unknown tool"]) }}),
            ),
            _ => Ok(json!({})),
        };
        Box::pin(async move { reply })
    }

    fn execute(&self, proposal: Value) -> BoxFuture<'_, Result<Value, String>> {
        self.calls
            .lock()
            .unwrap()
            .push(("proposal.submit".into(), proposal.clone()));
        let results: Vec<Value> = proposal["actions"]
            .as_array()
            .unwrap()
            .iter()
            .map(
                |a| json!({"action_id": a["id"], "status": "succeeded", "output": a["parameters"]}),
            )
            .collect();
        Box::pin(async move { Ok(json!({"results": results})) })
    }
}

fn reply(text: &str, calls: Value, cost: Value) -> Value {
    json!({"text": text, "tool_calls": calls, "model_used": "m",
           "usage": {"prompt_tokens": 10, "cache_read_input_tokens": 5, "completion_tokens": 3},
           "cost_usd": cost})
}

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"id": id, "name": name, "arguments": args})
}

fn config() -> AgentConfig {
    AgentConfig {
        agent_name: "adder".into(),
        identity: "You add.".into(),
        tool_schemas: vec![json!({"name": "add", "timeoutMs": 500})],
        max_turns: 4,
        max_tokens: 64,
        seed: Some(3),
        ..AgentConfig::default()
    }
}

#[tokio::test]
async fn a_tool_call_then_a_lone_finish_succeeds_with_its_answer() {
    let s = Scripted::new(vec![
        reply("", json!([call("c1", "add", json!({"a": 1}))]), json!(0.25)),
        reply(
            "",
            json!([call("c2", "finish", json!({"answer": "2"}))]),
            json!(0.5),
        ),
    ]);
    let r = run(&s, &config(), Task::goal("add one")).await.unwrap();
    assert_eq!(
        (r.outcome.status.as_str(), r.outcome.summary.as_str()),
        ("success", "2")
    );
    assert_eq!(r.outcome.run_id.as_deref(), Some("run-1"));
    assert_eq!(
        (r.outcome.metrics.turns, r.outcome.metrics.tool_calls),
        (2, 2)
    );
    assert_eq!(r.outcome.metrics.actions_succeeded, 2);
    assert_eq!(r.outcome.tools_called, ["add", "finish"]);
    assert_eq!((r.spend.input_tokens, r.spend.output_tokens), (30, 6));
    assert_eq!((r.spend.cost_usd, r.spend.unpriced_turns), (0.75, 0));
    assert_eq!(
        s.methods(),
        [
            "prepare",
            "runs.start",
            "infer",
            "runs.record_model_turn",
            "verify",
            "proposal.submit",
            "infer",
            "runs.record_model_turn",
            "runs.complete"
        ]
    );
    // The schema without parameters takes none; `finish` is offered beside it.
    let prepared = &s.params_of("prepare")[0]["schemas"];
    assert_eq!(
        prepared[0]["parameters"],
        json!({"type": "object", "properties": {}})
    );
    assert_eq!(prepared[1]["name"], "finish");
    // The action carries the schema's budget; the second turn observed the tool's output.
    let submitted = &s.params_of("proposal.submit")[0];
    assert_eq!(submitted["actions"][0]["timeout_ms"], 500);
    let infers = s.params_of("infer");
    assert_eq!(infers[0]["params"]["seed"], 3);
    assert_eq!(infers[0]["params"]["max_tokens"], 64);
    let observed = infers[1]["messages"].as_array().unwrap();
    let last = observed.last().unwrap();
    assert_eq!(
        (last["role"].as_str(), last["tool_use_id"].as_str()),
        (Some("tool_result"), Some("c1"))
    );
    assert_eq!(last["content"], r#"{"a":1}"#);
    let completed = &s.params_of("runs.complete")[0];
    assert_eq!(completed["outcome"]["status"], "success");
    assert!(completed["outcome"].get("run_id").is_none());
}

#[tokio::test]
async fn finish_beside_another_call_is_refused_and_the_run_goes_on() {
    let s = Scripted::new(vec![
        reply(
            "",
            json!([
                call("c1", "add", json!({})),
                call("c2", "finish", json!({"answer": "early"}))
            ]),
            json!(null),
        ),
        reply(
            "",
            json!([call(
                "c3",
                "finish",
                json!({"answer": "late", "status": "partial_success"})
            )]),
            json!(null),
        ),
    ]);
    let r = run(&s, &config(), Task::goal("g")).await.unwrap();
    assert_eq!(
        (r.outcome.status.as_str(), r.outcome.summary.as_str()),
        ("partial_success", "late")
    );
    let second = &s.params_of("infer")[1]["messages"];
    let refusal = second
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["tool_use_id"] == "c2")
        .unwrap();
    assert!(refusal["content"]
        .as_str()
        .unwrap()
        .contains("called together with other tools"));
    // Unpriced turns are counted, not priced at 0.
    assert_eq!((r.spend.cost_usd, r.spend.unpriced_turns), (0.0, 2));
}

#[tokio::test]
async fn a_turn_without_calls_ends_the_run_done_and_running_out_gives_up() {
    let s = Scripted::new(vec![reply("plain answer", json!([]), json!(0))]);
    let r = run(&s, &config(), Task::goal("g")).await.unwrap();
    assert_eq!(
        (r.outcome.status.as_str(), r.outcome.summary.as_str()),
        ("done", "plain answer")
    );

    let s = Scripted::new(
        (0..2)
            .map(|i| {
                reply(
                    "",
                    json!([call(&format!("c{i}"), "add", json!({}))]),
                    json!(0),
                )
            })
            .collect(),
    );
    let task = Task {
        max_turns: Some(2),
        ..Task::goal("g")
    };
    let r = run(&s, &config(), task).await.unwrap();
    assert_eq!(
        (r.outcome.status.as_str(), r.outcome.metrics.turns),
        ("give_up", 2)
    );
    assert_eq!(s.params_of("infer").len(), 2);
}

#[tokio::test]
async fn a_proposal_that_does_not_verify_is_observed_not_run() {
    let mut s = Scripted::new(vec![
        reply("", json!([call("c1", "nope", json!({}))]), json!(0)),
        reply(
            "",
            json!([call("c2", "finish", json!({"answer": "gave up"}))]),
            json!(0),
        ),
    ]);
    s.valid = false;
    let r = run(&s, &config(), Task::goal("g")).await.unwrap();
    assert!(s.params_of("proposal.submit").is_empty());
    assert_eq!(r.outcome.metrics.actions_failed, 1);
    let observed = &s.params_of("infer")[1]["messages"];
    let result = observed
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["tool_use_id"] == "c1")
        .unwrap();
    assert!(result["content"]
        .as_str()
        .unwrap()
        .contains("did not verify"));
}

#[tokio::test]
async fn a_failing_daemon_call_fails_the_run_with_its_error() {
    let s = Scripted::new(vec![]);
    let err = run(&s, &config(), Task::goal("g")).await.unwrap_err();
    assert_eq!(err, "model offline");
    assert!(!s.methods().contains(&"runs.complete".to_string()));
}

#[tokio::test]
async fn the_requested_model_overrides_the_configs() {
    let s = Scripted::new(vec![reply("x", json!([]), json!(0))]);
    let c = AgentConfig {
        default_model: Some("a".into()),
        ..config()
    };
    run(
        &s,
        &c,
        Task {
            model: Some("b"),
            ..Task::goal("g")
        },
    )
    .await
    .unwrap();
    assert_eq!(s.params_of("infer")[0]["model"], "b");
}

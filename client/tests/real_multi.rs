//! `multi.*` end to end against the real `car-server`: the daemon runs the coordination and
//! sends each agent to this client's `multi.run_agent` handler; with no handler registered
//! the client answers `-32601` and the daemon runs the agents itself on its local model.

mod support;

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::Daemon;
use serde_json::{json, Value};

fn client(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

fn agent(name: &str) -> Value {
    json!({"name": name, "system_prompt": "", "tools": [], "max_turns": 1, "metadata": {}})
}

fn answer(spec: &Value, text: String, tokens: u64) -> Value {
    json!({"name": spec["name"], "answer": text, "turns": 1, "tool_calls": 0, "duration_ms": 1.0,
           "tokens": {"input_tokens": tokens, "output_tokens": tokens}})
}

/// A runner that records how many agents are in flight at once and holds each call until
/// `gate` agents are in flight together (or the hang guard passes).
#[derive(Default)]
struct Overlap {
    state: Mutex<(usize, usize)>,
    changed: Condvar,
}

impl Overlap {
    fn enter(&self, gate: usize) {
        let mut s = self.state.lock().unwrap();
        s.0 += 1;
        s.1 = s.1.max(s.0);
        self.changed.notify_all();
        let _ = self
            .changed
            .wait_timeout_while(s, support::SAFETY, |s| s.1 < gate)
            .unwrap();
    }
    fn leave(&self) {
        self.state.lock().unwrap().0 -= 1;
    }
    fn peak(&self) -> usize {
        self.state.lock().unwrap().1
    }
}

#[tokio::test]
async fn a_parallel_swarm_runs_its_agents_concurrently_on_the_callers_runner() {
    let d = Daemon::builder().start();
    let c = client(&d);
    let overlap = Arc::new(Overlap::default());
    let o = overlap.clone();
    c.register_handler("multi.run_agent", move |params: Value| {
        o.enter(3);
        let spec = &params["spec"];
        let out = answer(
            spec,
            format!(
                "{} on {}",
                spec["name"].as_str().unwrap(),
                params["task"].as_str().unwrap()
            ),
            5,
        );
        o.leave();
        Ok(out)
    });
    let r = c
        .call(
            "multi.swarm",
            json!({"mode": "parallel", "agents": [agent("a"), agent("b"), agent("c")], "task": "T"}),
        )
        .await
        .unwrap();
    assert_eq!(overlap.peak(), 3, "all three agents were in flight at once");
    let names: Vec<&str> = r["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(r["outputs"][1]["answer"], "b on T");
    assert_eq!(r["outputs"][0]["tokens"]["input_tokens"], 5);
    assert_eq!(
        r["final_summary"],
        "## a\na on T\n\n## b\nb on T\n\n## c\nc on T"
    );
    assert_eq!(r["task"], "T");
}

#[tokio::test]
async fn a_pipeline_passes_each_stage_the_previous_findings() {
    let d = Daemon::builder().start();
    let c = client(&d);
    let tasks = Arc::new(Mutex::new(Vec::new()));
    let seen = tasks.clone();
    c.register_handler("multi.run_agent", move |params: Value| {
        let task = params["task"].as_str().unwrap().to_string();
        seen.lock().unwrap().push(task);
        let name = params["spec"]["name"].as_str().unwrap().to_string();
        Ok(answer(&params["spec"], format!("{name}-out"), 1))
    });
    let r = c
        .call(
            "multi.pipeline",
            json!({"stages": [agent("gather"), agent("design")], "task": "Build it"}),
        )
        .await
        .unwrap();
    assert_eq!(r["final_answer"], "design-out");
    assert_eq!(r["stages"].as_array().unwrap().len(), 2);
    let tasks = tasks.lock().unwrap();
    assert_eq!(tasks[0], "Build it");
    assert!(
        tasks[1].starts_with("Build it") && tasks[1].contains("- gather: gather-out"),
        "{}",
        tasks[1]
    );
}

#[tokio::test]
async fn a_tournament_ranks_the_competitors_by_pairwise_judging() {
    let d = Daemon::builder().start();
    let c = client(&d);
    c.register_handler("multi.run_agent", move |params: Value| {
        let spec = &params["spec"];
        let name = spec["name"].as_str().unwrap();
        if name.starts_with("judge") {
            // The judge prefers whichever candidate is `c`.
            let task = params["task"].as_str().unwrap();
            let b_is_c = task.contains("## Candidate B\nanswer-c");
            let verdict = if b_is_c { "B" } else { "A" };
            return Ok(answer(
                spec,
                json!({"winner": verdict, "rationale": "prefers c"}).to_string(),
                1,
            ));
        }
        Ok(answer(spec, format!("answer-{name}"), 1))
    });
    let r = c
        .call(
            "multi.tournament",
            json!({"competitors": [agent("a"), agent("b"), agent("c")], "judge": agent("judge"), "task": "T"}),
        )
        .await
        .unwrap();
    assert_eq!(r["winner_name"], "c", "{r}");
    assert_eq!(r["winner_answer"], "answer-c");
    assert_eq!(r["ranking"][0], "c");
    assert_eq!(r["ranking"].as_array().unwrap().len(), 3);
    assert!(!r["matches"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn a_budget_of_two_agents_refuses_the_third() {
    let d = Daemon::builder().start();
    let c = client(&d);
    c.register_handler("multi.run_agent", |params: Value| {
        Ok(answer(&params["spec"], "ok".into(), 1))
    });
    let r = c
        .call(
            "multi.swarm",
            json!({"mode": "parallel", "agents": [agent("a"), agent("b"), agent("c")], "task": "T",
                   "budget": {"max_agents": 2}}),
        )
        .await
        .unwrap();
    let outputs = r["outputs"].as_array().unwrap();
    assert!(outputs[0]["error"].is_null() && outputs[1]["error"].is_null());
    assert_eq!(
        outputs[2]["error"],
        "coordination budget agent cap reached: 2 of 2 agents already started"
    );
    assert_eq!(outputs[2]["outcome"]["status"], "give_up");
}

#[tokio::test]
async fn bad_coordination_input_is_refused_with_the_field_named() {
    let d = Daemon::builder().start();
    let c = client(&d);
    for (method, params, field) in [
        (
            "multi.swarm",
            json!({"mode": "parallel", "agents": [], "task": "T"}),
            "agents",
        ),
        (
            "multi.swarm",
            json!({"mode": "sideways", "agents": [agent("a")], "task": "T"}),
            "mode",
        ),
        ("multi.pipeline", json!({"stages": [agent("a")]}), "task"),
        (
            "multi.pipeline",
            json!({"stages": [{"system_prompt": "x"}], "task": "T"}),
            "stages[0]",
        ),
        (
            "multi.supervisor",
            json!({"workers": [agent("a")], "supervisor": agent("s"), "task": "T", "max_rounds": 0}),
            "max_rounds",
        ),
        (
            "multi.vote",
            json!({"agents": [agent("a")], "task": "T", "budget": {"max_agents": -1}}),
            "budget.max_agents",
        ),
    ] {
        match c.call(method, params).await {
            Err(Error::Rpc { code, message, .. }) => {
                assert_eq!(code, -32602, "{method}: {message}");
                assert!(
                    message.contains(field),
                    "{method}: {message:?} should name {field}"
                );
            }
            other => panic!("{method}: expected -32602, got {other:?}"),
        }
    }
    // The daemon is still serving.
    c.call("state.keys", json!({})).await.unwrap();
}

#[tokio::test]
async fn a_runner_that_fails_is_recorded_per_agent_not_as_a_call_error() {
    let d = Daemon::builder().start();
    let c = client(&d);
    c.register_handler("multi.run_agent", |params: Value| {
        if params["spec"]["name"] == "bad" {
            return Err(car_daemon_client::HandlerError::new("model offline"));
        }
        Ok(json!("plain text answer"))
    });
    let r = c
        .call(
            "multi.vote",
            json!({"agents": [agent("good"), agent("bad")], "task": "T"}),
        )
        .await
        .unwrap();
    assert_eq!(r["votes"][0]["answer"], "plain text answer");
    let err = r["votes"][1]["error"].as_str().unwrap();
    assert!(
        err.contains("agent 'bad' failed") && err.contains("model offline"),
        "{err}"
    );
    assert_eq!(r["winner"], "plain text answer");
}

#[tokio::test]
async fn with_no_runner_registered_the_daemon_runs_a_pipeline_on_its_local_model() {
    let Ok(gguf) = std::env::var("CAR_TEST_GGUF") else {
        panic!("CAR_TEST_GGUF is not set: run `eval \"$(scripts/fetch-models)\"` before the tests");
    };
    let d = Daemon::builder().start();
    let c = client(&d);
    c.call("models.register", json!({"id": "smol", "path": gguf}))
        .await
        .unwrap();
    let stage = |name: &str| {
        json!({"name": name, "system_prompt": "Answer in one short sentence.",
               "metadata": {"model": "smol", "max_tokens": 24, "seed": 7, "temperature": 0.0}})
    };
    let r = tokio::time::timeout(
        Duration::from_secs(600),
        c.call(
            "multi.pipeline",
            json!({"stages": [stage("first"), stage("second")], "task": "Name a colour."}),
        ),
    )
    .await
    .expect("the pipeline finished")
    .unwrap();
    let stages = r["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 2, "{r}");
    for s in stages {
        assert!(s["error"].is_null(), "{s}");
        assert!(!s["answer"].as_str().unwrap().is_empty(), "{s}");
        assert!(s["tokens"]["output_tokens"].as_u64().unwrap() > 0, "{s}");
        assert_eq!(s["turns"], 1);
    }
    assert_eq!(r["final_answer"], stages[1]["answer"]);
}

#[tokio::test]
async fn a_subtask_main_agent_hands_a_subset_of_its_tools_to_sub_agents() {
    let d = Daemon::builder().start();
    let c = client(&d);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    c.register_handler("multi.run_agent", move |params: Value| {
        let spec = &params["spec"];
        let name = spec["name"].as_str().unwrap().to_string();
        let task = params["task"].as_str().unwrap().to_string();
        s.lock()
            .unwrap()
            .push((name.clone(), spec["tools"].clone(), task.clone()));
        if name == "lead" && !task.contains("Your sub-agents answered") {
            assert!(
                spec["metadata"]["spawn_subtask"]["properties"]["tools"]["items"]["enum"]
                    == json!(["search", "write"])
            );
            let plan = json!({"spawn_subtask": [
                {"name": "finder", "task": "find it", "tools": ["search"]},
                {"name": "rogue", "task": "delete all", "tools": ["shell"]},
            ]});
            return Ok(answer(spec, plan.to_string(), 1));
        }
        Ok(answer(spec, format!("{name} done"), 1))
    });
    let main = json!({"name": "lead", "tools": ["search", "write"]});
    let r = c
        .call("multi.subtask", json!({"main": main, "task": "Research"}))
        .await
        .unwrap();
    assert_eq!(r["final_answer"], "lead done", "{r}");
    let subtasks = r["subtasks"].as_array().unwrap();
    assert_eq!(subtasks.len(), 2);
    assert_eq!(subtasks[0]["output"]["answer"], "finder done");
    assert_eq!(subtasks[0]["tools"], json!(["search"]));
    assert!(subtasks[1]["output"]["error"]
        .as_str()
        .unwrap()
        .contains("'shell' is not one of the main agent's tools"));
    // The refused sub-agent never ran.
    assert!(seen
        .lock()
        .unwrap()
        .iter()
        .all(|(name, _, _)| name != "rogue"));
}

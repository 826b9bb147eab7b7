//! One run of the loop (the steps are in the crate docs).

use car_proto::methods::runs::AGENT_STATUSES;
use serde_json::{json, Value};

use crate::config::{AgentConfig, AgentMetrics, AgentOutcome, Report, Spend};
use crate::{Services, FINISH_TOOL};

/// What one run is asked to do.
#[derive(Debug, Clone)]
pub struct Task<'a> {
    /// The run's intent (`runs.start`'s `intent`).
    pub goal: &'a str,
    /// The conversation after the system prompt: `[{role: "user", content: goal}]` for a
    /// task, the caller's turns for a chat.
    pub conversation: Vec<Value>,
    /// Overrides the config's model.
    pub model: Option<&'a str>,
    /// Overrides the config's `max_turns`.
    pub max_turns: Option<u32>,
}

impl<'a> Task<'a> {
    /// A task given as one user turn.
    pub fn goal(goal: &'a str) -> Self {
        Task {
            goal,
            conversation: vec![json!({"role": "user", "content": goal})],
            model: None,
            max_turns: None,
        }
    }
}

fn finish_schema() -> Value {
    json!({
        "name": FINISH_TOOL,
        "description": "End the task: give the user your answer, built from what the other tools returned. Call it once, alone, when the task is done or cannot be done.",
        "parameters": {"type": "object", "properties": {
            "answer": {"type": "string", "description": "Your answer, stating the result."}
        }, "required": ["answer"]}
    })
}

/// The per-call budget a tool's schema declares (`timeoutMs`, as CAR's loops read it, or
/// `timeout_ms`); the daemon's default applies without one.
fn timeout_of(schemas: &[Value], name: &Value) -> Option<u64> {
    let schema = schemas.iter().find(|s| &s["name"] == name)?;
    schema["timeoutMs"]
        .as_u64()
        .or_else(|| schema["timeout_ms"].as_u64())
}

/// A `ToolSchema` without `parameters` takes no arguments: `{"type": "object"}` is sent
/// for it, since a model's tool list needs a JSON Schema object per tool.
fn with_parameters(mut schema: Value) -> Value {
    if let Some(map) = schema.as_object_mut() {
        if map.get("parameters").is_none_or(Value::is_null) {
            map.insert(
                "parameters".into(),
                json!({"type": "object", "properties": {}}),
            );
        }
    }
    schema
}

/// Whatever a run accumulates between turns.
#[derive(Debug, Default)]
struct Progress {
    metrics: AgentMetrics,
    tools_called: Vec<String>,
    evidence: Vec<Value>,
    spend: Spend,
}

/// Runs `config`'s agent on `task` over `services`.
pub async fn run<S: Services>(
    services: &S,
    config: &AgentConfig,
    task: Task<'_>,
) -> Result<Report, S::Error> {
    let mut schemas: Vec<Value> = config
        .tool_schemas
        .iter()
        .cloned()
        .map(with_parameters)
        .collect();
    schemas.push(finish_schema());
    services.prepare(&schemas, &config.policies).await?;
    let agent_id = config
        .agent_id
        .clone()
        .unwrap_or_else(|| config.agent_name.clone());
    let run = services
        .call(
            "runs.start",
            json!({"agent_id": agent_id, "agent_name": config.agent_name, "intent": task.goal,
                   "outcome_description": config.target_outcome}),
        )
        .await?;
    let run_id = run["run_id"].as_str().map(str::to_string);
    let mut messages = vec![
        json!({"role": "system", "content": format!("{}\n\nWhen the task is complete or you cannot proceed, call the `{FINISH_TOOL}` tool with a concise answer.", config.identity)}),
    ];
    messages.extend(task.conversation);
    let mut progress = Progress::default();
    let mut ending: Option<(String, String)> = None;
    for turn in 1..=task.max_turns.unwrap_or(config.max_turns).max(1) {
        progress.metrics.turns = turn;
        let request = infer_request(config, task.model, &messages, &schemas);
        let started = std::time::Instant::now();
        let answer = services.call("infer", request).await?;
        progress.spend.add(&answer);
        let calls = answer["tool_calls"].as_array().cloned().unwrap_or_default();
        let text = answer["text"].as_str().unwrap_or_default().to_string();
        if let Some(run_id) = &run_id {
            services
                .call(
                    "runs.record_model_turn",
                    json!({"run_id": run_id, "turn_index": turn, "model_id": answer["model_used"],
                           "assistant_text": text, "requested_tool_calls": calls,
                           "token_usage": answer["usage"],
                           "duration_ms": started.elapsed().as_millis() as u64}),
                )
                .await?;
        }
        if calls.is_empty() {
            ending = Some(("done".into(), text));
            break;
        }
        messages.push(json!({"role": "assistant", "content": text, "tool_calls": calls}));
        let (finish, work): (Vec<&Value>, Vec<&Value>) =
            calls.iter().partition(|c| c["name"] == FINISH_TOOL);
        let results = run_calls(services, &work, &schemas, &mut progress).await?;
        for (call, content) in work.iter().zip(results) {
            messages.push(
                json!({"role": "tool_result", "tool_use_id": call["id"], "content": content}),
            );
        }
        if !work.is_empty() {
            // An answer given beside other calls was written before their results: the
            // model observes them and is asked again.
            for call in &finish {
                let content = json!({"error": format!("`{FINISH_TOOL}` was called together with other tools, before their results; call it alone once you have read them")});
                messages.push(json!({"role": "tool_result", "tool_use_id": call["id"],
                                     "content": content.to_string()}));
            }
            continue;
        }
        if let Some(call) = finish.first() {
            ending = Some(finished(call, &mut progress));
            break;
        }
    }
    let (status, summary) = ending.unwrap_or(("give_up".into(), String::new()));
    let outcome = AgentOutcome {
        run_id: run_id.clone(),
        status,
        summary,
        evidence: progress.evidence,
        metrics: progress.metrics,
        tools_called: progress.tools_called,
        timestamp: car_proto::clock::now_rfc3339(),
    };
    if let Some(run_id) = &run_id {
        let mut recorded = serde_json::to_value(&outcome).unwrap_or_default();
        if let Some(o) = recorded.as_object_mut() {
            o.remove("run_id");
        }
        services
            .call(
                "runs.complete",
                json!({"run_id": run_id, "outcome": recorded}),
            )
            .await?;
    }
    Ok(Report {
        outcome,
        spend: progress.spend,
    })
}

fn infer_request(
    config: &AgentConfig,
    model: Option<&str>,
    messages: &[Value],
    schemas: &[Value],
) -> Value {
    let mut request = json!({
        "prompt": "", "messages": messages, "tools": schemas,
        "params": {"max_tokens": config.max_tokens,
                   "tool_choice": config.tool_choice.as_deref().unwrap_or("auto"),
                   "cache_ttl": "one_hour"},
        "cache_control": true,
    });
    if let Some(model) = model.or(config.default_model.as_deref()) {
        request["model"] = json!(model);
    }
    if let Some(t) = config.temperature {
        request["params"]["temperature"] = json!(t);
    }
    if let Some(seed) = config.seed {
        request["params"]["seed"] = json!(seed);
    }
    if let Some(p) = config.parallel_tool_calls {
        request["params"]["parallel_tool_calls"] = json!(p);
    }
    request
}

/// A lone `finish` call: the run's status and summary.
fn finished(call: &Value, progress: &mut Progress) -> (String, String) {
    progress.metrics.tool_calls += 1;
    progress.metrics.actions_succeeded += 1;
    progress.tools_called.push(FINISH_TOOL.to_string());
    let args = &call["arguments"];
    let summary = args["summary"]
        .as_str()
        .or(args["answer"].as_str())
        .unwrap_or_default()
        .to_string();
    progress
        .evidence
        .push(json!({"kind": "tool_result", "description": "finish called", "data": args}));
    let status = args["status"]
        .as_str()
        // A `finish` naming a status CAR's `AgentOutcome` lacks ends the run with `success`.
        .filter(|s| AGENT_STATUSES.contains(s))
        .unwrap_or("success")
        .to_string();
    (status, summary)
}

/// Verifies and runs `calls` as one proposal; each call's observation as JSON text.
async fn run_calls<S: Services>(
    services: &S,
    calls: &[&Value],
    schemas: &[Value],
    progress: &mut Progress,
) -> Result<Vec<String>, S::Error> {
    if calls.is_empty() {
        return Ok(Vec::new());
    }
    let actions: Vec<Value> = calls
        .iter()
        .map(|c| {
            let mut action = json!({"id": c["id"], "type": "tool_call", "tool": c["name"],
                                    "parameters": c["arguments"], "dependencies": []});
            if let Some(budget) = timeout_of(schemas, &c["name"]) {
                action["timeout_ms"] = json!(budget);
            }
            action
        })
        .collect();
    let proposal = json!({"actions": actions, "source": "agent_loop"});
    for c in calls {
        progress.metrics.tool_calls += 1;
        if let Some(name) = c["name"].as_str() {
            progress.tools_called.push(name.to_string());
        }
    }
    let verdict = services
        .call("verify", json!({"proposal": proposal}))
        .await?;
    if verdict["valid"] != true {
        progress.metrics.actions_failed += calls.len() as u32;
        let problem = json!({"error": "the proposal did not verify", "issues": verdict["issues"]});
        return Ok(vec![problem.to_string(); calls.len()]);
    }
    let result = services.execute(proposal).await?;
    let results = result["results"].as_array().cloned().unwrap_or_default();
    Ok(calls
        .iter()
        .map(|c| {
            let r = results
                .iter()
                .find(|r| r["action_id"] == c["id"])
                .cloned()
                .unwrap_or(Value::Null);
            if r["status"] == "succeeded" {
                progress.metrics.actions_succeeded += 1;
                r["output"].to_string()
            } else {
                progress.metrics.actions_failed += 1;
                json!({"error": r["error"], "status": r["status"]}).to_string()
            }
        })
        .collect())
}

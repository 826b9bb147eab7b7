//! `multi.subtask`: a main agent that hands subsets of its own tools to sub-agents.
//!
//! CAR gives the main agent a `spawn_subtask` tool. Here the agent runner is the caller's
//! (or the daemon's one-turn runner), so the tool is offered declaratively: the main agent
//! is run with `spawn_subtask` added to its `tools` and `metadata.spawn_subtask` holding the
//! tool's JSON Schema (whose `tools` parameter is an `enum` of the main agent's tools), and
//! its task explains the protocol. An answer containing a JSON object
//! `{"spawn_subtask": [{name, task, tools}, …]}` (or one request object) asks for
//! sub-agents; each request's `tools` must be a subset of the main agent's — a request that
//! is not is recorded with an error and never runs (the precondition is checked before any
//! execution). Admitted sub-agents run concurrently under the same [`Budget`] (so
//! `max_agents` also caps spawns), each as a fresh spec with only its granted tools. The
//! main agent then gets a second turn with the sub-agents' answers; its answer is
//! `final_answer`. An answer with no request is the final answer at once.

use car_proto::methods::multi::{
    AgentOutput, AgentSpec, SubtaskParams, SubtaskRecord, SubtaskResult,
};
use serde_json::{json, Value};

use crate::budget::Budget;
use crate::run::{run_agent, run_parallel};
use crate::{AgentRunner, MultiError};

/// The tool name offered to the main agent.
pub const SPAWN_TOOL: &str = "spawn_subtask";
/// Sub-agents one main agent may request at most (beyond that, requests are refused).
pub const MAX_SUBTASKS: usize = 16;

fn spawn_schema(tools: &[String]) -> Value {
    json!({
        "type": "object",
        "required": ["name", "task", "tools"],
        "properties": {
            "name": {"type": "string"},
            "task": {"type": "string"},
            "tools": {"type": "array", "items": {"type": "string", "enum": tools}, "uniqueItems": true},
        },
    })
}

fn protocol_prompt(task: &str, tools: &[String]) -> String {
    format!(
        "{task}\n\nYou may delegate parts of this task to sub-agents. To do so, reply with a JSON object \
         {{\"spawn_subtask\": [{{\"name\": \"...\", \"task\": \"...\", \"tools\": [...]}}]}} where each sub-agent's \
         tools are chosen from: {}. Otherwise reply with your final answer.",
        if tools.is_empty() { "(none)".to_string() } else { tools.join(", ") }
    )
}

/// The spawn requests in `text`, if it holds a `spawn_subtask` object.
fn requests(text: &str) -> Option<Vec<Value>> {
    for (start, _) in text.match_indices('{').take(64) {
        let mut values = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        let Some(Ok(Value::Object(map))) = values.next() else {
            continue;
        };
        match map.get(SPAWN_TOOL) {
            Some(Value::Array(list)) => return Some(list.clone()),
            Some(one @ Value::Object(_)) => return Some(vec![one.clone()]),
            _ => continue,
        }
    }
    None
}

fn record(name: String, task: String, tools: Vec<String>, output: AgentOutput) -> SubtaskRecord {
    SubtaskRecord {
        name,
        task,
        tools,
        output,
    }
}

pub async fn subtask(
    runner: &dyn AgentRunner,
    p: SubtaskParams,
) -> Result<SubtaskResult, MultiError> {
    let budget = Budget::new(p.budget);
    let universe = p.main.tools.clone();
    let mut main = p.main.clone();
    if !main.tools.iter().any(|t| t == SPAWN_TOOL) {
        main.tools.push(SPAWN_TOOL.to_string());
    }
    main.metadata
        .insert(SPAWN_TOOL.to_string(), spawn_schema(&universe));
    let first = run_agent(runner, &budget, &main, &protocol_prompt(&p.task, &universe)).await;
    if let Some(error) = &first.error {
        return Err(MultiError::Agent(format!("subtask error: {error}")));
    }
    let Some(asked) = requests(&first.answer) else {
        return Ok(SubtaskResult {
            task: p.task,
            final_answer: first.answer,
            subtasks: vec![],
        });
    };
    let mut records: Vec<Option<SubtaskRecord>> = Vec::new();
    let mut jobs: Vec<(AgentSpec, String)> = Vec::new();
    let mut slots = Vec::new();
    for (i, request) in asked.into_iter().enumerate() {
        let name = request
            .get("name")
            .and_then(Value::as_str)
            .map_or_else(|| format!("{}_sub_{i}", p.main.name), str::to_string);
        let task = request
            .get("task")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let tools: Vec<String> = request
            .get("tools")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let refusal = if i >= MAX_SUBTASKS {
            Some(format!("at most {MAX_SUBTASKS} sub-agents may be spawned"))
        } else if task.is_empty() {
            Some("spawn_subtask: task is required".to_string())
        } else {
            tools
                .iter()
                .find(|t| !universe.contains(t))
                .map(|t| format!("spawn_subtask: tool '{t}' is not one of the main agent's tools"))
        };
        if let Some(error) = refusal {
            records.push(Some(record(
                name.clone(),
                task,
                tools,
                AgentOutput::failed(name, error),
            )));
            continue;
        }
        let mut spec = AgentSpec::named(name.clone(), p.main.system_prompt.clone());
        spec.tools = tools.clone();
        spec.max_turns = p.main.max_turns;
        spec.metadata = p.main.metadata.clone();
        slots.push(records.len());
        records.push(None);
        jobs.push((spec, task));
    }
    let outputs = run_parallel(runner, &budget, &jobs).await;
    for ((slot, (spec, task)), output) in slots.into_iter().zip(jobs).zip(outputs) {
        records[slot] = Some(record(spec.name.to_string(), task, spec.tools, output));
    }
    let subtasks: Vec<SubtaskRecord> = records.into_iter().flatten().collect();
    let mut summary = format!("Original task: {}\n\nYour sub-agents answered:\n", p.task);
    for s in &subtasks {
        match &s.output.error {
            None => summary.push_str(&format!("- {}: {}\n", s.name, s.output.answer)),
            Some(e) => summary.push_str(&format!("- {}: [failed: {e}]\n", s.name)),
        }
    }
    summary.push_str("\nGive the final answer to the original task.");
    let second = run_agent(runner, &budget, &p.main, &summary).await;
    let final_answer = match second.error {
        None => second.answer,
        Some(_) => first.answer,
    };
    Ok(SubtaskResult {
        task: p.task,
        final_answer,
        subtasks,
    })
}

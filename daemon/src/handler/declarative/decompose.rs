//! Splitting a need into independent subtasks with a planner model (`declagents.route_split`,
//! `discovery.route_compose`).
//!
//! The planner is the daemon's routed model (`infer` without `model`, as the caller), asked for
//! `{"subtasks": [string, …]}` under a `json_schema` response format (grammar-constrained on a
//! local model, validated before it is used), at most `max_subtasks` items. Any failure — no
//! model, an error, an empty list — falls back to the last valid split, else the whole need
//! (CAR's rule): a decomposition never fails the call.
//!
//! `sad` (skill-aware decomposition): split once, rank the available services for each subtask
//! (the hints: the top candidates' names), split again with the hints in the prompt, and stop
//! when two rounds' hint sets overlap by at least `convergence` (Jaccard) or after `iterations`
//! rounds.

use std::collections::BTreeSet;

use car_proto::methods::inference::{GenerateParams, ResponseFormat};
use serde_json::json;

use crate::handler::Call;

/// What a decomposition produced.
#[derive(Debug, Clone, Default)]
pub struct Split {
    pub subtasks: Vec<String>,
    pub initial: Vec<String>,
    pub rounds: u32,
    pub hints: Vec<String>,
    pub hint_jaccard: Option<f64>,
}

/// The knobs, clamped as CAR clamps them.
#[derive(Debug, Clone)]
pub struct Knobs {
    pub max_subtasks: usize,
    pub sad: bool,
    pub hints: usize,
    pub iterations: u32,
    pub convergence: f64,
}

impl Knobs {
    pub fn new(
        max_subtasks: Option<u32>,
        mode: Option<&str>,
        hints: Option<u32>,
        iterations: Option<u32>,
        convergence: Option<f64>,
    ) -> Result<Self, String> {
        let sad = match mode.unwrap_or("vanilla") {
            "vanilla" => false,
            "sad" => true,
            other => {
                return Err(format!(
                    "decomposition_mode: must be vanilla or sad, got {other:?}"
                ))
            }
        };
        Ok(Knobs {
            max_subtasks: max_subtasks.unwrap_or(5).clamp(1, 10) as usize,
            sad,
            hints: hints.unwrap_or(5).clamp(1, 50) as usize,
            iterations: iterations.unwrap_or(2).clamp(1, 3),
            convergence: convergence
                .filter(|c| c.is_finite())
                .unwrap_or(0.6)
                .clamp(0.0, 1.0),
        })
    }
}

async fn ask(call: &Call, need: &str, max: usize, hints: &[String]) -> Option<Vec<String>> {
    let mut prompt = format!(
        "Split the task below into at most {max} independent subtasks, each one short \
         instruction that one agent can do alone. Answer only with JSON: \
         {{\"subtasks\": [\"...\"]}}.\n\nTask: {need}"
    );
    if !hints.is_empty() {
        prompt.push_str(&format!(
            "\n\nServices available for the subtasks: {}.",
            hints.join("; ")
        ));
    }
    let schema = json!({
        "type": "object",
        "properties": {"subtasks": {"type": "array", "items": {"type": "string", "minLength": 1},
                                     "minItems": 1, "maxItems": max}},
        "required": ["subtasks"]
    });
    let params = GenerateParams {
        prompt: Some(prompt),
        max_tokens: Some(256),
        temperature: Some(0.0),
        response_format: Some(ResponseFormat::JsonSchema {
            schema: Some(schema),
            name: Some("subtasks".into()),
            strict: Some(true),
            json_schema: None,
        }),
        ..GenerateParams::default()
    };
    let reply = match call
        .invoke::<car_proto::methods::inference::Infer>(params)
        .await
    {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e.message, "decomposition failed; keeping the last split");
            return None;
        }
    };
    let parsed: serde_json::Value = serde_json::from_str(reply.text.trim()).ok()?;
    let subtasks: Vec<String> = parsed["subtasks"]
        .as_array()?
        .iter()
        .filter_map(|s| s.as_str())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .take(max)
        .map(str::to_string)
        .collect();
    (!subtasks.is_empty()).then_some(subtasks)
}

fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        1.0
    } else {
        a.intersection(b).count() as f64 / union as f64
    }
}

/// Splits `need` (see the module docs); `hints_for` names the services a subtask would go to.
pub async fn split<F, Fut>(call: &Call, need: &str, knobs: &Knobs, hints_for: F) -> Split
where
    F: Fn(Vec<String>, usize) -> Fut,
    Fut: std::future::Future<Output = Vec<String>>,
{
    let first = ask(call, need, knobs.max_subtasks, &[])
        .await
        .unwrap_or_else(|| vec![need.to_string()]);
    let mut out = Split {
        subtasks: first.clone(),
        initial: first,
        rounds: 1,
        ..Split::default()
    };
    if !knobs.sad {
        return out;
    }
    let mut previous: Option<BTreeSet<String>> = None;
    for _ in 0..knobs.iterations {
        let hints = hints_for(out.subtasks.clone(), knobs.hints).await;
        let set: BTreeSet<String> = hints.iter().cloned().collect();
        out.hints = hints.clone();
        if let Some(prev) = &previous {
            let j = jaccard(prev, &set);
            out.hint_jaccard = Some(j);
            if j >= knobs.convergence {
                break;
            }
        }
        previous = Some(set);
        if let Some(again) = ask(call, need, knobs.max_subtasks, &hints).await {
            out.subtasks = again;
        }
        out.rounds += 1;
    }
    out
}

//! Who runs one agent of a `multi.*` coordination or a workflow's pattern stage.
//!
//! [`SessionRunner`] implements `car_multi::AgentRunner` for one call:
//! - by default it sends the `multi.run_agent {spec, task}` reverse call to the calling connection,
//!   whose registered agent runner answers with an `AgentOutput` (CAR's pattern, like
//!   `tools.execute`);
//! - when the caller answers `-32601` (it registered no runner) it falls back, for the rest of the
//!   call, to the daemon's own runner (beyond CAR): one generation on the daemon's inference
//!   (`spec.metadata.model` or a top-level `model`, else the default local model) with the spec's
//!   `system_prompt` and the task, admitted through the same queue as `infer`. `runner: "daemon"`
//!   skips the reverse call; `runner: "caller"` never falls back.
//!
//! The daemon's runner answers in one model turn and does not call tools (a spec's `tools`
//! are the caller's tool names, which only the caller can run); its `AgentOutput` carries
//! the generation's token counts, so a `budget` sees them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use car_inference::{CancelToken, GenerateRequest};
use car_multi::AgentRunner;
use car_proto::errors::METHOD_NOT_FOUND;
use car_proto::methods::multi::{
    AgentOutput, AgentSpec, RunAgentParams, RunnerChoice, TokenUsage, RUN_AGENT_METHOD,
};
use futures_util::future::BoxFuture;

use crate::state::session::{ReverseCallError, Session};
use crate::state::ServerState;

/// Longest the daemon's runner generates when the spec names no `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 512;

/// Runs agents for one call on `session`.
#[derive(Debug)]
pub struct SessionRunner {
    session: Arc<Session>,
    state: Arc<ServerState>,
    /// Set once the caller said it has no runner (or was told `runner: "daemon"`).
    on_daemon: AtomicBool,
    fallback: bool,
    timeout: Duration,
}

impl SessionRunner {
    pub fn new(
        session: Arc<Session>,
        state: Arc<ServerState>,
        choice: Option<RunnerChoice>,
    ) -> Self {
        let timeout = state.daemon.config.handler_timeout;
        SessionRunner {
            session,
            state,
            on_daemon: AtomicBool::new(choice == Some(RunnerChoice::Daemon)),
            fallback: choice != Some(RunnerChoice::Caller),
            timeout,
        }
    }

    async fn on_caller(&self, spec: &AgentSpec, task: &str) -> Result<Option<AgentOutput>, String> {
        let params = serde_json::to_value(RunAgentParams {
            spec: spec.clone(),
            task: task.to_string(),
        })
        .map_err(|e| format!("spec does not encode: {e}"))?;
        let started = Instant::now();
        match self
            .session
            .call_client(RUN_AGENT_METHOD, &params, self.timeout)
            .await
        {
            Ok(Ok(reply)) => {
                let mut out = car_multi::parse_output(&spec.name, reply)?;
                if out.duration_ms == 0.0 {
                    out.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
                }
                Ok(Some(out))
            }
            Ok(Err(e)) if e.code == METHOD_NOT_FOUND && self.fallback => {
                tracing::debug!(
                    session = self.session.id,
                    "caller has no agent runner; the daemon runs agents"
                );
                self.on_daemon.store(true, Ordering::Relaxed);
                Ok(None)
            }
            Ok(Err(e)) => Err(e.message),
            Err(ReverseCallError::Closed) => Err("the caller's connection closed".into()),
            Err(ReverseCallError::TimedOut(d)) => Err(format!(
                "the caller's agent runner did not answer within {}s",
                d.as_secs()
            )),
        }
    }
}

impl AgentRunner for SessionRunner {
    fn run<'a>(
        &'a self,
        spec: &'a AgentSpec,
        task: &'a str,
    ) -> BoxFuture<'a, Result<AgentOutput, String>> {
        Box::pin(async move {
            if !self.on_daemon.load(Ordering::Relaxed) {
                if let Some(out) = self.on_caller(spec, task).await? {
                    return Ok(out);
                }
            }
            run_on_daemon(&self.state, spec, task).await
        })
    }
}

fn number<T: TryFrom<u64>>(spec: &AgentSpec, key: &str) -> Option<T> {
    spec.metadata
        .get(key)
        .or_else(|| spec.extra.get(key))
        .and_then(serde_json::Value::as_u64)
        .and_then(|n| T::try_from(n).ok())
}

/// One generation for `spec` on the daemon's inference.
pub async fn run_on_daemon(
    state: &ServerState,
    spec: &AgentSpec,
    task: &str,
) -> Result<AgentOutput, String> {
    let started = Instant::now();
    let svc = state.inference.clone();
    let request = GenerateRequest {
        prompt: Some(task.to_string()),
        system: (!spec.system_prompt.is_empty()).then(|| spec.system_prompt.clone()),
        max_tokens: Some(number(spec, "max_tokens").unwrap_or(DEFAULT_MAX_TOKENS)),
        temperature: spec
            .metadata
            .get("temperature")
            .and_then(serde_json::Value::as_f64)
            .map(|t| t as f32),
        seed: number(spec, "seed"),
        ..GenerateRequest::default()
    };
    let model = spec.model().map(str::to_string);
    let slot = svc
        .admission
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| "the daemon is shutting down".to_string())?;
    let engine = svc.engine.clone();
    // Dropping the handler (deadline, cancelled call) fires the token.
    let cancel = CancelToken::new();
    let _cancel_on_drop = CancelOnDrop(cancel.clone());
    let result = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        engine.generate(model.as_deref(), &request, &cancel, None)
    })
    .await
    .map_err(|e| format!("generation task failed: {e}"))?
    .map_err(|e| e.to_string())?;
    Ok(AgentOutput {
        name: spec.name.to_string(),
        answer: result.text.trim().to_string(),
        turns: 1,
        tool_calls: 0,
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        error: None,
        tokens: Some(TokenUsage {
            input_tokens: u64::from(result.usage.prompt_tokens),
            output_tokens: u64::from(result.usage.completion_tokens),
            cost_usd: 0.0,
        }),
        outcome: None,
    })
}

struct CancelOnDrop(CancelToken);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

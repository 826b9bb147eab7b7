//! A scripted fake runner shared by the integration tests.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use car_multi::{AgentFuture, AgentRunner};
use car_proto::methods::fields::Name;
use car_proto::methods::multi::{AgentOutput, AgentSpec, TokenUsage};

type Script = dyn Fn(&str, &str) -> Result<AgentOutput, String> + Send + Sync;

/// Answers from a closure `(spec name, task) -> reply` and records every call in order.
pub struct Scripted {
    script: Box<Script>,
    pub calls: Mutex<Vec<(String, String)>>,
}

impl Scripted {
    pub fn new(
        f: impl Fn(&str, &str) -> Result<AgentOutput, String> + Send + Sync + 'static,
    ) -> Self {
        Scripted {
            script: Box::new(f),
            calls: Mutex::new(Vec::new()),
        }
    }

    /// Every agent answers `"{name} says hi"`.
    pub fn echo() -> Self {
        Scripted::new(|name, _| Ok(ok(name, &format!("{name} says hi"))))
    }

    pub fn calls(&self) -> Vec<(String, String)> {
        self.calls.lock().unwrap().clone()
    }

    /// The task the agent `name` got on its `n`th call (0-based).
    pub fn task_of(&self, name: &str, n: usize) -> String {
        self.calls()
            .into_iter()
            .filter(|(c, _)| c == name)
            .nth(n)
            .unwrap_or_else(|| panic!("no call {n} to {name}: {:?}", self.calls()))
            .1
    }

    pub fn names(&self) -> Vec<String> {
        self.calls().into_iter().map(|(n, _)| n).collect()
    }
}

impl AgentRunner for Scripted {
    fn run<'a>(&'a self, spec: &'a AgentSpec, task: &'a str) -> AgentFuture<'a> {
        self.calls
            .lock()
            .unwrap()
            .push((spec.name.to_string(), task.to_owned()));
        let reply = (self.script)(&spec.name, task);
        Box::pin(async move { reply })
    }
}

/// Blocks each call on a shared barrier before answering: deadlocks unless the calls of
/// one batch are in flight together.
pub struct Barriered {
    pub barrier: Arc<tokio::sync::Barrier>,
}

impl AgentRunner for Barriered {
    fn run<'a>(&'a self, spec: &'a AgentSpec, _task: &'a str) -> AgentFuture<'a> {
        Box::pin(async move {
            self.barrier.wait().await;
            Ok(ok(&spec.name, "done"))
        })
    }
}

pub fn ok(name: &str, answer: &str) -> AgentOutput {
    AgentOutput {
        name: name.to_owned(),
        answer: answer.to_owned(),
        turns: 1,
        tool_calls: 0,
        duration_ms: 0.0,
        error: None,
        tokens: None,
        outcome: None,
    }
}

pub fn with_tokens(mut out: AgentOutput, input: u64, output: u64) -> AgentOutput {
    out.tokens = Some(TokenUsage {
        input_tokens: input,
        output_tokens: output,
        cost_usd: 0.0,
    });
    out
}

pub fn spec(name: &str) -> AgentSpec {
    AgentSpec::named(name, format!("you are {name}"))
}

pub fn specs(names: &[&str]) -> Vec<AgentSpec> {
    names.iter().map(|n| spec(n)).collect()
}

pub fn renamed(spec: &AgentSpec, name: &str) -> AgentSpec {
    let mut s = spec.clone();
    s.name = Name(name.to_owned());
    s
}

//! The standard chat runner ([`Client::serve_chat_with_agent_loop`]): every turn through
//! the shared agent loop on a per-session in-memory thread (what CAR's `--serve` harness
//! does).
//!
//! Per turn of session `s`:
//! 1. the conversation is `s`'s thread (its earlier `user`/`assistant` turns) plus this turn's
//!    `prompt` as the newest user turn;
//! 2. it runs through [`Client::run_chat_turn`] with the config, the turn's `model` when non-empty
//!    (else the config's), and the caller's tool function; each tool call the loop makes is
//!    announced first as a `tool_call` event;
//! 3. the reply is emitted as one `token` (skipped when empty), then the turn ends with `done
//!    {finish_reason: "stop", text}`; a failure ends it with `error` and leaves the thread
//!    unchanged (the next turn does not see an unanswered prompt); a cancel drops the running loop
//!    at once (its run record stays open) and leaves the thread unchanged too.
//!
//! Bounds ([`ChatThreadLimits`]): at most `max_sessions` threads are kept (the least
//! recently used one is forgotten first) and each keeps its newest `max_turns` turns
//! (a turn is a user and an assistant message; older turns are dropped first). The
//! runner ignores `stream` (the reply is one token either way), `context`, `attachments`
//! and `goal` (no `goal_evaluated` events): a handler of its own
//! ([`Client::serve_chat`]) can serve those.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{json, Value};

use super::{ChatHandler, ChatTurnContext, FINISH_CANCELLED};
use crate::agent_loop::AgentConfig;
use crate::client::Client;
use crate::handlers::{HandlerResult, ToolCall};

/// How much conversation [`Client::serve_chat_with_agent_loop`] keeps in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatThreadLimits {
    /// Sessions whose thread is kept (least recently used forgotten first); default 64.
    pub max_sessions: usize,
    /// Turns (user + assistant message pairs) kept per thread, oldest dropped first;
    /// default 20.
    pub max_turns: usize,
}

impl Default for ChatThreadLimits {
    fn default() -> Self {
        Self {
            max_sessions: 64,
            max_turns: 20,
        }
    }
}

struct Thread {
    last_used: u64,
    messages: Vec<Value>,
}

/// Every session's thread, bounded by the limits.
struct Threads {
    limits: ChatThreadLimits,
    clock: u64,
    by_session: HashMap<String, Thread>,
}

impl Threads {
    fn new(limits: ChatThreadLimits) -> Self {
        Self {
            limits,
            clock: 0,
            by_session: HashMap::new(),
        }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// `session_id`'s earlier messages (empty for a new session), marking it used.
    fn history(&mut self, session_id: &str) -> Vec<Value> {
        let now = self.tick();
        match self.by_session.get_mut(session_id) {
            Some(t) => {
                t.last_used = now;
                t.messages.clone()
            }
            None => Vec::new(),
        }
    }

    /// Appends one answered turn, then applies both bounds.
    fn commit(&mut self, session_id: &str, prompt: &str, reply: &str) {
        let now = self.tick();
        let max_messages = self.limits.max_turns.saturating_mul(2);
        let thread = self
            .by_session
            .entry(session_id.to_string())
            .or_insert_with(|| Thread {
                last_used: now,
                messages: Vec::new(),
            });
        thread.last_used = now;
        thread
            .messages
            .push(json!({"role": "user", "content": prompt}));
        thread
            .messages
            .push(json!({"role": "assistant", "content": reply}));
        let excess = thread.messages.len().saturating_sub(max_messages);
        // Whole turns only: `excess` is even, since both lengths are.
        thread.messages.drain(..excess);
        while self.by_session.len() > self.limits.max_sessions {
            let oldest = self
                .by_session
                .iter()
                .min_by_key(|(_, t)| t.last_used)
                .map(|(s, _)| s.clone());
            match oldest {
                Some(s) => self.by_session.remove(&s),
                None => break,
            };
        }
    }
}

/// The runner's [`ChatHandler`].
struct AgentLoopChat<F> {
    config: AgentConfig,
    threads: Mutex<Threads>,
    tool_fn: F,
}

impl<F> AgentLoopChat<F> {
    fn threads(&self) -> std::sync::MutexGuard<'_, Threads> {
        // Each critical section is one history read or one commit.
        self.threads.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<F> ChatHandler for AgentLoopChat<F>
where
    F: Fn(ToolCall) -> HandlerResult + Send + Sync + Clone + 'static,
{
    fn run(&self, turn: &ChatTurnContext) -> Result<String, String> {
        let p = turn.params();
        let mut messages = self.threads().history(&p.session_id);
        messages.push(json!({"role": "user", "content": p.prompt}));
        let tool_fn = {
            let (f, turn) = (self.tool_fn.clone(), turn.clone());
            move |call: ToolCall| {
                turn.emit_tool_call(&call.tool, Some(call.params.clone()));
                f(call)
            }
        };
        let client = turn.client().clone();
        let cancelled = turn.cancelled();
        let outcome = turn.block_on(async {
            tokio::select! {
                biased;
                () = cancelled => None,
                r = client.run_chat_turn(&self.config, &messages, p.requested_model(), tool_fn) => Some(r),
            }
        });
        match outcome {
            None => Err(FINISH_CANCELLED.to_string()),
            Some(Err(e)) => Err(e.to_string()),
            Some(Ok(reply)) => {
                self.threads().commit(&p.session_id, &p.prompt, &reply.text);
                if !reply.text.is_empty() {
                    turn.emit_token(&reply.text);
                }
                Ok(reply.text)
            }
        }
    }
}

impl Client {
    /// Serves `agent.chat` with the agent loop (see the `chat` module docs and
    /// [`ChatThreadLimits`]): each session keeps an in-memory thread, each turn runs
    /// [`Client::run_chat_turn`] with `config` (the turn's `model`, when non-empty,
    /// overriding `config.default_model`), and `tool_fn` serves the loop's tool calls.
    /// Replaces any earlier chat handler, as [`Client::serve_chat`] does.
    pub fn serve_chat_with_agent_loop<F>(
        &self,
        config: AgentConfig,
        limits: ChatThreadLimits,
        tool_fn: F,
    ) where
        F: Fn(ToolCall) -> HandlerResult + Send + Sync + Clone + 'static,
    {
        self.serve_chat(AgentLoopChat {
            config,
            threads: Mutex::new(Threads::new(limits)),
            tool_fn,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(t: &mut Threads, s: &str) -> Vec<String> {
        t.history(s)
            .iter()
            .map(|m| {
                format!(
                    "{}:{}",
                    m["role"].as_str().unwrap(),
                    m["content"].as_str().unwrap()
                )
            })
            .collect()
    }

    #[test]
    fn threads_keep_answered_turns_in_order_and_drop_the_oldest() {
        let mut t = Threads::new(ChatThreadLimits {
            max_sessions: 8,
            max_turns: 2,
        });
        assert!(t.history("s").is_empty());
        t.commit("s", "q1", "a1");
        assert_eq!(contents(&mut t, "s"), ["user:q1", "assistant:a1"]);
        t.commit("s", "q2", "a2");
        t.commit("s", "q3", "a3");
        assert_eq!(
            contents(&mut t, "s"),
            ["user:q2", "assistant:a2", "user:q3", "assistant:a3"]
        );
        assert!(t.history("other").is_empty(), "threads are per session");
    }

    #[test]
    fn the_least_recently_used_session_is_forgotten_first() {
        let mut t = Threads::new(ChatThreadLimits {
            max_sessions: 2,
            max_turns: 4,
        });
        t.commit("a", "qa", "ra");
        t.commit("b", "qb", "rb");
        // Reading `a` makes `b` the least recently used.
        assert_eq!(contents(&mut t, "a").len(), 2);
        t.commit("c", "qc", "rc");
        assert!(t.history("b").is_empty(), "b was evicted");
        assert_eq!(contents(&mut t, "a"), ["user:qa", "assistant:ra"]);
        assert_eq!(contents(&mut t, "c"), ["user:qc", "assistant:rc"]);
    }

    #[test]
    fn zero_limits_keep_nothing() {
        let mut t = Threads::new(ChatThreadLimits {
            max_sessions: 0,
            max_turns: 3,
        });
        t.commit("a", "q", "r");
        assert!(t.history("a").is_empty());
        let mut t = Threads::new(ChatThreadLimits {
            max_sessions: 3,
            max_turns: 0,
        });
        t.commit("a", "q", "r");
        assert!(t.history("a").is_empty());
    }
}

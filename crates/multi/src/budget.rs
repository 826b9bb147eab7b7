//! The coordination budget: one tracker shared by every agent call of one run.
//!
//! [`Budget::admit`] is asked before an agent starts: it refuses once `max_agents` agents
//! have been admitted, or once the spend reported so far has reached a token or cost
//! limit (limits are checked against *reported* spend, so the call that crosses a limit
//! completes and only later calls are refused). [`Budget::record`] adds what a finished
//! agent reports. The state sits behind a `std::sync::Mutex` that is never held across an
//! `.await`.

use std::sync::{Mutex, PoisonError};

use car_proto::methods::multi::{AgentOutput, BudgetLimits, TokenUsage};
use serde_json::json;

/// What a run has consumed so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spend {
    /// Agents admitted (started), refused ones excluded.
    pub agents_started: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

impl Spend {
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// Shared budget tracker for one coordination run.
#[derive(Debug, Default)]
pub struct Budget {
    limits: BudgetLimits,
    spend: Mutex<Spend>,
}

impl Budget {
    /// A tracker for `limits`; `None` (or all fields absent) is unbounded.
    pub fn new(limits: Option<BudgetLimits>) -> Self {
        Budget {
            limits: limits.unwrap_or_default(),
            spend: Mutex::new(Spend::default()),
        }
    }

    pub fn limits(&self) -> &BudgetLimits {
        &self.limits
    }

    /// A copy of the spend so far.
    pub fn spend(&self) -> Spend {
        *self.lock()
    }

    /// Admit agent `name` (counting it as started) or say why not.
    pub fn admit(&self, name: &str) -> Result<(), String> {
        let mut spend = self.lock();
        let refusal = refusal(&self.limits, &spend);
        match refusal {
            Some(msg) => {
                tracing::warn!(agent = name, reason = %msg, "coordination budget refused an agent");
                Err(msg)
            }
            None => {
                spend.agents_started = spend.agents_started.saturating_add(1);
                Ok(())
            }
        }
    }

    /// Add what a finished agent reported.
    pub fn record(&self, usage: Option<&TokenUsage>) {
        let Some(usage) = usage else { return };
        let mut spend = self.lock();
        spend.input_tokens = spend.input_tokens.saturating_add(usage.input_tokens);
        spend.output_tokens = spend.output_tokens.saturating_add(usage.output_tokens);
        if usage.cost_usd.is_finite() && usage.cost_usd > 0.0 {
            spend.cost_usd += usage.cost_usd;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Spend> {
        // The guarded value is plain numbers, always consistent: a poisoned lock is usable.
        self.spend.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn refusal(limits: &BudgetLimits, spend: &Spend) -> Option<String> {
    if let Some(max) = limits.max_agents {
        if spend.agents_started >= max {
            return Some(format!(
                "coordination budget agent cap reached: {} of {max} agents already started",
                spend.agents_started
            ));
        }
    }
    let tokens = [
        ("total", spend.total_tokens(), limits.max_total_tokens),
        ("input", spend.input_tokens, limits.max_input_tokens),
        ("output", spend.output_tokens, limits.max_output_tokens),
    ];
    for (kind, used, limit) in tokens {
        if let Some(limit) = limit {
            if used >= limit {
                return Some(format!(
                    "coordination budget exhausted: {kind} tokens {used} >= limit {limit}"
                ));
            }
        }
    }
    if let Some(limit) = limits.max_cost_usd {
        if spend.cost_usd >= limit {
            return Some(format!(
                "coordination budget exhausted: cost_usd {} >= limit {limit}",
                spend.cost_usd
            ));
        }
    }
    None
}

/// The output recorded for an agent the budget refused to start.
pub fn budget_refusal(name: &str, msg: String) -> AgentOutput {
    let outcome = json!({
        "status": "give_up",
        "summary": msg,
        "evidence": [{
            "kind": "stop_reason",
            "description": msg,
            "data": {"budget_skipped": true},
        }],
    });
    AgentOutput {
        name: name.to_owned(),
        answer: String::new(),
        turns: 0,
        tool_calls: 0,
        duration_ms: 0.0,
        error: Some(msg),
        tokens: None,
        outcome: Some(outcome),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(i: u64, o: u64, c: f64) -> TokenUsage {
        TokenUsage {
            input_tokens: i,
            output_tokens: o,
            cost_usd: c,
        }
    }

    #[test]
    fn unbounded_admits_everything() {
        let b = Budget::new(None);
        for _ in 0..100 {
            b.admit("x").unwrap();
        }
        b.record(Some(&usage(u64::MAX, 5, 1.0)));
        assert_eq!(b.spend().agents_started, 100);
        assert_eq!(b.spend().total_tokens(), u64::MAX);
        b.admit("x").unwrap();
    }

    #[test]
    fn agent_cap_is_hard() {
        let b = Budget::new(Some(BudgetLimits {
            max_agents: Some(2),
            ..Default::default()
        }));
        b.admit("a").unwrap();
        b.admit("b").unwrap();
        assert_eq!(
            b.admit("c").unwrap_err(),
            "coordination budget agent cap reached: 2 of 2 agents already started"
        );
        assert_eq!(b.spend().agents_started, 2);
    }

    #[test]
    fn each_limit_has_its_message() {
        let cases = [
            (
                BudgetLimits {
                    max_total_tokens: Some(10),
                    ..Default::default()
                },
                "coordination budget exhausted: total tokens 12 >= limit 10",
            ),
            (
                BudgetLimits {
                    max_input_tokens: Some(7),
                    ..Default::default()
                },
                "coordination budget exhausted: input tokens 7 >= limit 7",
            ),
            (
                BudgetLimits {
                    max_output_tokens: Some(5),
                    ..Default::default()
                },
                "coordination budget exhausted: output tokens 5 >= limit 5",
            ),
            (
                BudgetLimits {
                    max_cost_usd: Some(0.25),
                    ..Default::default()
                },
                "coordination budget exhausted: cost_usd 0.5 >= limit 0.25",
            ),
        ];
        for (limits, msg) in cases {
            let b = Budget::new(Some(limits));
            b.admit("first").unwrap();
            b.record(Some(&usage(7, 5, 0.5)));
            assert_eq!(b.admit("second").unwrap_err(), msg);
        }
    }

    #[test]
    fn refusal_output_shape() {
        let out = budget_refusal("c", "nope".into());
        let v = serde_json::to_value(&out).unwrap();
        assert_eq!(v["error"], "nope");
        assert_eq!(v["outcome"]["status"], "give_up");
        assert_eq!(v["outcome"]["evidence"][0]["kind"], "stop_reason");
        assert_eq!(v["outcome"]["evidence"][0]["data"]["budget_skipped"], true);
        assert!(!out.succeeded());
    }
}

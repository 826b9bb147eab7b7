//! The deadline rules both ends apply: the daemon bounds a handler by them, the client
//! bounds its wait by the same figure plus grace, so reaping goes innermost first.
//!
//! - A `standard` call: the daemon's handler deadline ([`HANDLER_DEADLINE`] unless configured); the
//!   client waits that plus [`CLIENT_GRACE`].
//! - `proposal.submit`: the sum over its actions of `timeout_ms` (default: the tool timeout,
//!   [`DEFAULT_ACTION_BUDGET`]) times its attempts (`max_retries + 1` when `failure_behavior` is
//!   `retry`, else 1), plus [`PROPOSAL_GRACE`] — never below the handler deadline. The client adds
//!   [`CLIENT_GRACE`].
//! - `infer` / `infer_stream`: no absolute bound on the client; an idle window reset by every
//!   `infer.progress` heartbeat or stream event of that call.

use std::time::Duration;

use serde_json::Value;

/// The daemon's default handler deadline (`CAR_HANDLER_TIMEOUT` overrides it).
pub const HANDLER_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// What a client adds to the daemon's deadline before it gives up on a call.
pub const CLIENT_GRACE: Duration = Duration::from_secs(30);
/// What the daemon adds to a proposal's summed action budgets.
pub const PROPOSAL_GRACE: Duration = Duration::from_secs(15);
/// An action's budget when it sets no `timeout_ms` (the daemon's default tool timeout).
pub const DEFAULT_ACTION_BUDGET: Duration = Duration::from_secs(300);

/// The proposal in `proposal.submit` params: `params.proposal` (an object, or JSON text
/// as a binding's `proposal_json` may carry it), else `params` itself.
fn proposal_of(params: &Value) -> Option<std::borrow::Cow<'_, Value>> {
    match params.get("proposal") {
        Some(Value::String(text)) => serde_json::from_str(text).ok().map(std::borrow::Cow::Owned),
        Some(v) => Some(std::borrow::Cow::Borrowed(v)),
        None => Some(std::borrow::Cow::Borrowed(params)),
    }
}

/// Attempts an action may make: `max_retries + 1` under `failure_behavior: "retry"`.
pub fn attempts(action: &Value) -> u32 {
    let retries = action
        .get("max_retries")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if action.get("failure_behavior").and_then(Value::as_str) == Some("retry") {
        u32::try_from(retries.saturating_add(1)).unwrap_or(u32::MAX)
    } else {
        1
    }
}

/// The `proposal.submit` deadline for `params`: the summed action budgets plus
/// [`PROPOSAL_GRACE`], never below `handler_deadline`. Params without a readable action
/// list keep `handler_deadline`.
pub fn proposal_deadline(
    params: &Value,
    action_budget: Duration,
    handler_deadline: Duration,
) -> Duration {
    let Some(proposal) = proposal_of(params) else {
        return handler_deadline;
    };
    let Some(actions) = proposal.get("actions").and_then(Value::as_array) else {
        return handler_deadline;
    };
    let total = actions.iter().fold(Duration::ZERO, |sum, action| {
        let budget = action
            .get("timeout_ms")
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
            .unwrap_or(action_budget);
        sum.saturating_add(budget.saturating_mul(attempts(action)))
    });
    handler_deadline.max(total.saturating_add(PROPOSAL_GRACE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn short_proposals_keep_the_handler_deadline() {
        assert_eq!(
            proposal_deadline(&json!({}), DEFAULT_ACTION_BUDGET, MIN),
            MIN
        );
        let p = json!({"proposal": {"actions": [{"timeout_ms": 1000}]}});
        assert_eq!(proposal_deadline(&p, DEFAULT_ACTION_BUDGET, MIN), MIN);
    }

    #[test]
    fn budgets_sum_with_attempts_and_grace() {
        let p = json!({"proposal": {"actions": [
            {"timeout_ms": 100_000, "failure_behavior": "retry", "max_retries": 2},
            {"timeout_ms": 50_000},
        ]}});
        assert_eq!(
            proposal_deadline(&p, DEFAULT_ACTION_BUDGET, MIN),
            Duration::from_secs(300 + 50 + 15)
        );
        // An action without timeout_ms uses the default budget; JSON text is read too.
        let text = json!({"proposal": "{\"actions\": [{}]}"});
        assert_eq!(
            proposal_deadline(&text, DEFAULT_ACTION_BUDGET, MIN),
            DEFAULT_ACTION_BUDGET + PROPOSAL_GRACE
        );
        assert_eq!(
            proposal_deadline(&json!({"proposal": "not json"}), DEFAULT_ACTION_BUDGET, MIN),
            MIN
        );
    }
}

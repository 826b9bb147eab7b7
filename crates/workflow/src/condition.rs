//! Evaluating [`Precondition`]s against the run state, and choosing the next edge.
//!
//! A key names a state entry exactly (`stage.a.answer`, `appr.yes`); when no entry has
//! that exact name, a dotted key falls back to walking into an object entry
//! (`review.score` reads `state["review"]["score"]`). `eq` is JSON equality, except that
//! numbers compare by value (`1 == 1.0`); strings are never coerced to booleans. The
//! ordering ops compare numbers (a numeric string counts as its number); `contains` is
//! substring for strings, membership for arrays and key presence for objects.

use serde_json::Value;

use crate::model::{ConditionOp, Edge, Object, Precondition, Workflow};

impl Precondition {
    /// The op in force: the declared one, else `eq` with a value and `exists` without.
    pub fn effective_op(&self) -> ConditionOp {
        self.op.unwrap_or(if self.value.is_some() {
            ConditionOp::Eq
        } else {
            ConditionOp::Exists
        })
    }

    /// Whether the condition holds in `state`.
    pub fn holds(&self, state: &Object) -> bool {
        let actual = lookup(state, &self.key);
        let expected = self.value.as_ref().unwrap_or(&Value::Null);
        match self.effective_op() {
            ConditionOp::Exists => actual.is_some_and(|v| !v.is_null()),
            ConditionOp::NotExists => actual.is_none_or(Value::is_null),
            ConditionOp::Eq => actual.is_some_and(|v| json_eq(v, expected)),
            ConditionOp::Ne => !actual.is_some_and(|v| json_eq(v, expected)),
            ConditionOp::Gt => compare(actual, expected).is_some_and(|o| o.is_gt()),
            ConditionOp::Gte => compare(actual, expected).is_some_and(|o| o.is_ge()),
            ConditionOp::Lt => compare(actual, expected).is_some_and(|o| o.is_lt()),
            ConditionOp::Lte => compare(actual, expected).is_some_and(|o| o.is_le()),
            ConditionOp::Contains => actual.is_some_and(|v| contains(v, expected)),
        }
    }
}

/// Whether every condition holds (vacuously true for none).
pub(crate) fn all_hold(conditions: &[Precondition], state: &Object) -> bool {
    conditions.iter().all(|c| c.holds(state))
}

/// The first edge out of `from`, in declaration order, whose conditions all hold.
pub(crate) fn next_edge<'w>(wf: &'w Workflow, from: &str, state: &Object) -> Option<&'w Edge> {
    wf.edges
        .iter()
        .filter(|e| e.from == from)
        .find(|e| all_hold(&e.conditions, state))
}

fn lookup<'s>(state: &'s Object, key: &str) -> Option<&'s Value> {
    if let Some(v) = state.get(key) {
        return Some(v);
    }
    // Longest existing dotted prefix, then walk the rest.
    let mut split = key.len();
    while let Some(dot) = key[..split].rfind('.') {
        if let Some(base) = state.get(&key[..dot]) {
            return key[dot + 1..].split('.').try_fold(base, |v, seg| match v {
                Value::Object(m) => m.get(seg),
                Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
                _ => None,
            });
        }
        split = dot;
    }
    None
}

fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn compare(actual: Option<&Value>, expected: &Value) -> Option<std::cmp::Ordering> {
    number(actual?)?.partial_cmp(&number(expected)?)
}

fn contains(haystack: &Value, needle: &Value) -> bool {
    match haystack {
        Value::String(s) => needle.as_str().is_some_and(|n| s.contains(n)),
        Value::Array(items) => items.iter().any(|i| json_eq(i, needle)),
        Value::Object(m) => needle.as_str().is_some_and(|k| m.contains_key(k)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cond(v: Value) -> Precondition {
        serde_json::from_value(v).unwrap()
    }

    fn state(v: Value) -> Object {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn default_ops_and_equality() {
        let s = state(json!({"a": 1, "flag": "true", "n": null, "obj": {"x": {"y": 2}}}));
        assert!(cond(json!({"key": "a"})).holds(&s));
        assert!(cond(json!({"key": "a", "value": 1.0})).holds(&s));
        assert!(!cond(json!({"key": "flag", "value": true})).holds(&s));
        assert!(!cond(json!({"key": "n"})).holds(&s));
        assert!(cond(json!({"key": "missing", "op": "not_exists"})).holds(&s));
        assert!(cond(json!({"key": "missing", "operator": "ne", "value": 3})).holds(&s));
        assert!(cond(json!({"key": "obj.x.y", "value": 2})).holds(&s));
    }

    #[test]
    fn ordering_and_contains() {
        let s = state(json!({"score": "7", "tags": ["a", "b"], "text": "hello world"}));
        assert!(cond(json!({"key": "score", "op": "gt", "value": 5})).holds(&s));
        assert!(cond(json!({"key": "score", "op": "lte", "value": 7})).holds(&s));
        assert!(!cond(json!({"key": "score", "op": "lt", "value": 7})).holds(&s));
        assert!(!cond(json!({"key": "text", "op": "gt", "value": 1})).holds(&s));
        assert!(cond(json!({"key": "tags", "op": "contains", "value": "b"})).holds(&s));
        assert!(cond(json!({"key": "text", "op": "contains", "value": "lo w"})).holds(&s));
        assert!(!cond(json!({"key": "tags", "op": "contains", "value": "c"})).holds(&s));
    }
}

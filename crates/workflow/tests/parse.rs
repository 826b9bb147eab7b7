//! Manifest decoding: defaults, aliases, and errors carrying the JSON path.

use car_workflow::{parse, ConditionOp, PatternKind, StageStep};
use serde_json::json;

fn err(v: serde_json::Value) -> String {
    parse(&v).unwrap_err().to_string()
}

#[test]
fn errors_carry_the_json_path() {
    let base = |step: serde_json::Value| {
        json!({"id": "w", "name": "w", "start": "a", "edges": [],
               "stages": [{"id": "a", "name": "a", "step": step}]})
    };
    assert_eq!(
        err(base(json!({"type": "approval", "output_key": "k"}))),
        "stages[0].step: missing field `prompt`"
    );
    let e = err(base(json!({"type": "teleport"})));
    assert!(
        e.starts_with("stages[0].step.type: unknown variant `teleport`"),
        "{e}"
    );
    assert!(err(base(
        json!({"type": "pattern", "pattern": "chaos", "task": "t", "agents": []})
    ))
    .starts_with("stages[0].step: unknown variant `chaos`"));
    assert_eq!(
        err(base(json!({"type": "proposal", "proposal": {"id": "p"}}))),
        "stages[0].step: missing field `actions` in proposal"
    );
    assert_eq!(
        err(json!({"id": "w", "name": "w", "start": "a", "stages": []})),
        "workflow: missing field `edges`"
    );
    assert_eq!(
        err(json!({"id": "w", "name": "w", "start": "a", "stages": [], "edges": [{"from": "a"}]})),
        "edges[0]: missing field `to`"
    );
    assert!(err(
        json!({"id": "w", "name": "w", "start": "a", "stages": [], "edges": [],
        "max_iterations": "many"})
    )
    .starts_with("max_iterations: invalid type"));
}

#[test]
fn defaults_aliases_and_unknown_fields() {
    let wf = parse(&json!({
        "id": "w", "name": "w", "start": "a", "future_field": 1,
        "stages": [{"id": "a", "name": "a", "step": {"type": "pattern", "pattern": "adversarial_review",
            "task": "t", "agents": [{"name": "critic", "role": "find flaws"}], "extra": true}}],
        "edges": [{"from": "a", "to": "a", "conditions": [
            {"key": "k", "operator": "gt", "value": 1}, {"key": "k", "value": 1}, {"key": "k"}]}],
    }))
    .unwrap();
    assert_eq!(wf.max_iterations, 100);
    assert!(wf.metadata.is_empty() && wf.goal.is_none());
    let StageStep::Pattern(p) = &wf.stages[0].step else {
        panic!()
    };
    assert_eq!(p.pattern, PatternKind::AdversarialReview);
    assert_eq!(p.agents[0].extra["role"], "find flaws");
    let ops: Vec<ConditionOp> = wf.edges[0]
        .conditions
        .iter()
        .map(|c| c.effective_op())
        .collect();
    assert_eq!(ops, [ConditionOp::Gt, ConditionOp::Eq, ConditionOp::Exists]);

    let approval = parse(&json!({"id": "w", "name": "w", "start": "a", "edges": [],
        "stages": [{"id": "a", "name": "a", "step": {"type": "approval", "prompt": "?", "output_key": "k",
            "fields": [{"name": "f"}]}}]}))
    .unwrap();
    let StageStep::Approval(g) = &approval.stages[0].step else {
        panic!()
    };
    assert_eq!(
        (
            g.fields[0].field_type.as_str(),
            g.fields[0].required,
            g.fields[0].label.as_str()
        ),
        ("text", false, "")
    );
}

#[test]
fn a_workflow_round_trips() {
    let manifest = json!({
        "id": "w", "name": "w", "start": "a", "goal": "g", "max_iterations": 7,
        "stages": [
            {"id": "a", "name": "a", "timeout_ms": 5, "step": {"type": "loop_until", "max_iterations": 2,
                "until": [{"key": "k", "op": "contains", "value": "x"}],
                "body": {"type": "for_each", "items_from": "xs", "max_concurrent": 2,
                    "body": {"type": "proposal", "proposal": {"actions": []}}}},
             "compensation": {"type": "deliver", "sinks": [{"actions": []}], "payload_key": "p"}},
            {"id": "b", "name": "b", "step": {"type": "dedup", "items_from": "i", "into": "o", "store": "s",
                "hash_fields": ["id"], "ttl_secs": 9}},
            {"id": "c", "name": "c", "step": {"type": "sub_workflow", "workflow":
                {"id": "i", "name": "i", "start": "x", "edges": [], "stages": [
                    {"id": "x", "name": "x", "step": {"type": "pattern", "pattern": "vote", "task": "t", "agents": []}}]}}},
        ],
        "edges": [{"from": "a", "to": "b", "label": "next"}],
    });
    let wf = parse(&manifest).unwrap();
    let again = parse(&serde_json::to_value(&wf).unwrap()).unwrap();
    assert_eq!(wf, again);
}

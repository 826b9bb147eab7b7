//! Static verification: errors, warnings and semantic findings.

mod common;

use car_workflow::verify;
use common::*;
use serde_json::{json, Value};

fn report(v: Value) -> car_workflow::VerifyReport {
    verify(&wf(v))
}

#[test]
fn a_sound_workflow_verifies_cleanly() {
    let r = report(json!({
        "id": "ok", "name": "ok", "start": "a", "goal": "g",
        "stages": [
            stage("a", write("p", "ticket", json!(1))),
            stage("b", json!({"type": "approval", "prompt": "?", "output_key": "appr"})),
            stage("c", pattern("c", json!({}))),
        ],
        "edges": [
            {"from": "a", "to": "b", "conditions": [{"key": "ticket"}, {"key": "goal"}, {"key": "stage.a.succeeded", "value": true}]},
            {"from": "b", "to": "c", "conditions": [{"key": "appr.yes", "value": "y"}, {"key": "unset", "op": "not_exists"}]},
        ],
    }));
    assert!(r.valid, "{:?}", r.issues);
    assert!(r.issues.is_empty(), "{:?}", r.issues);
    assert!(r.semantic.is_empty(), "{:?}", r.semantic);
    assert!(!r.has_cycles);
    assert_eq!(r.reachable_stages, ["a", "b", "c"]);
    assert!(r.unreachable_stages.is_empty());
    let shown = serde_json::to_value(&r).unwrap();
    for key in [
        "valid",
        "issues",
        "has_cycles",
        "reachable_stages",
        "unreachable_stages",
        "semantic",
    ] {
        assert!(shown.get(key).is_some(), "{key}");
    }
}

#[test]
fn structural_errors_make_it_invalid() {
    let approval = json!({"type": "approval", "prompt": "?", "output_key": ""});
    let r = report(json!({
        "id": "bad", "name": "bad", "start": "zz",
        "stages": [
            stage("a", pattern("a", json!({}))),
            stage("a", pattern("dup", json!({}))),
            stage("gate", approval),
            {"id": "comp", "name": "comp", "step": pattern("c", json!({})),
             "compensation": {"type": "approval", "prompt": "?", "output_key": "k"}},
            stage("loop", json!({"type": "loop_until", "max_iterations": 0,
                "body": {"type": "approval", "prompt": "?", "output_key": "k"}})),
            stage("each", json!({"type": "for_each", "items_from": "", "body": pattern("x", json!({}))})),
            stage("dd", json!({"type": "dedup", "items_from": "i", "into": "", "store": "s", "ttl_secs": 0})),
            stage("dl", json!({"type": "deliver", "sinks": []})),
        ],
        "edges": [edge("a", "b"), edge("q", "a")],
    }));
    assert!(!r.valid);
    let expected = [
        "error: stage 'a': duplicate stage id",
        "error: start stage 'zz' does not exist",
        "error: edge to 'b' references unknown stage",
        "error: edge from 'q' references unknown stage",
        "error: stage 'gate': approval output_key is empty",
        "error: stage 'comp': an approval cannot be a compensation step",
        "error: stage 'loop': loop_until max_iterations must be at least 1",
        "error: stage 'loop': an approval cannot be a loop_until body",
        "error: stage 'each': for_each items_from is empty",
        "error: stage 'dd': dedup into is empty",
        "error: stage 'dd': dedup ttl_secs must be greater than 0",
        "error: stage 'dl': deliver has no sinks",
    ];
    for e in expected {
        assert!(
            r.issues.iter().any(|i| i == e),
            "missing {e:?} in {:#?}",
            r.issues
        );
    }
}

#[test]
fn approval_as_a_for_each_body_and_deep_nesting_are_errors() {
    let r = report(json!({"id": "w", "name": "w", "start": "e", "edges": [],
        "stages": [stage("e", json!({"type": "for_each", "items_from": "xs",
            "body": {"type": "approval", "prompt": "?", "output_key": "k"}}))]}));
    assert!(r
        .issues
        .contains(&"error: stage 'e': an approval cannot be a for_each body".to_string()));

    let mut step = pattern("deep", json!({}));
    for _ in 0..40 {
        step = json!({"type": "loop_until", "max_iterations": 1, "body": step});
    }
    let r = report(
        json!({"id": "w", "name": "w", "start": "d", "edges": [], "stages": [stage("d", step)]}),
    );
    assert!(!r.valid);
    assert_eq!(
        r.issues,
        ["error: stage 'd': steps nest deeper than 32 levels"]
    );
}

#[test]
fn unreachable_stages_and_cycles_are_warnings() {
    let r = report(json!({
        "id": "w", "name": "w", "start": "a",
        "stages": [stage("a", pattern("a", json!({}))), stage("b", pattern("b", json!({}))),
                   stage("c", pattern("c", json!({}))), stage("orphan", pattern("o", json!({})))],
        "edges": [edge("a", "b"), edge("b", "a"), edge("b", "c")],
    }));
    assert!(r.valid);
    assert!(r.has_cycles);
    assert_eq!(r.reachable_stages, ["a", "b", "c"]);
    assert_eq!(r.unreachable_stages, ["orphan"]);
    assert!(r
        .issues
        .contains(&"warning: stage 'orphan': unreachable from start 'a'".to_string()));
    assert!(
        r.issues.contains(
            &"warning: cycle among stages 'a', 'b' (runs are bounded by max_iterations = 100)"
                .to_string()
        ),
        "{:?}",
        r.issues
    );
}

#[test]
fn semantic_lists_branches_on_keys_nobody_writes() {
    let r = report(json!({
        "id": "w", "name": "w", "start": "a",
        "stages": [stage("a", pattern("a", json!({}))), stage("b", pattern("b", json!({}))),
                   stage("sub", json!({"type": "sub_workflow", "workflow": {
                       "id": "inner", "name": "inner", "start": "x",
                       "stages": [stage("x", json!({"type": "approval", "prompt": "?", "output_key": "k"})),
                                  stage("y", pattern("y", json!({})))],
                       "edges": [{"from": "x", "to": "y", "conditions": [{"key": "nope", "value": 1}]}]}}))],
        "edges": [
            {"from": "a", "to": "b", "conditions": [{"key": "x", "value": true}]},
            {"from": "a", "to": "sub", "conditions": [{"key": "stage.a.ok"}]},
        ],
    }));
    assert!(r.valid);
    assert_eq!(
        r.semantic,
        [
            "edge a->b branches on state key 'x', which no stage produces (the branch may never be taken)",
            "stage 'sub': sub_workflow 'inner': edge x->y branches on state key 'nope', which no stage produces (the branch may never be taken)",
        ]
    );
    assert!(r.issues.contains(
        &"warning: stage 'sub': sub_workflow 'inner': stage 'x': an approval inside a sub_workflow cannot pause the run; it fails the stage".to_string()
    ), "{:?}", r.issues);
}

//! The public surface: descriptors, dispatch, params conventions, calculate, error JSON.

mod common;

use car_builtin_tools::{descriptor, descriptors, is_builtin, is_mutating, ToolError, TOOL_NAMES};
use common::*;
use serde_json::json;

#[test]
fn descriptors_cover_every_tool_with_object_schemas() {
    let all = descriptors();
    let names: Vec<&str> = all.iter().map(|d| d.name).collect();
    assert_eq!(names, TOOL_NAMES);
    for d in &all {
        assert!(is_builtin(d.name));
        assert_eq!(
            d.mutating,
            matches!(d.name, "write_file" | "edit_file"),
            "{}",
            d.name
        );
        assert_eq!(d.mutating, is_mutating(d.name));
        assert!(d.description.len() > 40, "{}", d.name);
        assert_eq!(d.parameters["type"], "object");
        let props = d.parameters["properties"].as_object().unwrap();
        for req in d.parameters["required"].as_array().into_iter().flatten() {
            assert!(
                props.contains_key(req.as_str().unwrap()),
                "{} {req}",
                d.name
            );
        }
        assert_eq!(descriptor(d.name).as_ref(), Some(d));
    }
    assert!(!is_builtin("shell"));
    assert!(descriptor("shell").is_none());
    // The advertised maxima are the enforced ones.
    let find = descriptor("find_files").unwrap();
    assert_eq!(
        find.parameters["properties"]["max_results"]["maximum"],
        car_builtin_tools::walk::MAX_FIND_RESULTS
    );
    let grep = descriptor("grep_files").unwrap();
    assert_eq!(
        grep.parameters["properties"]["max_results"]["maximum"],
        car_builtin_tools::grep::MAX_GREP_RESULTS
    );
    let read = descriptor("read_file").unwrap();
    assert_eq!(
        read.parameters["properties"]["limit"]["maximum"],
        car_builtin_tools::read::MAX_PAGE_LINES
    );
}

#[test]
fn execute_rejects_unknown_tools_and_non_object_params() {
    let env = Env::new();
    assert!(matches!(
        env.run("shell", json!({})),
        Err(ToolError::UnknownTool { .. })
    ));
    assert_invalid(env.run("list_dir", json!(".")), "params");
    assert_invalid(env.run("list_dir", json!([1])), "params");
    // null params count as {} (all of list_dir's params are optional).
    env.ok("list_dir", serde_json::Value::Null);
}

#[test]
fn null_optional_fields_are_absent_and_unknown_fields_are_ignored() {
    let env = Env::new();
    env.put("f.txt", "a\nb\n");
    let out = env.ok(
        "read_file",
        json!({"path": "f.txt", "offset": null, "limit": null, "future_field": {"x": 1}}),
    );
    assert_eq!(out["lines_returned"], 2);
    env.ok("list_dir", json!({"path": null}));
    env.ok(
        "grep_files",
        json!({"pattern": "a", "glob": null, "max_results": null}),
    );
    assert_invalid(env.run("read_file", json!({"path": null})), "path");
}

#[test]
fn bad_params_name_the_field() {
    let env = Env::new();
    env.put("f.txt", "a\n");
    assert_invalid(
        env.run("read_file", json!({"path": "f.txt", "offset": -1})),
        "offset",
    );
    assert_invalid(
        env.run("read_file", json!({"path": "f.txt", "limit": 1.5})),
        "limit",
    );
    assert_invalid(env.run("read_file", json!({"path": ["f.txt"]})), "path");
    assert_invalid(env.run("read_file", json!({"path": "a\u{0}b"})), "path");
    assert_invalid(
        env.run("write_file", json!({"path": "g.txt", "content": 5})),
        "content",
    );
    assert_invalid(
        env.run("edit_file", json!({"old_text": "a", "new_text": "b"})),
        "path",
    );
    assert_invalid(env.run("list_dir", json!({"path": false})), "path");
    assert_invalid(env.run("calculate", json!({})), "expression");
    match env.run("read_file", json!({"path": "f.txt", "offset": "2"})) {
        Err(ToolError::InvalidParams { field, message }) => {
            assert_eq!(field, "offset");
            assert!(message.contains("integer"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn calculate_through_execute() {
    let env = Env::new();
    assert_eq!(
        env.ok("calculate", json!({"expression": "2 + 3 * 4"})),
        json!({"expression": "2 + 3 * 4", "result": 14})
    );
    assert_eq!(
        env.ok("calculate", json!({"expression": "(2 + 3) * 4"}))["result"],
        20
    );
    assert_eq!(
        env.ok("calculate", json!({"expression": "7 / 2"}))["result"],
        3.5
    );
    assert_eq!(
        env.ok("calculate", json!({"expression": "-2^2 + 10 % 4"}))["result"],
        -2
    );
    assert_eq!(
        env.ok("calculate", json!({"expression": "sqrt(2)^2"}))["result"]
            .as_f64()
            .map(|v| (v - 2.0).abs() < 1e-9),
        Some(true)
    );
    assert_failed(
        env.run("calculate", json!({"expression": "1 / 0"})),
        "division by zero",
    );
    assert_invalid(
        env.run("calculate", json!({"expression": "2 +* 3"})),
        "expression",
    );
    assert_invalid(
        env.run("calculate", json!({"expression": "1+".repeat(600) + "1"})),
        "expression",
    );
}

#[test]
fn errors_render_to_json() {
    let env = Env::new();
    let invalid = env.run("read_file", json!({})).unwrap_err();
    assert_eq!(invalid.to_json()["kind"], "invalid_params");
    assert_eq!(invalid.to_json()["field"], "path");
    let refused = env.run("read_file", json!({"path": "../x"})).unwrap_err();
    assert_eq!(refused.to_json()["kind"], "refused");
    assert_eq!(refused.to_json()["reason"], "path_escape");
    let failed = env
        .run("read_file", json!({"path": "missing"}))
        .unwrap_err();
    assert_eq!(failed.to_json()["kind"], "failed");
    assert!(failed.to_json()["message"]
        .as_str()
        .unwrap()
        .contains("missing"));
}

#[test]
fn workspace_and_ledger_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<car_builtin_tools::Workspace>();
    check::<car_builtin_tools::ReadLedger>();
    check::<ToolError>();
}

//! Tests of the tool catalog: names, groups, schemas and annotations.

use super::*;

fn all() -> Vec<Tool> {
    build(&[Group::Core, Group::DaemonRead, Group::DaemonMutating])
}

#[test]
fn every_row_names_a_declared_method_and_a_unique_tool() {
    let tools = all();
    assert_eq!(tools.len(), TOOLS.len());
    let mut names: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), TOOLS.len());
}

#[test]
fn input_schemas_are_self_contained_objects() {
    for tool in all() {
        let input = &tool.listing["inputSchema"];
        assert_eq!(input["type"], "object", "{}", tool.def.name);
        assert_eq!(input["$schema"], SCHEMA_DIALECT, "{}", tool.def.name);
        let defs = input.get("$defs").cloned().unwrap_or(json!({}));
        let mut refs = Vec::new();
        collect_refs(input, &mut refs);
        for name in refs {
            assert!(
                defs.get(&name).is_some(),
                "{}: dangling $ref {name}",
                tool.def.name
            );
        }
    }
}

#[test]
fn rust_width_formats_are_stripped() {
    for tool in all() {
        let text = tool.listing.to_string();
        for format in RUST_FORMATS {
            assert!(
                !text.contains(&format!("\"format\":\"{format}\"")),
                "{}: {format}",
                tool.def.name
            );
        }
    }
}

#[test]
fn required_params_come_from_the_contract() {
    let tools = all();
    let input = |name: &str| {
        tools
            .iter()
            .find(|t| t.def.name == name)
            .map(|t| t.listing["inputSchema"].clone())
            .unwrap()
    };
    assert_eq!(
        input("memory_add_fact")["required"],
        json!(["subject", "body"])
    );
    assert_eq!(input("memory_query")["required"], json!(["query"]));
    assert_eq!(input("verify")["required"], json!(["proposal"]));
    assert_eq!(input("scheduler_unschedule")["required"], json!(["id"]));
}

#[test]
fn only_object_results_declare_an_output_schema() {
    let structured: Vec<&str> = all()
        .iter()
        .filter(|t| t.structured)
        .map(|t| t.def.name)
        .collect();
    assert_eq!(
        structured,
        [
            "memory_delete",
            "verify",
            "memory_update_status",
            "memory_save_knowledge",
            "memory_save_procedural",
            "memory_intervene",
            "memory_evaluate",
            "simulate",
            "equivalent",
            "optimize",
            "policy_check",
            "events_query",
            "events_stats",
            "workflow_verify",
            "workflow_run",
            "workflow_resume",
            "scheduler_schedule",
            "scheduler_unschedule"
        ]
    );
    for tool in all() {
        assert_eq!(
            tool.listing.get("outputSchema").is_some(),
            tool.structured,
            "{}",
            tool.def.name
        );
    }
}

#[test]
fn groups_filter_the_catalog() {
    let core: Vec<&str> = build(&[Group::Core]).iter().map(|t| t.def.name).collect();
    assert_eq!(
        core,
        [
            "memory_add_fact",
            "memory_query",
            "memory_delete",
            "skill_ingest",
            "skill_list",
            "skill_find",
            "verify",
            "memory_update_status",
            "memory_save_knowledge",
            "memory_save_procedural",
            "memory_intervene",
            "memory_evaluate",
            "simulate",
            "equivalent",
            "optimize",
            "policy_check"
        ]
    );
    let mutating = build(&[Group::DaemonMutating]);
    assert!(mutating.iter().all(|t| !t.def.hints.read_only));
    assert_eq!(mutating.len(), 4);
}

#[test]
fn annotations_carry_all_four_hints() {
    for tool in all() {
        let a = tool.listing["annotations"].as_object().unwrap();
        for key in [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ] {
            assert!(a[key].is_boolean(), "{} {key}", tool.def.name);
        }
    }
    let run = find("workflow_run").unwrap();
    assert!(run.hints.open_world && run.hints.destructive);
}

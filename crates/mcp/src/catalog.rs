//! The tool catalog: every MCP tool this crate can serve, the daemon method behind it, its
//! four annotations and its group, and the `tools/list` rows built from the typed contract.
//!
//! This module owns the static table and the JSON Schemas derived from it; it never calls the
//! daemon. Each tool's `inputSchema` is its method's params schema and, when the method's
//! result schema is an object, its `outputSchema` is that result schema, both generated from
//! `car_proto::methods` (schemars, draft 2020-12) and made self-contained: a top-level
//! `$ref` is replaced by its definition and every definition still referenced rides along
//! under `$defs`, so a host never needs the daemon's `server.schema` document to validate.

use std::collections::BTreeMap;

use car_proto::methods::{self, Declaration};
use schemars::generate::SchemaSettings;
use schemars::{Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

/// The JSON Schema dialect every generated schema declares.
pub const SCHEMA_DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// Which transports register a tool, and under what condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// Memory, skills and `verify`: every transport.
    Core,
    /// Read-only daemon tools: HTTP only (like every HTTP tool, each call runs on a fresh
    /// daemon session authenticated with the caller's `Authorization: Bearer` token).
    DaemonRead,
    /// Mutating or triggering daemon tools: like [`Group::DaemonRead`], and only when the
    /// embedder opts in (`HttpConfig::enable_mutations`).
    DaemonMutating,
}

/// The four MCP tool annotations (host UX hints, not a security boundary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hints {
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    pub open_world: bool,
}

/// A read that can be repeated freely.
const READ: Hints = Hints {
    read_only: true,
    destructive: false,
    idempotent: true,
    open_world: false,
};

/// A write that adds an entry each time.
const ADD: Hints = Hints {
    read_only: false,
    destructive: false,
    idempotent: false,
    open_world: false,
};

/// One catalog row.
#[derive(Debug, Clone, Copy)]
pub struct ToolDef {
    /// The MCP tool name (CAR's).
    pub name: &'static str,
    /// The daemon method the arguments are forwarded to, verbatim, as params.
    pub method: &'static str,
    pub group: Group,
    pub hints: Hints,
    pub description: &'static str,
}

/// Every tool, in `tools/list` order.
pub const TOOLS: &[ToolDef] = &[
    ToolDef {
        name: "memory_add_fact",
        method: "memory.add_fact",
        group: Group::Core,
        hints: Hints {
            read_only: false,
            destructive: false,
            idempotent: false,
            open_world: false,
        },
        description: "Add a fact to CAR's shared memory graph. `kind` is `pattern` (default) or `constraint` (a hard rule). Returns the new fact count.",
    },
    ToolDef {
        name: "memory_query",
        method: "memory.query",
        group: Group::Core,
        hints: READ,
        description: "Facts from CAR's memory graph ranked by relevance to `query`; `k` caps the number (default 5).",
    },
    ToolDef {
        name: "memory_delete",
        method: "memory.delete",
        group: Group::Core,
        hints: Hints {
            read_only: false,
            destructive: true,
            idempotent: true,
            open_world: false,
        },
        description: "Delete a fact from CAR's memory graph by `id`.",
    },
    ToolDef {
        name: "skill_ingest",
        method: "skill.ingest",
        group: Group::Core,
        hints: Hints {
            read_only: false,
            // Naming an existing skill in `supersedes` deprecates it.
            destructive: true,
            idempotent: false,
            open_world: false,
        },
        description: "Add or replace a skill (`name`, `code`, optional platform, persona, url_pattern, description, task_keywords, supersedes) in CAR's procedural memory. Returns the skill's node id.",
    },
    ToolDef {
        name: "skill_list",
        method: "skills.list",
        group: Group::Core,
        hints: READ,
        description: "The skills in CAR's procedural memory, optionally only those for `domain`.",
    },
    ToolDef {
        name: "skill_find",
        method: "skill.find",
        group: Group::Core,
        hints: READ,
        description: "Skills matching a `task` (and optional `persona`, `url`), best first; `max_results` caps them (default 1).",
    },
    ToolDef {
        name: "verify",
        method: "verify",
        group: Group::Core,
        hints: READ,
        description: "Statically check a CAR action proposal (`proposal`, optional `initial_state`) without running anything: dependency cycles, unknown tools, the simulated final state. Each issue carries a `tier`.",
    },
    ToolDef {
        name: "memory_update_status",
        method: "memory.update_status",
        group: Group::Core,
        hints: Hints {
            read_only: false,
            destructive: false,
            idempotent: true,
            open_world: false,
        },
        description: "Update proactive memory's private progress/risk status (`body`, optional `tenant_id`). Status is session-local and never returned by retrieval; a second call overwrites the first.",
    },
    ToolDef {
        name: "memory_save_knowledge",
        method: "memory.save_knowledge",
        group: Group::Core,
        hints: ADD,
        description: "Save durable proactive knowledge (`subject`, `body`; optional `id`, `tags`, `confidence`, `tenant_id`, `is_constraint`): task requirements, policies, verified environment facts. A repeated `id` is saved as `<id>-2`.",
    },
    ToolDef {
        name: "memory_save_procedural",
        method: "memory.save_procedural",
        group: Group::Core,
        hints: ADD,
        description: "Save durable procedural evidence (`subject`, `body`; optional `id`, `tags`, `confidence`, `tenant_id`, `is_constraint`): failed attempts, successful fixes, diagnostics, tool gotchas.",
    },
    ToolDef {
        name: "memory_intervene",
        method: "memory.intervene",
        group: Group::Core,
        // Reads like a query but records the injection it selects.
        hints: ADD,
        description: "Select at most one targeted proactive memory reminder for the next action (`query`, `recent`, `trigger`, `max_candidates` 1-32, `force`, `tenant_id`), or return an explicit silent decision with its reason.",
    },
    ToolDef {
        name: "memory_evaluate",
        method: "memory.evaluate",
        group: Group::Core,
        hints: READ,
        description: "Evaluate proactive memory on labelled `cases` (`{id, request, relevant_fact_ids?}`) against selective, always-inject, passive-retrieval and no-memory baselines.",
    },
    ToolDef {
        name: "simulate",
        method: "verify.simulate",
        group: Group::Core,
        hints: READ,
        description: "Predict the state an executor would leave behind after a `proposal` (optional `initial_state`) by applying each action's declared effects; runs nothing. Actions whose dependencies or state_dependencies are unmet are `blocked` and contribute nothing.",
    },
    ToolDef {
        name: "equivalent",
        method: "verify.equivalent",
        group: Group::Core,
        hints: READ,
        description: "Whether `proposal_a` and `proposal_b` leave the same state behind. This SAMPLES the `test_states` you give (at most 256; default `{}` and `{x: 1, y: 2}`): `false` is a witness, `true` only means no sampled state separated them (`tier: \"sampled\"`).",
    },
    ToolDef {
        name: "optimize",
        method: "verify.optimize",
        group: Group::Core,
        hints: READ,
        description: "Rewrite a `proposal` to widen parallelism: drop every state_dependencies entry naming a key no action writes. `pruned` lists what was dropped per action; re-run `verify` on the result.",
    },
    ToolDef {
        name: "policy_check",
        method: "policy.check",
        group: Group::Core,
        hints: READ,
        description: "Judge a tool call (`tool`, optional `params`) against CAR's policy files (`<CAR_HOME>/policies/` and `.car/policies/` under the working directory) before it runs. Read `basis` as well as `decision`: `no_rules_configured` means nothing was loaded.",
    },
    ToolDef {
        name: "events_query",
        method: "events.query",
        group: Group::DaemonRead,
        hints: READ,
        description: "Query the daemon's durable event log (newest first) by kinds, ids, data and time. Needs `Authorization: Bearer <daemon token>`.",
    },
    ToolDef {
        name: "events_stats",
        method: "events.stats",
        group: Group::DaemonRead,
        hints: READ,
        description: "Event totals by kind and the time span of the daemon's event log. Needs `Authorization: Bearer <daemon token>`.",
    },
    ToolDef {
        name: "events_cost_by_agent",
        method: "events.cost_by_agent",
        group: Group::DaemonRead,
        hints: READ,
        description: "Tokens and cost per agent, folded from the daemon's metered generations (an array: text only). Needs `Authorization: Bearer <daemon token>`.",
    },
    ToolDef {
        name: "workflow_verify",
        method: "workflow.verify",
        group: Group::DaemonRead,
        hints: READ,
        description: "Check a workflow manifest's structure without running it. Needs `Authorization: Bearer <daemon token>`.",
    },
    ToolDef {
        name: "workflow_list_paused",
        method: "workflow.list_paused",
        group: Group::DaemonRead,
        hints: READ,
        description: "The paused workflow runs that can be resumed. Needs `Authorization: Bearer <daemon token>`.",
    },
    ToolDef {
        name: "scheduler_list",
        method: "tasks.list",
        group: Group::DaemonRead,
        hints: READ,
        description: "The daemon's scheduled command tasks. Needs `Authorization: Bearer <daemon token>`.",
    },
    ToolDef {
        name: "workflow_run",
        method: "workflow.run",
        group: Group::DaemonMutating,
        hints: Hints {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
        },
        description: "Run a declarative workflow: its stages run real agents and tools. Needs `Authorization: Bearer <daemon token>`.",
    },
    ToolDef {
        name: "workflow_resume",
        method: "workflow.resume",
        group: Group::DaemonMutating,
        hints: Hints {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
        },
        description: "Resume a workflow paused at an approval gate; continues side-effecting stages. Needs `Authorization: Bearer <daemon token>`.",
    },
    ToolDef {
        name: "scheduler_schedule",
        method: "tasks.schedule",
        group: Group::DaemonMutating,
        hints: Hints {
            read_only: false,
            destructive: false,
            idempotent: false,
            open_world: true,
        },
        description: "Run a program on a cadence (daemon timers or a durable OS schedule). Needs `Authorization: Bearer <token>`; the daemon only lets a host session call it.",
    },
    ToolDef {
        name: "scheduler_unschedule",
        method: "tasks.unschedule",
        group: Group::DaemonMutating,
        hints: Hints {
            read_only: false,
            destructive: true,
            idempotent: true,
            open_world: false,
        },
        description: "Stop and delete a scheduled command task and its OS schedule. Needs `Authorization: Bearer <token>`; the daemon only lets a host session call it.",
    },
];

/// The catalog row named `name`, registered or not.
pub fn find(name: &str) -> Option<&'static ToolDef> {
    TOOLS.iter().find(|t| t.name == name)
}

/// A registered tool: its row and its ready-made `tools/list` entry.
#[derive(Debug, Clone)]
pub struct Tool {
    pub def: &'static ToolDef,
    /// The `tools/list` entry.
    pub listing: Value,
    /// Whether the tool declares an `outputSchema` (and so returns `structuredContent`).
    pub structured: bool,
}

/// The tools of `groups`, in catalog order.
///
/// # Panics
/// When a catalog row names a method the contract does not declare (a test pins that none
/// does).
pub fn build(groups: &[Group]) -> Vec<Tool> {
    TOOLS
        .iter()
        .filter(|t| groups.contains(&t.group))
        .map(|def| {
            let decl = methods::lookup(def.method).unwrap_or_else(|| {
                panic!("tool {} names undeclared method {}", def.name, def.method)
            });
            tool(def, decl)
        })
        .collect()
}

fn tool(def: &'static ToolDef, decl: &Declaration) -> Tool {
    let mut input = self_contained(|g| decl.params_schema(g));
    if input.get("type") != Some(&json!("object")) {
        // An input schema must describe an object (MCP); a params type that is not a struct
        // (none today) would still be sent as an object of arguments.
        input = json!({"$schema": SCHEMA_DIALECT, "type": "object"});
    }
    let output = self_contained(|g| decl.result_schema(g));
    let structured = output.get("type") == Some(&json!("object"));
    let mut listing = json!({
        "name": def.name,
        "description": def.description,
        "inputSchema": input,
        "annotations": {
            "readOnlyHint": def.hints.read_only,
            "destructiveHint": def.hints.destructive,
            "idempotentHint": def.hints.idempotent,
            "openWorldHint": def.hints.open_world,
        },
    });
    if structured {
        listing["outputSchema"] = output;
    }
    Tool {
        def,
        listing,
        structured,
    }
}

/// A schema from `make` with its top-level `$ref` resolved and the definitions it still
/// references (transitively) under `$defs`. A boolean schema becomes `{}` / `{"not": {}}`.
fn self_contained(make: impl FnOnce(&mut SchemaGenerator) -> Schema) -> Value {
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    let schema = make(&mut generator).to_value();
    let definitions: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    let mut root = match schema {
        Value::Bool(true) => json!({}),
        Value::Bool(false) => json!({"not": {}}),
        other => other,
    };
    if let Some(name) = lone_ref(&root) {
        if let Some(def) = definitions.get(&name) {
            root = def.clone();
        }
    }
    strip_numeric_formats(&mut root);
    let mut needed = BTreeMap::new();
    let mut pending = Vec::new();
    collect_refs(&root, &mut pending);
    while let Some(name) = pending.pop() {
        if needed.contains_key(&name) {
            continue;
        }
        if let Some(def) = definitions.get(&name) {
            let mut def = def.clone();
            strip_numeric_formats(&mut def);
            collect_refs(&def, &mut pending);
            needed.insert(name, def);
        }
    }
    if let Value::Object(map) = &mut root {
        map.insert("$schema".into(), json!(SCHEMA_DIALECT));
        if !needed.is_empty() {
            map.insert("$defs".into(), Value::Object(needed.into_iter().collect()));
        }
    }
    root
}

/// schemars' Rust-width `format`s (`uint64`, `int32`, `double`, …) that JSON Schema does
/// not define; validators warn on each (the bounds schemars adds, such as `minimum: 0`,
/// stay).
const RUST_FORMATS: &[&str] = &[
    "int", "int8", "int16", "int32", "int64", "int128", "uint", "uint8", "uint16", "uint32",
    "uint64", "uint128", "float", "double",
];

fn strip_numeric_formats(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| RUST_FORMATS.contains(&f))
            {
                map.remove("format");
            }
            map.values_mut().for_each(strip_numeric_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_numeric_formats),
        _ => {}
    }
}

/// The definition name of a schema that is nothing but `{"$ref": "#/$defs/<name>"}`.
fn lone_ref(schema: &Value) -> Option<String> {
    let map = schema.as_object()?;
    if map.len() != 1 {
        return None;
    }
    def_name(map.get("$ref")?.as_str()?)
}

fn def_name(reference: &str) -> Option<String> {
    reference.strip_prefix("#/$defs/").map(str::to_string)
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, item) in map {
                if key == "$ref" {
                    if let Some(name) = item.as_str().and_then(def_name) {
                        out.push(name);
                    }
                } else {
                    collect_refs(item, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_refs(item, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests;

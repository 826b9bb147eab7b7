//! The `server.schema` document, generated from the method contract, and its digest.
//!
//! The document: `{protocol_version, capabilities, error_codes, methods, coverage,
//! definitions}`. `coverage` partitions two inventories into exact `covered` / `uncovered`
//! lists (CAR's rule): `rpc_results` (methods whose result schema constrains the result vs
//! untyped JSON results) and `journal_event_payloads` (event kinds with a published payload
//! schema vs without).
//! Each `methods` row carries the declaration's columns (name, role, capability,
//! handshake_required, deadline, summary) and its `params` and `result` JSON Schemas
//! (draft 2020-12; shared types are `$ref`s into `definitions`), so a client can validate
//! before it sends, and the typed binding `members` generated from it (name, arguments with
//! their params field and kind, result projection). Rows are sorted by name.
//!
//! The digest is the lower-case hex SHA-256 of the document's **canonical JSON**: object
//! keys sorted by their UTF-8 bytes at every level, no insignificant white space, numbers
//! as serde_json writes them. It changes exactly when the published contract changes.

use schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::methods::{self, Declaration};
use crate::{capabilities, errors, PROTOCOL_VERSION};

/// The digest algorithm's name as published in `digest_algorithm`.
pub const DIGEST_ALGORITHM: &str = "sha256";

/// Where shared type definitions live in the document.
const DEFINITIONS: &str = "definitions";

/// The schema of the methods a daemon serves (`debug` adds the debug-only methods).
pub fn schema(debug: bool) -> Value {
    document(methods::active(debug))
}

/// The schema document of any set of declarations.
pub fn document<'a>(decls: impl Iterator<Item = &'a Declaration>) -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = format!("/{DEFINITIONS}").into();
    let mut generator = settings.into_generator();
    let mut rows: Vec<Value> = decls
        .map(|d| {
            let mut row = serde_json::to_value(d.spec).expect("method specs serialize");
            row["params"] = d.params_schema(&mut generator).to_value();
            row["result"] = d.result_schema(&mut generator).to_value();
            row["members"] = serde_json::to_value(d.members).expect("members serialize");
            row
        })
        .collect();
    rows.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    // A result is covered when its schema constrains it (an untyped JSON result's schema
    // is `true`).
    let (covered, uncovered): (Vec<&Value>, Vec<&Value>) = rows
        .iter()
        .partition(|row| row["result"] != Value::Bool(true) && row["result"] != json!({}));
    let names =
        |rows: Vec<&Value>| -> Vec<Value> { rows.iter().map(|r| r["name"].clone()).collect() };
    let coverage = json!({
        "rpc_results": {"covered": names(covered), "uncovered": names(uncovered)},
        "journal_event_payloads": {
            "covered": [],
            "uncovered": methods::events::JOURNAL_KINDS,
        },
    });
    let definitions: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    let error_codes: Vec<Value> = errors::ERROR_CODES
        .iter()
        .map(|(code, meaning)| json!({"code": code, "meaning": meaning}))
        .collect();
    json!({
        "protocol_version": PROTOCOL_VERSION,
        "capabilities": capabilities::SUPPORTED,
        "error_codes": error_codes,
        "methods": rows,
        "coverage": coverage,
        DEFINITIONS: definitions,
    })
}

/// `value` as canonical JSON text (see the module docs).
pub fn canonical_json(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push(':');
                    write(&map[key], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// Lower-case hex SHA-256 of the canonical JSON of `schema`.
pub fn digest(schema: &Value) -> String {
    sha256_hex(canonical_json(schema).as_bytes())
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_form_is_pinned() {
        // Golden: keys sorted at every level, no white space, escapes as serde_json writes.
        let v = json!({"b": [3, {"z": null, "a": "é\n"}], "a": 1.5, "A": true});
        assert_eq!(
            canonical_json(&v),
            r#"{"A":true,"a":1.5,"b":[3,{"a":"é\n","z":null}]}"#
        );
        assert_eq!(
            digest(&v),
            hex::encode(Sha256::digest(
                r#"{"A":true,"a":1.5,"b":[3,{"a":"é\n","z":null}]}"#.as_bytes()
            ))
        );
    }

    #[test]
    fn digest_is_stable_and_tracks_the_contract() {
        let a = schema(false);
        assert_eq!(digest(&a), digest(&schema(false)));
        assert_eq!(digest(&a).len(), 64);
        let fewer = document(methods::active(false).skip(1));
        assert_ne!(digest(&a), digest(&fewer));
        let mut changed: Vec<Declaration> = methods::active(false).copied().collect();
        changed[0].spec.role = methods::Role::Host;
        assert_ne!(digest(&a), digest(&document(changed.iter())));
        assert_ne!(digest(&a), digest(&schema(true)));
    }

    #[test]
    fn every_method_has_params_and_result_schemas() {
        let s = schema(true);
        let defs = s[DEFINITIONS].as_object().unwrap();
        for row in s["methods"].as_array().unwrap() {
            for part in ["params", "result"] {
                let schema = &row[part];
                assert!(
                    schema.is_object() || schema.is_boolean(),
                    "{} {part}: {schema}",
                    row["name"]
                );
                // Every reference resolves inside the document.
                let text = schema.to_string();
                for reference in text.split("\"$ref\":\"").skip(1) {
                    let target = reference.split('"').next().unwrap();
                    let name = target.trim_start_matches("#/definitions/");
                    assert!(defs.contains_key(name), "{} {part}: {target}", row["name"]);
                }
            }
        }
        let row = s["methods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "state.get")
            .unwrap();
        assert_eq!(row["role"], "operator");
        assert_eq!(row["deadline"], "standard");
        let key = &row["params"];
        let key = if let Some(r) = key.get("$ref") {
            &defs[r.as_str().unwrap().trim_start_matches("#/definitions/")]
        } else {
            key
        };
        assert_eq!(key["required"], json!(["key"]));
    }
}

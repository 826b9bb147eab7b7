//! The method contract, checked generically against a real daemon: every method's params
//! are decoded by the rules `server.schema` publishes, so a test driven by that schema can
//! probe every field of every method without knowing any of them.
//!
//! For every method whose params schema is an object with properties (and, through its
//! object and array branches, `tools.register`'s one-or-many params), for every property
//! with a declared JSON type (after `$ref`, `anyOf` and `Option`'s `[T, "null"]`), nested
//! objects and arrays of objects included:
//! - a value of a wrong type for that property alone is `-32602` whose message names its path:
//!   `invalid params: <path>: …`;
//! - `null` for an optional property is absent: the call answers exactly as it does without the
//!   property (so any error is not about it);
//! - an unknown extra field is ignored: the call answers exactly as it does without it.
//!
//! `session.auth` runs on a connection of its own (a successful call re-authenticates it),
//! with a credential beside each `null` and unknown field so the call succeeds. `server.handshake`
//! takes its params as JSON and has its own rules (a bad version is `-32006`), checked by hand.
//! No method is skipped for side effects: a wrong type is refused before any handler runs,
//! and the `null` / unknown-field calls carry no required field, so they are refused for
//! the missing one or only read.
//!
//! Also: every schema row has `params`, `result` and `members`, and `digest` is the
//! SHA-256 of the canonical JSON of `schema` (keys sorted, no white space), recomputed here
//! independently of `car_proto`.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use serde_json::{json, Map, Value};

const UNKNOWN: &str = "zz_contract_unknown_field";
/// How deep nested objects are probed (`a.b.c`).
const MAX_DEPTH: usize = 3;

/// Schema lookups within one `server.schema` document.
struct Doc<'a> {
    definitions: &'a Map<String, Value>,
}

impl<'a> Doc<'a> {
    /// Follows `$ref`s into `definitions`.
    fn resolve(&self, mut schema: &'a Value) -> &'a Value {
        while let Some(target) = schema.get("$ref").and_then(Value::as_str) {
            let name = target
                .strip_prefix("#/definitions/")
                .unwrap_or_else(|| panic!("a $ref outside the document: {target}"));
            schema = self
                .definitions
                .get(name)
                .unwrap_or_else(|| panic!("$ref to a missing definition: {target}"));
        }
        schema
    }

    /// The alternatives of a schema: its `anyOf` / `oneOf` branches (resolved), or itself.
    fn branches(&self, schema: &'a Value) -> Vec<&'a Value> {
        let schema = self.resolve(schema);
        match schema.get("anyOf").or_else(|| schema.get("oneOf")) {
            Some(Value::Array(options)) => options
                .iter()
                .flat_map(|option| self.branches(option))
                .collect(),
            _ => vec![schema],
        }
    }

    /// The JSON types a value may have besides `null`; `None` when any value is accepted.
    fn types(&self, schema: &'a Value) -> Option<BTreeSet<String>> {
        let mut out = BTreeSet::new();
        for branch in self.branches(schema) {
            match branch.get("type") {
                Some(Value::String(t)) => {
                    out.insert(t.clone());
                }
                Some(Value::Array(ts)) => {
                    out.extend(ts.iter().filter_map(Value::as_str).map(String::from));
                }
                _ => return None,
            }
        }
        out.remove("null");
        (!out.is_empty()).then_some(out)
    }

    /// The object schema with properties a value must be, when every non-null branch is
    /// one (so `Option<Struct>` and plain structs, never a union of several shapes).
    fn object(&self, schema: &'a Value) -> Option<&'a Value> {
        let branches: Vec<&Value> = self
            .branches(schema)
            .into_iter()
            .filter(|b| b.get("type") != Some(&json!("null")))
            .collect();
        match branches.as_slice() {
            [one] if one.get("properties").is_some_and(Value::is_object) => Some(one),
            _ => None,
        }
    }

    /// The object schema of an array's items, for an array (or `Option` of one) whose
    /// items are objects with properties.
    fn array_items(&self, schema: &'a Value) -> Option<&'a Value> {
        let branches: Vec<&Value> = self
            .branches(schema)
            .into_iter()
            .filter(|b| b.get("type") != Some(&json!("null")))
            .collect();
        match branches.as_slice() {
            [one] if self.types(one).is_some_and(|t| t.contains("array")) => {
                one.get("items").and_then(|items| self.object(items))
            }
            _ => None,
        }
    }
}

/// A value of none of `types` (a string where possible, else a number, …).
fn wrong_value(types: &BTreeSet<String>) -> Value {
    let admits = |t: &str| match t {
        "integer" => types.contains("integer") || types.contains("number"),
        other => types.contains(other),
    };
    [
        ("string", json!("x")),
        ("integer", json!(5)),
        ("boolean", json!(true)),
        ("array", json!([])),
        ("object", json!({})),
    ]
    .into_iter()
    .find(|(t, _)| !admits(t))
    .map(|(_, v)| v)
    .unwrap_or_else(|| panic!("no JSON type is outside {types:?}"))
}

/// One probe: `params` for `method`, the field path it is about, and the same params
/// without that field (for `null` and unknown-field probes, which must answer alike).
#[derive(Debug, Clone)]
struct Probe {
    path: String,
    params: Value,
    absent: Value,
}

/// Wraps a value found at a property into the params that reach it: `wrap(v)`.
type Wrap<'w> = &'w dyn Fn(Value) -> Value;

#[derive(Default)]
struct Probes {
    wrong: Vec<Probe>,
    null: Vec<Probe>,
    unknown: Vec<Probe>,
}

/// Probes for the object schema `object`, reached at `prefix` (`""` at the top, `a.`,
/// `a[0].`) through `wrap`.
fn collect(
    doc: &Doc<'_>,
    object: &Value,
    prefix: &str,
    wrap: Wrap<'_>,
    depth: usize,
    out: &mut Probes,
) {
    let required: BTreeSet<&str> = object
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    out.unknown.push(Probe {
        path: format!("{prefix}{UNKNOWN}"),
        params: wrap(json!({ UNKNOWN: 1 })),
        absent: wrap(json!({})),
    });
    let properties = object["properties"].as_object().unwrap();
    for (name, schema) in properties {
        let path = format!("{prefix}{name}");
        let at = |v: Value| wrap(json!({ name.as_str(): v }));
        if let Some(types) = doc.types(schema) {
            out.wrong.push(Probe {
                path: path.clone(),
                params: at(wrong_value(&types)),
                absent: wrap(json!({})),
            });
        }
        if !required.contains(name.as_str()) {
            out.null.push(Probe {
                path: path.clone(),
                params: at(Value::Null),
                absent: wrap(json!({})),
            });
        }
        if depth < MAX_DEPTH {
            if let Some(inner) = doc.object(schema) {
                collect(doc, inner, &format!("{path}."), &at, depth + 1, out);
            } else if let Some(items) = doc.array_items(schema) {
                let in_array = |v: Value| at(json!([v]));
                collect(
                    doc,
                    items,
                    &format!("{path}[0]."),
                    &in_array,
                    depth + 1,
                    out,
                );
            }
        }
    }
}

/// Every probe for a method's params schema (its object branch and, for a one-or-many
/// schema, its array branch).
fn probes_for(doc: &Doc<'_>, params: &Value) -> Probes {
    let mut out = Probes::default();
    let top = |v: Value| v;
    for branch in doc.branches(params) {
        if branch.get("properties").is_some_and(Value::is_object) {
            collect(doc, branch, "", &top, 0, &mut out);
        } else if let Some(items) = branch.get("items").and_then(|i| doc.object(i)) {
            let in_array = |v: Value| json!([v]);
            collect(doc, items, "[0].", &in_array, 1, &mut out);
        } else if doc.types(branch).is_some_and(|t| t.contains("object")) {
            // An object without declared properties (NoParams): only the unknown field.
            out.unknown.push(Probe {
                path: UNKNOWN.into(),
                params: json!({ UNKNOWN: 1 }),
                absent: json!({}),
            });
        }
    }
    out
}

/// Fields a result mints afresh on every call (event numbers and times, new ids).
const MINTED: &[&str] = &[
    "id",
    "seq",
    "sequence",
    "timestamp",
    "session_id",
    "created_at",
    "updated_at",
    // server.status: the daemon's age when it answered.
    "uptime_ms",
];

/// A response without its JSON-RPC id, and with what a call mints afresh masked, to
/// compare two calls' answers.
fn answer(response: &Value) -> Value {
    fn mask(v: &mut Value) {
        match v {
            Value::Object(map) => {
                for (k, v) in map.iter_mut() {
                    if MINTED.contains(&k.as_str()) && (v.is_string() || v.is_number()) {
                        *v = Value::String("<minted>".into());
                    } else {
                        mask(v);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(mask),
            _ => {}
        }
    }
    let mut r = response.clone();
    r.as_object_mut().unwrap().remove("id");
    if let Some(result) = r.get_mut("result") {
        mask(result);
    }
    r
}

/// Lower-case hex SHA-256 of `data` (the `sha2` crate, not `car_proto`, so the daemon's
/// digest is checked independently of the code that computes it).
fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

/// `value` with every object's keys sorted (a `BTreeMap` at every level), serialized
/// without white space.
fn canonical_json(value: &Value) -> String {
    fn sorted(value: &Value) -> SortedValue {
        match value {
            Value::Object(map) => {
                SortedValue::Object(map.iter().map(|(k, v)| (k.clone(), sorted(v))).collect())
            }
            Value::Array(items) => SortedValue::Array(items.iter().map(sorted).collect()),
            scalar => SortedValue::Scalar(scalar.clone()),
        }
    }
    #[derive(serde::Serialize)]
    #[serde(untagged)]
    enum SortedValue {
        Object(BTreeMap<String, SortedValue>),
        Array(Vec<SortedValue>),
        Scalar(Value),
    }
    serde_json::to_string(&sorted(value)).unwrap()
}

#[test]
fn the_test_sha256_and_canonical_form_are_right() {
    assert_eq!(
        sha256_hex(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        sha256_hex(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(
        sha256_hex(&[b'a'; 1_000]),
        "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3"
    );
    let v = json!({"b": [3, {"z": null, "a": "é\n"}], "a": 1.5, "A": true});
    assert_eq!(
        canonical_json(&v),
        r#"{"A":true,"a":1.5,"b":[3,{"a":"é\n","z":null}]}"#
    );
}

/// A host session that negotiated every capability, so no gate but the params decides.
async fn privileged(d: &Daemon) -> Ws {
    let mut ws = Ws::host(d).await;
    let r = ws
        .call(
            "server.handshake",
            json!({"protocol_version": 3, "required_capabilities": car_proto::capabilities::SUPPORTED}),
        )
        .await;
    assert!(r["result"].is_object(), "{r}");
    ws
}

#[tokio::test]
async fn every_field_of_every_method_follows_the_decoding_rules() {
    // The approval gate would park every probe of a gated method for its timeout.
    let d = Daemon::builder()
        .args(["--debug-methods", "--no-approvals"])
        .start();
    let mut ws = privileged(&d).await;
    let mut auth_ws = Ws::tcp(&d.ws_url).await;
    let reply = ws.call("server.schema", json!({})).await["result"].clone();
    let schema = &reply["schema"];
    assert_eq!(reply["digest_algorithm"], "sha256");
    assert_eq!(
        reply["digest"].as_str().unwrap(),
        sha256_hex(canonical_json(schema).as_bytes()),
        "digest is the SHA-256 of the canonical schema"
    );
    let doc = Doc {
        definitions: schema["definitions"].as_object().unwrap(),
    };
    let rows = schema["methods"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "rows are sorted by name");
    assert!(names.contains(&"debug.echo"), "debug methods are served");

    let mut violations: Vec<String> = Vec::new();
    let mut exercised: BTreeSet<(String, String)> = BTreeSet::new();
    let mut counts = [0usize; 3];
    for row in rows {
        let method = row["name"].as_str().unwrap();
        for field in ["params", "result", "members"] {
            if row.get(field).is_none() {
                violations.push(format!("{method}: the schema row has no {field}"));
            }
        }
        for field in ["params", "result"] {
            if !(row[field].is_object() || row[field].is_boolean()) {
                violations.push(format!("{method}: {field} is not a schema: {}", row[field]));
            }
        }
        if !row["members"].is_array() {
            violations.push(format!("{method}: members is not an array"));
        }
        if method == "server.handshake" {
            continue; // its params are JSON checked by its own rules (below)
        }
        let probes = probes_for(&doc, &row["params"]);
        for (n, list) in counts
            .iter_mut()
            .zip([&probes.wrong, &probes.null, &probes.unknown])
        {
            *n += list.len();
        }
        // session.auth re-authenticates the connection it runs on: use its own, and give
        // each `null` a credential beside it so the call can succeed.
        let auth = method == "session.auth";
        let credential = |path: &str| {
            if path == "token" {
                json!({"host_token": d.host_token()})
            } else {
                json!({"token": d.token()})
            }
        };
        for probe in &probes.wrong {
            let target = if auth { &mut auth_ws } else { &mut ws };
            let r = target.call(method, probe.params.clone()).await;
            exercised.insert((method.to_string(), probe.path.clone()));
            let expected = format!("invalid params: {}: ", probe.path);
            if code_of(&r) != Some(-32602) || !message(&r).starts_with(&expected) {
                violations.push(format!(
                    "{method} {}: a wrong type should be `-32602 {expected}…`, got {r}",
                    probe.params
                ));
            }
        }
        for (kind, list) in [("null", &probes.null), ("unknown field", &probes.unknown)] {
            for probe in list {
                let with_credential = |params: &Value| {
                    let mut out = credential(&probe.path);
                    for (k, v) in params.as_object().unwrap() {
                        out[k] = v.clone();
                    }
                    out
                };
                let (target, params, absent) = if auth {
                    (
                        &mut auth_ws,
                        with_credential(&probe.params),
                        with_credential(&probe.absent),
                    )
                } else {
                    (&mut ws, probe.params.clone(), probe.absent.clone())
                };
                // `null` is absent and an unknown field is ignored: the call answers exactly
                // as it does without the field.
                // A call with a one-time effect (`runs.unsubscribe` removes a subscription)
                // answers differently the first time, so a difference is checked once more.
                let mut with = target.call(method, params.clone()).await;
                let without = target.call(method, absent.clone()).await;
                if answer(&with) != answer(&without) {
                    with = target.call(method, params.clone()).await;
                }
                if answer(&with) != answer(&without) {
                    violations.push(format!(
                        "{method}: a {kind} at {} should answer like its absence: {params} → {with}, but {absent} → {without}",
                        probe.path
                    ));
                }
                if auth && with["result"]["ok"] != true {
                    violations.push(format!(
                        "{method} {params}: a {kind} beside a credential should authenticate, got {with}"
                    ));
                }
            }
        }
    }
    eprintln!(
        "probed {} methods: {} wrong types, {} nulls, {} unknown fields",
        rows.len(),
        counts[0],
        counts[1],
        counts[2]
    );
    // The walk reached fields at the top, in nested objects, in arrays of objects and
    // behind both branches of a one-or-many params schema.
    for (method, path) in [
        ("state.get", "key"),
        ("state.set", "tenant_id"),
        ("infer", "params.max_tokens"),
        ("infer", "messages[0].role"),
        ("session.init", "tools[0].name"),
        ("session.init", "policies[0].rule"),
        ("tools.register", "name"),
        ("tools.register", "[0].name"),
        ("runs.complete", "outcome"),
        ("events.query", "since"),
        ("models.register", "schema.id"),
        ("models.register", "id"),
        ("session.auth", "token"),
        ("debug.sleep", "ms"),
    ] {
        assert!(
            exercised.contains(&(method.to_string(), path.to_string())),
            "{method} {path} was not probed: {exercised:?}"
        );
    }
    assert!(
        violations.is_empty(),
        "{} violations of the decoding rules:\n{}",
        violations.len(),
        violations.join("\n")
    );
}

/// The JSON-RPC error code of a response, if it is an error.
fn code_of(response: &Value) -> Option<i64> {
    response["error"]["code"].as_i64()
}

#[tokio::test]
async fn server_handshake_has_its_own_rules() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    for (params, expected) in [
        (
            json!({}),
            "protocol version mismatch: protocol_version is required; this daemon speaks 3",
        ),
        (
            json!({"protocol_version": null}),
            "protocol version mismatch: protocol_version is required; this daemon speaks 3",
        ),
        (
            json!({"protocol_version": "3"}),
            "protocol version mismatch: protocol_version must be the integer 3, got a string \"3\"",
        ),
        (
            json!({"protocol_version": 2}),
            "protocol version mismatch: client speaks 2, this daemon speaks exactly 3",
        ),
    ] {
        let r = ws.call("server.handshake", params.clone()).await;
        assert_eq!(
            (code(&r), message(&r).as_str()),
            (-32006, expected),
            "{params} → {r}"
        );
    }
    let r = ws
        .call(
            "server.handshake",
            json!({"protocol_version": 3, "required_capabilities": "x"}),
        )
        .await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (
            -32602,
            "invalid params: required_capabilities must be an array of strings, got a string"
        )
    );
    // Unknown fields are ignored and null optional fields are absent.
    let r = ws
        .call(
            "server.handshake",
            json!({"protocol_version": 3, "client_version": null, "required_capabilities": null, "optional_capabilities": null, UNKNOWN: 1}),
        )
        .await;
    assert_eq!(
        r["result"],
        json!({
            "protocol_version": 3,
            "server_version": car_proto::CAR_VERSION,
            "client_protocol_version": 3,
            "client_version": "unknown",
            "negotiated_capabilities": [],
        }),
        "{r}"
    );
}

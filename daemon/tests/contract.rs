//! The method contract, checked generically against a real daemon: every method's params
//! are decoded by the rules `server.schema` publishes, so a test driven by that schema can
//! probe every field of every method without knowing any of them.
//!
//! For every method whose params schema is an object with properties (and, through its
//! object and array branches, `tools.register`'s one-or-many params), for every property
//! with a declared JSON type (after `$ref`, `anyOf` and `Option`'s `[T, "null"]`), nested
//! objects and arrays of objects included:
//! - a value of a wrong type for that property alone is `-32602` whose message names its
//!   path: `invalid params: <path>: …`;
//! - `null` for an optional property is absent: the call answers exactly as it does
//!   without the property (so any error is not about it);
//! - an unknown extra field is ignored: the call answers exactly as it does without it.
//!
//! `session.auth` runs on a connection of its own (a successful call re-authenticates it),
//! with a credential beside each `null` and unknown field so the call succeeds. `server.handshake` takes
//! its params as JSON and has its own rules (a bad version is `-32006`), checked by hand.
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

/// A response without its JSON-RPC id, to compare two calls' answers.
fn answer(response: &Value) -> Value {
    let mut r = response.clone();
    r.as_object_mut().unwrap().remove("id");
    r
}

/// Lower-case hex SHA-256 (FIPS 180-4), so the digest is checked without `car_proto`.
fn sha256_hex(data: &[u8]) -> String {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut message = data.to_vec();
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in message.chunks(64) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (state, v) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *state = state.wrapping_add(v);
        }
    }
    h.iter().map(|v| format!("{v:08x}")).collect()
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
    let d = Daemon::builder().args(["--debug-methods"]).start();
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
                let with = target.call(method, params.clone()).await;
                let without = target.call(method, absent.clone()).await;
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
            "protocol version mismatch: protocol_version must be the integer 3, got string \"3\"",
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
            "invalid params: required_capabilities must be an array of strings, got string"
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

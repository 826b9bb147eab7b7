//! Shared by the fuzz targets: the planted secret every target checks never reaches an
//! error or output, and a generator of method params guided by the live schema
//! (`car_proto::schema::schema(true)`, the document `server.schema` serves), so the params
//! target explores each method's real field names and types rather than random JSON.

use arbitrary::{Result, Unstructured};
use serde_json::{Map, Value};

/// A secret the targets plant in sensitive places (a `token`, a secret `value`); no error
/// message, debug output or reply may contain it.
pub const PLANTED: &str = "planted-Secret-7f3a9c2e";

/// Field names whose string values are secrets.
pub const SENSITIVE_FIELDS: &[&str] = &["token", "value", "api_key", "secret", "password"];

/// Arbitrary JSON of at most `depth` levels.
pub fn any_json(u: &mut Unstructured<'_>, depth: usize) -> Result<Value> {
    let kind = if depth == 0 {
        u.int_in_range(0..=3)?
    } else {
        u.int_in_range(0..=5)?
    };
    Ok(match kind {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => match u.int_in_range(0..=2)? {
            0 => Value::from(u.arbitrary::<i64>()?),
            1 => Value::from(u.arbitrary::<u64>()?),
            _ => serde_json::Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number),
        },
        3 => Value::String(u.arbitrary()?),
        4 => {
            let n = u.int_in_range(0..=4)?;
            Value::Array(
                (0..n)
                    .map(|_| any_json(u, depth - 1))
                    .collect::<Result<_>>()?,
            )
        }
        _ => {
            let n = u.int_in_range(0..=4)?;
            let mut map = Map::new();
            for _ in 0..n {
                map.insert(u.arbitrary()?, any_json(u, depth - 1)?);
            }
            Value::Object(map)
        }
    })
}

/// A value for `schema` (resolving `$ref`s into `definitions`): mostly what the schema
/// describes, sometimes anything (type confusion, out-of-range numbers, unknown fields).
/// A string under a [`SENSITIVE_FIELDS`] name is [`PLANTED`].
pub fn from_schema(
    u: &mut Unstructured<'_>,
    schema: &Value,
    definitions: &Map<String, Value>,
    field: Option<&str>,
    depth: usize,
) -> Result<Value> {
    if depth == 0 || u.ratio(1, 12)? {
        return any_json(u, depth.min(2));
    }
    let Some(obj) = schema.as_object() else {
        return any_json(u, 2);
    };
    if let Some(target) = obj.get("$ref").and_then(Value::as_str) {
        let name = target.rsplit('/').next().unwrap_or("");
        return match definitions.get(name) {
            Some(def) => from_schema(u, def, definitions, field, depth - 1),
            None => any_json(u, 2),
        };
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(branches)) = obj.get(key) {
            if !branches.is_empty() {
                let i = u.choose_index(branches.len())?;
                return from_schema(u, &branches[i], definitions, field, depth - 1);
            }
        }
    }
    if let Some(Value::Array(options)) = obj.get("enum") {
        if !options.is_empty() {
            return Ok(options[u.choose_index(options.len())?].clone());
        }
    }
    if let Some(constant) = obj.get("const") {
        return Ok(constant.clone());
    }
    let ty = match obj.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) if !ts.is_empty() => ts[u.choose_index(ts.len())?]
            .as_str()
            .unwrap_or("null")
            .to_owned(),
        _ if obj.contains_key("properties") => "object".to_owned(),
        _ => return any_json(u, 2),
    };
    Ok(match ty.as_str() {
        "object" => {
            let mut map = Map::new();
            if let Some(Value::Object(props)) = obj.get("properties") {
                for (name, sub) in props {
                    if u.ratio(3, 4)? {
                        map.insert(
                            name.clone(),
                            from_schema(u, sub, definitions, Some(name), depth - 1)?,
                        );
                    }
                }
            }
            if u.ratio(1, 8)? {
                map.insert(u.arbitrary()?, any_json(u, 1)?);
            }
            Value::Object(map)
        }
        "array" => {
            let n = u.int_in_range(0..=3)?;
            let items = obj.get("items").cloned().unwrap_or(Value::Bool(true));
            Value::Array(
                (0..n)
                    .map(|_| from_schema(u, &items, definitions, field, depth - 1))
                    .collect::<Result<_>>()?,
            )
        }
        "string" if field.is_some_and(|f| SENSITIVE_FIELDS.contains(&f)) => {
            Value::String(PLANTED.to_owned())
        }
        "string" => Value::String(u.arbitrary()?),
        "integer" => Value::from(u.arbitrary::<i64>()?),
        "number" => serde_json::Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number),
        "boolean" => Value::Bool(u.arbitrary()?),
        _ => Value::Null,
    })
}

//! Reading a proposal's actions with precise `-32602` errors that name the field path
//! (`proposal.actions[2].tool is required`, `… must be a string`). The proposal is the one
//! request still read by hand (see `model.rs`): every other method's params are typed in
//! the contract and decoded before its handler runs.

use car_proto::errors::RpcError;
use car_proto::jsonrpc::json_type_name;
use serde_json::{Map, Value};

/// Longest key, name or id accepted anywhere (bytes).
pub const MAX_NAME_BYTES: usize = 1024;

/// A request's params object.
#[derive(Debug)]
pub struct Params {
    map: Map<String, Value>,
    /// Prepended to field names in messages (`tools[2].`) for nested objects.
    path: String,
}

fn bad(detail: impl std::fmt::Display) -> RpcError {
    RpcError::invalid_params(detail)
}

impl Params {
    /// Wraps an object that is one element of a larger request (`what` names it).
    pub fn element(value: &Value, what: &str) -> Result<Self, RpcError> {
        match value {
            Value::Object(map) => Ok(Params {
                map: map.clone(),
                path: format!("{what}."),
            }),
            other => Err(bad(format!(
                "{what} must be an object, got {}",
                json_type_name(other)
            ))),
        }
    }

    /// The field's full name for messages.
    fn name(&self, field: &str) -> String {
        format!("{}{field}", self.path)
    }

    pub fn value(&self, field: &str) -> Option<&Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    pub fn required_value(&self, field: &str) -> Result<&Value, RpcError> {
        self.map
            .get(field)
            .ok_or_else(|| bad(format!("{} is required", self.name(field))))
    }

    /// An optional non-empty string of at most [`MAX_NAME_BYTES`].
    pub fn opt_str(&self, field: &str) -> Result<Option<String>, RpcError> {
        match self.value(field) {
            None => Ok(None),
            Some(Value::String(s)) if s.is_empty() => {
                Err(bad(format!("{} must not be empty", self.name(field))))
            }
            Some(Value::String(s)) if s.len() > MAX_NAME_BYTES => Err(bad(format!(
                "{} is longer than {MAX_NAME_BYTES} bytes",
                self.name(field)
            ))),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(bad(format!(
                "{} must be a string, got {}",
                self.name(field),
                json_type_name(other)
            ))),
        }
    }

    pub fn str(&self, field: &str) -> Result<String, RpcError> {
        self.opt_str(field)?
            .ok_or_else(|| bad(format!("{} is required", self.name(field))))
    }

    /// An optional integer in `min..=max`.
    pub fn opt_u64(&self, field: &str, min: u64, max: u64) -> Result<Option<u64>, RpcError> {
        match self.value(field) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
                _ => Err(bad(format!(
                    "{} must be an integer from {min} to {max}, got {v}",
                    self.name(field)
                ))),
            },
        }
    }

    /// An optional object.
    pub fn opt_object(&self, field: &str) -> Result<Option<Map<String, Value>>, RpcError> {
        match self.value(field) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m.clone())),
            Some(other) => Err(bad(format!(
                "{} must be an object, got {}",
                self.name(field),
                json_type_name(other)
            ))),
        }
    }

    /// An optional array of non-empty strings.
    pub fn opt_str_list(&self, field: &str) -> Result<Option<Vec<String>>, RpcError> {
        match self.value(field) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) if !s.is_empty() && s.len() <= MAX_NAME_BYTES => Ok(s.clone()),
                    other => Err(bad(format!(
                        "{}[{i}] must be a non-empty string, got {}",
                        self.name(field),
                        json_type_name(other)
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(bad(format!(
                "{} must be an array of strings, got {}",
                self.name(field),
                json_type_name(other)
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_name_the_field() {
        let p = Params::element(
            &json!({"a": 1, "b": "", "c": "x", "n": 5, "l": ["x", 2]}),
            "p",
        )
        .unwrap();
        assert_eq!(
            p.str("a").unwrap_err().message,
            "invalid params: p.a must be a string, got a number"
        );
        assert_eq!(
            p.str("b").unwrap_err().message,
            "invalid params: p.b must not be empty"
        );
        assert_eq!(
            p.str("zz").unwrap_err().message,
            "invalid params: p.zz is required"
        );
        assert_eq!(p.str("c").unwrap(), "x");
        assert!(p
            .opt_u64("n", 1, 3)
            .unwrap_err()
            .message
            .contains("p.n must be an integer from 1 to 3"));
        assert!(p.opt_str_list("l").unwrap_err().message.contains("p.l[1]"));
        assert!(Params::element(&json!([1]), "proposal")
            .unwrap_err()
            .message
            .contains("proposal must be an object, got an array"));
    }
}

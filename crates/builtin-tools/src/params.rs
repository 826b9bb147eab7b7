//! Reading tool parameters out of a JSON object.
//!
//! Rules shared by every tool:
//! - `params` must be a JSON object; `null` is taken as `{}` (so a tool with only optional fields
//!   can be called without params). Anything else is `InvalidParams` on `params`.
//! - Unknown fields are ignored (forward compatibility).
//! - A JSON `null` for an optional field means the field is absent.
//! - Types are strict: a string field must be a JSON string, a boolean a JSON boolean. An integer
//!   field accepts a JSON number that is a whole non-negative value (`5` or `5.0`).
//! - Every error is [`ToolError::InvalidParams`] whose `field` is the parameter's name.

use car_proto::jsonrpc::json_type_name;
use serde_json::{Map, Value};

use crate::error::ToolError;

/// A view over one call's params object.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params<'a> {
    map: Option<&'a Map<String, Value>>,
}

impl<'a> Params<'a> {
    pub(crate) fn new(value: &'a Value) -> Result<Self, ToolError> {
        match value {
            Value::Object(map) => Ok(Params { map: Some(map) }),
            Value::Null => Ok(Params { map: None }),
            _ => Err(ToolError::invalid("params", "must be a JSON object")),
        }
    }

    /// The value of `name`, with JSON `null` folded into "absent".
    fn get(&self, name: &str) -> Option<&'a Value> {
        self.map?.get(name).filter(|v| !v.is_null())
    }

    pub(crate) fn str_opt(&self, name: &str) -> Result<Option<&'a str>, ToolError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(other) => Err(ToolError::invalid(
                name,
                format!("must be a string, got {}", json_type_name(other)),
            )),
        }
    }

    pub(crate) fn str_req(&self, name: &str) -> Result<&'a str, ToolError> {
        self.str_opt(name)?
            .ok_or_else(|| ToolError::invalid(name, "is required (a string)"))
    }

    pub(crate) fn bool_opt(&self, name: &str) -> Result<Option<bool>, ToolError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(ToolError::invalid(
                name,
                format!("must be a boolean, got {}", json_type_name(other)),
            )),
        }
    }

    /// A non-negative integer. Integral floats (`3.0`) are accepted; values beyond `usize`
    /// saturate (every caller clamps to a much smaller bound anyway).
    pub(crate) fn usize_opt(&self, name: &str) -> Result<Option<usize>, ToolError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let bad = || ToolError::invalid(name, "must be a non-negative integer");
        let Value::Number(n) = v else {
            return Err(ToolError::invalid(
                name,
                format!("must be a non-negative integer, got {}", json_type_name(v)),
            ));
        };
        if let Some(u) = n.as_u64() {
            return Ok(Some(usize::try_from(u).unwrap_or(usize::MAX)));
        }
        match n.as_f64() {
            Some(f) if f.is_finite() && f >= 0.0 && f.fract() == 0.0 => {
                // Saturating float-to-int conversion (`as` saturates by definition).
                Ok(Some(f as usize))
            }
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn null_fields_are_absent_and_types_are_strict() {
        let v = json!({"a": null, "b": "x", "n": 3.0, "neg": -1, "frac": 1.5, "t": true});
        let p = Params::new(&v).unwrap();
        assert_eq!(p.str_opt("a").unwrap(), None);
        assert_eq!(p.str_req("b").unwrap(), "x");
        assert_eq!(p.usize_opt("n").unwrap(), Some(3));
        assert_eq!(p.bool_opt("t").unwrap(), Some(true));
        for (field, err) in [
            ("neg", p.usize_opt("neg").unwrap_err()),
            ("frac", p.usize_opt("frac").unwrap_err()),
            ("b", p.usize_opt("b").unwrap_err()),
            ("n", p.str_opt("n").unwrap_err()),
            ("a", p.str_req("a").unwrap_err()),
            ("b", p.bool_opt("b").unwrap_err()),
        ] {
            match err {
                ToolError::InvalidParams { field: f, .. } => assert_eq!(f, field),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(Params::new(&json!([1])).is_err());
        assert_eq!(
            Params::new(&Value::Null).unwrap().str_opt("x").unwrap(),
            None
        );
    }
}

//! JSON-RPC 2.0 envelopes and the classification of one inbound text frame.
//!
//! Both ends of the wire use [`classify`]: the daemon for client frames, the client for
//! daemon frames. It applies the framing rules (docs/protocol-choices.md, "Framing") in order,
//! before any method logic runs:
//!
//! 1. JSON nested deeper than [`MAX_DEPTH`] levels is refused with `-32700` by a cheap byte scan,
//!    so no parser ever recurses that far;
//! 2. text that is not JSON → `-32700`, id `null`;
//! 3. a JSON array (a batch) → one `-32600` (`batch requests are not supported`), id `null`;
//! 4. anything else that is not a request, notification or response object → `-32600` naming what
//!    is wrong, echoing the id when the id itself is valid.
//!
//! Ids are numbers or strings (or an explicit `null`) and are carried as the original JSON
//! value so they are echoed with the same type and spelling.

use serde_json::{json, Map, Value};

use crate::errors::RpcError;

/// The deepest JSON nesting accepted (docs/protocol-choices.md, "Framing").
pub const MAX_DEPTH: usize = 128;

/// A classified inbound frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A call that expects an answer with the same `id`.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A call without `id`: never answered.
    Notification { method: String, params: Value },
    /// An answer to a call the receiver made earlier.
    Response {
        id: Value,
        outcome: Result<Value, RpcError>,
    },
}

/// A frame refused before dispatch: answer `error` with `id`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    pub id: Value,
    pub error: RpcError,
}

impl Rejected {
    fn new(id: Value, error: RpcError) -> Self {
        Self { id, error }
    }

    /// The error response frame for this rejection.
    pub fn to_frame(&self) -> String {
        error_frame(&self.id, &self.error)
    }
}

/// Classifies one text frame (see the module docs for the order of checks).
pub fn classify(text: &str) -> Result<Incoming, Rejected> {
    if exceeds_depth(text.as_bytes(), MAX_DEPTH) {
        return Err(Rejected::new(
            Value::Null,
            RpcError::parse(format!("json nested deeper than {MAX_DEPTH} levels")),
        ));
    }
    let value: Value =
        serde_json::from_str(text).map_err(|e| Rejected::new(Value::Null, RpcError::parse(e)))?;
    classify_value(value)
}

/// Classifies an already-parsed JSON value.
pub fn classify_value(value: Value) -> Result<Incoming, Rejected> {
    let mut obj = match value {
        Value::Object(obj) => obj,
        Value::Array(_) => {
            return Err(Rejected::new(
                Value::Null,
                RpcError::invalid_request("batch requests are not supported"),
            ))
        }
        other => {
            return Err(Rejected::new(
                Value::Null,
                RpcError::invalid_request(format!(
                    "expected a JSON object, got {}",
                    json_type_name(&other)
                )),
            ))
        }
    };
    let id = match obj.remove("id") {
        None => None,
        Some(id @ (Value::Number(_) | Value::String(_) | Value::Null)) => Some(id),
        Some(other) => {
            return Err(Rejected::new(
                Value::Null,
                RpcError::invalid_request(format!(
                    "id must be a string, number or null, got {}",
                    json_type_name(&other)
                )),
            ))
        }
    };
    let echo = id.clone().unwrap_or(Value::Null);
    match obj.get("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => {}
        Some(_) => {
            return Err(Rejected::new(
                echo,
                RpcError::invalid_request("jsonrpc must be \"2.0\""),
            ))
        }
        None => {
            return Err(Rejected::new(
                echo,
                RpcError::invalid_request("jsonrpc is required"),
            ))
        }
    }
    if let Some(method) = obj.remove("method") {
        let Value::String(method) = method else {
            return Err(Rejected::new(
                echo,
                RpcError::invalid_request("method must be a string"),
            ));
        };
        let params = match obj.remove("params") {
            None | Some(Value::Null) => Value::Null,
            Some(p @ (Value::Object(_) | Value::Array(_))) => p,
            Some(other) => {
                return Err(Rejected::new(
                    echo,
                    RpcError::invalid_request(format!(
                        "params must be an object or array, got {}",
                        json_type_name(&other)
                    )),
                ))
            }
        };
        return Ok(match id {
            Some(id) => Incoming::Request { id, method, params },
            None => Incoming::Notification { method, params },
        });
    }
    classify_response(echo, id.is_some(), obj)
}

fn classify_response(
    id: Value,
    has_id: bool,
    mut obj: Map<String, Value>,
) -> Result<Incoming, Rejected> {
    let result = obj.remove("result");
    let error = obj.remove("error");
    let outcome = match (result, error) {
        (Some(_), Some(_)) => {
            return Err(Rejected::new(
                id,
                RpcError::invalid_request("a response cannot carry both result and error"),
            ))
        }
        (Some(result), None) => Ok(result),
        (None, Some(error)) => match serde_json::from_value::<RpcError>(error) {
            Ok(err) => Err(err),
            Err(e) => {
                return Err(Rejected::new(
                    id,
                    RpcError::invalid_request(format!("malformed error object: {e}")),
                ))
            }
        },
        (None, None) => {
            return Err(Rejected::new(
                id,
                RpcError::invalid_request("method is required"),
            ))
        }
    };
    if !has_id {
        return Err(Rejected::new(
            Value::Null,
            RpcError::invalid_request("a response needs an id"),
        ));
    }
    Ok(Incoming::Response { id, outcome })
}

/// How an error message names a JSON value's type (`"a string"`, `"an object"`, …).
pub fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// True when `bytes` nests arrays/objects deeper than `limit`, counting only brackets
/// outside string literals. Runs in one pass without allocating.
pub fn exceeds_depth(bytes: &[u8], limit: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

// The frame builders serialize borrowed envelopes straight to text: building a `json!`
// value first would deep-copy the result or params once more per frame. Fields are
// declared in the order the old `Value` maps printed them (sorted), so frames are
// byte-identical to before.

#[derive(serde::Serialize)]
struct ResultFrame<'a> {
    id: &'a Value,
    jsonrpc: &'static str,
    result: &'a Value,
}

#[derive(serde::Serialize)]
struct RequestFrame<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a Value>,
    jsonrpc: &'static str,
    method: &'a str,
    params: &'a Value,
}

fn to_text<T: serde::Serialize>(frame: &T) -> String {
    // Serializing borrowed `Value`s and strings into a `Vec` cannot fail, and the output
    // of serde_json is always UTF-8.
    serde_json::to_string(frame).expect("a JSON-RPC frame always serializes")
}

/// `{"jsonrpc":"2.0","id":…,"result":…}`.
pub fn result_frame(id: &Value, result: &Value) -> String {
    to_text(&ResultFrame {
        id,
        jsonrpc: "2.0",
        result,
    })
}

/// `{"jsonrpc":"2.0","id":…,"error":{…}}`.
pub fn error_frame(id: &Value, error: &RpcError) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": error}).to_string()
}

/// `{"jsonrpc":"2.0","id":…,"method":…,"params":…}`.
pub fn request_frame(id: &Value, method: &str, params: &Value) -> String {
    to_text(&RequestFrame {
        id: Some(id),
        jsonrpc: "2.0",
        method,
        params,
    })
}

/// `{"jsonrpc":"2.0","method":…,"params":…}`.
pub fn notification_frame(method: &str, params: &Value) -> String {
    to_text(&RequestFrame {
        id: None,
        jsonrpc: "2.0",
        method,
        params,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::{INVALID_REQUEST, PARSE_ERROR};
    use proptest::prelude::*;

    fn rejected(text: &str) -> Rejected {
        classify(text).expect_err("expected a rejection")
    }

    #[test]
    fn request_notification_response() {
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","id":"a","method":"m","params":{"x":1}}"#).unwrap(),
            Incoming::Request {
                id: json!("a"),
                method: "m".into(),
                params: json!({"x":1})
            }
        );
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","method":"m"}"#).unwrap(),
            Incoming::Notification {
                method: "m".into(),
                params: Value::Null
            }
        );
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","id":7,"result":null}"#).unwrap(),
            Incoming::Response {
                id: json!(7),
                outcome: Ok(Value::Null)
            }
        );
        let Incoming::Response { outcome, .. } =
            classify(r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32000,"message":"x","data":{"terminal":true}}}"#)
                .unwrap()
        else {
            panic!()
        };
        assert_eq!(outcome.unwrap_err().data, Some(json!({"terminal": true})));
    }

    #[test]
    fn explicit_null_id_is_a_request() {
        assert!(matches!(
            classify(r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#).unwrap(),
            Incoming::Request {
                id: Value::Null,
                ..
            }
        ));
    }

    #[test]
    fn rejections() {
        assert_eq!(rejected("{nope").error.code, PARSE_ERROR);
        let batch = rejected(r#"[{"jsonrpc":"2.0","id":1,"method":"m"}]"#);
        assert_eq!(batch.error.code, INVALID_REQUEST);
        assert_eq!(
            batch.error.message,
            "invalid request: batch requests are not supported"
        );
        assert_eq!(batch.id, Value::Null);
        let r = rejected(r#"{"jsonrpc":"1.0","id":5,"method":"m"}"#);
        assert_eq!((r.error.code, r.id), (INVALID_REQUEST, json!(5)));
        let r = rejected(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"m"}"#);
        assert!(r.error.message.contains("id must be"));
        let r = rejected(r#"{"jsonrpc":"2.0","id":1,"method":3}"#);
        assert!(r.error.message.contains("method must be a string"));
        let r = rejected(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":3}"#);
        assert!(r
            .error
            .message
            .contains("params must be an object or array"));
        let r = rejected(r#"{"jsonrpc":"2.0","id":1}"#);
        assert!(r.error.message.contains("method is required"));
        assert_eq!(rejected("42").error.code, INVALID_REQUEST);
    }

    #[test]
    fn deep_nesting_is_a_parse_error() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(rejected(&deep).error.code, PARSE_ERROR);
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(!exceeds_depth(ok.as_bytes(), MAX_DEPTH));
        let too_deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(exceeds_depth(too_deep.as_bytes(), MAX_DEPTH));
        // Brackets inside strings, including after escaped quotes, do not count.
        let quoted = format!("\"\\\"{}\"", "[".repeat(1000));
        assert!(!exceeds_depth(quoted.as_bytes(), MAX_DEPTH));
    }

    #[test]
    fn frames_match_the_value_encoding() {
        let params = json!({"b": [1, 2.5, null], "a": {"z": "é\n", "y": true}});
        for id in [json!(7), json!("cb-1"), Value::Null] {
            assert_eq!(
                request_frame(&id, "m.x", &params),
                json!({"jsonrpc": "2.0", "id": id, "method": "m.x", "params": params}).to_string()
            );
            assert_eq!(
                result_frame(&id, &params),
                json!({"jsonrpc": "2.0", "id": id, "result": params}).to_string()
            );
        }
        assert_eq!(
            notification_frame("n", &Value::Null),
            json!({"jsonrpc": "2.0", "method": "n", "params": null}).to_string()
        );
    }

    proptest! {
        #[test]
        fn ids_echo_with_their_type(n in any::<i64>(), s in "[a-zA-Z0-9 _-]{0,20}") {
            for id in [json!(n), json!(s.clone())] {
                let frame = request_frame(&id, "m", &json!({}));
                let Incoming::Request { id: got, .. } = classify(&frame).unwrap() else { panic!() };
                prop_assert_eq!(got, id);
            }
        }

        #[test]
        fn depth_scan_agrees_with_nesting(depth in 0usize..300) {
            let text = format!("{}1{}", "{\"a\":[".repeat(depth / 2), "]}".repeat(depth / 2));
            prop_assert_eq!(exceeds_depth(text.as_bytes(), MAX_DEPTH), (depth / 2) * 2 > MAX_DEPTH);
        }

        #[test]
        fn classify_never_panics(text in ".{0,200}") {
            let _ = classify(&text);
        }
    }
}

//! Lenient decoding of an agent runner's reply into an [`AgentOutput`].
//!
//! CAR accepts only its exact `AgentOutput` object. This decoder accepts that and, beyond
//! CAR:
//! - a bare string: the answer itself — unless it is JSON text of an object carrying one of
//!   `answer` / `response` / `text` / `error`, which is decoded as an object;
//! - `answer` missing or null but `response` or `text` present: that becomes the answer;
//! - `tool_calls` as an array (the calls themselves): its length;
//! - `name` missing or null: the spec's name;
//! - `turns` / `duration_ms` missing: 0 (the caller fills a measured duration).
//!
//! Anything else is `Err("invalid AgentOutput: …")` naming the offending field path.

use car_proto::jsonrpc::json_type_name;
use car_proto::methods::multi::AgentOutput;
use serde_json::{Map, Value};

/// Keys whose presence marks a JSON-text string as an encoded output, not a plain answer.
const OUTPUT_KEYS: [&str; 4] = ["answer", "response", "text", "error"];

/// Decode a runner's reply for the agent named `spec_name`.
pub fn parse_output(spec_name: &str, value: Value) -> Result<AgentOutput, String> {
    let map = match value {
        Value::Object(map) => map,
        Value::String(s) => match serde_json::from_str::<Value>(&s) {
            Ok(Value::Object(map)) if OUTPUT_KEYS.iter().any(|k| map.contains_key(*k)) => map,
            _ => return Ok(answer_only(spec_name, s)),
        },
        other => {
            return Err(format!(
                "invalid AgentOutput: expected an object or a string, got {}",
                json_type_name(&other)
            ))
        }
    };
    decode(spec_name, map)
}

fn decode(spec_name: &str, mut map: Map<String, Value>) -> Result<AgentOutput, String> {
    if map.get("answer").is_none_or(Value::is_null) {
        map.remove("answer");
        let alt = ["response", "text"]
            .iter()
            .filter_map(|k| map.get(*k))
            .find(|v| v.is_string())
            .cloned();
        if let Some(alt) = alt {
            map.insert("answer".into(), alt);
        }
    }
    if let Some(Value::Array(calls)) = map.get("tool_calls") {
        let n = calls.len();
        map.insert("tool_calls".into(), Value::from(n));
    }
    if map.get("name").is_none_or(Value::is_null) {
        map.insert("name".into(), Value::String(spec_name.to_owned()));
    }
    serde_path_to_error::deserialize::<_, AgentOutput>(Value::Object(map))
        .map_err(|e| format!("invalid AgentOutput: {e}"))
}

fn answer_only(spec_name: &str, answer: String) -> AgentOutput {
    AgentOutput {
        name: spec_name.to_owned(),
        answer,
        turns: 0,
        tool_calls: 0,
        duration_ms: 0.0,
        error: None,
        tokens: None,
        outcome: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn car_shape_round_trips() {
        let v = json!({"name": "a", "answer": "42", "turns": 3, "tool_calls": 2,
            "duration_ms": 12.5, "error": null,
            "tokens": {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.01}});
        let out = parse_output("spec", v).unwrap();
        assert_eq!(out.name, "a");
        assert_eq!(out.answer, "42");
        assert_eq!((out.turns, out.tool_calls), (3, 2));
        assert_eq!(out.duration_ms, 12.5);
        assert_eq!(out.tokens.unwrap().input_tokens, 10);
        assert!(out.succeeded());
    }

    #[test]
    fn leniencies() {
        let out = parse_output("spec", json!({"response": "r"})).unwrap();
        assert_eq!((out.name.as_str(), out.answer.as_str()), ("spec", "r"));
        assert_eq!((out.turns, out.duration_ms), (0, 0.0));

        let out = parse_output("spec", json!({"text": "t", "answer": null, "name": null})).unwrap();
        assert_eq!((out.name.as_str(), out.answer.as_str()), ("spec", "t"));

        let out = parse_output("spec", json!({"answer": "x", "tool_calls": [{}, {}, {}]})).unwrap();
        assert_eq!(out.tool_calls, 3);

        let out = parse_output("spec", json!({"answer": "kept", "response": "ignored"})).unwrap();
        assert_eq!(out.answer, "kept");

        let out = parse_output("spec", json!({"error": "boom"})).unwrap();
        assert_eq!(out.error.as_deref(), Some("boom"));
        assert!(!out.succeeded());
    }

    #[test]
    fn strings() {
        let out = parse_output("spec", json!("plain answer")).unwrap();
        assert_eq!(
            (out.name.as_str(), out.answer.as_str()),
            ("spec", "plain answer")
        );

        let out = parse_output("spec", json!(r#"{"answer": "inner", "turns": 2}"#)).unwrap();
        assert_eq!((out.answer.as_str(), out.turns), ("inner", 2));

        // JSON text that is not an encoded output stays the answer verbatim.
        let raw = r#"{"winner": "A", "rationale": "better"}"#;
        assert_eq!(parse_output("j", json!(raw)).unwrap().answer, raw);
        assert_eq!(parse_output("j", json!("42")).unwrap().answer, "42");
    }

    #[test]
    fn rejections() {
        let e = parse_output("spec", json!({"answer": "x", "turns": "three"})).unwrap_err();
        assert!(e.starts_with("invalid AgentOutput: turns: "), "{e}");

        let e = parse_output("spec", json!({"answer": 5})).unwrap_err();
        assert!(e.starts_with("invalid AgentOutput: answer: "), "{e}");

        let e = parse_output(
            "spec",
            json!({"answer": "x", "tokens": {"input_tokens": -1}}),
        )
        .unwrap_err();
        assert!(
            e.starts_with("invalid AgentOutput: tokens.input_tokens: "),
            "{e}"
        );

        for v in [json!(null), json!(3), json!([1]), json!(true)] {
            let e = parse_output("spec", v).unwrap_err();
            assert!(
                e.starts_with("invalid AgentOutput: expected an object or a string"),
                "{e}"
            );
        }
    }
}

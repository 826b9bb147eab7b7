use serde_json::json;

use super::*;
use crate::llama::LlamaEngineModel;
use llama_cpp_2::sampling::LlamaSampler;

fn weather() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: Some("Weather for a city".into()),
        parameters: json!({
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        }),
    }
}

#[test]
fn a_small_object_schema_becomes_this_grammar() {
    let g = schema_to_gbnf(&weather().parameters);
    let want = concat!(
        "ws ::= \" \"?\n",
        "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n",
        "string ::= \"\\\"\" char* \"\\\"\"\n",
        "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n",
        "root-value ::= \"{\" ws \"\\\"city\\\"\" ws \":\" ws string ws",
        " ( \",\" ws \"\\\"days\\\"\" ws \":\" ws integer ws )? \"}\"\n",
        "root ::= root-value\n",
    );
    assert_eq!(g, want);
}

#[test]
fn keywords_map_to_rules() {
    let g = schema_to_gbnf(&json!({
        "type": "object",
        "properties": {
            "unit": {"enum": ["c", "f"]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
            "code": {"type": "string", "maxLength": 4},
            "extra": {"$ref": "#/defs/x"},
            "n": {"type": ["number", "null"]},
        },
    }));
    assert!(
        g.contains("root-value-unit ::= \"\\\"c\\\"\" | \"\\\"f\\\"\"\n"),
        "{g}"
    );
    assert!(
        g.contains("root-value-tags ::= \"[\" ws string ws ( \",\" ws string ws ){0,2} \"]\"\n"),
        "{g}"
    );
    assert!(
        g.contains("root-value-code ::= \"\\\"\" char{0,4} \"\\\"\"\n"),
        "{g}"
    );
    assert!(g.contains("root-value-n ::= number | null\n"), "{g}");
    // `$ref` is not understood: any JSON value.
    assert!(g.contains("\"\\\"extra\\\"\" ws \":\" ws value ws"), "{g}");
    assert!(g.contains("value ::= object | array | string | number | boolean | null\n"));
    // No required keys: the object may be empty.
    assert!(g.contains("root-value ::= \"{\" ws ( "), "{g}");
}

#[test]
fn tool_calls_allow_one_or_many() {
    let tool = weather();
    let one = tool_calls_gbnf(&[&tool], false);
    assert!(one.contains("call ::= t0-call\n"), "{one}");
    assert!(one.contains("\"\\\"get_weather\\\"\""), "{one}");
    assert!(one.contains("\"[\" ws call ws \"]\""), "{one}");
    let many = tool_calls_gbnf(&[&tool], true);
    assert!(
        many.contains("\"[\" ws call ws ( \",\" ws call ws )* \"]\""),
        "{many}"
    );
}

fn hermes() -> CallSyntax {
    CallSyntax {
        open: "<tool_call>\n",
        close: "\n</tool_call>",
        separator: "\n",
        args_key: "arguments",
        args_first: false,
    }
}

#[test]
fn native_calls_use_the_format_s_wrapping_and_keys() {
    let tool = weather();
    let g = native_calls_gbnf(&[&tool], true, &hermes());
    let want_call = concat!(
        "t0-call ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws \"\\\"get_weather\\\"\" ws",
        " \",\" ws \"\\\"arguments\\\"\" ws \":\" ws t0-args ws \"}\"\n",
    );
    assert!(g.contains(want_call), "{g}");
    assert!(
        g.contains("block ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n"),
        "{g}"
    );
    assert!(g.ends_with("root ::= block ( \"\\n\" block )*\n"), "{g}");
    // The generic grammar's call objects are the same.
    assert!(tool_calls_gbnf(&[&tool], false).contains(want_call));
}

#[test]
fn rule_names_stay_valid_and_distinct() {
    let g = schema_to_gbnf(&json!({
        "type": "object",
        "properties": {"a_b": {"enum": [1]}, "a-b": {"enum": [2]}},
        "required": ["a_b", "a-b"],
    }));
    assert!(g.contains("root-value-a-b ::= \"1\"\n") || g.contains("root-value-a-b ::= \"2\"\n"));
    assert!(g.contains("root-value-a-b-2 ::= "), "{g}");
}

/// llama.cpp parses the generated grammars (and rejects a broken one).
#[test]
fn llama_cpp_accepts_the_grammars() {
    let Some(path) = std::env::var_os("CAR_TEST_GGUF") else {
        panic!("CAR_TEST_GGUF is not set: run `eval \"$(scripts/fetch-models)\"` first");
    };
    let model = LlamaEngineModel::load(std::path::Path::new(&path), &Default::default()).unwrap();
    let tool = weather();
    let nested = ToolSpec {
        name: "plan \"trip\"".into(),
        description: None,
        parameters: json!({
            "type": "object",
            "properties": {
                "stops": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"at": {"type": "string"}, "nights": {"type": "integer"}},
                    "required": ["at"],
                }},
                "budget": {"type": "number"}, "ok": {"type": "boolean"},
                "mode": {"anyOf": [{"const": "car"}, {"type": "object"}]},
            },
        }),
    };
    for g in [
        schema_to_gbnf(&tool.parameters),
        schema_to_gbnf(&nested.parameters),
        schema_to_gbnf(&json!({})),
        tool_calls_gbnf(&[&tool, &nested], true),
        tool_calls_gbnf(&[&nested], false),
        native_calls_gbnf(&[&tool, &nested], true, &hermes()),
        native_calls_gbnf(
            &[&nested],
            false,
            &CallSyntax {
                open: "",
                close: "",
                separator: "",
                args_key: "parameters",
                args_first: false,
            },
        ),
    ] {
        assert!(
            LlamaSampler::grammar(&model.core.model, &g, "root").is_ok(),
            "rejected:\n{g}"
        );
    }
    assert!(LlamaSampler::grammar(&model.core.model, "root ::= (", "root").is_err());
}

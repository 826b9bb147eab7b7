use serde_json::json;

use super::*;

#[test]
fn messages_translate_to_openai_tool_turns() {
    let out = chat_messages(&[
        Message::new("user", "weather?"),
        Message::assistant_tool_calls(
            "",
            vec![ToolCall::new("c1", "weather", json!({"city": "Oslo"}))],
        ),
        Message::tool_result("c1", "rain"),
        Message::assistant_tool_calls("checking", vec![ToolCall::new("c2", "time", json!({}))]),
        Message {
            role: "tool".into(),
            content: "noon".into(),
            tool_use_id: Some("c2".into()),
            ..Default::default()
        },
    ]);
    assert_eq!(
        Value::Array(out),
        json!([
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "rain"},
            {"role": "assistant", "content": "checking", "tool_calls": [
                {"id": "c2", "type": "function", "function": {"name": "time", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "c2", "content": "noon"},
        ])
    );
}

#[test]
fn tools_and_choice_translate_and_are_sent_only_with_tools() {
    let tools = vec![
        ToolSpec {
            name: "weather".into(),
            description: Some("Weather for a city".into()),
            parameters: json!({"type": "object"}),
        },
        ToolSpec {
            name: "time".into(),
            description: None,
            parameters: json!({"type": "object", "properties": {}}),
        },
    ];
    assert_eq!(
        tools_json(&tools),
        json!([
            {"type": "function", "function": {"name": "weather", "description": "Weather for a city", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "time", "parameters": {"type": "object", "properties": {}}}},
        ])
    );
    for (choice, want) in [
        (ToolChoice::Auto, json!("auto")),
        (ToolChoice::Required, json!("required")),
        (ToolChoice::None, json!("none")),
        (
            ToolChoice::Named("time".into()),
            json!({"type": "function", "function": {"name": "time"}}),
        ),
    ] {
        assert_eq!(tool_choice_json(&choice), want);
    }
    let mut req = GenerateRequest {
        tool_choice: Some(ToolChoice::Auto),
        parallel_tool_calls: Some(false),
        ..Default::default()
    };
    let mut body = json!({});
    add_tools(&mut body, &req);
    assert_eq!(body, json!({}));
    req.tools = tools;
    add_tools(&mut body, &req);
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(body["parallel_tool_calls"], false);
    assert_eq!(body["tools"].as_array().unwrap().len(), 2);
}

#[test]
fn whole_message_tool_calls_parse() {
    let message = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}},
        {"type": "function", "function": {"name": "time", "arguments": ""}},
    ]});
    assert_eq!(
        message_tool_calls(&message, false).unwrap(),
        vec![
            ToolCall::new("c1", "weather", json!({"city": "Oslo"})),
            ToolCall::new("call_1", "time", json!({})),
        ]
    );
    assert!(message_tool_calls(&json!({"content": "hi"}), false)
        .unwrap()
        .is_empty());
    let nameless = json!({"tool_calls": [{"id": "c1", "function": {"arguments": "{}"}}]});
    assert_eq!(
        message_tool_calls(&nameless, false)
            .unwrap_err()
            .to_string(),
        "provider error: malformed response: tool call 0 has no function name"
    );
    let cut = json!({"tool_calls": [{"id": "c1", "function": {"name": "weather", "arguments": "{\"ci"}}]});
    let e = message_tool_calls(&cut, true).unwrap_err().to_string();
    assert!(
        e.starts_with("engine error: tool call \"weather\" has arguments")
            && e.ends_with("(the provider stopped at max_tokens, mid-call)"),
        "{e}"
    );
}

#[test]
fn stream_fragments_assemble_by_index() {
    let mut calls = StreamedToolCalls::default();
    assert!(!calls.push(&json!({"content": "x"})).unwrap());
    assert!(calls.is_empty());
    for delta in [
        json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "weather", "arguments": ""}}]}),
        json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"ci"}}]}),
        json!({"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "time", "arguments": "{}"}}]}),
        // A provider repeating the whole name does not double it.
        json!({"tool_calls": [{"index": 0, "function": {"name": "weather", "arguments": "ty\":\"Os"}}]}),
        json!({"tool_calls": [{"index": 0, "function": {"arguments": "lo\"}"}}]}),
    ] {
        assert!(calls.push(&delta).unwrap());
    }
    assert_eq!(
        calls.finish(false).unwrap(),
        vec![
            ToolCall::new("c1", "weather", json!({"city": "Oslo"})),
            ToolCall::new("c2", "time", json!({})),
        ]
    );
    let mut bad = StreamedToolCalls::default();
    bad.push(&json!({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{nope"}}]}))
        .unwrap();
    assert!(matches!(
        bad.finish(false).unwrap_err(),
        InferenceError::Engine(m) if m.contains("\"f\"")
    ));
    assert!(StreamedToolCalls::default()
        .push(&json!({"tool_calls": {"index": 0}}))
        .is_err());
}

use serde_json::json;

use super::*;

fn tool(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: None,
        parameters: json!({"type": "object", "properties": {}}),
    }
}

fn with_tools(tools: Vec<ToolSpec>) -> GenerateRequest {
    GenerateRequest {
        prompt: Some("hi".into()),
        tools,
        ..Default::default()
    }
}

fn err(req: &GenerateRequest) -> String {
    req.validate_tools().unwrap_err().to_string()
}

#[test]
fn tool_choice_reads_every_accepted_form_and_writes_openai_shape() {
    let cases = [
        (json!("auto"), ToolChoice::Auto),
        (json!("required"), ToolChoice::Required),
        (json!("any"), ToolChoice::Required),
        (json!("none"), ToolChoice::None),
        (json!("lookup"), ToolChoice::Named("lookup".into())),
        (
            json!({"type": "function", "function": {"name": "lookup"}}),
            ToolChoice::Named("lookup".into()),
        ),
        (
            json!({"type": "tool", "name": "lookup"}),
            ToolChoice::Named("lookup".into()),
        ),
        (json!({"type": "any"}), ToolChoice::Required),
    ];
    for (value, want) in cases {
        let got: ToolChoice = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(got, want, "{value}");
    }
    assert_eq!(
        serde_json::to_value(ToolChoice::Named("lookup".into())).unwrap(),
        json!({"type": "function", "function": {"name": "lookup"}})
    );
    assert_eq!(
        serde_json::to_value(ToolChoice::Required).unwrap(),
        json!("required")
    );
    assert!(serde_json::from_value::<ToolChoice>(json!(3)).is_err());
    assert!(serde_json::from_value::<ToolChoice>(json!({"type": "function"})).is_err());
}

#[test]
fn messages_keep_the_old_json_shape_and_read_tool_linkage() {
    let plain: Message = serde_json::from_value(json!({"role": "user", "content": "hi"})).unwrap();
    assert_eq!(plain, Message::new("user", "hi"));
    assert_eq!(
        serde_json::to_value(&plain).unwrap(),
        json!({"role": "user", "content": "hi"})
    );
    let call: Message = serde_json::from_value(json!({
        "role": "assistant", "content": null,
        "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"q": "x"}}]
    }))
    .unwrap();
    assert_eq!(
        call,
        Message::assistant_tool_calls("", vec![ToolCall::new("c1", "lookup", json!({"q": "x"}))])
    );
    let result: Message =
        serde_json::from_value(json!({"role": "tool", "tool_call_id": "c1", "content": "42"}))
            .unwrap();
    assert_eq!(result.tool_use_id.as_deref(), Some("c1"));
    assert!(is_tool_result(&result.role));
    assert_eq!(
        serde_json::to_value(Message::tool_result("c1", "42")).unwrap(),
        json!({"role": "tool_result", "content": "42", "tool_use_id": "c1"})
    );
}

#[test]
fn old_request_json_still_reads_and_writes_without_tool_fields() {
    let req: GenerateRequest = serde_json::from_value(json!({"prompt": "hi"})).unwrap();
    assert!(req.tools.is_empty() && req.tool_choice.is_none());
    let out = serde_json::to_value(&req).unwrap();
    assert!(out.get("tools").is_none() && out.get("tool_choice").is_none());
}

#[test]
fn arguments_parse_into_objects() {
    assert_eq!(
        parse_arguments("f", &json!("{\"a\":1}")).unwrap(),
        json!({"a": 1})
    );
    assert_eq!(parse_arguments("f", &json!("")).unwrap(), json!({}));
    assert_eq!(parse_arguments("f", &json!("  ")).unwrap(), json!({}));
    assert_eq!(parse_arguments("f", &Value::Null).unwrap(), json!({}));
    assert_eq!(
        parse_arguments("f", &json!({"a": 1})).unwrap(),
        json!({"a": 1})
    );
    let e = parse_arguments("lookup", &json!("{\"a\":")).unwrap_err();
    assert!(matches!(e, InferenceError::Engine(_)));
    assert!(
        e.to_string().starts_with(
            "engine error: tool call \"lookup\" has arguments that are not a JSON object: invalid JSON"
        ),
        "{e}"
    );
    assert_eq!(
        parse_arguments("lookup", &json!("[1]"))
            .unwrap_err()
            .to_string(),
        "engine error: tool call \"lookup\" has arguments that are not a JSON object: got an array"
    );
}

#[test]
fn uses_tools_unless_choice_is_none() {
    let mut req = with_tools(vec![tool("a")]);
    assert!(req.uses_tools());
    req.tool_choice = Some(ToolChoice::None);
    assert!(!req.uses_tools());
    assert!(!with_tools(vec![]).uses_tools());
}

#[test]
fn tool_checks_name_the_field() {
    let mut bad = tool("lookup");
    bad.parameters = json!("object");
    let req = with_tools(vec![tool("a"), tool("b"), bad]);
    assert_eq!(
        err(&req),
        "invalid tools: tools[2].parameters of tool \"lookup\" must be a JSON Schema object, got a string"
    );
    assert_eq!(
        err(&with_tools(vec![tool("a"), tool("b"), tool("a")])),
        "invalid tools: tools[2].name \"a\" duplicates tools[0]; tool names must be unique"
    );
    assert_eq!(
        err(&with_tools(vec![tool(" ")])),
        "invalid tools: tools[0].name must not be empty"
    );
    let mut req = with_tools(vec![tool("a")]);
    req.tool_choice = Some(ToolChoice::Named("nope".into()));
    assert_eq!(
        err(&req),
        "invalid tool_choice: names tool \"nope\", which is not among the given tools"
    );
    let mut req = with_tools(vec![]);
    req.tool_choice = Some(ToolChoice::Required);
    assert_eq!(
        err(&req),
        "invalid tool_choice: \"required\" needs at least one tool in tools"
    );
    req.tool_choice = Some(ToolChoice::Named("a".into()));
    req.tools = vec![tool("a")];
    req.validate_tools().unwrap();
}

fn conversation(messages: Vec<Message>) -> GenerateRequest {
    GenerateRequest {
        messages: Some(messages),
        ..Default::default()
    }
}

#[test]
fn tool_results_must_answer_an_earlier_call() {
    let call = Message::assistant_tool_calls("", vec![ToolCall::new("c1", "f", json!({}))]);
    let ok = conversation(vec![
        Message::new("user", "q"),
        call.clone(),
        Message::tool_result("c1", "r"),
    ]);
    ok.validate_tools().unwrap();
    assert_eq!(
        err(&conversation(vec![
            Message::new("user", "q"),
            call.clone(),
            Message::tool_result("c9", "r"),
        ])),
        "invalid messages: messages[2].tool_use_id \"c9\" matches no earlier assistant tool call"
    );
    // The call must come before the result.
    assert_eq!(
        err(&conversation(vec![
            Message::tool_result("c1", "r"),
            call.clone()
        ])),
        "invalid messages: messages[0].tool_use_id \"c1\" matches no earlier assistant tool call"
    );
    let mut no_id = Message::tool_result("x", "r");
    no_id.role = "tool".into();
    no_id.tool_use_id = None;
    assert_eq!(
        err(&conversation(vec![call.clone(), no_id])),
        "invalid messages: messages[1].tool_use_id: a tool result must name the call it answers"
    );
    let mut user_calls = call.clone();
    user_calls.role = "user".into();
    assert_eq!(
        err(&conversation(vec![user_calls])),
        "invalid messages: messages[0].tool_calls: only assistant messages carry tool calls, not \"user\""
    );
    let bad_args = Message::assistant_tool_calls("", vec![ToolCall::new("c1", "f", json!("{}"))]);
    assert_eq!(
        err(&conversation(vec![bad_args])),
        "invalid messages: messages[0].tool_calls[0].arguments of tool \"f\" must be a JSON object, got a string"
    );
}

#[test]
fn plain_turns_render_calls_and_results_as_text() {
    let turns = plain_turns(&[
        Message::new("user", "q"),
        Message::assistant_tool_calls(
            "let me look",
            vec![ToolCall::new("c1", "f", json!({"a": 1}))],
        ),
        Message::assistant_tool_calls("", vec![ToolCall::new("c2", "g", json!({}))]),
        Message::tool_result("c1", "42"),
    ]);
    let want = [
        ("user", "q"),
        (
            "assistant",
            "let me look\n{\"tool_calls\":[{\"id\":\"c1\",\"name\":\"f\",\"arguments\":{\"a\":1}}]}",
        ),
        (
            "assistant",
            "{\"tool_calls\":[{\"id\":\"c2\",\"name\":\"g\",\"arguments\":{}}]}",
        ),
        ("tool", "42"),
    ];
    let got: Vec<(&str, &str)> = turns
        .iter()
        .map(|(r, c)| (r.as_str(), c.as_str()))
        .collect();
    assert_eq!(got, want);
}

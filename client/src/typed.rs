//! Typed members (the contract's [`Member`]s): building a call's params from a member's
//! arguments and projecting the daemon's result back, for every binding at once.
//!
//! This module owns the one implementation of a typed member's behaviour. Each binding's
//! generated member converts its host values to JSON values (`None` for an absent optional
//! argument) and calls [`crate::Client::call_member`], which runs [`build_params`], the
//! call (over the host-management connection for `host` methods), and [`project`]; so
//! Python, Node and Kotlin/Swift members agree by construction:
//!
//! - arguments are checked against their declared kind before anything is sent: a wrong type, a
//!   missing required argument or JSON text that is not JSON is [`Error::InvalidArgument`] naming
//!   the member and the argument (in the caller's [`Naming`]), never a JSON-RPC code;
//! - an absent optional argument is left out of the params; a present one goes to its dotted
//!   `field` (`params.max_tokens` builds `{"params": {"max_tokens": …}}`), and an argument whose
//!   field is `""` is the whole params object;
//! - the result (or its declared top-level field) must have the declared kind, else the call fails
//!   with [`Error::UnexpectedResult`] (`memory.add_fact returned a non-integer: null`).
//!
//! It must not touch the connection (the client does) or know any method by name.

use std::borrow::Cow;

use car_proto::methods::{self, ArgKind, Declaration, Member, ReturnKind};
use serde_json::{Map, Value};

use crate::error::Error;

/// How argument and member names are spelled in error messages: CAR's Python names, or
/// the lowerCamelCase Node and Kotlin/Swift use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Naming {
    #[default]
    Snake,
    Camel,
}

impl Naming {
    /// `name` (a snake_case contract name) in this spelling.
    pub fn spell(self, name: &str) -> Cow<'_, str> {
        match self {
            Naming::Snake => Cow::Borrowed(name),
            Naming::Camel => Cow::Owned(lower_camel(name)),
        }
    }
}

/// `fact_id` → `factId`.
pub fn lower_camel(snake: &str) -> String {
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = !out.is_empty();
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// A typed member's projected result, in the kind its declaration names.
#[derive(Debug, Clone, PartialEq)]
pub enum Projected {
    /// Nothing (the result was received and discarded).
    Unit,
    /// The value as JSON text.
    Json(String),
    /// A string, as is.
    Text(String),
    Int(i64),
    Bool(bool),
    StrList(Vec<String>),
}

impl Projected {
    /// As a JSON value: `null`, JSON text and text as strings, the rest as themselves.
    pub fn into_value(self) -> Value {
        match self {
            Projected::Unit => Value::Null,
            Projected::Json(text) | Projected::Text(text) => Value::String(text),
            Projected::Int(n) => Value::from(n),
            Projected::Bool(b) => Value::Bool(b),
            Projected::StrList(items) => Value::from(items),
        }
    }
}

/// The declaration of `method` and its member named `member` (a snake_case name).
pub fn lookup(
    method: &str,
    member: &str,
) -> Result<(&'static Declaration, &'static Member), Error> {
    let decl = methods::lookup(method)
        .ok_or_else(|| Error::Refused(format!("{method} is not a method of the contract")))?;
    let found = decl
        .members
        .iter()
        .find(|m| m.name == member)
        .ok_or_else(|| Error::Refused(format!("{method} has no typed member {member}")))?;
    Ok((decl, found))
}

/// A short description of a value's JSON type, for error messages.
fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `value` shown in an error message, shortened.
fn shown(value: &Value) -> String {
    const MAX: usize = 120;
    let text = value.to_string();
    if text.len() <= MAX {
        return text;
    }
    let mut cut = MAX;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}

/// An integer, also from a float with no fractional part (JavaScript has only doubles).
fn as_integer(value: &Value) -> Option<i64> {
    let n = value.as_number()?;
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    let f = n.as_f64()?;
    // `i64::MAX as f64` rounds up to 2^63, which no i64 holds, hence the strict bound.
    (f.fract() == 0.0 && f >= i64::MIN as f64 && f < i64::MAX as f64).then_some(f as i64)
}

/// Checks one present argument against its kind; the value to place in the params.
fn check_arg(kind: ArgKind, value: Value) -> Result<Value, String> {
    let wrong =
        |expected: &str, value: &Value| format!("must be {expected}, got {}", describe(value));
    match kind {
        ArgKind::Str if value.is_string() => Ok(value),
        ArgKind::Str => Err(wrong("a string", &value)),
        ArgKind::Int => match as_integer(&value) {
            Some(n) if !value.is_boolean() => Ok(Value::from(n)),
            _ => Err(wrong("an integer", &value)),
        },
        ArgKind::Float if value.is_number() => Ok(value),
        ArgKind::Float => Err(wrong("a number", &value)),
        ArgKind::Bool if value.is_boolean() => Ok(value),
        ArgKind::Bool => Err(wrong("a boolean", &value)),
        ArgKind::StrList => match &value {
            Value::Array(items) if items.iter().all(Value::is_string) => Ok(value),
            _ => Err(wrong("a list of strings", &value)),
        },
        ArgKind::IntList => match &value {
            Value::Array(items)
                if items
                    .iter()
                    .all(|i| !i.is_boolean() && as_integer(i).is_some()) =>
            {
                Ok(Value::Array(
                    items
                        .iter()
                        .filter_map(|i| as_integer(i).map(Value::from))
                        .collect(),
                ))
            }
            _ => Err(wrong("a list of integers", &value)),
        },
        ArgKind::Json => match value {
            Value::String(text) => {
                serde_json::from_str(&text).map_err(|e| format!("is not valid JSON: {e}"))
            }
            other => Err(wrong("a JSON string", &other)),
        },
    }
}

/// Puts `value` at the dotted `path` of `params`, creating objects on the way.
fn place(params: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *params = value;
        return Ok(());
    }
    let mut at = params;
    let mut segments = path.split('.').peekable();
    while let Some(segment) = segments.next() {
        let Value::Object(map) = at else {
            return Err(format!("cannot place {path}: its parent is not an object"));
        };
        if segments.peek().is_none() {
            map.insert(segment.to_string(), value);
            return Ok(());
        }
        at = map
            .entry(segment.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    Ok(())
}

/// The params of a call of `member` with `args` (in declaration order; `None` for an
/// absent optional argument, and trailing optional arguments may be left off).
pub fn build_params(
    member: &Member,
    args: &[Option<Value>],
    naming: Naming,
) -> Result<Value, Error> {
    let name = naming.spell(member.name);
    if args.len() > member.args.len() {
        return Err(Error::InvalidArgument(format!(
            "{name} takes at most {} arguments, got {}",
            member.args.len(),
            args.len()
        )));
    }
    let mut params = Value::Object(Map::new());
    for (i, arg) in member.args.iter().enumerate() {
        let arg_name = naming.spell(arg.name);
        let value = match args.get(i).cloned().flatten() {
            Some(Value::Null) | None if arg.optional => continue,
            Some(Value::Null) | None => {
                return Err(Error::InvalidArgument(format!(
                    "{name}: {arg_name} is required"
                )))
            }
            Some(value) => value,
        };
        let value = check_arg(arg.kind, value)
            .map_err(|problem| Error::InvalidArgument(format!("{name}: {arg_name} {problem}")))?;
        for extra in arg.also {
            place(&mut params, extra, value.clone())
                .map_err(|problem| Error::InvalidArgument(format!("{name}: {problem}")))?;
        }
        place(&mut params, arg.field, value)
            .map_err(|problem| Error::InvalidArgument(format!("{name}: {problem}")))?;
    }
    Ok(params)
}

/// Projects `method`'s `result` through `member`'s declared return.
pub fn project(method: &str, member: &Member, result: Value) -> Result<Projected, Error> {
    let unexpected = |detail: String| Error::UnexpectedResult {
        method: method.to_string(),
        detail,
    };
    let (value, what) = match member.returns.field {
        None => (result, String::new()),
        Some(field) => match result {
            Value::Object(mut map) => match map.remove(field) {
                Some(value) => (value, format!(" {field}")),
                None => {
                    return Err(unexpected(format!(
                        "no {field} field: {}",
                        shown(&Value::Object(map))
                    )))
                }
            },
            other => {
                return Err(unexpected(format!(
                    "{} where an object with {field} was expected: {}",
                    describe(&other),
                    shown(&other)
                )))
            }
        },
    };
    let mismatch =
        |expected: &str, value: &Value| unexpected(format!("{expected}{what}: {}", shown(value)));
    match member.returns.kind {
        ReturnKind::Unit => Ok(Projected::Unit),
        ReturnKind::Json => Ok(Projected::Json(value.to_string())),
        ReturnKind::Text => match value {
            Value::String(text) => Ok(Projected::Text(text)),
            other => Err(mismatch("a non-string", &other)),
        },
        ReturnKind::Int => match value.as_i64() {
            Some(n) => Ok(Projected::Int(n)),
            None => Err(mismatch("a non-integer", &value)),
        },
        ReturnKind::Bool => match value {
            Value::Bool(b) => Ok(Projected::Bool(b)),
            other => Err(mismatch("a non-boolean", &other)),
        },
        ReturnKind::StrList => {
            let items = value.as_array().and_then(|items| {
                items
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
            });
            match items {
                Some(items) => Ok(Projected::StrList(items)),
                None => Err(mismatch("a non-list of strings", &value)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use car_proto::methods::{
        field, int, json, member, opt, opt_at, req, req_at, text, unit, whole,
    };
    use serde_json::json;

    const ADD_FACT: Member = member(
        "add_fact",
        &[
            req("subject", ArgKind::Str),
            req("body", ArgKind::Str),
            req("kind", ArgKind::Str),
            opt("confidence", ArgKind::Float),
            opt("fact_id", ArgKind::Str),
            opt("tags", ArgKind::StrList),
        ],
        int(),
    );

    fn s(v: &str) -> Option<Value> {
        Some(json!(v))
    }

    #[test]
    fn an_argument_may_go_to_several_fields_and_int_lists_are_checked() {
        const GROUNDED: Member = member(
            "infer_with_context",
            &[req("prompt", ArgKind::Str).also(&["context_query"])],
            json(),
        );
        let p = build_params(&GROUNDED, &[s("hi")], Naming::Snake).unwrap();
        assert_eq!(p, json!({"prompt": "hi", "context_query": "hi"}));
        const DETOK: Member = member("detokenize", &[req("tokens", ArgKind::IntList)], text());
        let p = build_params(&DETOK, &[Some(json!([1, 2]))], Naming::Snake).unwrap();
        assert_eq!(p, json!({"tokens": [1, 2]}));
        for bad in [json!([1, "x"]), json!([true]), json!(3)] {
            let e = build_params(&DETOK, &[Some(bad.clone())], Naming::Snake).unwrap_err();
            assert!(
                e.to_string().contains("tokens must be a list of integers"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn params_take_present_arguments_and_omit_absent_ones() {
        let p = build_params(&ADD_FACT, &[s("a"), s("b"), s("fact")], Naming::Snake).unwrap();
        assert_eq!(p, json!({"subject": "a", "body": "b", "kind": "fact"}));
        let p = build_params(
            &ADD_FACT,
            &[
                s("a"),
                s("b"),
                s("fact"),
                Some(json!(1)),
                None,
                Some(json!(["x"])),
            ],
            Naming::Snake,
        )
        .unwrap();
        assert_eq!(
            p,
            json!({"subject": "a", "body": "b", "kind": "fact", "confidence": 1, "tags": ["x"]})
        );
    }

    #[test]
    fn dotted_fields_nest_and_whole_args_are_the_params() {
        const INFER: Member = member(
            "infer",
            &[
                req("prompt", ArgKind::Str),
                opt_at("max_tokens", "params.max_tokens", ArgKind::Int),
                opt_at("temperature", "params.temperature", ArgKind::Float),
                opt_at("tools_json", "tools", ArgKind::Json),
            ],
            field("text", ReturnKind::Text),
        );
        let p = build_params(
            &INFER,
            &[
                s("hi"),
                Some(json!(8.0)),
                Some(json!(0.5)),
                s(r#"[{"name":"t"}]"#),
            ],
            Naming::Snake,
        )
        .unwrap();
        assert_eq!(
            p,
            json!({"prompt": "hi", "params": {"max_tokens": 8, "temperature": 0.5}, "tools": [{"name": "t"}]})
        );
        const START: Member = member("runs_start", &[whole("params_json")], json());
        let p = build_params(&START, &[s(r#"{"intent":"x"}"#)], Naming::Snake).unwrap();
        assert_eq!(p, json!({"intent": "x"}));
    }

    #[test]
    fn bad_arguments_name_the_member_and_argument() {
        let err = |args: &[Option<Value>], naming| match build_params(&ADD_FACT, args, naming) {
            Err(Error::InvalidArgument(text)) => text,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            err(&[s("a"), s("b")], Naming::Snake),
            "add_fact: kind is required"
        );
        assert_eq!(
            err(&[s("a"), s("b"), s("k"), s("high")], Naming::Snake),
            "add_fact: confidence must be a number, got a string"
        );
        assert_eq!(
            err(
                &[s("a"), s("b"), s("k"), None, Some(json!(3))],
                Naming::Camel
            ),
            "addFact: factId must be a string, got an integer"
        );
        assert_eq!(
            err(
                &[s("a"), s("b"), s("k"), None, None, Some(json!(["x", 1]))],
                Naming::Snake
            ),
            "add_fact: tags must be a list of strings, got an array"
        );
        assert_eq!(
            err(
                &[s("a"), s("b"), s("k"), None, None, None, None],
                Naming::Snake
            ),
            "add_fact takes at most 6 arguments, got 7"
        );
        const SET: Member = member(
            "state_set",
            &[
                req("key", ArgKind::Str),
                req_at("value_json", "value", ArgKind::Json),
                opt("n", ArgKind::Int),
            ],
            unit(),
        );
        match build_params(&SET, &[s("k"), s("{nope")], Naming::Snake) {
            Err(Error::InvalidArgument(text)) => {
                assert!(
                    text.starts_with("state_set: value_json is not valid JSON: "),
                    "{text}"
                )
            }
            other => panic!("{other:?}"),
        }
        for (bad, why) in [(json!(1.5), "a number"), (json!(true), "a boolean")] {
            match build_params(&SET, &[s("k"), s("1"), Some(bad)], Naming::Snake) {
                Err(Error::InvalidArgument(text)) => {
                    assert_eq!(text, format!("state_set: n must be an integer, got {why}"))
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn results_project_by_kind_and_field() {
        assert_eq!(
            project("m", &ADD_FACT, json!(3)).unwrap(),
            Projected::Int(3)
        );
        let err = project("memory.add_fact", &ADD_FACT, Value::Null).unwrap_err();
        assert_eq!(
            err.to_string(),
            "memory.add_fact returned a non-integer: null"
        );
        const LIST: Member = member("list_tools", &[], field("tools", ReturnKind::Json));
        let tools = json!({"tools": [{"name": "t"}], "count": 1});
        assert_eq!(
            project("tools.list", &LIST, tools).unwrap(),
            Projected::Json(r#"[{"name":"t"}]"#.into())
        );
        let err = project("tools.list", &LIST, json!([])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tools.list returned an array where an object with tools was expected: []"
        );
        const REMOVED: Member = member("unregister_tool", &[], field("removed", ReturnKind::Int));
        let err = project("tools.unregister", &REMOVED, json!({"removed": "1"})).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"tools.unregister returned a non-integer removed: "1""#
        );
        let err = project("tools.unregister", &REMOVED, json!({"gone": 1})).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"tools.unregister returned no removed field: {"gone":1}"#
        );
        const CTX: Member = member("build_context", &[], text());
        assert_eq!(
            project("memory.build_context", &CTX, json!("c")).unwrap(),
            Projected::Text("c".into())
        );
        assert!(project("memory.build_context", &CTX, json!({"context": "c"})).is_err());
        const UNIT: Member = member("state_set", &[], unit());
        assert_eq!(
            project("state.set", &UNIT, json!("ok")).unwrap(),
            Projected::Unit
        );
        const KEYS: Member = member("state_keys", &[], car_proto::methods::str_list());
        assert_eq!(
            project("state.keys", &KEYS, json!(["a"]))
                .unwrap()
                .into_value(),
            json!(["a"])
        );
        assert!(project("state.keys", &KEYS, json!(["a", 1])).is_err());
    }

    #[test]
    fn every_contract_member_is_found_and_every_other_name_refused() {
        for decl in methods::all() {
            for m in decl.members {
                let (d, found) = lookup(decl.spec.name, m.name).unwrap();
                assert_eq!((d.spec.name, found.name), (decl.spec.name, m.name));
            }
        }
        assert!(matches!(
            lookup("memory.add_fact", "nope"),
            Err(Error::Refused(_))
        ));
        assert!(matches!(
            lookup("no.such", "add_fact"),
            Err(Error::Refused(_))
        ));
        assert_eq!(
            lower_camel("infer_tracked_with_request"),
            "inferTrackedWithRequest"
        );
        assert_eq!(Naming::Camel.spell("value_json"), "valueJson");
    }
}

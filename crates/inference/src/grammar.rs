//! JSON Schema → GBNF (llama.cpp's grammar format), for constrained tool calling.
//!
//! Owns: converting the JSON Schema subset that tool `parameters` use into a GBNF grammar,
//! and the grammar of a whole tool-call answer: the generic `{"tool_calls": [{"name",
//! "arguments"}]}` ([`tool_calls_gbnf`]) or a model's own format such as Hermes'
//! `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>` ([`native_calls_gbnf`]).
//! Must not touch: llama.cpp itself (see `llama::tools`) or the tool IR's checks (`tools`).
//!
//! Supported: `type` (`object`, `string`, `number`, `integer`, `boolean`, `null`, or a list
//! of these), `properties` with `required` (properties appear in the schema's key order,
//! required ones always, optional ones possibly), `items`, `minItems`/`maxItems`,
//! `minLength`/`maxLength`, `enum`, `const`, `anyOf`/`oneOf`, and nested objects. A schema
//! without any of these (`{}`, `$ref`, `allOf`, …) becomes a generic JSON value, as does an
//! object without `properties` (unless `additionalProperties` is `false`: then `{}`).
//! An object schema's output has only the declared properties.

use serde_json::Value;

use crate::tools::ToolSpec;

/// The shared rules. Whitespace (`ws`) is at most one space: compact JSON costs the fewest
/// tokens, and a model cannot pad forever.
const PRIMITIVES: &[(&str, &str)] = &[
    ("ws", r#"" "?"#),
    (
        "char",
        r#"[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})"#,
    ),
    ("string", r#""\"" char* "\"""#),
    ("integer", r#""-"? ("0" | [1-9] [0-9]{0,15})"#),
    (
        "number",
        r#""-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?"#,
    ),
    ("boolean", r#""true" | "false""#),
    ("null", r#""null""#),
    ("value", "object | array | string | number | boolean | null"),
    (
        "object",
        r#""{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}""#,
    ),
    ("array", r#""[" ws ( value ws ( "," ws value ws )* )? "]""#),
];

/// The grammar whose root is one JSON value valid against `schema`.
pub fn schema_to_gbnf(schema: &Value) -> String {
    let mut b = Builder::default();
    let root = b.visit(schema, "root-value");
    b.add("root", root);
    b.finish()
}

/// The grammar of a `response_format` answer: any JSON object for `json_object`, else a
/// value valid against the format's schema (a generic JSON value when it has none).
pub fn response_format_gbnf(format: &car_proto::methods::inference::ResponseFormat) -> String {
    schema_to_gbnf(&format.schema().unwrap_or(Value::Bool(true)))
}

/// The grammar of a tool-call answer: `{"tool_calls": [call, …]}` where each call is
/// `{"name": N, "arguments": A}`, `N` one of `tools` and `A` valid against that tool's
/// `parameters`. `parallel` allows one or more calls; otherwise exactly one.
pub fn tool_calls_gbnf(tools: &[&ToolSpec], parallel: bool) -> String {
    let mut b = Builder::default();
    let ws = b.prim("ws");
    let call = call_rule(&mut b, tools, "arguments", false);
    let more = if parallel {
        format!(r#" ( "," {ws} {call} {ws} )*"#)
    } else {
        String::new()
    };
    let root = format!(
        r#""{{" {ws} "\"tool_calls\"" {ws} ":" {ws} "[" {ws} {call} {ws}{more} "]" {ws} "}}""#
    );
    b.add("root", root);
    b.finish()
}

/// How a model's own call format writes an answer: each call is `open`, then the object
/// `{"name": N, args_key: A}` (`args_key` first when `args_first`), then `close`; calls are
/// separated by `separator`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallSyntax {
    /// Text before each call object (e.g. `<tool_call>\n`); may be empty.
    pub open: &'static str,
    /// Text after each call object (e.g. `\n</tool_call>`); may be empty.
    pub close: &'static str,
    /// Text between calls.
    pub separator: &'static str,
    /// The key of the arguments object (`arguments`, or Llama 3's `parameters`).
    pub args_key: &'static str,
    /// Whether the arguments come before the name.
    pub args_first: bool,
}

/// The grammar of an answer in `syntax`: one call, or with `parallel` one or more, each
/// naming one of `tools` with arguments valid against its `parameters`.
pub fn native_calls_gbnf(tools: &[&ToolSpec], parallel: bool, syntax: &CallSyntax) -> String {
    let mut b = Builder::default();
    let call = call_rule(&mut b, tools, syntax.args_key, syntax.args_first);
    let parts: Vec<String> = [syntax.open, call.as_str(), syntax.close]
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.is_empty())
        .map(|(i, p)| {
            if i == 1 {
                p.to_string()
            } else {
                text_literal(p)
            }
        })
        .collect();
    let block = b.add("block", parts.join(" "));
    let root = if parallel {
        let sep = if syntax.separator.is_empty() {
            String::new()
        } else {
            format!("{} ", text_literal(syntax.separator))
        };
        format!("{block} ( {sep}{block} )*")
    } else {
        block
    };
    b.add("root", root);
    b.finish()
}

/// The rule `call`: one call object for any of `tools` (rules `t<i>-call`, `t<i>-args`).
fn call_rule(b: &mut Builder, tools: &[&ToolSpec], args_key: &str, args_first: bool) -> String {
    let ws = b.prim("ws");
    let mut calls = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let args = b.visit(&tool.parameters, &format!("t{i}-args"));
        let name = literal(&Value::String(tool.name.clone()));
        let name_kv = format!(r#""\"name\"" {ws} ":" {ws} {name} {ws}"#);
        let key = literal(&Value::String(args_key.to_owned()));
        let args_kv = format!(r#"{key} {ws} ":" {ws} {args} {ws}"#);
        let (first, second) = if args_first {
            (args_kv, name_kv)
        } else {
            (name_kv, args_kv)
        };
        let body = format!(r#""{{" {ws} {first} "," {ws} {second} "}}""#);
        calls.push(b.add(&format!("t{i}-call"), body));
    }
    b.add("call", calls.join(" | "))
}

/// `v` as JSON text in a GBNF string literal.
fn literal(v: &Value) -> String {
    text_literal(&serde_json::to_string(v).unwrap_or_default())
}

/// `text` as a GBNF string literal.
fn text_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// GBNF rule names are `[a-zA-Z0-9-]+`.
fn rule_name(s: &str) -> String {
    let name: String = s
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    if name.is_empty() {
        "r".to_owned()
    } else {
        name
    }
}

#[derive(Default)]
struct Builder {
    rules: Vec<(String, String)>,
    primitives: Vec<&'static str>,
}

impl Builder {
    /// Adds `name ::= body` (renamed if the name is taken by a different body); returns the
    /// name to refer to it by.
    fn add(&mut self, name: &str, body: String) -> String {
        let base = rule_name(name);
        let mut name = base.clone();
        let mut n = 1;
        loop {
            match self.rules.iter().find(|(k, _)| *k == name) {
                Some((_, b)) if *b == body => return name,
                Some(_) => {
                    n += 1;
                    name = format!("{base}-{n}");
                }
                None if PRIMITIVES.iter().any(|(p, _)| *p == name) => {
                    n += 1;
                    name = format!("{base}-{n}");
                }
                None => break,
            }
        }
        self.rules.push((name.clone(), body));
        name
    }

    /// Marks a primitive (and what it depends on) as used; returns its name.
    fn prim(&mut self, name: &'static str) -> String {
        if !self.primitives.contains(&name) {
            self.primitives.push(name);
            let deps: &[&'static str] = match name {
                "string" => &["char"],
                "value" => &["object", "array", "string", "number", "boolean", "null"],
                "object" => &["ws", "string", "value"],
                "array" => &["ws", "value"],
                _ => &[],
            };
            for d in deps {
                self.prim(d);
            }
        }
        name.to_owned()
    }

    /// An expression (a rule reference or a group) matching values valid against `schema`.
    fn visit(&mut self, schema: &Value, name: &str) -> String {
        let Some(s) = schema.as_object() else {
            // `true`, or anything that is not a schema object: any value.
            return self.prim("value");
        };
        if let Some(c) = s.get("const") {
            return literal(c);
        }
        if let Some(Value::Array(options)) = s.get("enum") {
            if !options.is_empty() {
                let alts: Vec<String> = options.iter().map(literal).collect();
                return self.add(name, alts.join(" | "));
            }
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(subs)) = s.get(key) {
                if !subs.is_empty() {
                    let alts: Vec<String> = subs
                        .iter()
                        .enumerate()
                        .map(|(i, sub)| self.visit(sub, &format!("{name}-{i}")))
                        .collect();
                    return self.add(name, alts.join(" | "));
                }
            }
        }
        match s.get("type") {
            Some(Value::String(t)) => self.typed(s, t, name),
            Some(Value::Array(types)) if !types.is_empty() => {
                let alts: Vec<String> = types
                    .iter()
                    .enumerate()
                    .map(|(i, t)| match t.as_str() {
                        Some(t) => self.typed(s, t, &format!("{name}-{i}")),
                        None => self.prim("value"),
                    })
                    .collect();
                self.add(name, alts.join(" | "))
            }
            _ if s.contains_key("properties") => self.typed(s, "object", name),
            _ if s.contains_key("items") => self.typed(s, "array", name),
            _ => self.prim("value"),
        }
    }

    fn typed(&mut self, s: &serde_json::Map<String, Value>, t: &str, name: &str) -> String {
        match t {
            "object" => self.object(s, name),
            "array" => self.array(s, name),
            "string" => {
                let min = s.get("minLength").and_then(Value::as_u64);
                let max = s.get("maxLength").and_then(Value::as_u64);
                if min.is_none() && max.is_none() {
                    return self.prim("string");
                }
                let char = self.prim("char");
                let rep = repeat(min.unwrap_or(0), max);
                self.add(name, format!(r#""\"" {char}{rep} "\"""#))
            }
            "number" | "integer" | "boolean" | "null" => {
                let t: &'static str = match t {
                    "number" => "number",
                    "integer" => "integer",
                    "boolean" => "boolean",
                    _ => "null",
                };
                self.prim(t)
            }
            _ => self.prim("value"),
        }
    }

    fn object(&mut self, s: &serde_json::Map<String, Value>, name: &str) -> String {
        let ws = self.prim("ws");
        let props = s.get("properties").and_then(Value::as_object);
        let required: Vec<&str> = s
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut req = Vec::new();
        let mut opt = Vec::new();
        for (key, sub) in props.into_iter().flatten() {
            let value = self.visit(sub, &format!("{name}-{key}"));
            let kv = format!(
                "{} {ws} \":\" {ws} {value} {ws}",
                literal(&key.as_str().into())
            );
            if required.contains(&key.as_str()) {
                req.push(kv);
            } else {
                opt.push(kv);
            }
        }
        // Required keys the schema does not describe take any value.
        for key in required {
            if !props.is_some_and(|p| p.contains_key(key)) {
                let value = self.prim("value");
                req.push(format!(
                    "{} {ws} \":\" {ws} {value} {ws}",
                    literal(&key.into())
                ));
            }
        }
        if req.is_empty() && opt.is_empty() {
            if s.get("additionalProperties") == Some(&Value::Bool(false)) {
                return self.add(name, format!(r#""{{" {ws} "}}""#));
            }
            return self.prim("object");
        }
        let body = if req.is_empty() {
            // Any ordered subset of the optional keys: pick the first one present.
            let alts: Vec<String> = (0..opt.len())
                .map(|i| {
                    let mut alt = opt[i].clone();
                    for later in &opt[i + 1..] {
                        alt.push_str(&format!(r#" ( "," {ws} {later} )?"#));
                    }
                    alt
                })
                .collect();
            format!(r#""{{" {ws} ( {} )? "}}""#, alts.join(" | "))
        } else {
            let mut body = format!(r#""{{" {ws} {}"#, req.join(&format!(r#" "," {ws} "#)));
            for o in &opt {
                body.push_str(&format!(r#" ( "," {ws} {o} )?"#));
            }
            body.push_str(r#" "}""#);
            body
        };
        self.add(name, body)
    }

    fn array(&mut self, s: &serde_json::Map<String, Value>, name: &str) -> String {
        let ws = self.prim("ws");
        let item = match s.get("items") {
            Some(items) => self.visit(items, &format!("{name}-item")),
            None => self.prim("value"),
        };
        let min = s.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        let max = s.get("maxItems").and_then(Value::as_u64);
        if max == Some(0) {
            return self.add(name, format!(r#""[" {ws} "]""#));
        }
        let rest = repeat(min.saturating_sub(1), max.map(|m| m - 1));
        let list = format!(r#"{item} {ws} ( "," {ws} {item} {ws} ){rest}"#);
        let body = if min == 0 {
            format!(r#""[" {ws} ( {list} )? "]""#)
        } else {
            format!(r#""[" {ws} {list} "]""#)
        };
        self.add(name, body)
    }

    /// The rules, used primitives first, then the generated ones (root last).
    fn finish(self) -> String {
        let mut out = String::new();
        for (name, body) in PRIMITIVES {
            if self.primitives.contains(name) {
                out.push_str(&format!("{name} ::= {body}\n"));
            }
        }
        for (name, body) in &self.rules {
            out.push_str(&format!("{name} ::= {body}\n"));
        }
        out
    }
}

/// A GBNF repetition suffix for `min..=max` (unbounded when `max` is `None`).
fn repeat(min: u64, max: Option<u64>) -> String {
    match (min, max) {
        (0, None) => "*".to_owned(),
        (1, None) => "+".to_owned(),
        (min, None) => format!("{{{min},}}"),
        (min, Some(max)) if max <= min => format!("{{{min}}}"),
        (min, Some(max)) => format!("{{{min},{max}}}"),
    }
}

#[cfg(test)]
mod tests;

//! GGUF chat templates (`tokenizer.chat_template`, Jinja) rendered with `minijinja`.
//!
//! Owns: compiling a model's Jinja chat template and rendering a conversation (and tools)
//! through it with Hugging Face's conventions, so the model sees its own prompt format.
//! Must not touch: deciding whether a template is used or how calls are written (see
//! `tool_formats`), or llama.cpp.
//!
//! What a template is given, as `transformers`' `apply_chat_template` gives it:
//! - `messages`: `{role, content}` maps. An assistant turn that made calls also has `tool_calls:
//!   [{id, type: "function", function: {name, arguments}}]` (`arguments` an object; templates apply
//!   `tojson`) and `content` none when it has no text. A tool result is `{role: "tool", content,
//!   tool_call_id, name}` (`name` is the called tool's). A turn without calls has no `tool_calls`
//!   key at all, as templates test `is defined`.
//! - `tools` (only when the request uses tools; otherwise undefined): OpenAI-style `[{type:
//!   "function", function: {name, description, parameters}}]`, also as `xml_tools` (SmolLM3's name
//!   for them).
//! - `add_generation_prompt`, `bos_token`, `eos_token`.
//!
//! The environment matches Hugging Face's: `trim_blocks` and `lstrip_blocks` on, loop
//! controls, Python string/dict methods (`minijinja-contrib`'s pycompat), `tojson` written
//! as Python's `json.dumps` writes it (`", "` and `": "`, no HTML escaping; `indent`,
//! `sort_keys`, `separators`, `ensure_ascii`), `raise_exception(msg)` failing the render,
//! and `strftime_now(fmt)` (UTC). Transformers' `{% generation %}` … `{% endgeneration %}`
//! markers (SmolLM3) are read as a block that always renders.

use std::collections::HashMap;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};

use crate::generate::Message;
use crate::tools::{is_tool_result, ToolSpec};

/// The template's name inside its environment.
const NAME: &str = "chat";

/// A compiled chat template with the special-token texts it is rendered with.
pub struct ChatTemplate {
    env: Environment<'static>,
    mentions_tools: bool,
    bos: String,
    eos: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("mentions_tools", &self.mentions_tools)
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish()
    }
}

impl ChatTemplate {
    /// Compiles `source`; `bos` and `eos` are the vocabulary's special-token texts.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<Self, Error> {
        let mut env = Environment::new();
        let mut syntax = minijinja::syntax::SyntaxConfig::builder();
        syntax.trim_blocks(true).lstrip_blocks(true);
        env.set_syntax(syntax.build()?);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, generation_blocks(source))?;
        Ok(Self {
            env,
            mentions_tools: source.contains("tools"),
            bos: bos.to_owned(),
            eos: eos.to_owned(),
        })
    }

    /// Whether the source mentions `tools` at all (a template that does not cannot render
    /// them).
    pub fn mentions_tools(&self) -> bool {
        self.mentions_tools
    }

    /// The vocabulary's BOS text the template is given.
    pub fn bos(&self) -> &str {
        &self.bos
    }

    /// `conversation` (and `tools`, when given) rendered through the template.
    pub fn render(
        &self,
        conversation: &[Message],
        tools: Option<&[ToolSpec]>,
        add_generation_prompt: bool,
    ) -> Result<String, Error> {
        let mut ctx: Vec<(&str, Value)> = vec![
            ("messages", hf_messages(conversation)),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
            ("bos_token", Value::from(self.bos.as_str())),
            ("eos_token", Value::from(self.eos.as_str())),
        ];
        if let Some(tools) = tools {
            let tools = hf_tools(tools);
            ctx.push(("tools", tools.clone()));
            ctx.push(("xml_tools", tools));
        }
        self.env.get_template(NAME)?.render(Value::from_pairs(ctx))
    }
}

/// The conversation as Hugging Face's message maps (see the module docs).
fn hf_messages(conversation: &[Message]) -> Value {
    let mut names: HashMap<&str, &str> = HashMap::new();
    let mut out = Vec::with_capacity(conversation.len());
    for m in conversation {
        let mut fields: Vec<(&str, Value)> = Vec::new();
        if is_tool_result(&m.role) {
            let id = m.tool_use_id.as_deref().unwrap_or("");
            fields.push(("role", Value::from("tool")));
            fields.push(("content", Value::from(m.content.as_str())));
            fields.push(("tool_call_id", Value::from(id)));
            if let Some(name) = names.get(id) {
                fields.push(("name", Value::from(*name)));
            }
        } else if m.tool_calls.is_empty() {
            fields.push(("role", Value::from(m.role.as_str())));
            fields.push(("content", Value::from(m.content.as_str())));
        } else {
            fields.push(("role", Value::from(m.role.as_str())));
            let content = (!m.content.is_empty()).then_some(m.content.as_str());
            fields.push(("content", Value::from(content)));
            let calls: Vec<Value> = m
                .tool_calls
                .iter()
                .map(|c| {
                    names.insert(c.id.as_str(), c.name.as_str());
                    let function = Value::from_pairs([
                        ("name", Value::from(c.name.as_str())),
                        ("arguments", json_value(&c.arguments)),
                    ]);
                    Value::from_pairs([
                        ("id", Value::from(c.id.as_str())),
                        ("type", Value::from("function")),
                        ("function", function),
                    ])
                })
                .collect();
            fields.push(("tool_calls", Value::from(calls)));
        }
        out.push(Value::from_pairs(fields));
    }
    Value::from(out)
}

/// The tools as OpenAI-style function maps. A missing description is `""`, as templates
/// concatenate it.
fn hf_tools(tools: &[ToolSpec]) -> Value {
    tools
        .iter()
        .map(|t| {
            let function = Value::from_pairs([
                ("name", Value::from(t.name.as_str())),
                (
                    "description",
                    Value::from(t.description.as_deref().unwrap_or("")),
                ),
                ("parameters", json_value(&t.parameters)),
            ]);
            Value::from_pairs([("type", Value::from("function")), ("function", function)])
        })
        .collect()
}

/// A JSON value as a template value (maps keep the JSON's key order).
fn json_value(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::from(()),
        J::Bool(b) => Value::from(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(u)) => Value::from(u),
            _ => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::from(s.as_str()),
        J::Array(items) => items.iter().map(json_value).collect(),
        J::Object(map) => Value::from_pairs(map.iter().map(|(k, v)| (k.as_str(), json_value(v)))),
    }
}

/// `{% generation %}` / `{% endgeneration %}` (transformers' assistant-mask markers) as
/// `{% if true %}` / `{% endif %}`, keeping their whitespace control.
fn generation_blocks(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at + 2..];
        let body = tag.strip_prefix(['-', '+']).unwrap_or(tag);
        let marker = &tag[..tag.len() - body.len()];
        let trimmed = body.trim_start();
        let replaced = ["generation", "endgeneration"].iter().find_map(|word| {
            let after = trimmed.strip_prefix(word)?;
            let after = after.trim_start();
            let close = after.strip_prefix(['-', '+']).unwrap_or(after);
            close.starts_with("%}").then(|| {
                let close_marker = &after[..after.len() - close.len()];
                let head = if *word == "generation" {
                    "if true"
                } else {
                    "endif"
                };
                let used = tag.len() - close.len() + 2;
                (format!("{{%{marker} {head} {close_marker}%}}"), used)
            })
        });
        match replaced {
            Some((text, used)) => {
                out.push_str(&text);
                rest = &tag[used..];
            }
            None => {
                out.push_str("{%");
                rest = tag;
            }
        }
    }
    out.push_str(rest);
    out
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `tojson` as Hugging Face defines it: Python's `json.dumps` (no HTML escaping).
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_owned()),
            None => Some(" ".repeat(usize::try_from(v)?)),
        },
    };
    let separators: Option<Value> = kwargs.get("separators")?;
    let (item_sep, key_sep) = match separators {
        Some(v) if !v.is_none() => {
            let item = v.get_item(&Value::from(0))?;
            let key = v.get_item(&Value::from(1))?;
            (item.to_string(), key.to_string())
        }
        _ if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        _ => (", ".to_owned(), ": ".to_owned()),
    };
    let mut json = PyJson {
        out: String::new(),
        indent,
        item_sep,
        key_sep,
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    json.value(value, 0)?;
    Ok(Value::from_safe_string(json.out))
}

/// `v` as the templates' `tojson` writes it (Python's `json.dumps` defaults).
#[cfg_attr(not(feature = "engines"), allow(dead_code))]
pub(crate) fn python_json(v: &serde_json::Value) -> String {
    let mut json = PyJson {
        out: String::new(),
        indent: None,
        item_sep: ", ".to_owned(),
        key_sep: ": ".to_owned(),
        sort_keys: false,
        ensure_ascii: false,
    };
    match json.value(&json_value(v), 0) {
        Ok(()) => json.out,
        Err(_) => v.to_string(),
    }
}

/// Python `json.dumps` over template values.
struct PyJson {
    out: String,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

impl PyJson {
    fn value(&mut self, v: &Value, depth: usize) -> Result<(), Error> {
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => self.out.push_str("null"),
            ValueKind::Bool => self
                .out
                .push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number if v.is_integer() => self.out.push_str(&v.to_string()),
            ValueKind::Number => self.out.push_str(&py_float(f64::try_from(v.clone())?)),
            ValueKind::String | ValueKind::Plain => self.string(&v.to_string()),
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort();
                }
                let items = keys
                    .into_iter()
                    .map(|k| v.get_item(&k).map(|val| (k, val)))
                    .collect::<Result<Vec<_>, _>>()?;
                self.out.push('{');
                for (i, (k, val)) in items.iter().enumerate() {
                    self.item(i, depth);
                    self.string(&k.to_string());
                    self.out.push_str(&self.key_sep.clone());
                    self.value(val, depth + 1)?;
                }
                self.close('}', items.is_empty(), depth);
            }
            ValueKind::Invalid => {
                return Err(Error::new(
                    ErrorKind::BadSerialization,
                    "cannot serialize an invalid value to JSON",
                ))
            }
            _ => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    self.item(i, depth);
                    self.value(item, depth + 1)?;
                }
                self.close(']', items.is_empty(), depth);
            }
        }
        Ok(())
    }

    fn item(&mut self, i: usize, depth: usize) {
        if i > 0 {
            self.out.push_str(&self.item_sep.clone());
        }
        if let Some(indent) = &self.indent {
            self.out.push('\n');
            self.out.push_str(&indent.repeat(depth + 1));
        }
    }

    fn close(&mut self, c: char, empty: bool, depth: usize) {
        if let (Some(indent), false) = (&self.indent, empty) {
            self.out.push('\n');
            self.out.push_str(&indent.repeat(depth));
        }
        self.out.push(c);
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                '\u{8}' => self.out.push_str("\\b"),
                '\u{c}' => self.out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && !c.is_ascii()) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        self.out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }
}

/// A float as Python's `repr` writes it (`1.0`, `0.5`, `1e-05`, `1e+16`).
fn py_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let plain = format!("{v}");
        if plain.contains('.') {
            plain
        } else {
            plain + ".0"
        }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

/// `strftime_now(format)`: the current UTC time through `strftime` (chrono's directives,
/// which are glibc's; unknown ones are kept as written).
fn strftime_now(format: String) -> String {
    car_proto::clock::strftime(&format, &car_proto::clock::now())
}

#[cfg(test)]
pub(crate) mod tests;

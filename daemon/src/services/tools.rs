//! `tools.*`: the tools this connection's client can execute when a proposal calls them.
//!
//! `tools.register` takes one descriptor `{name, description?, parameters?}` or an array of
//! them; the whole request is validated before anything is registered (no partial writes).
//! Registering an existing name replaces its descriptor. `parameters`, when present, must
//! be a JSON object (a JSON Schema for the tool's parameters).

use car_proto::errors::RpcError;
use serde_json::{json, Value};

use super::params::Params;
use crate::dispatch::{Call, HandlerFuture};
use crate::runtime::ToolDescriptor;

/// Most tools one connection may register.
pub const MAX_TOOLS: usize = 4096;

fn descriptor(value: &Value, what: &str) -> Result<ToolDescriptor, RpcError> {
    let p = if what == "params" {
        Params::new(value.clone())?
    } else {
        Params::element(value, what)?
    };
    let p = p.only(&["name", "description", "parameters"])?;
    let name = p.str("name")?;
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(RpcError::invalid_params(format!(
            "tool name must not contain white space, got {name:?}"
        )));
    }
    let description = p.opt_text("description")?;
    let parameters = p.opt_object("parameters")?.map(Value::Object);
    Ok(ToolDescriptor {
        name,
        description,
        parameters,
    })
}

/// Parses one descriptor or an array of them.
pub fn parse_descriptors(value: &Value, what: &str) -> Result<Vec<ToolDescriptor>, RpcError> {
    match value {
        Value::Array(items) => {
            if items.len() > MAX_TOOLS {
                return Err(RpcError::invalid_params(format!(
                    "{what} has {} tools, at most {MAX_TOOLS}",
                    items.len()
                )));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, v)| descriptor(v, &format!("{what}[{i}]")))
                .collect()
        }
        other => Ok(vec![descriptor(other, what)?]),
    }
}

/// Registers validated descriptors; refuses to exceed [`MAX_TOOLS`].
pub fn install(call: &Call, tools: Vec<ToolDescriptor>) -> Result<usize, RpcError> {
    call.session.runtime(|rt| {
        let new = tools
            .iter()
            .filter(|t| !rt.tools.contains_key(&t.name))
            .count();
        if rt.tools.len() + new > MAX_TOOLS {
            return Err(RpcError::invalid_params(format!(
                "a connection may register at most {MAX_TOOLS} tools"
            )));
        }
        for t in tools {
            rt.tools.insert(t.name.clone(), t);
        }
        Ok(rt.tools.len())
    })
}

/// `tools.register <descriptor | [descriptor]>` → `{registered, count}`.
pub fn register(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let tools = parse_descriptors(&params, "params")?;
        let registered = tools.len();
        let count = install(&call, tools)?;
        Ok(json!({"registered": registered, "count": count}))
    })
}

/// `tools.list` → descriptors sorted by name.
pub fn list(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        Params::new(params)?.only(&[])?;
        Ok(call
            .session
            .runtime(|rt| json!(rt.tools.values().collect::<Vec<_>>())))
    })
}

/// `tools.unregister {name}` → how many were removed (0 or 1).
pub fn unregister(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let name = Params::new(params)?.only(&["name"])?.str("name")?;
        Ok(json!(call.session.runtime(|rt| usize::from(
            rt.tools.remove(&name).is_some()
        ))))
    })
}

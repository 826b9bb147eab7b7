//! `tools.*`: the connection's tool registry (at most [`MAX_TOOLS`]).
//!
//! `tools.register` takes one `ToolDefinition` or an array, all or nothing; a name may not
//! contain white space; `parameters`, when given, is the tool's JSON Schema object.
//! Registering a name again replaces it. `tools.list` answers CAR's
//! `{tools: [ToolSchema], count}`, sorted by name, each with `source: "user_defined"`.

use car_proto::errors::RpcError;
use car_proto::methods::fields::{NoParams, OneOrMany};
use car_proto::methods::tools::{
    self as m, ListReply, NameParams, ToolDefinition, ToolSchema, UnregisterReply,
};
use serde_json::Value;

use crate::handler::{Call, Routes};
use crate::runtime::ToolDescriptor;

/// Most tools one connection may hold.
pub const MAX_TOOLS: usize = 4096;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Register, _, _>(register_tools)
        .add::<m::List, _, _>(list)
        .add::<m::Unregister, _, _>(unregister);
}

/// Checks definitions (`what` names the field in messages: `tools` inside `session.init`,
/// `""` when the definitions are the params themselves).
pub fn descriptors(defs: Vec<ToolDefinition>, what: &str) -> Result<Vec<ToolDescriptor>, RpcError> {
    if defs.len() > MAX_TOOLS {
        let field = if what.is_empty() { "params" } else { what };
        return Err(RpcError::invalid_params(format!(
            "{field}: has {} tools, at most {MAX_TOOLS}",
            defs.len()
        )));
    }
    defs.into_iter()
        .enumerate()
        .map(|(i, d)| {
            let name = d.name.into_string();
            if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(RpcError::invalid_params(format!(
                    "{what}[{i}].name: must not contain white space, got {name:?}"
                )));
            }
            Ok(ToolDescriptor {
                name,
                description: d.description,
                parameters: d.parameters.map(Value::Object),
                returns: d.returns.map(Value::Object),
                idempotent: d.idempotent.unwrap_or(false),
                cache_ttl_secs: d.cache_ttl_secs,
                rate_limit: d.rate_limit,
                builtin: false,
            })
        })
        .collect()
}

/// Adds tools to the connection's registry, all or nothing; returns the new total.
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

async fn register_tools(call: Call, defs: OneOrMany<ToolDefinition>) -> Result<u64, RpcError> {
    let tools = descriptors(defs.0, "")?;
    let registered = tools.len() as u64;
    install(&call, tools)?;
    Ok(registered)
}

fn schema_of(t: &ToolDescriptor) -> ToolSchema {
    ToolSchema {
        name: t.name.clone(),
        description: t.description.clone().unwrap_or_default(),
        parameters: t
            .parameters
            .clone()
            .unwrap_or_else(|| serde_json::json!({"type": "object"})),
        returns: t.returns.clone(),
        idempotent: t.idempotent,
        cache_ttl_secs: t.cache_ttl_secs,
        rate_limit: t.rate_limit.clone(),
        source: if t.builtin { "builtin" } else { "user_defined" }.into(),
    }
}

async fn list(call: Call, _: NoParams) -> Result<ListReply, RpcError> {
    let tools: Vec<ToolSchema> = call
        .session
        .runtime(|rt| rt.tools.values().map(schema_of).collect());
    Ok(ListReply {
        count: tools.len(),
        tools,
    })
}

async fn unregister(call: Call, p: NameParams) -> Result<UnregisterReply, RpcError> {
    let removed = call
        .session
        .runtime(|rt| rt.tools.remove(p.name.as_str()).is_some());
    Ok(UnregisterReply {
        unregistered: p.name.into_string(),
        removed: u64::from(removed),
    })
}

//! `tools.*`: the connection's tool registry (at most [`MAX_TOOLS`](registration::MAX_TOOLS)).
//!
//! `tools.register` takes one `ToolDefinition` or an array, all or nothing; a name may not
//! contain white space; `parameters`, when given, is the tool's JSON Schema object.
//! Registering a name again replaces it. `tools.list` answers CAR's
//! `{tools: [ToolSchema], count}`, sorted by name, each with its `source`: `user_defined`,
//! `builtin` (`agents.register_basics`) or `mcp` (an enabled connector tool).

use car_proto::errors::RpcError;
use car_proto::methods::fields::{NoParams, OneOrMany};
use car_proto::methods::tools::{
    self as m, ListReply, NameParams, ToolDefinition, ToolSchema, UnregisterReply,
};

use crate::handler::{Call, Routes};
use crate::state::registration::{self, ToolDescriptor};

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Register, _, _>(register_tools)
        .add::<m::List, _, _>(list)
        .add::<m::Unregister, _, _>(unregister);
}

async fn register_tools(call: Call, defs: OneOrMany<ToolDefinition>) -> Result<u64, RpcError> {
    let tools = registration::tool_descriptors(defs.0, "")?;
    let registered = tools.len() as u64;
    registration::install_tools(&call.session, tools)?;
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
        source: if t.builtin {
            "builtin"
        } else if t.connector.is_some() {
            "mcp"
        } else {
            "user_defined"
        }
        .into(),
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

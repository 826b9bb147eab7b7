//! `state.*`: the connection's key-value state, optionally partitioned by `tenant_id` (an
//! empty `tenant_id` is the unscoped partition). `state.get` answers `null` for an absent
//! key. Proposals read and write the unscoped partition.

use car_proto::errors::RpcError;
use car_proto::methods::fields::tenant;
use car_proto::methods::state::{self as m, KeyParams, SetParams, TenantParams};
use serde_json::{Map, Value};

use crate::handler::{Call, Routes};

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Get, _, _>(get)
        .add::<m::Set, _, _>(set)
        .add::<m::Exists, _, _>(exists)
        .add::<m::Keys, _, _>(keys)
        .add::<m::Snapshot, _, _>(snapshot);
}

async fn get(call: Call, p: KeyParams) -> Result<Value, RpcError> {
    Ok(call
        .session
        .runtime(|rt| rt.get(tenant(&p.tenant_id), &p.key).cloned())
        .unwrap_or(Value::Null))
}

async fn set(call: Call, p: SetParams) -> Result<m::Ok, RpcError> {
    call.session.runtime(|rt| {
        rt.partition_mut(tenant(&p.tenant_id))
            .insert(p.key.into_string(), p.value)
    });
    Ok(m::Ok::Ok)
}

async fn exists(call: Call, p: KeyParams) -> Result<bool, RpcError> {
    Ok(call
        .session
        .runtime(|rt| rt.get(tenant(&p.tenant_id), &p.key).is_some()))
}

async fn keys(call: Call, p: TenantParams) -> Result<Vec<String>, RpcError> {
    Ok(call.session.runtime(|rt| {
        rt.partition(tenant(&p.tenant_id))
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }))
}

async fn snapshot(call: Call, p: TenantParams) -> Result<Map<String, Value>, RpcError> {
    Ok(call
        .session
        .runtime(|rt| match rt.snapshot(tenant(&p.tenant_id)) {
            Value::Object(map) => map,
            _ => Map::new(),
        }))
}

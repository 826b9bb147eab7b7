//! `state.*`: the connection's key-value state, optionally partitioned by `tenant_id`.
//!
//! Keys are non-empty strings of at most 1 KiB; values are any JSON. `state.get` answers
//! `null` for an absent key. Proposals read and write the default (no tenant) partition.

use car_proto::errors::RpcError;
use serde_json::{json, Value};

use super::params::Params;
use crate::dispatch::{Call, HandlerFuture};

fn tenant(p: &Params) -> Result<Option<String>, RpcError> {
    p.opt_str("tenant_id")
}

/// `state.get {key, tenant_id?}` → the value or `null`.
pub fn get(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["key", "tenant_id"])?;
        let (key, tenant) = (p.str("key")?, tenant(&p)?);
        Ok(call
            .session
            .runtime(|rt| rt.get(tenant.as_deref(), &key).cloned())
            .unwrap_or(Value::Null))
    })
}

/// `state.set {key, value, tenant_id?}` → `{ok: true}`.
pub fn set(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["key", "value", "tenant_id"])?;
        let (key, tenant) = (p.str("key")?, tenant(&p)?);
        let value = p.required_value("value")?.clone();
        call.session
            .runtime(|rt| rt.partition_mut(tenant.as_deref()).insert(key, value));
        Ok(json!({"ok": true}))
    })
}

/// `state.exists {key, tenant_id?}` → boolean.
pub fn exists(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["key", "tenant_id"])?;
        let (key, tenant) = (p.str("key")?, tenant(&p)?);
        Ok(json!(call
            .session
            .runtime(|rt| rt.get(tenant.as_deref(), &key).is_some())))
    })
}

/// `state.keys {tenant_id?}` → sorted keys.
pub fn keys(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["tenant_id"])?;
        let tenant = tenant(&p)?;
        let keys: Vec<String> = call.session.runtime(|rt| {
            rt.partition(tenant.as_deref())
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        });
        Ok(json!(keys))
    })
}

/// `state.snapshot {tenant_id?}` → the partition as an object.
pub fn snapshot(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["tenant_id"])?;
        let tenant = tenant(&p)?;
        Ok(call.session.runtime(|rt| rt.snapshot(tenant.as_deref())))
    })
}

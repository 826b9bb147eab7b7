//! `state.*`: the connection's key-value state, optionally partitioned by `tenant_id`
//! (an empty `tenant_id` is the unscoped partition). Keys are [`Name`]s; values any JSON.

use crate::methods::Access;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, Name};
use super::member::{boolean, json, member, opt_at, req, req_at, str_list, unit, ArgKind::*};
use super::{op, Declaration};

/// `{key, tenant_id?}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct KeyParams {
    pub key: Name,
    #[serde(default)]
    pub tenant_id: Option<String>,
}

/// `{key, value?, tenant_id?}`; an absent value stores `null`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SetParams {
    pub key: Name,
    #[serde(default)]
    pub value: Json,
    #[serde(default)]
    pub tenant_id: Option<String>,
}

/// `{tenant_id?}`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct TenantParams {
    #[serde(default)]
    pub tenant_id: Option<String>,
}

/// CAR's `state.set` answers the string `"ok"`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub enum Ok {
    #[serde(rename = "ok")]
    Ok,
}

const TENANT: super::Arg = opt_at("tenant", "tenant_id", Str);

crate::method!(
    /// `state.get` → the value or `null`.
    Get = op("state.get", "a state value, or null");
    access: Access::session();
    KeyParams => Json;
    member("state_get", &[req("key", Str), TENANT], json())
);
crate::method!(
    /// `state.set` → `"ok"`.
    Set = op("state.set", "set a state value");
    access: Access::session();
    SetParams => Ok;
    member("state_set", &[req("key", Str), req_at("value_json", "value", Json), TENANT], unit())
);
crate::method!(
    /// `state.exists` → boolean.
    Exists = op("state.exists", "whether a state key is set");
    access: Access::session();
    KeyParams => bool;
    member("state_exists", &[req("key", Str), TENANT], boolean())
);
crate::method!(
    /// `state.keys` → the partition's keys, sorted.
    Keys = op("state.keys", "the state keys, sorted");
    access: Access::session();
    TenantParams => Vec<String>;
    member("state_keys", &[TENANT], str_list())
);
crate::method!(
    /// `state.snapshot` → the partition as an object.
    Snapshot = op("state.snapshot", "the whole state partition as an object");
    access: Access::session();
    TenantParams => serde_json::Map<String, Json>;
    member("state_snapshot", &[TENANT], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Get>(),
    Declaration::of::<Set>(),
    Declaration::of::<Exists>(),
    Declaration::of::<Keys>(),
    Declaration::of::<Snapshot>(),
];

//! The hints a registered tool carries (`tools.register`'s `rate_limit` and
//! `cache_ttl_secs`), applied to a proposal's calls of it on the connection that registered
//! it (CAR: "hints the engine wires up automatically").
//!
//! - `rate_limit {max_calls, interval_secs}`: a sliding window per connection, as a policy file's
//!   `rate_limit_tool` rule (`crate::state::policy_files::admit_rates`). A call that would be the
//!   `max_calls + 1`-th within the trailing `interval_secs` is `rejected`
//!   (`rate_limit_tool:<tool>`), and takes no slot.
//! - `cache_ttl_secs`: a successful answer is kept for that long, keyed by the tool and its
//!   parameters' compact JSON, and a call with the same parameters within it is answered from the
//!   cache without a callback (`tool.cached` event, `attempts: 0`). At most [`MAX_CACHED`] answers
//!   per connection (the oldest go first), each at most [`MAX_CACHED_BYTES`]; larger answers are
//!   not kept.

use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::state::per_connection::{Runtime, ToolDescriptor};

/// Cached answers per connection at most.
pub const MAX_CACHED: usize = 1024;
/// The largest answer cached (bytes of compact JSON).
pub const MAX_CACHED_BYTES: usize = 1 << 20;

fn key(tool: &str, parameters: &Map<String, Value>) -> String {
    format!("{tool}\u{0}{}", Value::Object(parameters.clone()))
}

/// Why the rate limit refuses this call now, if it does (the call takes a slot if not).
pub fn rate_refusal(rt: &mut Runtime, tool: &ToolDescriptor) -> Option<String> {
    let limit = tool.rate_limit.as_ref()?;
    let rule = crate::state::registration::tool_rate_limit(&tool.name, limit).ok()?;
    let mut windows = std::mem::take(&mut rt.tool_rate_windows);
    let refused =
        crate::state::policy_files::admit_rates(&mut windows, &[rule], &tool.name, Instant::now());
    rt.tool_rate_windows = windows;
    refused.first().map(|f| format!("{}: {}", f.rule, f.reason))
}

/// A fresh cached answer for this call, if the tool caches and one is kept.
pub fn cached(
    rt: &mut Runtime,
    tool: &ToolDescriptor,
    parameters: &Map<String, Value>,
) -> Option<Value> {
    tool.cache_ttl_secs.filter(|t| *t > 0)?;
    let k = key(&tool.name, parameters);
    match rt.tool_cache.get(&k) {
        Some((until, value)) if *until > Instant::now() => Some(value.clone()),
        Some(_) => {
            rt.tool_cache.remove(&k);
            None
        }
        None => None,
    }
}

/// Keeps a successful answer when the tool caches (see the module docs).
pub fn remember(
    rt: &mut Runtime,
    tool: &ToolDescriptor,
    parameters: &Map<String, Value>,
    output: &Value,
) {
    let Some(ttl) = tool.cache_ttl_secs.filter(|t| *t > 0) else {
        return;
    };
    if output.to_string().len() > MAX_CACHED_BYTES {
        return;
    }
    let now = Instant::now();
    rt.tool_cache.retain(|_, (until, _)| *until > now);
    if rt.tool_cache.len() >= MAX_CACHED {
        if let Some(oldest) = rt
            .tool_cache
            .iter()
            .min_by_key(|(_, (until, _))| *until)
            .map(|(k, _)| k.clone())
        {
            rt.tool_cache.remove(&oldest);
        }
    }
    let until = now + Duration::from_secs(ttl.min(366 * 86_400));
    rt.tool_cache
        .insert(key(&tool.name, parameters), (until, output.clone()));
}

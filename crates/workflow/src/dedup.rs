//! `dedup`: drop items already seen by earlier runs.
//!
//! A seen-set is a JSON object `{hash: first_seen_unix_secs}` at `<dedup_dir>/<store>.json`,
//! rewritten atomically and under a process-wide lock, so concurrent runs in one daemon do
//! not lose each other's updates. An item's hash is the SHA-256 of its canonical JSON
//! (object keys sorted, no whitespace), or, with `hash_fields`, of the object made of just
//! those fields (absent ones as `null`). Entries older than `ttl_secs` are evicted before
//! the check, so an item reappears once its entry expires. Unseen items (a duplicate within
//! one batch counts as seen) are written to `into` as an array; the stage exposes
//! `stage.<id>.unseen_count` and `stage.<id>.total_count`. A missing or non-array
//! `items_from` is an empty batch. Store names are restricted to `[A-Za-z0-9_.-]`.

use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::checkpoint::{read_capped, write_atomic};
use crate::model::{DedupStep, Object};
use crate::steps::StepRun;

static STORE_LOCK: Mutex<()> = Mutex::new(());

pub(crate) fn run(dir: &Path, d: &DedupStep, state: &Object) -> Result<StepRun, String> {
    if d.store.is_empty()
        || d.store.starts_with('.')
        || !d
            .store
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        return Err(format!("invalid dedup store name {:?}", d.store));
    }
    let items = match state.get(&d.items_from) {
        Some(Value::Array(items)) => items.as_slice(),
        _ => &[],
    };
    let path = dir.join(format!("{}.json", d.store));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());

    let _guard = STORE_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut seen: Object = match read_capped(&path) {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes)
            .map_err(|e| format!("dedup store {:?} is corrupt: {e}", d.store))?,
        Ok(None) => Object::new(),
        Err(e) => return Err(format!("cannot read dedup store {:?}: {e}", d.store)),
    };
    if let Some(ttl) = d.ttl_secs {
        seen.retain(|_, at| at.as_u64().is_some_and(|at| now.saturating_sub(at) < ttl));
    }
    let mut unseen = Vec::new();
    for item in items {
        let hash = hash_item(item, d.hash_fields.as_deref());
        if !seen.contains_key(&hash) {
            seen.insert(hash, json!(now));
            unseen.push(item.clone());
        }
    }
    let bytes = serde_json::to_vec(&seen).map_err(|e| e.to_string())?;
    write_atomic(dir, &path, &bytes).map_err(|e| e.to_string())?;
    drop(_guard);

    let (total, fresh) = (items.len(), unseen.len());
    tracing::debug!(store = %d.store, total, unseen = fresh, "dedup");
    let mut out = StepRun::ok(
        json!({"type": "dedup", "total_count": total, "unseen_count": fresh}),
        Value::Array(unseen.clone()).to_string(),
    );
    out.scoped.insert("unseen_count".into(), json!(fresh));
    out.scoped.insert("total_count".into(), json!(total));
    out.global.insert(d.into.clone(), Value::Array(unseen));
    Ok(out)
}

fn hash_item(item: &Value, fields: Option<&[String]>) -> String {
    let canonical = match (fields, item) {
        (Some(fields), Value::Object(m)) => {
            let picked: Object = fields
                .iter()
                .map(|f| (f.clone(), m.get(f).cloned().unwrap_or(Value::Null)))
                .collect();
            canonical_json(&Value::Object(picked))
        }
        _ => canonical_json(item),
    };
    hex::encode(Sha256::digest(canonical.as_bytes()))
}

/// JSON with object keys sorted, whatever the map's own order.
fn canonical_json(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical_json(&m[k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical_json).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_ignores_key_order_and_unlisted_fields() {
        let a = json!({"x": 1, "y": {"b": 2, "a": 1}});
        let b = json!({"y": {"a": 1, "b": 2}, "x": 1});
        assert_eq!(hash_item(&a, None), hash_item(&b, None));
        let fields = ["x".to_string()];
        assert_eq!(
            hash_item(&json!({"x": 1, "t": 5}), Some(&fields)),
            hash_item(&json!({"x": 1, "t": 9}), Some(&fields))
        );
        assert_ne!(
            hash_item(&json!({"x": 1}), None),
            hash_item(&json!({"x": 2}), None)
        );
    }
}

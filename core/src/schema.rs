//! The `server.schema` document, generated from the method table, and its digest.
//!
//! The digest is the lower-case hex SHA-256 of the schema's canonical JSON: object keys
//! sorted (serde_json's default map), no insignificant white space. It changes exactly
//! when the published contract changes (a row, a capability, an error code), so a client
//! can pin it.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::methods::{self, MethodSpec};
use crate::{capabilities, errors, PROTOCOL_VERSION};

/// The digest algorithm's name as published in `digest_algorithm`.
pub const DIGEST_ALGORITHM: &str = "sha256";

/// The schema of the rows a daemon serves (`debug` adds the debug-only rows).
pub fn schema(debug: bool) -> Value {
    document(methods::active(debug))
}

/// The schema document of any set of rows.
pub fn document<'a>(rows: impl Iterator<Item = &'a MethodSpec>) -> Value {
    let methods: Vec<Value> = rows
        .map(|m| serde_json::to_value(m).expect("method rows serialize"))
        .collect();
    let error_codes: Vec<Value> = errors::ERROR_CODES
        .iter()
        .map(|(code, meaning)| json!({"code": code, "meaning": meaning}))
        .collect();
    json!({
        "protocol_version": PROTOCOL_VERSION,
        "capabilities": capabilities::SUPPORTED,
        "error_codes": error_codes,
        "methods": methods,
    })
}

/// Lower-case hex SHA-256 of the canonical JSON of `schema`.
pub fn digest(schema: &Value) -> String {
    hex::encode(Sha256::digest(schema.to_string().as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_stable_and_tracks_the_table() {
        let a = schema(false);
        assert_eq!(digest(&a), digest(&schema(false)));
        assert_eq!(digest(&a).len(), 64);
        // Dropping one row, or changing one field of a row, changes the digest.
        let fewer = document(methods::active(false).skip(1));
        assert_ne!(digest(&a), digest(&fewer));
        let mut changed: Vec<MethodSpec> = methods::active(false).copied().collect();
        changed[0].role = methods::Role::Host;
        assert_ne!(digest(&a), digest(&document(changed.iter())));
        assert_ne!(digest(&a), digest(&schema(true)));
    }

    #[test]
    fn rows_carry_the_table_columns() {
        let s = schema(false);
        let row = s["methods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "host.subscribe")
            .unwrap();
        assert_eq!(row["role"], "host");
        assert_eq!(row["handshake_required"], true);
        assert_eq!(row["deadline"], "standard");
    }
}

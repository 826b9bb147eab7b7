//! Secret names: validation, the `openrouter` alias, the daemon-private reserved slots, the
//! `service/key` reference syntax and the on-disk file-name encoding.
//!
//! A [`SecretId`] is always canonical: the default service applied, the alias resolved and
//! both parts validated. Its file name is `encode(service) + "~" + encode(key)` with
//! [`car_proto::namespace::encode`]; the encoded alphabet is `a-z 0-9 - _ . %`, so the `~`
//! separator is unambiguous, upper-case letters are escaped (case-insensitive file systems
//! cannot merge two keys), and `/` or `..` cannot leave the directory.

use car_proto::namespace;
use car_proto::redact::Redacted;
use serde::Serialize;

use crate::error::{Result, SecretError};

/// The service used when a request gives none (CAR's keychain service).
pub const DEFAULT_SERVICE: &str = "car";
/// `key: "openrouter"` under the default service means this key.
pub const OPENROUTER_ALIAS: &str = "openrouter";
/// The pasted OpenRouter API key's slot.
pub const OPENROUTER_API_KEY: &str = "OPENROUTER_API_KEY";
/// Longest service or key, in UTF-8 bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Largest value, in UTF-8 bytes (64 KiB).
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Longest file name the store will create (Linux and macOS `NAME_MAX`).
pub const MAX_FILE_NAME_BYTES: usize = 255;

/// Keys under [`DEFAULT_SERVICE`] that only the daemon itself may read, write or delete.
pub const RESERVED_KEYS: &[&str] = &[
    "OPENROUTER_OAUTH_API_KEY",
    "PARSLEE_ACCESS_TOKEN",
    "PARSLEE_REFRESH_TOKEN",
    "PARSLEE_ACCESS_TOKEN_EXPIRES_AT",
    "PARSLEE_API_BASE",
    "PARSLEE_AUTH_STATE_V2",
    "PARSLEE_ACCOUNTS",
    "PARSLEE_ACTIVE_ACCOUNT_ID",
    "PARSLEE_AUTH_GENERATION",
    "PARSLEE_AUTH_COMPLETION",
];
/// Every key under [`DEFAULT_SERVICE`] with this prefix is reserved too (per-account stash).
pub const RESERVED_KEY_PREFIX: &str = "PARSLEE_TOKENS_";

/// Separates the encoded service from the encoded key in a file name.
pub(crate) const SEPARATOR: char = '~';
/// Temp files start with this (`car_proto::safe_file`'s prefix). A temp file's name has no
/// [`SEPARATOR`], so it never decodes as a secret; a secret whose encoded service happens
/// to start the same way still does.
pub(crate) const TEMP_PREFIX: &str = car_proto::safe_file::TEMP_PREFIX;

/// True for a daemon-private slot: [`DEFAULT_SERVICE`] and a [`RESERVED_KEYS`] entry or a
/// key starting with [`RESERVED_KEY_PREFIX`]. Exact, case-sensitive names.
pub fn is_reserved(service: &str, key: &str) -> bool {
    service == DEFAULT_SERVICE
        && (RESERVED_KEYS.contains(&key) || key.starts_with(RESERVED_KEY_PREFIX))
}

/// A validated, canonical (service, key) pair.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct SecretId {
    service: String,
    key: String,
}

impl SecretId {
    /// Canonicalises a request's `service?` and `key`: `None` becomes [`DEFAULT_SERVICE`];
    /// under that service the key `openrouter` becomes [`OPENROUTER_API_KEY`] (under any
    /// other service it is an ordinary key). Both must be non-empty, at most
    /// [`MAX_NAME_BYTES`] bytes and free of NUL and control characters, and together must
    /// fit a [`MAX_FILE_NAME_BYTES`] file name once encoded. `Some("")` is an error, not
    /// the default. Reserved slots are accepted here; the store's generic methods refuse them.
    pub fn new(service: Option<&str>, key: &str) -> Result<Self> {
        let service = service.unwrap_or(DEFAULT_SERVICE);
        validate_name("service", service)?;
        validate_name("key", key)?;
        let key = if service == DEFAULT_SERVICE && key == OPENROUTER_ALIAS {
            OPENROUTER_API_KEY
        } else {
            key
        };
        let id = SecretId {
            service: service.to_owned(),
            key: key.to_owned(),
        };
        let service_len = namespace::encode(&id.service).len();
        let file_len = id.file_name().len();
        if file_len > MAX_FILE_NAME_BYTES {
            let field = if service_len + 2 > MAX_FILE_NAME_BYTES {
                "service"
            } else {
                "key"
            };
            return Err(SecretError::invalid(
                field,
                format!(
                    "service and key encode to a {file_len}-byte file name; the store's limit \
                     is {MAX_FILE_NAME_BYTES} bytes (each upper-case letter or byte outside \
                     a-z 0-9 - _ . takes 3)"
                ),
            ));
        }
        Ok(id)
    }

    /// Parses a secret reference, as used by inference providers' configuration:
    ///
    /// - `KEY` — the key in [`DEFAULT_SERVICE`] (`OPENAI_API_KEY`, or `openrouter`);
    /// - `SERVICE/KEY` — split at the **first** `/`, so a service cannot contain `/` in this syntax
    ///   but a key can (`my-app/team/token` is service `my-app`, key `team/token`).
    ///
    /// The parts are then canonicalised as by [`SecretId::new`]. An empty name is an
    /// invalid `name`; an empty part is an invalid `service` or `key`.
    pub fn parse(name: &str) -> Result<Self> {
        if name.is_empty() {
            return Err(SecretError::invalid("name", "must not be empty"));
        }
        match name.split_once('/') {
            Some((service, key)) => SecretId::new(Some(service), key),
            None => SecretId::new(None, name),
        }
    }

    pub fn service(&self) -> &str {
        &self.service
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// See [`is_reserved`].
    pub fn is_reserved(&self) -> bool {
        is_reserved(&self.service, &self.key)
    }

    /// Errors with [`SecretError::ReservedPrivateSecret`] for a daemon-private slot.
    pub(crate) fn refuse_reserved(&self) -> Result<()> {
        if self.is_reserved() {
            return Err(SecretError::ReservedPrivateSecret {
                service: self.service.clone(),
                key: self.key.clone(),
            });
        }
        Ok(())
    }

    /// The secret's file name in the store directory.
    pub(crate) fn file_name(&self) -> String {
        format!(
            "{}{SEPARATOR}{}",
            namespace::encode(&self.service),
            namespace::encode(&self.key)
        )
    }

    /// Inverse of [`SecretId::file_name`]; `None` for any name it cannot produce (temp
    /// files, stray files, non-canonical spellings such as `car~openrouter`).
    pub(crate) fn from_file_name(name: &str) -> Option<Self> {
        let (service, key) = name.split_once(SEPARATOR)?;
        let service = namespace::decode(service)?;
        let key = namespace::decode(key)?;
        let id = SecretId::new(Some(&service), &key).ok()?;
        (id.file_name() == name).then_some(id)
    }
}

/// Checks a value against [`MAX_VALUE_BYTES`]. Reports only the length.
pub(crate) fn validate_value(value: &Redacted<String>) -> Result<()> {
    let len = value.expose().len();
    if len > MAX_VALUE_BYTES {
        return Err(SecretError::invalid(
            "value",
            format!("is {len} bytes; the cap is {MAX_VALUE_BYTES} bytes (64 KiB)"),
        ));
    }
    Ok(())
}

fn validate_name(field: &'static str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(SecretError::invalid(field, "must not be empty"));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(SecretError::invalid(
            field,
            format!(
                "is {} bytes; the limit is {MAX_NAME_BYTES} bytes",
                name.len()
            ),
        ));
    }
    if let Some((at, c)) = name.char_indices().find(|(_, c)| c.is_control()) {
        let what = if c == '\0' {
            "NUL".to_owned()
        } else {
            format!("control character U+{:04X}", c as u32)
        };
        return Err(SecretError::invalid(
            field,
            format!("contains {what} at byte {at}; NUL and control characters are not allowed"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(r: Result<SecretId>) -> &'static str {
        r.expect_err("should be invalid")
            .field()
            .expect("names a field")
    }

    #[test]
    fn defaults_and_alias() {
        let id = SecretId::new(None, "openrouter").unwrap();
        assert_eq!((id.service(), id.key()), ("car", "OPENROUTER_API_KEY"));
        let id = SecretId::new(Some("car"), "openrouter").unwrap();
        assert_eq!(id.key(), "OPENROUTER_API_KEY");
        let id = SecretId::new(Some("other"), "openrouter").unwrap();
        assert_eq!(
            id.key(),
            "openrouter",
            "the alias belongs to the default service"
        );
        assert_eq!(
            SecretId::new(None, "OpenRouter").unwrap().key(),
            "OpenRouter"
        );
    }

    #[test]
    fn validation_names_the_field() {
        assert_eq!(field_of(SecretId::new(None, "")), "key");
        assert_eq!(field_of(SecretId::new(Some(""), "K")), "service");
        assert_eq!(field_of(SecretId::new(None, "a\0b")), "key");
        assert_eq!(field_of(SecretId::new(Some("s\n"), "K")), "service");
        assert_eq!(field_of(SecretId::new(None, "tab\there")), "key");
        assert_eq!(field_of(SecretId::new(None, "del\u{7f}")), "key");
        assert_eq!(field_of(SecretId::new(None, &"k".repeat(257))), "key");
        let err = SecretId::new(None, "a\0b").unwrap_err().to_string();
        assert!(err.contains("NUL at byte 1"), "{err}");
        // 256 lower-case bytes pass the name cap but not the file-name limit.
        assert!(SecretId::new(None, &"k".repeat(250)).is_ok());
        let err = SecretId::new(None, &"k".repeat(256)).unwrap_err();
        assert_eq!(err.field(), Some("key"));
        assert!(err.to_string().contains("255"), "{err}");
        let err = SecretId::new(Some(&"S".repeat(90)), "k").unwrap_err();
        assert_eq!(err.field(), Some("service"), "{err}");
        assert!(SecretId::new(None, "ünïcode key with spaces/and/slashes").is_ok());
    }

    #[test]
    fn reserved_slots() {
        for key in RESERVED_KEYS {
            assert!(is_reserved("car", key), "{key}");
            assert!(!is_reserved("other", key), "{key}");
        }
        assert!(is_reserved("car", "PARSLEE_TOKENS_acct-1"));
        assert!(!is_reserved("car", "OPENROUTER_API_KEY"));
        assert!(!is_reserved("car", "parslee_access_token"));
        assert!(!is_reserved("car", "PARSLEE_TOKENS"));
    }

    #[test]
    fn parse_reference_syntax() {
        let id = SecretId::parse("OPENAI_API_KEY").unwrap();
        assert_eq!((id.service(), id.key()), ("car", "OPENAI_API_KEY"));
        let id = SecretId::parse("my-app/team/token").unwrap();
        assert_eq!((id.service(), id.key()), ("my-app", "team/token"));
        assert_eq!(
            SecretId::parse("openrouter").unwrap().key(),
            OPENROUTER_API_KEY
        );
        assert_eq!(
            SecretId::parse("car/openrouter").unwrap().key(),
            OPENROUTER_API_KEY
        );
        assert_eq!(field_of(SecretId::parse("")), "name");
        assert_eq!(field_of(SecretId::parse("/KEY")), "service");
        assert_eq!(field_of(SecretId::parse("svc/")), "key");
    }

    #[test]
    fn file_names_round_trip_and_are_case_safe() {
        let upper = SecretId::new(None, "API_KEY").unwrap();
        let lower = SecretId::new(None, "api_key").unwrap();
        assert_ne!(upper.file_name(), lower.file_name());
        assert_eq!(
            upper.file_name().to_lowercase(),
            upper.file_name(),
            "file names are all lower case"
        );
        for (service, key) in [
            ("car", "OPENROUTER_API_KEY"),
            ("a~b", "c~d"),
            ("svc", "../../etc/passwd"),
            (".", ".."),
            ("my.app", "x.y"),
            ("é", "100%"),
        ] {
            let id = SecretId::new(Some(service), key).unwrap();
            let name = id.file_name();
            assert!(!name.contains('/'), "{name}");
            assert_eq!(name.matches(SEPARATOR).count(), 1, "{name}");
            assert_eq!(SecretId::from_file_name(&name), Some(id), "{name}");
        }
        // ("a.b", "c") and ("a", "b.c") must not collide the way a '.' separator would.
        assert_ne!(
            SecretId::new(Some("a.b"), "c").unwrap().file_name(),
            SecretId::new(Some("a"), "b.c").unwrap().file_name()
        );
    }

    #[test]
    fn from_file_name_rejects_what_file_name_cannot_produce() {
        for name in [
            "car",
            "car~",
            "~KEY",
            "car~%4b~x",
            "car~K",
            "car~%4B",
            "car~openrouter",
            ".car-tmp-123456.tmp",
            "car~a%00b",
        ] {
            assert_eq!(SecretId::from_file_name(name), None, "{name}");
        }
        assert!(SecretId::from_file_name("car~%4b").is_some());
    }

    #[test]
    fn value_cap_reports_length_only() {
        let ok = Redacted::new("v".repeat(MAX_VALUE_BYTES));
        assert!(validate_value(&ok).is_ok());
        let big = Redacted::new("v".repeat(MAX_VALUE_BYTES + 1));
        let err = validate_value(&big).unwrap_err();
        assert_eq!(err.field(), Some("value"));
        assert_eq!(
            err.to_string(),
            "invalid value: is 65537 bytes; the cap is 65536 bytes (64 KiB)"
        );
    }
}

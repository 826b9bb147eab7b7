//! `car-secrets`: the daemon's secret store, behind `secret.put` / `get` / `delete` /
//! `status` / `available` / `list`, `diagnostics.secret_store_activity`, and inference
//! providers that name a secret instead of embedding it.
//!
//! Owns: `CAR_HOME/secrets/` (directory 0700, files 0600) and the attempt counters. Must not
//! touch: logs or errors with a value in them (values cross as `Redacted`), or who may read
//! what (the daemon's grants decide).
//!
//! # Layout
//!
//! ```text
//! $CAR_HOME/secrets/                 0700, owned by this user, never a symlink
//!     car~%4f%50%45%4e%52%4f%55%54%45%52_%41%50%49_%4b%45%59
//!                                    0600: the value's UTF-8 bytes, nothing else
//!                                    (service "car", key "OPENROUTER_API_KEY")
//!     my-app~token                   (service "my-app", key "token")
//!     .car-tmp-<random>.tmp          an in-flight write (see Atomicity)
//! ```
//!
//! One regular file per secret. Its name is `encode(service) ~ encode(key)` using
//! [`car_proto::namespace::encode`]: lower-case percent-encoding where only `a-z 0-9 - _ .`
//! pass through. `~` (the separator) and `+` (the temp prefix) can never appear in an
//! encoded part, so the mapping is unambiguous and reversible; upper-case letters are
//! escaped, so case-insensitive file systems keep `API_KEY` and `api_key` apart; `/` and
//! `..` cannot leave the directory. The file's size and mtime are the metadata `status`
//! reports (`bytes`, `updated_at_ms`).
//!
//! # Modes and ownership
//!
//! [`SecretStore::open`] creates the directory `0700`. An existing directory of this user
//! that grants group or other access is tightened to `0700` with a warning; a symbolic
//! link, a non-directory or another user's directory is refused
//! ([`SecretError::StoreUnavailable`]). The check repeats before every operation. "This
//! user" is the owner of an unnamed temp file the store creates at open (no `unsafe`).
//! Reads open through `car_proto::safe_file` (`O_NOFOLLOW | O_NONBLOCK`, capped) and
//! refuse ([`SecretError::InsecureFile`]) anything but a regular file of this user with no
//! group/other permission bits.
//!
//! # Atomicity
//!
//! A write (`car_proto::safe_file::write_atomic`) creates `.car-tmp-…` in the store
//! directory with `O_CREAT | O_EXCL | O_NOFOLLOW` and mode `0600` from the first instant, writes
//! and fsyncs it, renames it over the target (which replaces, never follows, whatever was there)
//! and fsyncs the directory. A reader sees the old value or the new one, never a mix; a crash
//! leaves at most a stale temp file, which `list` skips with a warning. Writes and deletes within
//! one store are serialised by a mutex; reads take no lock.
//!
//! # Names and limits
//!
//! See [`names`]: `service` defaults to `"car"`; under it `key: "openrouter"` means
//! `OPENROUTER_API_KEY`; service and key are non-empty, at most 256 bytes, free of NUL and
//! control characters, and must encode to a file name of at most 255 bytes; values are at
//! most 64 KiB. The daemon-private slots ([`names::RESERVED_KEYS`] and the
//! `PARSLEE_TOKENS_` prefix, under `"car"`) are refused by `put` / `get` / `delete` /
//! `resolve` with [`SecretError::ReservedPrivateSecret`]; the daemon's own auth code uses
//! the `*_private` methods. `status` and `list` show their names, never values.
//!
//! # What is never logged or shown
//!
//! Values cross the API only as [`Redacted<String>`](car_proto::redact::Redacted), whose
//! `Debug` and `Display` print `[redacted]`. No error message, `Debug` output or `tracing`
//! event contains a value or a file's contents — only names, paths, lengths, modes and
//! uids. `list` and `status` return names and metadata only.
//!
//! # Platform
//!
//! Unix only (modes, uids, `O_NOFOLLOW`); the project runs on Linux.

#![cfg(unix)]

pub mod activity;
pub mod error;
mod fsutil;
pub mod names;
pub mod store;

pub use activity::{Activity, ActivitySnapshot};
pub use error::{Result, SecretError};
pub use fsutil::{DIR_MODE, FILE_MODE};
pub use names::{
    is_reserved, SecretId, DEFAULT_SERVICE, MAX_NAME_BYTES, MAX_VALUE_BYTES, OPENROUTER_API_KEY,
};
pub use store::{SecretName, SecretStatus, SecretStore, STORE_DIR};

//! No error message, `Debug` output or log line contains a secret value.

mod common;

use std::collections::BTreeSet;
use std::error::Error as _;
use std::fs::{self, Permissions};
use std::os::unix::fs::{symlink, PermissionsExt};

use car_secrets::{SecretError, SecretId, SecretStore, MAX_VALUE_BYTES, STORE_DIR};
use common::{capture_logs, entries, home, secret, SENTINEL};

/// Display, Debug and every source of an error.
fn everything_shown(err: &SecretError) -> String {
    let mut text = format!("{err}\n{err:?}");
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(&format!("\n{s}\n{s:?}"));
        source = s.source();
    }
    text
}

/// Drives the store into every failure it has while the value is in play.
fn provoke_every_error() -> Vec<SecretError> {
    let (tmp, car_home) = home();
    let mut errors = Vec::new();

    // A loose directory, tightened with a warning (a log line to inspect).
    let dir = car_home.join(STORE_DIR);
    fs::create_dir_all(&dir).unwrap();
    fs::set_permissions(&dir, Permissions::from_mode(0o755)).unwrap();
    let store = SecretStore::open(&car_home).unwrap();

    store.put(None, "GOOD", &secret(SENTINEL)).unwrap();
    assert_eq!(store.get(None, "GOOD").unwrap().expose(), SENTINEL);
    assert_eq!(store.resolve("GOOD").unwrap().unwrap().expose(), SENTINEL);
    store.status(None, "GOOD").unwrap();
    store.list().unwrap();

    let big = SENTINEL.repeat(MAX_VALUE_BYTES / SENTINEL.len() + 1);
    errors.push(store.put(None, "K", &secret(&big)).unwrap_err());
    errors.push(store.put(None, "bad\0key", &secret(SENTINEL)).unwrap_err());
    errors.push(
        store
            .put(None, "PARSLEE_REFRESH_TOKEN", &secret(SENTINEL))
            .unwrap_err(),
    );
    errors.push(store.get(None, "MISSING").unwrap_err());

    // The target name is occupied by a non-empty directory: the rename fails (io).
    let id = SecretId::new(None, "BLOCKED").unwrap();
    let blocked = dir.join(format!("car~{}", car_proto::namespace::encode(id.key())));
    fs::create_dir(&blocked).unwrap();
    fs::write(blocked.join("x"), "").unwrap();
    errors.push(store.put(None, "BLOCKED", &secret(SENTINEL)).unwrap_err());
    assert!(
        entries(&dir).iter().all(|n| !n.starts_with(".car-tmp-")),
        "failed write cleaned up"
    );

    // The value's file made world-readable, then corrupted, then a link.
    let good = dir.join(
        entries(&dir)
            .into_iter()
            .find(|n| n.ends_with("%47%4f%4f%44"))
            .unwrap(),
    );
    fs::set_permissions(&good, Permissions::from_mode(0o644)).unwrap();
    errors.push(store.get(None, "GOOD").unwrap_err());
    store.list().unwrap();
    fs::set_permissions(&good, Permissions::from_mode(0o600)).unwrap();
    let mut bad = SENTINEL.as_bytes().to_vec();
    bad.extend_from_slice(&[0xc3, 0x28]);
    fs::write(&good, &bad).unwrap();
    errors.push(store.get(None, "GOOD").unwrap_err());

    // The directory swapped for a link after open.
    let moved = tmp.path().join("moved");
    fs::rename(&dir, &moved).unwrap();
    symlink(&moved, &dir).unwrap();
    errors.push(store.put(None, "K", &secret(SENTINEL)).unwrap_err());
    assert!(!store.available());

    assert!(!format!("{store:?}").contains(SENTINEL));
    errors
}

#[test]
fn no_error_debug_or_log_line_contains_the_value() {
    let (errors, logs) = capture_logs(provoke_every_error);
    let reasons: BTreeSet<&str> = errors.iter().map(|e| e.reason()).collect();
    let all: BTreeSet<&str> = SecretError::REASONS.iter().copied().collect();
    assert_eq!(reasons, all, "every kind of error was provoked");
    for err in &errors {
        let shown = everything_shown(err);
        assert!(!shown.contains("SENTINEL"), "{shown}");
    }
    // The capture saw the store's events (so the check below can fail)...
    assert!(logs.contains("tightened to 0700"), "{logs}");
    assert!(logs.contains("secret written"), "{logs}");
    assert!(logs.contains("listing an unusable secret file"), "{logs}");
    assert!(logs.contains("secret store unavailable"), "{logs}");
    // ...and none of them carries the value.
    assert!(!logs.contains("SENTINEL"), "{logs}");
}

#[test]
fn debug_of_values_store_and_results_is_redacted() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    store.put(None, "K", &secret(SENTINEL)).unwrap();
    let value = store.get(None, "K").unwrap();
    assert_eq!(format!("{value:?}"), "[redacted]");
    assert_eq!(format!("{value}"), "[redacted]");
    assert_eq!(value.expose(), SENTINEL);
    let resolved = store.resolve("K").unwrap();
    assert_eq!(format!("{resolved:?}"), "Some([redacted])");
    let shown = format!(
        "{store:?} {:?} {:?} {:?}",
        store.status(None, "K").unwrap(),
        store.list().unwrap(),
        store.activity()
    );
    assert!(!shown.contains(SENTINEL), "{shown}");
    assert!(shown.contains("SecretStore"), "{shown}");
}

//! `diagnostics.secret_store_activity`: attempts counted whether or not they succeed.

mod common;

use std::sync::Arc;

use car_secrets::{Activity, ActivitySnapshot, SecretId, SecretStore};
use common::{home, secret};

#[test]
fn activity_counts_attempts_including_failed_ones() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    assert_eq!(store.activity().snapshot(), ActivitySnapshot::default());

    store.put(None, "K", &secret("v")).unwrap(); // write 1
    store.put(None, "", &secret("v")).unwrap_err(); // write 2: invalid key
    store
        .put(None, "PARSLEE_ACCOUNTS", &secret("v"))
        .unwrap_err(); // write 3: reserved
    store
        .put(None, "K", &secret(&"v".repeat(70_000)))
        .unwrap_err(); // write 4: over cap
    store.get(None, "K").unwrap(); // get 1
    store.get(None, "MISSING").unwrap_err(); // get 2: not found
    store.get(None, "a\0").unwrap_err(); // get 3: invalid
    store.resolve("K").unwrap(); // get 4
    store.resolve("").unwrap_err(); // get 5: invalid name
    store.status(None, "K").unwrap(); // status 1
    store.status(Some(""), "K").unwrap_err(); // status 2
    assert!(store.available()); // availability 1
    store.delete(None, "K").unwrap(); // delete 1
    store.delete(None, "K").unwrap(); // delete 2: nothing there
    store.delete(None, "PARSLEE_TOKENS_x").unwrap_err(); // delete 3: reserved
    store.list().unwrap(); // not counted

    let snapshot = store.activity().snapshot();
    assert_eq!(
        snapshot,
        ActivitySnapshot {
            get_attempts: 5,
            status_attempts: 2,
            availability_attempts: 1,
            write_attempts: 4,
            delete_attempts: 3,
        }
    );
    assert_eq!(
        serde_json::to_value(snapshot).unwrap(),
        serde_json::json!({
            "get_attempts": 5,
            "status_attempts": 2,
            "availability_attempts": 1,
            "write_attempts": 4,
            "delete_attempts": 3,
        })
    );
}

#[test]
fn daemon_private_calls_count_and_shared_counters_outlive_a_store() {
    let (_tmp, car_home) = home();
    let activity = Arc::new(Activity::new());
    {
        let store = SecretStore::open_with_activity(&car_home, Arc::clone(&activity)).unwrap();
        let id = SecretId::new(None, "PARSLEE_ACCESS_TOKEN").unwrap();
        store.put_private(&id, &secret("t")).unwrap();
        store.get_private(&id).unwrap();
        store.delete_private(&id).unwrap();
        assert!(store.available());
    }
    // No store at all (say, open failed): the daemon records the attempt itself.
    activity.record_availability();
    let store = SecretStore::open_with_activity(&car_home, Arc::clone(&activity)).unwrap();
    store.status(None, "X").unwrap();
    assert_eq!(
        activity.snapshot(),
        ActivitySnapshot {
            get_attempts: 1,
            status_attempts: 1,
            availability_attempts: 2,
            write_attempts: 1,
            delete_attempts: 1,
        }
    );
}

//! The store's behaviour through its public API, on real files in temp dirs.

mod common;

use std::fs;
use std::sync::Arc;

use car_secrets::names::RESERVED_KEYS;
use car_secrets::{SecretId, SecretStore, MAX_VALUE_BYTES};
use common::{entries, home, mode, secret, SENTINEL};

#[test]
fn round_trip_survives_reopening_the_store() {
    let (_tmp, car_home) = home();
    {
        let store = SecretStore::open(&car_home).unwrap();
        store
            .put(None, "OPENAI_API_KEY", &secret("sk-one"))
            .unwrap();
        store
            .put(Some("my-app"), "token", &secret("tok-two"))
            .unwrap();
    }
    let store = SecretStore::open(&car_home).unwrap();
    assert_eq!(
        store.get(None, "OPENAI_API_KEY").unwrap().expose(),
        "sk-one"
    );
    assert_eq!(
        store.get(Some("car"), "OPENAI_API_KEY").unwrap().expose(),
        "sk-one"
    );
    assert_eq!(
        store.get(Some("my-app"), "token").unwrap().expose(),
        "tok-two"
    );
    assert_eq!(
        store.get(None, "token").unwrap_err().reason(),
        "not_found",
        "services are separate"
    );
    assert_eq!(
        store.get(None, "openai_api_key").unwrap_err().reason(),
        "not_found",
        "keys are case-sensitive"
    );
}

#[test]
fn values_round_trip_byte_for_byte() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    let max = "x".repeat(MAX_VALUE_BYTES);
    for value in [
        "",
        " padded \n",
        "ünïcødé 🔑",
        "a\0b\u{1b}[0m",
        "sk-a,sk-b,sk-c",
        &max,
    ] {
        store.put(None, "K", &secret(value)).unwrap();
        assert_eq!(store.get(None, "K").unwrap().expose(), value);
    }
}

#[test]
fn directory_is_0700_and_files_are_0600() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    assert_eq!(store.dir(), car_home.join("secrets"));
    assert_eq!(mode(store.dir()), 0o700);
    store.put(None, "A", &secret("a")).unwrap();
    store.put(Some("svc"), "b", &secret("b")).unwrap();
    for name in entries(store.dir()) {
        assert_eq!(mode(&store.dir().join(&name)), 0o600, "{name}");
    }
    assert_eq!(entries(store.dir()).len(), 2);
}

#[test]
fn put_leaves_no_temp_file_and_overwrite_keeps_one_file() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    store.put(None, "OPENAI_API_KEY", &secret("first")).unwrap();
    let after_first = entries(store.dir());
    assert_eq!(after_first.len(), 1, "{after_first:?}");
    store
        .put(None, "OPENAI_API_KEY", &secret("second, longer"))
        .unwrap();
    assert_eq!(
        entries(store.dir()),
        after_first,
        "same single file, no temp left"
    );
    let file = store.dir().join(&after_first[0]);
    assert_eq!(fs::read_to_string(&file).unwrap(), "second, longer");
    assert_eq!(mode(&file), 0o600);
    assert_eq!(
        store.get(None, "OPENAI_API_KEY").unwrap().expose(),
        "second, longer"
    );
}

#[test]
fn delete_then_get_is_not_found_and_delete_is_idempotent() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    store.put(None, "K", &secret("v")).unwrap();
    assert!(store.delete(None, "K").unwrap());
    let err = store.get(None, "K").unwrap_err();
    assert_eq!(err.reason(), "not_found");
    assert_eq!(err.field(), None);
    assert_eq!(err.to_string(), r#"no secret named "K" in service "car""#);
    assert!(
        !store.delete(None, "K").unwrap(),
        "second delete finds nothing"
    );
    assert!(entries(store.dir()).is_empty());
    assert!(!store.status(None, "K").unwrap().exists);
    assert!(store.resolve("K").unwrap().is_none());
}

#[test]
fn status_reports_metadata_and_never_the_value() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    let absent = store.status(None, "K").unwrap();
    assert_eq!(
        serde_json::to_value(&absent).unwrap(),
        serde_json::json!({"service": "car", "key": "K", "exists": false})
    );
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    store.put(None, "K", &secret(SENTINEL)).unwrap();
    let status = store.status(None, "K").unwrap();
    assert!(status.exists);
    assert_eq!(status.bytes, Some(SENTINEL.len() as u64));
    let updated = status.updated_at_ms.expect("mtime");
    assert!(updated + 2_000 >= before, "{updated} vs {before}");
    let json = serde_json::to_string(&status).unwrap();
    assert!(!json.contains(SENTINEL), "{json}");
    assert!(!format!("{status:?}").contains(SENTINEL));
    let fields: Vec<String> =
        serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&json)
            .unwrap()
            .keys()
            .cloned()
            .collect();
    assert_eq!(
        fields,
        ["bytes", "exists", "key", "service", "updated_at_ms"]
    );
}

#[test]
fn openrouter_alias_maps_to_openrouter_api_key() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    let id = store.put(None, "openrouter", &secret("sk-or-1")).unwrap();
    assert_eq!((id.service(), id.key()), ("car", "OPENROUTER_API_KEY"));
    assert_eq!(
        store.get(None, "OPENROUTER_API_KEY").unwrap().expose(),
        "sk-or-1"
    );
    store
        .put(Some("car"), "OPENROUTER_API_KEY", &secret("sk-or-2"))
        .unwrap();
    assert_eq!(store.get(None, "openrouter").unwrap().expose(), "sk-or-2");
    assert_eq!(
        store.resolve("openrouter").unwrap().unwrap().expose(),
        "sk-or-2"
    );
    let status = store.status(None, "openrouter").unwrap();
    assert_eq!(
        (status.key.as_str(), status.exists),
        ("OPENROUTER_API_KEY", true)
    );
    assert_eq!(store.list().unwrap().len(), 1, "one slot, two spellings");
    // Under another service the alias does not apply.
    store
        .put(Some("other"), "openrouter", &secret("lit"))
        .unwrap();
    assert_eq!(
        store.get(Some("other"), "openrouter").unwrap().expose(),
        "lit"
    );
    assert!(store.get(Some("other"), "OPENROUTER_API_KEY").is_err());
    assert!(store.delete(None, "openrouter").unwrap());
    assert_eq!(
        store.get(None, "OPENROUTER_API_KEY").unwrap_err().reason(),
        "not_found"
    );
}

#[test]
fn reserved_slots_are_refused_on_put_get_delete_and_resolve() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    let mut keys: Vec<&str> = RESERVED_KEYS.to_vec();
    keys.push("PARSLEE_TOKENS_acct-42");
    assert!(keys.contains(&"OPENROUTER_OAUTH_API_KEY"));
    for key in &keys {
        // The daemon's own code can use the slot...
        let id = SecretId::new(None, key).unwrap();
        store.put_private(&id, &secret(SENTINEL)).unwrap();
        // ...the generic surface cannot, under the default service spelled either way.
        for service in [None, Some("car")] {
            let errs = [
                store.put(service, key, &secret("replacement")).unwrap_err(),
                store.get(service, key).unwrap_err(),
                store.delete(service, key).unwrap_err(),
            ];
            for err in errs {
                assert_eq!(err.reason(), "reserved_private_secret", "{key}: {err}");
                assert_eq!(err.field(), Some("key"));
                assert!(!format!("{err} {err:?}").contains(SENTINEL));
            }
        }
        assert_eq!(
            store.resolve(&format!("car/{key}")).unwrap_err().reason(),
            "reserved_private_secret"
        );
        assert_eq!(
            store.resolve(key).unwrap_err().reason(),
            "reserved_private_secret"
        );
        // Nothing was replaced or removed; metadata stays visible.
        assert_eq!(store.get_private(&id).unwrap().unwrap().expose(), SENTINEL);
        assert!(store.status(None, key).unwrap().exists);
        // The same key under another service is an ordinary secret.
        store.put(Some("elsewhere"), key, &secret("ok")).unwrap();
        assert_eq!(store.get(Some("elsewhere"), key).unwrap().expose(), "ok");
        assert!(store.delete_private(&id).unwrap());
        assert!(store.get_private(&id).unwrap().is_none());
    }
}

#[test]
fn an_over_cap_value_is_refused_naming_value_and_the_cap() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    let big = SENTINEL.repeat(MAX_VALUE_BYTES / SENTINEL.len() + 1);
    let err = store.put(None, "K", &secret(&big)).unwrap_err();
    assert_eq!(err.reason(), "invalid_field");
    assert_eq!(err.field(), Some("value"));
    assert!(err.is_invalid_params());
    let text = err.to_string();
    assert!(
        text.contains("value") && text.contains("65536") && text.contains("64 KiB"),
        "{text}"
    );
    assert!(!format!("{text} {err:?}").contains("SENTINEL"));
    assert!(entries(store.dir()).is_empty(), "nothing written");
    let id = SecretId::new(None, "PARSLEE_ACCOUNTS").unwrap();
    assert_eq!(
        store.put_private(&id, &secret(&big)).unwrap_err().field(),
        Some("value")
    );
}

#[test]
fn bad_names_are_refused_naming_the_field() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    let long = "k".repeat(257);
    let cases: &[(Option<&str>, &str, &str)] = &[
        (None, "", "key"),
        (Some(""), "K", "service"),
        (None, "nul\0here", "key"),
        (None, "new\nline", "key"),
        (Some("tab\t"), "K", "service"),
        (None, &long, "key"),
        (Some(&long), "K", "service"),
    ];
    for (service, key, field) in cases {
        for err in [
            store.put(*service, key, &secret(SENTINEL)).unwrap_err(),
            store.get(*service, key).unwrap_err(),
            store.delete(*service, key).unwrap_err(),
            store.status(*service, key).unwrap_err(),
        ] {
            assert_eq!(err.reason(), "invalid_field", "{service:?}/{key:?}");
            assert_eq!(err.field(), Some(*field), "{service:?}/{key:?}: {err}");
            assert!(
                err.to_string().starts_with(&format!("invalid {field}: ")),
                "{err}"
            );
            assert!(!format!("{err} {err:?}").contains(SENTINEL));
        }
    }
    assert_eq!(store.resolve("").unwrap_err().field(), Some("name"));
    assert!(entries(store.dir()).is_empty());
}

#[test]
fn list_returns_sorted_names_and_never_values() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    assert!(store.list().unwrap().is_empty());
    store.put(Some("zeta"), "b", &secret(SENTINEL)).unwrap();
    store
        .put(None, "OPENAI_API_KEY", &secret(SENTINEL))
        .unwrap();
    store.put(Some("alpha"), "x/y", &secret(SENTINEL)).unwrap();
    store
        .put(None, "ANTHROPIC_API_KEY", &secret(SENTINEL))
        .unwrap();
    store
        .put_private(
            &SecretId::new(None, "PARSLEE_ACCOUNTS").unwrap(),
            &secret(SENTINEL),
        )
        .unwrap();
    // Strays the store did not name, and a stale temp file, are skipped.
    fs::write(store.dir().join("README"), SENTINEL).unwrap();
    fs::write(store.dir().join("car~K"), SENTINEL).unwrap();
    fs::write(store.dir().join(".car-tmp-123456.tmp"), SENTINEL).unwrap();

    let list = store.list().unwrap();
    let names: Vec<(&str, &str, Option<bool>)> = list
        .iter()
        .map(|n| (n.service.as_str(), n.key.as_str(), n.exists))
        .collect();
    assert_eq!(
        names,
        [
            ("alpha", "x/y", Some(true)),
            ("car", "ANTHROPIC_API_KEY", Some(true)),
            ("car", "OPENAI_API_KEY", Some(true)),
            ("car", "PARSLEE_ACCOUNTS", Some(true)),
            ("zeta", "b", Some(true)),
        ]
    );
    let json = serde_json::to_string(&list).unwrap();
    assert!(!json.contains(SENTINEL), "{json}");
    assert!(!format!("{list:?}").contains(SENTINEL));
    assert!(
        json.contains(r#"{"service":"car","key":"OPENAI_API_KEY","exists":true}"#),
        "{json}"
    );
}

#[test]
fn resolve_accepts_bare_keys_and_service_slash_key() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    store.put(None, "OPENAI_API_KEY", &secret("bare")).unwrap();
    store
        .put(Some("team"), "ci/token", &secret("nested"))
        .unwrap();
    assert_eq!(
        store.resolve("OPENAI_API_KEY").unwrap().unwrap().expose(),
        "bare"
    );
    assert_eq!(
        store
            .resolve("car/OPENAI_API_KEY")
            .unwrap()
            .unwrap()
            .expose(),
        "bare"
    );
    assert_eq!(
        store.resolve("team/ci/token").unwrap().unwrap().expose(),
        "nested"
    );
    assert!(store.resolve("team/ci").unwrap().is_none());
    assert!(store.resolve("MISSING").unwrap().is_none());
    assert_eq!(store.resolve("/K").unwrap_err().field(), Some("service"));
    assert_eq!(store.resolve("team/").unwrap_err().field(), Some("key"));
}

#[test]
fn concurrent_writers_and_readers_see_whole_values() {
    let (_tmp, car_home) = home();
    let store = Arc::new(SecretStore::open(&car_home).unwrap());
    let values: Vec<String> = (0..8).map(|i| format!("{i}").repeat(1000 + i)).collect();
    let values = &values;
    std::thread::scope(|s| {
        for value in values {
            let store = Arc::clone(&store);
            s.spawn(move || {
                for _ in 0..20 {
                    store.put(None, "SHARED", &secret(value)).unwrap();
                    let got = store.get(None, "SHARED").unwrap();
                    assert!(values.contains(got.expose()), "torn read");
                }
            });
        }
    });
    // A second store on the same directory (another daemon) can read it too.
    let other = SecretStore::open(&car_home).unwrap();
    assert!(values.contains(other.get(None, "SHARED").unwrap().expose()));
    assert_eq!(entries(store.dir()).len(), 1, "no temp files left behind");
}

#[test]
fn a_service_named_like_a_temp_file_is_still_listed_and_read() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    store
        .put(Some(".car-tmp-x"), "k", &secret(SENTINEL))
        .unwrap();
    let list = store.list().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].service, ".car-tmp-x");
    assert_eq!(
        store.get(Some(".car-tmp-x"), "k").unwrap().expose(),
        SENTINEL
    );
}

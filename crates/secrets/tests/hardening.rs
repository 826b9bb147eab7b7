//! The store's refusals: loose directories, symbolic links, other owners, loose files.

mod common;

use std::fs::{self, Permissions};
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

use car_secrets::{SecretStore, STORE_DIR};
use common::{capture_logs, entries, home, mode, secret, SENTINEL};

#[test]
fn a_group_readable_existing_dir_is_tightened_with_a_warning() {
    for loose in [0o750, 0o755, 0o707, 0o777] {
        let (_tmp, car_home) = home();
        let dir = car_home.join(STORE_DIR);
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, Permissions::from_mode(loose)).unwrap();
        assert_eq!(mode(&dir), loose);
        let (store, logs) = capture_logs(|| SecretStore::open(&car_home));
        let store = store.unwrap();
        assert_eq!(mode(&dir), 0o700, "{loose:o}");
        assert!(logs.contains("WARN"), "{logs}");
        assert!(logs.contains("tightened to 0700"), "{logs}");
        assert!(logs.contains(&format!("{loose:04o}")), "{logs}");
        // Loosened again after open: the next operation tightens it again.
        fs::set_permissions(&dir, Permissions::from_mode(loose)).unwrap();
        store.put(None, "K", &secret("v")).unwrap();
        assert_eq!(mode(&dir), 0o700);
    }
}

#[test]
fn a_fresh_dir_is_created_0700_without_a_warning() {
    let (_tmp, car_home) = home();
    let (store, logs) = capture_logs(|| SecretStore::open(&car_home));
    store.unwrap();
    assert_eq!(mode(&car_home.join(STORE_DIR)), 0o700);
    assert!(!logs.contains("WARN"), "{logs}");
}

#[test]
fn a_symlinked_secrets_dir_is_refused() {
    let (tmp, car_home) = home();
    let real = tmp.path().join("elsewhere");
    fs::create_dir(&real).unwrap();
    fs::set_permissions(&real, Permissions::from_mode(0o700)).unwrap();
    fs::create_dir(&car_home).unwrap();
    symlink(&real, car_home.join(STORE_DIR)).unwrap();
    let err = SecretStore::open(&car_home).unwrap_err();
    assert_eq!(err.reason(), "store_unavailable");
    let text = err.to_string();
    assert!(text.contains("symbolic link"), "{text}");
    assert!(
        text.contains(&car_home.join(STORE_DIR).display().to_string()),
        "{text}"
    );
    assert!(
        entries(&real).is_empty(),
        "nothing was written through the link"
    );
}

#[test]
fn a_file_at_the_secrets_path_is_refused() {
    let (_tmp, car_home) = home();
    fs::create_dir(&car_home).unwrap();
    fs::write(car_home.join(STORE_DIR), "").unwrap();
    let err = SecretStore::open(&car_home).unwrap_err();
    assert_eq!(err.reason(), "store_unavailable");
    assert!(err.to_string().contains("not a directory"), "{err}");
}

#[test]
fn a_dir_swapped_for_a_symlink_after_open_is_refused() {
    let (tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    store.put(None, "K", &secret(SENTINEL)).unwrap();
    let moved = tmp.path().join("moved");
    fs::rename(store.dir(), &moved).unwrap();
    symlink(&moved, store.dir()).unwrap();
    assert!(!store.available());
    for err in [
        store.get(None, "K").unwrap_err(),
        store.put(None, "K", &secret("new")).unwrap_err(),
        store.delete(None, "K").unwrap_err(),
        store.status(None, "K").unwrap_err(),
        store.list().unwrap_err(),
    ] {
        assert_eq!(err.reason(), "store_unavailable", "{err}");
    }
    assert_eq!(
        fs::read_to_string(moved.join(entries(&moved)[0].as_str())).unwrap(),
        SENTINEL
    );
}

#[test]
fn a_removed_dir_is_recreated_0700() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    fs::remove_dir(store.dir()).unwrap();
    assert!(store.available());
    assert_eq!(mode(store.dir()), 0o700);
    store.put(None, "K", &secret("v")).unwrap();
    assert_eq!(store.get(None, "K").unwrap().expose(), "v");
}

#[test]
fn a_secret_file_replaced_by_a_symlink_is_refused() {
    let (tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    store.put(None, "K", &secret("original")).unwrap();
    let name = entries(store.dir()).remove(0);
    // The link points at a perfectly private file of ours: it is still refused.
    let target = tmp.path().join("planted");
    fs::write(&target, SENTINEL).unwrap();
    fs::set_permissions(&target, Permissions::from_mode(0o600)).unwrap();
    fs::remove_file(store.dir().join(&name)).unwrap();
    symlink(&target, store.dir().join(&name)).unwrap();

    let err = store.get(None, "K").unwrap_err();
    assert_eq!(err.reason(), "insecure_file");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(!format!("{err} {err:?}").contains(SENTINEL));
    assert_eq!(store.resolve("K").unwrap_err().reason(), "insecure_file");
    assert_eq!(
        store.status(None, "K").unwrap_err().reason(),
        "insecure_file"
    );
    let list = store.list().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].exists, None, "present but unusable");
    // A put replaces the link itself, leaving its target alone.
    store.put(None, "K", &secret("fresh")).unwrap();
    assert_eq!(fs::read_to_string(&target).unwrap(), SENTINEL);
    assert_eq!(store.get(None, "K").unwrap().expose(), "fresh");
}

#[test]
fn a_group_or_world_readable_secret_file_is_refused() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    store.put(None, "K", &secret(SENTINEL)).unwrap();
    let file = store.dir().join(entries(store.dir()).remove(0));
    for loose in [0o640, 0o604, 0o644, 0o660] {
        fs::set_permissions(&file, Permissions::from_mode(loose)).unwrap();
        let err = store.get(None, "K").unwrap_err();
        assert_eq!(err.reason(), "insecure_file", "{loose:o}");
        assert!(err.to_string().contains(&format!("{loose:04o}")), "{err}");
        assert!(!format!("{err} {err:?}").contains(SENTINEL));
    }
    fs::set_permissions(&file, Permissions::from_mode(0o600)).unwrap();
    assert_eq!(store.get(None, "K").unwrap().expose(), SENTINEL);
}

#[test]
fn another_users_dir_and_files_are_refused() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    store.put(None, "K", &secret("v")).unwrap();
    let file = store.dir().join(entries(store.dir()).remove(0));
    let me = fs::metadata(store.dir()).unwrap().uid();
    let other = me + 1;
    match std::os::unix::fs::chown(&file, Some(other), None) {
        Ok(()) => {
            // Privileged (root in CI containers): exercise the real ownership checks.
            let err = store.get(None, "K").unwrap_err();
            assert_eq!(err.reason(), "insecure_file");
            assert!(
                err.to_string().contains(&format!("owned by uid {other}")),
                "{err}"
            );
            std::os::unix::fs::chown(store.dir(), Some(other), None).unwrap();
            assert!(!store.available());
            let err = SecretStore::open(&car_home).unwrap_err();
            assert_eq!(err.reason(), "store_unavailable");
            assert!(err.to_string().contains("not this user"), "{err}");
        }
        // Unprivileged: the chown itself must be refused; fsutil's unit tests cover the
        // checks with a substituted uid.
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}"),
    }
}

#[test]
fn corrupt_files_are_reported_without_their_contents() {
    let (_tmp, car_home) = home();
    let store = SecretStore::open(&car_home).unwrap();
    store.put(None, "K", &secret("v")).unwrap();
    let file = store.dir().join(entries(store.dir()).remove(0));
    let mut bad = SENTINEL.as_bytes().to_vec();
    bad.push(0xff);
    fs::write(&file, &bad).unwrap();
    let err = store.get(None, "K").unwrap_err();
    assert_eq!(err.reason(), "corrupt");
    assert!(err.to_string().contains("UTF-8"), "{err}");
    assert!(!format!("{err} {err:?}").contains(SENTINEL));
    fs::write(&file, SENTINEL.repeat(70_000 / SENTINEL.len())).unwrap();
    let err = store.get(None, "K").unwrap_err();
    assert_eq!(err.reason(), "corrupt");
    assert!(!format!("{err} {err:?}").contains(SENTINEL));
}

//! write_file and edit_file: shapes, atomic overwrite, and the read-before-edit guard.

mod common;

use car_builtin_tools::RefusalReason;
use common::*;
use serde_json::json;

fn assert_no_temp_files(env: &Env, dir: &str) {
    let names: Vec<String> = std::fs::read_dir(env.path(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.contains("car-tmp")),
        "temp files left: {names:?}"
    );
}

#[test]
fn write_creates_new_files_and_parent_dirs_without_a_read() {
    let env = Env::new();
    let out = env.ok(
        "write_file",
        json!({"path": "a/b/new.txt", "content": "hello\n"}),
    );
    assert_eq!(
        out,
        json!({"path": "a/b/new.txt", "bytes_written": 6, "created": true})
    );
    assert_eq!(env.get("a/b/new.txt"), "hello\n");
    // Append to a missing file creates it too.
    let out = env.ok(
        "write_file",
        json!({"path": "log.txt", "content": "x", "append": true}),
    );
    assert_eq!(out["created"], true);
    assert_eq!(env.get("log.txt"), "x");
    assert_failed(
        env.run("write_file", json!({"path": ".", "content": "x"})),
        "root",
    );
    std::fs::create_dir(env.path("dir")).unwrap();
    assert_failed(
        env.run("write_file", json!({"path": "dir", "content": "x"})),
        "directory",
    );
    env.put("plain.txt", "p");
    assert_failed(
        env.run(
            "write_file",
            json!({"path": "plain.txt/under.txt", "content": "x"}),
        ),
        "plain.txt/under.txt",
    );
    assert_invalid(env.run("write_file", json!({"path": "x.txt"})), "content");
    assert_invalid(
        env.run(
            "write_file",
            json!({"path": "x.txt", "content": "c", "append": "yes"}),
        ),
        "append",
    );
}

#[test]
fn overwrite_needs_a_full_read_and_is_atomic() {
    let env = Env::new();
    env.put("f.txt", "one\ntwo\nthree\n");
    assert_refused(
        env.run("write_file", json!({"path": "f.txt", "content": "new"})),
        RefusalReason::NotRead,
    );
    assert_eq!(env.get("f.txt"), "one\ntwo\nthree\n");
    env.ok("read_file", json!({"path": "f.txt", "limit": 2}));
    assert_refused(
        env.run("write_file", json!({"path": "f.txt", "content": "new"})),
        RefusalReason::PartialRead,
    );
    // The remaining page completes the coverage.
    env.ok("read_file", json!({"path": "f.txt", "offset": 2}));
    let out = env.ok("write_file", json!({"path": "f.txt", "content": "new\n"}));
    assert_eq!(
        out,
        json!({"path": "f.txt", "bytes_written": 4, "created": false})
    );
    assert_eq!(env.get("f.txt"), "new\n");
    assert_no_temp_files(&env, ".");
    // The session wrote it, so it may write again without reading back.
    env.ok("write_file", json!({"path": "f.txt", "content": "newer\n"}));
    assert_eq!(env.get("f.txt"), "newer\n");
}

#[cfg(unix)]
#[test]
fn overwrite_keeps_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    env.put("run.sh", "#!/bin/sh\n");
    std::fs::set_permissions(env.path("run.sh"), std::fs::Permissions::from_mode(0o751)).unwrap();
    env.ok("read_file", json!({"path": "run.sh"}));
    env.ok(
        "write_file",
        json!({"path": "run.sh", "content": "#!/bin/sh\necho hi\n"}),
    );
    let mode = std::fs::metadata(env.path("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o751);
}

#[test]
fn append_needs_a_full_read_and_appends() {
    let env = Env::new();
    env.put("log.txt", "a\n");
    assert_refused(
        env.run(
            "write_file",
            json!({"path": "log.txt", "content": "b\n", "append": true}),
        ),
        RefusalReason::NotRead,
    );
    env.ok("read_file", json!({"path": "log.txt"}));
    let out = env.ok(
        "write_file",
        json!({"path": "log.txt", "content": "b\n", "append": true}),
    );
    assert_eq!(
        out,
        json!({"path": "log.txt", "bytes_written": 2, "created": false})
    );
    env.ok(
        "write_file",
        json!({"path": "log.txt", "content": "c\n", "append": true}),
    );
    assert_eq!(env.get("log.txt"), "a\nb\nc\n");
}

#[test]
fn write_after_the_file_changed_on_disk_is_stale() {
    let env = Env::new();
    env.put("f.txt", "v1\n");
    env.ok("read_file", json!({"path": "f.txt"}));
    env.put("f.txt", "v2\n"); // same size, different content
    assert_refused(
        env.run("write_file", json!({"path": "f.txt", "content": "mine"})),
        RefusalReason::Stale,
    );
    assert_eq!(env.get("f.txt"), "v2\n");
}

#[test]
fn edit_replaces_exactly_one_occurrence() {
    let env = Env::new();
    env.put("src/lib.rs", "fn a() {}\nfn b() {}\n");
    env.ok("read_file", json!({"path": "src/lib.rs"}));
    let out = env.ok(
        "edit_file",
        json!({"path": "src/lib.rs", "old_text": "fn b() {}", "new_text": "fn b() { 1 }"}),
    );
    assert_eq!(out, json!({"path": "src/lib.rs", "replacements": 1}));
    assert_eq!(env.get("src/lib.rs"), "fn a() {}\nfn b() { 1 }\n");
    assert_no_temp_files(&env, "src");
    // Its own edit keeps the file "read": a second edit needs no re-read.
    env.ok(
        "edit_file",
        json!({"path": "src/lib.rs", "old_text": "fn a() {}\n", "new_text": ""}),
    );
    assert_eq!(env.get("src/lib.rs"), "fn b() { 1 }\n");
}

#[test]
fn edit_match_count_rules() {
    let env = Env::new();
    env.put("f.txt", "x = 1\nx = 1\ny = 2\n");
    env.ok("read_file", json!({"path": "f.txt"}));
    assert_failed(
        env.run(
            "edit_file",
            json!({"path": "f.txt", "old_text": "z = 3", "new_text": "q"}),
        ),
        "not found",
    );
    match env.run(
        "edit_file",
        json!({"path": "f.txt", "old_text": "x = 1", "new_text": "x = 9"}),
    ) {
        Err(car_builtin_tools::ToolError::Failed { message }) => {
            assert!(message.contains("2 times"), "{message}");
            assert!(message.contains("replace_all"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let out = env.ok(
        "edit_file",
        json!({"path": "f.txt", "old_text": "x = 1", "new_text": "x = 9", "replace_all": true}),
    );
    assert_eq!(out["replacements"], 2);
    assert_eq!(env.get("f.txt"), "x = 9\nx = 9\ny = 2\n");
    assert_invalid(
        env.run(
            "edit_file",
            json!({"path": "f.txt", "old_text": "", "new_text": "q"}),
        ),
        "old_text",
    );
    assert_invalid(
        env.run(
            "edit_file",
            json!({"path": "f.txt", "old_text": "y", "new_text": "y"}),
        ),
        "new_text",
    );
    assert_invalid(
        env.run("edit_file", json!({"path": "f.txt", "old_text": "y"})),
        "new_text",
    );
    assert_failed(
        env.run(
            "edit_file",
            json!({"path": "missing.txt", "old_text": "a", "new_text": "b"}),
        ),
        "write_file",
    );
}

#[test]
fn edit_without_a_read_is_refused_and_after_a_read_works() {
    let env = Env::new();
    env.put("f.txt", "hello world\n");
    assert_refused(
        env.run(
            "edit_file",
            json!({"path": "f.txt", "old_text": "world", "new_text": "there"}),
        ),
        RefusalReason::NotRead,
    );
    assert_eq!(env.get("f.txt"), "hello world\n");
    env.ok("read_file", json!({"path": "f.txt"}));
    env.ok(
        "edit_file",
        json!({"path": "f.txt", "old_text": "world", "new_text": "there"}),
    );
    assert_eq!(env.get("f.txt"), "hello there\n");
}

#[test]
fn edit_after_the_file_changed_on_disk_is_stale() {
    let env = Env::new();
    env.put("f.txt", "hello world\n");
    env.ok("read_file", json!({"path": "f.txt"}));
    env.put("f.txt", "hello world, changed\n");
    assert_refused(
        env.run(
            "edit_file",
            json!({"path": "f.txt", "old_text": "world", "new_text": "there"}),
        ),
        RefusalReason::Stale,
    );
    assert_eq!(env.get("f.txt"), "hello world, changed\n");
    // Reading again licenses the edit.
    env.ok("read_file", json!({"path": "f.txt"}));
    env.ok(
        "edit_file",
        json!({"path": "f.txt", "old_text": "world", "new_text": "there"}),
    );
}

#[test]
fn paged_read_licenses_a_unique_edit_but_not_replace_all() {
    let env = Env::new();
    let text: String = (1..=50).map(|i| format!("line {i}\n")).collect();
    env.put("f.txt", &text);
    env.ok(
        "read_file",
        json!({"path": "f.txt", "offset": 10, "limit": 5}),
    );
    assert_refused(
        env.run(
            "edit_file",
            json!({"path": "f.txt", "old_text": "line", "new_text": "row", "replace_all": true}),
        ),
        RefusalReason::PartialRead,
    );
    assert_refused(
        env.run("write_file", json!({"path": "f.txt", "content": "x"})),
        RefusalReason::PartialRead,
    );
    assert_eq!(env.get("f.txt"), text);
    env.ok(
        "edit_file",
        json!({"path": "f.txt", "old_text": "line 12\n", "new_text": "twelve\n"}),
    );
    assert!(env.get("f.txt").contains("line 11\ntwelve\nline 13\n"));
}

#[test]
fn ledgers_are_per_session() {
    let env = Env::new();
    env.put("f.txt", "abc\n");
    env.ok("read_file", json!({"path": "f.txt"}));
    let other_session = car_builtin_tools::ReadLedger::new();
    let err = env.ws.execute(
        "edit_file",
        &json!({"path": "f.txt", "old_text": "abc", "new_text": "xyz"}),
        &other_session,
    );
    assert_refused(err, RefusalReason::NotRead);
    env.ledger.clear();
    assert!(env.ledger.is_empty());
    assert_refused(
        env.run(
            "edit_file",
            json!({"path": "f.txt", "old_text": "abc", "new_text": "xyz"}),
        ),
        RefusalReason::NotRead,
    );
}

#[test]
fn concurrent_edits_in_one_session_lose_nothing() {
    let env = std::sync::Arc::new(Env::new());
    let text: String = (0..8).map(|i| format!("tok{i}\n")).collect();
    env.put("f.txt", &text);
    env.ok("read_file", json!({"path": "f.txt"}));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let env = env.clone();
            std::thread::spawn(move || {
                env.run(
                    "edit_file",
                    json!({"path": "f.txt", "old_text": format!("tok{i}\n"), "new_text": format!("done{i}\n")}),
                )
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    let expected: String = (0..8).map(|i| format!("done{i}\n")).collect();
    assert_eq!(env.get("f.txt"), expected);
}

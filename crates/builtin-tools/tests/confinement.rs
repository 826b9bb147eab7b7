//! Confinement: `..`, absolute paths, and symlinks pointing out of the root, for every
//! tool that takes a path. Outside files must come through byte-for-byte unchanged.
#![cfg(unix)]

mod common;

use std::fs;
use std::os::unix::fs::symlink;

use car_builtin_tools::{RefusalReason, ToolError, Workspace};
use common::*;
use serde_json::{json, Value};

const SECRET: &[u8] = b"TOP SECRET\n";

/// Outside: `secret.txt`, `outdir/inner.txt`. Inside: `link_file` -> outside secret,
/// `link_dir` -> outside dir, `dangling` -> missing outside file, `chain` -> `link_file`,
/// `real.txt`, `sub/x.txt`, `inside_link` -> real.txt, `inside_dir_link` -> sub.
fn setup() -> Env {
    let env = Env::new();
    fs::write(env.outside_path("secret.txt"), SECRET).unwrap();
    fs::create_dir(env.outside_path("outdir")).unwrap();
    fs::write(env.outside_path("outdir/inner.txt"), SECRET).unwrap();
    symlink(env.outside_path("secret.txt"), env.path("link_file")).unwrap();
    symlink(env.outside_path("outdir"), env.path("link_dir")).unwrap();
    symlink(env.outside_path("not_yet.txt"), env.path("dangling")).unwrap();
    symlink("link_file", env.path("chain")).unwrap();
    env.put("real.txt", "real content\n");
    env.put("sub/x.txt", "x SECRET-free\n");
    symlink("real.txt", env.path("inside_link")).unwrap();
    symlink("sub", env.path("inside_dir_link")).unwrap();
    env
}

fn assert_outside_untouched(env: &Env) {
    assert_eq!(fs::read(env.outside_path("secret.txt")).unwrap(), SECRET);
    assert_eq!(
        fs::read(env.outside_path("outdir/inner.txt")).unwrap(),
        SECRET
    );
    let mut names: Vec<String> = fs::read_dir(env.outside.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["outdir", "secret.txt"]);
    assert_eq!(fs::read_dir(env.outside_path("outdir")).unwrap().count(), 1);
}

/// Every path-taking tool called with `path` (edit gets a plausible old/new text).
fn every_path_call(path: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("read_file", json!({"path": path})),
        ("write_file", json!({"path": path, "content": "pwned\n"})),
        (
            "write_file",
            json!({"path": path, "content": "pwned\n", "append": true}),
        ),
        (
            "edit_file",
            json!({"path": path, "old_text": "TOP", "new_text": "pwned"}),
        ),
        ("list_dir", json!({"path": path})),
        ("find_files", json!({"pattern": "*", "path": path})),
        ("grep_files", json!({"pattern": "SECRET", "path": path})),
    ]
}

fn refuse_all(env: &Env, path: &str, reason: RefusalReason) {
    for (tool, params) in every_path_call(path) {
        match env.run(tool, params.clone()) {
            Err(ToolError::Refused { reason: r, .. }) if r == reason => {}
            other => panic!("{tool} {params}: expected {reason}, got {other:?}"),
        }
    }
}

#[test]
fn dotdot_is_refused_for_every_tool() {
    let env = setup();
    for path in [
        "..",
        "../secret.txt",
        "sub/../real.txt",
        "sub/../../x",
        "./..",
    ] {
        refuse_all(&env, path, RefusalReason::PathEscape);
    }
    let outside_rel = format!(
        "../{}/secret.txt",
        env.outside.path().file_name().unwrap().to_string_lossy()
    );
    refuse_all(&env, &outside_rel, RefusalReason::PathEscape);
    assert_outside_untouched(&env);
    assert!(!env.ws.root().parent().unwrap().join("secret.txt").exists());
}

#[test]
fn absolute_paths_outside_are_refused() {
    let env = setup();
    let secret = env.outside_path("secret.txt");
    let outdir = env.outside_path("outdir");
    let new_outside = env.outside_path("created.txt");
    for path in [&secret, &outdir, &new_outside] {
        refuse_all(&env, path.to_str().unwrap(), RefusalReason::PathEscape);
    }
    refuse_all(&env, "/", RefusalReason::PathEscape);
    // A sibling whose name has the root's name as a prefix is still outside.
    let sibling = format!("{}-sibling", env.ws.root().display());
    fs::create_dir(&sibling).unwrap();
    let sibling_file = format!("{sibling}/f.txt");
    refuse_all(&env, &sibling_file, RefusalReason::PathEscape);
    assert!(!std::path::Path::new(&sibling_file).exists());
    fs::remove_dir(&sibling).unwrap();
    // An absolute path with `..` that would land back inside is refused too.
    let back_in = format!("{}/sub/../real.txt", env.ws.root().display());
    refuse_all(&env, &back_in, RefusalReason::PathEscape);
    assert_outside_untouched(&env);
}

#[test]
fn symlink_to_an_outside_file_is_refused_for_every_tool() {
    let env = setup();
    for path in ["link_file", "chain", "./link_file"] {
        refuse_all(&env, path, RefusalReason::SymlinkEscape);
    }
    assert_outside_untouched(&env);
    // The link itself is left as it was.
    assert!(fs::symlink_metadata(env.path("link_file"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn symlink_to_an_outside_dir_is_refused_for_every_tool() {
    let env = setup();
    for path in [
        "link_dir",
        "link_dir/inner.txt",
        "link_dir/new.txt",
        "link_dir/missing/deeper.txt",
        "inside_dir_link/../link_dir",
    ] {
        let reason = if path.contains("..") {
            RefusalReason::PathEscape
        } else {
            RefusalReason::SymlinkEscape
        };
        refuse_all(&env, path, reason);
    }
    assert_outside_untouched(&env);
}

#[test]
fn a_dangling_symlink_is_never_written_through() {
    let env = setup();
    refuse_all(&env, "dangling", RefusalReason::SymlinkEscape);
    assert!(!env.outside_path("not_yet.txt").exists());
    // A dangling link whose target would be inside is refused too, with its own reason.
    symlink("not_here.txt", env.path("dangling_in")).unwrap();
    assert_refused(
        env.run("write_file", json!({"path": "dangling_in", "content": "x"})),
        RefusalReason::DanglingSymlink,
    );
    assert!(!env.path("not_here.txt").exists());
    assert_outside_untouched(&env);
}

#[test]
fn walkers_do_not_follow_symlinks() {
    let env = setup();
    let grep = env.ok("grep_files", json!({"pattern": "TOP SECRET"}));
    assert_eq!(grep["matches"], json!([]));
    assert_eq!(grep["files_scanned"], 2, "{grep}"); // real.txt, sub/x.txt
    let find = env.ok("find_files", json!({"pattern": "**"}));
    assert_eq!(find["files"], json!(["real.txt", "sub/x.txt"]));
    let find_inner = env.ok("find_files", json!({"pattern": "inner.txt"}));
    assert_eq!(find_inner["files"], json!([]));

    let list = env.ok("list_dir", json!({}));
    let entries = list["entries"].as_array().unwrap();
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "chain",
            "dangling",
            "inside_dir_link",
            "inside_link",
            "link_dir",
            "link_file",
            "real.txt",
            "sub"
        ]
    );
    let link_dir = entries.iter().find(|e| e["name"] == "link_dir").unwrap();
    assert_eq!(
        *link_dir,
        json!({"name": "link_dir", "path": "link_dir", "is_dir": false, "is_symlink": true, "size_bytes": 0})
    );
    let real = entries.iter().find(|e| e["name"] == "real.txt").unwrap();
    assert_eq!(real["is_symlink"], false);
    assert_eq!(real["size_bytes"], 13);
}

#[test]
fn symlinks_that_stay_inside_work() {
    let env = setup();
    let out = env.ok("read_file", json!({"path": "inside_link"}));
    assert_eq!(out["path"], "inside_link");
    assert_eq!(out["content"], "     1\treal content");
    // The read through the link licenses an edit through the real name (same file).
    env.ok(
        "edit_file",
        json!({"path": "real.txt", "old_text": "real", "new_text": "edited"}),
    );
    env.ok(
        "write_file",
        json!({"path": "inside_link", "content": "rewritten\n"}),
    );
    assert_eq!(env.get("real.txt"), "rewritten\n");
    assert!(fs::symlink_metadata(env.path("inside_link"))
        .unwrap()
        .file_type()
        .is_symlink());
    let list = env.ok("list_dir", json!({"path": "inside_dir_link"}));
    assert_eq!(list["entries"][0]["path"], "inside_dir_link/x.txt");
    let found = env.ok(
        "find_files",
        json!({"pattern": "*.txt", "path": "inside_dir_link"}),
    );
    assert_eq!(found["files"], json!(["inside_dir_link/x.txt"]));
    let grep = env.ok(
        "grep_files",
        json!({"pattern": "x", "path": "inside_dir_link/x.txt"}),
    );
    assert_eq!(grep["matches"][0]["path"], "inside_dir_link/x.txt");
    env.ok(
        "write_file",
        json!({"path": "inside_dir_link/new/n.txt", "content": "n"}),
    );
    assert_eq!(env.get("sub/new/n.txt"), "n");
    assert_outside_untouched(&env);
}

#[test]
fn a_root_given_through_a_symlink_accepts_absolute_paths_under_either_name() {
    let env = setup();
    let alias_dir = tempfile::tempdir().unwrap();
    let alias = alias_dir.path().join("ws");
    symlink(env.ws.root(), &alias).unwrap();
    let ws = Workspace::new(&alias).unwrap();
    assert_eq!(ws.root(), env.ws.root());
    let ledger = car_builtin_tools::ReadLedger::new();
    for abs in [alias.join("real.txt"), env.ws.root().join("real.txt")] {
        let out = ws
            .execute(
                "read_file",
                &json!({"path": abs.to_str().unwrap()}),
                &ledger,
            )
            .unwrap();
        assert_eq!(out["path"], "real.txt");
    }
}

#[test]
fn workspace_root_must_be_an_existing_directory() {
    let env = setup();
    assert!(Workspace::new(env.path("real.txt")).is_err());
    assert!(Workspace::new(env.path("missing")).is_err());
}

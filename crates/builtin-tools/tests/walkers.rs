//! list_dir, find_files and grep_files: shapes, skip list, glob rules and bounds.

mod common;

use car_builtin_tools::grep::{DEFAULT_GREP_RESULTS, MAX_MATCH_TEXT_CHARS};
use car_builtin_tools::walk::MAX_LIST_ENTRIES;
use common::*;
use serde_json::json;

fn tree() -> Env {
    let env = Env::new();
    env.put("README.md", "# Title\nSome text\n");
    env.put("src/main.rs", "fn main() {\n    println!(\"hi\");\n}\n");
    env.put("src/util/mod.rs", "pub fn helper() {}\n// TODO: more\n");
    env.put("src/util/data.json", "{\"todo\": true}\n");
    env.put("docs/guide.md", "todo: write\n");
    env.put(".hidden/secret.rs", "fn hidden() {}\n");
    env.put(".env", "TODO=1\n");
    env.put("node_modules/pkg/index.rs", "// TODO node\n");
    env.put("target/debug/out.rs", "// TODO target\n");
    env.put("__pycache__/x.rs", "// TODO pyc\n");
    env
}

#[test]
fn list_dir_shape_order_and_skip_list() {
    let env = tree();
    let out = env.ok("list_dir", json!({}));
    assert_eq!(out["path"], ".");
    assert_eq!(out["truncated"], false);
    let names: Vec<&str> = out["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["README.md", "docs", "src"]);
    assert_eq!(
        out["entries"][0],
        json!({"name": "README.md", "path": "README.md", "is_dir": false, "is_symlink": false, "size_bytes": 18})
    );
    assert_eq!(out["entries"][2]["is_dir"], true);
    let sub = env.ok("list_dir", json!({"path": "src/util"}));
    assert_eq!(sub["entries"][0]["path"], "src/util/data.json");
    // The skip list applies below the listed directory, not to it.
    let hidden = env.ok("list_dir", json!({"path": ".hidden"}));
    assert_eq!(hidden["entries"][0]["path"], ".hidden/secret.rs");
    assert_failed(
        env.run("list_dir", json!({"path": "README.md"})),
        "not a directory",
    );
    assert_failed(env.run("list_dir", json!({"path": "nope"})), "not found");
}

#[test]
fn list_dir_is_bounded() {
    let env = Env::new();
    for i in 0..MAX_LIST_ENTRIES + 5 {
        std::fs::write(env.path(&format!("f{i:05}")), "").unwrap();
    }
    let out = env.ok("list_dir", json!({"path": "."}));
    assert_eq!(out["entries"].as_array().unwrap().len(), MAX_LIST_ENTRIES);
    assert_eq!(out["truncated"], true);
    assert_eq!(out["entries"][0]["name"], "f00000");
}

#[test]
fn find_bare_patterns_match_names_at_any_depth() {
    let env = tree();
    let out = env.ok("find_files", json!({"pattern": "*.rs"}));
    assert_eq!(
        out,
        json!({"files": ["src/main.rs", "src/util/mod.rs"], "truncated": false})
    );
    let md = env.ok("find_files", json!({"pattern": "*.{md,json}"}));
    assert_eq!(
        md["files"],
        json!(["README.md", "docs/guide.md", "src/util/data.json"])
    );
}

#[test]
fn find_slash_patterns_match_paths_relative_to_the_search_dir() {
    let env = tree();
    let top = env.ok("find_files", json!({"pattern": "src/*.rs"}));
    assert_eq!(top["files"], json!(["src/main.rs"]));
    let deep = env.ok("find_files", json!({"pattern": "src/**/*.rs"}));
    assert_eq!(deep["files"], json!(["src/main.rs", "src/util/mod.rs"]));
    // Relative to `path`, but reported relative to the workspace root.
    let under = env.ok("find_files", json!({"pattern": "util/*.rs", "path": "src"}));
    assert_eq!(under["files"], json!(["src/util/mod.rs"]));
    let none = env.ok("find_files", json!({"pattern": "util/*.rs"}));
    assert_eq!(none["files"], json!([]));
}

#[test]
fn find_is_bounded_and_checks_params() {
    let env = tree();
    let out = env.ok("find_files", json!({"pattern": "*", "max_results": 2}));
    assert_eq!(out["files"].as_array().unwrap().len(), 2);
    assert_eq!(out["truncated"], true);
    let exact = env.ok("find_files", json!({"pattern": "*.rs", "max_results": 2}));
    assert_eq!(exact["truncated"], false);
    assert_invalid(env.run("find_files", json!({})), "pattern");
    assert_invalid(env.run("find_files", json!({"pattern": "[x"})), "pattern");
    assert_invalid(
        env.run("find_files", json!({"pattern": "*", "max_results": 0})),
        "max_results",
    );
    assert_invalid(
        env.run("find_files", json!({"pattern": "*", "max_results": "5"})),
        "max_results",
    );
    assert_failed(
        env.run("find_files", json!({"pattern": "*", "path": "README.md"})),
        "not a directory",
    );
}

#[test]
fn grep_matches_lines_and_skips_the_skip_list() {
    let env = tree();
    let out = env.ok("grep_files", json!({"pattern": "TODO"}));
    assert_eq!(
        out,
        json!({
            "matches": [{"path": "src/util/mod.rs", "line": 2, "text": "// TODO: more"}],
            "truncated": false,
            "files_scanned": 5,
        })
    );
    let ci = env.ok(
        "grep_files",
        json!({"pattern": "todo", "case_insensitive": true}),
    );
    let paths: Vec<&str> = ci["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["docs/guide.md", "src/util/data.json", "src/util/mod.rs"]
    );
    let globbed = env.ok(
        "grep_files",
        json!({"pattern": "todo", "case_insensitive": true, "glob": "*.md"}),
    );
    assert_eq!(globbed["matches"][0]["path"], "docs/guide.md");
    assert_eq!(globbed["files_scanned"], 2);
    let one_file = env.ok(
        "grep_files",
        json!({"pattern": "^fn", "path": "src/main.rs"}),
    );
    assert_eq!(
        one_file["matches"][0],
        json!({"path": "src/main.rs", "line": 1, "text": "fn main() {"})
    );
}

#[test]
fn grep_skips_binary_and_large_files_and_cuts_long_lines() {
    let env = Env::new();
    let mut binary = b"needle\n".to_vec();
    binary.push(0);
    std::fs::write(env.path("bin.dat"), &binary).unwrap();
    env.put("big.txt", &format!("needle\n{}", "z".repeat(1024 * 1024)));
    env.put("long.txt", &format!("needle {}\n", "w".repeat(2000)));
    let out = env.ok("grep_files", json!({"pattern": "needle"}));
    assert_eq!(out["files_scanned"], 1);
    assert_eq!(out["matches"].as_array().unwrap().len(), 1);
    let text = out["matches"][0]["text"].as_str().unwrap();
    assert_eq!(text.chars().count(), MAX_MATCH_TEXT_CHARS + 1);
    assert!(text.ends_with('…'));
}

#[test]
fn grep_is_bounded() {
    let env = Env::new();
    let text: String = (0..200).map(|i| format!("hit {i}\n")).collect();
    env.put("many.txt", &text);
    let out = env.ok("grep_files", json!({"pattern": "hit"}));
    assert_eq!(
        out["matches"].as_array().unwrap().len(),
        DEFAULT_GREP_RESULTS
    );
    assert_eq!(out["truncated"], true);
    let three = env.ok("grep_files", json!({"pattern": "hit", "max_results": 3}));
    assert_eq!(three["matches"][2]["line"], 3);
    let all = env.ok("grep_files", json!({"pattern": "hit", "max_results": 200}));
    assert_eq!(all["truncated"], false);
}

#[test]
fn grep_bad_or_oversized_regex_names_pattern() {
    let env = tree();
    assert_invalid(
        env.run("grep_files", json!({"pattern": "(unclosed"})),
        "pattern",
    );
    assert_invalid(env.run("grep_files", json!({"pattern": ""})), "pattern");
    assert_invalid(env.run("grep_files", json!({})), "pattern");
    // Compiles to far more than the size limit.
    assert_invalid(
        env.run("grep_files", json!({"pattern": "\\w{1000}{1000}"})),
        "pattern",
    );
    assert_invalid(
        env.run("grep_files", json!({"pattern": "x".repeat(2000)})),
        "pattern",
    );
    assert_invalid(
        env.run("grep_files", json!({"pattern": "a", "glob": "{x"})),
        "glob",
    );
    assert_invalid(
        env.run("grep_files", json!({"pattern": "a", "case_insensitive": 1})),
        "case_insensitive",
    );
}

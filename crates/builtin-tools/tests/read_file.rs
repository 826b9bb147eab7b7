//! read_file: shape, line numbering, paging and bounds.

mod common;

use car_builtin_tools::read::{MAX_LINE_CHARS, MAX_PAGE_BYTES, MAX_PAGE_LINES};
use common::*;
use serde_json::json;

#[test]
fn read_returns_numbered_content_and_shape() {
    let env = Env::new();
    env.put("src/a.txt", "alpha\nbeta\r\ngamma\n");
    let out = env.ok("read_file", json!({"path": "src/a.txt"}));
    assert_eq!(out["path"], "src/a.txt");
    assert_eq!(out["content"], "     1\talpha\n     2\tbeta\n     3\tgamma");
    assert_eq!(out["size_bytes"], 18);
    assert_eq!(out["total_lines"], 3);
    assert_eq!(out["offset"], 0);
    assert_eq!(out["lines_returned"], 3);
    assert!(out.get("truncated").is_none());
    assert!(out.get("lines_cut").is_none());
}

#[test]
fn read_pages_with_offset_and_limit() {
    let env = Env::new();
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    env.put("f.txt", &text);
    let out = env.ok(
        "read_file",
        json!({"path": "f.txt", "offset": 3, "limit": 2}),
    );
    assert_eq!(out["content"], "     4\tline 4\n     5\tline 5");
    assert_eq!(out["lines_returned"], 2);
    assert_eq!(
        out["truncated"],
        json!({"next_offset": 5, "reason": "limit"})
    );
    let last = env.ok(
        "read_file",
        json!({"path": "f.txt", "offset": 8, "limit": 5}),
    );
    assert_eq!(last["lines_returned"], 2);
    assert!(last.get("truncated").is_none());
    assert_invalid(
        env.run("read_file", json!({"path": "f.txt", "offset": 10})),
        "offset",
    );
    assert_invalid(
        env.run("read_file", json!({"path": "f.txt", "limit": 0})),
        "limit",
    );
}

#[test]
fn read_caps_a_page_at_the_line_bound() {
    let env = Env::new();
    let text: String = (0..MAX_PAGE_LINES + 10).map(|i| format!("{i}\n")).collect();
    env.put("big.txt", &text);
    let out = env.ok("read_file", json!({"path": "big.txt", "limit": 100000}));
    assert_eq!(out["lines_returned"], MAX_PAGE_LINES);
    assert_eq!(out["total_lines"], MAX_PAGE_LINES + 10);
    assert_eq!(
        out["truncated"],
        json!({"next_offset": MAX_PAGE_LINES, "reason": "max_lines"})
    );
    let rest = env.ok(
        "read_file",
        json!({"path": "big.txt", "offset": MAX_PAGE_LINES}),
    );
    assert_eq!(rest["lines_returned"], 10);
    assert!(rest["content"].as_str().unwrap().starts_with(&format!(
        "{:>6}\t{}",
        MAX_PAGE_LINES + 1,
        MAX_PAGE_LINES
    )));
}

#[test]
fn read_caps_a_page_at_the_byte_bound_and_cuts_long_lines() {
    let env = Env::new();
    // 1000 lines of 1000 chars: ~1 MB, so the byte bound stops the page first.
    let line = "x".repeat(1000);
    let text: String = (0..1000).map(|_| format!("{line}\n")).collect();
    env.put("wide.txt", &text);
    let out = env.ok("read_file", json!({"path": "wide.txt"}));
    let content = out["content"].as_str().unwrap();
    assert!(content.len() <= MAX_PAGE_BYTES);
    let returned = out["lines_returned"].as_u64().unwrap() as usize;
    assert!(returned > 100 && returned < 1000, "{returned}");
    assert_eq!(out["truncated"]["reason"], "max_bytes");
    assert_eq!(out["truncated"]["next_offset"], returned);

    env.put("minified.js", &"y".repeat(MAX_LINE_CHARS * 3));
    let out = env.ok("read_file", json!({"path": "minified.js"}));
    assert_eq!(out["lines_cut"], 1);
    assert!(out["content"].as_str().unwrap().len() < MAX_LINE_CHARS + 100);
}

#[test]
fn read_rejects_non_utf8_directories_and_missing_files() {
    let env = Env::new();
    std::fs::write(env.path("bin.dat"), [0xff, 0xfe, 0x00, 0x80]).unwrap();
    assert_failed(env.run("read_file", json!({"path": "bin.dat"})), "UTF-8");
    std::fs::create_dir(env.path("dir")).unwrap();
    assert_failed(env.run("read_file", json!({"path": "dir"})), "directory");
    assert_failed(
        env.run("read_file", json!({"path": "nope.txt"})),
        "not found",
    );
    assert_invalid(env.run("read_file", json!({})), "path");
    assert_invalid(env.run("read_file", json!({"path": ""})), "path");
    assert_invalid(env.run("read_file", json!({"path": 7})), "path");
}

#[test]
fn read_empty_file_and_absolute_path_inside() {
    let env = Env::new();
    env.put("empty.txt", "");
    let out = env.ok("read_file", json!({"path": "empty.txt"}));
    assert_eq!(out["content"], "");
    assert_eq!(out["total_lines"], 0);
    assert_eq!(out["lines_returned"], 0);

    env.put("d/abs.txt", "hi\n");
    let abs = env.path("d/abs.txt");
    let out = env.ok("read_file", json!({"path": abs.to_str().unwrap()}));
    assert_eq!(out["path"], "d/abs.txt");
    assert_eq!(out["content"], "     1\thi");
    let dotted = env.ok("read_file", json!({"path": "./d/./abs.txt"}));
    assert_eq!(dotted["path"], "d/abs.txt");
}

#[cfg(unix)]
#[test]
fn a_fifo_never_blocks_a_tool() {
    let env = Env::new();
    let fifo = env.path("pipe");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(status.success());
    env.put("note.txt", "pipe dream\n");
    assert_failed(
        env.run("read_file", json!({"path": "pipe"})),
        "not a regular file",
    );
    assert_failed(
        env.run("write_file", json!({"path": "pipe", "content": "x"})),
        "not a regular file",
    );
    let grep = env.ok("grep_files", json!({"pattern": "pipe"}));
    assert_eq!(grep["files_scanned"], 1);
    let list = env.ok("list_dir", json!({}));
    assert_eq!(list["entries"].as_array().unwrap().len(), 2);
}

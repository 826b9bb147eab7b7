//! What the daemon lists in `tools.list` (with `source: "builtin"`): each built-in tool's
//! name, a description for the model, a JSON Schema for its parameters, and whether it
//! modifies files (those go through the host's approval gate).
//!
//! The schemas describe the accepted params; they deliberately do not set
//! `additionalProperties: false`, because unknown fields are ignored (see
//! [`crate::params`]).

use serde_json::{json, Value};

/// One built-in tool as listed to clients and models.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDescriptor {
    /// The tool's name, e.g. `read_file`.
    pub name: &'static str,
    /// A description written for a model.
    pub description: &'static str,
    /// A JSON Schema (`type: object`) of the params.
    pub parameters: Value,
    /// Whether the tool modifies the workspace (write_file, edit_file).
    pub mutating: bool,
}

/// Every built-in tool name, in listing order.
pub const TOOL_NAMES: [&str; 7] = [
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "find_files",
    "grep_files",
    "calculate",
];

/// Whether `name` is a built-in tool.
pub fn is_builtin(name: &str) -> bool {
    TOOL_NAMES.contains(&name)
}

/// Whether `name` is a built-in tool that modifies files.
pub fn is_mutating(name: &str) -> bool {
    matches!(name, "write_file" | "edit_file")
}

/// The descriptors of every built-in tool, in [`TOOL_NAMES`] order.
pub fn descriptors() -> Vec<ToolDescriptor> {
    TOOL_NAMES
        .iter()
        .filter_map(|name| descriptor(name))
        .collect()
}

/// The descriptor of one built-in tool.
pub fn descriptor(name: &str) -> Option<ToolDescriptor> {
    let path_inside = "Path relative to the workspace root (an absolute path must lie inside it; `..` is not allowed).";
    let (name, description, parameters) = match name {
        "read_file" => (
            "read_file",
            "Read a UTF-8 text file from the workspace. Returns up to 2000 lines per call, each \
             prefixed with its 1-based line number and a tab. For long files pass `offset` (the \
             0-based line to start at, e.g. truncated.next_offset from the previous call) and \
             `limit`. A file must be read before it can be edited or overwritten.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": path_inside},
                    "offset": {"type": "integer", "minimum": 0, "description": "0-based line to start at (default 0)."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 2000, "description": "Most lines to return (default and maximum 2000)."}
                },
                "required": ["path"]
            }),
        ),
        "write_file" => (
            "write_file",
            "Create a file, replace a file's whole content, or append to it. Missing parent \
             directories are created. Replacing or appending to an existing file is only allowed \
             after reading all of it with read_file in this session, and only if it has not \
             changed since. Prefer edit_file for changing part of a file.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": path_inside},
                    "content": {"type": "string", "description": "The text to write."},
                    "append": {"type": "boolean", "description": "Add content at the end instead of replacing the file (default false)."}
                },
                "required": ["path", "content"]
            }),
        ),
        "edit_file" => (
            "edit_file",
            "Replace an exact piece of text in an existing file. `old_text` must match the file \
             exactly (whitespace and indentation included) and occur exactly once; include a few \
             surrounding lines to make it unique, or set `replace_all` to change every \
             occurrence. The file must have been read with read_file in this session (all of it \
             for replace_all) and not changed since.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": path_inside},
                    "old_text": {"type": "string", "description": "The exact text to replace (without the line-number prefixes read_file shows)."},
                    "new_text": {"type": "string", "description": "The replacement text (may be empty to delete)."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence instead of exactly one (default false)."}
                },
                "required": ["path", "old_text", "new_text"]
            }),
        ),
        "list_dir" => (
            "list_dir",
            "List the entries of one directory in the workspace (not recursive), with whether \
             each is a directory and each file's size. Hidden entries and node_modules, \
             __pycache__ and target are left out.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Directory relative to the workspace root (default \".\")."}
                }
            }),
        ),
        "find_files" => (
            "find_files",
            "Find files by glob pattern. A pattern without `/` (like `*.rs`) matches file names \
             at any depth; a pattern with `/` (like `src/**/*.ts`) matches the path relative to \
             `path`, where `**` spans directories. Supports `*`, `?`, `**`, `[a-z]` and `{a,b}`. \
             Hidden entries and node_modules, __pycache__ and target are skipped.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Glob pattern."},
                    "path": {"type": "string", "description": "Directory to search, relative to the workspace root (default \".\")."},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": 2000, "description": "Most paths to return (default 200)."}
                },
                "required": ["pattern"]
            }),
        ),
        "grep_files" => (
            "grep_files",
            "Search the contents of text files for a regular expression (Rust regex syntax, \
             matched line by line) and return each matching line with its path and 1-based line \
             number. Binary files, files over 1 MiB, hidden entries and node_modules, \
             __pycache__ and target are skipped.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression."},
                    "path": {"type": "string", "description": "File or directory to search, relative to the workspace root (default \".\")."},
                    "glob": {"type": "string", "description": "Only search files matching this glob (same rules as find_files)."},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Most matching lines to return (default 50)."},
                    "case_insensitive": {"type": "boolean", "description": "Ignore letter case (default false)."}
                },
                "required": ["pattern"]
            }),
        ),
        "calculate" => (
            "calculate",
            "Evaluate an arithmetic expression exactly as written: + - * / % ^ (power, also **), \
             parentheses, unary minus, decimals and scientific notation, the constants pi and e, \
             and the functions sqrt, abs, floor, ceil, round, min and max.",
            json!({
                "type": "object",
                "properties": {
                    "expression": {"type": "string", "description": "For example `(3 + 4) * 2 ^ 3 / sqrt(16)`."}
                },
                "required": ["expression"]
            }),
        ),
        _ => return None,
    };
    Some(ToolDescriptor {
        name,
        description,
        parameters,
        mutating: is_mutating(name),
    })
}

//! Glob patterns for `find_files` (`pattern`) and `grep_files` (`glob`), compiled to a
//! bounded [`regex::Regex`].
//!
//! Syntax:
//! - `*` any run of characters except `/`; `?` one character except `/`;
//! - `**` any run of characters including `/`; as a whole segment, `**/` matches zero or
//!   more directories (`**/*.rs` matches `a.rs` and `x/y/a.rs`);
//! - `[abc]`, `[a-z]`, `[!a-z]` (or `[^a-z]`) character classes, never matching `/`;
//! - `{a,b}` alternatives (may nest, up to [`MAX_BRACE_DEPTH`]);
//! - `\x` the literal character `x`.
//!
//! What is matched: a pattern without `/` (a *bare* pattern) matches a file's **name** at
//! any depth; a pattern containing `/` matches the file's path **relative to the search
//! directory**, `/`-separated. Leading `./` and `/` are dropped (the pattern is always
//! anchored at the search directory). Matching is case-sensitive and whole-string.

use regex::{Regex, RegexBuilder};

use crate::error::ToolError;

/// Longest pattern accepted, in bytes.
pub const MAX_GLOB_BYTES: usize = 1000;
/// Deepest `{…}` nesting accepted.
pub const MAX_BRACE_DEPTH: usize = 10;

/// A compiled glob.
#[derive(Debug, Clone)]
pub(crate) struct Glob {
    regex: Regex,
    match_path: bool,
}

impl Glob {
    /// Compiles `pattern`, the value of parameter `field`.
    pub(crate) fn new(field: &str, pattern: &str) -> Result<Self, ToolError> {
        if pattern.len() > MAX_GLOB_BYTES {
            return Err(ToolError::invalid(
                field,
                format!("is longer than {MAX_GLOB_BYTES} bytes"),
            ));
        }
        let mut p = pattern;
        loop {
            if let Some(rest) = p.strip_prefix("./") {
                p = rest;
            } else if let Some(rest) = p.strip_prefix('/') {
                p = rest;
            } else {
                break;
            }
        }
        if p.is_empty() {
            return Err(ToolError::invalid(field, "must not be empty"));
        }
        let source = translate(p).map_err(|m| ToolError::invalid(field, m))?;
        let regex = RegexBuilder::new(&source)
            .size_limit(1 << 20)
            .dfa_size_limit(1 << 20)
            .build()
            .map_err(|e| ToolError::invalid(field, format!("is not a usable glob: {e}")))?;
        Ok(Glob {
            regex,
            match_path: p.contains('/'),
        })
    }

    /// Whether a file matches: `rel` is its `/`-separated path relative to the search
    /// directory, `name` its file name.
    pub(crate) fn matches(&self, rel: &str, name: &str) -> bool {
        if self.match_path {
            self.regex.is_match(rel)
        } else {
            self.regex.is_match(name)
        }
    }
}

/// Glob → anchored regex source.
fn translate(glob: &str) -> Result<String, String> {
    let chars: Vec<char> = glob.chars().collect();
    let mut out = String::from("^");
    let mut depth = 0usize;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '*' if chars.get(i + 1) == Some(&'*') => {
                let at_segment_start = i == 0 || chars[i - 1] == '/';
                let after = i + 2;
                if at_segment_start && chars.get(after) == Some(&'/') {
                    out.push_str("(?:[^/]*/)*");
                    i = after + 1;
                } else {
                    out.push_str(".*");
                    i = after;
                }
                continue;
            }
            '*' => out.push_str("[^/]*"),
            '?' => out.push_str("[^/]"),
            '[' => {
                i = class(&chars, i, &mut out)?;
                continue;
            }
            '{' => {
                depth += 1;
                if depth > MAX_BRACE_DEPTH {
                    return Err(format!("nests `{{` deeper than {MAX_BRACE_DEPTH}"));
                }
                out.push_str("(?:");
            }
            ',' if depth > 0 => out.push('|'),
            '}' if depth > 0 => {
                depth -= 1;
                out.push(')');
            }
            '\\' => {
                i += 1;
                let Some(&lit) = chars.get(i) else {
                    return Err("ends with a lone `\\`".to_string());
                };
                out.push_str(&regex::escape(&lit.to_string()));
            }
            other => out.push_str(&regex::escape(&other.to_string())),
        }
        i += 1;
    }
    if depth > 0 {
        return Err("has an unclosed `{`".to_string());
    }
    out.push('$');
    Ok(out)
}

/// Translates the class starting at `chars[start] == '['`; returns the index after `]`.
fn class(chars: &[char], start: usize, out: &mut String) -> Result<usize, String> {
    let mut i = start + 1;
    let negate = matches!(chars.get(i), Some('!') | Some('^'));
    if negate {
        i += 1;
    }
    let mut members = String::new();
    let first = i;
    loop {
        let Some(&c) = chars.get(i) else {
            return Err("has an unclosed `[`".to_string());
        };
        if c == ']' && i > first {
            break;
        }
        let is_range = c == '-' && i > first && chars.get(i + 1).is_some_and(|&n| n != ']');
        if is_range {
            members.push('-');
        } else {
            members.push_str(&regex::escape(&c.to_string()));
        }
        i += 1;
    }
    if negate {
        out.push_str(&format!("[^/{members}]"));
    } else {
        // Intersect with "not a slash" so a class never spans directories.
        out.push_str(&format!("[[{members}]&&[^/]]"));
    }
    Ok(i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, rel: &str) -> bool {
        let name = rel.rsplit('/').next().unwrap();
        Glob::new("pattern", pattern).unwrap().matches(rel, name)
    }

    #[test]
    fn bare_patterns_match_names_at_any_depth() {
        assert!(m("*.rs", "main.rs"));
        assert!(m("*.rs", "src/deep/lib.rs"));
        assert!(!m("*.rs", "src/lib.rsx"));
        assert!(m("lib.?s", "a/lib.rs"));
        assert!(m("*.{rs,toml}", "Cargo.toml"));
        assert!(m("[a-c]*.md", "b.md"));
        assert!(!m("[!a-c]*.md", "b.md"));
        assert!(m("a\\*b", "x/a*b"));
        assert!(!m("a\\*b", "axb"));
    }

    #[test]
    fn slash_patterns_match_relative_paths() {
        assert!(m("src/*.rs", "src/main.rs"));
        assert!(!m("src/*.rs", "src/a/main.rs"));
        assert!(!m("src/*.rs", "x/src/main.rs"));
        assert!(m("**/*.rs", "main.rs"));
        assert!(m("**/*.rs", "a/b/main.rs"));
        assert!(m("src/**/mod.rs", "src/mod.rs"));
        assert!(m("src/**/mod.rs", "src/a/b/mod.rs"));
        assert!(m("src/**", "src/a/b.txt"));
        assert!(m("./src/*.rs", "src/a.rs"));
        assert!(m("/src/*.rs", "src/a.rs"));
        assert!(!m("src/[a/]x", "src/a/x"));
    }

    #[test]
    fn bad_globs_name_the_field() {
        for bad in ["[abc", "{a,b", "x\\", "", "./"] {
            match Glob::new("glob", bad) {
                Err(ToolError::InvalidParams { field, .. }) => assert_eq!(field, "glob", "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert!(Glob::new("glob", &"{".repeat(MAX_BRACE_DEPTH + 1)).is_err());
        assert!(Glob::new("glob", &"a".repeat(MAX_GLOB_BYTES + 1)).is_err());
    }
}

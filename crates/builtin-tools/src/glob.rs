//! Glob patterns for `find_files` (`pattern`) and `grep_files` (`glob`), compiled by
//! [`globset`] (ripgrep's glob engine) with `/` as a literal separator.
//!
//! Syntax (globset's):
//! - `*` any run of characters except `/`; `?` one character except `/`;
//! - `**` as a whole segment matches across directories: `**/` zero or more directories (`**/*.rs`
//!   matches `a.rs` and `x/y/a.rs`), a trailing `/**` everything below;
//! - `[abc]`, `[a-z]`, `[!a-z]` (or `[^a-z]`) character classes, never matching `/`;
//! - `{a,b}` alternatives;
//! - `\x` the literal character `x`.
//!
//! What is matched: a pattern without `/` (a *bare* pattern) matches a file's **name** at
//! any depth; a pattern containing `/` matches the file's path **relative to the search
//! directory**, `/`-separated. Leading `./` and `/` are dropped (the pattern is always
//! anchored at the search directory). Matching is case-sensitive and whole-string. A
//! pattern is at most [`MAX_GLOB_BYTES`] long (globset compiles it to a regex; the length
//! bounds that regex).

use globset::{GlobBuilder, GlobMatcher};

use crate::error::ToolError;

/// Longest pattern accepted, in bytes.
pub const MAX_GLOB_BYTES: usize = 1000;

/// A compiled glob.
#[derive(Debug, Clone)]
pub(crate) struct Glob {
    matcher: GlobMatcher,
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
        let glob = GlobBuilder::new(p)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| {
                ToolError::invalid(field, format!("is not a usable glob: {}", e.kind()))
            })?;
        Ok(Glob {
            matcher: glob.compile_matcher(),
            match_path: p.contains('/'),
        })
    }

    /// Whether a file matches: `rel` is its `/`-separated path relative to the search
    /// directory, `name` its file name.
    pub(crate) fn matches(&self, rel: &str, name: &str) -> bool {
        if self.match_path {
            self.matcher.is_match(rel)
        } else {
            self.matcher.is_match(name)
        }
    }
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
        assert!(Glob::new("glob", &"a".repeat(MAX_GLOB_BYTES + 1)).is_err());
    }
}

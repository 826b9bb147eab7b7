//! `goal.suggest`: a deterministic completion check for a vague objective, or none.
//!
//! Signals, in order:
//! 1. **A project verifier.** The nearest project marker at or above a path the objective names
//!    (below `working_dir`), else in `working_dir` itself: `Cargo.toml` → `cargo test -q`,
//!    `package.json` → `npm test`, `pyproject.toml` / `setup.py` → `python3 -m pytest -q`, `go.mod`
//!    → `go test ./...`, `Package.swift` → `swift test`, `CMakeLists.txt` → a CMake build and
//!    `ctest`, `build.gradle(.kts)` → `./gradlew test` (or `gradle test`), `pom.xml` → `mvn -q
//!    test`, a `.sln` / `.csproj` → `dotnet test`, `composer.json` → `composer test`, `Gemfile` →
//!    `bundle exec rake test`, `mix.exs` → `mix test`, a `Makefile` with a `test:` target → `make
//!    test`. A nested project's verifier runs in its directory (`cd sub && …`).
//! 2. **A named path.** A relative path in the objective (`src/lib.rs`, `notes/todo.md`), made of
//!    `[A-Za-z0-9._/-]` without `..`: for an objective that creates or writes something the check
//!    is `test -f <path>` (`test -d` for `dir/`), joined with the verifier when there is one (`test
//!    -f src/lib.rs && cargo test -q`).
//!
//! Confidence: `high` for a verifier the objective asks for (test, fix, build, pass,
//! compile) or a created path with a verifier; `medium` for a verifier alone or a path
//! alone; with no signal the answer is `suggested: false` (no weak check is invented).
//!
//! Bounded: only `working_dir`'s own entries (at most [`MAX_ENTRIES`]) and the named
//! paths' ancestors are looked at; a `Makefile` is read up to [`MAX_MAKEFILE_BYTES`].

use std::path::{Component, Path, PathBuf};

use car_proto::methods::goal::{Contract, SuggestReply, DEFAULT_MAX_ITERATIONS};
use car_proto::safe_file::{self, ReadLimits};

/// Directory entries of `working_dir` looked at.
pub const MAX_ENTRIES: usize = 512;
/// Bytes of a `Makefile` read.
pub const MAX_MAKEFILE_BYTES: u64 = 256 * 1024;

const CREATE_WORDS: &[&str] = &[
    "create",
    "write",
    "add",
    "make",
    "generate",
    "implement",
    "save",
    "produce",
    "build",
];
const VERIFY_WORDS: &[&str] = &[
    "test", "tests", "fix", "build", "pass", "passing", "compile", "compiles", "green", "bug",
];

/// The verifier of the project rooted at `dir`, and the marker that named it.
fn verifier(dir: &Path) -> Option<(String, String)> {
    let has = |name: &str| dir.join(name).is_file();
    let pick = |marker: &str, cmd: &str| Some((marker.to_string(), cmd.to_string()));
    if has("Cargo.toml") {
        return pick("Cargo.toml", "cargo test -q");
    }
    if has("package.json") {
        return pick("package.json", "npm test");
    }
    if has("pyproject.toml") {
        return pick("pyproject.toml", "python3 -m pytest -q");
    }
    if has("setup.py") {
        return pick("setup.py", "python3 -m pytest -q");
    }
    if has("go.mod") {
        return pick("go.mod", "go test ./...");
    }
    if has("Package.swift") {
        return pick("Package.swift", "swift test");
    }
    if has("CMakeLists.txt") {
        return pick(
            "CMakeLists.txt",
            "cmake -S . -B build && cmake --build build && ctest --test-dir build",
        );
    }
    for gradle in ["build.gradle", "build.gradle.kts"] {
        if has(gradle) {
            let cmd = if has("gradlew") {
                "./gradlew test"
            } else {
                "gradle test"
            };
            return pick(gradle, cmd);
        }
    }
    if has("pom.xml") {
        return pick("pom.xml", "mvn -q test");
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten().take(MAX_ENTRIES) {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.ends_with(".sln") || name.ends_with(".csproj") {
                return Some((name, "dotnet test".into()));
            }
        }
    }
    if has("composer.json") {
        return pick("composer.json", "composer test");
    }
    if has("Gemfile") {
        return pick("Gemfile", "bundle exec rake test");
    }
    if has("mix.exs") {
        return pick("mix.exs", "mix test");
    }
    let makefile = dir.join("Makefile");
    if let Ok(text) = safe_file::read_text(&makefile, ReadLimits::cap(MAX_MAKEFILE_BYTES)) {
        if text.lines().any(|l| l.starts_with("test:")) {
            return pick("Makefile", "make test");
        }
    }
    None
}

/// Relative paths the objective names (see the module docs).
fn named_paths(objective: &str) -> Vec<String> {
    objective
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| "`'\",;:()[]{}".contains(c)))
        .map(|w| w.strip_suffix('.').unwrap_or(w))
        .filter(|w| {
            (w.contains('/')
                || w.rsplit_once('.').is_some_and(|(a, b)| {
                    !a.is_empty()
                        && (1..=5).contains(&b.len())
                        && b.chars().all(|c| c.is_ascii_alphanumeric())
                }))
                && !w.starts_with('/')
                && !w.starts_with("http")
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c))
                && !Path::new(w)
                    .components()
                    .any(|c| matches!(c, Component::ParentDir))
                && w.chars().any(|c| c.is_ascii_alphabetic())
        })
        .map(str::to_string)
        .take(8)
        .collect()
}

fn words(objective: &str) -> Vec<String> {
    objective
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .collect()
}

/// The nearest project at or above `rel` (a path below `root`), with its relative dir.
fn nearest_project(root: &Path, rel: &str) -> Option<(PathBuf, String, String)> {
    let mut dir = Path::new(rel).parent().map(Path::to_path_buf);
    while let Some(d) = dir {
        if d.as_os_str().is_empty() {
            break;
        }
        if let Some((marker, cmd)) = verifier(&root.join(&d)) {
            return Some((d, marker, cmd));
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    verifier(root).map(|(m, c)| (PathBuf::new(), m, c))
}

/// The suggestion for `objective` in `working_dir` (see the module docs).
pub fn suggest(objective: &str, working_dir: Option<&Path>) -> SuggestReply {
    let mut signals = Vec::new();
    let mut warnings = Vec::new();
    let said = words(objective);
    let creates = said.iter().any(|w| CREATE_WORDS.contains(&w.as_str()));
    let verifies = said.iter().any(|w| VERIFY_WORDS.contains(&w.as_str()));
    let paths = named_paths(objective);
    let root = match working_dir {
        Some(dir) if dir.is_dir() => Some(dir),
        Some(dir) => {
            warnings.push(format!("working_dir {} is not a directory", dir.display()));
            None
        }
        None => None,
    };
    let project = root.and_then(|root| {
        paths
            .iter()
            .find_map(|p| nearest_project(root, p).filter(|(d, ..)| !d.as_os_str().is_empty()))
            .or_else(|| verifier(root).map(|(m, c)| (PathBuf::new(), m, c)))
    });
    let verify_cmd = project.as_ref().map(|(dir, marker, cmd)| {
        if dir.as_os_str().is_empty() {
            signals.push(format!("project marker {marker}"));
            cmd.clone()
        } else {
            signals.push(format!("project marker {}/{marker}", dir.display()));
            format!("cd {} && {cmd}", dir.display())
        }
    });
    let exists = creates.then(|| paths.first()).flatten().map(|p| {
        signals.push(format!("named path {p}"));
        match p.strip_suffix('/') {
            Some(d) => format!("test -d {d}"),
            None => format!("test -f {p}"),
        }
    });
    let (check, confidence, rationale) = match (exists, verify_cmd) {
        (Some(e), Some(v)) => (
            Some(format!("{e} && {v}")),
            "high",
            "the named file must exist and the project's own verifier must pass".to_string(),
        ),
        (None, Some(v)) if verifies => (
            Some(v),
            "high",
            "the objective asks for working code; the project's verifier decides".to_string(),
        ),
        (None, Some(v)) => (
            Some(v),
            "medium",
            "no explicit success signal; the project's verifier is the nearest deterministic one"
                .to_string(),
        ),
        (Some(e), None) => (
            Some(e),
            "medium",
            "the objective creates a named path; its existence is checkable, its content is not"
                .to_string(),
        ),
        (None, None) => (
            None,
            "none",
            "no deterministic signal: no project verifier and no named path to check".to_string(),
        ),
    };
    SuggestReply {
        suggested: check.is_some(),
        goal: check.map(|check| Contract {
            check,
            max_iterations: Some(DEFAULT_MAX_ITERATIONS),
        }),
        confidence: confidence.into(),
        rationale,
        signals,
        warnings,
        set: None,
        session_id: None,
        stored_goal: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_and_path_signals_make_checks_and_silence_makes_none() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("Cargo.toml"), "[package]").unwrap();
        std::fs::create_dir_all(root.join("web/src")).unwrap();
        std::fs::write(root.join("web/package.json"), "{}").unwrap();

        let s = suggest("create src/lib.rs with a parser", Some(root));
        assert_eq!(s.goal.unwrap().check, "test -f src/lib.rs && cargo test -q");
        assert_eq!(s.confidence, "high");

        let s = suggest("fix the failing tests", Some(root));
        assert_eq!(
            (s.goal.unwrap().check.as_str(), s.confidence.as_str()),
            ("cargo test -q", "high")
        );

        let s = suggest("write web/src/app.js", Some(root));
        assert_eq!(
            s.goal.unwrap().check,
            "test -f web/src/app.js && cd web && npm test"
        );

        let s = suggest("write notes/todo.md", None);
        assert_eq!(
            (s.goal.unwrap().check.as_str(), s.confidence.as_str()),
            ("test -f notes/todo.md", "medium")
        );

        let s = suggest("make things better", None);
        assert!(!s.suggested && s.goal.is_none() && s.confidence == "none");

        let s = suggest("write ../escape.txt and /etc/passwd and a$b.txt", None);
        assert!(!s.suggested, "{s:?}");

        std::fs::write(root.join("Makefile"), "all:\n\ntest:\n\techo ok\n").unwrap();
        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join("Makefile"), "test:\n\ttrue\n").unwrap();
        assert_eq!(
            suggest("fix it", Some(other.path())).goal.unwrap().check,
            "make test"
        );
    }
}

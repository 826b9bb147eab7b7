//! Docs that are true: every citation of a section (`docs/<page>.md, "<heading>"`, the form
//! code and docs use to point at a rule) names a heading that exists on that page (or the
//! start of one of its bold rule bullets), and
//! every relative Markdown link resolves to a file in the repository.

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The repository's text files: everything but build output, dependencies and fuzz state.
fn text_files(root: &Path) -> Vec<PathBuf> {
    const SKIP: &[&str] = &[
        "target",
        "node_modules",
        "artifacts",
        "corpus",
        "__pycache__",
        "build",
    ];
    const EXT: &[&str] = &["rs", "md", "js", "ts", "py", "kt", "toml", "sh", "yml"];
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !SKIP.contains(&name.as_str()) && !name.starts_with('.') {
                    dirs.push(path);
                }
            } else if path
                .extension()
                .is_some_and(|e| EXT.contains(&e.to_string_lossy().as_ref()))
            {
                out.push(path);
            }
        }
    }
    out
}

fn headings(page: &str) -> Vec<String> {
    page.lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim().to_string())
        .collect()
}

/// The bold titles of a page's rule bullets (`- **Only a host approves, and ….**`).
fn bullet_titles(page: &str) -> Vec<String> {
    page.lines()
        .filter_map(|l| l.strip_prefix("- **"))
        .filter_map(|l| l.split("**").next())
        .map(|t| t.trim_end_matches('.').to_string())
        .collect()
}

fn shown(root: &Path, file: &Path) -> String {
    file.strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string()
}

#[test]
fn every_cited_section_exists() {
    let root = repo_root();
    let cite = regex::Regex::new(r#"docs/([a-z-]+)\.md, "([^"]+)""#).unwrap();
    let wrap = regex::Regex::new(r"\n\s*(//[/!]?|#|\*)?\s*").unwrap();
    let files = text_files(&root);
    assert!(files.len() > 100, "found {} files", files.len());
    let mut wrong = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        // A citation may wrap across comment lines: join each with the next.
        let joined = wrap.replace_all(&text, " ");
        for c in cite.captures_iter(&joined) {
            let page = root.join("docs").join(format!("{}.md", &c[1]));
            let Ok(page_text) = std::fs::read_to_string(&page) else {
                wrong.push(format!(
                    "{}: cites missing page docs/{}.md",
                    shown(&root, file),
                    &c[1]
                ));
                continue;
            };
            let heading = headings(&page_text).iter().any(|h| h == &c[2]);
            let bullet = bullet_titles(&page_text)
                .iter()
                .any(|t| t.starts_with(&c[2]));
            if !heading && !bullet {
                wrong.push(format!(
                    "{}: cites docs/{}.md, \"{}\", which has no such heading",
                    shown(&root, file),
                    &c[1],
                    &c[2]
                ));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(wrong.is_empty(), "stale citations:\n{}", wrong.join("\n"));
}

#[test]
fn every_relative_markdown_link_resolves() {
    let root = repo_root();
    let link = regex::Regex::new(r"\]\(([^)#:\s]+)(#[^)]*)?\)").unwrap();
    let mut wrong = Vec::new();
    for file in text_files(&root)
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "md"))
    {
        let text = std::fs::read_to_string(file).unwrap();
        for c in link.captures_iter(&text) {
            let target = &c[1];
            if !file.parent().unwrap().join(target).exists() {
                wrong.push(format!(
                    "{}: links to {target}, which does not exist",
                    shown(&root, file)
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "broken links:\n{}", wrong.join("\n"));
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let root = repo_root();
    let path = regex::Regex::new(
        r"`((?:core|daemon|client|crates|bindings-[a-z]+|tests|xtask|scripts|examples)/[A-Za-z0-9_./-]+)`",
    )
    .unwrap();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    pages.push(root.join("README.md"));
    pages.push(root.join("CONTRIBUTING.md"));
    let mut wrong = Vec::new();
    for page in pages
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
    {
        let text = std::fs::read_to_string(page).unwrap();
        for c in path.captures_iter(&text) {
            let named = c[1].trim_end_matches(['.', ',']);
            // `crates/*` and `<namespace>` style placeholders are not paths; fuzz artifacts
            // exist only after a crash.
            if named.contains('*')
                || named.contains('<')
                || named.starts_with("tests/fuzz/artifacts")
            {
                continue;
            }
            if !root.join(named).exists() {
                wrong.push(format!(
                    "{}: names {named}, which does not exist",
                    shown(&root, page)
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "stale paths:\n{}", wrong.join("\n"));
}

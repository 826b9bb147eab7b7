//! The daemon's layers, checked from its imports (issue 25).
//!
//! Every source file under `src/` is parsed (`syn`) and every path it names that starts
//! with `crate::`, `super::` or `self::` (in `use` trees and in code; never in comments or
//! `#[cfg(test)]` items) is resolved to the module it reaches. The layers, top to bottom:
//!
//! | layer | modules | may import |
//! |---|---|---|
//! | process | `lib.rs`, `main.rs` | everything |
//! | transport | `transport::*` | the layers below |
//! | dispatch | `dispatch` | the layers below |
//! | services | `services::<namespace>` | `handler`, `state`, `config`; **never another service** |
//! | handler | `handler` | `state`, `config` |
//! | state | `state::*` (the stores) | `config` |
//! | config | `config` | nothing in the crate |
//!
//! An import that reaches up a layer, or from one service into another, is a violation; a
//! strictly downward order also makes a cycle between layers impossible. `services`'s own
//! `mod.rs` (the route registry) may name every service. A new top-level module fails the
//! test until it is given a layer here.

use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// `(layer rank, unit)`: lower ranks are higher layers; a unit is what may not import a
/// sibling unit (one service), `None` for layers whose modules may use each other.
fn layer_of(module: &[String]) -> Result<(u8, Option<String>), String> {
    let first = module.first().map(String::as_str);
    Ok(match first {
        None | Some("main") => (0, None),
        Some("transport") => (1, None),
        Some("dispatch") => (2, None),
        Some("services") => match module.get(1) {
            None => (3, None),
            Some(service) => (3, Some(format!("services::{service}"))),
        },
        Some("handler") => (4, None),
        Some("state") => (5, None),
        Some("config") => (6, None),
        Some(other) => return Err(format!("module `{other}` has no layer: add it to layer_of")),
    })
}

/// The module path of a file under `src/` (`state/session.rs` → `state::session`).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

struct Imports<'a> {
    module: &'a [String],
    /// A file that is `x/mod.rs` (or the crate root) is the module itself, so its `super`
    /// is one level up from its own path; `x/y.rs` likewise. Paths resolve the same way.
    found: Vec<Vec<String>>,
}

impl Imports<'_> {
    fn resolve(&mut self, segments: &[String]) {
        let Some(first) = segments.first() else {
            return;
        };
        let mut base: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "self" => self.module.to_vec(),
            "super" => self.module.to_vec(),
            _ => return,
        };
        let mut rest = &segments[1..];
        if first == "super" {
            base.pop();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        base.extend(rest.iter().cloned());
        self.found.push(base);
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.resolve(prefix);
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.resolve(prefix);
                prefix.pop();
            }
            syn::UseTree::Glob(_) => self.resolve(prefix),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(prefix, t)),
        }
    }
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

impl<'ast> Visit<'ast> for Imports<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Impl(i) => &i.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_test_only(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    /// `pub(crate)` and `pub(super)` name no import.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.resolve(&segments);
        syn::visit::visit_path(self, path);
    }
}

/// Every violation in `files` (`(path under src/, source)`), one line each.
fn violations(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (rel, source) in files {
        let module = module_of(rel);
        let file = match syn::parse_file(source) {
            Ok(f) => f,
            Err(e) => {
                out.push(format!("{}: does not parse: {e}", rel.display()));
                continue;
            }
        };
        let mut imports = Imports {
            module: &module,
            found: Vec::new(),
        };
        imports.visit_file(&file);
        let (from_rank, from_unit) = match layer_of(&module) {
            Ok(l) => l,
            Err(e) => {
                out.push(format!("{}: {e}", rel.display()));
                continue;
            }
        };
        for target in imports.found {
            // A path into the module's own subtree, or a bare `crate::` item of the root.
            if target.starts_with(&module) || target.len() < 2 && from_rank == 0 {
                continue;
            }
            // A first segment that is no module is an item of the crate root
            // (`crate::Fatal`): the process layer.
            let (to_rank, to_unit) = layer_of(&target).unwrap_or((0, None));
            let name = target.join("::");
            if to_rank < from_rank {
                out.push(format!(
                    "{}: `{}` imports `{name}`, a higher layer",
                    rel.display(),
                    module.join("::")
                ));
            } else if from_unit.is_some() && to_unit.is_some() && from_unit != to_unit {
                out.push(format!(
                    "{}: service `{}` imports service `{name}`",
                    rel.display(),
                    from_unit.as_deref().unwrap_or_default()
                ));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn daemon_sources() -> Vec<(PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read a source file");
                files.push((path.strip_prefix(&src).unwrap().to_path_buf(), text));
            }
        }
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    files
}

#[test]
fn every_module_imports_only_the_layers_below_it() {
    let found = violations(&daemon_sources());
    assert!(
        found.is_empty(),
        "layering violations:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_service_importing_a_service_or_state_importing_a_service_fails() {
    let mut files = daemon_sources();
    files.push((
        "services/throwaway.rs".into(),
        "use crate::services::tools;\nfn f() { super::runs::lifecycle::x(); }".into(),
    ));
    files.push((
        "state/throwaway.rs".into(),
        "fn f(_: crate::services::scheduler::X) {}".into(),
    ));
    files.push(("handler.rs".into(), "use crate::dispatch::Dispatch;".into()));
    files.push(("shortcut.rs".into(), "fn f() {}".into()));
    let found = violations(&files);
    let expect = [
        "services/throwaway.rs: service `services::throwaway` imports service `services::tools`",
        "services/throwaway.rs: service `services::throwaway` imports service `services::runs::lifecycle::x`",
        "state/throwaway.rs: `state::throwaway` imports `services::scheduler::X`, a higher layer",
        "handler.rs: `handler` imports `dispatch::Dispatch`, a higher layer",
        "shortcut.rs: module `shortcut` has no layer: add it to layer_of",
    ];
    for e in expect {
        assert!(found.iter().any(|f| f == e), "missing {e:?} in {found:#?}");
    }
    assert_eq!(found.len(), expect.len(), "{found:#?}");
}

#[test]
fn test_only_code_and_comments_do_not_count() {
    let files = vec![(
        PathBuf::from("state/x.rs"),
        "//! see crate::services::tools\n#[cfg(test)]\nmod tests { use crate::services::tools; }\n"
            .to_string(),
    )];
    assert!(violations(&files).is_empty());
}

/// The module names in `dir` (`x.rs`, `x/mod.rs`, and `x.rs` with its `x/` folder of
/// submodules each name `x` once), without `skip`.
fn modules_in(dir: &Path, skip: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read a source directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|n| !skip.contains(&n.as_str()))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn services_are_the_contracts_namespaces_by_the_same_names() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let services = modules_in(&manifest.join("src/services"), &["mod"]);
    let namespaces = modules_in(
        &manifest.join("../core/src/methods"),
        &["mod", "fields", "member", "spec", "tests"],
    );
    assert!(namespaces.len() > 20, "{namespaces:?}");
    assert_eq!(
        services, namespaces,
        "one service module per contract namespace"
    );
}

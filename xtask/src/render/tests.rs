//! The renderers: the name rule, coverage of the contract, freshness of the checked-in
//! files, and acceptance 3: a declaration that exists only in this test renders into all
//! three bindings with no other edit.

use car_proto::methods::memory::QueryParams;
use car_proto::methods::ArgKind::{Int, Str, StrList};
use car_proto::methods::{self, host, int, member, op, opt, req, Declaration};

use super::names::{camel_name, snake_name};
use super::*;

#[test]
fn names_follow_the_rule() {
    assert_eq!(snake_name("memory.add_fact"), "memory_add_fact");
    assert_eq!(snake_name("capabilities.list"), "capabilities_list");
    assert_eq!(snake_name("session.bindSandbox"), "session_bind_sandbox");
    assert_eq!(snake_name("a2ui/subscribe"), "a2ui_subscribe");
    assert_eq!(
        snake_name("models.resource_policy.get"),
        "models_resource_policy_get"
    );
    assert_eq!(snake_name("verify"), "verify");
    assert_eq!(camel_name("memory.add_fact"), "memoryAddFact");
    assert_eq!(camel_name("runs.get_trace"), "runsGetTrace");
    assert_eq!(camel_name("verify"), "verify");
}

#[test]
fn every_served_method_is_reachable_and_debug_methods_are_not() {
    let decls: Vec<&Declaration> = methods::active(false).collect();
    for (hand, files) in [
        (HAND_WRITTEN, &[PYTHON, NODE_JS][..]),
        (&[][..], &[UNIFFI][..]),
    ] {
        let surface = Surface::of(&decls, hand);
        for d in &decls {
            let wrapper = snake_name(d.spec.name);
            let reachable = surface.wrappers.iter().any(|w| w.name == wrapper)
                || surface.typed.iter().any(|t| t.member.name == wrapper)
                || hand.contains(&wrapper.as_str());
            assert!(reachable, "{} has no member", d.spec.name);
        }
        // The typed member wins over a wrapper of the same name.
        assert!(surface
            .wrappers
            .iter()
            .all(|w| w.name != "runs_start" && w.name != "embed"));
        assert!(surface
            .typed
            .iter()
            .any(|t| t.member.name == "infer_tracked_with_request"));
        let rendered = all();
        for path in files {
            let text = &rendered.iter().find(|(p, _)| p == path).unwrap().1;
            for d in decls
                .iter()
                .filter(|d| !hand.contains(&snake_name(d.spec.name).as_str()))
            {
                assert!(
                    text.contains(d.spec.name),
                    "{path}: {} missing",
                    d.spec.name
                );
            }
        }
    }
    for (path, text) in all() {
        assert!(
            !text.contains("debug."),
            "{path}: debug methods are not generated"
        );
    }
}

#[test]
fn host_methods_route_through_the_host_management_call() {
    let rendered = all();
    let text = |path: &str| rendered.iter().find(|(p, _)| *p == path).unwrap().1.clone();
    assert!(text(PYTHON)
        .contains("return self.daemon_call_host_management(\"models.remove\", params_json)"));
    assert!(text(NODE_JS)
        .contains("return this.daemonCallHostManagement('session.clear_halt', paramsJson)"));
    assert!(text(UNIFFI)
        .contains("self.daemon_call_host_management(\"models.remove\".to_string(), params_json)"));
    assert!(text(PYTHON).contains("return self.daemon_call(\"models.unregister\", params_json)"));
}

/// Fails when the contract changed and the checked-in files were not regenerated.
#[test]
fn checked_in_files_are_fresh() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    for (path, contents) in all() {
        let current = std::fs::read_to_string(root.join(path)).unwrap_or_default();
        assert!(
            current == contents,
            "{path} is stale: run `cargo run -p xtask -- codegen`"
        );
    }
}

car_proto::method!(
    /// A method only this test declares.
    ThrowAway = op("zz_test.throw_away", "count things for a test");
    QueryParams => u64;
    member("throw_away_count", &[req("query", Str), opt("limit_hint", Int), opt("labels", StrList)], int())
);
car_proto::method!(
    /// A host method only this test declares.
    HostOnly = host("zz_test.host_only", "a host-only test method");
    car_proto::methods::fields::NoParams => u64
);

/// Acceptance 3: one new declaration, and every binding has its typed member and wrapper.
#[test]
fn a_new_declaration_renders_into_every_binding_with_no_other_edit() {
    const EXTRA: [Declaration; 2] = [
        Declaration::of::<ThrowAway>(),
        Declaration::of::<HostOnly>(),
    ];
    let base: Vec<&Declaration> = methods::active(false).collect();
    let mut with: Vec<&Declaration> = base.clone();
    with.extend(EXTRA.iter());
    let before = files(&base);
    let after = files(&with);
    let expect: &[(&str, &[&str])] = &[
        (PYTHON, &[
            "    def throw_away_count(\n        self,\n        query: str,\n        limit_hint: Optional[int] = None,\n        labels: Optional[List[str]] = None,\n    ) -> int:\n",
            "        return cast(int, self._call_member(\"zz_test.throw_away\", \"throw_away_count\", [query, limit_hint, labels]))\n",
            "    def zz_test_throw_away(self, params_json: str = \"{}\") -> str:\n",
            "        return self.daemon_call_host_management(\"zz_test.host_only\", params_json)\n",
            "    \"throw_away_count\": \"zz_test.throw_away\",\n",
        ]),
        (PYTHON_STUB, &[
            "        limit_hint: Optional[int] = None,\n        labels: Optional[List[str]] = None,\n    ) -> int: ...\n",
            "    def zz_test_host_only(self, params_json: str = \"{}\") -> str: ...\n",
        ]),
        (NODE_JS, &[
            "  async throwAwayCount(query, limitHint, labels) {\n    return this[CALL_MEMBER]('zz_test.throw_away', 'throw_away_count', [query, limitHint, labels])\n  },\n",
            r#"  throwAwayCount: {"args":[{"kind":"str","name":"query","optional":false},{"kind":"int","name":"limitHint","optional":true},{"kind":"str_list","name":"labels","optional":true}],"member":"throw_away_count","method":"zz_test.throw_away","returns":{"kind":"int"}},"#,
            "    return this.daemonCallHostManagement('zz_test.host_only', paramsJson)\n",
            "  zzTestThrowAway: 'zz_test.throw_away',\n",
        ]),
        (NODE_DTS, &[
            "  throwAwayCount(query: string, limitHint?: number | null, labels?: string[] | null): Promise<number>\n",
            "  zzTestHostOnly(paramsJson?: string): Promise<string>\n",
        ]),
        (UNIFFI, &[
            "    #[uniffi::method(default(limit_hint = None, labels = None))]\n    pub fn throw_away_count(&self, query: String, limit_hint: Option<i64>, labels: Option<Vec<String>>) -> Result<i64, CarError> {\n        self.member_int(\"zz_test.throw_away\", \"throw_away_count\", vec![Some(query.into()), Some(limit_hint.into()), Some(labels.into())])\n    }\n",
            "        self.daemon_call_host_management(\"zz_test.host_only\".to_string(), params_json)\n",
            "    pub fn zz_test_throw_away(&self, params_json: String) -> Result<String, CarError> {\n",
        ]),
        (UNIFFI_DOCS, &[
            "| `CarDaemonClient.throw_away_count` | `throwAwayCount(query: String, limitHint: Long? = null, labels: List<String>? = null): Long` | `zz_test.throw_away` | operator | count things for a test. |\n",
            "| `CarDaemonClient.zz_test_host_only` | `zzTestHostOnly(paramsJson: String): String` | `zz_test.host_only` | host | a host-only test method. |\n",
        ]),
    ];
    for ((path, old), (same, new)) in before.iter().zip(&after) {
        assert_eq!(path, same);
        let wanted = expect.iter().find(|(p, _)| p == path).unwrap().1;
        for piece in wanted {
            assert!(new.contains(piece), "{path} lacks:\n{piece}\n---\n{new}");
            assert!(!old.contains(piece), "{path} had it already:\n{piece}");
        }
        // Only additions: every line of the contract's output is still there.
        for line in old.lines() {
            assert!(new.contains(line), "{path} lost the line {line:?}");
        }
    }
    syntax_check(&after);
}

/// The rendered Python and JavaScript parse (when the interpreters are installed).
fn syntax_check(rendered: &[(&str, String)]) {
    let dir = tempfile::tempdir().unwrap();
    let checks: [(&str, &str, &[&str]); 3] = [
        (PYTHON, "python3", &["-m", "py_compile"]),
        (PYTHON_STUB, "python3", &["-m", "py_compile"]),
        (NODE_JS, "node", &["--check"]),
    ];
    for (path, tool, args) in checks {
        let text = &rendered.iter().find(|(p, _)| *p == path).unwrap().1;
        let ext = if tool == "node" { "js" } else { "py" };
        let file = dir.path().join(format!("generated.{ext}"));
        std::fs::write(&file, text).unwrap();
        match std::process::Command::new(tool)
            .args(args)
            .arg(&file)
            .output()
        {
            Ok(out) => assert!(
                out.status.success(),
                "{path} does not parse: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("{tool} not available ({e}); {path} not syntax-checked"),
        }
    }
}

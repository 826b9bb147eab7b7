//! The renderers: the name rule, coverage of the contract, freshness of the checked-in
//! files, and acceptance 3: a declaration that exists only in this test renders into all
//! three bindings with no other edit.

use car_proto::methods::memory::QueryParams;
use car_proto::methods::ArgKind::{Int, Str, StrList};
use car_proto::methods::{self, host, int, json, member, module_fn, op, opt, req, Declaration};

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
            let class = if d.spec.role == methods::Role::Host {
                &surface.host
            } else {
                &surface.runtime
            };
            let reachable = class.wrappers.iter().any(|w| w.name == wrapper)
                || class.typed.iter().any(|t| t.member.name == wrapper)
                || hand.contains(&wrapper.as_str());
            assert!(reachable, "{} has no member", d.spec.name);
        }
        // The typed member wins over a wrapper of the same name.
        assert!(surface
            .runtime
            .wrappers
            .iter()
            .all(|w| w.name != "runs_start" && w.name != "embed"));
        assert!(surface
            .runtime
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
        if path == METHODS_DOC {
            // The reference page lists every declared method, marking debug ones.
            assert!(text.contains("| `debug.") && text.contains("debug only"));
            continue;
        }
        assert!(
            !text.contains("debug."),
            "{path}: debug methods are not generated"
        );
    }
}

/// CAR's rule: host methods are `HostClient`'s and stay off `CarRuntime`, except the few
/// CAR's `CarRuntime` has as well.
#[test]
fn host_methods_are_host_clients_and_route_through_the_host_management_call() {
    let decls: Vec<&Declaration> = methods::active(false).collect();
    for hand in [HAND_WRITTEN, &[][..]] {
        let surface = Surface::of(&decls, hand);
        let runtime_host: Vec<&str> = surface
            .runtime
            .typed
            .iter()
            .filter(|t| t.spec.role == methods::Role::Host)
            .map(|t| t.member.name)
            .chain(
                surface
                    .runtime
                    .wrappers
                    .iter()
                    .filter(|w| w.host())
                    .map(|w| w.name.as_str()),
            )
            .collect();
        assert!(
            runtime_host
                .iter()
                .all(|name| RUNTIME_HOST_MEMBERS.contains(name)),
            "{runtime_host:?}"
        );
        let host_names: Vec<&str> = surface
            .host
            .wrappers
            .iter()
            .map(|w| w.name.as_str())
            .chain(surface.host.typed.iter().map(|t| t.member.name))
            .collect();
        // CAR's HostClient members for the host methods our contract declares, and the
        // ones CAR's CarRuntime has as well.
        for name in [
            "agents_upsert",
            "agents_remove",
            "models_remove",
            "session_clear_halt",
            "diagnostics_secret_store_activity",
            "agent_permissions_list_grants",
        ] {
            assert!(host_names.contains(&name), "HostClient lacks {name}");
        }
        for name in RUNTIME_HOST_MEMBERS {
            assert!(runtime_host.contains(name), "the runtime lacks {name}");
        }
        assert!(surface
            .host
            .typed
            .iter()
            .all(|t| t.spec.role == methods::Role::Host));
        assert!(surface.host.wrappers.iter().all(Wrapper::host));
    }
    let rendered = all();
    let text = |path: &str| rendered.iter().find(|(p, _)| *p == path).unwrap().1.clone();
    let split = |path: &str, marker: &str| {
        let t = text(path);
        let at = t.find(marker).unwrap_or_else(|| panic!("{path}: {marker}"));
        (t[..at].to_string(), t[at..].to_string())
    };
    let (runtime, host) = split(PYTHON, "class GeneratedHostMethods:");
    let models_remove = "return self.daemon_call_host_management(\"models.remove\", params_json)";
    assert!(host.contains(models_remove) && !runtime.contains(models_remove));
    assert!(runtime.contains("return self.daemon_call(\"models.unregister\", params_json)"));
    assert!(runtime.contains("    def remove_model(self, model_id: str) -> str:"));
    assert!(!runtime.contains("def session_clear_halt"));
    // CAR's CarRuntime wrapper of a host method still goes over the host connection.
    let grants = "self.daemon_call_host_management(\"agent_permissions.list_grants\", params_json)";
    assert!(runtime.contains(grants) && host.contains(grants));
    let (runtime, host) = split(NODE_JS, "const HOST_GENERATED_METHODS");
    let clear_halt = "return this.daemonCallHostManagement('session.clear_halt', paramsJson)";
    assert!(host.contains(clear_halt) && !runtime.contains(clear_halt));
    let (runtime, host) = split(UNIFFI, "impl HostClient {");
    let remove = "self.daemon_call_host_management(\"models.remove\".to_string(), params_json)";
    assert!(host.contains(remove) && !runtime.contains(remove));
    assert!(runtime.contains("pub fn remove_model(&self, model_id: String)"));
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
            "{path} is stale: run `cargo xtask codegen`"
        );
    }
}

car_proto::method!(
    /// A method only this test declares.
    ThrowAway = op("zz_test.throw_away", "count things for a test");
    access: car_proto::methods::Access::daemon();
    QueryParams => u64;
    member("throw_away_count", &[req("query", Str), opt("limit_hint", Int), opt("labels", StrList)], int())
);
car_proto::method!(
    /// A host method only this test declares.
    HostOnly = host("zz_test.host_only", "a host-only test method");
    access: car_proto::methods::Access::daemon();
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
            "    \"zz_test_host_only\": \"zz_test.host_only\",\n",
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
            "  zzTestHostOnly: 'zz_test.host_only',\n",
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
            "| `HostClient.zz_test_host_only` | `zzTestHostOnly(paramsJson: String): String` | `zz_test.host_only` | host | a host-only test method. |\n",
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
    // The host method's members are HostClient's.
    let python = &after.iter().find(|(p, _)| *p == PYTHON).unwrap().1;
    let host_class = python.find("class GeneratedHostMethods:").unwrap();
    assert!(python.find("def zz_test_host_only(").unwrap() > host_class);
    assert!(python.find("def throw_away_count(").unwrap() < host_class);
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

car_proto::method!(
    /// A method with a package-level function, only this test declares.
    Packaged = op("zz_test.packaged", "a packaged test method");
    access: car_proto::methods::Access::daemon();
    QueryParams => u64;
    module_fn("packaged_fn", &[req("query", Str), opt("limit_hint", Int)], json())
);

/// A package-level function renders as a Python and a Node function (and its declaration),
/// never as a member of either class or of UniFFI's runtime.
#[test]
fn a_package_level_function_renders_outside_the_classes() {
    const EXTRA: [Declaration; 1] = [Declaration::of::<Packaged>()];
    let mut with: Vec<&Declaration> = methods::active(false).collect();
    with.extend(EXTRA.iter());
    let after = files(&with);
    let text = |path: &str| after.iter().find(|(p, _)| *p == path).unwrap().1.clone();
    let python = text(PYTHON);
    assert!(
        python
            .contains("\ndef packaged_fn(query: str, limit_hint: Optional[int] = None) -> str:\n"),
        "{python}"
    );
    assert!(python.contains("    return cast(str, _module_call(\"zz_test.packaged\", \"packaged_fn\", [query, limit_hint]))\n"));
    assert!(python.contains("    \"packaged_fn\": \"zz_test.packaged\",\n"));
    assert!(!python.contains("    def packaged_fn("), "not a method");
    assert!(text(PYTHON_STUB)
        .contains("\ndef packaged_fn(query: str, limit_hint: Optional[int] = None) -> str: ...\n"));
    let js = text(NODE_JS);
    assert!(js.contains("    packagedFn: async (query, limitHint) => call('zz_test.packaged', 'packaged_fn', [query, limitHint]),\n"), "{js}");
    assert!(!js.contains("  async packagedFn("), "not a member");
    assert!(text(NODE_DTS).contains("export declare function packagedFn(query: string, limitHint?: number | null): Promise<string>\n"));
    assert!(!text(UNIFFI).contains("packaged_fn"));
    // The method keeps its JSON-string wrapper on the runtime.
    assert!(python.contains("    def zz_test_packaged(self, params_json: str = \"{}\") -> str:\n"));
    syntax_check(&after);
}

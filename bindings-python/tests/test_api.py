"""Acceptance 1 and 7: every bindings-api.md Python member exists with its documented
signature; the stub matches the native module; generated wrappers cover the daemon's whole
method table with snake_case names."""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path
from typing import Dict, List

import car_runtime
from car_runtime import CarRuntime, GENERATED_METHODS, _native
from car_runtime._generated import GeneratedMethods

PKG = Path(car_runtime.__file__).parent

# bindings-api.md, Python section: member → parameter names (self excluded).
RUNTIME_MEMBERS: Dict[str, List[str]] = {
    "daemon_call": ["method", "params_json", "timeout"],
    "daemon_call_host_management": ["method", "params_json"],
    "register_daemon_handler": ["method", "fn"],
    "register_daemon_notification_handler": ["method", "fn"],
    "close": [],
    "disconnect": [],
    "server_schema": ["params_json"],
    "capabilities": [],
    "state_set": ["key", "value_json", "tenant"],
    "state_get": ["key", "tenant"],
    "state_exists": ["key", "tenant"],
    "state_keys": ["tenant"],
    "state_snapshot": ["tenant"],
    "add_fact": ["subject", "body", "kind", "confidence", "fact_id", "tags", "source"],
    "fact_count": [],
    "query_facts": ["query", "k"],
    "build_context": ["query", "model_context_window"],
    "consolidate": [],
    "persist_memory": ["path"],
    "load_memory": ["path"],
    "ingest_skill": [
        "name", "code", "platform", "persona", "url_pattern", "task_keywords",
        "description", "supersedes",
    ],
    "find_skill": ["persona", "url", "task", "max_results"],
    "report_outcome": ["name", "outcome"],
    "list_skills": ["domain"],
    "register_tool": ["name"],
    "register_tool_schema": ["schema_json"],
    "list_tools": [],
    "unregister_tool": ["name"],
    "register_policy": ["name", "rule", "target", "key", "pattern", "value_json", "session_id"],
    "unregister_policy": ["name"],
    "list_policies": [],
    "verify_proposal": ["proposal_json"],
    "submit_proposal": ["proposal_json", "session_id"],
    "execute_proposal": ["proposal_json", "tool_fn", "session_id"],
    "event_count": [],
    "event_query": ["query_json"],
    "runs_start": ["params_json"],
    "runs_complete": ["params_json"],
    "infer": ["prompt", "model", "max_tokens"],
    "infer_tracked": ["prompt", "model", "max_tokens", "context", "tools_json", "messages_json"],
    "infer_stream": ["prompt", "on_event", "model", "max_tokens"],
    "embed": ["texts", "model"],
    "classify": ["text", "labels", "model"],
    "list_models": [],
    "tokenize": ["model", "text"],
    "detokenize": ["model", "tokens_json"],
}

# Documented optional parameters (default None).
OPTIONAL_ANYWHERE = {
    "tenant", "confidence", "fact_id", "tags", "source", "k", "model_context_window",
    "supersedes", "max_results", "domain", "target", "pattern",
    "session_id", "max_tokens", "context", "tools_json", "messages_json", "timeout",
}
OPTIONAL = {
    ("register_policy", "key"), ("register_policy", "value_json"), ("infer", "model"), ("infer_tracked", "model"),
    ("infer_stream", "model"), ("embed", "model"), ("classify", "model"),
}
RETURNS = {
    "state_exists": "bool", "state_keys": "List[str]", "fact_count": "int", "add_fact": "int",
    "persist_memory": "int", "load_memory": "int", "ingest_skill": "int",
    "unregister_tool": "int", "unregister_policy": "int", "event_count": "int",
    "state_set": "None", "register_tool": "None", "register_policy": "None",
    "close": "None", "disconnect": "None", "register_daemon_handler": "None",
    "register_daemon_notification_handler": "None", "register_tool_schema": "None",
}

MODULE_FUNCTIONS = {
    "client_version": [], "protocol_version": [],
    "register_tool_handler": ["fn"], "unregister_tool_handler": [],
    "register_tool_cancel_handler": ["fn"], "unregister_tool_cancel_handler": [],
    "set_memory_namespace": ["ns"], "get_memory_namespace": [],
}


def params(fn: object) -> List[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]  # type: ignore[arg-type]


def test_every_runtime_member_has_the_documented_signature() -> None:
    for name, expected in RUNTIME_MEMBERS.items():
        member = getattr(CarRuntime, name)
        assert params(member) == expected, name
        sig = inspect.signature(member)
        for p in sig.parameters.values():
            if (name, p.name) in OPTIONAL or (p.name in OPTIONAL_ANYWHERE):
                assert p.default is None, (name, p.name)
            elif p.name != "params_json" and p.name != "query_json":
                assert p.default is inspect.Parameter.empty, (name, p.name)
        ret = sig.return_annotation
        assert ret == RETURNS.get(name, "str"), (name, ret)
    init = inspect.signature(CarRuntime.__init__).parameters
    assert list(init)[1:] == ["url", "token", "memory_namespace"]
    assert init["token"].kind is inspect.Parameter.KEYWORD_ONLY
    assert init["memory_namespace"].kind is inspect.Parameter.KEYWORD_ONLY


def test_module_level_api() -> None:
    for name, expected in MODULE_FUNCTIONS.items():
        assert params(getattr(car_runtime, name)) == expected, name
    assert car_runtime.__version__ == car_runtime.client_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", car_runtime.__version__)
    assert car_runtime.protocol_version() == 3
    assert issubclass(car_runtime.DaemonRpcError, Exception)
    assert issubclass(car_runtime.DaemonConnectionError, ConnectionError)
    assert issubclass(car_runtime.ClientClosedError, ConnectionError)
    assert issubclass(car_runtime.HandshakeError, ConnectionError)
    assert issubclass(car_runtime.DaemonTimeoutError, TimeoutError)
    assert issubclass(car_runtime.InternalError, Exception)
    assert not issubclass(car_runtime.InternalError, RuntimeError)
    assert issubclass(car_runtime.TerminalToolError, Exception)
    e = car_runtime.DaemonRpcError(-32602, "invalid params: key is required", {"f": 1})
    assert (e.code, e.message, e.data) == (-32602, "invalid params: key is required", {"f": 1})
    for name in car_runtime.__all__:
        assert hasattr(car_runtime, name), name
    assert (PKG / "py.typed").exists()


def test_native_stub_matches_the_module() -> None:
    tree = ast.parse((PKG / "_native.pyi").read_text())
    stub_functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    stub_classes = {
        n.name: {m.name for m in n.body if isinstance(m, ast.FunctionDef)}
        for n in tree.body
        if isinstance(n, ast.ClassDef)
    }
    runtime_names = {n for n in dir(_native) if not n.startswith("__")}
    assert runtime_names == stub_functions | set(stub_classes)
    for cls, members in stub_classes.items():
        actual = {n for n in dir(getattr(_native, cls)) if not n.startswith("__")}
        assert actual == members - {"__init__"}, cls
    for name in stub_functions:
        fn = getattr(_native, name)
        stub = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
        assert [a.arg for a in stub.args.args] == list(inspect.signature(fn).parameters), name
    native = {n: list(inspect.signature(getattr(_native.NativeClient, n)).parameters)[1:]
              for n in stub_classes["NativeClient"] if n not in ("__init__", "closed")}
    for name, args in native.items():
        stub = next(m for m in next(n for n in tree.body if isinstance(n, ast.ClassDef)
                                    and n.name == "NativeClient").body
                    if isinstance(m, ast.FunctionDef) and m.name == name)
        assert [a.arg for a in stub.args.args][1:] == args, name


def snake(method: str) -> str:
    """The bindings-api name rule: split on `.` and `/`, snake_case each segment, join
    with `_`."""
    segments = re.split(r"[./]", method)
    out = []
    for seg in segments:
        seg = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", seg).lower().replace("-", "_")
        out.append(seg)
    return "_".join(out)


def test_generated_wrappers_cover_the_daemons_method_table(rt: CarRuntime) -> None:
    rows = json.loads(rt.server_schema())["schema"]["methods"]
    table = {m["name"] for m in rows if not m.get("debug")}
    assert len(table) > 30
    # The wrappers cover exactly the method table's non-debug rows (the daemon's table is
    # the one `core` declares, so a stale _generated.py fails here).
    assert set(GENERATED_METHODS.values()) == table
    served = {m["method"] for m in json.loads(rt.capabilities())["methods"]}
    assert served - {m["name"] for m in rows} == set()
    for wrapper, method in GENERATED_METHODS.items():
        assert wrapper == snake(method), method
        assert callable(getattr(CarRuntime, wrapper))
        assert hasattr(GeneratedMethods, wrapper)
    assert snake("session.bindSandbox") == "session_bind_sandbox"
    assert snake("a2ui/subscribe") == "a2ui_subscribe"


def test_generated_wrappers_call_their_method(rt: CarRuntime) -> None:
    hand_written = {n for n in GENERATED_METHODS if n in vars(CarRuntime)}
    # Only documented hand-written members may shadow a generated wrapper.
    assert hand_written <= set(RUNTIME_MEMBERS), hand_written
    assert json.loads(rt.events_count()) >= 0
    assert json.loads(rt.tools_list()) == []
    assert json.loads(rt.capabilities_list())["caller_role"] == "operator"
    assert json.loads(GeneratedMethods.state_keys(rt, "{}")) == []
    assert json.loads(rt.runs_start(json.dumps({"intent": "api test"})))["run_id"]

"""The public surface: the hand-written members have their documented signatures, the
generated typed members agree with the daemon's live contract (`server.schema` members) by
construction, the JSON-string wrappers cover every other method with snake_case names, and
the stub matches the native module."""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path
from typing import Any, Dict, List

import car_runtime
from car_runtime import CarRuntime, GENERATED_METHODS, HostClient, _native
from car_runtime._generated import GeneratedHostMethods, GeneratedMethods

PKG = Path(car_runtime.__file__).parent

# The hand-written members (docs/protocol-choices.md, "Bindings"): member → parameter names
# (self excluded). Everything else is generated from the contract and checked against the
# daemon's own `server.schema` below.
HAND_WRITTEN: Dict[str, List[str]] = {
    "daemon_call": ["method", "params_json", "timeout"],
    "daemon_call_host_management": ["method", "params_json"],
    "register_daemon_handler": ["method", "fn"],
    "unregister_daemon_handler": ["method"],
    "register_daemon_notification_handler": ["method", "fn"],
    "unregister_daemon_notification_handler": ["method"],
    "connection_epoch": [],
    "close": [],
    "disconnect": [],
    "submit_proposal": ["proposal_json", "session_id"],
    "execute_proposal": ["proposal_json", "tool_fn", "session_id"],
    "infer_stream": ["prompt", "on_event", "model", "max_tokens"],
}
HAND_WRITTEN_RETURNS = {
    "connection_epoch": "int", "close": "None", "disconnect": "None",
    "register_daemon_handler": "None", "register_daemon_notification_handler": "None",
    "unregister_daemon_handler": "None", "unregister_daemon_notification_handler": "None",
}

# The annotation a contract kind renders to.
ARG_TYPES = {"str": "str", "int": "int", "float": "float", "bool": "bool",
             "str_list": "List[str]", "int_list": "List[int]", "json": "str"}
RETURN_TYPES = {"unit": "None", "json": "str", "text": "str", "int": "int", "bool": "bool",
                "str_list": "List[str]"}

MODULE_FUNCTIONS = {
    "client_version": [], "protocol_version": [],
    "register_tool_handler": ["fn"], "unregister_tool_handler": [],
    "register_tool_cancel_handler": ["fn"], "unregister_tool_cancel_handler": [],
    "set_memory_namespace": ["ns"], "get_memory_namespace": [],
    "register_chat_handler": ["handler"], "unregister_chat_handler": [],
}

# `HostClient`'s hand-written members (CAR's): member → parameter names (self excluded).
HOST_HAND_WRITTEN: Dict[str, List[str]] = {
    "daemon_call_host_management": ["method", "params_json"],
}

# Members of `host` methods that CAR's CarRuntime has besides its HostClient (the codegen's
# RUNTIME_HOST_MEMBERS); every host member is HostClient's, these are the runtime's too.
RUNTIME_HOST_MEMBERS = {
    "remove_model", "agent_permissions_list_grants", "agent_permissions_revoke_grant",
}


def params(fn: object) -> List[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]  # type: ignore[arg-type]


def test_hand_written_members_have_the_documented_signature() -> None:
    for name, expected in HAND_WRITTEN.items():
        member = getattr(CarRuntime, name)
        assert name in vars(CarRuntime), f"{name} is not hand-written"
        assert params(member) == expected, name
        sig = inspect.signature(member)
        for p in sig.parameters.values():
            if p.name in ("session_id", "model", "max_tokens", "timeout"):
                assert p.default is None, (name, p.name)
            elif p.name == "params_json":
                assert p.default == "{}", name
            elif p.name != "self":
                assert p.default is inspect.Parameter.empty, (name, p.name)
        assert sig.return_annotation == HAND_WRITTEN_RETURNS.get(name, "str"), name
    for name, expected in HOST_HAND_WRITTEN.items():
        assert name in vars(HostClient), f"{name} is not hand-written"
        assert params(getattr(HostClient, name)) == expected, name
    assert params(HostClient.__init__) == ["runtime"]
    init = inspect.signature(CarRuntime.__init__).parameters
    assert list(init)[1:] == ["url", "token", "memory_namespace"]
    assert init["token"].kind is inspect.Parameter.KEYWORD_ONLY
    assert init["memory_namespace"].kind is inspect.Parameter.KEYWORD_ONLY


def test_typed_members_agree_with_the_daemons_contract(rt: CarRuntime) -> None:
    """Acceptance 2: every `members` entry of the live `server.schema` is a method of
    `CarRuntime` with CAR's name, its arguments in order with the declared annotations
    (`Optional[...] = None` when optional), and the declared return annotation."""
    rows = json.loads(rt.server_schema())["schema"]["methods"]
    checked = 0
    modules = 0
    for row in rows:
        for m in row.get("members", []):
            assert not row.get("debug"), row["name"]
            if m.get("module"):
                # A package-level function (CAR's `agents_start(id)`, …), on neither class.
                check_function(row["name"], m)
                modules += 1
                continue
            # Host methods' members are HostClient's (CAR's rule), and stay off CarRuntime
            # but for the few CAR's CarRuntime has as well.
            owners = []
            if row["role"] == "host":
                owners.append((HostClient, car_runtime.HOST_TYPED_MEMBERS))
            if row["role"] != "host" or m["name"] in RUNTIME_HOST_MEMBERS:
                owners.append((CarRuntime, car_runtime.TYPED_MEMBERS))
            else:
                assert not hasattr(CarRuntime, m["name"]), m["name"]
            for cls, table in owners:
                check_member(cls, table, row["name"], m)
                checked += 1
    assert checked == len(car_runtime.TYPED_MEMBERS) + len(car_runtime.HOST_TYPED_MEMBERS) > 30
    assert modules == len(car_runtime.MODULE_FUNCTIONS) > 20


def want_args(m: Dict[str, Any]) -> list:
    want = []
    for a in m["args"]:
        t = ARG_TYPES[a["kind"]]
        if a["optional"]:
            want.append((a["name"], f"Optional[{t}]", None))
        else:
            want.append((a["name"], t, inspect.Parameter.empty))
    return want


def check_function(method: str, m: Dict[str, Any]) -> None:
    """`m` is a generated package-level function with the contract's arguments."""
    fn = getattr(car_runtime, m["name"])
    assert car_runtime.MODULE_FUNCTIONS[m["name"]] == method
    sig = inspect.signature(fn)
    got = [(p.name, p.annotation, p.default) for p in sig.parameters.values()]
    assert got == want_args(m), m["name"]
    assert sig.return_annotation == RETURN_TYPES[m["returns"]["kind"]], m["name"]


def check_member(cls: type, table: Dict[str, str], method: str, m: Dict[str, Any]) -> None:
    """`m` (a `server.schema` member) is a generated method of `cls` with the contract's
    arguments, annotations and defaults, and `table` maps it to `method`."""
    fn = getattr(cls, m["name"])
    assert m["name"] not in vars(cls), f"{m['name']} is hand-written"
    assert table[m["name"]] == method
    sig = inspect.signature(fn)
    got = [(p.name, p.annotation, p.default) for p in sig.parameters.values()][1:]
    assert got == want_args(m), m["name"]
    assert sig.return_annotation == RETURN_TYPES[m["returns"]["kind"]], m["name"]


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
    assert issubclass(car_runtime.InvalidArgumentError, car_runtime.RefusedError)
    assert issubclass(car_runtime.InvalidArgumentError, TypeError)
    assert issubclass(car_runtime.InvalidArgumentError, ValueError)
    assert issubclass(car_runtime.UnexpectedResultError, TypeError)
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
              for n in stub_classes["NativeClient"] if n not in ("__init__", "connected")}
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


def test_every_served_method_has_a_member(rt: CarRuntime) -> None:
    rows = json.loads(rt.server_schema())["schema"]["methods"]
    table = {m["name"] for m in rows if not m.get("debug")}
    assert len(table) > 30
    served = {m["method"] for m in json.loads(rt.capabilities())["methods"]}
    assert served - {m["name"] for m in rows} == set()
    # Each method has its JSON-string wrapper unless a typed (or hand-written) member has
    # that name; the wrappers are exactly the others. Host methods' are HostClient's.
    host = {m["name"] for m in rows if m["role"] == "host" and not m.get("debug")}
    assert {"agents.upsert", "session.clear_halt"} <= host
    taken = set(car_runtime.TYPED_MEMBERS) | set(HAND_WRITTEN)
    on_runtime = {m for m in table if m not in host or snake(m) in RUNTIME_HOST_MEMBERS}
    wrappers = {snake(m): m for m in on_runtime if snake(m) not in taken}
    assert GENERATED_METHODS == wrappers
    host_wrappers = {snake(m): m for m in host if snake(m) not in car_runtime.HOST_TYPED_MEMBERS}
    assert car_runtime.HOST_GENERATED_METHODS == host_wrappers
    for cls, mixin, generated in [
        (CarRuntime, GeneratedMethods, GENERATED_METHODS),
        (HostClient, GeneratedHostMethods, car_runtime.HOST_GENERATED_METHODS),
    ]:
        for wrapper in generated:
            assert callable(getattr(cls, wrapper))
            assert hasattr(mixin, wrapper)
            assert params(getattr(cls, wrapper)) == ["params_json"]
    for wrapper in set(car_runtime.HOST_GENERATED_METHODS) - RUNTIME_HOST_MEMBERS:
        assert not hasattr(CarRuntime, wrapper), wrapper
    assert snake("session.bindSandbox") == "session_bind_sandbox"
    assert snake("a2ui/subscribe") == "a2ui_subscribe"
    assert {"runs_start", "embed", "infer", "state_get"} <= set(car_runtime.TYPED_MEMBERS)


def test_generated_wrappers_call_their_method(rt: CarRuntime) -> None:
    assert json.loads(rt.events_stats()) is not None
    assert json.loads(rt.tools_list()) == {"tools": [], "count": 0}
    assert json.loads(rt.capabilities_list())["caller_role"] == "operator"
    assert json.loads(rt.policy_list()) == {"policies": [], "scope": "global"}
    rt.memory_add_fact(json.dumps({"subject": "s", "body": "b", "fact_id": "f1"}))
    deleted = json.loads(rt.memory_delete(json.dumps({"id": "f1"})))
    assert deleted == {"id": "f1", "deleted": True, "kind": "pattern", "fact_count": 0}
    # A host method's wrapper is HostClient's and goes over the host-management connection.
    assert json.loads(HostClient(rt).session_clear_halt()) == {"cleared": False}

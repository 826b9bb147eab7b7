"""CAR's agent loop on the shared Rust client: `run_agent(config, goal, max_turns=None)`.

The loop itself (propose → verify → execute → observe, the `finish` tool, run bracketing
with `runs.start` / `runs.complete`, model turns recorded with `runs.record_model_turn`)
runs in `car-daemon-client`; this module only adapts CAR's `AgentLoopConfig`:
`tools` maps a tool name to a Python callable taking the call's parameters as a dict
(`fn(params)`), or the parameters and the call (`fn(params, call)`, with `tool`,
`action_id`, `request_id`, `timeout_ms`, `attempt`); its return value (any JSON value) is
what the model observes. A callable that raises fails that action; the model observes the
error and may try again. `runtime` (a `CarRuntime`) is used when given, else one is created
and closed around the run."""

from __future__ import annotations

import inspect
import json
from typing import Any, Callable, Dict, List, Mapping, Optional, TypedDict

from . import _callbacks
from ._runtime import CarRuntime


class AgentMetrics(TypedDict):
    turns: int
    tool_calls: int
    actions_succeeded: int
    actions_failed: int


class AgentOutcome(TypedDict):
    run_id: Optional[str]
    status: str
    summary: str
    evidence: List[Dict[str, Any]]
    metrics: AgentMetrics
    tools_called: List[str]
    timestamp: str


class AgentLoopConfig(TypedDict, total=False):
    agent_id: str
    agent_name: str
    identity: str
    tool_schemas: List[Dict[str, Any]]
    tools: Mapping[str, Callable[..., Any]]
    policies: List[Dict[str, Any]]
    default_model: Optional[str]
    max_tokens: int
    max_turns: int
    target_outcome: str
    runtime: CarRuntime


def _dispatcher(tools: Mapping[str, Callable[..., Any]]) -> Callable[[str], str]:
    arity = {name: _positional(fn) for name, fn in tools.items()}

    def dispatch(call_json: str) -> str:
        call = json.loads(call_json)
        name = call["tool"]
        fn = tools.get(name)
        if fn is None:
            raise LookupError(f"no tool function named {name!r} in the config's tools")
        params = call.get("params") or {}
        result = fn(params, call) if arity[name] >= 2 else fn(params)
        return json.dumps(result)

    return dispatch


def _positional(fn: Callable[..., Any]) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in sig.parameters.values() if p.kind in kinds)


def run_agent(config: AgentLoopConfig, goal: str, max_turns: Optional[int] = None) -> AgentOutcome:
    """Runs `config`'s agent on `goal` and returns CAR's `AgentOutcome`."""
    tools: Mapping[str, Callable[..., Any]] = config.get("tools", {})
    for name, fn in tools.items():
        if not callable(fn):
            raise TypeError(f"tools[{name!r}] must be callable, got {type(fn).__name__}")
    wire = {k: v for k, v in config.items() if k not in ("tools", "runtime")}
    runtime = config.get("runtime")
    owned = runtime is None
    rt = runtime if runtime is not None else CarRuntime()
    try:
        _callbacks.POOL.ensure_started()
        outcome: AgentOutcome = json.loads(
            rt._native.run_agent(json.dumps(wire), goal, _dispatcher(tools), max_turns)
        )
        return outcome
    finally:
        if owned:
            rt.close()

"""CAR's agent loop on the shared Rust client: `run_agent(config, goal, max_turns=None)` and
`run_chat_turn(rt, config, tool_schemas, tools, tool_timeouts, session_id, messages, ...)`.

The loop itself (propose → verify → execute → observe, the `finish` tool, run bracketing
with `runs.start` / `runs.complete`, model turns recorded with `runs.record_model_turn`)
runs in `car-daemon-client`; this module only adapts CAR's `AgentLoopConfig`:
`tools` maps a tool name to a Python callable taking the call's parameters as a dict
(`fn(params)`), or the parameters and the call (`fn(params, call)`, with `tool`,
`action_id`, `request_id`, `timeout_ms`, `attempt`); its return value (any JSON value) is
what the model observes. A callable that raises fails that action; the model observes the
error and may try again. As in CAR's loop, a callable that declares an `abort` keyword (or
`**kwargs`) gets a `threading.Event` that is set when the daemon cancels the call
(`tools.cancel`, e.g. when the call's budget runs out), and one that declares `timeout_ms`
gets that budget in milliseconds (`None`: the daemon's default); a tool's budget is the
`timeoutMs` its schema declares. `runtime` (a `CarRuntime`) is used when given, else one is
created and closed around the run.

`serve_chat(config)` serves `agents.chat` turns with the loop (CAR's `--serve` harness): a
process-wide chat handler keeps each `session_id`'s conversation in memory (the newest
`history_turns` messages), runs `run_chat_turn` per turn with the config's tools, and streams
the reply as the turn's text; it returns a function that stops serving. Its runs are recorded
under the config's `agent_id`, else `CAR_AGENT_ID` (an attached agent's runs are its own).
`main(config)` is
the command line of an agent program: `--task TEXT` runs `run_agent` and prints the summary
(`--json`: the whole `AgentOutcome`), exiting 0 for `success` / `partial_success` / `done`
and 1 otherwise; `--serve` serves chat until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import inspect
import json
import os
import signal
import sys
import threading
from typing import Any, Callable, Dict, List, Literal, Mapping, Optional, Sequence, TypedDict, Union, overload

from . import _callbacks, _runtime
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


class ChatTurnResult(TypedDict):
    text: str
    run_id: Optional[str]


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
    # Not in CAR's config: what every turn sends as `tool_choice` (default "auto") and
    # `temperature` (default: the model's); small local models want "required" and 0.
    tool_choice: str
    temperature: float
    parallel_tool_calls: bool
    runtime: CarRuntime


def _dispatcher(tools: Mapping[str, Callable[..., Any]]) -> Callable[[str], str]:
    arity = {name: _positional(fn) for name, fn in tools.items()}
    wants = {name: (_keyword(fn, "abort"), _keyword(fn, "timeout_ms")) for name, fn in tools.items()}

    def dispatch(call_json: str) -> str:
        call = json.loads(call_json)
        name = call["tool"]
        fn = tools.get(name)
        if fn is None:
            raise LookupError(f"no tool function named {name!r} in the config's tools")
        params = call.get("params") or {}
        args = (params, call) if arity[name] >= 2 else (params,)
        wants_abort, wants_timeout = wants[name]
        kwargs: Dict[str, Any] = {}
        if wants_timeout:
            kwargs["timeout_ms"] = call.get("timeout_ms")
        rid = call.get("request_id")
        request_id = rid if isinstance(rid, str) else json.dumps(rid)
        if wants_abort:
            kwargs["abort"] = _runtime.watch_abort(request_id)
        try:
            result = fn(*args, **kwargs)
        finally:
            if wants_abort:
                _runtime.forget_abort(request_id)
        return json.dumps(result)

    return dispatch


def _keyword(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    if name in params and params[name].kind is not inspect.Parameter.POSITIONAL_ONLY:
        return True
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _positional(fn: Callable[..., Any]) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    extras = ("abort", "timeout_ms")
    return sum(1 for p in sig.parameters.values() if p.kind in kinds and p.name not in extras)


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


@overload
def run_chat_turn(
    rt: CarRuntime,
    config: AgentLoopConfig,
    tool_schemas: List[Dict[str, Any]],
    tools: Mapping[str, Callable[..., Any]],
    tool_timeouts: Mapping[str, int],
    session_id: str,
    messages: List[Dict[str, Any]],
    requested_model: Optional[str] = ...,
    *,
    include_run_id: Literal[True],
) -> ChatTurnResult: ...


@overload
def run_chat_turn(
    rt: CarRuntime,
    config: AgentLoopConfig,
    tool_schemas: List[Dict[str, Any]],
    tools: Mapping[str, Callable[..., Any]],
    tool_timeouts: Mapping[str, int],
    session_id: str,
    messages: List[Dict[str, Any]],
    requested_model: Optional[str] = ...,
    *,
    include_run_id: Literal[False] = ...,
) -> str: ...


def run_chat_turn(
    rt: CarRuntime,
    config: AgentLoopConfig,
    tool_schemas: List[Dict[str, Any]],
    tools: Mapping[str, Callable[..., Any]],
    tool_timeouts: Mapping[str, int],
    session_id: str,
    messages: List[Dict[str, Any]],
    requested_model: Optional[str] = None,
    *,
    include_run_id: bool = False,
) -> Union[str, ChatTurnResult]:
    """One chat turn on `rt` (CAR's signature): `messages` is the conversation so far
    (`{role: "user" | "assistant", content}`, the newest user turn last), `tool_schemas`
    and `tools` the turn's tools (`tool_timeouts` maps a tool name to its budget in
    milliseconds, as a schema's `timeoutMs` would), `requested_model` overrides the
    config's model. The turn is recorded as a run; returns the reply text, or
    `{text, run_id}` with `include_run_id=True`. `session_id` names the chat (CAR's per-turn
    `agents.chat` id); it must be a string and is not otherwise used yet."""
    if not isinstance(session_id, str):
        raise TypeError(f"session_id must be a str, got {type(session_id).__name__}")
    for name, fn in tools.items():
        if not callable(fn):
            raise TypeError(f"tools[{name!r}] must be callable, got {type(fn).__name__}")
    schemas = []
    for schema in tool_schemas:
        budget = tool_timeouts.get(str(schema.get("name")))
        schemas.append(dict(schema, timeoutMs=budget) if budget is not None else dict(schema))
    wire: Dict[str, Any] = {k: v for k, v in config.items() if k not in ("tools", "runtime")}
    wire["tool_schemas"] = schemas
    _callbacks.POOL.ensure_started()
    turn: ChatTurnResult = json.loads(
        rt._native.run_chat_turn(json.dumps(wire), json.dumps(messages), _dispatcher(tools), requested_model)
    )
    return turn if include_run_id else turn["text"]


def serve_chat(config: AgentLoopConfig, history_turns: int = 50) -> Callable[[], None]:
    """Serves `agents.chat` with this loop (see the module docs); returns `stop()`. The
    runtime is `config["runtime"]` or a new one (bound to `CAR_AGENT_ID` /
    `CAR_AGENT_TOKEN` when they are set), closed by `stop()` when this function made it."""
    if history_turns < 1:
        raise ValueError(f"history_turns must be at least 1, got {history_turns}")
    tools: Mapping[str, Callable[..., Any]] = config.get("tools", {})
    for name, fn in tools.items():
        if not callable(fn):
            raise TypeError(f"tools[{name!r}] must be callable, got {type(fn).__name__}")
    runtime = config.get("runtime")
    owned = runtime is None
    rt = runtime if runtime is not None else CarRuntime()
    schemas = list(config.get("tool_schemas", []))
    # An attached agent records its runs as itself: the daemon refuses another agent id.
    agent_id = config.get("agent_id") or os.environ.get("CAR_AGENT_ID")
    if agent_id:
        config = dict(config, agent_id=agent_id)  # type: ignore[assignment]
    threads: Dict[str, List[Dict[str, Any]]] = {}
    guard = threading.Lock()

    def handler(params_json: str) -> None:
        params = json.loads(params_json)
        session_id = str(params["session_id"])
        with guard:
            history = threads.setdefault(session_id, [])
            history.append({"role": "user", "content": str(params.get("prompt", ""))})
            conversation = list(history[-history_turns:])
        text = run_chat_turn(rt, config, schemas, tools, {}, session_id, conversation, params.get("model"))
        with guard:
            history.append({"role": "assistant", "content": text})
            del history[:-history_turns]
        if text:
            rt.chat_event(session_id, "token", text)

    _runtime.register_chat_handler(handler)
    # Connecting binds an agent runtime to its agent, so the daemon routes chats to it.
    rt.connection_epoch()

    def stop() -> None:
        _runtime.unregister_chat_handler()
        if owned:
            rt.close()

    return stop


def main(config: AgentLoopConfig, argv: Optional[Sequence[str]] = None) -> int:
    """The command line of an agent program (see the module docs); returns the exit code."""
    parser = argparse.ArgumentParser(prog=str(config.get("agent_name", "agent")))
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--task", help="run the agent on this task and print its answer")
    mode.add_argument("--serve", action="store_true", help="serve agents.chat turns until interrupted")
    parser.add_argument("--json", action="store_true", help="print the whole AgentOutcome as JSON")
    parser.add_argument("--max-turns", type=int, default=None, help="override the config's max_turns")
    args = parser.parse_args(argv)
    if args.serve:
        stop = serve_chat(config)
        done = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: done.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            done.wait()
        finally:
            for sig, handler in previous.items():
                if handler is not None:
                    signal.signal(sig, handler)
            stop()
        return 0
    outcome = run_agent(config, args.task, args.max_turns)
    sys.stdout.write((json.dumps(outcome) if args.json else outcome["summary"]) + "\n")
    return 0 if outcome["status"] in ("success", "partial_success", "done") else 1

"""Multi-agent coordination from Python: the process-wide agent runner and CAR's
module-level `run_swarm` … `run_tournament`.

The daemon runs every coordination (`multi.*`) and sends each agent to the calling
connection as a `multi.run_agent {spec, task}` reverse call. `register_agent_runner(fn)`
serves those calls on every `CarRuntime` of the process with `fn(spec_json, task)`, which
returns an `AgentOutput` JSON string (`{name, answer, turns, tool_calls, duration_ms,
error?, tokens?}`; a plain string is taken as the answer). With no runner registered the
client answers `-32601` and the daemon runs the agents itself on its own models.

The `run_*` functions open a short-lived `CarRuntime`, serve that call's agents with
`agent_fn` (else the registered runner, else the daemon's), and return the result JSON.
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import Any, Callable, Dict, Optional

AgentFn = Optional[Callable[[str, str], Any]]

RUN_AGENT = "multi.run_agent"

_lock = threading.Lock()
_runner: Optional[Callable[[str, str], Any]] = None
_runtimes: "weakref.WeakSet[Any]" = weakref.WeakSet()


def _adapter(fn: Callable[[str, str], Any]) -> Callable[[str], str]:
    def serve(params_json: str) -> str:
        params = json.loads(params_json)
        out = fn(json.dumps(params.get("spec", {})), params.get("task", ""))
        return out if isinstance(out, str) and _is_json(out) else json.dumps(out)

    return serve


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def attach(runtime: Any) -> None:
    """Called by every new `CarRuntime`: it serves the registered runner, if any."""
    with _lock:
        _runtimes.add(runtime)
        fn = _runner
    if fn is not None:
        runtime._native.register_handler(RUN_AGENT, _adapter(fn))


def register_agent_runner(agent_fn: Callable[[str, str], Any]) -> None:
    """Serves `multi.run_agent` on every `CarRuntime` of the process (see the module docs);
    replaces any earlier runner."""
    global _runner
    if not callable(agent_fn):
        raise TypeError(f"agent_fn must be callable, got {type(agent_fn).__name__}")
    with _lock:
        _runner = agent_fn
        runtimes = list(_runtimes)
    for rt in runtimes:
        rt._native.register_handler(RUN_AGENT, _adapter(agent_fn))


def unregister_agent_runner() -> None:
    """Removes the runner: the daemon runs agents itself again."""
    global _runner
    with _lock:
        _runner = None
        runtimes = list(_runtimes)
    for rt in runtimes:
        rt._native.unregister_handler(RUN_AGENT)


def _run(member: str, params: Dict[str, Any], agent_fn: AgentFn, budget_json: Optional[str]) -> str:
    from ._runtime import CarRuntime

    if budget_json is not None:
        params["budget"] = json.loads(budget_json)
    with CarRuntime() as rt:
        if agent_fn is not None:
            rt._native.register_handler(RUN_AGENT, _adapter(agent_fn))
        return str(getattr(rt, member)(json.dumps(params)))


def run_swarm(mode: str, agents_json: str, task: str, agent_fn: AgentFn = None, synthesizer_json: Optional[str] = None, budget_json: Optional[str] = None) -> str:
    params: Dict[str, Any] = {"mode": mode, "agents": json.loads(agents_json), "task": task}
    if synthesizer_json is not None:
        params["synthesizer"] = json.loads(synthesizer_json)
    return _run("multi_swarm", params, agent_fn, budget_json)


def run_pipeline(stages_json: str, task: str, agent_fn: AgentFn = None, budget_json: Optional[str] = None) -> str:
    return _run("multi_pipeline", {"stages": json.loads(stages_json), "task": task}, agent_fn, budget_json)


def run_supervisor(workers_json: str, supervisor_json: str, task: str, max_rounds: int, agent_fn: AgentFn = None, budget_json: Optional[str] = None) -> str:
    params: Dict[str, Any] = {"workers": json.loads(workers_json), "supervisor": json.loads(supervisor_json), "task": task, "max_rounds": max_rounds}
    return _run("multi_supervisor", params, agent_fn, budget_json)


def run_map_reduce(mapper_json: str, reducer_json: str, task: str, items_json: str, agent_fn: AgentFn = None, budget_json: Optional[str] = None) -> str:
    params: Dict[str, Any] = {"mapper": json.loads(mapper_json), "reducer": json.loads(reducer_json), "task": task, "items": json.loads(items_json)}
    return _run("multi_map_reduce", params, agent_fn, budget_json)


def run_vote(agents_json: str, task: str, agent_fn: AgentFn = None, synthesizer_json: Optional[str] = None, budget_json: Optional[str] = None) -> str:
    params: Dict[str, Any] = {"agents": json.loads(agents_json), "task": task}
    if synthesizer_json is not None:
        params["synthesizer"] = json.loads(synthesizer_json)
    return _run("multi_vote", params, agent_fn, budget_json)


def run_tournament(competitors_json: str, judge_json: str, task: str, agent_fn: AgentFn = None, budget_json: Optional[str] = None) -> str:
    params: Dict[str, Any] = {"competitors": json.loads(competitors_json), "judge": json.loads(judge_json), "task": task}
    return _run("multi_tournament", params, agent_fn, budget_json)


def run_subtask(main_json: str, task: str, agent_fn: AgentFn = None, budget_json: Optional[str] = None) -> str:
    return _run("multi_subtask", {"main": json.loads(main_json), "task": task}, agent_fn, budget_json)


def run_task(task_json: str, agent_fn: AgentFn = None) -> str:
    """`scheduler.run`: the task's due occurrence, its agent served by `agent_fn` (else the
    registered runner, else the daemon's). Returns the execution record JSON."""
    return _run("scheduler_run", {"task": json.loads(task_json)}, agent_fn, None)


def run_task_loop(task_json: str, agent_fn: AgentFn = None, max_iterations: Optional[int] = None) -> str:
    """`scheduler.run_loop`: up to `max_iterations` occurrences on the task's cadence."""
    params: Dict[str, Any] = {"task": json.loads(task_json)}
    if max_iterations is not None:
        params["max_iterations"] = max_iterations
    return _run("scheduler_run_loop", params, agent_fn, None)

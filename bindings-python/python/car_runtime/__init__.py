"""car_runtime: drive the local car-server daemon from Python.

    from car_runtime import CarRuntime

    with CarRuntime() as rt:
        rt.state_set("greeting", '"hello"')
        print(rt.state_get("greeting"))

Structured results are JSON strings; see `CarRuntime` for the members (CAR's typed
members and JSON-string wrappers are generated from the daemon's method contract:
`TYPED_MEMBERS` and `GENERATED_METHODS` map their names to daemon methods), `HostClient`
for the `host` methods (`HOST_TYPED_MEMBERS`, `HOST_GENERATED_METHODS`),
`register_chat_handler` for serving `agent.chat`, and `_errors` for what each exception
means.
"""

from __future__ import annotations

from . import _native
from ._errors import (
    CarRuntimeError,
    ClientClosedError,
    DaemonConnectionError,
    DaemonRpcError,
    DaemonTimeoutError,
    HandshakeError,
    InternalError,
    InvalidArgumentError,
    RefusedError,
    TerminalToolError,
    UnexpectedResultError,
)
from ._generated import *  # noqa: F401,F403 -- CAR's package-level functions (`MODULE_FUNCTIONS`)
from ._generated import (
    GENERATED_METHODS,
    HOST_GENERATED_METHODS,
    HOST_TYPED_MEMBERS,
    MODULE_FUNCTIONS,
    TYPED_MEMBERS,
)
from ._host import HostClient
from ._multi import (
    register_agent_runner,
    run_map_reduce,
    run_pipeline,
    run_subtask,
    run_supervisor,
    run_swarm,
    run_task,
    run_task_loop,
    run_tournament,
    run_vote,
    unregister_agent_runner,
)
from ._runtime import (
    CarRuntime,
    get_memory_namespace,
    register_chat_handler,
    register_tool_cancel_handler,
    register_tool_handler,
    set_memory_namespace,
    unregister_chat_handler,
    unregister_tool_cancel_handler,
    unregister_tool_handler,
)

__version__: str = _native.client_version()


def client_version() -> str:
    """The version of the bundled daemon client."""
    return _native.client_version()


def protocol_version() -> int:
    """The daemon protocol version this package speaks."""
    return _native.protocol_version()


__all__ = [
    "register_agent_runner",
    "unregister_agent_runner",
    "run_swarm",
    "run_pipeline",
    "run_supervisor",
    "run_map_reduce",
    "run_vote",
    "run_tournament",
    "run_subtask",
    "run_task",
    "run_task_loop",
    "GENERATED_METHODS",
    "HOST_GENERATED_METHODS",
    "HOST_TYPED_MEMBERS",
    "CarRuntime",
    "CarRuntimeError",
    "ClientClosedError",
    "DaemonConnectionError",
    "DaemonRpcError",
    "DaemonTimeoutError",
    "HandshakeError",
    "HostClient",
    "InternalError",
    "InvalidArgumentError",
    "RefusedError",
    "TYPED_MEMBERS",
    "TerminalToolError",
    "UnexpectedResultError",
    "__version__",
    "client_version",
    "get_memory_namespace",
    "protocol_version",
    "register_chat_handler",
    "register_tool_cancel_handler",
    "register_tool_handler",
    "set_memory_namespace",
    "unregister_chat_handler",
    "unregister_tool_cancel_handler",
    "unregister_tool_handler",
]

# CAR's package-level functions (`agents_start(id)`, `schedule_task(spec_json)`, …), generated
# from the contract: each opens a short-lived `CarRuntime` for its call.
__all__ += ["MODULE_FUNCTIONS", *MODULE_FUNCTIONS]

"""`HostClient`: the host-authority view of a `CarRuntime` (CAR's `HostClient`).

CAR keeps the `host` methods off `CarRuntime` autocomplete: they live here, generated from
the daemon's method contract into `GeneratedHostMethods` (a JSON-string wrapper per host
method, `models_remove(params_json)`, and the typed members such as
`agents_upsert(spec_json)`). A `HostClient` shares its runtime's native client, so it uses
the same process resources, handlers and reconnects; host methods go over that client's
host-management connection, which authenticates with the `host-token` file beside the
token file. The host token is read only when a host method is called.
"""

from __future__ import annotations

from typing import Any, List

from ._generated import GeneratedHostMethods
from ._runtime import CarRuntime


class HostClient(GeneratedHostMethods):
    """Host-authority daemon client; host methods stay off CarRuntime autocomplete."""

    def __init__(self, runtime: CarRuntime) -> None:
        if not isinstance(runtime, CarRuntime):
            raise TypeError(f"runtime must be a CarRuntime, got {type(runtime).__name__}")
        self._runtime = runtime

    def __repr__(self) -> str:
        return f"<HostClient of {self._runtime!r}>"

    @property
    def runtime(self) -> CarRuntime:
        """The runtime whose client this one uses."""
        return self._runtime

    def daemon_call_host_management(self, method: str, params_json: str = "{}") -> str:
        """Calls a host-management method (`host` or `owner` role) with the host token;
        any other method is refused client-side (`RefusedError`) before the token is
        read."""
        return self._runtime._native.call_host_management(method, params_json)

    def _call_member(self, method: str, member: str, args: List[Any]) -> Any:
        """What every generated typed member calls (see `CarRuntime._call_member`); the
        shared client sends a `host` method over the host-management connection."""
        return self._runtime._native.call_member(method, member, args)

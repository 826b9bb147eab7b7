"""`HostClient(runtime)`: the `host` methods, over the runtime's host-management
connection, and kept off `CarRuntime` (CAR's rule), against a real daemon."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

import car_runtime
from car_runtime import CarRuntime, HostClient
from car_runtime._generated import GeneratedHostMethods, GeneratedMethods

from conftest import Daemon

HOST_METHODS = {
    "agents_upsert": "agents.upsert",
    "agents_remove": "agents.remove",
    "models_remove": "models.remove",
    "session_clear_halt": "session.clear_halt",
    "diagnostics_secret_store_activity": "diagnostics.secret_store_activity",
}


@pytest.fixture
def open_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    """A daemon with the approval gate off (`agents.upsert` runs without a host's
    approval), whose CAR_HOME this process's env points at."""
    home = tmp_path / "car-home"
    home.mkdir()
    d = Daemon(home, extra_env={"CAR_NO_APPROVALS": "1"}).start()
    for k in list(os.environ):
        if k.startswith("CAR_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("CAR_HOME", str(home))
    try:
        yield d
    finally:
        d.stop()


def spec(agent_id: str) -> str:
    return json.dumps({"id": agent_id, "name": agent_id.title(), "command": sys.executable})


def test_host_methods_are_host_clients_not_the_runtimes() -> None:
    for name, method in HOST_METHODS.items():
        assert callable(getattr(HostClient, name)), name
        assert not hasattr(CarRuntime, name), f"{name} is on CarRuntime"
        table = car_runtime.HOST_GENERATED_METHODS | car_runtime.HOST_TYPED_MEMBERS
        assert table[name] == method
    # Every HostClient member is a host method's; none is the runtime's, but the few CAR's
    # CarRuntime has as well.
    also = {"remove_model", "agent_permissions_list_grants", "agent_permissions_revoke_grant"}
    for name in car_runtime.HOST_GENERATED_METHODS | car_runtime.HOST_TYPED_MEMBERS:
        assert hasattr(GeneratedHostMethods, name)
        assert hasattr(GeneratedMethods, name) == (name in also), name
    # CAR's CarRuntime keeps its bridge, `remove_model` and the grant wrappers.
    assert callable(CarRuntime.daemon_call_host_management)
    assert car_runtime.TYPED_MEMBERS["remove_model"] == "models.remove"
    assert car_runtime.GENERATED_METHODS["agent_permissions_list_grants"] == (
        "agent_permissions.list_grants"
    )
    with pytest.raises(TypeError, match="runtime must be a CarRuntime"):
        HostClient("not a runtime")  # type: ignore[arg-type]


def test_agents_upsert_through_the_host_client_registers_an_agent(
    open_daemon: Daemon,
) -> None:
    with CarRuntime() as rt:
        host = HostClient(rt)
        assert host.runtime is rt
        agent = json.loads(host.agents_upsert(spec("py-agent")))
        assert agent["spec"]["id"] == "py-agent"
        assert agent["attached"] is False
        token = Path(agent["token_path"]).read_text().strip()
        assert len(token) >= 32
        listed = {a["spec"]["id"]: a for a in json.loads(rt.agents_list())}
        assert "py-agent" in listed and listed["py-agent"]["status"] == "stopped"
        # The same call from the runtime's own (operator) connection is refused.
        with pytest.raises(car_runtime.DaemonRpcError) as refused:
            rt.daemon_call("agents.upsert", spec("other"))
        assert refused.value.data["reason"] == "host_required"
        assert json.loads(host.agents_remove(json.dumps({"id": "py-agent"}))) == {
            "removed": True
        }
        assert [a for a in json.loads(rt.agents_list()) if a["spec"]["id"] == "py-agent"] == []


def test_host_only_methods_work_only_through_the_host_client(open_daemon: Daemon) -> None:
    with CarRuntime() as rt:
        host = HostClient(rt)
        activity = json.loads(host.diagnostics_secret_store_activity())
        assert isinstance(activity, dict)
        with pytest.raises(car_runtime.DaemonRpcError) as refused:
            rt.daemon_call("diagnostics.secret_store_activity")
        assert refused.value.data["reason"] == "host_required"
        assert json.loads(host.session_clear_halt()) == {"cleared": False}
        assert json.loads(
            host.daemon_call_host_management("session.clear_halt", "{}")
        ) == {"cleared": False}
        # Not a host-management method: refused before the host token is read.
        with pytest.raises(car_runtime.RefusedError, match="not a host-management method"):
            host.daemon_call_host_management("state.get", '{"key": "k"}')
        # A host client and its runtime share one client: closing the runtime drops the
        # host connection too, and the next host call reconnects.
        rt.close()
        assert json.loads(host.session_clear_halt()) == {"cleared": False}


def test_the_host_token_is_read_only_for_host_methods(open_daemon: Daemon) -> None:
    host_token = open_daemon.home / "ai.parslee.car" / "host-token"
    assert host_token.exists()
    saved = host_token.read_bytes()
    host_token.unlink()
    try:
        with CarRuntime() as rt:
            host = HostClient(rt)
            # Operator calls never need the host token.
            assert json.loads(rt.agents_list()) == []
            with pytest.raises(car_runtime.RefusedError, match="host"):
                host.session_clear_halt()
    finally:
        host_token.write_bytes(saved)

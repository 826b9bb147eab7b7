"""Supervised agents and agent messages through CAR's own client (0.58.0): CAR's
`HostClient.agents_upsert` registers an agent whose command is a CAR-client program; CAR's
`CarRuntime.agents_start` / `agents_wait` / `agents_list` / `agents_tail_log` /
`agents_health` / `agents_stop` drive our daemon's supervisor; the child connects back with
the `CAR_AGENT_ID` / `CAR_AGENT_TOKEN` the daemon gave it; `agents_peers` and
`agents_message` reach it."""

from __future__ import annotations

import json
import sys
from typing import Any, Dict

import pytest

import car_runtime
from conftest import wait_until

NO_GATE = pytest.mark.daemon_args("--no-approvals")

# The supervised program: CAR's client as the agent (the daemon sets its credentials).
AGENT = """
import threading, car_runtime
rt = car_runtime.CarRuntime()
rt.register_daemon_notification_handler("agents.message.event", lambda p: (print("MESSAGE", p, flush=True)))
rt.state_keys()
print("READY", flush=True)
threading.Event().wait()
"""


def managed(rt: car_runtime.CarRuntime, agent_id: str) -> Dict[str, Any]:
    rows = json.loads(rt.agents_list("{}"))
    return next(r for r in rows if r["spec"]["id"] == agent_id)


def log_has(rt: car_runtime.CarRuntime, agent_id: str, text: str) -> bool:
    tail = json.loads(rt.agents_tail_log(json.dumps({"id": agent_id, "n": 20})))
    return any(text in line for line in tail["stdout"])


@NO_GATE
def test_cars_client_drives_the_supervisor(rt: car_runtime.CarRuntime) -> None:
    car_runtime.HostClient(rt).agents_upsert(json.dumps({
        "id": "sup", "name": "Supervised", "command": sys.executable, "args": ["-c", AGENT],
        "restart": "on_failure", "backoff_secs": 0}))
    started = json.loads(rt.agents_start(json.dumps({"id": "sup"})))
    assert started["status"] in ("starting", "running"), started
    try:
        running = json.loads(rt.agents_wait(json.dumps({"id": "sup", "targets": ["running"], "timeout_secs": 60})))
        assert running["pid"], running
        wait_until(lambda: log_has(rt, "sup", "READY"), "the agent to attach", timeout=60)
        assert managed(rt, "sup")["attached"] is True
        health = {r["id"]: r for r in json.loads(rt.agents_health("{}"))}
        assert health["sup"]["ok"] is True, health

        peers = {p["id"]: p for p in json.loads(rt.agents_peers("{}"))}
        assert peers["sup"]["reachable"] is True, peers
        sent = json.loads(rt.agents_message(json.dumps({"to": "sup", "body": "hello agent"})))
        assert sent["status"] == "delivered", sent
        wait_until(lambda: log_has(rt, "sup", "hello agent"), "the agent to receive the message")
    finally:
        stopped = json.loads(rt.agents_stop(json.dumps({"id": "sup"})))
    assert stopped["status"] == "stopped", stopped
    assert stopped["pid"] is None or managed(rt, "sup")["status"] == "stopped"


def test_cars_client_gets_precise_errors_from_the_supervisor(rt: car_runtime.CarRuntime) -> None:
    with pytest.raises(Exception, match="no registered agent 'ghost'"):
        rt.agents_start(json.dumps({"id": "ghost"}))
    with pytest.raises(Exception, match="to"):
        rt.agents_message(json.dumps({"to": "ghost", "body": "x"}))
    assert json.loads(rt.agents_list("{}")) == []

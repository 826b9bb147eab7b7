"""`multi.*`, `workflow.*` and `scheduler.*` / `tasks.*` through CAR's own client (0.58.0)
against our daemon, with its generated `multi_swarm(params_json)` … wrappers.

CAR's 0.58.0 client answers the daemon's `multi.run_agent` reverse call with `-32601` (its
`register_agent_runner` serves CAR's in-process engines, not the daemon), so the daemon runs
the agents itself on its local model: the coordination still works from CAR's client."""

from __future__ import annotations

import json
import os
from typing import Any, Dict

import pytest

import car_runtime
from conftest import Daemon


def spec(name: str) -> Dict[str, Any]:
    return {
        "name": name,
        "system_prompt": "Answer in one short sentence.",
        "tools": [],
        "max_turns": 1,
        "metadata": {"model": "smol", "max_tokens": 16, "seed": 3, "temperature": 0.0},
    }


def register_smol(rt: car_runtime.CarRuntime) -> None:
    schema = {
        "id": "smol",
        "name": "SmolLM2 (interop)",
        "provider": "local",
        "family": "smollm2",
        "capabilities": ["generate"],
        "context_length": 2048,
        "source": {"type": "local", "path": os.environ["CAR_TEST_GGUF"]},
    }
    rt.register_model(json.dumps(schema))


def test_a_pipeline_from_cars_client_runs_on_the_daemons_model(rt: car_runtime.CarRuntime) -> None:
    register_smol(rt)
    r = json.loads(rt.multi_pipeline(json.dumps({"stages": [spec("first"), spec("second")], "task": "Name a fruit."})))
    assert [s["name"] for s in r["stages"]] == ["first", "second"]
    for stage in r["stages"]:
        assert stage["error"] is None, stage
        assert stage["answer"], stage
        assert stage["tokens"]["output_tokens"] > 0
    assert r["final_answer"] == r["stages"][1]["answer"]


def test_bad_multi_input_is_invalid_params_for_cars_client(rt: car_runtime.CarRuntime) -> None:
    with pytest.raises(Exception, match="agents"):
        rt.multi_swarm(json.dumps({"mode": "parallel", "agents": [], "task": "T"}))
    with pytest.raises(Exception, match="mode"):
        rt.multi_swarm(json.dumps({"mode": "sideways", "agents": [spec("a")], "task": "T"}))


def test_workflow_verify_and_pause_through_cars_client(rt: car_runtime.CarRuntime) -> None:
    wf = {
        "id": "w", "name": "gate only", "start": "gate",
        "stages": [{"id": "gate", "name": "Gate", "step": {"type": "approval", "prompt": "ok?", "fields": [{"name": "go", "required": True}], "output_key": "answer"}}],
        "edges": [],
    }
    report = json.loads(rt.workflow_verify(json.dumps({"workflow": wf})))
    assert report["valid"] is True, report
    paused = json.loads(rt.workflow_run(json.dumps({"workflow": wf})))
    assert paused["status"] == "paused"
    listed = json.loads(rt.workflow_list_paused("{}"))
    assert [p["run_id"] for p in listed] == [paused["paused"]["run_id"]]
    done = json.loads(rt.workflow_resume(json.dumps({"run_id": paused["paused"]["run_id"], "input": {"go": "yes"}})))
    assert done["status"] == "completed"
    assert done["final_state"]["answer.go"] == "yes"


def test_scheduler_create_and_render_through_cars_client(rt: car_runtime.CarRuntime) -> None:
    task = json.loads(rt.scheduler_create(json.dumps({"name": "nightly", "prompt": "p", "trigger": "interval", "schedule": "3600"})))
    assert task["trigger"] == "interval" and task["schedule"] == "3600" and task["executions"] == []
    rendered = json.loads(rt.scheduler_os_render(json.dumps({"task": task, "program": "/usr/bin/car", "args": ["run", "x"]})))
    assert rendered["crontab_line"] == f"0 * * * * /usr/bin/car run x # ai.parslee.car.task.{task['id']}"
    assert rendered["label"] == f"ai.parslee.car.task.{task['id']}"
    with pytest.raises(Exception, match="schedule"):
        rt.scheduler_create(json.dumps({"name": "bad", "prompt": "p", "trigger": "cron", "schedule": "99 * * * *"}))


@pytest.mark.daemon_args("--no-approvals")
def test_command_tasks_through_cars_host_client(rt: car_runtime.CarRuntime, tmp_path) -> None:
    script = tmp_path / "tick.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    script.chmod(0o755)
    host = car_runtime.HostClient(rt)
    scheduled = json.loads(host.tasks_schedule(json.dumps(
        {"name": "ticker", "program": str(script), "cadence": {"interval_secs": 3600}, "durable": False})))
    assert scheduled["backend"] == "daemon" and scheduled["durable"] is False, scheduled
    rows = json.loads(rt.tasks_list("{}"))
    assert [r["id"] for r in rows] == [scheduled["id"]]
    assert rows[0]["trigger"] == "interval" and rows[0]["schedule"] == "3600"
    gone = json.loads(host.tasks_unschedule(json.dumps({"id": scheduled["id"]})))
    assert gone == {"id": scheduled["id"], "os_removed": False, "deleted": True}
    with pytest.raises(Exception, match="cadence.cron"):
        host.tasks_schedule(json.dumps({"name": "x", "program": str(script), "cadence": {"cron": "61 * * * *"}}))

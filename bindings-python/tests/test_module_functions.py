"""CAR's package-level functions (`agents_*`, `create_task`, `render_os_schedule`,
`schedule_task`, `verify_workflow`, `run_workflow` / `resume_workflow`, `run_task`), generated
from the contract, against a real daemon: each opens a short-lived runtime for its call."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

import car_runtime

from conftest import Daemon


def test_every_generated_function_is_exported() -> None:
    for name in car_runtime.MODULE_FUNCTIONS:
        assert callable(getattr(car_runtime, name)), name
        assert name in car_runtime.__all__
    assert {"agents_start", "schedule_task", "verify_workflow", "create_task"} <= set(car_runtime.MODULE_FUNCTIONS)


def test_tasks_and_schedules(daemon: Daemon, tmp_path: Path) -> None:
    task = json.loads(car_runtime.create_task("nightly", "summarise", "interval", "3600", "be brief"))
    assert (task["trigger"], task["schedule"], task["system_prompt"]) == ("interval", "3600", "be brief")
    rendered = json.loads(car_runtime.render_os_schedule(json.dumps(task), "/usr/bin/car", '["run"]'))
    assert rendered["crontab_line"].startswith("0 * * * * /usr/bin/car run")
    with pytest.raises(car_runtime.DaemonRpcError, match="schedule"):
        car_runtime.create_task("bad", "p", "cron", "nonsense")

    out = tmp_path / "ticks"
    script = tmp_path / "tick.sh"
    script.write_text(f"#!/bin/sh\necho tick >> {out}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    spec = {"name": "ticker", "program": str(script), "cadence": {"interval_secs": 1}, "durable": False}
    scheduled = json.loads(car_runtime.schedule_task(json.dumps(spec)))
    assert scheduled["backend"] == "daemon"
    ids = [t["id"] for t in json.loads(car_runtime.list_scheduled_tasks())]
    assert scheduled["id"] in ids
    deadline = time.monotonic() + 30
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert out.exists(), "the task ran"
    gone = json.loads(car_runtime.unschedule_task(scheduled["id"]))
    assert gone["deleted"] is True


def test_run_task_with_an_agent_fn(daemon: Daemon) -> None:
    task = car_runtime.create_task("manual", "say hi")
    seen = []

    def fn(spec_json: str, prompt: str) -> str:
        seen.append(prompt)
        return json.dumps({"name": json.loads(spec_json)["name"], "answer": "hi!"})

    execution = json.loads(car_runtime.run_task(task, fn))
    assert (execution["status"], execution["answer"]) == ("completed", "hi!")
    assert seen == ["say hi"]


def test_workflows_and_agents(daemon: Daemon) -> None:
    wf = {
        "id": "w", "name": "gate", "start": "gate",
        "stages": [{"id": "gate", "name": "Gate", "step": {"type": "approval", "prompt": "go?", "fields": [{"name": "go", "required": True}], "output_key": "a"}}],
        "edges": [],
    }
    assert json.loads(car_runtime.verify_workflow(json.dumps(wf)))["valid"] is True
    paused = json.loads(car_runtime.run_workflow(json.dumps(wf)))
    assert paused["status"] == "paused"
    # CAR's embedded signature: the paused checkpoint and the input.
    done = json.loads(car_runtime.resume_workflow(json.dumps(paused["paused"]), '{"go": "y"}'))
    assert done["status"] == "completed" and done["final_state"]["a.go"] == "y"
    assert json.loads(car_runtime.agents_list()) == []
    assert json.loads(car_runtime.agents_health()) == []
    with pytest.raises(car_runtime.DaemonRpcError, match="no registered agent"):
        car_runtime.agents_start("ghost")

"""Agent run tracing (`runs_start` / `runs_complete`, and `runs.get_trace` / `runs.list`
through `daemon_call`) and the skill graph (`ingest_skill`, `find_skill`,
`report_outcome`, `list_skills`) through CAR's client.

`runs.get_trace` / `runs.list` are owner-gated (reference R16): a connection must be bound
to the run's agent or hold the host-management role, and CAR's client offers neither to an
ordinary program (its host-management bridge refuses `runs.*`; an agent binding needs a
daemon-minted agent token). So through CAR's client an unbound session sees the not-found
marker for an unknown run and a refusal for anything else."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Dict

import pytest

import car_runtime


def agent_outcome(status: str = "success", summary: str = "done") -> Dict[str, Any]:
    """CAR's AgentOutcome (car_runtime/agent_loop.pyi) as a run's terminal record."""
    return {
        "status": status,
        "summary": summary,
        "evidence": [{"kind": "note", "text": "checked the logs"}],
        "metrics": {"turns": 2, "tool_calls": 1, "actions_succeeded": 1, "actions_failed": 0},
        "tools_called": ["echo"],
        "timestamp": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
    }


def start(rt: car_runtime.CarRuntime, **extra: Any) -> Dict[str, Any]:
    params: Dict[str, Any] = {
        "intent": "summarize the deploy logs",
        "agent_name": "interop-agent",
        "outcome_description": "a three-line summary",
    }
    params.update(extra)
    reply: Dict[str, Any] = json.loads(rt.runs_start(json.dumps(params)))
    return reply


# --- runs --------------------------------------------------------------------------------


def test_runs_start_mints_a_run_and_resolves_the_agent(rt: car_runtime.CarRuntime) -> None:
    reply = start(rt)
    assert isinstance(reply["run_id"], str) and reply["run_id"]
    # Unbound, no CAR_AGENT_ID: the id is synthesized from agent_name ("name:<slug>").
    assert reply["agent_id"].startswith("name:")
    assert "interop-agent" in reply["agent_id"]
    assert start(rt)["run_id"] != reply["run_id"]


def test_runs_start_without_any_identity_is_rejected(rt: car_runtime.CarRuntime) -> None:
    with pytest.raises(RuntimeError):
        rt.runs_start(json.dumps({"intent": "no identity at all"}))


def test_runs_start_requires_an_intent(rt: car_runtime.CarRuntime) -> None:
    with pytest.raises(car_runtime.DaemonRpcError) as info:
        rt.daemon_call("runs.start", json.dumps({"agent_name": "interop-agent"}))
    assert info.value.code == -32602


def test_runs_start_with_an_idempotency_key_is_idempotent(rt: car_runtime.CarRuntime) -> None:
    first = start(rt, idempotency_key="occurrence-2026-01-01")
    assert first["run_id"] == "occurrence-2026-01-01"
    assert start(rt, idempotency_key="occurrence-2026-01-01")["run_id"] == "occurrence-2026-01-01"


def test_runs_complete_records_the_agent_outcome(rt: car_runtime.CarRuntime) -> None:
    run_id = start(rt)["run_id"]
    reply = json.loads(rt.runs_complete(json.dumps({"run_id": run_id, "outcome": agent_outcome()})))
    assert reply["run_id"] == run_id
    assert reply["ok"] is True


@pytest.mark.parametrize("status", ["success", "partial_success", "done", "give_up", "timeout", "failure"])
def test_runs_complete_accepts_every_outcome_status(rt: car_runtime.CarRuntime, status: str) -> None:
    run_id = start(rt)["run_id"]
    reply = json.loads(rt.runs_complete(json.dumps({"run_id": run_id, "outcome": agent_outcome(status)})))
    assert reply["run_id"] == run_id
    assert reply["ok"] is True


def test_runs_complete_twice_is_an_error(rt: car_runtime.CarRuntime) -> None:
    run_id = start(rt)["run_id"]
    rt.runs_complete(json.dumps({"run_id": run_id, "outcome": agent_outcome()}))
    with pytest.raises(RuntimeError):
        rt.runs_complete(json.dumps({"run_id": run_id, "outcome": agent_outcome()}))


def test_runs_complete_of_an_unknown_run_is_an_error(rt: car_runtime.CarRuntime) -> None:
    with pytest.raises(RuntimeError):
        rt.runs_complete(json.dumps({"run_id": "no-such-run", "outcome": agent_outcome()}))


def test_runs_get_trace_of_an_unknown_run_is_the_not_found_marker(rt: car_runtime.CarRuntime) -> None:
    reply = json.loads(rt.daemon_call("runs.get_trace", json.dumps({"run_id": "no-such-run"})))
    assert reply["run_id"] == "no-such-run"
    assert reply["not_found"] is True


def test_runs_get_trace_refuses_an_unentitled_session(rt: car_runtime.CarRuntime) -> None:
    run_id = start(rt)["run_id"]
    rt.runs_complete(json.dumps({"run_id": run_id, "outcome": agent_outcome()}))
    with pytest.raises(car_runtime.DaemonRpcError):
        rt.daemon_call("runs.get_trace", json.dumps({"run_id": run_id}))


def test_runs_list_refuses_an_unentitled_session(rt: car_runtime.CarRuntime) -> None:
    agent_id = start(rt)["agent_id"]
    with pytest.raises(car_runtime.DaemonRpcError):
        rt.daemon_call("runs.list", json.dumps({"agent_id": agent_id}))


# --- skills ------------------------------------------------------------------------------


def ingest(rt: car_runtime.CarRuntime, name: str = "scrape-prices", **overrides: Any) -> int:
    args: Dict[str, Any] = {
        "code": "return document.querySelectorAll('.price')",
        "platform": "web",
        "persona": "shopper",
        "url_pattern": "*.example.com/*",
        "task_keywords": ["prices", "scrape"],
        "description": "collects every price on a product page",
    }
    args.update(overrides)
    return rt.ingest_skill(
        name,
        args["code"],
        args["platform"],
        args["persona"],
        args["url_pattern"],
        args["task_keywords"],
        args["description"],
    )


def test_ingest_skill_returns_a_node_index(rt: car_runtime.CarRuntime) -> None:
    first = ingest(rt)
    assert isinstance(first, int) and first >= 0
    second = ingest(rt, "other-skill", task_keywords=["weather"], description="reads the forecast")
    assert second != first


def test_find_skill_matches_on_trigger_context(rt: car_runtime.CarRuntime) -> None:
    ingest(rt)
    found = json.loads(rt.find_skill("shopper", "https://shop.example.com/item/7", "scrape prices", 3))
    assert isinstance(found, list) and found
    top = found[0]
    assert set(top) >= {"name", "code", "platform", "description", "stats", "match_score"}
    assert top["name"] == "scrape-prices"
    assert top["code"] == "return document.querySelectorAll('.price')"
    assert top["platform"] == "web"
    assert top["description"] == "collects every price on a product page"
    assert isinstance(top["match_score"], (int, float))


def test_find_skill_honours_max_results(rt: car_runtime.CarRuntime) -> None:
    ingest(rt, "prices-a")
    ingest(rt, "prices-b")
    ingest(rt, "prices-c")
    found = json.loads(rt.find_skill("shopper", "https://shop.example.com/x", "scrape prices", 2))
    assert 1 <= len(found) <= 2


def test_find_skill_with_no_skills_is_null_or_empty(rt: car_runtime.CarRuntime) -> None:
    # The pyi: "Returns JSON or the string "null"".
    found = rt.find_skill("shopper", "https://shop.example.com/x", "scrape prices")
    assert found == "null" or json.loads(found) == []


def test_report_outcome_updates_stats(rt: car_runtime.CarRuntime) -> None:
    ingest(rt)
    stats = json.loads(rt.report_outcome("scrape-prices", "success"))
    assert stats["success_count"] == 1
    assert stats["fail_count"] == 0
    stats = json.loads(rt.report_outcome("scrape-prices", "fail"))
    assert stats["success_count"] == 1
    assert stats["fail_count"] == 1


def test_list_skills(rt: car_runtime.CarRuntime) -> None:
    assert json.loads(rt.list_skills()) == []
    ingest(rt)
    skills = json.loads(rt.list_skills())
    assert isinstance(skills, list)
    assert "scrape-prices" in [s["name"] for s in skills]
    assert json.loads(rt.list_skills("no-such-domain-anywhere")) == []

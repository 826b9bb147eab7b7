"""Routing and the outcome ledger through CAR's client: `route_model` / `models_route`,
`infer_tracked` without a model (the daemon routes), `outcomes_resolve_pending`,
`outcome_scoreboard` / `outcomes_scoreboard` and `model_stats` / `models_stats`. The model is
the scripted OpenAI-compatible server, registered by the user's host."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

import car_runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "support"))
from scripted_openai import ScriptedModel  # noqa: E402

from conftest import Daemon
from test_agent_loop import register_scripted


def call(method: Any, params: Dict[str, Any]) -> Any:
    return json.loads(method(json.dumps(params)))


@pytest.fixture
def scripted() -> Iterator[ScriptedModel]:
    model = ScriptedModel(answer_as_text=True)
    try:
        yield model
    finally:
        model.close()


def test_a_routed_call_leaves_a_receipt_that_resolves_onto_the_scoreboard(
    daemon: Daemon, rt: car_runtime.CarRuntime, scripted: ScriptedModel
) -> None:
    register_scripted(daemon, scripted)
    route = json.loads(rt.route_model("summarize this paragraph"))
    assert (route["model_id"], route["task"], route["strategy"]) == ("scripted", "summarize", "outcome_first"), route
    assert route["candidates"][0]["reliability"] == 0.5, route
    with pytest.raises(car_runtime.DaemonRpcError, match="intent.require"):
        call(rt.models_route, {"prompt": "x", "intent": {"require": ["vision"]}})

    reply = json.loads(rt.infer_tracked("add 2 and 3"))
    assert reply["model_used"] == "scripted", reply
    assert call(rt.outcomes_resolve_pending, {"actionResults": [[reply["trace_id"], True, 0.9, "ok"]]}) == {"recorded": 1}

    board = json.loads(rt.outcome_scoreboard())
    (row,) = board["rows"]
    assert (row["model_id"], row["success_count"], row["inconclusive_count"]) == ("scripted", 1, 0), board
    assert row["usd_per_success"] is None, "an unpriced model has no dollar figure"
    assert call(rt.outcomes_scoreboard, {})["total_successes"] == 1
    (profile,) = json.loads(rt.model_stats())["profiles"]
    assert (profile["model_id"], profile["total_calls"], profile["success_rate"]) == ("scripted", 1, 1.0), profile
    assert call(rt.models_stats, {})["profiles"] == [profile]
    route = json.loads(rt.route_model("summarize this paragraph"))
    assert route["candidates"][0]["reliability"] == pytest.approx(2 / 3), route

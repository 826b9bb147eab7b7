"""Proactive memory through CAR's own JSON-string wrappers (`memory_update_status`,
`memory_save_knowledge`, `memory_save_procedural`, `memory_delete`, `memory_intervene`,
`memory_evaluate`), which proxy to the daemon methods of the same names."""

from __future__ import annotations

import json
from typing import Any, Dict

import car_runtime


def call(fn: Any, params: Dict[str, Any]) -> Dict[str, Any]:
    result = json.loads(fn(json.dumps(params)))
    assert isinstance(result, dict), result
    return result


def test_saved_knowledge_and_procedures_are_graph_facts(rt: car_runtime.CarRuntime) -> None:
    saved = call(rt.memory_save_knowledge, {"id": "req-1", "subject": "release", "body": "the release needs a signed tag"})
    assert saved == {"id": "req-1", "kind": "knowledge", "fact_count": 1}
    again = call(rt.memory_save_knowledge, {"id": "req-1", "subject": "release", "body": "and a changelog entry"})
    assert again["id"] == "req-1-2" and again["fact_count"] == 2
    proc = call(
        rt.memory_save_procedural,
        {"subject": "linker", "body": "when cc is missing install build-essential", "tags": ["build"]},
    )
    assert proc["kind"] == "procedural" and proc["id"]
    rows = json.loads(rt.query_facts("signed tag release", 5))
    assert any(r["kind"] == "knowledge" and r["fact_id"] == "req-1" for r in rows), rows


def test_status_is_private_and_deletable(rt: car_runtime.CarRuntime) -> None:
    status = call(rt.memory_update_status, {"body": "step 3 of 5: migrating the schema"})
    assert status == {"id": "proactive-status:global", "body": "step 3 of 5: migrating the schema"}
    assert json.loads(rt.query_facts("migrating the schema", 5)) == []
    report = call(rt.memory_delete, {"id": "proactive-status:global"})
    assert report["deleted"] is True and report["kind"] == "status"


def test_intervene_and_evaluate(rt: car_runtime.CarRuntime) -> None:
    call(rt.memory_save_procedural, {"id": "fix-cc", "subject": "linker error", "body": "when the linker cc is not found install build-essential"})
    request = {"query": "cargo build fails: linker cc not found", "trigger": {"tool_error": True}}
    decision = call(rt.memory_intervene, request)
    assert decision["decision"] == "inject", decision
    assert decision["selected"]["id"] == "fix-cc"
    assert decision["bank"]["procedural"] == 1
    silent = call(rt.memory_intervene, {"query": "what colour is the logo"})
    assert silent["decision"] == "silent" and silent["reason"]
    report = call(
        rt.memory_evaluate,
        {"cases": [{"id": "a", "request": request, "relevant_fact_ids": ["fix-cc"]}, {"id": "b", "request": {"query": "logo colour"}}]},
    )
    assert report["cases"] == 2
    assert report["selective"]["true_positives"] == 1
    assert report["no_memory"]["interventions"] == 0
    bad = rt.memory_intervene
    try:
        bad(json.dumps({"query": "x", "max_candidates": 99}))
    except Exception as e:  # CAR's client raises on a JSON-RPC error
        assert "max_candidates" in str(e)
    else:
        raise AssertionError("max_candidates 99 was accepted")

"""`memory.*` through CAR's typed members: `add_fact` (every argument), `query_facts`,
`fact_count`, `build_context`, `consolidate`, `persist_memory` / `load_memory` (sandboxed
under `$CAR_HOME/memory/`), the `memory_delete` wrapper, and memory scope (the shared graph
of unbound sessions versus a `CAR_MEMORY_NAMESPACE` graph)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import car_runtime
from conftest import Daemon, client_env

QUERY_ROW_KEYS = {"fact_id", "subject", "body", "kind", "confidence", "tags", "source"}


def test_add_fact_returns_the_new_fact_count(rt: car_runtime.CarRuntime) -> None:
    assert rt.add_fact("deploys", "never deploy on fridays", "constraint") == 1
    assert rt.add_fact("builds", "builds run on the ci runner", "pattern") == 2
    assert rt.fact_count() == 2


def test_add_fact_preserves_id_tags_and_source(rt: car_runtime.CarRuntime) -> None:
    count = rt.add_fact(
        "deploys",
        "never deploy on fridays",
        "constraint",
        0.9,
        "fact-deploy-1",
        ["ops", "calendar", "a-last"],
        "runbook.md",
    )
    assert count == 1
    rows = json.loads(rt.query_facts("deploy fridays", 5))
    assert isinstance(rows, list) and rows
    row = next(r for r in rows if r.get("fact_id") == "fact-deploy-1")
    assert row["subject"] == "deploys"
    assert row["body"] == "never deploy on fridays"
    assert row["kind"] == "constraint"
    assert row["tags"] == ["ops", "calendar", "a-last"]  # ordered, as given
    assert row["source"] == "runbook.md"
    assert isinstance(row["confidence"], float)


def test_query_facts_shape_ranking_and_k(rt: car_runtime.CarRuntime) -> None:
    rt.add_fact("garden", "tomatoes need full sun and daily watering", "pattern")
    rt.add_fact("kitchen", "the oven runs twenty degrees hot", "pattern")
    rt.add_fact("car", "the tyres are inflated to two bar", "pattern")
    rows = json.loads(rt.query_facts("tomatoes watering sun", 3))
    assert 1 <= len(rows) <= 3
    for r in rows:
        assert set(r) >= QUERY_ROW_KEYS, r
        assert isinstance(r["subject"], str) and isinstance(r["body"], str)
        assert isinstance(r["tags"], list) and isinstance(r["source"], str)
        assert r["fact_id"] is None or isinstance(r["fact_id"], str)
    assert rows[0]["subject"] == "garden"
    assert len(json.loads(rt.query_facts("tomatoes watering sun", 1))) == 1


def test_query_facts_default_k_is_five(rt: car_runtime.CarRuntime) -> None:
    for i in range(8):
        rt.add_fact(f"apple-{i}", f"apple variety number {i} is crisp", "pattern")
    rows = json.loads(rt.query_facts("apple variety crisp"))
    assert 1 <= len(rows) <= 5


def test_query_facts_on_empty_memory_is_an_empty_array(rt: car_runtime.CarRuntime) -> None:
    assert json.loads(rt.query_facts("anything")) == []


def test_build_context_contains_constraints_and_facts(rt: car_runtime.CarRuntime) -> None:
    rt.add_fact("deploys", "never deploy to production on fridays", "constraint")
    rt.add_fact("deploys", "deploy production through the staging pipeline first", "pattern")
    context = rt.build_context("how do I deploy to production")
    assert isinstance(context, str)
    assert "never deploy to production on fridays" in context
    assert "deploy production through the staging pipeline first" in context
    sized = rt.build_context("how do I deploy to production", 200_000)
    assert "never deploy to production on fridays" in sized


def test_build_context_on_empty_memory_is_a_string(rt: car_runtime.CarRuntime) -> None:
    assert isinstance(rt.build_context("anything"), str)


def test_consolidate_returns_a_report(rt: car_runtime.CarRuntime) -> None:
    rt.add_fact("a", "alpha fact about rivers", "pattern")
    rt.add_fact("b", "beta fact about mountains", "pattern")
    report = json.loads(rt.consolidate())
    assert isinstance(report, dict)
    # The v0.48 reference: the ConsolidationReport carries these two lists.
    assert isinstance(report["candidates_promoted"], list)
    assert isinstance(report["candidates_rejected"], list)
    assert rt.fact_count() == 2  # distinct facts survive consolidation


def test_persist_then_load_replaces_the_graph(rt: car_runtime.CarRuntime, daemon: Daemon) -> None:
    rt.add_fact("one", "first persisted fact", "pattern")
    rt.add_fact("two", "second persisted fact", "constraint")
    assert rt.persist_memory("interop/snapshot.json") == 2
    written = daemon.home / "memory" / "interop" / "snapshot.json"
    assert written.is_file()
    json.loads(written.read_text())  # memory.persist files stay JSON

    rt.add_fact("three", "added after the snapshot", "pattern")
    assert rt.fact_count() == 3
    assert rt.load_memory("interop/snapshot.json") == 2
    assert rt.fact_count() == 2  # a full replace, not a merge
    bodies = {r["body"] for r in json.loads(rt.query_facts("persisted fact", 5))}
    assert "first persisted fact" in bodies
    assert "added after the snapshot" not in bodies


def test_persist_accepts_an_absolute_path_under_the_base(rt: car_runtime.CarRuntime, daemon: Daemon) -> None:
    rt.add_fact("one", "fact", "pattern")
    target = daemon.home / "memory" / "absolute.json"
    assert rt.persist_memory(str(target)) == 1
    assert target.is_file()


def test_persist_rejects_paths_outside_the_sandbox(rt: car_runtime.CarRuntime, tmp_path: Path) -> None:
    rt.add_fact("one", "fact", "pattern")
    outside = tmp_path / "outside.json"
    for path in ("../escape.json", "interop/../../escape.json", str(outside)):
        with pytest.raises(RuntimeError):
            rt.persist_memory(path)
    assert not outside.exists()


def test_load_of_a_missing_file_fails_and_keeps_the_graph(rt: car_runtime.CarRuntime) -> None:
    rt.add_fact("one", "kept fact", "pattern")
    with pytest.raises(RuntimeError):
        rt.load_memory("interop/never-written.json")
    assert rt.fact_count() == 1


def test_memory_delete_removes_a_fact_by_id(rt: car_runtime.CarRuntime) -> None:
    rt.add_fact("temp", "a stale fact to remove", "pattern", None, "stale-1")
    rt.add_fact("keep", "a fact that stays", "pattern", None, "keep-1")
    report = json.loads(rt.memory_delete(json.dumps({"id": "stale-1"})))
    assert report["id"] == "stale-1"
    assert report["deleted"] is True
    assert "kind" in report
    assert report["fact_count"] == 1
    assert rt.fact_count() == 1


def test_unbound_sessions_share_one_graph(daemon: Daemon) -> None:
    # CAR's load_memory docstring: by default the daemon's SHARED graph, common to every
    # unbound session.
    first, second = car_runtime.CarRuntime(), car_runtime.CarRuntime()
    try:
        first.add_fact("shared", "visible to every unbound session", "pattern")
        assert second.fact_count() == 1
    finally:
        first.close()
        second.close()


def test_memory_namespace_binds_a_private_graph(daemon: Daemon) -> None:
    # CAR_MEMORY_NAMESPACE is put on session.auth by CAR's client; that connection's
    # memory.* calls act on the namespace's graph alone, persisted under
    # memory/memory-namespaces/<encoded>.json (a-z, 0-9, '-', '_', '.' pass through).
    shared = car_runtime.CarRuntime()
    try:
        assert shared.fact_count() == 0  # connected before the namespace is set
        with client_env(daemon, CAR_MEMORY_NAMESPACE="interop-proj"):
            private = car_runtime.CarRuntime()
            try:
                assert private.add_fact("proj", "belongs to the namespace", "pattern") == 1
                assert shared.fact_count() == 0
                shared.add_fact("everyone", "belongs to the shared graph", "pattern")
                assert private.fact_count() == 1
            finally:
                private.close()
    finally:
        shared.close()
    assert (daemon.home / "memory" / "memory-namespaces" / "interop-proj.json").is_file()

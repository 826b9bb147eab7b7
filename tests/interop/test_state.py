"""`state.*` through CAR's typed members: `state_set` / `state_get` / `state_exists` /
`state_keys` / `state_snapshot`, unscoped and tenant-scoped (reference `state`: scoped and
unscoped keyspaces never see each other; `state.keys` strips the tenant prefix)."""

from __future__ import annotations

import json

import car_runtime
from conftest import Daemon


def test_set_then_get_round_trips_json(rt: car_runtime.CarRuntime) -> None:
    value = {"text": "hi", "n": [1, 2.5, None], "nested": {"ok": True}}
    assert rt.state_set("greeting", json.dumps(value)) is None
    assert json.loads(rt.state_get("greeting")) == value


def test_values_of_every_json_kind(rt: car_runtime.CarRuntime) -> None:
    values = {"int": 42, "neg": -1.5, "str": "two words", "bool": False, "list": [], "obj": {}}
    for key, value in values.items():
        rt.state_set(key, json.dumps(value))
    for key, value in values.items():
        assert json.loads(rt.state_get(key)) == value, key


def test_overwrite_replaces_value(rt: car_runtime.CarRuntime) -> None:
    rt.state_set("k", "1")
    rt.state_set("k", '"second"')
    assert json.loads(rt.state_get("k")) == "second"


def test_get_missing_key_is_the_string_null(rt: car_runtime.CarRuntime) -> None:
    assert rt.state_get("absent") == "null"


def test_exists(rt: car_runtime.CarRuntime) -> None:
    assert rt.state_exists("k") is False
    rt.state_set("k", "0")
    assert rt.state_exists("k") is True


def test_keys_and_snapshot(rt: car_runtime.CarRuntime) -> None:
    assert rt.state_keys() == []
    assert json.loads(rt.state_snapshot()) == {}
    rt.state_set("b", '"two"')
    rt.state_set("a", "1")
    keys = rt.state_keys()
    assert isinstance(keys, list)
    assert sorted(keys) == ["a", "b"]
    assert json.loads(rt.state_snapshot()) == {"a": 1, "b": "two"}


def test_tenant_scoping(rt: car_runtime.CarRuntime) -> None:
    rt.state_set("shared", '"unscoped"')
    rt.state_set("shared", '"tenant one"', "t1")
    rt.state_set("only", "1", "t1")

    assert json.loads(rt.state_get("shared", "t1")) == "tenant one"
    assert json.loads(rt.state_get("shared")) == "unscoped"
    assert rt.state_get("only") == "null"
    assert rt.state_get("only", "t2") == "null"

    assert rt.state_exists("only", "t1") is True
    assert rt.state_exists("only") is False

    assert sorted(rt.state_keys("t1")) == ["only", "shared"]  # tenant prefix stripped
    assert rt.state_keys() == ["shared"]  # unscoped callers never see tenant keys
    assert rt.state_keys("t2") == []

    assert json.loads(rt.state_snapshot("t1")) == {"only": 1, "shared": "tenant one"}
    assert json.loads(rt.state_snapshot()) == {"shared": "unscoped"}
    assert json.loads(rt.state_snapshot("t2")) == {}


def test_state_is_per_connection(daemon: Daemon) -> None:
    # Reference: "Each WebSocket connection is its own session — runtime state ... per
    # connection."
    first, second = car_runtime.CarRuntime(), car_runtime.CarRuntime()
    try:
        first.state_set("k", "1")
        assert second.state_get("k") == "null"
        assert second.state_keys() == []
    finally:
        first.close()
        second.close()

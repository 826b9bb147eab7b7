"""Models and inference through CAR's client, on the two small test models
(`scripts/fetch-models`: `CAR_TEST_GGUF` is SmolLM2-135M-Instruct as GGUF, `CAR_TEST_EMBED_DIR`
is all-MiniLM-L6-v2): `register_model` (CAR's ModelSchema, wrapped as `{schema}` by the
client), `list_models`, `remove_model` (host-management), `infer`, `infer_tracked`,
`infer_tracked_with_request`, `embed`, `classify`, `tokenize` / `detokenize`, and
`infer_stream` through `daemon_call` plus an `inference.stream.event` notification handler.

CAR documents that a registration becomes visible to inference on the daemon's next boot,
so the shared fixture registers both models and then restarts the daemon on the same
`CAR_HOME` before any test infers."""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

import car_runtime
from conftest import Daemon, client_env, start_daemon

GEN_ID = "interop-smollm2"
EMBED_ID = "interop-minilm"
LEGACY_LIST_KEYS = {
    "name",
    "hf_repo",
    "hf_filename",
    "tokenizer_repo",
    "role",
    "param_count",
    "quantized_size_mb",
    "downloaded",
}
TRACKED_KEYS = {
    "text",
    "tool_calls",
    "usage",
    "model_used",
    "trace_id",
    "latency_ms",
    "time_to_first_token_ms",
    "stop_reason",
}


def model_path(var: str) -> str:
    value = os.environ.get(var)
    if not value or not Path(value).exists():
        pytest.fail(f"{var} is not set to an existing path: run `eval \"$(scripts/fetch-models)\"` (test.sh does)")
    return value


def gen_schema() -> Dict[str, Any]:
    return {
        "id": GEN_ID,
        "name": "SmolLM2 135M Instruct (interop)",
        "provider": "local",
        "family": "smollm2",
        "capabilities": ["generate"],
        "context_length": 2048,
        "source": {"type": "local", "path": model_path("CAR_TEST_GGUF")},
    }


def embed_schema() -> Dict[str, Any]:
    return {
        "id": EMBED_ID,
        "name": "all-MiniLM-L6-v2 (interop)",
        "provider": "local",
        "family": "bert",
        "capabilities": ["embed"],
        "context_length": 512,
        "source": {"type": "local", "path": model_path("CAR_TEST_EMBED_DIR")},
    }


@pytest.fixture(scope="module")
def model_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One daemon for the module, with both test models registered through CAR's client
    and the daemon restarted so the registrations are loaded at boot."""
    d = start_daemon(tmp_path_factory.mktemp("models") / "car-home")
    try:
        with client_env(d):
            runtime = car_runtime.CarRuntime()
            try:
                runtime.register_model(json.dumps(gen_schema()))
                runtime.register_model(json.dumps(embed_schema()))
            finally:
                runtime.close()
        d.restart()
        yield d
    finally:
        d.stop()


@pytest.fixture
def mrt(model_daemon: Daemon) -> Iterator[car_runtime.CarRuntime]:
    with client_env(model_daemon):
        runtime = car_runtime.CarRuntime()
        try:
            yield runtime
        finally:
            runtime.close()


# --- models ------------------------------------------------------------------------------


def test_register_model_reply(rt: car_runtime.CarRuntime, daemon: Daemon) -> None:
    reply = json.loads(rt.register_model(json.dumps(gen_schema())))
    assert reply["id"] == GEN_ID
    assert reply["registered"] is True
    registry = Path(reply["path"])
    assert registry.is_absolute() and registry.is_file()
    assert daemon.home in registry.parents  # under the daemon's state root
    assert isinstance(reply["note"], str)


def test_register_model_accepts_the_bare_schema(rt: car_runtime.CarRuntime) -> None:
    # Reference: params are `ModelSchema` (bare) OR `{schema: ModelSchema}`; CAR's typed
    # member sends the wrapped form, raw callers may send the bare one.
    reply = json.loads(rt.daemon_call("models.register", json.dumps(embed_schema())))
    assert reply["id"] == EMBED_ID
    assert reply["registered"] is True


def test_register_model_replaces_an_entry_with_the_same_id(rt: car_runtime.CarRuntime) -> None:
    rt.register_model(json.dumps(gen_schema()))
    renamed = dict(gen_schema(), name="renamed")
    assert json.loads(rt.register_model(json.dumps(renamed)))["registered"] is True


def test_list_models_rows(mrt: car_runtime.CarRuntime) -> None:
    rows = json.loads(mrt.list_models())
    assert isinstance(rows, list)
    for row in rows:
        assert set(row) >= LEGACY_LIST_KEYS, row
        assert isinstance(row["name"], str)
        assert isinstance(row["downloaded"], bool)


def test_remove_model(daemon: Daemon, rt: car_runtime.CarRuntime) -> None:
    # remove_model goes over CAR's host-management connection (models.remove,
    # `{model_id}`), authenticated with $CAR_HOME/ai.parslee.car/host-token.
    rt.register_model(json.dumps(gen_schema()))
    reply = json.loads(rt.remove_model(GEN_ID))
    assert isinstance(reply, dict)
    with pytest.raises(RuntimeError):
        rt.remove_model("never-registered")


# --- generation --------------------------------------------------------------------------


def test_infer_returns_plain_text(mrt: car_runtime.CarRuntime) -> None:
    text = mrt.infer("Say hello in one word.", GEN_ID, 8)
    assert isinstance(text, str) and text.strip()


def test_infer_tracked_shape(mrt: car_runtime.CarRuntime) -> None:
    result = json.loads(mrt.infer_tracked("Name a colour.", GEN_ID, 6))
    assert set(result) >= TRACKED_KEYS
    assert isinstance(result["text"], str) and result["text"].strip()
    assert result["tool_calls"] == []
    usage = result["usage"]
    assert isinstance(usage["input_tokens"], int) and usage["input_tokens"] > 0
    assert isinstance(usage["output_tokens"], int) and 0 < usage["output_tokens"] <= 6
    assert result["model_used"] == GEN_ID  # an explicit model is a hard pin
    assert isinstance(result["trace_id"], str) and result["trace_id"]
    assert isinstance(result["latency_ms"], (int, float)) and result["latency_ms"] >= 0
    ttft = result["time_to_first_token_ms"]
    assert ttft is None or isinstance(ttft, (int, float))
    assert result["stop_reason"] is None or isinstance(result["stop_reason"], str)


def test_event_cost_by_agent_folds_metered_generations(mrt: car_runtime.CarRuntime) -> None:
    before = {row["agent"]: row for row in json.loads(mrt.event_cost_by_agent())}
    result = json.loads(mrt.infer_tracked("Name a fruit.", GEN_ID, 4))
    rows = json.loads(mrt.event_cost_by_agent())
    assert rows == json.loads(mrt.events_cost_by_agent("null"))
    user = next(row for row in rows if row["agent"] == "user")
    assert set(user) == {"agent", "calls", "tokens_in", "tokens_out", "cost_usd"}
    prior = before.get("user", {"calls": 0, "tokens_out": 0})
    assert user["calls"] == prior["calls"] + 1
    assert user["tokens_out"] == prior["tokens_out"] + result["usage"]["output_tokens"]
    assert user["cost_usd"] == 0.0  # a local model


def test_infer_tracked_truncation_is_reported(mrt: car_runtime.CarRuntime) -> None:
    result = json.loads(mrt.infer_tracked("Write a long story about a dragon.", GEN_ID, 3))
    assert result["usage"]["output_tokens"] <= 3
    # Local backends may report no reason (null); one that does reports the token cap.
    assert result["stop_reason"] in (None, "length", "max_tokens", "MAX_TOKENS")


def test_infer_tracked_with_context_and_messages(mrt: car_runtime.CarRuntime) -> None:
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    result = json.loads(
        mrt.infer_tracked("", GEN_ID, 8, "You are a terse geography assistant.", None, json.dumps(messages))
    )
    assert isinstance(result["text"], str) and result["text"].strip()
    assert result["model_used"] == GEN_ID


def test_infer_tracked_with_request(mrt: car_runtime.CarRuntime) -> None:
    request = {"prompt": "Count to three.", "model": GEN_ID, "params": {"max_tokens": 6, "temperature": 0.0}}
    result = json.loads(mrt.infer_tracked_with_request(json.dumps(request)))
    assert set(result) >= TRACKED_KEYS
    assert result["model_used"] == GEN_ID
    assert 0 < result["usage"]["output_tokens"] <= 6


def test_infer_with_context_injects_memory(mrt: car_runtime.CarRuntime) -> None:
    # infer_with_context sends `context_query`: the daemon builds a memory context for it
    # and injects it, so the prompt the model sees is longer than the bare prompt.
    mrt.add_fact("deploys", "never deploy to production on fridays, ask the release manager", "constraint")
    prompt = "Can I deploy to production on friday?"
    bare = json.loads(mrt.infer_tracked(prompt, GEN_ID, 2))
    grounded = json.loads(mrt.infer_with_context_tracked(prompt, GEN_ID, 2))
    assert grounded["usage"]["input_tokens"] > bare["usage"]["input_tokens"]
    assert isinstance(mrt.infer_with_context(prompt, GEN_ID, 2), str)


def test_infer_with_an_unknown_model_fails(mrt: car_runtime.CarRuntime) -> None:
    with pytest.raises(RuntimeError):
        mrt.infer("hi", "no-such-model", 4)


def test_infer_stream_events_add_up_to_the_result(mrt: car_runtime.CarRuntime) -> None:
    events: List[Dict[str, Any]] = []
    changed = threading.Condition()

    def on_event(params_json: str) -> None:
        with changed:
            events.append(json.loads(params_json))
            changed.notify_all()

    mrt.register_daemon_notification_handler("inference.stream.event", on_event)
    request = {"prompt": "Say hello.", "model": GEN_ID, "params": {"max_tokens": 8}}
    result = json.loads(mrt.daemon_call("infer_stream", json.dumps(request)))
    assert set(result) >= {"text", "tool_calls", "usage", "stop_reason", "trace_id", "model_used"}
    assert result["model_used"] == GEN_ID

    def streamed_text() -> str:
        return "".join(e["event"]["data"] for e in events if e["event"]["type"] == "text")

    # Notifications reach the handler on its own thread; wait (bounded) until the text
    # they carry has caught up with the final response.
    with changed:
        changed.wait_for(lambda: streamed_text() == result["text"], timeout=30)
        assert streamed_text() == result["text"]
        assert len({json.dumps(e["request_id"]) for e in events}) == 1
        for e in events:
            assert e["event"]["type"] in {
                "text",
                "tool_start",
                "tool_delta",
                "usage",
                "stop_reason",
                "provider_output_item",
            }, e


# --- embeddings, classification, tokens --------------------------------------------------


def cosine(a: List[float], b: List[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_embed(mrt: car_runtime.CarRuntime) -> None:
    texts = ["a small cat sleeps", "a little kitten naps", "quarterly revenue grew"]
    result = json.loads(mrt.embed(texts, EMBED_ID))
    vectors = result["embeddings"]
    assert len(vectors) == 3
    assert {len(v) for v in vectors} == {384}  # all-MiniLM-L6-v2
    assert all(isinstance(x, float) for v in vectors for x in v)
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2])


def test_embed_is_deterministic(mrt: car_runtime.CarRuntime) -> None:
    first = json.loads(mrt.embed(["same text"], EMBED_ID))["embeddings"][0]
    second = json.loads(mrt.embed(["same text"], EMBED_ID))["embeddings"][0]
    assert cosine(first, second) > 0.9999


def test_classify(mrt: car_runtime.CarRuntime) -> None:
    result = json.loads(mrt.classify("I love this, it is wonderful and makes me happy!", ["positive", "negative"], GEN_ID))
    # The pyi: a JSON array of {label, score}, best first.
    assert isinstance(result, list) and result
    for row in result:
        assert set(row) >= {"label", "score"}
        assert row["label"] in {"positive", "negative"}
        assert isinstance(row["score"], (int, float))
    scores = [row["score"] for row in result]
    assert scores == sorted(scores, reverse=True)


def test_tokenize_detokenize_round_trip(mrt: car_runtime.CarRuntime) -> None:
    text = "Hello world, round trip!"
    tokens = json.loads(mrt.tokenize(GEN_ID, text))
    assert isinstance(tokens, list) and tokens
    assert all(isinstance(t, int) and t >= 0 for t in tokens)
    assert mrt.detokenize(GEN_ID, tokens) == text  # raw: no template, no BOS


def test_tokenize_with_an_unknown_model_fails(mrt: car_runtime.CarRuntime) -> None:
    with pytest.raises(RuntimeError):
        mrt.tokenize("no-such-model", "hello")

"""Generation through the binding against real daemons and the real test model
(SmolLM2-135M-Instruct, `CAR_TEST_GGUF`, which `scripts/fetch-models` provides): the
daemon's `infer.progress` heartbeats keep a generation longer than the client's idle
window alive, concurrent `infer_stream` calls on one runtime each get only their own
events, and an exception from `on_event` is raised as `infer_stream` documents."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from car_runtime import CarRuntime, DaemonTimeoutError

from conftest import Daemon

# Read at import: the `daemon` fixture clears every CAR_* variable while a test runs.
TEST_GGUF = os.environ.get("CAR_TEST_GGUF")

# The daemon's heartbeat interval and the client's idle window (CAR_INFER_IDLE_MS) of the
# acceptance test: ten heartbeats per window, so a slow heartbeat on a busy machine does
# not end the call, while a generation of LONG_TOKENS takes several windows.
HEARTBEAT_MS = 50
IDLE_MS = 500
LONG_PROMPT = "Write a long story about a dragon who learns to bake bread."
LONG_TOKENS = 256

Event = Dict[str, Any]


def model_path() -> str:
    """The test model; a missing one fails the test (CI always provides it)."""
    hint = 'run `eval "$(scripts/fetch-models)"` from the repository root first'
    if not TEST_GGUF:
        pytest.fail(f"CAR_TEST_GGUF is not set: {hint}", pytrace=False)
    if not Path(TEST_GGUF).is_file():
        pytest.fail(f"CAR_TEST_GGUF={TEST_GGUF} does not exist: {hint}", pytrace=False)
    return TEST_GGUF


def start_with_model(home: Path, **env: str) -> Tuple[Daemon, str]:
    """A daemon over `home` with `env` added and the test model registered; returns the
    daemon and the model id `models.register` gave it.

    Each generation gets one llama.cpp thread: with a thread per core, a machine busy with
    anything else (a parallel build) slows generation a hundredfold, as llama.cpp's
    threads wait for each other at every step."""
    path = model_path()
    home.mkdir()
    d = Daemon(home, debug_methods=False, extra_env={"CAR_LLAMA_THREADS": "1", **env}).start()
    try:
        with CarRuntime(d.url, token=d.token) as rt:
            entry = json.loads(rt.models_register(json.dumps({"path": path})))
    except BaseException:
        d.stop()
        raise
    assert entry["registered"] is True and entry["model"]["kind"] == "gguf", entry
    return d, str(entry["id"])


@pytest.fixture(autouse=True)
def _client_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runtimes here get their daemon explicitly; no CAR_* setting of the caller's
    environment leaks in (the test's own settings are restored afterwards)."""
    for k in list(os.environ):
        if k.startswith("CAR_"):
            monkeypatch.delenv(k)


@pytest.fixture(scope="module")
def model_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tuple[Daemon, str]]:
    """One daemon with the model and fast heartbeats, shared by the tests of this file
    that do not need a differently configured one."""
    d, model = start_with_model(
        tmp_path_factory.mktemp("inference") / "car-home",
        CAR_INFER_PROGRESS_MS=str(HEARTBEAT_MS),
    )
    try:
        yield d, model
    finally:
        d.stop()


@pytest.fixture
def short_idle_window(monkeypatch: pytest.MonkeyPatch) -> int:
    """CAR_INFER_IDLE_MS for the runtimes the test builds: the native client reads it
    when a `CarRuntime` is constructed."""
    monkeypatch.setenv("CAR_INFER_IDLE_MS", str(IDLE_MS))
    return IDLE_MS


def text_of(events: List[Event]) -> str:
    return "".join(str(e["data"]) for e in events if e["type"] == "text")


def check_stream(events: List[Event], final: Dict[str, Any]) -> None:
    """One finished stream: text pieces that make up the final text, `usage` and
    `stop_reason` after them, and exactly one `done`, last."""
    kinds = [e["type"] for e in events]
    assert kinds.count("done") == 1 and kinds[-1] == "done", kinds
    assert "text" in kinds and {"usage", "stop_reason"} <= set(kinds), kinds
    assert text_of(events) == final["text"], (events, final)
    last_text = max(i for i, k in enumerate(kinds) if k == "text")
    assert kinds.index("usage") > last_text and kinds.index("stop_reason") > last_text, kinds


def test_heartbeats_keep_a_generation_longer_than_the_idle_window_alive(
    model_daemon: Tuple[Daemon, str], short_idle_window: int
) -> None:
    d, model = model_daemon
    with CarRuntime(d.url, token=d.token) as rt:
        reply = json.loads(rt.infer_tracked(LONG_PROMPT, model, LONG_TOKENS))
        # Not vacuous: the call outlived the client's idle window several times over.
        assert reply["latency_ms"] > short_idle_window, reply
        assert reply["text"] and reply["usage"]["completion_tokens"] > 0, reply

        events: List[Event] = []
        final = json.loads(
            rt.infer_stream(
                LONG_PROMPT, lambda e: events.append(json.loads(e)), model, LONG_TOKENS
            )
        )
        assert final["latency_ms"] > short_idle_window, final
        check_stream(events, final)


def test_without_heartbeats_the_same_generation_times_out(
    tmp_path: Path, short_idle_window: int
) -> None:
    # The daemon's default heartbeat interval (10 s) is far longer than the window.
    d, model = start_with_model(tmp_path / "car-home")
    try:
        with CarRuntime(d.url, token=d.token) as rt:
            started = time.monotonic()
            with pytest.raises(DaemonTimeoutError) as caught:
                rt.infer_tracked(LONG_PROMPT, model, LONG_TOKENS)
            elapsed = time.monotonic() - started
    finally:
        d.stop()
    err = caught.value
    assert isinstance(err, TimeoutError)
    assert (err.method, err.after_ms) == ("infer", short_idle_window), err
    assert short_idle_window / 1000 <= elapsed < 10, elapsed


def test_concurrent_streams_on_one_runtime_get_only_their_own_events(tmp_path: Path) -> None:
    # Two admission slots, so both generations run at once and their events interleave on
    # the runtime's one connection.
    d, model = start_with_model(tmp_path / "car-home", CAR_MAX_GENERATIONS="2")
    prompts = ["Count from one to ten in words.", "List five colours of the rainbow."]
    try:
        with CarRuntime(d.url, token=d.token) as rt:
            start = threading.Barrier(len(prompts))
            streams: List[List[Tuple[float, Event]]] = [[] for _ in prompts]
            finals: List[Optional[Dict[str, Any]]] = [None for _ in prompts]
            errors: List[BaseException] = []

            def run(i: int) -> None:
                caller = threading.get_ident()

                def on_event(event_json: str) -> None:
                    assert threading.get_ident() == caller, "on_event left the calling thread"
                    if not streams[i]:
                        # A call from inside on_event: no lock is held while it runs.
                        json.loads(rt.capabilities())
                    streams[i].append((time.monotonic(), json.loads(event_json)))

                try:
                    start.wait(30)
                    finals[i] = json.loads(rt.infer_stream(prompts[i], on_event, model, 48))
                except BaseException as e:  # noqa: BLE001 - reported below
                    errors.append(e)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            assert not errors, errors
    finally:
        d.stop()
    texts = []
    for stream, final in zip(streams, finals):
        assert final is not None
        check_stream([e for _, e in stream], final)
        texts.append(final["text"])
    assert texts[0] != texts[1], texts
    # The two streams were live at the same time (each got an event before the other's
    # last one), so neither could have been served after the other.
    (first_a, last_a), (first_b, last_b) = [(s[0][0], s[-1][0]) for s in streams]
    assert first_a < last_b and first_b < last_a, (first_a, last_a, first_b, last_b)


def test_an_exception_from_on_event_is_raised_once_the_stream_finishes(
    model_daemon: Tuple[Daemon, str]
) -> None:
    d, model = model_daemon
    with CarRuntime(d.url, token=d.token) as rt:
        # Events no call wants: those of a call the client stopped waiting for.
        stray: List[str] = []
        rt.register_daemon_notification_handler("inference.stream.event", stray.append)
        seen: List[Event] = []

        def on_event(event_json: str) -> None:
            seen.append(json.loads(event_json))
            raise ValueError("on_event gave up")

        with pytest.raises(ValueError, match="on_event gave up"):
            rt.infer_stream("Count from one to ten in words.", on_event, model, 24)
        # No event after the one that raised, and no `done`.
        assert [e["type"] for e in seen] == ["text"], seen

        # The generation ran to its end before the raise: none of its events was left
        # over, and the next stream on the runtime is whole.
        events: List[Event] = []
        final = json.loads(
            rt.infer_stream("Say hello.", lambda e: events.append(json.loads(e)), model, 8)
        )
        check_stream(events, final)
        assert stray == []


def test_keyboard_interrupt_from_on_event_abandons_the_stream_at_once(
    model_daemon: Tuple[Daemon, str]
) -> None:
    d, model = model_daemon
    with CarRuntime(d.url, token=d.token) as rt:
        stray: List[str] = []
        rt.register_daemon_notification_handler("inference.stream.event", stray.append)
        seen: List[Event] = []

        def on_event(event_json: str) -> None:
            seen.append(json.loads(event_json))
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            rt.infer_stream("Count from one to ten in words.", on_event, model, 32)
        assert [e["type"] for e in seen] == ["text"], seen

        # The call was dropped while the daemon kept generating: the rest of its events
        # reach no call, only the runtime's notification handler.
        deadline = time.monotonic() + 30
        while not any(json.loads(p)["event"]["type"] == "stop_reason" for p in stray):
            assert time.monotonic() < deadline, stray
            time.sleep(0.02)
        assert len({json.loads(p)["request_id"] for p in stray}) == 1, stray

        events: List[Event] = []
        final = json.loads(
            rt.infer_stream("Say hello.", lambda e: events.append(json.loads(e)), model, 8)
        )
        check_stream(events, final)


def test_infer_with_context_grounds_the_prompt_in_memory(model_daemon: Tuple[Daemon, str]) -> None:
    """The generated `infer_with_context` members send the prompt as `context_query` too:
    the daemon appends the memory context it builds, so the model reads more tokens."""
    d, model = model_daemon
    with CarRuntime(d.url, token=d.token) as rt:
        rt.add_fact("deploys", "never deploy to production on fridays", "constraint")
        prompt = "Can I deploy on friday?"
        bare = json.loads(rt.infer_tracked(prompt, model, 2))
        grounded = json.loads(rt.infer_with_context_tracked(prompt, model, 2))
        assert grounded["usage"]["input_tokens"] > bare["usage"]["input_tokens"], (bare, grounded)
        assert isinstance(rt.infer_with_context(prompt, model, 2), str)

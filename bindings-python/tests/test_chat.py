"""`register_chat_handler`: the agent side of `agents.chat`, against a real daemon.

An agent is registered through `HostClient(...).agents_upsert`; a runtime created with
`CAR_AGENT_ID` / `CAR_AGENT_TOKEN` attaches as it and serves its chat turns with the
process-wide handler; a host runtime starts turns with `agents_chat` and receives the
`agents.chat.event` notifications."""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

import car_runtime
from car_runtime import CarRuntime, HostClient

from conftest import Daemon

AGENT = "py-chat-agent"
# Generous: a turn runs in milliseconds; this only bounds a hang.
WAIT = 30.0


class Chat:
    """A host runtime, the agent runtime and the events the host receives."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.host = CarRuntime()
        spec = {"id": AGENT, "name": "Py Chat", "command": sys.executable}
        agent = json.loads(HostClient(self.host).agents_upsert(json.dumps(spec)))
        token = Path(agent["token_path"]).read_text().strip()
        # The identity is read from the environment when the runtime is created.
        monkeypatch.setenv("CAR_AGENT_ID", AGENT)
        monkeypatch.setenv("CAR_AGENT_TOKEN", token)
        self.agent = CarRuntime()
        monkeypatch.delenv("CAR_AGENT_ID")
        monkeypatch.delenv("CAR_AGENT_TOKEN")
        self.events: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        self.host.register_daemon_notification_handler(
            "agents.chat.event", lambda p: self.events.put(json.loads(p))
        )

    def attach(self) -> None:
        """Connects the agent runtime, which binds its connection to the agent."""
        self.agent.connection_epoch()
        listed = {a["spec"]["id"]: a for a in json.loads(self.host.agents_list())}
        assert listed[AGENT]["attached"] is True

    def chat(self, session_id: str, prompt: str) -> Dict[str, Any]:
        params = {"agent_id": AGENT, "prompt": prompt, "session_id": session_id}
        ack: Dict[str, Any] = json.loads(self.host.agents_chat(json.dumps(params)))
        return ack

    def turn(self, session_id: str) -> List[Dict[str, Any]]:
        """`session_id`'s events up to and including its terminal one."""
        got: List[Dict[str, Any]] = []
        deadline = time.monotonic() + WAIT
        while True:
            event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            assert event["session_id"] == session_id, event
            assert event["agent_id"] == AGENT, event
            got.append(event)
            if event["kind"] in ("done", "error"):
                return got

    def close(self) -> None:
        car_runtime.unregister_chat_handler()
        self.agent.close()
        self.host.close()


@pytest.fixture
def chat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Chat]:
    home = tmp_path / "car-home"
    home.mkdir()
    d = Daemon(home, extra_env={"CAR_NO_APPROVALS": "1"}).start()
    for k in list(os.environ):
        if k.startswith("CAR_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("CAR_HOME", str(home))
    c = Chat(monkeypatch)
    try:
        yield c
    finally:
        c.close()
        d.stop()


def test_a_handler_streams_tokens_and_the_turn_ends_with_done(chat: Chat) -> None:
    seen: List[Dict[str, Any]] = []
    threads: List[str] = []

    def handler(params_json: str) -> None:
        p = json.loads(params_json)
        seen.append(p)
        threads.append(threading.current_thread().name)
        # Any runtime method may be called from the turn, inline.
        chat.agent.state_set("turns", json.dumps(len(seen)))
        for piece in ("Hel", "lo", "!"):
            chat.agent.chat_event(p["session_id"], "token", piece)

    car_runtime.register_chat_handler(handler)
    chat.attach()
    assert chat.chat("s1", "hi there") == {"accepted": True, "session_id": "s1"}
    events = chat.turn("s1")
    assert [(e["kind"], e.get("delta")) for e in events] == [
        ("token", "Hel"), ("token", "lo"), ("token", "!"), ("done", None),
    ]
    assert events[-1]["finish_reason"] == "stop"
    # No `done` of its own: the client's `done` has no text (the reply is the tokens).
    assert events[-1]["text"] == ""
    assert seen[0]["session_id"] == "s1" and seen[0]["prompt"] == "hi there"
    assert threads[0].startswith("car-runtime-callback-")
    assert json.loads(chat.agent.state_get("turns")) == 1

    # The same session takes its next turn once the first ended.
    assert chat.chat("s1", "again")["accepted"] is True
    assert [e["kind"] for e in chat.turn("s1")] == ["token", "token", "token", "done"]
    assert seen[1]["prompt"] == "again"


def test_a_raising_handler_ends_the_turn_with_error(chat: Chat) -> None:
    def handler(params_json: str) -> None:
        p = json.loads(params_json)
        chat.agent.chat_event(p["session_id"], "token", "partial")
        raise ValueError("the model is on fire")

    car_runtime.register_chat_handler(handler)
    chat.attach()
    chat.chat("s-err", "go")
    events = chat.turn("s-err")
    assert [e["kind"] for e in events] == ["token", "error"]
    assert events[-1]["error"] == "ValueError: the model is on fire"


def test_the_handlers_own_done_is_the_one_terminal_event(chat: Chat) -> None:
    def handler(params_json: str) -> None:
        sid = json.loads(params_json)["session_id"]
        chat.agent.chat_event(sid, "token", "draft")
        chat.agent.chat_event(sid, "done", "final answer")
        # After its terminal, nothing more of the turn is sent.
        chat.agent.chat_event(sid, "token", "late")
        chat.agent.chat_event(sid, "error", "late too")

    car_runtime.register_chat_handler(handler)
    chat.attach()
    for prompt in ("one", "two"):
        chat.chat("s-done", prompt)
        events = chat.turn("s-done")
        assert [(e["kind"], e.get("delta")) for e in events] == [
            ("token", "draft"), ("done", None),
        ]
        assert events[-1]["text"] == "final answer"
    # No stray event of either turn arrived after its terminal.
    time.sleep(0.3)
    assert chat.events.empty()


def test_the_handlers_error_event_ends_the_turn(chat: Chat) -> None:
    def handler(params_json: str) -> None:
        sid = json.loads(params_json)["session_id"]
        chat.agent.chat_event(sid, "error", "no model configured")

    car_runtime.register_chat_handler(handler)
    chat.attach()
    chat.chat("s-e2", "go")
    assert chat.turn("s-e2") == [
        {"session_id": "s-e2", "agent_id": AGENT, "kind": "error", "error": "no model configured"}
    ]


def test_turns_run_one_at_a_time(chat: Chat) -> None:
    running = 0
    peak = 0
    lock = threading.Lock()

    def handler(params_json: str) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.2)
        with lock:
            running -= 1
        chat.agent.chat_event(json.loads(params_json)["session_id"], "token", "x")

    car_runtime.register_chat_handler(handler)
    chat.attach()
    for sid in ("a", "b", "c"):
        chat.chat(sid, "go")
    by_session: Dict[str, List[str]] = {}
    deadline = time.monotonic() + WAIT
    while sum(1 for kinds in by_session.values() if kinds[-1] == "done") < 3:
        event = chat.events.get(timeout=max(0.0, deadline - time.monotonic()))
        by_session.setdefault(event["session_id"], []).append(event["kind"])
    assert by_session == {sid: ["token", "done"] for sid in ("a", "b", "c")}
    assert peak == 1


def test_a_cancelled_turn_frees_its_session(chat: Chat) -> None:
    started = threading.Event()
    release = threading.Event()
    finished = threading.Event()

    def handler(params_json: str) -> None:
        try:
            chat.agent.chat_event(json.loads(params_json)["session_id"], "token", "thinking")
            started.set()
            release.wait(WAIT)
        finally:
            finished.set()

    car_runtime.register_chat_handler(handler)
    chat.attach()
    chat.chat("s-c", "go")
    assert started.wait(WAIT)
    assert chat.events.get(timeout=WAIT)["kind"] == "token"
    cancelled = json.loads(chat.host.agents_chat_cancel(json.dumps({"session_id": "s-c"})))
    assert cancelled["cancelled"] is True
    release.set()
    assert finished.wait(WAIT)
    # The agent ends the cancelled turn (`done {finish_reason: "cancelled"}`, which the
    # daemon does not forward) and then takes the session's next turn.
    deadline = time.monotonic() + WAIT
    while True:
        try:
            chat.chat("s-c", "again")
            break
        except car_runtime.DaemonRpcError as e:
            # The handler returned; the agent frees the session a moment later.
            assert "in flight" in e.message and time.monotonic() < deadline, e
            time.sleep(0.02)
    events = chat.turn("s-c")
    assert [(e["kind"], e.get("delta")) for e in events] == [("token", "thinking"), ("done", None)]
    assert events[-1]["finish_reason"] == "stop"


def test_unregistering_refuses_later_turns(chat: Chat) -> None:
    car_runtime.register_chat_handler(lambda params_json: None)
    chat.attach()
    chat.chat("s-u", "go")
    assert [e["kind"] for e in chat.turn("s-u")] == ["done"]
    car_runtime.unregister_chat_handler()
    with pytest.raises(car_runtime.DaemonRpcError) as refused:
        chat.chat("s-u2", "go")
    assert refused.value.code == -32601
    # Registering again serves the same (already connected) runtime again.
    car_runtime.register_chat_handler(lambda params_json: None)
    assert chat.chat("s-u3", "go")["accepted"] is True
    assert [e["kind"] for e in chat.turn("s-u3")] == ["done"]
    with pytest.raises(TypeError, match="handler must be callable"):
        car_runtime.register_chat_handler("nope")  # type: ignore[arg-type]


def test_chat_event_outside_a_turn_goes_to_the_daemon(chat: Chat) -> None:
    # No turn of this session runs here: the event is sent as a request, which the daemon
    # drops (no route), and a kind it does not know is its invalid-params error.
    chat.attach()
    chat.agent.chat_event("nobody", "token", "x")
    with pytest.raises(car_runtime.DaemonRpcError) as bad:
        chat.agent.chat_event("nobody", "bogus")
    assert bad.value.code == -32602

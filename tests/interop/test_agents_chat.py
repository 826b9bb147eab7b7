"""Chat turns over the wire with CAR's client on both ends, and the approval gate.

The agent is `chat_agent.py`: a separate process in the interop venv, bound to a
registered agent by `CAR_AGENT_ID` + `CAR_AGENT_TOKEN`, serving `agent.chat` through
`car_runtime.register_chat_handler` and streaming its reply with `CarRuntime.chat_event`.
The host is a `CarRuntime` of the test: `agents_chat` sends the turn and
`register_daemon_notification_handler("agents.chat.event", …)` receives what the daemon
forwards (websocket-protocol-v0.48.md `agents.chat`, host-protocol.md "agents.chat").

The gate (websocket-protocol-v0.48.md "High-risk method approval gate"; the gated set is
ours, docs/protocol-choices.md "Approvals"): an operator's `scheduler.os_uninstall` parks,
an `approval.requested` `host.event` carries the approval, a host session's
`host.resolve_approval` lets it run or denies it (`-32003`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

import car_runtime
from conftest import Daemon, Inbox, RawHost, wait_until

CHAT_AGENT = Path(__file__).with_name("chat_agent.py")
NO_GATE = pytest.mark.daemon_args("--no-approvals")


def managed(rt: car_runtime.CarRuntime) -> Dict[str, Dict[str, Any]]:
    return {r["spec"]["id"]: r for r in json.loads(rt.agents_list("{}"))}


@dataclass
class ChatAgent:
    id: str
    process: "subprocess.Popen[str]"
    seen_file: Path

    def seen(self) -> List[Dict[str, Any]]:
        """The `agent.chat` params CAR's chat handler received, in order."""
        if not self.seen_file.exists():
            return []
        return [json.loads(line) for line in self.seen_file.read_text().splitlines() if line]

    def stop(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(15)


@pytest.fixture
def echo(daemon: Daemon, rt: car_runtime.CarRuntime, tmp_path: Path) -> Iterator[ChatAgent]:
    """Agent `echo`, upserted through `HostClient` and running as `chat_agent.py`; the
    fixture returns once `agents.list` shows it attached."""
    added = json.loads(car_runtime.HostClient(rt).agents_upsert(json.dumps({
        "id": "echo", "name": "Echo", "command": sys.executable, "args": [str(CHAT_AGENT)],
        "capabilities": ["chat"]})))
    token = Path(added["token_path"]).read_text().strip()
    seen = tmp_path / "agent-seen.jsonl"
    env = dict(os.environ, CAR_AGENT_ID="echo", CAR_AGENT_TOKEN=token, CHAT_AGENT_SEEN=str(seen))
    with open(tmp_path / "agent.log", "w") as log:
        process = subprocess.Popen([sys.executable, str(CHAT_AGENT)], env=env, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=log, text=True)
    agent = ChatAgent("echo", process, seen)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == "READY", f"chat agent failed: {(tmp_path / 'agent.log').read_text()}"
        wait_until(lambda: managed(rt)["echo"]["attached"], "echo to attach")
        yield agent
    finally:
        agent.stop()


@pytest.fixture
def inbox(rt: car_runtime.CarRuntime) -> Inbox:
    box = Inbox()
    rt.register_daemon_notification_handler("agents.chat.event", box)
    return box


def turn(inbox: Inbox, session_id: str, terminal: bool = True) -> List[Dict[str, Any]]:
    """The events of one session, once its terminal event (or any event) has arrived."""

    def ready(items: List[Dict[str, Any]]) -> Optional[List[Dict[str, Any]]]:
        mine = [e for e in items if e["session_id"] == session_id]
        if terminal:
            return mine if any(e["kind"] in ("done", "error") for e in mine) else None
        return mine or None

    result: List[Dict[str, Any]] = inbox.wait_for(ready, f"the events of {session_id}")
    return result


def chat(rt: car_runtime.CarRuntime, **params: Any) -> Dict[str, Any]:
    params.setdefault("agent_id", "echo")
    reply: Dict[str, Any] = json.loads(rt.agents_chat(json.dumps(params)))
    return reply


# --- chat turns ------------------------------------------------------------------------


@NO_GATE
def test_a_chat_turn_streams_back_in_order(rt: car_runtime.CarRuntime, echo: ChatAgent, inbox: Inbox) -> None:
    ack = chat(rt, prompt="world", session_id="chat-interop-1", model="interop-model")
    assert ack == {"accepted": True, "session_id": "chat-interop-1"}
    events = turn(inbox, "chat-interop-1")
    assert [(e["kind"], e.get("delta")) for e in events] == [
        ("token", "Hello, "), ("token", "world"), ("done", "Hello, world")]
    for e in events:
        assert e["agent_id"] == "echo" and e["session_id"] == "chat-interop-1", e
    # What CAR's chat handler got: host-protocol.md `agent.chat {session_id, prompt, stream,
    # context, model?}`.
    (request,) = echo.seen()
    assert request["session_id"] == "chat-interop-1" and request["prompt"] == "world"
    assert request["stream"] is True and request["model"] == "interop-model"
    assert request["context"]["voice_input"] is False
    assert isinstance(request["context"]["host_client_id"], str)


@NO_GATE
def test_turns_follow_one_another_and_a_session_id_is_generated(
    rt: car_runtime.CarRuntime, echo: ChatAgent, inbox: Inbox
) -> None:
    first = chat(rt, prompt="one", session_id="chat-seq")
    assert turn(inbox, "chat-seq")[-1]["delta"] == "Hello, one"
    # The same conversation again once the turn is over, then one without a session id.
    chat(rt, prompt="two", session_id="chat-seq")
    inbox.wait_for(lambda items: [e for e in items if e.get("delta") == "Hello, two"], "the second turn")
    generated = chat(rt, prompt="three")
    assert generated["accepted"] is True and generated["session_id"].startswith("chat-"), generated
    assert generated["session_id"] != first["session_id"]
    assert [e["delta"] for e in turn(inbox, generated["session_id"])] == ["Hello, ", "three", "Hello, three"]
    assert "model" not in echo.seen()[-1]  # omitted: the agent keeps its own model
    assert [s["session_id"] for s in echo.seen()] == ["chat-seq", "chat-seq", generated["session_id"]]


@NO_GATE
def test_cancel_ends_the_turn_and_drops_its_later_events(
    rt: car_runtime.CarRuntime, echo: ChatAgent, inbox: Inbox
) -> None:
    chat(rt, prompt="hold", session_id="chat-held")
    assert [e["delta"] for e in turn(inbox, "chat-held", terminal=False)] == ["held"]
    cancelled = json.loads(rt.agents_chat_cancel(json.dumps({"session_id": "chat-held"})))
    assert cancelled["session_id"] == "chat-held" and cancelled["cancelled"] is True, cancelled
    # The agent now streams on the cancelled session and then ends a new turn; events on one
    # connection keep their order, so once the new turn's `done` is here, anything forwarded
    # for the cancelled session would be too.
    chat(rt, prompt="late:chat-held", session_id="chat-after")
    assert [e["kind"] for e in turn(inbox, "chat-after")] == ["done"]
    assert [e["delta"] for e in inbox.snapshot() if e["session_id"] == "chat-held"] == ["held"]
    again = json.loads(rt.agents_chat_cancel(json.dumps({"session_id": "chat-held"})))
    assert again["session_id"] == "chat-held" and again["cancelled"] is False


@NO_GATE
def test_a_raising_handler_ends_the_turn_with_error(rt: car_runtime.CarRuntime, echo: ChatAgent, inbox: Inbox) -> None:
    # register_chat_handler's contract: "If a handler raises, the bridge emits a terminal
    # kind: "error" agent.chat.event on the turn's session_id".
    chat(rt, prompt="boom", session_id="chat-boom")
    (event,) = turn(inbox, "chat-boom")
    assert event["kind"] == "error" and event["agent_id"] == "echo"
    assert "the handler failed" in json.dumps(event)
    # The agent serves the next turn.
    chat(rt, prompt="again", session_id="chat-again")
    assert turn(inbox, "chat-again")[-1]["kind"] == "done"


@NO_GATE
def test_an_agent_that_goes_away_ends_its_turns_with_error(
    rt: car_runtime.CarRuntime, echo: ChatAgent, inbox: Inbox
) -> None:
    chat(rt, prompt="hold", session_id="chat-orphan")
    turn(inbox, "chat-orphan", terminal=False)
    echo.stop()
    events = turn(inbox, "chat-orphan")
    assert events[-1]["kind"] == "error" and events[-1]["agent_id"] == "echo", events
    wait_until(lambda: not managed(rt)["echo"]["attached"], "echo to detach")
    with pytest.raises(car_runtime.DaemonRpcError):
        chat(rt, prompt="anyone?")  # nobody is attached as echo now


@NO_GATE
def test_approval_pending_reaches_the_host_and_approve_reaches_the_agent(
    rt: car_runtime.CarRuntime, echo: ChatAgent, inbox: Inbox
) -> None:
    chat(rt, prompt="approval", session_id="chat-gate")
    (pending,) = turn(inbox, "chat-gate", terminal=False)
    assert pending["kind"] == "approval_pending" and pending["delta"] == "write notes.txt"
    # `agents.chat.approve` reverse-requests the agent's `agent.chat.approve`; CAR's 0.58.0
    # client registers no handler for it (it answers -32601), so the relayed answer is
    # `resolved: false` -- a definitive answer, not a hang.
    reply = json.loads(rt.agents_chat_approve(json.dumps(
        {"session_id": "chat-gate", "approval_id": "ap-1", "decision": True})))
    assert reply == {"resolved": False, "session_id": "chat-gate"}


@NO_GATE
def test_chat_with_an_unknown_or_unattached_agent_is_refused(rt: car_runtime.CarRuntime) -> None:
    with pytest.raises(car_runtime.DaemonRpcError) as info:
        chat(rt, agent_id="ghost", prompt="hi")
    assert info.value.code == -32602
    car_runtime.HostClient(rt).agents_upsert(json.dumps({"id": "idle", "name": "Idle", "command": sys.executable}))
    with pytest.raises(car_runtime.DaemonRpcError):
        chat(rt, agent_id="idle", prompt="hi")


# --- the approval gate -------------------------------------------------------------------
#
# Stricter than CAR (docs/security.md, "Only a host approves"): a gate approval is resolved
# only by a host session, never by a connection holding the parked call's credential, and a
# host's own calls are not held. So the parked call here is an operator's (CAR's
# `CarRuntime.scheduler_os_uninstall`, gated) and the approver is a host-token session;
# CAR's `host_resolve_approval` from a second operator `CarRuntime` is refused.

GATE = pytest.mark.daemon_args("--approval-timeout", "60s")


class Parked:
    """`CarRuntime.scheduler_os_uninstall {label}` on a thread of its own, parked at the gate."""

    def __init__(self, rt: car_runtime.CarRuntime, label: str) -> None:
        self.result: Optional[str] = None
        self.error: Optional[BaseException] = None
        params = json.dumps({"label": label})
        self.thread = threading.Thread(target=self._run, args=(rt, params), daemon=True)
        self.thread.start()

    def _run(self, rt: car_runtime.CarRuntime, params: str) -> None:
        try:
            self.result = rt.scheduler_os_uninstall(params)
        except BaseException as e:  # noqa: BLE001  (reported to the test)
            self.error = e

    def outcome(self, timeout: float = 30.0) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "scheduler.os_uninstall still parked"
        return self.error if self.error is not None else json.loads(self.result or "null")


def is_denial(error: Any) -> bool:
    return isinstance(error, (RuntimeError, car_runtime.DaemonRpcError)) and (
        getattr(error, "code", None) == -32003 or "-32003" in str(error))


@pytest.fixture
def ui(daemon: Daemon) -> Iterator[Any]:
    """A second `CarRuntime` (the same operator token) subscribed to the host stream, with
    its `host.event` inbox."""
    runtime = car_runtime.CarRuntime()
    box = Inbox()
    runtime.register_daemon_notification_handler("host.event", box)
    assert json.loads(runtime.host_subscribe("{}"))["subscribed"] is True
    try:
        yield runtime, box
    finally:
        runtime.close()


def approval_for(box: Inbox, label: str) -> Dict[str, Any]:
    """The approval the gate raised for `scheduler.os_uninstall` of `label` (from host.event)."""

    def find(items: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        return [e for e in items
                if e["kind"] == "approval.requested" and label in json.dumps(e["payload"].get("details"))]

    event: Dict[str, Any] = box.wait_for(find, f"approval.requested for {label}")[0]
    approval: Dict[str, Any] = event["payload"]
    assert approval["status"] == "pending" and approval["options"] == ["approve", "deny"]
    assert approval["action"] == "ws.method:scheduler.os_uninstall", approval  # the reference's action name
    assert approval["client_id"] is None  # system-level
    return approval


@GATE
def test_a_host_approves_a_parked_call(daemon: Daemon, rt: car_runtime.CarRuntime, ui: Any) -> None:
    runtime, box = ui
    parked = Parked(rt, "car-gate-approved")
    approval = approval_for(box, "car-gate-approved")
    assert approval["id"] in [a["id"] for a in json.loads(runtime.host_approvals())["approvals"]]
    assert parked.thread.is_alive(), "parked until a host answers"
    with RawHost(daemon) as host:
        resolved = host.call("host.resolve_approval", {"approval_id": approval["id"], "approved": True})
    assert resolved["result"]["status"] == "approved", resolved
    ran = parked.outcome()
    assert not is_denial(ran), ran
    box.wait_for(lambda items: [e for e in items if e["kind"] == "approval.resolved"
                                and e["payload"]["id"] == approval["id"]], "approval.resolved")


@GATE
def test_a_host_denies_a_parked_call(daemon: Daemon, rt: car_runtime.CarRuntime, ui: Any) -> None:
    _, box = ui
    parked = Parked(rt, "car-gate-denied")
    approval = approval_for(box, "car-gate-denied")
    with RawHost(daemon) as host:
        resolved = host.call("host.resolve_approval", {"approval_id": approval["id"], "approved": False})
    assert resolved["result"]["status"] == "denied", resolved
    assert is_denial(parked.outcome())


@GATE
def test_the_parked_calls_own_credential_cannot_approve_it(
        daemon: Daemon, rt: car_runtime.CarRuntime, ui: Any) -> None:
    """CAR's reference lets any authenticated session resolve a gate approval ("the parking
    dispatch is one session, the local UI doing the click is a different session"), so a
    caller could approve its own call from a second socket. Here CAR's own
    `host_resolve_approval` from a second `CarRuntime` with the same token is refused, and
    the call stays parked until a host answers."""
    runtime, box = ui
    parked = Parked(rt, "car-gate-self")
    approval = approval_for(box, "car-gate-self")
    with pytest.raises((RuntimeError, car_runtime.DaemonRpcError)) as refused:
        runtime.host_resolve_approval(json.dumps({"approval_id": approval["id"], "approved": True}))
    assert "self_approval" in str(refused.value) or "credential" in str(refused.value), repr(refused.value)
    assert parked.thread.is_alive(), "still parked"
    rows = {a["id"]: a for a in json.loads(runtime.host_approvals())["approvals"]}
    assert rows[approval["id"]]["status"] == "pending"
    with RawHost(daemon) as host:
        resolved = host.call("host.resolve_approval", {"approval_id": approval["id"], "approved": False})
    assert resolved["result"]["status"] == "denied", resolved
    assert is_denial(parked.outcome())


@GATE
def test_a_hosts_own_upsert_is_not_held(rt: car_runtime.CarRuntime, ui: Any) -> None:
    """`HostClient.agents_upsert` is the host's own call: it runs at once (the host is the
    approver; no one else could approve it)."""
    _, box = ui
    added = json.loads(car_runtime.HostClient(rt).agents_upsert(json.dumps(
        {"id": "host-own", "name": "Host own", "command": sys.executable})))
    assert added["spec"]["id"] == "host-own" and Path(added["token_path"]).is_file()
    assert "host-own" in managed(rt)
    assert not [e for e in box.snapshot() if e["kind"] == "approval.requested"]


@pytest.mark.daemon_args("--approval-timeout", "1s")
def test_an_unanswered_call_times_out_and_the_approval_stays(rt: car_runtime.CarRuntime, ui: Any) -> None:
    runtime, box = ui
    parked = Parked(rt, "car-gate-unanswered")
    approval = approval_for(box, "car-gate-unanswered")
    assert is_denial(parked.outcome())
    # "The approval row stays in Pending for forensics; the connection is not closed."
    rows = {a["id"]: a for a in json.loads(runtime.host_approvals())["approvals"]}
    assert rows[approval["id"]]["status"] == "pending"

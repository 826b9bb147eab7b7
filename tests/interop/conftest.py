"""Fixtures for the interop suite: CAR's published Python client (`car-runtime` 0.58.0 from
PyPI, installed in its own venv by `test.sh`) against a real `car-server` from this repo.

Each daemon gets a fresh temporary `CAR_HOME`, listens on an ephemeral port
(`--port 0 --ready-file <home>/ready.json`), and writes its stdout/stderr to
`<home>/car-server.log`; a failing test's report carries the tail of that log. CAR's client
discovers the daemon the way a user's program would: `CAR_DAEMON_URL` names the WebSocket
and `CAR_HOME` leads it to the token file (`$CAR_HOME/ai.parslee.car/auth-token`) and the
host-management token (`…/host-token`). The client reads those variables when a
`CarRuntime` is constructed, so the fixtures set them in `os.environ` for the test's
duration and restore the previous environment afterwards.

The binary is `$CARGO_TARGET_DIR/debug/car-server` (default `<repo>/target`); nothing here
builds it.

With `CAR_INTEROP_WIRE=1` every daemon is fronted by a logging WebSocket relay (this file
run as a script, in its own process: some of CAR's calls hold the GIL while they wait, so
an in-process relay would deadlock them). CAR's client talks to the relay, the relay to
the daemon, and a failing test's report carries every frame that test exchanged. With
`CAR_INTEROP_REPORT=<file>` as well, each failure is also appended to that file as one JSON
line (test, error, frames after the handshake). Both are off by default, so a normal run
connects CAR's client to the daemon directly.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
LOG_TAIL_BYTES = 12_000
READY_TIMEOUT_S = 60.0
WIRE = os.environ.get("CAR_INTEROP_WIRE") == "1"
REPORT = os.environ.get("CAR_INTEROP_REPORT")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def wait_for_json(path: Path, proc: "subprocess.Popen[bytes]", what: str, log: Path) -> Dict[str, Any]:
    """Polls (bounded) for the JSON file a child process writes once it listens; fails at
    once if the process exits instead."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{tail(log)}")
        try:
            doc: Dict[str, Any] = json.loads(path.read_text())
            return doc
        except (FileNotFoundError, json.JSONDecodeError):
            time.sleep(0.02)
    raise RuntimeError(f"{what} did not write {path} within {READY_TIMEOUT_S}s:\n{tail(log)}")


def tail(path: Path) -> str:
    if not path.exists():
        return "(no log)"
    return ANSI.sub("", path.read_bytes()[-LOG_TAIL_BYTES:].decode(errors="replace"))


def car_server_binary() -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    path = target / "debug" / "car-server"
    if not path.exists():
        raise RuntimeError(f"{path} is missing: build the workspace first (this suite never runs cargo)")
    return path


class WireTap:
    """A relay process in front of one daemon; every text frame lands in `frames.jsonl`."""

    def __init__(self, daemon: "Daemon") -> None:
        self.dir = daemon.home.parent / f"{daemon.home.name}-wire"
        self.dir.mkdir(exist_ok=True)
        self.frames_file = self.dir / "frames.jsonl"
        self.frames_file.touch()
        ready = self.dir / "relay.json"
        log = self.dir / "relay.log"
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "relay", str(daemon.ready_file), str(self.frames_file), str(ready)],
                stdout=out,
                stderr=out,
            )
        self.url = str(wait_for_json(ready, self.proc, "wire relay", log)["url"])

    def frames(self) -> List[Dict[str, Any]]:
        rows = []
        for line in self.frames_file.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass  # a line still being written
        return rows

    def mark(self) -> int:
        return len(self.frames())

    def transcript(self, since: int) -> str:
        rows = self.frames()[since:]
        return "\n".join(f"[conn {r['conn']}] {r['dir']} {r['text']}" for r in rows) or "(no frames)"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class Daemon:
    """One `car-server` process over one `CAR_HOME`; can be restarted on the same home.
    `extra_args` go on its command line (e.g. `--no-approvals`)."""

    def __init__(self, home: Path, extra_args: Sequence[str] = ()) -> None:
        self.home = home
        self.extra_args = list(extra_args)
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.ready: Dict[str, Any] = {}
        self.tap: Optional[WireTap] = None

    @property
    def ready_file(self) -> Path:
        return self.home / "ready.json"

    @property
    def log_file(self) -> Path:
        return self.home / "car-server.log"

    @property
    def url(self) -> str:
        return str(self.ready["ws_url"])

    @property
    def client_url(self) -> str:
        """Where CAR's client is pointed: the daemon, or its wire relay when that is on."""
        if WIRE:
            if self.tap is None:
                self.tap = WireTap(self)
            return self.tap.url
        return self.url

    @property
    def token_file(self) -> Path:
        return self.home / "ai.parslee.car" / "auth-token"

    @property
    def host_token_file(self) -> Path:
        return self.home / "ai.parslee.car" / "host-token"

    def start(self) -> "Daemon":
        self.ready_file.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CAR_")}
        env["CAR_HOME"] = str(self.home)
        args = [str(car_server_binary()), "--port", "0", "--ready-file", str(self.ready_file), *self.extra_args]
        with open(self.log_file, "ab") as log:
            log.write(f"---- start: {' '.join(args)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=log)
        _RUNNING.append(self)
        self.ready = wait_for_json(self.ready_file, self.proc, "car-server", self.log_file)
        missing = {"pid", "port", "ws_url"} - set(self.ready)
        if missing:
            raise RuntimeError(f"ready file lacks {sorted(missing)}: {self.ready}")
        return self

    def log_tail(self) -> str:
        return tail(self.log_file)

    def _stop_process(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(15)

    def stop(self) -> None:
        if self in _RUNNING:
            _RUNNING.remove(self)
        self._stop_process()
        if self.tap is not None:
            self.tap.stop()

    def restart(self) -> "Daemon":
        """Same home, new process (and a new port; the wire relay follows it)."""
        self._stop_process()
        if self in _RUNNING:
            _RUNNING.remove(self)
        return self.start()


# Daemons that are running right now; a failing test's report gets each one's log tail.
_RUNNING: List[Daemon] = []


@contextmanager
def client_env(daemon: Daemon, **extra: str) -> Iterator[None]:
    """Points CAR's client at `daemon` (and only at it) for the duration of the block. Every
    other `CAR_*` variable is removed (the suite's own `CAR_TEST_*` model paths stay)."""
    saved = dict(os.environ)
    try:
        for key in [k for k in os.environ if k.startswith("CAR_") and not k.startswith("CAR_TEST_")]:
            del os.environ[key]
        os.environ["CAR_DAEMON_URL"] = daemon.client_url
        os.environ["CAR_HOME"] = str(daemon.home)
        # Our daemon reports its own version, not 0.58.0; without this CAR's client prints a
        # version-skew notice on every connection.
        os.environ["CAR_NO_VERSION_WARNING"] = "1"
        os.environ.update(extra)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def start_daemon(home: Path, *extra_args: str) -> Daemon:
    home.mkdir(parents=True, exist_ok=True)
    return Daemon(home, extra_args).start()


# --- helpers shared by the test modules -------------------------------------------------


def action(id: str, tool: str, params: Optional[Dict[str, Any]] = None, **extra: Any) -> Dict[str, Any]:
    a: Dict[str, Any] = {"id": id, "type": "tool_call", "tool": tool, "parameters": params or {}}
    a.update(extra)
    return a


def proposal(*actions: Dict[str, Any], **extra: Any) -> str:
    p: Dict[str, Any] = {"actions": list(actions)}
    p.update(extra)
    return json.dumps(p)


def by_name(rows: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    return {r["name"]: r for r in rows}


def wait_until(check: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    """Polls `check` until it returns something truthy (and returns that), failing after
    `timeout` seconds. For state another process changes (an agent attaching, a session's
    agents going away); never a fixed sleep."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class Inbox:
    """Collects the notifications CAR's client hands to a
    `register_daemon_notification_handler` callback (called on a CAR-owned thread)."""

    def __init__(self) -> None:
        self.items: List[Dict[str, Any]] = []
        self._changed = threading.Condition()

    def __call__(self, params_json: str) -> None:
        with self._changed:
            self.items.append(json.loads(params_json))
            self._changed.notify_all()

    def wait_for(self, check: Callable[[List[Dict[str, Any]]], Any], what: str, timeout: float = 15.0) -> Any:
        """Waits (bounded) until `check(items)` is truthy and returns its value."""
        with self._changed:
            value = self._changed.wait_for(lambda: check(list(self.items)), timeout=timeout)
            if not value:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; got {self.items}")
            return value

    def snapshot(self) -> List[Dict[str, Any]]:
        with self._changed:
            return list(self.items)


class RawHost:
    """A host-management WebSocket session of our own (`session.auth {host_token}` +
    `server.handshake`), for what CAR's client cannot send as a host: its
    `daemon_call_host_management` refuses every method outside its allowlist (including
    `host.*`), and its `HostClient` has no `host.*` members. Use as `with RawHost(d) as h:`."""

    def __init__(self, daemon: "Daemon") -> None:
        from websockets.sync.client import connect

        self._connection = connect(daemon.client_url, max_size=None)  # through the wire relay when on
        self.ws = self._connection.__enter__()
        self.next_id = 0
        self.notifications: List[Dict[str, Any]] = []
        token = daemon.host_token_file.read_text().strip()
        assert self.call("session.auth", {"host_token": token})["result"]["ok"] is True
        handshake = {"client_version": "interop", "protocol_version": 3, "required_capabilities": []}
        assert "result" in self.call("server.handshake", handshake)

    def call(self, method: str, params: Any) -> Dict[str, Any]:
        """The whole response (`result` or `error`); notifications on the way are kept."""
        self.next_id += 1
        want = self.next_id
        self.ws.send(json.dumps({"jsonrpc": "2.0", "id": want, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=30))
            if msg.get("id") == want:
                return msg
            if "method" in msg:
                self.notifications.append(msg)

    def __enter__(self) -> "RawHost":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._connection.__exit__(*exc)

# --- the relay process (`python conftest.py relay <ready.json> <frames.jsonl> <relay.json>`) ---


def _relay_main(daemon_ready: Path, frames_file: Path, relay_ready: Path) -> None:
    """Accepts WebSocket clients on an ephemeral port; for each, opens a connection to the
    daemon named by its ready file (read per connection, so a restart is followed) and
    forwards frames both ways, appending each text frame to `frames_file` first as
    `{"conn", "dir": "->" (client to daemon) | "<-", "text"}`. Either side closing closes
    the other."""
    import asyncio

    import websockets

    out = open(frames_file, "a", buffering=1)
    counter = [0]

    def record(conn: int, direction: str, text: str) -> None:
        out.write(json.dumps({"conn": conn, "dir": direction, "text": text}) + "\n")

    async def pump(src: Any, dst: Any, conn: int, direction: str) -> None:
        try:
            async for message in src:
                record(conn, direction, message if isinstance(message, str) else f"<binary {len(message)} bytes>")
                await dst.send(message)
        except websockets.ConnectionClosed:
            pass
        finally:
            await dst.close()

    async def handle(client: Any) -> None:
        counter[0] += 1
        conn = counter[0]
        try:
            url = json.loads(daemon_ready.read_text())["ws_url"]
            upstream = await websockets.connect(url, max_size=None)
        except (OSError, ValueError, KeyError) as e:
            record(conn, "!!", f"upstream connect failed: {e}")
            await client.close()
            return
        async with upstream:
            await asyncio.gather(pump(client, upstream, conn, "->"), pump(upstream, client, conn, "<-"))
        record(conn, "--", "closed")

    async def main() -> None:
        server = await websockets.serve(handle, "127.0.0.1", 0, max_size=None)
        port = server.sockets[0].getsockname()[1]
        tmp = relay_ready.with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": f"ws://127.0.0.1:{port}"}))
        tmp.rename(relay_ready)
        await asyncio.Future()

    asyncio.run(main())


if __name__ == "__main__":
    if sys.argv[1:2] == ["relay"]:
        _relay_main(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
        sys.exit(0)
    sys.exit("usage: conftest.py relay <daemon ready.json> <frames.jsonl> <relay.json>")


# --- pytest fixtures and hooks -----------------------------------------------------------

import pytest  # noqa: E402  (the relay process above needs neither pytest nor car_runtime)

import car_runtime  # noqa: E402


@contextmanager
def running_daemon(home: Path, *extra_args: str) -> Iterator[Daemon]:
    """A fresh daemon on `home`, with the environment pointing CAR's client at it."""
    d = start_daemon(home, *extra_args)
    try:
        with client_env(d):
            yield d
    finally:
        d.stop()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "daemon_args(*args): extra car-server arguments for the test's `daemon` (e.g. --no-approvals)"
    )


@pytest.fixture
def daemon(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Daemon]:
    """A fresh daemon on its own CAR_HOME; the test's environment points CAR's client at it.
    `@pytest.mark.daemon_args("--no-approvals")` adds command-line arguments."""
    marker = request.node.get_closest_marker("daemon_args")
    extra = [str(a) for a in marker.args] if marker else []
    with running_daemon(tmp_path / "car-home", *extra) as d:
        yield d


@pytest.fixture
def rt(daemon: Daemon) -> Iterator[car_runtime.CarRuntime]:
    """CAR's `CarRuntime`, constructed while the environment points at `daemon`."""
    runtime = car_runtime.CarRuntime()
    try:
        yield runtime
    finally:
        runtime.close()


@pytest.fixture(autouse=True)
def _no_process_wide_handlers() -> Iterator[None]:
    """CAR's tool handlers are process-wide; none leaks from one test into the next."""
    yield
    car_runtime.unregister_tool_handler()
    car_runtime.unregister_tool_cancel_handler()


_WIRE_MARKS = pytest.StashKey[Dict[int, int]]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    # Where each running daemon's transcript stood when the test body started.
    item.stash[_WIRE_MARKS] = {id(d): d.tap.mark() for d in _RUNNING if d.tap is not None}
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed:
        return
    marks = item.stash.get(_WIRE_MARKS, {})
    for d in list(_RUNNING):
        report.sections.append((f"car-server log ({d.home})", d.log_tail()))
        if d.tap is not None:
            since = marks.get(id(d), 0) if report.when == "call" else 0
            report.sections.append((f"wire transcript ({d.home})", d.tap.transcript(since)))
    if REPORT:
        _append_report(item, report, marks)


def _append_report(item: pytest.Item, report: pytest.TestReport, marks: Dict[int, int]) -> None:
    frames: List[str] = []
    for d in list(_RUNNING):
        if d.tap is None:
            continue
        since = marks.get(id(d), 0) if report.when == "call" else 0
        setup_ids = set()  # (connection, id) of each session.auth / server.handshake
        for row in d.tap.frames()[since:]:
            conn, text = row["conn"], row["text"]
            try:
                msg = json.loads(text)
            except ValueError:
                msg = None
            if isinstance(msg, dict) and msg.get("method") in ("session.auth", "server.handshake"):
                setup_ids.add((conn, json.dumps(msg.get("id"))))
                continue
            if isinstance(msg, dict) and "method" not in msg and (conn, json.dumps(msg.get("id"))) in setup_ids:
                continue
            frames.append(f"[{conn}] {row['dir']} {text}")
    crash = getattr(report.longrepr, "reprcrash", None)
    error = crash.message if crash is not None else str(report.longrepr).splitlines()[-1:]
    with open(str(REPORT), "a") as out:
        out.write(json.dumps({"test": item.nodeid, "when": report.when, "error": error, "frames": frames}) + "\n")

"""Fixtures that run real `car-server` daemons: a fresh temp `CAR_HOME`, port 0, the
ready file for the address, stderr to a file. The binary is
`$CARGO_TARGET_DIR/debug/car-server` (default `<repo>/target`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

import pytest

import car_runtime

REPO = Path(__file__).resolve().parents[2]


def car_server_binary() -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    path = target / "debug" / "car-server"
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run `cargo build -p car-server`")
    return path


class Daemon:
    """One car-server process over a CAR_HOME; restartable on the same home. `extra_env`
    is added to the daemon's environment (e.g. `CAR_INFER_PROGRESS_MS`)."""

    def __init__(
        self,
        home: Path,
        debug_methods: bool = True,
        extra_env: Optional[Dict[str, str]] = None,
    ) -> None:
        self.home = home
        self.debug_methods = debug_methods
        self.extra_env = dict(extra_env or {})
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.ready: Dict[str, Any] = {}
        self.starts = 0

    @property
    def ready_file(self) -> Path:
        return self.home / "ready.json"

    @property
    def url(self) -> str:
        return str(self.ready["ws_url"])

    @property
    def token(self) -> str:
        return (self.home / "ai.parslee.car" / "auth-token").read_text().strip()

    @property
    def host_token(self) -> str:
        return (self.home / "ai.parslee.car" / "host-token").read_text().strip()

    def host_call(self, method: str, params: Dict[str, Any]) -> Any:
        """One call on a raw host session: for what the daemon lets only a host do and no
        binding member offers (`models.register` of a remote endpoint)."""
        from websockets.sync.client import connect

        with connect(self.url) as ws:
            auth = {"host_token": self.host_token}
            ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session.auth", "params": auth}))
            assert json.loads(ws.recv())["result"]["ok"] is True
            ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": method, "params": params}))
            while True:
                msg = json.loads(ws.recv())
                if msg.get("id") == 2:
                    assert "result" in msg, msg
                    return msg["result"]

    def env(self) -> Dict[str, str]:
        """The environment a client of this daemon runs with (and nothing else of ours)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("CAR_")}
        env["CAR_HOME"] = str(self.home)
        return env

    def start(self) -> "Daemon":
        self.ready_file.unlink(missing_ok=True)
        self.starts += 1
        args = [str(car_server_binary()), "--port", "0", "--ready-file", str(self.ready_file)]
        if self.debug_methods:
            args.append("--debug-methods")
        env = self.env()
        env["CAR_LOG"] = "info"
        env.update(self.extra_env)
        log = open(self.home / f"daemon-{self.starts}.log", "wb")
        self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"car-server exited with {self.proc.returncode}: {self.log()}")
            try:
                self.ready = json.loads(self.ready_file.read_text())
                return self
            except (FileNotFoundError, json.JSONDecodeError):
                time.sleep(0.02)
        raise RuntimeError(f"car-server did not become ready: {self.log()}")

    def log(self) -> str:
        path = self.home / f"daemon-{self.starts}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: the daemon dies without closing anything."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    """A fresh daemon (with debug methods) whose CAR_HOME this process's env points at,
    so `CarRuntime()` discovers it through the socket and token file."""
    home = tmp_path / "car-home"
    home.mkdir()
    d = Daemon(home).start()
    for k in list(os.environ):
        if k.startswith("CAR_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("CAR_HOME", str(home))
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def rt(daemon: Daemon) -> Iterator[car_runtime.CarRuntime]:
    runtime = car_runtime.CarRuntime()
    try:
        yield runtime
    finally:
        runtime.close()


@pytest.fixture(autouse=True)
def _no_process_handlers() -> Iterator[None]:
    """Process-wide handlers never leak from one test into the next."""
    yield
    car_runtime.unregister_tool_handler()
    car_runtime.unregister_tool_cancel_handler()
    car_runtime.unregister_chat_handler()
    car_runtime.unregister_agent_runner()
    car_runtime.set_memory_namespace(None)


def action(
    id: str, tool: str, params: Optional[Dict[str, Any]] = None, **extra: Any
) -> Dict[str, Any]:
    a: Dict[str, Any] = {"id": id, "type": "tool_call", "tool": tool, "parameters": params or {}}
    a.update(extra)
    return a


def proposal(*actions: Dict[str, Any]) -> str:
    return json.dumps({"actions": list(actions)})

"""Fixtures for the MCP interop tests: a real ``car-server`` with its MCP endpoint on a free
port, in a temporary ``CAR_HOME``, and the ``car-mcp`` stdio binary's path.

``CAR_SERVER_BIN`` and ``CAR_MCP_BIN`` name the binaries (default: ``target/debug`` of this
repository). The daemon's readiness is its ``--ready-file``; nothing here sleeps for a fixed
time.
"""

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRUBBED = (
    "CAR_HOME", "CAR_AUTH_TOKEN", "CAR_AUTH_TOKEN_FILE", "CAR_NO_AUTH", "CAR_SERVER_SOCKET",
    "CAR_DAEMON_URL", "CAR_MEMORY_NAMESPACE", "CAR_MCP_BIND", "CAR_MCP_ENABLE_MUTATIONS",
    "XDG_RUNTIME_DIR",
)


def _bin(var, name):
    path = Path(os.environ.get(var) or REPO / "target" / "debug" / name)
    if not path.exists():
        pytest.fail(f"{name} not found at {path}: build it or set {var}")
    return str(path)


class RunningDaemon:
    def __init__(self, home, ready, proc):
        self.home = home
        self.proc = proc
        self.ws_url = ready["ws_url"]
        self.mcp_url = ready["mcp_url"]

    @property
    def token(self):
        return (self.home / "ai.parslee.car" / "auth-token").read_text().strip()

    def client_env(self):
        """The environment a ``car-mcp`` child gets: this daemon, nothing inherited."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "CAR_HOME": str(self.home),
            "CAR_DAEMON_URL": self.ws_url,
            "CAR_LOG": "debug",
        }


@pytest.fixture(scope="session")
def daemon():
    scratch = Path(tempfile.mkdtemp(prefix="car-mcp-py-"))
    home = scratch / "car-home"
    ready_path = scratch / "ready.json"
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(CAR_HOME=str(home), XDG_RUNTIME_DIR=str(scratch), CAR_LOG="info")
    stderr = open(scratch / "stderr.log", "wb")
    proc = subprocess.Popen(
        [_bin("CAR_SERVER_BIN", "car-server"), "--port", "0", "--ready-file", str(ready_path),
         "--dashboard-port", "0", "--mcp-bind", "127.0.0.1:0"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
    )
    ready = None
    while ready is None:
        if proc.poll() is not None:
            pytest.fail(f"car-server exited ({proc.returncode}):\n{(scratch / 'stderr.log').read_text()}")
        try:
            ready = json.loads(ready_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            time.sleep(0.02)
    if not ready.get("mcp_url"):
        proc.kill()
        pytest.fail(f"car-server announced no mcp_url: {ready}")
    yield RunningDaemon(home, ready, proc)
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    stderr.close()


@pytest.fixture(scope="session")
def car_mcp_bin():
    return _bin("CAR_MCP_BIN", "car-mcp")

"""Benchmark: `daemon_call` round trip vs a pure-Python `websockets` client doing the same
JSON-RPC call to the same daemon in the same run, plus the callback round trip through
`execute_proposal`. Prints p50/p99 and the ratios; asserts nothing about speed.

    python bench.py [--calls N] [--car-server PATH]

Starts its own car-server (temp CAR_HOME, port 0) unless CAR_BENCH_URL/CAR_HOME name one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, List

from websockets.sync.client import connect

from car_runtime import CarRuntime

REPO = Path(__file__).resolve().parents[1]


def percentile(samples: List[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(n: int, once: Callable[[], object]) -> List[float]:
    for _ in range(min(200, n)):  # warm-up
        once()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        once()
        out.append((time.perf_counter() - t) * 1e6)
    return out


def report(name: str, samples: List[float]) -> float:
    p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
    print(f"{name:<44} p50 {p50:8.1f} us   p99 {p99:8.1f} us   mean {statistics.mean(samples):8.1f} us")
    return p50


class RawClient:
    """A minimal JSON-RPC client over `websockets` (sync API): auth, handshake, calls."""

    def __init__(self, url: str, token: str) -> None:
        self.stack = contextlib.ExitStack()
        self.ws = self.stack.enter_context(connect(url, max_size=None))
        self.next_id = 0
        self.call("session.auth", {"token": token})
        self.call("server.handshake", {
            "protocol_version": 3,
            "client_version": "bench-websockets",
            "required_capabilities": ["infer.model-identity.v1", "models.catalog-identity.v1"],
        })

    def call(self, method: str, params: object) -> object:
        self.next_id += 1
        self.ws.send(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                                 "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(msg["error"])
                return msg["result"]

    def close(self) -> None:
        self.stack.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=5000)
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    ap.add_argument("--car-server", default=str(target / "debug" / "car-server"))
    args = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="car-bench-"))
    ready = home / "ready.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAR_")}
    env.update(CAR_HOME=str(home), CAR_LOG="warn")
    with open(home / "daemon.log", "wb") as log:
        proc = subprocess.Popen([args.car_server, "--port", "0", "--ready-file", str(ready)],
                                env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() or not ready.read_text().strip():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"car-server did not start: {(home / 'daemon.log').read_text()}")
            time.sleep(0.02)
        info = json.loads(ready.read_text())
        token = (home / "ai.parslee.car" / "auth-token").read_text().strip()
        params = json.dumps({"key": "bench"})
        print(f"car-server {args.car_server} ({args.calls} calls each)\n")

        rt = CarRuntime(info["ws_url"], token=token)
        rt.state_set("bench", '{"v": 1}')
        py_ws = report("CarRuntime.daemon_call state.get (ws)",
                       measure(args.calls, lambda: rt.daemon_call("state.get", params)))

        raw = RawClient(info["ws_url"], token)
        raw.call("state.set", {"key": "bench", "value": {"v": 1}})
        raw_ws = report("websockets client state.get (ws)",
                        measure(args.calls, lambda: raw.call("state.get", {"key": "bench"})))
        raw.close()

        os.environ["CAR_HOME"] = str(home)
        sock_rt = CarRuntime()  # discovery prefers the daemon's Unix socket
        sock_rt.state_set("bench", '{"v": 1}')
        py_uds = report("CarRuntime.daemon_call state.get (socket)",
                        measure(args.calls, lambda: sock_rt.daemon_call("state.get", params)))

        plan = json.dumps({"actions": [{"id": "a", "type": "tool_call", "tool": "echo",
                                        "parameters": {"x": 1}}]})
        n = max(100, args.calls // 10)
        cb = report("execute_proposal, 1 tool callback",
                    measure(n, lambda: rt.execute_proposal(plan, lambda c: '"ok"')))
        plan3 = json.dumps({"actions": [
            {"id": f"a{i}", "type": "tool_call", "tool": "echo", "dependencies":
             [f"a{i - 1}"] if i else []} for i in range(3)]})
        cb3 = report("execute_proposal, 3 sequential callbacks",
                     measure(n, lambda: rt.execute_proposal(plan3, lambda c: '"ok"')))
        print()
        print(f"ratio daemon_call p50 / websockets p50 (same ws transport): {py_ws / raw_ws:.2f}")
        print(f"ratio daemon_call p50 over the socket / websockets p50:     {py_uds / raw_ws:.2f}")
        print(f"callback round trip (per extra callback, p50):             {(cb3 - cb) / 2:.1f} us")
        rt.close()
        sock_rt.close()
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()

"""Benchmark: `daemon_call` round trip vs a pure-Python `websockets` client doing the same
JSON-RPC call to the same daemon in the same run, plus the `tools.execute` callback round
trip. Prints p50/p99 and the ratios; asserts nothing about speed.

    python bench.py [--calls N] [--car-server PATH]

Starts its own car-server (temporary CAR_HOME, removed afterwards, port 0): `--car-server`,
else `CAR_SERVER_BIN`, else `$CARGO_TARGET_DIR/release/car-server` when it exists (the figures
to quote), else the debug one. The binding and the plain client alternate in blocks so a
shared machine's drift reaches both.

Callback RTT: one proposal of 20 sequential tool actions, run by `execute_proposal`; the time
between one callback returning and the next one starting is a full reverse round trip
(result to the daemon, the daemon schedules the next action, `tools.execute` back to the
client, the binding reaches Python). Its p50 is compared with the plain call's p50.

`scripts/bench` runs this as its `python` component: with `CAR_BENCH_OUT` it writes its
metrics there as JSON, and `CAR_BENCH_QUICK=1` asks for a reduced run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import shutil
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


def callback_intervals(rt: CarRuntime, actions: int, reps: int) -> List[float]:
    """Gaps between consecutive tool callbacks of sequential proposals, in µs."""
    plan = json.dumps({"actions": [
        {"id": f"a{i}", "type": "tool_call", "tool": "echo", "parameters": {"i": i},
         "dependencies": [f"a{i - 1}"] if i else []} for i in range(actions)]})
    gaps: List[float] = []
    for _ in range(reps + 1):  # the first run warms up
        marks: List[float] = []

        def tool(call: object) -> str:
            marks.append(time.perf_counter())
            return '"ok"'

        rt.execute_proposal(plan, tool)
        if _:
            # The tool returns at once, so entry-to-entry is the reverse round trip.
            gaps += [(marks[i] - marks[i - 1]) * 1e6 for i in range(1, len(marks))]
    return gaps


def default_server() -> str:
    if os.environ.get("CAR_SERVER_BIN"):
        return os.environ["CAR_SERVER_BIN"]
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    release = target / "release" / "car-server"
    return str(release if release.exists() else target / "debug" / "car-server")


def main() -> None:
    quick = os.environ.get("CAR_BENCH_QUICK") == "1"
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=400 if quick else 6000)
    ap.add_argument("--car-server", default=default_server())
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="car-bench-"))
    try:
        run(args, home, quick)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run(args: argparse.Namespace, home: Path, quick: bool) -> None:
    ready = home / "ready.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAR_")}
    env.update(CAR_HOME=str(home), CAR_LOG="warn")
    with open(home / "daemon.log", "wb") as log:
        proc = subprocess.Popen([args.car_server, "--port", "0", "--ready-file", str(ready),
                                 "--mcp-bind", "disabled", "--no-dashboard"],
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
        print(f"car-server {args.car_server} ({args.calls} calls per series)\n")

        rt = CarRuntime(info["ws_url"], token=token)
        rt.state_set("bench", '{"v": 1}')
        raw = RawClient(info["ws_url"], token)
        os.environ["CAR_HOME"] = str(home)
        sock_rt = CarRuntime()  # discovery prefers the daemon's Unix socket
        sock_rt.state_set("bench", '{"v": 1}')

        series = {"binding": [], "websockets": [], "socket": []}
        calls = {
            "binding": lambda: rt.daemon_call("state.get", params),
            "websockets": lambda: raw.call("state.get", {"key": "bench"}),
            "socket": lambda: sock_rt.daemon_call("state.get", params),
        }
        blocks = 4
        for b in range(blocks):
            order = list(calls) if b % 2 == 0 else list(reversed(list(calls)))
            for name in order:
                series[name] += measure(max(1, args.calls // blocks), calls[name])
        py_ws = report("CarRuntime.daemon_call state.get (ws)", series["binding"])
        raw_ws = report("websockets client state.get (ws)", series["websockets"])
        py_uds = report("CarRuntime.daemon_call state.get (socket)", series["socket"])
        gaps = callback_intervals(rt, 20, 2 if quick else 15)
        cb = report("tools.execute callback round trip", gaps)
        raw.close()
        print()
        print(f"ratio daemon_call p50 / websockets p50 (same ws transport): {py_ws / raw_ws:.2f}")
        print(f"ratio daemon_call p50 over the socket / websockets p50:     {py_uds / raw_ws:.2f}")
        print(f"ratio callback round trip p50 / daemon_call p50:            {cb / py_ws:.2f}")
        rt.close()
        sock_rt.close()
        out = os.environ.get("CAR_BENCH_OUT")
        if out:
            us = lambda v: {"value": round(v, 1), "unit": "µs"}  # noqa: E731
            ratio = lambda v: {"value": round(v, 3), "unit": "ratio"}  # noqa: E731
            Path(out).write_text(json.dumps({"component": "python", "metrics": {
                "call_p50_us": us(py_ws),
                "call_p99_us": us(percentile(series["binding"], 0.99)),
                "websockets_p50_us": us(raw_ws),
                "call_p50_over_websockets": ratio(py_ws / raw_ws),
                "uds_call_p50_us": us(py_uds),
                "uds_call_p50_over_websockets": ratio(py_uds / raw_ws),
                "callback_rtt_p50_us": us(cb),
                "callback_over_call": ratio(cb / py_ws),
            }}))
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()

"""Memory per idle connection of a running-from-scratch car-server (see scripts/bench-connections).

Opens N connections (100 at a time), each `session.auth` + `server.handshake`, waits a
second, reads VmRSS from /proc, then has every connection answer `memory.fact_count`, and
reads it again. The baseline is the RSS after one connection came and went (code pages,
engines and caches already touched). Prints one JSON object; `scripts/bench` runs this as its
`connections` component, and with `CAR_BENCH_OUT` the metrics also go there (the same N in
its quick run: opening 1,000 connections takes seconds). The daemon's CAR_HOME is a
temporary directory removed afterwards.
"""

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time

import websockets

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
BIN = os.environ["CAR_SERVER_BIN"]


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def call(ws, id_, method, params):
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}))
    reply = json.loads(await ws.recv())
    if "result" not in reply:
        raise RuntimeError(f"{method}: {reply}")
    return reply["result"]


async def open_one(url: str, token: str):
    ws = await websockets.connect(url, max_size=None, open_timeout=60)
    await call(ws, 1, "session.auth", {"token": token})
    await call(ws, 2, "server.handshake", {"protocol_version": 3})
    return ws


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="car-bench-conn-") as home:
        await measure(home)


async def measure(home: str) -> None:
    ready = os.path.join(home, "ready.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAR_")}
    env.update(CAR_HOME=home, XDG_RUNTIME_DIR=home, CAR_LOG="warn")
    args = [BIN, "--port", "0", "--ready-file", ready, "--mcp-bind", "disabled",
            "--dashboard-port", "0", "--idle-timeout", "3600s"]
    daemon = subprocess.Popen(args, env=env, stderr=subprocess.DEVNULL)
    try:
        while not os.path.exists(ready):
            time.sleep(0.02)
        url = json.load(open(ready))["ws_url"]
        token = open(os.path.join(home, "ai.parslee.car", "auth-token")).read().strip()
        first = await open_one(url, token)
        await first.close()
        await asyncio.sleep(0.5)
        base = rss_kib(daemon.pid)
        conns = []
        while len(conns) < N:
            batch = min(100, N - len(conns))
            conns += await asyncio.gather(*[open_one(url, token) for _ in range(batch)])
        await asyncio.sleep(1.0)
        idle = rss_kib(daemon.pid)
        answers = await asyncio.gather(*[call(ws, 3, "memory.fact_count", None) for ws in conns])
        after = rss_kib(daemon.pid)
        figures = {
            "connections": N,
            "answered": sum(1 for a in answers if a == 0),
            "rss_base_kib": base,
            "rss_idle_kib": idle,
            "idle_kib_per_connection": round((idle - base) / N, 1),
            "after_one_call_kib_per_connection": round((after - base) / N, 1),
        }
        print(json.dumps(figures))
        if os.environ.get("CAR_BENCH_OUT"):
            units = {"connections": "", "answered": "", "rss_base_kib": "KiB", "rss_idle_kib": "KiB",
                     "idle_kib_per_connection": "KiB", "after_one_call_kib_per_connection": "KiB"}
            with open(os.environ["CAR_BENCH_OUT"], "w") as out:
                json.dump({"component": "connections", "metrics": {
                    k: {"value": v, "unit": units[k]} for k, v in figures.items()}}, out)
        for ws in conns:
            await ws.close()
    finally:
        daemon.terminate()
        daemon.wait()


asyncio.run(main())

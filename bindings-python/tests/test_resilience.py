"""Acceptance 3, 4 and 6 plus the GIL and Ctrl-C rules: concurrency, daemon death and
restart, signals, fork."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import List

import pytest

from car_runtime import CarRuntime, ClientClosedError, DaemonConnectionError

from conftest import Daemon


def test_sixteen_threads_times_two_hundred_calls(rt: CarRuntime) -> None:
    errors: List[BaseException] = []
    counts = [0] * 16

    def worker(i: int) -> None:
        try:
            for n in range(200):
                key = f"t{i}"
                rt.state_set(key, str(n))
                if n % 2:
                    assert rt.state_get(key) == str(n)
                counts[i] += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    assert counts == [200] * 16
    assert len(rt.state_keys()) == 16


def test_a_blocking_call_releases_the_gil(rt: CarRuntime) -> None:
    ticks = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=spin)
    t.start()
    try:
        rt.daemon_call("debug.sleep", '{"ms": 500}')
    finally:
        stop.set()
        t.join()
    # Held GIL would starve the spinner for the whole half second.
    assert ticks > 50


def test_daemon_death_fails_a_pending_call_and_restart_recovers(
    rt: CarRuntime, daemon: Daemon
) -> None:
    rt.state_set("k", "1")
    epoch = rt.connection_epoch()
    failure: List[BaseException] = []
    started = threading.Event()

    def blocked() -> None:
        started.set()
        try:
            rt.daemon_call("debug.sleep", '{"ms": 600000}')
        except BaseException as e:  # noqa: BLE001 - inspected below
            failure.append(e)

    t = threading.Thread(target=blocked)
    t.start()
    started.wait()
    time.sleep(0.3)
    daemon.kill()
    # The sleep would last ten minutes: only the dead connection can end it. The join's
    # bound only keeps a broken build from hanging the suite.
    t.join(60)
    assert not t.is_alive(), "the pending call outlived the daemon"
    assert failure and isinstance(failure[0], ConnectionError), failure
    assert isinstance(failure[0], DaemonConnectionError)
    assert not isinstance(failure[0], ClientClosedError)
    with pytest.raises(ConnectionError):
        rt.state_keys()
    daemon.start()  # same CAR_HOME: same socket path, new token
    assert rt.state_keys() == []
    assert rt.connection_epoch() > epoch
    rt.state_set("k", "2")
    assert rt.state_get("k") == "2"


CTRL_C_SCRIPT = """
import sys
from car_runtime import CarRuntime
rt = CarRuntime()
rt.state_keys()
print("calling", flush=True)
try:
    rt.daemon_call("debug.sleep", '{"ms": 600000}')
except KeyboardInterrupt:
    print("interrupted", flush=True)
    rt.state_set("after", "1")
    print("still works", rt.state_get("after"), flush=True)
    sys.exit(0)
sys.exit(3)
"""


def test_ctrl_c_interrupts_a_blocking_call(daemon: Daemon) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_SCRIPT],
        env=daemon.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "calling"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    # The sleep lasts ten minutes, so only the interrupt can end the call in time; the
    # bound only keeps a broken build from hanging the suite.
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, err)
    assert "interrupted" in out
    assert "still works 1" in out


def test_fork_child_gets_a_working_client(rt: CarRuntime) -> None:
    rt.state_set("parent", "1")
    rt.execute_proposal(
        json.dumps({"actions": [{"id": "a", "type": "tool_call", "tool": "t"}]}),
        lambda c: '"parent"',
    )
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report through the pipe, never return into pytest
        status = 1
        try:
            fresh = CarRuntime()
            fresh.state_set("child", "2")
            inherited = rt.state_keys()  # the parent's runtime, rebuilt for this process
            reply = json.loads(fresh.execute_proposal(
                json.dumps({"actions": [{"id": "a", "type": "tool_call", "tool": "t"}]}),
                lambda c: '"child"',
            ))
            os.write(write, json.dumps(
                {"inherited": inherited, "output": reply["results"][0]["output"]}
            ).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        assert time.monotonic() < deadline, "forked child hung"
        time.sleep(0.05)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    assert os.waitstatus_to_exitcode(status) == 0
    report = json.loads(data)
    # Each connection has its own state partition: the child's reconnected runtime sees
    # an empty one.
    assert report == {"inherited": [], "output": "child"}
    # The parent keeps working, callbacks included.
    assert rt.state_get("parent") == "1"
    reply = json.loads(rt.execute_proposal(
        json.dumps({"actions": [{"id": "a", "type": "tool_call", "tool": "t"}]}),
        lambda c: '"parent again"',
    ))
    assert reply["results"][0]["output"] == "parent again"

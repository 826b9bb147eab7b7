"""Acceptance 8: every example in examples/python runs to completion against a fresh
daemon."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO, Daemon

EXAMPLES = sorted((REPO / "examples" / "python").glob("*.py"))
# Read before the daemon fixture strips CAR_* from this process's environment.
TEST_GGUF = os.environ.get("CAR_TEST_GGUF", "")


def test_the_examples_exist() -> None:
    assert {p.stem for p in EXAMPLES} >= {"hello", "file_agent", "memory_skills", "local_agent"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_to_completion(example: object, daemon: Daemon) -> None:
    env = daemon.env()
    # The local-model example reads the test model's path as a user would after
    # `eval "$(scripts/fetch-models)"`.
    assert TEST_GGUF, "CAR_TEST_GGUF is not set: run `eval \"$(scripts/fetch-models)\"` first"
    env["CAR_TEST_GGUF"] = TEST_GGUF
    proc = subprocess.run(
        [sys.executable, str(example)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith("done"), proc.stdout

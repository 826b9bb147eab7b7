"""Acceptance 8: every example in examples/python runs to completion against a fresh
daemon."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, Daemon

EXAMPLES = sorted((REPO / "examples" / "python").glob("*.py"))


def test_the_examples_exist() -> None:
    assert {p.stem for p in EXAMPLES} >= {"hello", "file_agent", "memory_skills"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_to_completion(example: object, daemon: Daemon) -> None:
    proc = subprocess.run(
        [sys.executable, str(example)],
        env=daemon.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith("done"), proc.stdout

"""An agent with real file tools, guarded by daemon policies.

The tools read, write and list files inside a sandbox directory. Policies registered on
the daemon deny deleting files outright and deny writes of shell scripts; the
daemon rejects those actions before the tool is ever called.

Run against a running daemon: `python examples/python/file_agent.py [sandbox-dir]`.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict

from car_runtime import CarRuntime, TerminalToolError


class FileTools:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path(self, rel: str) -> Path:
        path = (self.root / rel).resolve()
        if self.root not in path.parents and path != self.root:
            # Escaping the sandbox is never going to work on a retry.
            raise TerminalToolError(f"path escapes the sandbox: {rel}")
        return path

    def __call__(self, call_json: str) -> str:
        """One-argument form: gets the whole call (`tool`, `params`, `action_id`, …)."""
        call: Dict[str, Any] = json.loads(call_json)
        params = call["params"]
        tool = call["tool"]
        if tool == "write_file":
            path = self._path(params["path"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(params["content"])
            return json.dumps({"written": len(params["content"])})
        if tool == "read_file":
            return json.dumps({"content": self._path(params["path"]).read_text()})
        if tool == "list_dir":
            entries = sorted(p.name for p in self._path(params.get("path", ".")).iterdir())
            return json.dumps({"entries": entries})
        if tool == "delete_file":
            self._path(params["path"]).unlink()
            return json.dumps({"deleted": True})
        raise ValueError(f"unknown tool {tool}")


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="car-agent-"))
    tools = FileTools(root)
    with CarRuntime() as rt:
        for name in ("write_file", "read_file", "list_dir", "delete_file"):
            rt.register_tool(name)
        rt.register_policy("no-deletes", "deny_tool", target="delete_file")
        rt.register_policy("no-scripts", "deny_tool_param", target="write_file",
                           key="path", pattern=r"\.(sh|py)$")

        plan = {"actions": [
            {"id": "note", "type": "tool_call", "tool": "write_file",
             "parameters": {"path": "notes/todo.txt", "content": "ship the python binding"}},
            {"id": "list", "type": "tool_call", "tool": "list_dir",
             "parameters": {"path": "notes"}, "dependencies": ["note"]},
            {"id": "read", "type": "tool_call", "tool": "read_file",
             "parameters": {"path": "notes/todo.txt"}, "dependencies": ["note"]},
        ]}
        result = json.loads(rt.execute_proposal(json.dumps(plan), tools))
        print("listing:", result["outputs"]["list"])
        print("read back:", result["outputs"]["read"])
        assert result["outputs"]["read"] == {"content": "ship the python binding"}

        risky = {"actions": [
            {"id": "delete", "type": "tool_call", "tool": "delete_file",
             "parameters": {"path": "notes/todo.txt"}, "failure_behavior": "skip"},
            {"id": "script", "type": "tool_call", "tool": "write_file",
             "parameters": {"path": "run.sh", "content": "rm -rf /"}, "failure_behavior": "skip"},
        ]}
        outcome = json.loads(rt.execute_proposal(json.dumps(risky), tools))
        statuses = {r["action_id"]: r["status"] for r in outcome["results"]}
        print("policy verdicts:", statuses)
        assert statuses == {"delete": "rejected", "script": "rejected"}
        assert (root / "notes" / "todo.txt").exists() and not (root / "run.sh").exists()
        print("done")


if __name__ == "__main__":
    main()

"""Hello, car-runtime: state, a fact, verify, and a proposal whose tool runs in Python.

Run against a running daemon (`car-server`): `python examples/python/hello.py`.
"""

from __future__ import annotations

import json

from car_runtime import CarRuntime


def greet(tool: str, params_json: str) -> str:
    """The tool the daemon calls back: two-argument form (tool name, params JSON)."""
    name = json.loads(params_json)["name"]
    return json.dumps({"greeting": f"hello, {name}"})


def main() -> None:
    with CarRuntime() as rt:
        rt.state_set("visitor", json.dumps("Ada"))
        print("state:", rt.state_get("visitor"))

        count = rt.add_fact("car-runtime", "the daemon calls tools back on the client", "fact")
        print("facts:", count)

        plan = {
            "actions": [
                {"id": "greet", "type": "tool_call", "tool": "greet",
                 "parameters": {"name": "Ada"}, "failure_behavior": "abort"},
                {"id": "remember", "type": "state_write", "key": "greeted",
                 "value": True, "dependencies": ["greet"]},
            ]
        }
        rt.register_tool("greet")
        verdict = json.loads(rt.verify_proposal(json.dumps(plan)))
        print("valid:", verdict["valid"], "levels:", verdict["execution_levels"])
        assert verdict["valid"], verdict["issues"]

        result = json.loads(rt.execute_proposal(json.dumps(plan), greet))
        print("output:", result["outputs"]["greet"])
        assert result["outputs"]["greet"] == {"greeting": "hello, Ada"}
        assert rt.state_get("greeted") == "true"
        print("done")


if __name__ == "__main__":
    main()

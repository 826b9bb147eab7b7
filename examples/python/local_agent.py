"""An agent on a local model, offline: SmolLM2-135M-Instruct (a GGUF file) answers a
question with a real tool, through the agent loop every binding shares.

The loop asks the model for one tool call each turn (`tool_choice: "required"`,
`parallel_tool_calls: False`; the daemon constrains decoding with a grammar built from the
tool schemas, so every call parses and its arguments match the schema), runs the call
through this program's `multiply`, lets the model read the result, and ends when the model
calls `finish`. Greedy decoding (`temperature: 0`) makes the run repeatable. A 135-million-parameter model is a small
reasoner: what it shows here is the mechanics, the tool doing the arithmetic.

Run against a running daemon, with the model file from `eval "$(scripts/fetch-models)"`:
`python examples/python/local_agent.py [path/to/model.gguf]` (default: `$CAR_TEST_GGUF`).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List

from car_runtime import CarRuntime, agent_loop


def main() -> None:
    gguf = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CAR_TEST_GGUF", "")
    if not gguf or not os.path.exists(gguf):
        sys.exit('give the GGUF path, or run `eval "$(scripts/fetch-models)"` first')
    calls: List[Dict[str, Any]] = []

    def multiply(params: Dict[str, Any]) -> str:
        calls.append(params)
        product = params["a"] * params["b"]
        # A result that says what comes next keeps a small model from calling again.
        return f"The product is {product}. Call finish with answer {product}."

    with CarRuntime() as rt:
        rt.register_model(json.dumps({"id": "smollm2-local", "path": gguf}))
        outcome = agent_loop.run_agent(
            {
                "agent_name": "calculator",
                "identity": "You are a calculator. Use the multiply tool to compute products, "
                "then call finish with the result.",
                "tool_schemas": [{
                    "name": "multiply",
                    "description": "Multiply two numbers a and b.",
                    "parameters": {
                        "type": "object",
                        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                        "required": ["a", "b"],
                    },
                }],
                "tools": {"multiply": multiply},
                "default_model": "smollm2-local",
                "max_tokens": 96,
                "max_turns": 4,
                "tool_choice": "required",
                "parallel_tool_calls": False,
                "temperature": 0,
                "runtime": rt,
            },
            "What is 17 times 23?",
        )
        print("tool calls:", calls)
        print("status:", outcome["status"], "| tools called:", outcome["tools_called"])
        print("answer:", outcome["summary"])
        assert calls and calls[0] == {"a": 17, "b": 23}, calls
        assert outcome["tools_called"] == ["multiply", "finish"], outcome
    print("done")


if __name__ == "__main__":
    main()

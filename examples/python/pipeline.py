"""Two agents in a pipeline on a local model, offline: a writer drafts a one-line product
name and a critic improves it, each stage reading the previous stage's answer. The daemon
runs the coordination (`multi.pipeline`); each agent runs on this program's agent runner,
which answers with the daemon's local model (SmolLM2-135M-Instruct, a GGUF file) through
`infer`. Greedy decoding makes the run repeatable.

Without `register_agent_runner` the daemon would run the agents on its own model too
(beyond CAR); the runner here shows where a program plugs in its own model or loop.

Run against a running daemon, with the model file from `eval "$(scripts/fetch-models)"`:
`python examples/python/pipeline.py [path/to/model.gguf]` (default: `$CAR_TEST_GGUF`).
"""

from __future__ import annotations

import json
import os
import sys

import car_runtime
from car_runtime import CarRuntime

MODEL = "smollm2-pipeline"


def main() -> None:
    gguf = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CAR_TEST_GGUF", "")
    if not gguf or not os.path.exists(gguf):
        sys.exit('give the GGUF path, or run `eval "$(scripts/fetch-models)"` first')
    with CarRuntime() as rt:
        rt.register_model(json.dumps({"id": MODEL, "path": gguf}))

        def run_agent(spec_json: str, task: str) -> str:
            spec = json.loads(spec_json)
            reply = json.loads(
                rt.daemon_call(
                    "infer",
                    json.dumps({"model": MODEL, "system": spec["system_prompt"], "prompt": task, "max_tokens": 24, "temperature": 0.0}),
                )
            )
            usage = reply.get("usage", {})
            return json.dumps(
                {
                    "name": spec["name"],
                    "answer": reply["text"].strip(),
                    "turns": 1,
                    "tool_calls": 0,
                    "duration_ms": reply.get("latency_ms", 0.0),
                    "tokens": {"input_tokens": usage.get("prompt_tokens", 0), "output_tokens": usage.get("completion_tokens", 0)},
                }
            )

        car_runtime.register_agent_runner(run_agent)
        stages = [
            {"name": "writer", "system_prompt": "You invent short product names. Reply with one name."},
            {"name": "critic", "system_prompt": "You improve product names. Reply with one better name."},
        ]
        result = json.loads(car_runtime.run_pipeline(json.dumps(stages), "A name for a solar-powered kettle."))
        for stage in result["stages"]:
            tokens = stage.get("tokens") or {}
            print(f"{stage['name']}: {stage['answer']!r} ({tokens.get('output_tokens', 0)} tokens)")
            if stage["error"]:
                sys.exit(f"stage {stage['name']} failed: {stage['error']}")
        print("final:", result["final_answer"])
        car_runtime.unregister_agent_runner()
    print("done")


if __name__ == "__main__":
    main()

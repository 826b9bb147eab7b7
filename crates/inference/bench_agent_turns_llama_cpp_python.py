#!/usr/bin/env python3
"""llama-cpp-python on the prompts of `cargo bench -p car-inference --bench agent_turns`:
time to first token at each turn of the same 10-turn tool-calling conversation, with
llama-cpp-python's own prompt-prefix reuse (a `Llama` keeps the tokens it evaluated last and
evaluates only what a new prompt adds to them) and cold (`reset()` before the call).

    CAR_BENCH_PROMPTS=/tmp/prompts.json cargo bench -p car-inference --bench agent_turns
    CAR_BENCH_PROMPTS=/tmp/prompts.json python3 crates/inference/bench_agent_turns_llama_cpp_python.py

(`scripts/bench-agent-turns --llama-cpp-python` runs both.) Env: CAR_TEST_GGUF and
CAR_BENCH_PROMPTS (required), CAR_BENCH_RUNS (default 3). The thread count and token budget
come from the prompts file, so both engines run alike. Time to first token is from the
call to the first streamed chunk, greedy decoding, as the Rust benchmark measures it.
"""

import json
import os
import statistics
import sys
import time


def first_token_ms(llm, prompt: str, max_tokens: int) -> float:
    started = time.perf_counter()
    first = None
    for _ in llm.create_completion(
        prompt, max_tokens=max_tokens, temperature=0.0, stream=True
    ):
        if first is None:
            first = time.perf_counter()
    return ((first or time.perf_counter()) - started) * 1000


def main() -> int:
    try:
        from llama_cpp import Llama
    except ImportError:
        print("llama-cpp-python is not installed: pip install llama-cpp-python", file=sys.stderr)
        return 2
    gguf = os.environ.get("CAR_TEST_GGUF")
    prompts_path = os.environ.get("CAR_BENCH_PROMPTS")
    if not gguf or not prompts_path:
        print("CAR_TEST_GGUF and CAR_BENCH_PROMPTS must be set (see the docstring)", file=sys.stderr)
        return 2
    with open(prompts_path) as f:
        doc = json.load(f)
    prompts, threads, max_tokens = doc["prompts"], doc["threads"], doc["max_tokens"]
    runs = max(1, int(os.environ.get("CAR_BENCH_RUNS", "3")))

    llm = Llama(
        model_path=gguf,
        n_threads=threads,
        n_threads_batch=threads,
        n_ctx=4096,
        n_batch=512,
        verbose=False,
    )
    first_token_ms(llm, "Hi", 1)

    warm = [[] for _ in prompts]
    cold = [[] for _ in prompts]
    for _ in range(runs):
        llm.reset()
        for i, prompt in enumerate(prompts):
            warm[i].append(first_token_ms(llm, prompt, max_tokens))
            llm.reset()
            cold[i].append(first_token_ms(llm, prompt, max_tokens))

    rows = []
    for i, prompt in enumerate(prompts):
        w, c = statistics.median(warm[i]), statistics.median(cold[i])
        n = len(llm.tokenize(prompt.encode(), special=True))
        print(
            f"turn {i + 1:>2}: prompt {n:>5} tokens  ttft reuse {w:>7.1f} ms  "
            f"cold {c:>7.1f} ms  ratio {w / c:.3f}"
        )
        rows.append({"turn": i + 1, "prompt_tokens": n, "ttft_reuse_ms": round(w, 1),
                     "ttft_cold_ms": round(c, 1)})
    print(json.dumps({"engine": "llama-cpp-python", "threads": threads, "turns": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""llama-cpp-python on the same GGUF, prompt, token budget and thread count as
`cargo bench -p car-inference --bench generate`, printing the same figures.

    pip install llama-cpp-python        # builds llama.cpp from source (slow on 2 cores)
    eval "$(scripts/fetch-models)"
    python3 crates/inference/bench_llama_cpp_python.py

Env: CAR_TEST_GGUF (required), CAR_BENCH_THREADS (default: all cores), CAR_BENCH_RUNS
(default 3), CAR_BENCH_TOKENS (default 128), CAR_BENCH_KEEP_CACHE (set to keep llama-cpp-python's
prompt-prefix reuse between runs).

Decode tokens/s counts streamed chunks after the first one (one chunk per token) over the
time from the first chunk to the end; time to first token is from the call to the first
chunk, the same definitions the Rust benchmark uses.
"""

import json
import os
import statistics
import sys
import time


def main() -> int:
    try:
        from llama_cpp import Llama
    except ImportError:
        print("llama-cpp-python is not installed: pip install llama-cpp-python", file=sys.stderr)
        return 2
    gguf = os.environ.get("CAR_TEST_GGUF")
    if not gguf:
        print('CAR_TEST_GGUF is not set: run eval "$(scripts/fetch-models)" first', file=sys.stderr)
        return 2
    threads = int(os.environ.get("CAR_BENCH_THREADS", os.cpu_count() or 2))
    runs = max(1, int(os.environ.get("CAR_BENCH_RUNS", "3")))
    max_tokens = int(os.environ.get("CAR_BENCH_TOKENS", "128"))

    load_started = time.perf_counter()
    llm = Llama(
        model_path=gguf,
        n_threads=threads,
        n_threads_batch=threads,
        n_ctx=1024,
        n_batch=512,
        # Same rendering as car-inference's llama.cpp chatml fallback/built-in template, so
        # both engines see the same prompt tokens.
        chat_format="chatml",
        verbose=False,
    )
    llm.create_chat_completion(
        messages=[{"role": "user", "content": "Hi"}], max_tokens=4
    )
    load_ms = (time.perf_counter() - load_started) * 1000

    decode, ttft = [], []
    tokens = 0
    for run in range(runs):
        # Drop the previous run's KV state: otherwise llama-cpp-python reuses the identical
        # prompt prefix and skips prompt processing, which car-inference (a fresh context per
        # request) never does. Set CAR_BENCH_KEEP_CACHE=1 to measure with reuse.
        if not os.environ.get("CAR_BENCH_KEEP_CACHE"):
            llm.reset()
        started = time.perf_counter()
        first = None
        chunks = 0
        stream = llm.create_chat_completion(
            messages=[
                {"role": "user", "content": "Write a long story about a dragon who learns to read."}
            ],
            max_tokens=max_tokens,
            temperature=0.8,
            top_p=0.95,
            top_k=0,
            min_p=0.0,
            repeat_penalty=1.0,
            seed=1234 + run,
            stream=True,
        )
        for chunk in stream:
            delta = chunk["choices"][0].get("delta", {})
            if delta.get("content"):
                if first is None:
                    first = time.perf_counter()
                chunks += 1
        ended = time.perf_counter()
        first = first or ended
        if ended > first and chunks > 1:
            decode.append((chunks - 1) / (ended - first))
        ttft.append((first - started) * 1000)
        tokens = chunks
        print(
            f"run {run}: {chunks} chunks, ttft {ttft[-1]:.1f} ms, "
            f"{decode[-1] if decode else 0:.1f} tok/s"
        )

    decode_tps = statistics.median(decode) if decode else 0.0
    ttft_ms = statistics.median(ttft)
    print(f"threads: {threads}")
    print(f"model_load_and_warmup_ms: {load_ms:.1f}")
    print(f"decode_tokens_per_s: {decode_tps:.1f}")
    print(f"time_to_first_token_ms: {ttft_ms:.1f}")
    print(
        json.dumps(
            {
                "engine": "llama-cpp-python",
                "threads": threads,
                "completion_tokens": tokens,
                "decode_tokens_per_s": round(decode_tps, 2),
                "time_to_first_token_ms": round(ttft_ms, 2),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A chat agent built on CAR's client alone, run as its own process by test_agents_chat.py
(in the interop venv, with `CAR_AGENT_ID`, `CAR_AGENT_TOKEN`, `CAR_DAEMON_URL` and
`CAR_HOME` set): `car_runtime.register_chat_handler` serves the daemon's `agent.chat`
reverse-calls and the reply streams back through `CarRuntime.chat_event`.

Every `agent.chat` params object the handler receives is appended, as one JSON line, to
the file named by `CHAT_AGENT_SEEN`. The prompt selects what the turn does:

- `hold`: one `token` and no terminal event (the turn stays in flight);
- `late:<session_id>`: a `token` on that other (cancelled) session, then `done` on its own;
- `boom`: the handler raises (CAR's bridge then ends the turn with `error`);
- `approval`: one `approval_pending` event and no terminal event;
- anything else: `token` "Hello, ", `token` "<prompt>", then `done` with the whole text.

It prints `READY` once its connection is up and runs until its stdin closes."""

from __future__ import annotations

import json
import os
import sys

import car_runtime

runtime = car_runtime.CarRuntime()
seen = open(os.environ["CHAT_AGENT_SEEN"], "a", buffering=1)


def handle(params_json: str) -> None:
    seen.write(params_json + "\n")
    params = json.loads(params_json)
    session_id, prompt = params["session_id"], params["prompt"]
    if prompt == "hold":
        runtime.chat_event(session_id, "token", "held")
    elif prompt.startswith("late:"):
        runtime.chat_event(prompt[len("late:"):], "token", "too late")
        runtime.chat_event(session_id, "done", "ok")
    elif prompt == "boom":
        raise RuntimeError("the handler failed")
    elif prompt == "approval":
        runtime.chat_event(session_id, "approval_pending", "write notes.txt")
    else:
        runtime.chat_event(session_id, "token", "Hello, ")
        runtime.chat_event(session_id, "token", prompt)
        runtime.chat_event(session_id, "done", "Hello, " + prompt)


car_runtime.register_chat_handler(handle)
runtime.fact_count()  # connects: session.auth {agent_id, token}
print("READY", flush=True)
sys.stdin.read()
runtime.close()

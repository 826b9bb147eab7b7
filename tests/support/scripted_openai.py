"""A scripted OpenAI-compatible chat endpoint for agent-loop tests (shared by the Python
binding suite and the interop suite; each imports it by path). It streams one tool call per
request: `add(2, 3)` first, then, once the request carries a `tool` message, `finish` with
an answer built from that tool result (`the sum is <sum>`, or `the tool failed: <what it
observed>` when the result holds no sum), so a passing test proves the tool's output
reached the model."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any, Dict, List


class ScriptedModel:
    """`answer_as_text=True` gives the answer as plain assistant text instead of a `finish`
    call (how a chat reply ends)."""

    def __init__(self, answer_as_text: bool = False) -> None:
        self.requests: List[Dict[str, Any]] = []
        model = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                model.requests.append(body)
                results = [m for m in body["messages"] if m["role"] == "tool"]
                if results:
                    observed = json.loads(results[-1]["content"])
                    if isinstance(observed, dict) and "sum" in observed:
                        answer = f"the sum is {observed['sum']}"
                    else:
                        answer = f"the tool failed: {results[-1]['content']}"
                    name, args = "finish", {"answer": answer}
                else:
                    name, args = "add", {"a": 2, "b": 3}
                call = {"index": 0, "id": f"call_{len(model.requests)}", "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)}}
                if name == "finish" and answer_as_text:
                    chunks = [
                        {"choices": [{"index": 0, "delta": {"content": args["answer"]}, "finish_reason": None}]},
                        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                    ]
                else:
                    chunks = [
                        {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]},
                        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
                    ]
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

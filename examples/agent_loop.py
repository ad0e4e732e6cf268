"""An agent loop: stream a response, let the gate run its calls, send the turn back.

Each request streams one response through the gate (``run_live``). The gate runs
the complete calls at most once and returns, in ``next_input``, everything the
next request needs appended to the conversation: the model's own turn (its
reasoning item, text and calls, as the stream delivered them) and one output per
call. The loop stops when a response asks for no call. Text is printed as it
streams (``on_text``), while the gate still holds the calls.

So that it runs offline in a second, the "model" is a small fake of the OpenAI
Responses API on loopback (``FakeResponses``): its first answer asks for the
weather in two cities; its second reads the two ``function_call_output`` items it
was sent back and answers in words. It refuses a request whose calls lack their
outputs, as the real API does. Against the real API only the URL and an
``Authorization`` header change.

Run it: ``python examples/agent_loop.py``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agent_gate import Gate, ToolRegistry
from agent_gate.gate.live import run_live

CITIES = {"Lisbon": 21, "Porto": 18}

# ----------------------------------------------------------------- the tools


def make_tools(ran: list[str]) -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(
        schema={"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"], "additionalProperties": False},
        effect="read",
    )
    def get_weather(city: str) -> dict[str, Any]:
        """Current temperature of a city."""
        ran.append(city)
        return {"city": city, "celsius": CITIES.get(city)}

    return tools


# ----------------------------------------------------------------- the fake model


def _sse(events: list[dict[str, Any]]) -> Iterator[bytes]:
    for seq, event in enumerate(events):
        event["sequence_number"] = seq
        yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def _message(index: int, item_id: str, text: str, pieces: int = 3) -> list[dict[str, Any]]:
    step = max(1, len(text) // pieces)
    chunks = [text[i:i + step] for i in range(0, len(text), step)]
    done = {"id": item_id, "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}
    return [
        {"type": "response.output_item.added", "output_index": index,
         "item": {**done, "status": "in_progress", "content": []}},
        *({"type": "response.output_text.delta", "item_id": item_id, "output_index": index,
           "content_index": 0, "delta": chunk} for chunk in chunks),
        {"type": "response.output_item.done", "output_index": index, "item": done},
    ]


def _call(index: int, call_id: str, city: str) -> list[dict[str, Any]]:
    arguments = json.dumps({"city": city})
    item = {"id": f"fc_{call_id}", "type": "function_call", "status": "completed",
            "call_id": call_id, "name": "get_weather", "arguments": arguments}
    return [
        {"type": "response.output_item.added", "output_index": index,
         "item": {**item, "status": "in_progress", "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "item_id": item["id"],
         "output_index": index, "delta": arguments},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def answer(request: dict[str, Any]) -> list[dict[str, Any]] | str:
    """The fake model: the events of its response, or why the request is refused."""
    items = request.get("input", [])
    calls = {i["call_id"] for i in items if i.get("type") == "function_call"}
    outputs = {i["call_id"]: i["output"] for i in items
               if i.get("type") == "function_call_output"}
    if calls != set(outputs):
        return "every function_call needs its function_call_output"
    start = {"type": "response.created", "response": {"id": f"resp_{len(items)}"}}
    end = {"type": "response.completed", "response": {"id": f"resp_{len(items)}",
                                                      "status": "completed"}}
    if not outputs:
        reasoning = {"id": "rs_1", "type": "reasoning", "summary": [],
                     "encrypted_content": "opaque-reasoning-state"}
        return [
            start,
            {"type": "response.output_item.added", "output_index": 0, "item": reasoning},
            {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
            *_message(1, "msg_1", "Let me check both cities."),
            *_call(2, "call_lisbon", "Lisbon"),
            *_call(3, "call_porto", "Porto"),
            end,
        ]
    readings = [json.loads(text) for text in outputs.values()]
    words = " and ".join(f"{r['celsius']} °C in {r['city']}" for r in readings)
    return [start, *_message(0, "msg_2", f"It is {words}."), end]


class FakeResponses:
    """``POST /v1/responses`` on loopback, streaming what ``answer`` says."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                events = answer(body)
                if isinstance(events, str):
                    payload = json.dumps({"error": {"message": events}}).encode()
                    self.send_response(400)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in _sse(events):
                    self.wfile.write(chunk)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1/responses"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# ----------------------------------------------------------------- the loop


def agent_loop(gate: Gate, url: str, question: str, task_id: str) -> dict[str, Any]:
    conversation: list[dict[str, Any]] = [{"role": "user", "content": question}]
    texts: list[str] = []
    streamed: list[str] = []

    def show(text: str) -> None:  # called while the response still streams
        streamed.append(text)
        print(text, end="", flush=True)

    for _turn in range(5):  # a bound, as every agent loop should have
        streamed.clear()
        live = run_live(
            gate, url, provider="openai-responses", task_id=task_id, method="POST",
            json={"model": "fake-model", "input": conversation, "stream": True},
            on_text=show,
        )
        print()
        if live.stream_error is not None or not live.completed:
            raise SystemExit(f"the response did not complete: {live.stream_error or live.error}")
        texts.append("".join(streamed))
        conversation += live.next_input("openai-responses")
        if not live.outcomes:
            break
    return {"conversation": conversation, "texts": texts}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="ledger URL (default: a fresh temporary SQLite file)")
    args = parser.parse_args(argv)
    db = args.db or f"sqlite:///{Path(tempfile.mkdtemp()) / 'agent_loop.db'}"
    print(f"ledger: {db}")
    ran: list[str] = []
    fake = FakeResponses()
    try:
        with Gate(make_tools(ran), db, create=True) as gate:
            report = agent_loop(gate, fake.url, "Weather in Lisbon and Porto?", "agent-loop")
    finally:
        fake.close()
    return {**report, "requests": fake.requests, "ran": ran}


if __name__ == "__main__":
    main()

"""``on_text``: the assistant's text reaches the caller while the response streams.

A real loopback server sends the first text delta, then holds the rest of the
response until the caller's ``on_text`` has seen that text. Were text handed over
only at the end, the server would still be waiting (until its deadlock guard
gives up) and the test would see the rest already sent.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.gate.live import run_live

GUARD_SECONDS = 60.0
"""How long the server waits for the caller before sending the rest anyway: only
a guard against a hung test, never what the assertion measures."""


def sse(payload: dict[str, Any]) -> bytes:
    return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode()


def response_events() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The first part (up to the first text delta) and the rest of one response."""
    msg = {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress",
           "content": []}
    call = {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1",
            "name": "get_weather", "arguments": '{"city": "Lisbon"}'}
    done_msg = {**msg, "status": "completed",
                "content": [{"type": "output_text", "text": "Looking it up.", "annotations": []}]}
    first = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0, "item": msg},
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
         "content_index": 0, "delta": "Looking "},
    ]
    rest = [
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
         "content_index": 0, "delta": "it up."},
        {"type": "response.output_item.done", "output_index": 0, "item": done_msg},
        {"type": "response.output_item.added", "output_index": 1,
         "item": {**call, "status": "in_progress", "arguments": ""}},
        {"type": "response.output_item.done", "output_index": 1, "item": call},
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}},
    ]
    for seq, event in enumerate([*first, *rest]):
        event["sequence_number"] = seq
    return first, rest


class HeldServer:
    """Serves one response: its first part, then the rest once ``release`` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.rest_sent = threading.Event()
        first, rest = response_events()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                self.wfile.write(b"".join(sse(e) for e in first))
                self.wfile.flush()
                outer.release.wait(GUARD_SECONDS)
                outer.rest_sent.set()
                self.wfile.write(b"".join(sse(e) for e in rest))
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1/responses"

    def __enter__(self) -> HeldServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[HeldServer]:
    with HeldServer() as held:
        yield held


@pytest.fixture
def gate(db_url: str) -> Iterator[Gate]:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object", "properties": {"city": {"type": "string"}}})
    def get_weather(city: str) -> dict[str, Any]:
        return {"city": city}

    with Gate(tools, db_url) as gate:
        yield gate


def test_text_arrives_while_the_server_still_holds_the_rest(
    gate: Gate, server: HeldServer
) -> None:
    seen: list[tuple[str, bool]] = []

    def on_text(text: str) -> None:
        seen.append((text, server.rest_sent.is_set()))
        server.release.set()

    live = run_live(gate, server.url, provider="openai-responses", task_id="t", on_text=on_text)
    assert seen == [("Looking ", False), ("it up.", True)]
    assert [o.state for o in live.outcomes] == [CallState.SUCCEEDED]
    assert live.next_input("openai-responses")[0]["content"][0]["text"] == "Looking it up."


def test_arun_hands_text_over_as_it_arrives(gate: Gate) -> None:
    first, rest = response_events()
    seen: list[str] = []
    fed: list[str] = []

    async def source() -> AsyncIterator[dict[str, Any]]:
        for event in [*first, *rest]:
            fed.append(event["type"])
            yield event

    def on_text(text: str) -> None:
        seen.append(f"{text}@{len(fed)}")

    asyncio.run(gate.arun(source(), task_id="a", provider="openai-responses", on_text=on_text))
    # Each fragment was handed over right after its own event, not at the end.
    assert seen == ["Looking @3", "it up.@4"]

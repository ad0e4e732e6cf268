"""The official SDKs' stream helpers, fed to agent-gate as their typed events.

A real loopback server answers the real ``openai`` and ``anthropic`` clients with
streams recorded from the real APIs (``tests/recorded``); each helper
(``client.responses.stream``, ``client.chat.completions.stream``,
``client.messages.stream``) yields its own typed events: the raw ones, and derived
ones (``ResponseFunctionCallArgumentsDeltaEvent`` with a snapshot, chat
``ChunkEvent`` / ``ContentDeltaEvent`` / ``FunctionToolCallArgumentsDeltaEvent``,
Anthropic ``TextEvent`` / ``InputJsonEvent``...). Reading them must not emit a
single warning in the host application (the OpenAI helpers' events made pydantic
warn on ``model_dump``), and they must give the calls the raw stream gives.
"""

from __future__ import annotations

import json
import sys
import threading
import tomllib
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import openai
import pydantic
import pytest

from agent_gate.accumulate import Accumulator, stream_calls
from agent_gate.calls import ToolCall

RECORDED = Path(__file__).resolve().parents[1] / "recorded"
sys.path.append(str(RECORDED))  # for bodies (a unique name)

from bodies import body  # noqa: E402

MANIFEST = {
    Path(f["file"]).name: f
    for f in tomllib.loads((RECORDED / "MANIFEST.toml").read_text("utf-8"))["fixture"]
}


def recorded(name: str) -> bytes:
    fixture = MANIFEST[name]
    return body((RECORDED / fixture["file"]).read_bytes(), fixture["extract"])


class Recorded:
    """A loopback server answering every POST with one recorded body."""

    def __init__(self, raw: bytes) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}"

    def __enter__(self) -> Recorded:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[Recorded]:
    with Recorded(recorded(request.param)) as srv:
        yield srv


def settled(calls: list[ToolCall]) -> list[tuple[str, str, str, Any]]:
    return [(c.call_id, c.name, c.status.value, c.arguments) for c in calls]


def from_raw(name: str, provider: str) -> tuple[list[tuple[str, str, str, Any]], str]:
    acc = Accumulator(provider)
    calls = list(stream_calls([recorded(name)], acc))
    return settled(calls), str(acc.terminal)


def feed_strictly(acc: Accumulator, events: Any) -> tuple[list[ToolCall], set[str]]:
    """Feed every helper event with every warning an error, as a strict host runs."""
    calls: list[ToolCall] = []
    kinds: set[str] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for event in events:
            kinds.add(type(event).__name__)
            calls += acc.feed(event)
        calls += acc.close()
    return calls, kinds


RESPONSES = [
    "crewai--test_openai_responses_api_streaming.yaml",
    "mirascope--test_call_with_tools.openai_gpt_4o_responses.stream.yaml",
    "pydantic-ai--test_openai_responses_stream.yaml",
    "vercel-ai--openai-web-search-tool.1.chunks.txt",
]


@pytest.mark.parametrize("server", RESPONSES, indirect=True, ids=RESPONSES)
def test_responses_stream_helper_events(server: Recorded, request: pytest.FixtureRequest) -> None:
    name = request.node.callspec.params["server"]
    acc = Accumulator("openai-responses")
    with (
        openai.OpenAI(api_key="test", base_url=f"{server.url}/v1", max_retries=0) as client,
        client.responses.stream(model="gpt-4o", input="hi") as stream,
    ):
        calls, kinds = feed_strictly(acc, stream)
    assert (settled(calls), str(acc.terminal)) == from_raw(name, "openai-responses")
    assert "ResponseCompletedEvent" in kinds


class GetWeatherArgs(pydantic.BaseModel):
    city: str
    country: str
    units: str = "c"


CHAT = [
    "openai-python--test_parse_pydantic_tool.c6aa7e397b7123c3501f25df3a05d4daf7e8ad6d61ffa406ab5361fe36a8d5b1.bin",
    "mirascope--test_call_with_tools.openai_gpt_4o_completions.stream.yaml",
    "crewai--TestAzureToolCallStreaming.test_azure_streaming_emits_tool_call_events.yaml",
]


@pytest.mark.parametrize("server", CHAT, indirect=True, ids=[n[:60] for n in CHAT])
def test_chat_stream_helper_events(server: Recorded, request: pytest.FixtureRequest) -> None:
    """The helper's ChunkEvent wraps each raw chunk; its derived events are skipped.
    The SDK swallows ``[DONE]``, so the terminal is ``truncated`` (documented), and
    the calls are the raw stream's."""
    name = request.node.callspec.params["server"]
    acc = Accumulator("openai-chat")
    tool = openai.pydantic_function_tool(GetWeatherArgs)
    with (
        openai.OpenAI(api_key="test", base_url=f"{server.url}/v1", max_retries=0) as client,
        client.chat.completions.stream(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], tools=[tool]
        ) as stream,
    ):
        calls, kinds = feed_strictly(acc, stream)
    raw_calls, _terminal = from_raw(name, "openai-chat")
    assert settled(calls) == raw_calls
    assert str(acc.terminal) == "truncated"
    assert "ChunkEvent" in kinds


def test_chat_content_delta_events_are_read_without_warnings() -> None:
    """A text answer: the helper adds ContentDeltaEvent / ContentDoneEvent."""
    chunks = [
        {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": piece},
                      "finish_reason": None}]}
        for piece in ("Hello", ", world")
    ]
    chunks.append({"id": "c1", "object": "chat.completion.chunk", "created": 1,
                   "model": "gpt-4o",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    raw = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    shown: list[str] = []
    acc = Accumulator("openai-chat")
    acc.listen_text(shown.append)
    with (
        Recorded(raw + b"data: [DONE]\n\n") as srv,
        openai.OpenAI(api_key="test", base_url=f"{srv.url}/v1", max_retries=0) as client,
        client.chat.completions.stream(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        calls, kinds = feed_strictly(acc, stream)
    assert calls == [] and shown == ["Hello", ", world"]
    assert {"ChunkEvent", "ContentDeltaEvent", "ContentDoneEvent"} <= kinds


ANTHROPIC = [
    "mirascope--test_call_with_tools.anthropic_claude_sonnet_4_0.stream.yaml",
    "pydantic-ai--test_anthropic_code_execution_tool_stream.yaml",
    "pydantic-ai--test_anthropic_mcp_servers_stream.yaml",
    "llm-anthropic--test_tools.yaml",
]
"""Recordings with SSE ``event:`` lines: the Anthropic SDK dispatches on them (a
chunks file served as bare ``data:`` lines yields no event through it)."""


@pytest.mark.parametrize("server", ANTHROPIC, indirect=True, ids=ANTHROPIC)
def test_anthropic_stream_helper_events(server: Recorded, request: pytest.FixtureRequest) -> None:
    name = request.node.callspec.params["server"]
    acc = Accumulator("anthropic")
    with (
        anthropic.Anthropic(api_key="test", base_url=server.url, max_retries=0) as client,
        client.messages.stream(
            model="claude-sonnet-4-0", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        calls, _kinds = feed_strictly(acc, stream)
    assert (settled(calls), str(acc.terminal)) == from_raw(name, "anthropic")

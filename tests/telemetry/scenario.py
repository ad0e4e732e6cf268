"""One small world for the telemetry tests: tools, a policy that asks a person, a stream.

Every payload the gate is handed here can carry a marker (``secret``): the privacy
test plants one and looks for it in every span, metric and log record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from agent_gate import ToolRegistry
from agent_gate.stream_server import Transcript

POLICY = """\
version: 1
tools:
  lookup:
    effect: read
    idempotency: natural
    rules:
      - id: lookups-allowed
        effect: allow
        reason: Lookups are harmless.
  explode:
    effect: write
    idempotency: none
    rules:
      - id: explode-allowed
        effect: allow
        reason: Let it fail.
  pay:
    effect: write
    idempotency: none
    rules:
      - id: pay-needs-approval
        effect: approve
        reason: Payments are approved by a person.
"""

QUERY = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


class ToolFailed(Exception):
    pass


def registry(tracer_provider: TracerProvider, secret: str) -> ToolRegistry:
    """``lookup`` returns the secret and opens a span of its own; ``explode`` raises it."""
    tools = ToolRegistry()
    tracer = tracer_provider.get_tracer("the-tool-itself")

    @tools.tool(schema=QUERY, effect="read", idempotency="natural")
    def lookup(q: str) -> dict[str, Any]:
        with tracer.start_as_current_span("GET /lookup"):
            return {"answer": f"{q} {secret}"}

    @tools.tool(schema=QUERY, effect="write")
    def explode(q: str) -> None:
        raise ToolFailed(f"cannot {q}: {secret}")

    @tools.tool(schema=QUERY, effect="write")
    def pay(q: str) -> dict[str, str]:
        return {"paid": q, "receipt": secret}

    return tools


def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY, encoding="utf-8")
    return path


def chat_stream(calls: list[tuple[str, str, dict[str, Any]]]) -> Transcript:
    """An OpenAI Chat Completions stream that asks for ``calls`` (id, tool, arguments)."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                "model": "m", "choices": [{"index": 0, "delta": delta,
                                           "finish_reason": finish}]}
        return json.dumps(body)

    data = [chunk({"role": "assistant", "content": None})]
    for index, (call_id, name, arguments) in enumerate(calls):
        data.append(chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                           "function": {"name": name, "arguments": ""}}]}))
        data.append(chunk({"tool_calls": [{"index": index, "function": {
            "arguments": json.dumps(arguments)}}]}))
    data.append(chunk({}, "tool_calls"))
    data.append("[DONE]")
    raw = "".join(f"id: {n}\ndata: {d}\n\n" for n, d in enumerate(data, 1))
    return Transcript.from_sse(raw.encode("utf-8"))

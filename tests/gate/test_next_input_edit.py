"""The agent is told the arguments an edited call ran with (issue 32): after a person
edited a waiting call and approved it, the stream's call seen again runs the edited
version once, and ``RunResult.next_input`` answers it, in each provider's own shape,
with the result and the arguments it ran with, beside the model's own turn as sent."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gate.test_next_input import anthropic_stream, as_events, chat_stream, gemini_stream
from support.schemas import WEATHER

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.gate.render import EDITED_NOTE
from agent_gate.policy import Policy

POLICY = """
version: 1
tools:
  get_weather:
    effect: read
    rules:
      - id: a-person-picks-the-city
        effect: approve
        approval: {editable: [city]}
"""


@pytest.fixture
def ran() -> list[str]:
    return []


@pytest.fixture
def gate(db_url: str, ran: list[str]) -> Iterator[Gate]:
    registry = ToolRegistry()

    @registry.tool(schema=WEATHER)
    def get_weather(city: str) -> dict[str, Any]:
        ran.append(city)
        return {"city": city, "celsius": 21}

    with Gate(registry, db_url, policy=Policy.from_text(POLICY)) as g:
        yield g


def edited_run(gate: Gate, run: Callable[[], Any], call_id: str | None = None) -> Any:
    """Run the stream (the call waits), edit its city to Faro and approve, run it again."""
    first = run()
    waiting = [o for o in first.outcomes if o.state is CallState.AWAITING_APPROVAL]
    target = next(o for o in waiting if call_id is None or o.call_id == call_id)
    rec = gate.ledger.find(target.call_id, "t")[0]
    gate.approve(target.call_id, by="olga", task_id="t", args_hash=rec.args_hash,
                 edit={"city": "Faro"})
    return run(), target.call_id


def told(text: str) -> dict[str, Any]:
    body = json.loads(text)
    assert body["edited"]["note"] == EDITED_NOTE
    assert body["edited"]["fields"] == ["city"]
    assert body["edited"]["arguments"] == {"city": "Faro"}
    return body


def test_openai_responses(gate: Gate, ran: list[str],
                          responses_stream: Callable[..., list[dict[str, Any]]]) -> None:
    stream = responses_stream([("call_1", "get_weather", '{"city": "Lisbon"}')])
    result, call_id = edited_run(
        gate, lambda: gate.run(stream, task_id="t", provider="openai-responses"))
    assert ran == ["Faro"]
    items = result.next_input("openai-responses")
    [call] = [i for i in items if i.get("type") == "function_call"]
    assert json.loads(call["arguments"]) == {"city": "Lisbon"}  # the model's turn as sent
    [output] = [i for i in items if i.get("type") == "function_call_output"]
    assert output["call_id"] == call_id
    assert told(output["output"])["result"] == {"city": "Faro", "celsius": 21}


def test_openai_chat(gate: Gate, ran: list[str]) -> None:
    result, call_id = edited_run(
        gate, lambda: gate.run(as_events(chat_stream()), task_id="t", provider="openai-chat"),
        "call_a")
    assert ran == ["Faro"]
    messages = result.next_input("openai-chat")
    [answer] = [m for m in messages if m.get("tool_call_id") == call_id]
    assert told(answer["content"])["result"] == {"city": "Faro", "celsius": 21}


def test_anthropic(gate: Gate, ran: list[str]) -> None:
    result, call_id = edited_run(
        gate, lambda: gate.run(anthropic_stream(), task_id="t", provider="anthropic"),
        "toolu_a")
    assert ran == ["Faro"]
    _, user = result.next_input("anthropic")
    [block] = [b for b in user["content"] if b["tool_use_id"] == call_id]
    assert block["is_error"] is False
    assert told(block["content"])["result"] == {"city": "Faro", "celsius": 21}


def test_gemini(gate: Gate, ran: list[str]) -> None:
    result, _call_id = edited_run(
        gate, lambda: gate.run(gemini_stream(), task_id="t", provider="gemini"))
    assert ran == ["Faro"]
    _, user = result.next_input("gemini")
    responses = [p["functionResponse"] for p in user["parts"]]
    edited = [r for r in responses if "edited" in r["response"].get("result", {})]
    assert len(edited) == 1
    # the other call still waits: the model reads that, never an edit it did not get
    [other] = [r for r in responses if r is not edited[0]]
    assert other["response"]["error"]["status"] == "awaiting_approval"
    body = edited[0]["response"]["result"]
    assert body["result"] == {"city": "Faro", "celsius": 21}
    assert body["edited"]["arguments"] == {"city": "Faro"}
    assert body["edited"]["fields"] == ["city"]

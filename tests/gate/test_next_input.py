"""``RunResult.next_input(provider)``: the assistant turn and the tool results, as
each provider expects them appended for the next request, from ``Gate.run``.

Each stream here is what the provider's documentation says a turn looks like
(reasoning kept with its signature or encrypted content, text in pieces, calls);
the assertions are the request items an agent loop would send.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.schemas import WEATHER

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.accumulate import Accumulator
from agent_gate.errors import GateUsageError
from agent_gate.sse import SSEDecoder

TRANSCRIPTS = Path(__file__).parents[1] / "transcripts"



@pytest.fixture
def tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(schema=WEATHER)
    def get_weather(city: str) -> dict[str, Any]:
        return {"city": city, "celsius": 21}

    return registry


@pytest.fixture
def gate(db_url: str, tools: ToolRegistry) -> Iterator[Gate]:
    with Gate(tools, db_url) as gate:
        yield gate


# -- OpenAI Chat Completions -------------------------------------------------------


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def chat_stream() -> list[object]:
    return [
        chat_chunk({"role": "assistant", "content": "Checking "}),
        chat_chunk({"content": "both."}),
        chat_chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                    "function": {"name": "get_weather", "arguments": ""}}]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Lis'}}]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'bon"}'}}]}),
        chat_chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                    "function": {"name": "send_fax", "arguments": "{}"}}]}),
        chat_chunk({}, "tool_calls"),
        {"data": "[DONE]", "event": None, "id": None},
    ]


class _Sse:
    def __init__(self, data: str) -> None:
        self.data, self.event, self.id = data, None, None


def as_events(items: list[object]) -> list[object]:
    return [_Sse(i["data"]) if isinstance(i, dict) and "data" in i else i for i in items]


def test_chat_one_assistant_message_then_one_tool_message_per_call(gate: Gate) -> None:
    result = gate.run(as_events(chat_stream()), task_id="t", provider="openai-chat")
    assert [o.state for o in result.outcomes] == [CallState.SUCCEEDED, CallState.REJECTED]
    messages = result.next_input("openai-chat")
    assert messages[0] == {
        "role": "assistant",
        "content": "Checking both.",
        "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'}},
            {"id": "call_b", "type": "function",
             "function": {"name": "send_fax", "arguments": "{}"}},
        ],
    }
    assert messages[1] == {"role": "tool", "tool_call_id": "call_a",
                           "content": '{"celsius": 21, "city": "Lisbon"}'}
    refused = json.loads(messages[2]["content"])
    assert messages[2]["tool_call_id"] == "call_b"
    assert refused["executed"] is False and refused["reason_id"] == "unknown_tool"
    assert len(messages) == 3


# -- Anthropic Messages ------------------------------------------------------------


def anthropic_stream(stop: str = "tool_use") -> list[dict[str, Any]]:
    def delta(index: int, body: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": body}

    def start(index: int, block: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_start", "index": index, "content_block": block}

    return [
        {"type": "message_start", "message": {"id": "msg_1", "role": "assistant", "content": []}},
        start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, {"type": "thinking_delta", "thinking": "The user wants "}),
        delta(0, {"type": "thinking_delta", "thinking": "the weather."}),
        delta(0, {"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA"}),
        {"type": "content_block_stop", "index": 0},
        start(1, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}),
        {"type": "content_block_stop", "index": 1},
        start(2, {"type": "text", "text": ""}),
        delta(2, {"type": "text_delta", "text": "Let me "}),
        delta(2, {"type": "text_delta", "text": "check."}),
        {"type": "content_block_stop", "index": 2},
        start(3, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                  "input": {}}),
        delta(3, {"type": "input_json_delta", "partial_json": '{"query": "Lisbon'}),
        delta(3, {"type": "input_json_delta", "partial_json": ' weather"}'}),
        {"type": "content_block_stop", "index": 3},
        start(4, {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                  "content": [{"type": "web_search_result", "url": "https://example.org",
                               "title": "Lisbon", "encrypted_content": "Eo8B"}]}),
        {"type": "content_block_stop", "index": 4},
        start(5, {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {}}),
        delta(5, {"type": "input_json_delta", "partial_json": '{"city": '}),
        delta(5, {"type": "input_json_delta", "partial_json": '"Lisbon"}'}),
        {"type": "content_block_stop", "index": 5},
        start(6, {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {}}),
        delta(6, {"type": "input_json_delta", "partial_json": '{"town": "Porto"}'}),
        {"type": "content_block_stop", "index": 6},
        {"type": "message_delta", "delta": {"stop_reason": stop}},
        {"type": "message_stop"},
    ]


def test_anthropic_blocks_keep_thinking_signatures_and_results_follow(gate: Gate) -> None:
    result = gate.run(anthropic_stream(), task_id="t", provider="anthropic")
    assistant, user = result.next_input("anthropic")
    assert assistant == {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "The user wants the weather.",
         "signature": "EqQBCgIYAhIM1gbcDa9GJwZA"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
        {"type": "text", "text": "Let me check."},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
         "input": {"query": "Lisbon weather"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
         "content": [{"type": "web_search_result", "url": "https://example.org",
                      "title": "Lisbon", "encrypted_content": "Eo8B"}]},
        {"type": "tool_use", "id": "toolu_a", "name": "get_weather",
         "input": {"city": "Lisbon"}},
        {"type": "tool_use", "id": "toolu_b", "name": "get_weather",
         "input": {"town": "Porto"}},
    ]}
    assert user["role"] == "user"
    ok, bad = user["content"]
    assert ok == {"type": "tool_result", "tool_use_id": "toolu_a",
                  "content": '{"celsius": 21, "city": "Lisbon"}', "is_error": False}
    assert bad["tool_use_id"] == "toolu_b" and bad["is_error"] is True
    assert json.loads(bad["content"])["reason_id"] == "schema_invalid"


def test_a_call_cut_by_max_tokens_is_left_out_with_its_result(gate: Gate) -> None:
    stream = anthropic_stream(stop="max_tokens")
    result = gate.run(stream, task_id="t", provider="anthropic")
    # toolu_a was confirmed when the next block began (a read: it ran); toolu_b was
    # cut by max_tokens, so neither its block nor a result for it goes back.
    states = {o.call_id: o.state for o in result.outcomes}
    assert states == {"toolu_a": CallState.SUCCEEDED, "toolu_b": CallState.INCOMPLETE}
    assistant, user = result.next_input("anthropic")
    assert [b.get("id") for b in assistant["content"] if b["type"] == "tool_use"] == ["toolu_a"]
    assert [b["tool_use_id"] for b in user["content"]] == ["toolu_a"]


# -- Gemini ------------------------------------------------------------------------


def gemini_stream() -> list[dict[str, Any]]:
    def chunk(*parts: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)},
                                     "index": 0}
        if finish:
            candidate["finishReason"] = finish
        return {"candidates": [candidate], "responseId": "resp-g1"}

    return [
        chunk({"text": "Thinking about it", "thought": True}),
        chunk({"text": "Let me "}),
        chunk({"text": "check."}),
        chunk({"functionCall": {"name": "get_weather", "args": {"city": "Lisbon"}},
               "thoughtSignature": "CiQB0e2Kb7"}),
        chunk({"functionCall": {"name": "get_weather", "args": {"city": "Porto"}}},
              finish="STOP"),
    ]


def test_gemini_parts_keep_thought_signatures_and_merge_text(gate: Gate) -> None:
    result = gate.run(gemini_stream(), task_id="t", provider="gemini")
    model, user = result.next_input("gemini")
    assert model == {"role": "model", "parts": [
        {"text": "Thinking about it", "thought": True},
        {"text": "Let me check."},
        {"functionCall": {"name": "get_weather", "args": {"city": "Lisbon"}},
         "thoughtSignature": "CiQB0e2Kb7"},
        {"functionCall": {"name": "get_weather", "args": {"city": "Porto"}}},
    ]}
    # The wire gave the calls no id, so none is sent back: only name and order.
    assert user == {"role": "user", "parts": [
        {"functionResponse": {"name": "get_weather",
                              "response": {"result": {"city": "Lisbon", "celsius": 21}}}},
        {"functionResponse": {"name": "get_weather",
                              "response": {"result": {"city": "Porto", "celsius": 21}}}},
    ]}


def test_a_vertex_streamed_call_goes_back_with_its_assembled_args(gate: Gate) -> None:
    stream = [
        {"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "get_weather", "willContinue": True},
             "thoughtSignature": "sig-1"}]}}], "responseId": "r-v"},
        {"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"partialArgs": [{"jsonPath": "$.city", "stringValue": "Li",
                                               "willContinue": True}],
                              "willContinue": True}}]}}], "responseId": "r-v"},
        {"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"partialArgs": [{"jsonPath": "$.city",
                                               "stringValue": "sbon"}]}}]}}],
         "responseId": "r-v"},
        {"candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "STOP"}],
         "responseId": "r-v"},
    ]
    result = gate.run(stream, task_id="t", provider="gemini")
    model, _ = result.next_input("gemini")
    assert model["parts"] == [{"functionCall": {"name": "get_weather", "args": {"city": "Lisbon"}},
                               "thoughtSignature": "sig-1"}]


# -- OpenAI Responses, replay, bounds ----------------------------------------------


def responses_events(name: str) -> list[object]:
    decoder = SSEDecoder()
    out = decoder.feed((TRANSCRIPTS / "openai_responses" / f"{name}.sse").read_bytes())
    decoder.end()
    return list(out)


def test_responses_items_as_done_then_outputs_and_a_replay_gives_the_same(gate: Gate) -> None:
    first = gate.run(responses_events("mcp_approval_request"), task_id="t",
                     provider="openai-responses")
    items = first.next_input("openai-responses")
    assert [i.get("type") for i in items] == [
        "mcp_list_tools", "reasoning", "message", "mcp_approval_request", "function_call",
        "mcp_approval_response", "function_call_output",
    ]
    assert items[1]["encrypted_content"].startswith("gAAAA")
    assert items[4]["call_id"] == items[6]["call_id"] == "call_mcp_weather"
    # Each item as its output_item.done gave it, arguments included.
    assert items[4] == {"id": "fc_0a11ce5e00a1", "type": "function_call", "status": "completed",
                        "arguments": '{"city": "Lisbon"}', "call_id": "call_mcp_weather",
                        "name": "get_weather"}
    again = gate.run(responses_events("mcp_approval_request"), task_id="t",
                     provider="openai-responses")
    assert all(o.replayed for o in again.outcomes)
    assert again.next_input("openai-responses") == items
    # Fresh copies: changing what was returned changes nothing kept.
    items[1]["encrypted_content"] = "changed"
    assert first.next_input("openai-responses")[1]["encrypted_content"].startswith("gAAAA")


def test_an_unsupported_client_call_is_left_out_with_its_output(gate: Gate) -> None:
    result = gate.run(responses_events("unsupported_computer_call"), task_id="t",
                      provider="openai-responses")
    types = [i.get("type") for i in result.next_input("openai-responses")]
    assert "computer_call" not in types and "function_call_output" not in types


def test_a_turn_over_its_bound_is_dropped_whole_and_the_calls_still_run(gate: Gate) -> None:
    acc = Accumulator("anthropic", max_turn_chars=40)
    result = gate.run(anthropic_stream(), task_id="t", provider="anthropic", accumulator=acc)
    assert [o.state for o in result.outcomes] == [CallState.SUCCEEDED, CallState.REJECTED]
    assert result.turn is not None and result.turn.dropped == "max_turn_chars"
    with pytest.raises(GateUsageError, match="max_turn_chars"):
        result.next_input("anthropic")


def test_the_turn_goes_back_only_as_the_protocol_it_came_in(gate: Gate) -> None:
    result = gate.run(gemini_stream(), task_id="t", provider="gemini")
    with pytest.raises(GateUsageError, match="streamed as 'gemini'"):
        result.next_input("anthropic")
    with pytest.raises(GateUsageError, match="no next-turn format"):
        result.next_input("carrier-pigeon")


def test_auto_detection_gives_the_detected_protocols_turn(gate: Gate) -> None:
    result = gate.run(as_events(chat_stream()), task_id="t", provider="auto")
    assert result.provider == "openai-chat"
    assert result.next_input("openai-chat")[0]["content"] == "Checking both."


def test_text_reaches_on_text_in_order_and_thoughts_do_not(gate: Gate) -> None:
    seen: list[str] = []
    gate.run(gemini_stream(), task_id="t", provider="gemini", on_text=seen.append)
    assert seen == ["Let me ", "check."]
    seen.clear()
    gate.run(anthropic_stream(), task_id="t2", provider="anthropic", on_text=seen.append)
    assert seen == ["Let me ", "check."]


HELD_AND_DENIED = """
version: 1
tools:
  get_weather:
    effect: read
    rules:
      - id: internal-lisbon-needs-a-person
        effect: approve
        reason: Internal rule 7 (Lisbon desk)
        when:
          - arg: city
            equals: Lisbon
      - id: internal-porto-forbidden
        effect: deny
        reason: Internal rule 9 (Porto embargo)
        when:
          - arg: city
            equals: Porto
"""


def test_held_and_denied_calls_tell_the_model_why_by_id_only(
    db_url: str, tools: ToolRegistry, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(HELD_AND_DENIED, encoding="utf-8")
    with Gate(tools, db_url, policy=policy) as gate:
        result = gate.run(gemini_stream(), task_id="t", provider="gemini")
    assert [o.state for o in result.outcomes] == [
        CallState.AWAITING_APPROVAL, CallState.REJECTED,
    ]
    _, user = result.next_input("gemini")
    held, denied = (p["functionResponse"]["response"]["error"] for p in user["parts"])
    assert (held["reason_id"], held["executed"]) == ("awaiting_approval", False)
    assert (denied["reason_id"], denied["executed"]) == ("policy_denied", False)
    text = json.dumps(user)
    assert "Internal rule" not in text and "internal-" not in text
    # The audit trail keeps the policy's own words.
    assert any("Internal rule 9" in (o.reason or "") for o in result.outcomes)

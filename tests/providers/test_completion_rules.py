"""Each adapter emits a completion only on its provider's own completion signal.

These pin the rules of issue 3 per wire protocol, at the adapter's public
boundary: incoming event -> normalized stream events.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent_gate.providers import (
    Heartbeat,
    ProviderToolCall,
    ResponseCompleted,
    ResponseFailed,
    ResponseIncomplete,
    StreamAnomaly,
    StreamEvent,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallArgumentsDone,
    ToolCallArgumentsSnapshot,
    ToolCallCut,
    ToolCallStarted,
    TurnDelta,
    TurnPart,
    UnknownEvent,
    adapter_for,
    provider_names,
)
from agent_gate.sse import ServerSentEvent


class Driver:
    """Feeds events to one adapter and collects what each one meant."""

    def __init__(self, name: str, **options: Any) -> None:
        self.adapter = adapter_for(name, **options)
        self.index = 0

    def __call__(self, event: object) -> list[StreamEvent]:
        wire = self.adapter.decode(event, self.index)
        out = self.adapter.translate(wire, self.index)
        self.index += 1
        # The turn's pieces are tested in tests/gate/test_next_input.py.
        return [e for e in out if not isinstance(e, TurnPart | TurnDelta)]


def test_the_four_protocols_are_registered() -> None:
    assert set(provider_names()) == {"openai-responses", "openai-chat", "anthropic", "gemini"}


def test_adapters_are_fresh_per_stream() -> None:
    assert adapter_for("anthropic") is not adapter_for("anthropic")


# -- OpenAI Responses ------------------------------------------------------------------


def fc_item(status: str, arguments: str) -> dict[str, Any]:
    return {
        "id": "fc_9",
        "type": "function_call",
        "status": status,
        "call_id": "call_9",
        "name": "send_email",
        "arguments": arguments,
    }


def test_responses_deltas_name_the_item_id_and_are_mapped_to_the_call_id() -> None:
    drive = Driver("openai-responses")
    added = {
        "type": "response.output_item.added",
        "output_index": 3,
        "item": fc_item("in_progress", ""),
    }
    assert drive(added) == [ToolCallStarted("call_9", "send_email", 3, "function")]
    delta = {"type": "response.function_call_arguments.delta", "item_id": "fc_9", "delta": "{"}
    assert drive(delta) == [ToolCallArgumentsDelta("call_9", "{")]


def test_responses_arguments_done_is_only_a_snapshot_and_item_done_completes() -> None:
    drive = Driver("openai-responses")
    drive(
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": fc_item("in_progress", ""),
        }
    )
    args_done = {
        "type": "response.function_call_arguments.done",
        "item_id": "fc_9",
        "arguments": "{}",
    }
    assert drive(args_done) == [ToolCallArgumentsSnapshot("call_9", "{}")]
    item_done = {
        "type": "response.output_item.done",
        "output_index": 0,
        "item": fc_item("completed", "{}"),
    }
    assert drive(item_done)[-1] == ToolCallArgumentsDone("call_9", "{}")


@pytest.mark.parametrize("status", ["incomplete", "in_progress", None])
def test_responses_item_done_without_completed_status_is_no_completion(status: str | None) -> None:
    drive = Driver("openai-responses")
    drive(
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": fc_item("in_progress", ""),
        }
    )
    item = fc_item("x", '{"to":"a@')
    item["status"] = status
    out = drive({"type": "response.output_item.done", "output_index": 0, "item": item})
    assert not any(isinstance(e, ToolCallArgumentsDone) for e in out)


def test_responses_terminals() -> None:
    drive = Driver("openai-responses")
    assert drive({"type": "response.completed", "response": {}}) == [ResponseCompleted()]
    incomplete = {
        "type": "response.incomplete",
        "response": {"incomplete_details": {"reason": "content_filter"}},
    }
    assert drive(incomplete) == [ResponseIncomplete("content_filter")]
    failed = {
        "type": "response.failed",
        "response": {"error": {"code": "server_error", "message": "m"}},
    }
    assert drive(failed) == [ResponseFailed("server_error")]
    assert drive({"type": "error", "code": "rate_limit_exceeded", "message": "m"}) == [
        ResponseFailed("rate_limit_exceeded")
    ]


def test_responses_platform_items_are_provider_executed() -> None:
    drive = Driver("openai-responses")
    item = {
        "id": "mcp_1",
        "type": "mcp_call",
        "name": "lookup",
        "server_label": "s",
        "arguments": "",
    }
    out = drive({"type": "response.output_item.added", "output_index": 0, "item": item})
    assert out == [ProviderToolCall("mcp_1", "lookup", "mcp_call", 0)]


def test_responses_sequence_number_is_the_replay_key() -> None:
    adapter = adapter_for("openai-responses")
    wire = adapter.decode({"type": "response.created", "sequence_number": 4}, 0)
    assert adapter.replay_key(wire) == ("sequence_number", 4)
    assert adapter_for("anthropic").replay_key(wire) is None


# -- OpenAI Chat Completions ---------------------------------------------------------------


def chunk(*choices: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": list(choices),
        **extra,
    }


def fragment(
    index: int, arguments: str, call_id: str | None = None, name: str | None = None
) -> dict[str, Any]:
    frag: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id:
        frag["id"] = call_id
        frag["type"] = "function"
        frag["function"]["name"] = name
    return frag


def choice(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {"index": index, "delta": delta, "finish_reason": finish}


def test_chat_fragments_are_keyed_by_index_and_complete_only_at_finish_reason() -> None:
    drive = Driver("openai-chat")
    first = [fragment(0, "", "call_a", "f"), fragment(1, '{"b":', "call_b", "g")]
    assert drive(chunk(choice({"tool_calls": first}))) == [
        ToolCallStarted("call_a", "f", 0),
        ToolCallStarted("call_b", "g", 1),
        ToolCallArgumentsDelta("call_b", '{"b":'),
    ]
    assert drive(chunk(choice({"tool_calls": [fragment(1, "2}"), fragment(0, "{}")]}))) == [
        ToolCallArgumentsDelta("call_b", "2}"),
        ToolCallArgumentsDelta("call_a", "{}"),
    ]
    assert drive(chunk(choice({}, "tool_calls"))) == [
        ToolCallArgumentsDone("call_a"),
        ToolCallArgumentsDone("call_b"),
    ]
    assert drive(chunk(usage={"total_tokens": 3})) == []
    assert drive(ServerSentEvent("message", "[DONE]", "")) == [ResponseCompleted()]


@pytest.mark.parametrize("reason", ["length", "content_filter"])
def test_chat_length_and_content_filter_cut_the_batch(reason: str) -> None:
    drive = Driver("openai-chat")
    drive(chunk(choice({"tool_calls": [fragment(0, "{}", "call_a", "f")]})))
    assert drive(chunk(choice({}, reason))) == [ToolCallCut("call_a", reason)]
    assert drive(ServerSentEvent("message", "[DONE]", "")) == [ResponseIncomplete(reason)]


def test_chat_done_without_any_finish_reason_is_not_success() -> None:
    drive = Driver("openai-chat")
    assert drive(ServerSentEvent("message", "[DONE]", "")) == [
        ResponseIncomplete("missing_finish_reason")
    ]


def test_chat_other_choices_are_alternatives_unless_selected() -> None:
    frag = {"tool_calls": [fragment(0, "{}", "call_1", "f")]}
    assert Driver("openai-chat")(chunk(choice(frag, index=1))) == []
    assert Driver("openai-chat", choice=1)(chunk(choice(frag, index=1))) == [
        ToolCallStarted("call_1", "f", 0),
        ToolCallArgumentsDelta("call_1", "{}"),
    ]


def test_chat_index_reused_while_its_call_is_open_is_an_anomaly() -> None:
    drive = Driver("openai-chat")
    drive(chunk(choice({"tool_calls": [fragment(0, '{"a":', "call_1", "f")]})))
    out = drive(chunk(choice({"tool_calls": [fragment(0, "{}", "call_2", "g")]})))
    assert StreamAnomaly("index_reused", ("call_1", "call_2")) in out


def test_chat_repeating_the_same_id_on_later_fragments_is_fine() -> None:
    drive = Driver("openai-chat")
    drive(chunk(choice({"tool_calls": [fragment(0, "{", "call_1", "f")]})))
    assert drive(chunk(choice({"tool_calls": [fragment(0, "}", "call_1", "f")]}))) == [
        ToolCallArgumentsDelta("call_1", "}")
    ]


# -- Anthropic Messages ----------------------------------------------------------------------


def block_start(index: int, block_id: str, btype: str = "tool_use") -> dict[str, Any]:
    block = {"type": btype, "id": block_id, "name": "f", "input": {}}
    return {"type": "content_block_start", "index": index, "content_block": block}


def json_delta(index: int, text: str) -> dict[str, Any]:
    delta = {"type": "input_json_delta", "partial_json": text}
    return {"type": "content_block_delta", "index": index, "delta": delta}


def test_anthropic_block_stop_waits_for_a_later_block() -> None:
    drive = Driver("anthropic")
    assert drive(block_start(0, "toolu_a")) == [ToolCallStarted("toolu_a", "f", 0)]
    assert drive(json_delta(0, '{"x":1}')) == [ToolCallArgumentsDelta("toolu_a", '{"x":1}')]
    assert drive({"type": "content_block_stop", "index": 0}) == []
    text = {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "text", "text": ""},
    }
    assert drive(text) == [ToolCallArgumentsDone("toolu_a", None)]


def test_anthropic_block_stop_is_confirmed_by_stop_reason_tool_use() -> None:
    drive = Driver("anthropic")
    drive(block_start(0, "toolu_a"))
    drive(json_delta(0, "{}"))
    drive({"type": "content_block_stop", "index": 0})
    assert drive({"type": "message_delta", "delta": {"stop_reason": "tool_use"}}) == [
        ToolCallArgumentsDone("toolu_a", None)
    ]
    assert drive({"type": "message_stop"}) == [ResponseCompleted()]


@pytest.mark.parametrize("reason", ["max_tokens", "refusal", "pause_turn", "stop_sequence"])
def test_anthropic_other_stop_reasons_cut_a_stopped_block(reason: str) -> None:
    drive = Driver("anthropic")
    drive(block_start(0, "toolu_a"))
    drive(json_delta(0, "{}"))
    drive({"type": "content_block_stop", "index": 0})
    assert drive({"type": "message_delta", "delta": {"stop_reason": reason}}) == [
        ToolCallCut("toolu_a", reason)
    ]


def test_anthropic_empty_input_is_an_empty_object() -> None:
    drive = Driver("anthropic")
    drive(block_start(0, "toolu_a"))
    assert drive(json_delta(0, "")) == []
    drive({"type": "content_block_stop", "index": 0})
    assert drive({"type": "message_delta", "delta": {"stop_reason": "tool_use"}}) == [
        ToolCallArgumentsDone("toolu_a", "{}")
    ]


def test_anthropic_ping_is_a_heartbeat_and_server_tools_are_provider_executed() -> None:
    drive = Driver("anthropic")
    assert drive({"type": "ping"}) == [Heartbeat()]
    assert drive(block_start(0, "srvtoolu_1", "server_tool_use")) == [
        ProviderToolCall("srvtoolu_1", "f", "server_tool_use", 0)
    ]
    assert drive(json_delta(0, '{"query":"x"}')) == []


def test_anthropic_error_event_fails_the_response() -> None:
    drive = Driver("anthropic")
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert drive(error) == [ResponseFailed("overloaded_error")]


def test_anthropic_text_is_text() -> None:
    drive = Driver("anthropic")
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "hi"},
    }
    # Shown as it arrives, and kept in the turn's block 0 (the block it grows).
    assert drive(delta) == [TextDelta("hi", 0)]


# -- Gemini -----------------------------------------------------------------------------------


def gemini(
    parts: list[dict[str, Any]] | None, finish: str | None = None, index: int = 0
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"index": index}
    if parts is not None:
        candidate["content"] = {"role": "model", "parts": parts}
    if finish:
        candidate["finishReason"] = finish
    return {"responseId": "r1", "candidates": [candidate]}


def test_gemini_whole_parts_wait_for_finish_reason_stop() -> None:
    drive = Driver("gemini")
    part = {"functionCall": {"name": "f", "args": {"k": "ü"}}}
    assert drive(gemini([part])) == [ToolCallStarted("r1:0:0", "f", 0)]
    assert drive(gemini([{"text": ""}], "STOP")) == [
        ToolCallArgumentsDone("r1:0:0", '{"k": "ü"}'),
        ResponseCompleted(),
    ]


@pytest.mark.parametrize("reason", ["MAX_TOKENS", "MALFORMED_FUNCTION_CALL", "SAFETY", "OTHER"])
def test_gemini_other_finish_reasons_cut(reason: str) -> None:
    drive = Driver("gemini")
    drive(gemini([{"functionCall": {"name": "f", "args": {}}}]))
    assert drive(gemini(None, reason)) == [
        ToolCallCut("r1:0:0", reason),
        ResponseIncomplete(reason),
    ]


def test_gemini_other_candidates_are_alternatives() -> None:
    drive = Driver("gemini")
    assert drive(gemini([{"functionCall": {"name": "f", "args": {}}}], index=1)) == []


def test_gemini_errors_and_blocked_prompts() -> None:
    error = {"error": {"code": 500, "message": "Internal error", "status": "INTERNAL"}}
    assert Driver("gemini")(error) == [ResponseFailed("INTERNAL")]
    blocked = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "responseId": "r"}
    assert Driver("gemini")(blocked) == [ResponseIncomplete("PROHIBITED_CONTENT")]
    assert Driver("gemini")({"something": "else"}) == [UnknownEvent("chunk_without_candidates")]

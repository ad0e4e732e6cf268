"""The accumulator's rules, driven through its public API with provider events.

Events are given as the mappings a provider sends (as an SDK's ``model_dump()``
or ``json.loads`` of the SSE data would produce them), as ``ServerSentEvent``s,
or as pydantic objects standing in for an official SDK's typed events.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from agent_gate.accumulate import (
    Accumulator,
    AccumulatorClosedError,
    AccumulatorLimitExceeded,
    DispatchMode,
    stream_calls,
)
from agent_gate.calls import CallStatus, Terminal, TerminalKind
from agent_gate.errors import AgentGateError
from agent_gate.providers import (
    MalformedEventError,
    ReplayConflictError,
    UnknownProviderError,
    adapter_for,
)
from agent_gate.sse import ServerSentEvent

# -- OpenAI Responses event builders ------------------------------------------


class Responses:
    """Builds a Responses event sequence with increasing sequence numbers."""

    def __init__(self) -> None:
        self.seq = 0

    def ev(self, etype: str, **fields: Any) -> dict[str, Any]:
        event = {"type": etype, **fields, "sequence_number": self.seq}
        self.seq += 1
        return event

    def added(self, n: int, name: str, kind: str = "function_call") -> dict[str, Any]:
        item = {"id": f"fc_{n}", "type": kind, "status": "in_progress", "call_id": f"call_{n}"}
        item |= {"name": name, "arguments": ""}
        return self.ev("response.output_item.added", output_index=n, item=item)

    def delta(self, n: int, text: str) -> dict[str, Any]:
        return self.ev(
            "response.function_call_arguments.delta", item_id=f"fc_{n}", output_index=n, delta=text
        )

    def done(self, n: int, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
        item = {"id": f"fc_{n}", "type": "function_call", "status": status, "call_id": f"call_{n}"}
        item |= {"name": name, "arguments": arguments}
        return self.ev("response.output_item.done", output_index=n, item=item)

    def call(self, n: int, name: str, arguments: str) -> list[dict[str, Any]]:
        return [self.added(n, name), self.delta(n, arguments), self.done(n, name, arguments)]

    def completed(self) -> dict[str, Any]:
        return self.ev("response.completed", response={"status": "completed"})

    def failed(self) -> dict[str, Any]:
        return self.ev("response.failed", response={"error": {"code": "server_error"}})


def feed_all(acc: Accumulator, events: list[Any]) -> list[Any]:
    released = []
    for event in events:
        released += acc.feed(event)
    return released


def modes(**by_tool: DispatchMode) -> Any:
    return lambda name: by_tool.get(name, DispatchMode.ON_RESPONSE_COMPLETE)


# -- dispatch modes -------------------------------------------------------------


def test_a_read_is_released_at_its_own_completion_and_a_write_only_at_the_end() -> None:
    r = Responses()
    acc = Accumulator("openai-responses", dispatch=modes(get_weather=DispatchMode.ON_CALL_COMPLETE))
    read = r.call(0, "get_weather", '{"city":"Oslo"}')
    write = r.call(1, "send_email", '{"to":"a@example.com"}')
    assert feed_all(acc, read[:2]) == []
    [weather] = acc.feed(read[2])
    assert weather.name == "get_weather"
    assert weather.status is CallStatus.COMPLETE
    assert weather.arguments == {"city": "Oslo"}
    assert acc.terminal is None
    assert feed_all(acc, write) == []  # complete, but held until the response ends
    [email] = acc.feed(r.completed())
    assert (email.name, email.status, email.arguments) == (
        "send_email",
        CallStatus.COMPLETE,
        {"to": "a@example.com"},
    )
    assert acc.terminal == Terminal(TerminalKind.COMPLETED)
    assert acc.close() == []


def test_a_held_write_of_a_failed_response_is_reported_complete_with_a_failed_terminal() -> None:
    r = Responses()
    acc = Accumulator("openai-responses")
    assert feed_all(acc, r.call(0, "send_email", '{"to":"a@example.com"}')) == []
    [email] = acc.feed(r.failed())
    assert email.status is CallStatus.COMPLETE
    assert acc.terminal is not None and not acc.terminal.succeeded
    assert str(acc.terminal) == "failed"


def test_dispatch_may_be_one_mode_for_every_tool() -> None:
    r = Responses()
    acc = Accumulator("openai-responses", dispatch=DispatchMode.ON_CALL_COMPLETE)
    [call] = feed_all(acc, r.call(0, "send_email", '{"to":"a@example.com"}'))
    assert call.name == "send_email"


def test_an_adapter_instance_can_be_given_instead_of_a_name() -> None:
    acc = Accumulator(adapter_for("openai-chat", choice=1))
    assert acc.provider == "openai-chat"


# -- end of stream ---------------------------------------------------------------


def test_close_without_terminal_is_truncated_and_open_calls_are_incomplete() -> None:
    r = Responses()
    acc = Accumulator("openai-responses")
    feed_all(acc, [r.added(0, "send_email"), r.delta(0, '{"to":"a@exa')])
    [call] = acc.close()
    assert acc.terminal == Terminal(TerminalKind.TRUNCATED)
    assert (call.status, call.reason, call.arguments) == (CallStatus.INCOMPLETE, "truncated", None)
    assert call.raw_arguments == '{"to":"a@exa'
    assert acc.close() == []
    with pytest.raises(AccumulatorClosedError):
        acc.feed(r.completed())


def test_arguments_done_event_alone_never_completes_a_call() -> None:
    r = Responses()
    acc = Accumulator("openai-responses", dispatch=DispatchMode.ON_CALL_COMPLETE)
    args = '{"to":"a@example.com"}'
    released = feed_all(
        acc,
        [
            r.added(0, "send_email"),
            r.delta(0, args),
            r.ev("response.function_call_arguments.done", item_id="fc_0", arguments=args),
        ],
    )
    assert released == []
    [call] = acc.close()
    assert call.status is CallStatus.INCOMPLETE


def test_an_item_that_ends_incomplete_takes_the_response_reason() -> None:
    r = Responses()
    acc = Accumulator("openai-responses", dispatch=DispatchMode.ON_CALL_COMPLETE)
    events = [
        r.added(0, "send_email"),
        r.delta(0, '{"to":"a@'),
        r.done(0, "send_email", '{"to":"a@', "incomplete"),
    ]
    assert feed_all(acc, events) == []
    incomplete = r.ev(
        "response.incomplete", response={"incomplete_details": {"reason": "max_output_tokens"}}
    )
    [call] = acc.feed(incomplete)
    assert (call.status, call.reason) == (CallStatus.INCOMPLETE, "max_output_tokens")
    assert str(acc.terminal) == "incomplete:max_output_tokens"


def test_a_call_never_completed_in_a_successful_response_is_still_not_runnable() -> None:
    r = Responses()
    acc = Accumulator("openai-responses")
    [call] = feed_all(acc, [r.added(0, "get_weather"), r.delta(0, "{}"), r.completed()])
    assert (call.status, call.reason) == (CallStatus.INCOMPLETE, "no_completion_signal")


# -- strict argument parsing -------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ('{}{"to":"a@example.com"}', "concatenated_json"),
        ('{"to":"a"} {"to":"b"}', "concatenated_json"),
        ('{"to":"a@example.com"', "invalid_json"),
        ('{"to": "a", "to": "b"}', "duplicate_key"),
        ('{"amount": NaN}', "invalid_json"),
        ('{"amount": Infinity}', "invalid_json"),
        ('["a@example.com"]', "arguments_not_object"),
        ('"a@example.com"', "arguments_not_object"),
        ('{"note": "\\ud800"}', "invalid_unicode"),
        ("", "invalid_json"),
    ],
)
def test_arguments_are_parsed_strictly_and_never_repaired(arguments: str, reason: str) -> None:
    r = Responses()
    acc = Accumulator("openai-responses", dispatch=DispatchMode.ON_CALL_COMPLETE)
    [call] = feed_all(acc, r.call(0, "send_email", arguments))
    assert (call.status, call.reason, call.arguments) == (CallStatus.REJECTED, reason, None)
    assert call.raw_arguments == arguments


def test_whitespace_around_one_object_is_fine() -> None:
    r = Responses()
    acc = Accumulator("openai-responses", dispatch=DispatchMode.ON_CALL_COMPLETE)
    [call] = feed_all(acc, r.call(0, "f", ' \n{"a": [1, 2.5, null, true]}\n '))
    assert call.arguments == {"a": [1, 2.5, None, True]}


def test_a_valid_surrogate_pair_split_across_deltas_decodes_whole() -> None:
    r = Responses()
    acc = Accumulator("openai-responses", dispatch=DispatchMode.ON_CALL_COMPLETE)
    text = '{"mood":"\\ud83d\\ude00"}'
    events = [r.added(0, "f"), r.delta(0, text[:14]), r.delta(0, text[14:]), r.done(0, "f", text)]
    [call] = feed_all(acc, events)
    assert call.arguments == {"mood": "😀"}


# -- anomalies ------------------------------------------------------------------


def test_completion_text_that_disagrees_with_the_deltas_is_rejected() -> None:
    r = Responses()
    acc = Accumulator("openai-responses", dispatch=DispatchMode.ON_CALL_COMPLETE)
    events = [r.added(0, "pay"), r.delta(0, '{"amount":10}'), r.done(0, "pay", '{"amount":1000}')]
    [call] = feed_all(acc, events)
    assert (call.status, call.reason) == (CallStatus.REJECTED, "arguments_mismatch")
    assert [a.reason for a in acc.anomalies] == ["arguments_mismatch"]


def test_a_delta_for_an_unknown_call_is_recorded_and_creates_no_call() -> None:
    r = Responses()
    acc = Accumulator("openai-responses")
    assert acc.feed(r.delta(7, '{"x":1}')) == []
    assert [(a.event_index, a.reason) for a in acc.anomalies] == [(0, "delta_for_unknown_call")]
    acc.feed(r.completed())
    assert acc.stats.calls == 0


def test_a_delta_after_completion_rejects_a_held_call() -> None:
    r = Responses()
    acc = Accumulator("openai-responses")
    assert feed_all(acc, r.call(0, "send_email", '{"to":"a@example.com"}')) == []
    [call] = acc.feed(r.delta(0, '"}'))  # never runnable now: reported at once
    assert (call.status, call.reason) == (CallStatus.REJECTED, "delta_after_completion")
    assert acc.feed(r.completed()) == []


def test_a_delta_after_an_already_released_call_is_flagged_for_the_gate() -> None:
    r = Responses()
    acc = Accumulator("openai-responses", dispatch=DispatchMode.ON_CALL_COMPLETE)
    [call] = feed_all(acc, r.call(0, "get_weather", '{"city":"Oslo"}'))
    assert acc.feed(r.delta(0, "x")) == []
    [anomaly] = acc.anomalies
    assert (anomaly.reason, anomaly.call_id, anomaly.after_release) == (
        "delta_after_completion",
        call.call_id,
        True,
    )


def test_a_second_start_with_the_same_id_and_another_tool_is_rejected() -> None:
    acc = Accumulator("openai-chat", dispatch=DispatchMode.ON_CALL_COMPLETE)
    first = {"index": 0, "id": "call_1", "function": {"name": "get_weather", "arguments": "{}"}}
    second = {"index": 1, "id": "call_1", "function": {"name": "delete_repo", "arguments": "{}"}}
    released = feed_all(
        acc,
        [
            {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [first]}}]},
            {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [second]}}]},
        ],
    )
    [call] = released
    assert (call.call_id, call.status, call.reason) == (
        "call_1",
        CallStatus.REJECTED,
        "conflicting_start",
    )


# -- replays ----------------------------------------------------------------------


def test_events_replayed_after_a_reconnect_change_nothing() -> None:
    r = Responses()
    acc = Accumulator("openai-responses", dispatch=DispatchMode.ON_CALL_COMPLETE)
    events = [r.added(0, "send_email"), r.delta(0, '{"to":'), r.delta(0, '"a@example.com"}')]
    events.append(r.done(0, "send_email", '{"to":"a@example.com"}'))
    released = feed_all(acc, events)
    acc.reconnected()
    released += feed_all(acc, events[1:])  # resumed from an earlier sequence number
    released += acc.feed(r.completed())
    assert [c.call_id for c in released] == ["call_0"]
    assert released[0].arguments == {"to": "a@example.com"}
    assert acc.anomalies == ()
    assert acc.stats.replayed_events == 3


def test_the_same_sequence_number_with_other_content_is_a_conflict_not_a_replay() -> None:
    r = Responses()
    acc = Accumulator("openai-responses")
    delta = r.delta(0, '{"to":')
    feed_all(acc, [r.added(0, "send_email"), delta])
    with pytest.raises(ReplayConflictError) as info:
        acc.feed(dict(delta, delta='{"cc":'))
    assert info.value.event_index == 2
    assert "cc" not in str(info.value)


def sse(data: dict[str, Any], event_id: str, event: str = "message") -> ServerSentEvent:
    return ServerSentEvent(event=event, data=json.dumps(data), id=event_id)


def anthropic_tool_events() -> list[dict[str, Any]]:
    block = {"type": "tool_use", "id": "toolu_1", "name": "note", "input": {}}

    def part(text: str) -> dict[str, Any]:
        delta = {"type": "input_json_delta", "partial_json": text}
        return {"type": "content_block_delta", "index": 0, "delta": delta}

    return [
        {"type": "content_block_start", "index": 0, "content_block": block},
        part('{"s":"'),
        part("ab"),
        part("ab"),
        part('"}'),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
        {"type": "message_stop"},
    ]


def test_sse_event_ids_recognise_a_replayed_run_of_events() -> None:
    start, first, ab, ab_again, last, stop, delta, end = anthropic_tool_events()
    # The server puts an id on some events only: the second "ab" inherits id 3.
    original = [sse(start, "1"), sse(first, "2"), sse(ab, "3"), sse(ab_again, "3")]
    acc = Accumulator("anthropic")
    feed_all(acc, original)
    acc.reconnected()
    feed_all(acc, original[2:])  # the server resumes from an earlier id
    rest = [sse(last, "4"), sse(stop, "5"), sse(delta, "6"), sse(end, "7")]
    [call] = feed_all(acc, rest)
    assert call.arguments == {"s": "abab"}
    assert acc.stats.replayed_events == 2
    assert acc.anomalies == ()


def test_a_replay_resumed_after_the_event_that_set_the_id_is_recognised() -> None:
    """A WHATWG server given Last-Event-ID 3 resends what followed event 3, including
    the events that inherited id 3, which the client had already received."""
    start, first, ab, ab_again, last, stop, delta, end = anthropic_tool_events()
    cd = dict(ab_again, delta={"type": "input_json_delta", "partial_json": "cd"})
    original = [sse(start, "1"), sse(first, "2"), sse(ab, "3"), sse(cd, "3")]
    acc = Accumulator("anthropic")
    feed_all(acc, original)
    acc.reconnected()
    feed_all(acc, original[3:])  # resumed after the event that set id 3
    rest = [sse(last, "3"), sse(stop, "5"), sse(delta, "6"), sse(end, "7")]
    [call] = feed_all(acc, rest)
    assert call.arguments == {"s": "abcd"}  # not "abcdcd": the resent fragment was dropped
    assert acc.stats.replayed_events == 1
    assert acc.anomalies == ()


def test_a_resumed_run_after_only_its_first_event_is_a_continuation() -> None:
    start, first, ab, _, last, stop, delta, end = anthropic_tool_events()
    acc = Accumulator("anthropic")
    feed_all(acc, [sse(start, "1"), sse(first, "2"), sse(ab, "3")])
    acc.reconnected()
    # The client had only the event that set id 3: what follows it is new.
    [call] = feed_all(acc, [sse(last, "3"), sse(stop, "5"), sse(delta, "6"), sse(end, "7")])
    assert call.arguments == {"s": "ab"}
    assert acc.stats.replayed_events == 0


def test_a_legitimately_repeated_fragment_under_one_inherited_id_is_kept() -> None:
    start, first, ab, ab_again, last, stop, delta, end = anthropic_tool_events()
    events = [sse(start, "1"), sse(first, "1"), sse(ab, "1"), sse(ab_again, "1"), sse(last, "1")]
    acc = Accumulator("anthropic")
    [call] = feed_all(acc, [*events, sse(stop, "1"), sse(delta, "1"), sse(end, "1")])
    assert call.arguments == {"s": "abab"}
    assert acc.stats.replayed_events == 0


def test_a_replay_that_diverges_is_a_conflict() -> None:
    start, first, ab, _, last, _, _, _ = anthropic_tool_events()
    acc = Accumulator("anthropic")
    feed_all(acc, [sse(start, "1"), sse(first, "2"), sse(ab, "2"), sse(last, "2")])
    acc.reconnected()
    acc.feed(sse(first, "2"))
    with pytest.raises(ReplayConflictError):
        acc.feed(sse(last, "2"))


# -- limits -------------------------------------------------------------------------


def test_the_number_of_calls_is_bounded() -> None:
    r = Responses()
    acc = Accumulator("openai-responses", max_calls=2)
    feed_all(acc, [r.added(0, "f"), r.added(1, "f")])
    with pytest.raises(AccumulatorLimitExceeded) as info:
        acc.feed(r.added(2, "f"))
    assert (info.value.limit, info.value.limit_value, info.value.event_index) == ("max_calls", 2, 2)


def test_argument_bytes_per_call_are_bounded_in_utf8_bytes() -> None:
    r = Responses()
    acc = Accumulator("openai-responses", max_call_argument_bytes=10)
    feed_all(acc, [r.added(0, "f"), r.delta(0, '{"a":"')])
    with pytest.raises(AccumulatorLimitExceeded) as info:
        acc.feed(r.delta(0, "ééé"))  # 6 bytes, 3 characters: 6 + 6 > 10
    assert info.value.limit == "max_call_argument_bytes"
    assert "é" not in str(info.value)


def test_argument_bytes_of_a_whole_response_are_bounded() -> None:
    r = Responses()
    acc = Accumulator("openai-responses", max_total_argument_bytes=30)
    feed_all(acc, r.call(0, "f", '{"a":"0123456789"}'))  # 18 bytes
    with pytest.raises(AccumulatorLimitExceeded) as info:
        feed_all(acc, r.call(1, "f", '{"b":"0123456789"}'))
    assert info.value.limit == "max_total_argument_bytes"


def test_arguments_given_only_at_completion_count_against_the_limit_too() -> None:
    r = Responses()
    acc = Accumulator("openai-responses", max_call_argument_bytes=8)
    acc.feed(r.added(0, "f"))
    with pytest.raises(AccumulatorLimitExceeded):
        acc.feed(r.done(0, "f", '{"a":"0123456789"}'))


# -- malformed input -------------------------------------------------------------------


def test_malformed_json_names_the_event_index_and_not_the_payload() -> None:
    acc = Accumulator("anthropic")
    acc.feed(ServerSentEvent("ping", '{"type": "ping"}', ""))
    with pytest.raises(MalformedEventError) as info:
        acc.feed(ServerSentEvent("message", '{"type":"content_block_delta","secret":"hunter2', ""))
    assert info.value.event_index == 1
    assert "hunter2" not in str(info.value)
    assert isinstance(info.value, AgentGateError)


@pytest.mark.parametrize(
    "data",
    [
        "[1, 2]",
        '"just a string"',
        '{"type": 42}',
        '{"type": "content_block_start", "index": "zero", "content_block": {}}',
        '{"type": "content_block_delta", "index": 0, "delta": "hunter2"}',
    ],
)
def test_events_of_the_wrong_shape_are_typed_errors(data: str) -> None:
    acc = Accumulator("anthropic")
    with pytest.raises(MalformedEventError) as info:
        acc.feed(ServerSentEvent("message", data, ""))
    assert "hunter2" not in str(info.value)


def test_the_sse_event_name_must_agree_with_the_payload_type() -> None:
    acc = Accumulator("anthropic")
    with pytest.raises(MalformedEventError):
        acc.feed(ServerSentEvent("message_stop", '{"type": "ping"}', ""))


def test_unknown_provider_names_are_typed_errors() -> None:
    with pytest.raises(UnknownProviderError) as info:
        Accumulator("bedrock")
    assert "openai-responses" in str(info.value)


def test_an_object_of_no_known_shape_is_a_typed_error() -> None:
    with pytest.raises(MalformedEventError):
        Accumulator("gemini").feed(object())


# -- diagnostics ------------------------------------------------------------------------


def test_unknown_event_types_and_heartbeats_are_counted_not_fatal_and_not_progress() -> None:
    acc = Accumulator("anthropic")
    feed_all(
        acc,
        [
            {"type": "ping"},
            ServerSentEvent("message", "", ""),
            {"type": "content_block_flux", "index": 0},
            {"type": "content_block_flux", "index": 1},
            {"type": "message_start", "message": {"id": "msg_1"}},
        ],
    )
    stats = acc.stats
    assert (stats.events, stats.heartbeats, stats.unknown_events) == (5, 2, 2)
    assert stats.unknown_types == {"content_block_flux": 2}
    assert stats.progress_events == 1


def test_events_after_the_terminal_are_counted_and_ignored() -> None:
    r = Responses()
    acc = Accumulator("openai-responses")
    feed_all(acc, [r.completed(), *r.call(0, "send_email", "{}")])
    assert acc.stats.events_after_terminal == 3
    assert acc.stats.calls == 0
    assert acc.close() == []


# -- SDK objects -------------------------------------------------------------------------


class SdkModel(BaseModel):
    """Stands in for an official SDK's typed event: pydantic, camelCase aliases."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")


class GeminiFunctionCall(SdkModel):
    name: str
    args: dict[str, Any] | None = None
    id: str | None = None


class GeminiPart(SdkModel):
    text: str | None = None
    function_call: GeminiFunctionCall | None = None


class GeminiContent(SdkModel):
    parts: list[GeminiPart]
    role: str = "model"


class GeminiCandidate(SdkModel):
    content: GeminiContent | None = None
    finish_reason: str | None = None
    index: int | None = None


class GeminiChunk(SdkModel):
    candidates: list[GeminiCandidate]
    response_id: str | None = None


def gemini_chunk(parts: list[GeminiPart], finish: str | None = None) -> GeminiChunk:
    candidate = GeminiCandidate(content=GeminiContent(parts=parts), finish_reason=finish, index=0)
    return GeminiChunk(candidates=[candidate], response_id="resp-7")


def test_sdk_objects_are_dumped_not_re_split() -> None:
    acc = Accumulator("gemini", dispatch=DispatchMode.ON_CALL_COMPLETE)
    call_part = GeminiPart(
        function_call=GeminiFunctionCall(name="get_weather", args={"city": "Oslo"})
    )
    assert acc.feed(gemini_chunk([call_part])) == []
    [call] = acc.feed(gemini_chunk([GeminiPart(text="")], "STOP"))
    assert (call.call_id, call.arguments) == ("resp-7:0:0", {"city": "Oslo"})
    assert acc.terminal == Terminal(TerminalKind.COMPLETED)


def test_gemini_ids_are_the_same_for_the_same_stream() -> None:
    def ids() -> list[str]:
        acc = Accumulator("gemini")
        parts = [
            GeminiPart(function_call=GeminiFunctionCall(name="a", args={})),
            GeminiPart(function_call=GeminiFunctionCall(name="b", args={"x": 1})),
        ]
        return [c.call_id for c in acc.feed(gemini_chunk(parts, "STOP"))]

    assert ids() == ids() == ["resp-7:0:0", "resp-7:0:1"]


def test_gemini_keeps_a_call_id_the_wire_does_give() -> None:
    acc = Accumulator("gemini")
    part = GeminiPart(function_call=GeminiFunctionCall(name="a", args={}, id="fc-given"))
    [call] = acc.feed(gemini_chunk([part], "STOP"))
    assert call.call_id == "fc-given"


def test_gemini_snake_case_mappings_are_accepted() -> None:
    acc = Accumulator("gemini")
    chunk = {
        "response_id": "r9",
        "candidates": [
            {
                "index": 0,
                "finish_reason": "STOP",
                "content": {"parts": [{"function_call": {"name": "f", "args": {"k": "v"}}}]},
            }
        ],
    }
    [call] = acc.feed(chunk)
    assert (call.call_id, call.arguments) == ("r9:0:0", {"k": "v"})


def test_gemini_streamed_partial_arguments_are_assembled_not_guessed() -> None:
    acc = Accumulator("gemini")
    part = {
        "functionCall": {
            "name": "f",
            "partialArgs": [{"jsonPath": "$.k", "stringValue": "v", "willContinue": True}],
            "willContinue": True,
        }
    }
    rest = {"functionCall": {"partialArgs": [{"jsonPath": "$.k", "stringValue": "w"}]}}

    def chunk(p: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        candidate: dict[str, Any] = {"index": 0, "content": {"parts": [p]}}
        if finish is not None:
            candidate["finishReason"] = finish
        return {"responseId": "r", "candidates": [candidate]}

    assert acc.feed(chunk(part)) == []
    [call] = acc.feed(chunk(rest, "STOP"))
    assert (call.call_id, call.status, call.arguments) == (
        "r:0:0",
        CallStatus.COMPLETE,
        {"k": "vw"},
    )


def test_chat_sdk_stream_helper_events_are_unwrapped_and_its_guesses_ignored() -> None:
    fragment = {"index": 0, "id": "call_9", "function": {"name": "f", "arguments": '{"a":1}'}}
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]}
    finish = {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    guess = {"type": "tool_calls.function.arguments.done", "name": "f", "index": 0}
    acc = Accumulator("openai-chat", dispatch=DispatchMode.ON_CALL_COMPLETE)
    assert feed_all(acc, [{"type": "chunk", "chunk": chunk, "snapshot": {}}, guess]) == []
    [call] = acc.feed({"type": "chunk", "chunk": finish, "snapshot": {}})
    assert call.arguments == {"a": 1}
    # An SDK never shows [DONE]: the end of its iteration cannot prove success.
    assert acc.close() == []
    assert acc.terminal == Terminal(TerminalKind.TRUNCATED)
    assert acc.stats.unknown_types == {"tool_calls.function.arguments.done": 1}


def test_anthropic_start_input_is_used_only_when_no_fragments_follow() -> None:
    block = {"type": "tool_use", "id": "toolu_9", "name": "f", "input": {"given": True}}
    acc = Accumulator("anthropic")
    [call] = feed_all(
        acc,
        [
            {"type": "content_block_start", "index": 0, "content_block": block},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
            {"type": "message_stop"},
        ],
    )
    assert call.arguments == {"given": True}


def test_a_recorded_stream_with_comments_counts_its_keep_alive_as_a_heartbeat() -> None:
    path = Path(__file__).resolve().parents[1] / "transcripts" / "openai_chat"
    raw = (path / "comments_and_keepalives.sse").read_bytes()
    acc = Accumulator("openai-chat")
    [call] = list(stream_calls([raw], acc))
    assert call.arguments == {"city": "Lisbon", "unit": "celsius"}
    stats = acc.stats
    assert (stats.events, stats.heartbeats, stats.progress_events) == (7, 1, 6)


class OtherLibraryEvent:
    """An SSE event from another library, which uses None for an unset type or id."""

    def __init__(self, data: str) -> None:
        self.event: str | None = None
        self.data = data
        self.id: str | None = None
        self.retry: int | None = None


def test_events_from_other_sse_libraries_are_accepted() -> None:
    acc = Accumulator("openai-chat", dispatch=DispatchMode.ON_CALL_COMPLETE)
    fragment = {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{}"}}
    first = {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]}
    finish = {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    acc.feed(OtherLibraryEvent(json.dumps(first)))
    [call] = acc.feed(OtherLibraryEvent(json.dumps(finish)))
    assert call.arguments == {}
    assert acc.feed(OtherLibraryEvent("[DONE]")) == []
    assert acc.terminal == Terminal(TerminalKind.COMPLETED)

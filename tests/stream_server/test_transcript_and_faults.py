"""Transcripts (framing, ids, resume points) and fault plans, without a socket."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_gate.sse import ServerSentEvent, SSEDecoder
from agent_gate.stream_server import (
    CutMode,
    ErrorStyle,
    Fault,
    FaultRule,
    HeartbeatKind,
    IdMode,
    Transcript,
    TranscriptEvent,
    error_body,
)

TRANSCRIPTS = Path(__file__).parent / "transcripts"


def decode(raw: bytes) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events = decoder.feed(raw)
    assert not decoder.end().discarded_partial_event
    return events


def test_sse_file_keeps_the_ids_it_set_and_their_inheritance() -> None:
    t = Transcript.from_file(TRANSCRIPTS / "sparse_ids.sse")
    assert [e.id for e in t.events] == ["a", None, "c", None]
    assert t.resume_ids == ("a", "a", "c", "c")
    assert t.events[2].data == "line one\nline two"
    body, ends = t.encoded()
    assert ends[-1] == len(body)
    # what is served decodes to the same events with the same inherited ids
    assert [(e.event, e.data, e.id) for e in decode(body)] == [
        ("open", '{"n": 1}', "a"),
        ("delta", '{"n": 2}', "a"),
        ("delta", "line one\nline two", "c"),
        ("message", '{"n": 4}', "c"),
    ]


def test_id_modes() -> None:
    path = TRANSCRIPTS / "sparse_ids.sse"
    assert [e.id for e in Transcript.from_file(path, id_mode=IdMode.ASSIGN).events] == [
        "1",
        "2",
        "3",
        "4",
    ]
    none = Transcript.from_file(path, id_mode=IdMode.NONE)
    assert [e.id for e in none.events] == [None] * 4
    assert b"id:" not in none.encoded()[0]
    auto = Transcript(["x", "y"])
    assert auto.resume_ids == ("1", "2")


def test_jsonl_file_and_mixed_inputs() -> None:
    t = Transcript.from_file(TRANSCRIPTS / "events.jsonl")
    assert [(e.event, e.data, e.id) for e in t.events] == [
        ("delta", '{"k":1}', None),
        ("delta", "plain text", "x1"),
        (None, "no type", None),
    ]
    mixed = Transcript(
        [TranscriptEvent("a", "t"), ServerSentEvent("u", "b", "9"), {"data": "c"}, "d"]
    )
    assert [e.data for e in mixed.events] == ["a", "b", "c", "d"]
    assert mixed.resume_ids == ("", "9", "9", "9")


def test_json_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"event": "e", "data": "1"}, {"data": "2"}]))
    assert [e.data for e in Transcript.from_file(path).events] == ["1", "2"]


def test_start_after_uses_the_event_that_set_the_id() -> None:
    t = Transcript.from_file(TRANSCRIPTS / "sparse_ids.sse")
    assert t.start_after(None) == 0
    assert t.start_after("") == 0
    # a client holding "a" has the event that set it, maybe its follower too:
    # the follower is sent again rather than risked lost
    assert t.start_after("a") == 1
    assert t.start_after("c") == 3
    assert t.start_after("zzz") is None


def test_sequence_numbers_and_response_id() -> None:
    t = Transcript(
        [
            {"data": json.dumps({"sequence_number": 0, "response": {"id": "resp_1"}})},
            {"data": json.dumps({"sequence_number": 1})},
            {"data": "not json"},
            {"data": json.dumps({"sequence_number": 2})},
        ]
    )
    assert t.response_id() == "resp_1"
    assert t.start_after_sequence(-1) == 0
    assert t.start_after_sequence(0) == 1
    assert t.start_after_sequence(1) == 3
    assert t.start_after_sequence(2) == 4
    assert Transcript(["x"]).response_id() is None


def test_event_encoding_rules() -> None:
    assert TranscriptEvent("a\nb", "message", "7").encode() == b"id: 7\ndata: a\ndata: b\n\n"
    assert TranscriptEvent("", None, None).encode() == b"data: \n\n"


# -- fault plans -------------------------------------------------------------------


ENDS = [10, 25, 40]


@pytest.mark.parametrize(
    ("fault", "offset"),
    [
        (Fault(), None),
        (Fault(cut_after_events=0), 0),
        (Fault(cut_after_events=2), 25),
        (Fault(cut_after_events=9), 40),
        (Fault(cut_inside_event=0), 5),
        (Fault(cut_inside_event=1), 17),
        (Fault(cut_inside_event=7), None),
        (Fault(cut_at_byte=12), 12),
        (Fault(cut_at_byte=999), 40),
        (Fault(cut_at_byte=30, cut_after_events=1), 10),
    ],
)
def test_every_cut_is_a_byte_offset(fault: Fault, offset: int | None) -> None:
    assert fault.cut_offset(ENDS) == offset


def test_cut_offsets_skip_a_prefix() -> None:
    assert Fault(cut_after_events=0).cut_offset([15, 30], start=5) == 5
    assert Fault(cut_inside_event=0).cut_offset([15, 30], start=5) == 10


def test_query_round_trip() -> None:
    fault = Fault(
        status=529,
        error_style=ErrorStyle.ANTHROPIC,
        cut_inside_event=3,
        cut=CutMode.CLEAN,
        chunk_min=2,
        chunk_max=9,
        seed=4,
        drip=0.02,
        heartbeat_interval=0.1,
        heartbeat=HeartbeatKind.BOTH,
        ignore_last_event_id=True,
    )
    query = fault.to_query()
    assert query["status"] == "529" and query["cut"] == "clean"
    assert Fault.from_query(query) == fault
    assert Fault.from_query({"times": "1"}) is None
    assert Fault().to_query() == {}


def test_unknown_fault_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="cut_after_event"):
        Fault.from_query({"cut_after_event": "3"})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"chunk_min": 3},
        {"chunk_min": 5, "chunk_max": 2},
        {"drip": -1.0},
        {"heartbeat_interval": 0.0},
    ],
)
def test_fault_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Fault(**kwargs)  # type: ignore[arg-type]


def test_rule_matching() -> None:
    rule = FaultRule(Fault(status=500), path="/streams/a", method="post")
    assert rule.matches("POST", "/streams/a")
    assert not rule.matches("GET", "/streams/a")
    assert not rule.matches("POST", "/streams/b")


@pytest.mark.parametrize(
    ("style", "status", "check"),
    [
        (ErrorStyle.OPENAI, 429, lambda b: b["error"]["code"] == "rate_limit_exceeded"),
        (ErrorStyle.OPENAI, 500, lambda b: b["error"]["type"] == "server_error"),
        (
            ErrorStyle.ANTHROPIC,
            529,
            lambda b: (
                b["error"]["type"] == "overloaded_error"
                and b["type"] == "error"
                and b["request_id"] == "req_x"
            ),
        ),
        (ErrorStyle.ANTHROPIC, 429, lambda b: b["error"]["type"] == "rate_limit_error"),
        (
            ErrorStyle.GEMINI,
            429,
            lambda b: b["error"]["status"] == "RESOURCE_EXHAUSTED" and b["error"]["code"] == 429,
        ),
    ],
)
def test_error_bodies_have_the_providers_shapes(
    style: ErrorStyle, status: int, check: object
) -> None:
    body = json.loads(error_body(status, style, None, "req_x"))
    assert check(body)  # type: ignore[operator]

"""Whatever the reads look like, the same stream gives the same events.

A network read is not a line and a line is not an event: every stream here is
fed whole, one byte at a time, cut at every single point, and in random
chunkings, and must always dispatch the same events and end the same way. A
differential test also compares the decoder with a direct, slow transcription
of the WHATWG algorithm (decode the text first, then walk it line by line).
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_gate.sse import ServerSentEvent, SSEDecoder, StreamEnd
from agent_gate.sse._reference import reference_events

STREAMS: dict[str, bytes] = {
    "basic": b'event: note\ndata: {"text":\ndata: "x"}\n\ndata: second\n\n',
    "crlf": b"id: 1\r\nevent: a\r\ndata: one\r\n\r\nid: 2\r\ndata: two\r\n\r\n",
    "cr_only": b"data: a\rdata: b\r\rretry: 10\r\r",
    "mixed_eol": b"data: a\r\ndata: b\rdata: c\n\r\n\r\rdata: d\n\n",
    "bom_utf8": "\ufeffdata: 中文🙂\n\nid: é\ndata: ü\r\n\r\n".encode(),
    "comments_unknown": b": ping\n\nfoo: bar\ndata: x\n: mid\ndata: y\n\n:\n\n",
    "empty_data": b"data\n\ndata:\n\ndata:\ndata:\n\n",
    "ids": b"id: 1\ndata: a\n\nid\n\nid: 3\x004\ndata: b\n\nid: 5\n\n",
    "invalid_utf8": b"data: \xff\xfe\xc3\n\ndata: \xe2\x82\r\n\r\n",
    "truncated_tail": b"data: a\n\ndata: cut here",
    "truncated_block": b'data: a\n\nevent: x\ndata: {"complete":true}\n',
    "separators": "data: a\u2028b\u0085c\x0bd\x0ce\x1cf\n\n".encode(),
    "done_marker": b'data: {"a":1}\n\ndata: [DONE]\n\n',
}


def run(stream: bytes, cuts: list[int]) -> tuple[list[ServerSentEvent], StreamEnd]:
    decoder = SSEDecoder()
    events: list[ServerSentEvent] = []
    bounds = [0, *sorted(cuts), len(stream)]
    for start, stop in itertools.pairwise(bounds):
        events += decoder.feed(stream[start:stop])
    return events, decoder.end()


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_every_single_cut_point_gives_the_same_result(name: str) -> None:
    stream = STREAMS[name]
    whole = run(stream, [])
    for cut in range(len(stream) + 1):
        assert run(stream, [cut]) == whole, f"{name}: cut at {cut}"


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_one_byte_at_a_time_gives_the_same_result(name: str) -> None:
    stream = STREAMS[name]
    assert run(stream, list(range(1, len(stream)))) == run(stream, [])


@settings(max_examples=300, deadline=None)
@given(data=st.data(), name=st.sampled_from(sorted(STREAMS)))
def test_random_chunkings_give_the_same_result(data: st.DataObject, name: str) -> None:
    stream = STREAMS[name]
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    assert run(stream, cuts) == run(stream, [])


# -- differential test against a literal reading of the spec ---------------------


def spec_reference(stream: bytes) -> tuple[list[ServerSentEvent], str, int | None]:
    """The package's WHATWG oracle (``agent_gate.sse._reference``) on the whole stream."""
    events, last_id, retry, _comments = reference_events(stream)
    return events, last_id, retry


TOKENS = [
    b"data",
    b"data:",
    b"data: ",
    b"event:",
    b"event: t",
    b"id:",
    b"id: 7",
    b"id: \x00",
    b"retry: 5",
    b"retry: x",
    b":",
    b": c",
    b"x",
    b" ",
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b"\xef\xbb\xbf",
    b"\xe4\xb8",
    b"\xad",
    b"\xff",
    "\u2028".encode(),
    b"Data:",
    b"{}",
    # whole common events, which the decoder takes on a faster path
    b"event: t\ndata: {}\n\n",
    b"data: d\n\n",
    b"event:\ndata:\n\n",
    b"event: u\r\ndata: e\r\n\r\n",
    b"data:  two\n\n",
    b"event: t\ndata: a\ndata: b\n\n",
]


@settings(max_examples=500, deadline=None)
@given(
    parts=st.lists(st.sampled_from(TOKENS), max_size=40),
    cuts=st.lists(st.integers(0, 400), max_size=8),
)
def test_decoder_agrees_with_the_spec_reference(parts: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(parts)
    events, end = run(stream, [c for c in cuts if c <= len(stream)])
    expected_events, expected_last_id, expected_retry = spec_reference(stream)
    assert events == expected_events
    assert end.last_event_id == expected_last_id
    assert end.retry == expected_retry

"""Limits: each one separate, each a typed error that says where, none leaks data."""

from __future__ import annotations

import tracemalloc

import pytest

from agent_gate import AgentGateError
from agent_gate.sse import DecoderState, SSEDecoder, SSELimitExceeded, SSEStateError

SECRET = b"sk-SECRET-token-0123456789"


def test_line_limit_on_a_complete_line_names_offset_and_event_index() -> None:
    decoder = SSEDecoder(max_line_bytes=32)
    first = b"data: ok\n\n"
    with pytest.raises(SSELimitExceeded) as info:
        decoder.feed(first + b"data: " + SECRET + SECRET + b"\n\n")
    err = info.value
    assert isinstance(err, AgentGateError)
    assert (err.limit, err.limit_bytes, err.offset, err.event_index) == (
        "max_line_bytes",
        32,
        len(first),
        1,
    )
    assert [e.data for e in err.events] == ["ok"]  # what was delivered is not lost
    assert SECRET.decode() not in str(err)
    assert "max_line_bytes" in str(err) and f"offset {len(first)}" in str(err)


def test_line_limit_on_an_unterminated_line_stops_buffering() -> None:
    decoder = SSEDecoder(max_line_bytes=1000)
    decoder.feed(b"data: a\n\n")
    with pytest.raises(SSELimitExceeded) as info:
        for _ in range(100):  # bounded: the limit trips after about ten reads
            decoder.feed(b"x" * 100)
    assert info.value.limit == "max_line_bytes"
    assert info.value.offset == len(b"data: a\n\n")
    assert decoder.state is DecoderState.ERROR


def test_line_limit_offset_after_crlf_lines_fed_byte_by_byte() -> None:
    decoder = SSEDecoder(max_line_bytes=10)
    prefix = b"id: 1\r\ndata: a\r\n\r\n"
    stream = prefix + b"data: 0123456789\r\n\r\n"
    with pytest.raises(SSELimitExceeded) as info:
        for i in range(len(stream)):
            decoder.feed(stream[i : i + 1])
    assert info.value.offset == len(prefix)
    assert info.value.event_index == 1


def test_a_line_of_exactly_the_limit_passes() -> None:
    decoder = SSEDecoder(max_line_bytes=len(b"data: 1234"))
    assert [e.data for e in decoder.feed(b"data: 1234\r\n\r\n")] == ["1234"]


def test_event_limit_counts_data_across_lines() -> None:
    decoder = SSEDecoder(max_event_bytes=20)
    stream = b"data: 0123456789\ndata: 012345678\n\n"  # 10 + LF + 9 = 20: fits
    assert len(decoder.feed(stream)) == 1
    offending = b"data: 0123456789\ndata: " + SECRET + b"\n\n"
    with pytest.raises(SSELimitExceeded) as info:
        decoder.feed(offending)
    err = info.value
    assert (err.limit, err.event_index) == ("max_event_bytes", 1)
    assert err.offset == len(stream) + len(b"data: 0123456789\n")
    assert SECRET.decode() not in str(err)


def test_event_limit_applies_per_event_not_per_stream() -> None:
    decoder = SSEDecoder(max_event_bytes=8)
    events = decoder.feed(b"data: 12345678\n\n" * 50)
    assert len(events) == 50


def test_stream_limit_delivers_what_came_before_it() -> None:
    decoder = SSEDecoder(max_stream_bytes=25)
    decoder.feed(b"data: a\n\n")  # 9 bytes
    with pytest.raises(SSELimitExceeded) as info:
        decoder.feed(b"data: b\n\ndata: c\n\n")  # 18 more: 27 > 25
    err = info.value
    assert err.limit == "max_stream_bytes"
    assert err.offset == 25
    assert [e.data for e in err.events] == ["b"]
    with pytest.raises(SSEStateError):
        decoder.feed(b"\n")


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        SSEDecoder(max_line_bytes=0)


def test_memory_stays_bounded_by_the_limits_on_hostile_input() -> None:
    """A stream that never ends its line cannot make the decoder hoard memory."""
    decoder = SSEDecoder(max_line_bytes=64 * 1024, max_event_bytes=64 * 1024)
    chunk = b"y" * 4096
    tracemalloc.start()
    try:
        with pytest.raises(SSELimitExceeded):
            for _ in range(10_000):  # 40 MB if it were all kept; the limit stops it early
                decoder.feed(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024

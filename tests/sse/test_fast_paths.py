"""The decoder's short paths must mean exactly what the line machinery means.

Most reads take a short path: the bytes after the last blank line are kept as
a tail, and runs of events of the common shape (``event:`` line or none, one
``data: `` line, the blank line) are built in bulk. Big lone events skip the
tokenizer. These tests drive the decoder into those paths (many reads of
common events, in LF and CRLF) and through every way out of them (lone CR,
mixed line ends, comments, retry, ids, limits, a CR at the end of a read), and
compare with the package's reading of the spec (``agent_gate.sse._reference``) and
with the same stream fed whole.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_gate.sse import (
    DecoderState,
    ServerSentEvent,
    SSEDecoder,
    SSELimitExceeded,
    StreamEnd,
)
from agent_gate.sse._reference import reference_events


def reference(stream: bytes) -> tuple[list[ServerSentEvent], str, int | None, int]:
    """The package's WHATWG oracle on the whole stream: events, last id, retry, comments."""
    return reference_events(stream)


def feed_in(
    stream: bytes, sizes: list[int], **limits: int
) -> tuple[list[ServerSentEvent], StreamEnd]:
    decoder = SSEDecoder(**limits)
    events: list[ServerSentEvent] = []
    at = 0
    for size in itertools.cycle(sizes):
        if at >= len(stream):
            break
        events += decoder.feed(stream[at : at + size])
        at += size
    return events, decoder.end()


def common(n: int, eol: bytes = b"\n", typed: bool = True) -> bytes:
    """``n`` events of the shape providers send."""
    return b"".join(
        (b"event: delta" + eol if typed else b"")
        + b'data: {"seq":%d,"delta":"\\u00e9 x"}' % i
        + eol
        + eol
        for i in range(n)
    )


# -- differential: generated streams, many small reads ------------------------------

COMMON_BLOCKS = [
    b'event: response.output_text.delta\ndata: {"delta":"hi"}\n\n',
    b'event: t\ndata: {"a":1}\n\n',
    b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n',
    'event: t\ndata: {"s":"中文é"}\n\n'.encode(),
    b"data: \n\n",
    b"event:\ndata: x\n\n",
    b"event: \ndata: y\n\n",
]
RARE_BLOCKS = [
    b": ping\n\n",
    b"id: 7\ndata: with id\n\n",
    b"id: \x00\ndata: nul id\n\n",
    b"retry: 250\n\n",
    b"event: t\n: mid\ndata: z\n\n",
    b"data:nospace\n\n",
    b"data:  two spaces\n\n",
    b"event: t\ndata: a\ndata: b\n\n",
    b"data: a\nevent: late\n\n",
    b"event\ndata: no colon\n\n",
    b"event: only\n\n",
    b"\n",
    b"Data: case\n\n",
    b"data: \xff\xfe bad utf-8\n\n",
    b"event: \xe4\xb8\ndata: cut type\n\n",
    b"id\n\n",
    b"foo: bar\ndata: unknown field\n\n",
    # single lines, so that blocks run into each other in any arrangement
    b"foo\n",
    b"data: line\n",
    b"event: t\n",
    b"data:\n",
]


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    blocks = draw(
        st.lists(
            st.one_of(
                st.sampled_from(COMMON_BLOCKS),
                st.sampled_from(COMMON_BLOCKS),
                st.sampled_from(COMMON_BLOCKS),
                st.sampled_from(RARE_BLOCKS),
            ),
            max_size=60,
        )
    )
    style = draw(st.sampled_from(["lf", "crlf", "cr", "mixed"]))
    out: list[bytes] = []
    for block in blocks:
        eol = {"lf": "lf", "crlf": "crlf", "cr": "cr"}.get(style) or draw(
            st.sampled_from(["lf", "crlf", "cr"])
        )
        out.append(block.replace(b"\n", {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}[eol]))
    stream = b"".join(out)
    if draw(st.booleans()):
        stream += draw(st.sampled_from([b"data: unfinished", b"event: t\ndata: no blank\n", b"\r"]))
    if draw(st.integers(0, 9)) == 0:
        stream = b"\xef\xbb\xbf" + stream
    return stream


@settings(max_examples=400, deadline=None)
@given(stream=streams(), sizes=st.lists(st.integers(1, 400), min_size=1, max_size=12))
def test_short_paths_agree_with_the_spec_and_with_one_read(stream: bytes, sizes: list[int]) -> None:
    events, end = feed_in(stream, sizes)
    expected, last_id, retry, comments = reference(stream)
    assert events == expected
    assert (end.last_event_id, end.retry, end.comments) == (last_id, retry, comments)
    assert (events, end) == feed_in(stream, [len(stream) + 1])


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
@pytest.mark.parametrize("typed", [True, False])
@pytest.mark.parametrize("size", [1, 7, 64, 333, 4096])
def test_common_events_in_any_read_size(eol: bytes, typed: bool, size: int) -> None:
    stream = common(300, eol, typed)
    events, end = feed_in(stream, [size])
    assert events == reference(stream)[0]
    assert len(events) == 300 and not end.discarded_partial_event


# -- what acts at once still acts at once on the short path ---------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
@pytest.mark.parametrize("before", [b"", b"event: x"])
def test_retry_acts_at_once_after_common_events(eol: bytes, before: bytes) -> None:
    decoder = SSEDecoder()
    decoder.feed(common(3, eol))
    decoder.feed(common(3, eol))  # a later read: the short path
    decoder.feed((before + eol if before else b"") + b"retry: 5" + eol + b"data: b" + eol)
    assert decoder.retry == 5


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
@pytest.mark.parametrize("before", [b"", b"event: x"])
def test_comments_count_at_once_after_common_events(eol: bytes, before: bytes) -> None:
    decoder = SSEDecoder()
    decoder.feed(common(3, eol))
    decoder.feed(common(3, eol))
    decoder.feed((before + eol if before else b"") + b": beat" + eol + b"data: b" + eol)
    assert decoder.comments == 1


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
def test_a_blank_line_alone_in_a_read_dispatches(eol: bytes) -> None:
    decoder = SSEDecoder()
    decoder.feed(common(2, eol))
    decoder.feed(common(2, eol))
    assert decoder.feed(b"data: c" + eol) == []
    assert decoder.feed(eol) == [ServerSentEvent("message", "c", "")]


@pytest.mark.parametrize("last", [b"data: x\r\n\n", b"data: x\n\n", b"data: x\n\r\n"])
def test_a_blank_line_of_mixed_ends_dispatches_at_once_after_crlf_events(last: bytes) -> None:
    decoder = SSEDecoder()
    decoder.feed(common(2, b"\r\n"))
    decoder.feed(common(2, b"\r\n"))
    assert decoder.feed(b"data: w\r\n\r\n" + last) == [
        ServerSentEvent("message", "w", ""),
        ServerSentEvent("message", "x", ""),
    ]
    assert not decoder.end().discarded_partial_event


def test_a_lone_cr_blank_line_dispatches_at_once_after_crlf_events() -> None:
    decoder = SSEDecoder()
    decoder.feed(common(2, b"\r\n"))
    decoder.feed(common(2, b"\r\n"))
    assert decoder.feed(b"data: a\r\r") == [ServerSentEvent("message", "a", "")]


def test_a_cr_at_the_end_of_a_read_waits_for_the_next_byte() -> None:
    decoder = SSEDecoder()
    decoder.feed(common(2, b"\r\n"))
    decoder.feed(common(2, b"\r\n"))
    assert decoder.feed(b"data: a\r\n\r") == [ServerSentEvent("message", "a", "")]
    assert decoder.feed(b"\ndata: b\r\n\r\n") == [ServerSentEvent("message", "b", "")]


def test_last_event_id_moves_only_at_dispatch_on_the_short_path() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"id: 1\ndata: a\n\n")
    decoder.feed(common(2))
    decoder.feed(b"id: 2\ndata: b\n")
    assert decoder.last_event_id == "1"
    assert decoder.feed(b"\n" + common(1)) == [
        ServerSentEvent("message", "b", "2"),
        ServerSentEvent("delta", '{"seq":0,"delta":"\\u00e9 x"}', "2"),
    ]


@pytest.mark.parametrize(
    "run",
    [
        # each passes some of the bulk checks and fails one
        b"event: a\ndata: 1\nfoo\nevent: b\ndata: 2\n\n",  # a field where a blank line goes
        b"event: a\ndata: 1\n\ndata: 2\nevent: b\n\n",  # data line where a head goes
        b"event: a\ndata: 1\n\nevent: b\nid: 2\n\n",  # not a data line
        b"event: a\ndata: 1\n\nevent: b\ndata:2\n\n",  # data without the space
        b"event: a\ndata: 1\n\nevent\ndata: 2\n\n",  # a head without a colon
        b"event: a\ndata: 1\n\nevents: b\ndata: 2\n\n",  # another field name
        b"data: 1\n\ndata: 2\nfoo\n\n",  # a data-only run with a stray field
        b"data: 1\n\nfoo: 2\n\n",
        b"data: 1\n\ndata: 2\ndata: 3\n\n",
        b"data: 1\n\n\ndata: 2\n\n",  # an extra blank line
        b"event: a\ndata: 1\n\n: c\ndata: 2\n\n",
    ],
)
@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
def test_runs_that_are_almost_common_take_the_full_rules(run: bytes, eol: bytes) -> None:
    stream = common(2, eol) + run.replace(b"\n", eol) + common(2, eol)
    for sizes in ([len(stream)], [len(common(2, eol)), len(run) + len(common(2, eol))]):
        events, _ = feed_in(stream, sizes)
        assert events == reference(stream)[0]


def test_many_event_types_are_all_named_right() -> None:
    stream = b"".join(b"event: type-%d\ndata: %d\n\n" % (i, i) for i in range(200))
    events, _ = feed_in(stream, [500])
    assert [(e.event, e.data) for e in events] == [(f"type-{i}", str(i)) for i in range(200)]


# -- limits on the short path ---------------------------------------------------------


def test_event_limit_on_the_short_path_names_the_line() -> None:
    decoder = SSEDecoder(max_event_bytes=40)
    first = common(2)
    decoder.feed(first)
    decoder.feed(common(1))
    big = b"data: " + b"x" * 41 + b"\n\n"
    with pytest.raises(SSELimitExceeded) as info:
        decoder.feed(b"data: ok\n\n" + big)
    err = info.value
    assert (err.limit, err.event_index) == ("max_event_bytes", 4)
    assert err.offset == len(first) + len(common(1)) + len(b"data: ok\n\n")
    assert [e.data for e in err.events] == ["ok"]


def test_stream_limit_after_the_short_path_delivers_what_came_before() -> None:
    stream = common(4)
    decoder = SSEDecoder(max_stream_bytes=len(stream) + 9)
    decoder.feed(stream[:50])
    decoder.feed(stream[50:])
    with pytest.raises(SSELimitExceeded) as info:
        decoder.feed(b"data: b\n\ndata: c\n\n")
    assert info.value.limit == "max_stream_bytes"
    assert info.value.offset == len(stream) + 9
    assert [e.data for e in info.value.events] == ["b"]


def test_line_limit_when_a_tail_keeps_growing() -> None:
    decoder = SSEDecoder(max_line_bytes=1000)
    decoder.feed(common(2))
    decoder.feed(common(2))
    with pytest.raises(SSELimitExceeded) as info:
        for _ in range(100):
            decoder.feed(b"x" * 30)
    assert info.value.limit == "max_line_bytes"
    assert info.value.offset == 2 * len(common(2))


# -- a big lone event -----------------------------------------------------------------

BIG = 200 * 1024


@pytest.mark.parametrize("head", [b"event: big\n", b"event:\n", b""])
@pytest.mark.parametrize("size", [1024, BIG + 100])
def test_big_event_in_small_reads(head: bytes, size: int) -> None:
    payload = "é" * (BIG // 2)
    stream = b"id: 9\n\n" + head + b"data: " + payload.encode() + b"\n\n"
    events, end = feed_in(stream, [size])
    name = "big" if head == b"event: big\n" else "message"
    assert events == [ServerSentEvent(name, payload, "9")]
    assert not end.discarded_partial_event


@pytest.mark.parametrize(
    "stream",
    [
        b"data: " + b"\xff" * BIG + b"\n\n",  # invalid UTF-8
        b"data:" + b"y" * BIG + b"\n\n",  # no space after the colon
        b"data:  " + b"y" * BIG + b"\n\n",  # two spaces: one is data
        b"data: " + b"y" * BIG + b"\ndata: z\n\n",  # two data lines
        b"event: a\nevent: b\ndata: " + b"y" * BIG + b"\n\n",  # the last type wins
        b"data: " + b"y" * BIG + b"\n\ndata: z\n\n",  # two events
        b"data: " + b"y" * BIG + b"\n\n\n",  # and a stray blank line
        b": c\ndata: " + b"y" * BIG + b"\n\n",
    ],
)
def test_big_texts_that_are_not_one_plain_event(stream: bytes) -> None:
    for sizes in ([len(stream)], [1000], [BIG]):
        events, end = feed_in(stream, sizes)
        assert events == reference(stream)[0]
        assert end.comments == reference(stream)[3]


@pytest.mark.parametrize("together", [True, False])
def test_big_event_over_the_event_limit_raises_with_its_offset(together: bool) -> None:
    decoder = SSEDecoder(max_event_bytes=BIG - 1)
    first = b"data: a\n\n"
    big = b"event: big\ndata: " + b"y" * BIG + b"\n\n"
    with pytest.raises(SSELimitExceeded) as info:
        if together:
            decoder.feed(first + big)
        else:
            decoder.feed(first)
            decoder.feed(big)
    assert (info.value.limit, info.value.event_index) == ("max_event_bytes", 1)
    assert info.value.offset == len(first) + len(b"event: big\n")


# -- CR on the short path: CRLF streams, a CR at a read's end, styles that switch -----


def fed_in_reads(stream: bytes, bounds: list[int]) -> list[list[ServerSentEvent]]:
    """The events each read returns, the stream cut at ``bounds``."""
    decoder = SSEDecoder()
    cuts = [0, *bounds, len(stream)]
    return [decoder.feed(stream[a:b]) for a, b in itertools.pairwise(cuts) if b > a]


def dispatched_by(stream: bytes, bounds: list[int]) -> list[list[ServerSentEvent]]:
    """What the spec dispatches once each prefix has arrived, read by read.

    A line end completes a line as soon as it arrives: a CR at the end of a
    prefix ends its line already (a following LF only joins it).
    """
    cuts = [0, *bounds, len(stream)]
    out: list[list[ServerSentEvent]] = []
    before = 0
    for a, b in itertools.pairwise(cuts):
        if b > a:
            events = reference(stream[:b])[0]
            out.append(events[before:])
            before = len(events)
    return out


def test_crlf_cut_between_cr_and_lf_at_every_offset() -> None:
    """Every CR of a CRLF stream ends a read, after the decoder took its short path."""
    warm = common(4, b"\r\n")
    body = common(6, b"\r\n") + b"id: 3\r\ndata: a\r\ndata: b\r\n\r\n" + common(2, b"\r\n")
    stream = warm + body
    for at in [i + 1 for i in range(len(warm), len(stream)) if stream[i] == 13]:
        for bounds in ([len(warm) // 2, len(warm), at], [len(warm), at, at + 1]):
            assert fed_in_reads(stream, bounds) == dispatched_by(stream, bounds), at


@pytest.mark.parametrize("size", [1, 2, 3, 5, 17, 64, 200])
def test_crlf_events_arrive_in_the_read_that_completes_them(size: int) -> None:
    stream = common(40, b"\r\n")
    bounds = list(range(size, len(stream), size))
    assert fed_in_reads(stream, bounds) == dispatched_by(stream, bounds)


STYLES = {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}


@pytest.mark.parametrize("first", sorted(STYLES))
@pytest.mark.parametrize("second", sorted(STYLES))
@pytest.mark.parametrize("size", [7, 50, 400])
def test_line_end_style_switching_within_a_stream(first: str, second: str, size: int) -> None:
    stream = (
        common(5, STYLES[first])
        + common(5, STYLES[second])
        + b"id: 9"
        + STYLES[second]
        + common(3, STYLES[first])
        + common(3, STYLES[second])
    )
    for offset in range(size):
        bounds = list(range(offset or size, len(stream), size))
        assert fed_in_reads(stream, bounds) == dispatched_by(stream, bounds), offset
        assert feed_in(stream, [size])[0] == reference(stream)[0]


@pytest.mark.parametrize(
    ("ending", "discarded", "dispatched"),
    [
        (b"data: a\r", True, []),  # a line ended by CR, no blank line: discarded
        (b"data: a\r\n\r", False, ["a"]),  # the blank line's CR alone dispatches
        (b"data: a\r\r", False, ["a"]),
        (b"event: t\r", True, []),
        (b"\r", False, []),
    ],
)
def test_a_lone_cr_at_the_end_of_a_crlf_stream(
    ending: bytes, discarded: bool, dispatched: list[str]
) -> None:
    decoder = SSEDecoder()
    decoder.feed(common(3, b"\r\n"))
    decoder.feed(common(3, b"\r\n"))
    events = decoder.feed(ending)
    assert [e.data for e in events] == dispatched
    assert decoder.end().discarded_partial_event is discarded


@pytest.mark.parametrize(
    "run",
    [
        b"data: a\r\n\ndata: b\n\r\n",  # CRLF and LF in the events the short path cuts
        b"event: t\rdata: a\r\n\r\n",  # a lone CR inside them
        b"data: a\r\rdata: b\r\n\r\n",
        b"event: t\r\ndata: a\r\n\r\n\r\n",  # a stray blank line
        b"id: 5\r\ndata: a\ndata: b\r\n\r\n",
    ],
)
def test_crlf_reads_with_other_line_ends_take_the_full_rules(run: bytes) -> None:
    stream = common(3, b"\r\n") + common(3, b"\r\n") + run + common(3, b"\r\n")
    bounds = [len(common(3, b"\r\n")), 2 * len(common(3, b"\r\n"))]
    assert fed_in_reads(stream, bounds) == dispatched_by(stream, bounds)
    events, end = feed_in(stream, [len(common(3, b"\r\n"))])
    assert events == reference(stream)[0]
    assert end.last_event_id == reference(stream)[1]


@pytest.mark.parametrize("run_eol", [b"\r\n", b"\n", b"\r"])
def test_event_limit_in_a_crlf_read_of_any_line_ends_names_the_line(run_eol: bytes) -> None:
    # Reads of at most 100 bytes take the short path, and cannot exceed the limit
    # alone: the data of an unfinished event, taken by the line machinery, can.
    decoder = SSEDecoder(max_event_bytes=200)
    first = b"data: " + b"x" * 150 + b"\r\n"
    assert decoder.feed(first) == []
    rest = b"data: ok" + run_eol + b"data: " + b"y" * 80 + b"\r\n\r\n"
    assert len(rest) <= 100
    with pytest.raises(SSELimitExceeded) as info:
        decoder.feed(rest)
    err = info.value
    assert (err.limit, err.event_index) == ("max_event_bytes", 0)
    assert err.offset == len(first) + len(b"data: ok") + len(run_eol)
    assert decoder.state is DecoderState.ERROR


@settings(max_examples=300, deadline=None)
@given(stream=streams(), sizes=st.lists(st.integers(1, 300), min_size=1, max_size=12))
def test_every_read_returns_exactly_the_events_it_completes(
    stream: bytes, sizes: list[int]
) -> None:
    bounds: list[int] = []
    for size in itertools.cycle(sizes):
        at = (bounds[-1] if bounds else 0) + size
        if at >= len(stream):
            break
        bounds.append(at)
    assert fed_in_reads(stream, bounds) == dispatched_by(stream, bounds)


# -- a tail longer than the read (up to the slack) stays on the short path -----------


def outcome(stream: bytes, sizes: list[int], **limits: int) -> tuple[object, ...]:
    """Events and end report, or the limit error and every event delivered before it."""
    decoder = SSEDecoder(**limits)
    events: list[ServerSentEvent] = []
    at = 0
    try:
        for size in itertools.cycle(sizes):
            if at >= len(stream):
                return ("ok", events, decoder.end())
            events += decoder.feed(stream[at : at + size])
            at += size
    except SSELimitExceeded as exc:
        return ("error", exc.limit, exc.offset, exc.event_index, events + list(exc.events))
    raise AssertionError("unreachable")


@pytest.mark.parametrize("limit", [30, 48, 64, 200, 3000])
@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
@pytest.mark.parametrize("sizes", [[1], [3], [2, 40], [100, 1, 1, 7], [700, 5]])
def test_short_reads_after_a_long_tail_respect_the_limits(
    limit: int, eol: bytes, sizes: list[int]
) -> None:
    # The slack lets a short read extend a longer tail; it must never let a
    # line or an event past a limit, however small the limits are.
    stream = common(6, eol) + b"data: " + b"z" * 150 + eol + eol + common(3, eol)
    whole = outcome(stream, [len(stream)], max_event_bytes=limit)
    assert outcome(stream, sizes, max_event_bytes=limit) == whole
    assert outcome(stream, sizes, max_line_bytes=limit) == outcome(
        stream, [len(stream)], max_line_bytes=limit
    )

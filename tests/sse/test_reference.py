"""``SSEDecoder`` against its oracle, ``agent_gate.sse._reference``, chunk by chunk.

The oracle is the spec text transcribed (bytes -> text -> lines -> events); the
decoder frames on bytes with several short paths. Both are fed the same stream
in the same reads, and after every read they must have handed out the same
events; at the end the same last event ID, retry, comment count and verdict on
a discarded partial event. Streams mix the shapes the short paths take (runs of
common events in LF and CRLF) with everything that must leave them (lone CRs,
comments, ``retry``, ids with NUL, invalid and split UTF-8, BOMs, unknown fields).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_gate.sse import ServerSentEvent, SSEDecoder
from agent_gate.sse import decoder as decoder_module
from agent_gate.sse._reference import ReferenceDecoder, reference_events

PIECES = [
    b'event: response.output_text.delta\ndata: {"delta":"hi"}\n\n',
    b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n',
    b"event: t\r\ndata: crlf\r\n\r\n",
    'data: {"s":"中文é"}\n\n'.encode(),
    b"data: \n\n",
    b"event:\ndata: x\n\n",
    b": ping\n\n",
    b"id: 7\n",
    b"id: \x00\n",
    b"id\n",
    b"retry: 250\n",
    b"retry: 2x\n",
    b"retry\n",
    b"data:nospace\n",
    b"data:  two spaces\n",
    b"event\n",
    b"Data: case\n",
    b"foo: bar\n",
    b"data: \xff\xfe bad\n",
    b"\xe4\xb8",
    b"\xad",
    "\u2028\u0085\x0b\x0c".encode(),
    b"\xef\xbb\xbf",
    b"data",
    b":",
    b" ",
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b"\r\r",
]


def lockstep(stream: bytes, cuts: list[int]) -> None:
    """Feed both decoders ``stream`` cut at ``cuts``; compare after every read."""
    fast, oracle = SSEDecoder(), ReferenceDecoder()
    at = 0
    for cut in [*sorted(cuts), len(stream)]:
        piece = stream[at:cut]
        at = max(at, cut)
        if not piece:
            continue
        got = fast.feed(piece)
        want = oracle.feed(piece)
        assert got == want, (stream, cuts, piece)
    end = fast.end()
    discarded = oracle.end()
    assert (end.last_event_id, end.retry, end.comments, end.events) == (
        oracle.last_event_id,
        oracle.retry,
        oracle.comments,
        oracle.events_dispatched,
    )
    assert end.discarded_partial_event == discarded


@settings(max_examples=400, deadline=None)
@given(
    parts=st.lists(st.sampled_from(PIECES), max_size=50),
    cuts=st.lists(st.integers(0, 2000), max_size=12),
)
def test_decoder_and_oracle_agree_after_every_read(parts: list[bytes], cuts: list[int]) -> None:
    lockstep(b"".join(parts), cuts)


SHORTCUTS = ("_SHORT_PATH", "_BULK_RUNS", "_BIG_EVENT")


@pytest.fixture(params=["as configured", "line machinery only"])
def decoder_paths(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The decoder as the process has it, and with every shortcut off (what
    AGENT_GATE_PURE_PYTHON=1 gives): both must agree with the oracle."""
    if request.param == "line machinery only":
        for name in SHORTCUTS:
            monkeypatch.setattr(decoder_module, name, False)
    return str(request.param)


@pytest.mark.parametrize("seed", range(20))
def test_seeded_random_streams_in_random_reads(seed: int, decoder_paths: str) -> None:
    """Long streams (up to a few hundred pieces), where the short path settles in and
    is then driven out: bounded, and reproducible from the seed alone."""
    rng = random.Random(seed)
    stream = b"".join(rng.choice(PIECES) for _ in range(rng.randint(50, 400)))
    for _ in range(5):
        cuts = [rng.randint(0, len(stream)) for _ in range(rng.randint(0, 60))]
        lockstep(stream, cuts)


def test_a_big_event_in_small_reads(decoder_paths: str) -> None:
    """Past 64 KiB one common event skips the tokenizer (``_one_big_event``)."""
    big = b"event: big\ndata: " + b"x\xc3\xa9" * 40_000 + b"\n\n"
    stream = big + b"data: after\n\n"
    lockstep(stream, [*range(1000, len(big), 1000), len(big)])
    lockstep(stream, [len(big)])
    lockstep(stream, [])


@pytest.mark.parametrize("size", [1, 2, 3, 5, 64])
def test_every_read_size_on_a_mixed_stream(size: int, decoder_paths: str) -> None:
    stream = b"".join(PIECES) * 3
    lockstep(stream, list(range(size, len(stream), size)))


def test_the_oracle_reads_the_spec_examples() -> None:
    """The oracle itself, on the spec's own examples (HTML, 9.2.6)."""
    stream = b"data: YHOO\ndata: +2\ndata: 10\n\n: test stream\n\ndata: first event\nid: 1\n\n"
    stream += b"data:second event\nid\n\ndata:  third event\n\n"
    events, last_id, retry, comments = reference_events(stream)
    assert events == [
        ServerSentEvent("message", "YHOO\n+2\n10", ""),
        ServerSentEvent("message", "first event", "1"),
        ServerSentEvent("message", "second event", ""),
        ServerSentEvent("message", " third event", ""),
    ]
    assert (last_id, retry, comments) == ("", None, 1)
    two = reference_events(b"data\n\ndata\ndata\n\ndata:")
    assert two[0] == [ServerSentEvent("message", "", ""), ServerSentEvent("message", "\n", "")]


def test_the_oracle_discards_an_unfinished_event_at_the_end() -> None:
    oracle = ReferenceDecoder()
    assert oracle.feed(b"data: a\r") == []
    assert oracle.feed(b"\n") == []
    assert oracle.end() is True
    comment_only = ReferenceDecoder()
    comment_only.feed(b": beat")
    assert comment_only.end() is False

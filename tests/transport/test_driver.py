"""The stream loop without I/O: a scripted executor answers its requests.

``sync_io`` and ``async_io`` only execute what ``loop.stream_loop`` asks for,
so the order of every send, read, close and sleep is pinned here once, with
no socket and no clock, and holds for both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from agent_gate.errors import (
    StreamConnectError,
    StreamHTTPStatusError,
    StreamIdleTimeout,
    StreamTruncatedError,
    TruncationReason,
)
from agent_gate.sse import ServerSentEvent
from agent_gate.transport import (
    ReconnectPolicy,
    StreamLimits,
    StreamOptions,
    StreamState,
    terminal_on,
)
from agent_gate.transport import loop as io_loop
from agent_gate.transport.loop import Exchange, Send, Step
from agent_gate.transport.session import Reconnect, StreamSession

SSE = {"content-type": "text/event-stream"}
NO_JITTER = ReconnectPolicy(initial_delay=0.25, jitter=0.0, max_attempts=2)
URL = "http://127.0.0.1:1/s"


@dataclass
class Connection:
    """One scripted answer to a ``Send``: a response head and its body chunks,
    or the exception the send raises. A chunk may be an exception the read raises."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: dict(SSE))
    chunks: list[bytes | Exception] = field(default_factory=list)
    send_error: Exception | None = None


@dataclass
class Script:
    connections: list[Connection]
    sent: list[httpx.Request] = field(default_factory=list)
    _body: Iterator[bytes | Exception] = field(default_factory=lambda: iter(()))

    def perform(self, request: io_loop.IORequest) -> object:
        if isinstance(request, Send):
            self.sent.append(request.request)
            conn = self.connections.pop(0)
            if conn.send_error is not None:
                raise conn.send_error
            self._body = iter(conn.chunks)
            return httpx.Response(conn.status, headers=conn.headers, request=request.request)
        if request is io_loop.READ:
            chunk = next(self._body, None)
            if isinstance(chunk, Exception):
                raise chunk
            return chunk
        return None  # CLOSE and Sleep change nothing a script can see


def run(
    script: Script,
    *,
    raise_on_truncation: bool = True,
    options: StreamOptions | None = None,
    on_reconnect: Callable[[Reconnect], None] | None = None,
) -> tuple[list[Step], StreamSession, Exchange]:
    session = (options or StreamOptions(reconnect=NO_JITTER)).session(
        "GET", URL, terminal_on(event_types={"done"})
    )
    with httpx.Client(timeout=5.0) as client:
        loop = io_loop.stream_loop(
            session,
            client,
            clock=lambda: 0.0,
            raise_on_truncation=raise_on_truncation,
            on_reconnect=on_reconnect,
        )
        exchange = Exchange(loop)
        steps: list[Step] = []
        try:
            for step in exchange:
                steps.append(step)
                if not isinstance(step, ServerSentEvent):
                    exchange.answer(script.perform, step)
        finally:
            exchange.close()
    return steps, session, exchange


def kinds(steps: list[Step]) -> list[str]:
    out = []
    for step in steps:
        if isinstance(step, ServerSentEvent):
            out.append(f"event {step.id}")
        elif isinstance(step, Send):
            out.append("send")
        elif isinstance(step, io_loop.Sleep):
            out.append(f"sleep {step.delay}")
        else:
            out.append(step.value)
    return out


def test_one_connection_reads_until_the_terminal_event_then_closes() -> None:
    body = b"id: 1\ndata: a\n\nid: 2\nevent: done\ndata: b\n\nid: 3\ndata: never\n\n"
    script = Script([Connection(chunks=[body[:10], body[10:]])])
    steps, session, exchange = run(script)
    assert kinds(steps) == ["send", "read", "read", "event 1", "event 2", "close"]
    assert session.state is StreamState.COMPLETED and exchange.error is None
    assert script.sent[0].headers["accept"] == "text/event-stream"


def test_a_cut_closes_sleeps_then_resends_with_the_last_event_id() -> None:
    noticed: list[Reconnect] = []
    script = Script(
        [
            Connection(chunks=[b"id: 7\ndata: a\n\n"]),
            Connection(chunks=[b"id: 8\nevent: done\ndata: b\n\n"]),
        ]
    )
    steps, session, _ = run(script, on_reconnect=noticed.append)
    assert kinds(steps) == [
        "send", "read", "event 7", "read", "close", "sleep 0.25",
        "send", "read", "event 8", "close",
    ]  # fmt: skip
    assert [r.cause for r in noticed] == ["eof"]
    assert "last-event-id" not in script.sent[0].headers
    assert script.sent[1].headers["last-event-id"] == "7"
    assert session.state is StreamState.COMPLETED


def test_an_error_body_is_read_only_up_to_its_limit() -> None:
    limits = StreamLimits(max_error_body_bytes=8)
    chunks: list[bytes | Exception] = [b'{"error"', b': "no"}', b"never asked for"]
    script = Script([Connection(status=500, headers={}, chunks=chunks)])
    with pytest.raises(StreamHTTPStatusError) as info:
        run(script, options=StreamOptions(limits=limits))
    assert info.value.status == 500
    assert script._body is not None and next(script._body) == b"never asked for"


def test_a_broken_error_body_keeps_what_arrived() -> None:
    chunks: list[bytes | Exception] = [b"bad gateway", httpx.ReadError("reset")]
    script = Script([Connection(status=502, headers={}, chunks=chunks)])
    with pytest.raises(StreamHTTPStatusError) as info:
        run(script)
    assert info.value.status == 502
    assert info.value.excerpt == "non-JSON error body (11 bytes)"  # counted, never quoted


def test_a_failed_first_send_is_the_callers_to_retry() -> None:
    script = Script([Connection(send_error=httpx.ConnectError("refused")), Connection()])
    with pytest.raises(StreamConnectError):
        run(script)
    assert len(script.sent) == 1


def test_the_exchange_keeps_the_error_that_ended_the_loop() -> None:
    script = Script([Connection(chunks=[b"id: 1\ndata: a\n\n", httpx.ReadTimeout("slow")])])
    options = StreamOptions(limits=StreamLimits(idle_timeout=1.0))
    session = options.session("GET", URL, terminal_on(event_types={"done"}))
    with httpx.Client(timeout=5.0) as client:
        exchange = Exchange(
            io_loop.stream_loop(
                session, client, clock=lambda: 0.0, raise_on_truncation=True, on_reconnect=None
            )
        )
        with pytest.raises(StreamIdleTimeout) as info:
            for step in exchange:
                if not isinstance(step, ServerSentEvent):
                    exchange.answer(script.perform, step)
    assert exchange.error is info.value


def test_truncation_is_raised_or_reported_as_the_caller_chose() -> None:
    def cut_without_ids() -> Script:
        return Script([Connection(chunks=[b"data: a\n\n"])])

    with pytest.raises(StreamTruncatedError):
        run(cut_without_ids())
    steps, session, exchange = run(cut_without_ids(), raise_on_truncation=False)
    assert session.state is StreamState.TRUNCATED and exchange.error is None
    assert session.truncation is TruncationReason.NO_EVENT_ID
    assert kinds(steps)[-1] == io_loop.CLOSE.value


def test_options_take_the_old_keywords_over_the_object() -> None:
    base = StreamOptions(headers={"A": "1"}, resumable=True)
    merged = StreamOptions.of(base, {"last_event_id": "9"})
    assert merged.headers == {"A": "1"} and merged.resumable and merged.last_event_id == "9"
    assert StreamOptions.of(base, {}) is base
    assert StreamOptions.of(None, {"resumable": True}) == StreamOptions(resumable=True)
    with pytest.raises(TypeError, match="retries"):
        StreamOptions.of(None, {"retries": 3})

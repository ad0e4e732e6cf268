"""The asyncio transport against the real loopback server: the same rules as sync."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx
import pytest

from agent_gate.errors import (
    StreamContentTypeError,
    StreamHTTPStatusError,
    StreamIdleTimeout,
    StreamProgressTimeout,
    StreamTruncatedError,
    TruncationReason,
)
from agent_gate.sse import ServerSentEvent
from agent_gate.stream_server import (
    ErrorStyle,
    Fault,
    FaultRule,
    HeartbeatKind,
    StreamServer,
    Transcript,
)
from agent_gate.transport import (
    AsyncEventStream,
    OpenAIResponsesResume,
    Reconnect,
    ReconnectPolicy,
    StreamLimits,
    StreamState,
    astream_events,
    terminal_on,
)

T = TypeVar("T")
NUMBERS_DONE = terminal_on(event_types={"done"})
FAST = ReconnectPolicy(initial_delay=0.01, max_delay=0.05, jitter=0.5, max_attempts=3)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Every async test is bounded: a hang fails the test instead of the run."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout=20)

    return asyncio.run(bounded())


def expected(transcript: Transcript) -> list[tuple[str, str, str]]:
    return [
        (e.event or "message", e.data, rid)
        for e, rid in zip(transcript.events, transcript.resume_ids, strict=True)
    ]


def triples(events: list[ServerSentEvent]) -> list[tuple[str, str, str]]:
    return [(e.event, e.data, e.id) for e in events]


async def collect(url: str, **kwargs: Any) -> tuple[list[ServerSentEvent], AsyncEventStream]:
    kwargs.setdefault("is_terminal", NUMBERS_DONE)
    kwargs.setdefault("reconnect", FAST)
    method = kwargs.pop("method", "GET")
    events: list[ServerSentEvent] = []
    async with httpx.AsyncClient(timeout=5.0) as client:
        stream = astream_events(client, method, url, **kwargs)
        async with stream:
            async for event in stream:
                events.append(event)
    return events, stream


def test_async_resumes_a_cut_stream_exactly_once(server: StreamServer, numbers: Transcript) -> None:
    server.add_faults(FaultRule(Fault(cut_inside_event=6, chunk_min=1, chunk_max=5), times=1))
    events, stream = run(collect(server.stream_url("numbers")))
    assert triples(events) == expected(numbers)
    assert stream.state is StreamState.COMPLETED
    assert stream.stats.reconnects == 1
    assert server.last_event_ids == [None, "6"]


@pytest.mark.parametrize("seed", range(4))
def test_async_random_cuts(server: StreamServer, numbers: Transcript, seed: int) -> None:
    rng = random.Random(seed)
    _, ends = numbers.encoded()
    server.add_faults(
        FaultRule(Fault(cut_at_byte=rng.randrange(ends[0], ends[-1]), chunk_min=1, chunk_max=6)),
        FaultRule(Fault(cut_at_byte=rng.randrange(1, 80), chunk_min=1, chunk_max=6, seed=seed)),
    )
    events, stream = run(
        collect(
            server.stream_url("numbers"), reconnect=ReconnectPolicy(initial_delay=0.0, jitter=0.0)
        )
    )
    assert triples(events) == expected(numbers)
    assert stream.state is StreamState.COMPLETED


def test_async_no_ids_is_truncation(server: StreamServer) -> None:
    server.add_faults(FaultRule(Fault(cut_after_events=3), times=1))
    with pytest.raises(StreamTruncatedError) as info:
        run(collect(server.stream_url("noids"), is_terminal=terminal_on(event_types={"x"})))
    assert info.value.reason is TruncationReason.NO_EVENT_ID
    assert server.connections == 1


def test_async_post_is_not_resent(server: StreamServer) -> None:
    server.add_faults(FaultRule(Fault(cut_after_events=3), times=1))
    with pytest.raises(StreamTruncatedError) as info:
        run(collect(server.stream_url("numbers"), method="POST", json={"q": 1}))
    assert info.value.reason is TruncationReason.NOT_RESUMABLE
    assert [r.method for r in server.requests] == ["POST"]


def test_async_backoff_bounded(server: StreamServer) -> None:
    server.add_faults(
        FaultRule(Fault(cut_after_events=1), times=1),
        FaultRule(Fault(status=503), times=None),
    )
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        await asyncio.sleep(seconds)

    policy = ReconnectPolicy(initial_delay=0.01, max_delay=0.02, jitter=0.0, max_attempts=2)
    with pytest.raises(StreamTruncatedError) as info:
        run(collect(server.stream_url("numbers"), reconnect=policy, sleep=sleep))
    assert info.value.reason is TruncationReason.ATTEMPTS_EXHAUSTED
    assert sleeps == pytest.approx([0.01, 0.02])
    assert server.connections == 3


def test_async_status_error_is_typed_and_redacted(server: StreamServer) -> None:
    fault = Fault(
        status=529,
        error_style=ErrorStyle.ANTHROPIC,
        error_message="Overloaded; Authorization: Bearer abc.def.ghi",
    )
    with pytest.raises(StreamHTTPStatusError) as info:
        run(collect(server.stream_url("numbers", fault)))
    assert info.value.status == 529
    assert info.value.error_type == "overloaded_error"
    assert "abc.def.ghi" not in info.value.excerpt
    assert info.value.excerpt.startswith("type=overloaded_error message='Overloaded; ")


def test_async_wrong_content_type(server: StreamServer) -> None:
    with pytest.raises(StreamContentTypeError):
        run(collect(server.stream_url("numbers", Fault(content_type="text/plain"))))


def test_async_idle_timeout(server: StreamServer) -> None:
    fault = Fault(stall_after_events=1, stall_seconds=3.0)
    with pytest.raises(StreamIdleTimeout) as info:
        run(
            collect(
                server.stream_url("numbers", fault),
                limits=StreamLimits(idle_timeout=0.2, progress_timeout=1.0),
            )
        )
    assert info.value.event_index == 1


def test_async_progress_timeout_with_heartbeats(server: StreamServer) -> None:
    fault = Fault(
        stall_after_events=1,
        stall_seconds=3.0,
        heartbeat_interval=0.04,
        heartbeat=HeartbeatKind.PING,
    )
    with pytest.raises(StreamProgressTimeout) as info:
        run(
            collect(
                server.stream_url("numbers", fault),
                limits=StreamLimits(idle_timeout=0.25, progress_timeout=0.4),
            )
        )
    assert info.value.limit_seconds == 0.4


def test_async_stop_early_closes_the_response(server: StreamServer) -> None:
    async def main() -> AsyncEventStream:
        async with httpx.AsyncClient(timeout=5.0) as client:
            stream = astream_events(
                client, "GET", server.stream_url("numbers"), is_terminal=NUMBERS_DONE
            )
            async with stream:
                async for event in stream:
                    if event.id == "3":
                        break
            return stream

    stream = run(main())
    assert stream.state is StreamState.CLOSED
    assert server.wait_idle(2.0)
    assert server.connections == 1


def test_async_openai_background_resume(
    server: StreamServer, openai_transcript: Transcript
) -> None:
    server.add_faults(FaultRule(Fault(cut_after_events=3), times=1))
    reconnects: list[Reconnect] = []
    events, stream = run(
        collect(
            server.openai_url("openai"),
            method="POST",
            json={"background": True, "stream": True},
            is_terminal=terminal_on(event_types={"response.completed"}),
            resume=OpenAIResponsesResume(),
            on_reconnect=reconnects.append,
        )
    )
    assert [e.data for e in events] == [e.data for e in openai_transcript.events]
    assert stream.state is StreamState.COMPLETED
    assert reconnects[0].request.params == {"stream": "true", "starting_after": "2"}
    assert [r.method for r in server.requests] == ["POST", "GET"]

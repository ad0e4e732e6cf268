"""The blocking transport against the real loopback server, one fault at a time.

Waits are tenths of a second; time is asserted only as a limit tripping, never
as a speed.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import httpx
import pytest

from agent_gate.errors import (
    StreamContentTypeError,
    StreamHTTPStatusError,
    StreamIdleTimeout,
    StreamLimitExceeded,
    StreamProgressTimeout,
    StreamTruncatedError,
    TruncationReason,
)
from agent_gate.sse import ServerSentEvent
from agent_gate.stream_server import (
    CutMode,
    ErrorStyle,
    Fault,
    FaultRule,
    HeartbeatKind,
    StreamServer,
    Transcript,
)
from agent_gate.transport import (
    EventStream,
    OpenAIResponsesResume,
    Reconnect,
    ReconnectPolicy,
    StreamLimits,
    StreamState,
    stream_events,
    terminal_on,
)

ANTHROPIC_DONE = terminal_on(event_types={"message_stop"})
NUMBERS_DONE = terminal_on(event_types={"done"})
OPENAI_DONE = terminal_on(event_types={"response.completed", "response.failed"})
FAST = ReconnectPolicy(initial_delay=0.01, max_delay=0.05, jitter=0.5, max_attempts=3)


def expected(transcript: Transcript) -> list[tuple[str, str, str]]:
    return [
        (e.event or "message", e.data, rid)
        for e, rid in zip(transcript.events, transcript.resume_ids, strict=True)
    ]


def triples(events: list[ServerSentEvent]) -> list[tuple[str, str, str]]:
    return [(e.event, e.data, e.id) for e in events]


def collect(
    client: httpx.Client, url: str, **kwargs: Any
) -> tuple[list[ServerSentEvent], EventStream]:
    kwargs.setdefault("is_terminal", NUMBERS_DONE)
    kwargs.setdefault("reconnect", FAST)
    stream = stream_events(client, kwargs.pop("method", "GET"), url, **kwargs)
    with stream:
        events = list(stream)
    return events, stream


# -- the faithful path -------------------------------------------------------------


def test_a_faithful_stream_completes_without_reconnect(
    server: StreamServer, client: httpx.Client, tools: Transcript
) -> None:
    events, stream = collect(client, server.stream_url("tools"), is_terminal=ANTHROPIC_DONE)
    assert triples(events) == expected(tools)
    assert stream.state is StreamState.COMPLETED
    stats = stream.stats
    assert (stats.connections, stats.reconnects, stats.heartbeats) == (1, 0, 1)
    assert stats.events == len(tools)
    assert stats.last_event_id == str(len(tools))
    assert server.connections == 1
    assert server.last_event_ids == [None]
    record = server.requests[0]
    assert record.method == "GET"


# -- cuts and resumption -----------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [
        Fault(cut_after_events=3),
        Fault(cut_after_events=3, cut=CutMode.CLEAN),
        Fault(cut_inside_event=4),
        Fault(cut_inside_event=4, cut=CutMode.CLEAN),
        Fault(cut_at_byte=101, chunk_min=1, chunk_max=7, seed=3),
    ],
    ids=["after-3", "after-3-clean", "mid-4", "mid-4-clean", "byte-101-chunked"],
)
def test_cut_once_then_resumed_yields_each_event_once_in_order(
    server: StreamServer, client: httpx.Client, numbers: Transcript, fault: Fault
) -> None:
    server.add_faults(FaultRule(fault, times=1))
    reconnects: list[Reconnect] = []
    events, stream = collect(client, server.stream_url("numbers"), on_reconnect=reconnects.append)
    assert triples(events) == expected(numbers)
    assert stream.state is StreamState.COMPLETED
    assert server.connections == 2
    first_batch = server.requests[0].events_sent
    assert server.last_event_ids == [None, str(first_batch)]
    assert len(reconnects) == 1
    assert reconnects[0].last_event_id == str(first_batch)


def test_cut_before_any_event_is_reported_as_truncation(
    server: StreamServer, client: httpx.Client
) -> None:
    server.add_faults(FaultRule(Fault(cut_after_events=0), times=1))
    with pytest.raises(StreamTruncatedError) as info:
        collect(client, server.stream_url("numbers"))
    assert info.value.reason is TruncationReason.NO_EVENT_ID
    assert info.value.events == 0
    assert server.connections == 1


@pytest.mark.parametrize("seed", range(8))
def test_random_chunks_and_random_cuts_resume_exactly_once(
    server: StreamServer, client: httpx.Client, numbers: Transcript, seed: int
) -> None:
    rng = random.Random(seed)
    _, ends = numbers.encoded()
    # the first cut falls after the first event (before it there is no id to
    # resume from); each resumed response is cut again somewhere, maybe mid-line
    first = rng.randrange(ends[0], ends[-1])
    rules = [FaultRule(Fault(cut_at_byte=first, chunk_min=1, chunk_max=9, seed=seed))]
    rules += [
        FaultRule(Fault(cut_at_byte=rng.randrange(1, 80), chunk_min=1, chunk_max=9, seed=seed + i))
        for i in range(1, 4)
    ]
    server.add_faults(*rules)
    events: list[ServerSentEvent] = []
    asked: list[tuple[str, str]] = []

    def on_reconnect(r: Reconnect) -> None:
        asked.append((r.last_event_id, events[-1].id))

    stream = stream_events(
        client,
        "GET",
        server.stream_url("numbers"),
        is_terminal=NUMBERS_DONE,
        reconnect=ReconnectPolicy(initial_delay=0.0, jitter=0.0, max_attempts=5),
        on_reconnect=on_reconnect,
    )
    with stream:
        events.extend(stream)
    assert triples(events) == expected(numbers)
    assert stream.state is StreamState.COMPLETED
    # every resume asked for what follows the last event delivered whole
    assert asked and all(sent == last for sent, last in asked)
    assert server.last_event_ids == [None] + [sent for sent, _ in asked]


def test_no_event_ids_means_truncation_never_a_guess(
    server: StreamServer, client: httpx.Client
) -> None:
    server.add_faults(FaultRule(Fault(cut_inside_event=5), times=1))
    with pytest.raises(StreamTruncatedError) as info:
        collect(client, server.stream_url("noids"), is_terminal=ANTHROPIC_DONE)
    error = info.value
    assert error.reason is TruncationReason.NO_EVENT_ID
    assert error.events == 5
    assert error.discarded_partial_event is True
    assert server.connections == 1


def test_truncation_can_be_a_result_instead_of_an_error(
    server: StreamServer, client: httpx.Client
) -> None:
    server.add_faults(FaultRule(Fault(cut_after_events=4, cut=CutMode.CLEAN), times=1))
    events, stream = collect(
        client, server.stream_url("noids"), is_terminal=ANTHROPIC_DONE, raise_on_truncation=False
    )
    assert len(events) == 4
    assert stream.state is StreamState.TRUNCATED
    assert stream.truncation is TruncationReason.NO_EVENT_ID
    assert stream.stats.truncation == "no_event_id"


def test_post_is_not_resent_after_a_cut(server: StreamServer, client: httpx.Client) -> None:
    server.add_faults(FaultRule(Fault(cut_after_events=3), times=1))
    with pytest.raises(StreamTruncatedError) as info:
        collect(client, server.stream_url("numbers"), method="POST", json={"input": "hi"})
    assert info.value.reason is TruncationReason.NOT_RESUMABLE
    assert info.value.last_event_id == "3"
    assert [r.method for r in server.requests] == ["POST"]
    assert server.connections == 1


def test_a_post_marked_resumable_is_resubscribed_with_last_event_id(
    server: StreamServer, client: httpx.Client, numbers: Transcript
) -> None:
    server.add_faults(FaultRule(Fault(cut_after_events=3), times=1))
    events, _ = collect(
        client, server.stream_url("numbers"), method="POST", json={"sub": 1}, resumable=True
    )
    assert triples(events) == expected(numbers)
    assert [(r.method, r.last_event_id) for r in server.requests] == [
        ("POST", None),
        ("POST", "3"),
    ]
    assert all(json.loads(r.body) == {"sub": 1} for r in server.requests)


def test_caller_stopping_early_closes_without_reconnect(
    server: StreamServer, client: httpx.Client
) -> None:
    stream = stream_events(
        client, "GET", server.stream_url("numbers"), is_terminal=NUMBERS_DONE, reconnect=FAST
    )
    with stream:
        for i, _ in enumerate(stream):
            if i == 2:
                break
    assert stream.state is StreamState.CLOSED
    assert server.wait_idle(2.0)
    assert server.connections == 1


def test_a_server_that_replays_from_the_start_shows_duplicates_not_loss(
    server: StreamServer, client: httpx.Client, numbers: Transcript
) -> None:
    server.add_faults(
        FaultRule(Fault(cut_after_events=5), times=1),
        FaultRule(Fault(ignore_last_event_id=True), times=1),
    )
    events, _ = collect(client, server.stream_url("numbers"))
    # the transport re-subscribes; recognising replays is the accumulator's job
    assert triples(events) == expected(numbers)[:5] + expected(numbers)
    assert server.last_event_ids == [None, "5"]


def test_backoff_is_capped_and_attempts_are_bounded(
    server: StreamServer, client: httpx.Client
) -> None:
    server.retry_ms = 60_000  # a server asking for a minute between reconnects
    server.add_faults(
        FaultRule(Fault(cut_after_events=2), times=1),
        FaultRule(Fault(cut_after_events=0), times=None),
    )
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        time.sleep(seconds)

    policy = ReconnectPolicy(initial_delay=0.01, max_delay=0.04, jitter=0.5, max_attempts=3)
    with pytest.raises(StreamTruncatedError) as info:
        collect(client, server.stream_url("numbers"), reconnect=policy, sleep=sleep)
    assert info.value.reason is TruncationReason.ATTEMPTS_EXHAUSTED
    assert len(sleeps) == 3
    assert all(0.02 <= s <= 0.04 for s in sleeps)  # retry: 60000 capped, jittered by <= 50%
    assert server.connections == 4
    assert server.last_event_ids == [None, "2", "2", "2"]


def test_a_retryable_status_on_reconnect_counts_as_an_attempt(
    server: StreamServer, client: httpx.Client, numbers: Transcript
) -> None:
    server.add_faults(
        FaultRule(Fault(cut_after_events=2), times=1),
        FaultRule(Fault(status=529, error_style=ErrorStyle.ANTHROPIC), times=1),
        FaultRule(Fault(status=503, retry_after=0.01), times=1),
    )
    reconnects: list[Reconnect] = []
    events, _ = collect(client, server.stream_url("numbers"), on_reconnect=reconnects.append)
    assert triples(events) == expected(numbers)
    assert [r.cause for r in reconnects] == ["RemoteProtocolError", "HTTP 529", "HTTP 503"]
    assert reconnects[-1].delay == pytest.approx(0.01)
    assert server.last_event_ids == [None, "2", "2", "2"]


# -- refusals ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "style", "error_type"),
    [
        (429, ErrorStyle.OPENAI, "requests"),
        (500, ErrorStyle.OPENAI, "server_error"),
        (529, ErrorStyle.ANTHROPIC, "overloaded_error"),
        (429, ErrorStyle.ANTHROPIC, "rate_limit_error"),
        (500, ErrorStyle.GEMINI, "INTERNAL"),
    ],
)
def test_error_statuses_are_typed_with_a_redacted_excerpt(
    server: StreamServer, client: httpx.Client, status: int, style: ErrorStyle, error_type: str
) -> None:
    secret = "sk-live-0123456789abcdefXYZ"
    fault = Fault(
        status=status,
        error_style=style,
        retry_after=7,
        error_message=f"quota for key {secret} exceeded",
    )
    with pytest.raises(StreamHTTPStatusError) as info:
        collect(client, server.stream_url("numbers", fault))
    error = info.value
    assert error.status == status
    assert error.error_type == error_type
    assert error.retryable is True
    assert error.retry_after == 7.0
    assert secret not in str(error) and secret not in error.excerpt
    assert "[REDACTED]" in error.excerpt
    assert "quota for key" in error.excerpt
    assert server.connections == 1  # refused is refused: never re-sent by the transport


def test_a_huge_error_body_is_read_only_up_to_its_bound(
    server: StreamServer, client: httpx.Client
) -> None:
    fault = Fault(status=500, error_message="e" * 50_000)
    with pytest.raises(StreamHTTPStatusError) as info:
        collect(
            client,
            server.stream_url("numbers", fault),
            limits=StreamLimits(max_error_body_bytes=1024),
        )
    # the cut JSON no longer parses: described by size, never quoted
    assert info.value.excerpt == "non-JSON error body (1024+ bytes)"


@pytest.mark.parametrize(
    "content_type", ["application/json", "text/html; charset=utf-8", "text/event-stream-x"]
)
def test_wrong_content_type_is_never_parsed(
    server: StreamServer, client: httpx.Client, content_type: str
) -> None:
    url = server.stream_url("numbers", Fault(content_type=content_type))
    stream = stream_events(client, "GET", url, is_terminal=NUMBERS_DONE)
    seen: list[ServerSentEvent] = []
    with stream, pytest.raises(StreamContentTypeError) as info:
        seen.extend(stream)
    assert seen == []  # the body is valid SSE, and still not one event came out
    assert info.value.status == 200
    assert stream.stats.bytes == 0


# -- time and byte limits ------------------------------------------------------------


def test_idle_timeout_when_the_server_goes_silent(
    server: StreamServer, client: httpx.Client
) -> None:
    fault = Fault(stall_after_events=2, stall_seconds=3.0)
    stream = stream_events(
        client,
        "GET",
        server.stream_url("numbers", fault),
        is_terminal=NUMBERS_DONE,
        limits=StreamLimits(idle_timeout=0.2, progress_timeout=2.0),
    )
    seen: list[ServerSentEvent] = []
    with stream, pytest.raises(StreamIdleTimeout) as info:
        seen.extend(stream)
    assert len(seen) == 2
    assert info.value.limit_seconds == 0.2
    assert info.value.event_index == 2
    assert stream.state is StreamState.FAILED


@pytest.mark.parametrize("kind", [HeartbeatKind.COMMENT, HeartbeatKind.PING, HeartbeatKind.BOTH])
def test_progress_timeout_trips_while_heartbeats_flow(
    server: StreamServer, client: httpx.Client, kind: HeartbeatKind
) -> None:
    fault = Fault(stall_after_events=2, stall_seconds=3.0, heartbeat_interval=0.04, heartbeat=kind)
    stream = stream_events(
        client,
        "GET",
        server.stream_url("numbers", fault),
        is_terminal=NUMBERS_DONE,
        limits=StreamLimits(idle_timeout=0.25, progress_timeout=0.4),
    )
    seen: list[ServerSentEvent] = []
    with stream, pytest.raises(StreamProgressTimeout) as info:
        seen.extend(stream)
    assert [e.event for e in seen if e.event != "ping"] == ["delta", "delta"]
    assert info.value.limit_seconds == 0.4
    stats = stream.stats
    # the idle limit (shorter than the progress one) never tripped: bytes kept flowing
    assert stats.heartbeats + stats.comments >= 3


def test_heartbeats_during_a_short_stall_do_not_break_a_stream(
    server: StreamServer, client: httpx.Client, numbers: Transcript
) -> None:
    fault = Fault(
        stall_after_events=3,
        stall_seconds=0.3,
        heartbeat_interval=0.05,
        heartbeat=HeartbeatKind.BOTH,
    )
    events, stream = collect(
        client,
        server.stream_url("numbers", fault),
        limits=StreamLimits(idle_timeout=0.5, progress_timeout=2.0),
    )
    assert [e for e in triples(events) if e[0] != "ping"] == expected(numbers)
    assert stream.stats.heartbeats >= 1
    assert stream.stats.comments >= 1


def test_a_slow_drip_completes_within_generous_limits(
    server: StreamServer, client: httpx.Client, tools: Transcript
) -> None:
    fault = Fault(drip=0.005, chunk_min=8, chunk_max=24, seed=5)
    events, _ = collect(
        client,
        server.stream_url("tools", fault),
        is_terminal=ANTHROPIC_DONE,
        limits=StreamLimits(idle_timeout=1.0, progress_timeout=5.0),
    )
    assert triples(events) == expected(tools)


def test_a_slow_drip_of_one_event_trips_the_progress_limit(
    server: StreamServer, client: httpx.Client
) -> None:
    # two bytes every 50 ms: never idle, but an event takes longer than the limit
    fault = Fault(drip=0.05, chunk_min=2, chunk_max=2)
    with pytest.raises(StreamProgressTimeout):
        collect(
            client,
            server.stream_url("tools", fault),
            is_terminal=ANTHROPIC_DONE,
            limits=StreamLimits(idle_timeout=0.3, progress_timeout=0.5),
        )


def test_stalls_can_be_resumed_when_the_policy_says_so(
    server: StreamServer, client: httpx.Client, numbers: Transcript
) -> None:
    server.add_faults(FaultRule(Fault(stall_after_events=4, stall_seconds=3.0), times=1))
    policy = ReconnectPolicy(initial_delay=0.01, jitter=0.0, resume_stalled=True)
    reconnects: list[Reconnect] = []
    events, _ = collect(
        client,
        server.stream_url("numbers"),
        reconnect=policy,
        on_reconnect=reconnects.append,
        limits=StreamLimits(idle_timeout=0.2, progress_timeout=1.0),
    )
    assert triples(events) == expected(numbers)
    assert [r.cause for r in reconnects] == ["idle_timeout"]
    assert server.last_event_ids == [None, "4"]


def test_line_limit_is_a_typed_error(server: StreamServer, client: httpx.Client) -> None:
    with pytest.raises(StreamLimitExceeded) as info:
        collect(
            client,
            server.stream_url("tools"),
            is_terminal=ANTHROPIC_DONE,
            limits=StreamLimits(max_line_bytes=120),
        )
    error = info.value
    assert error.limit == "max_line_bytes"
    assert error.connection == 1
    assert "input_json" not in str(error)


def test_response_byte_limit_is_a_typed_error(server: StreamServer, client: httpx.Client) -> None:
    with pytest.raises(StreamLimitExceeded) as info:
        collect(client, server.stream_url("numbers"), limits=StreamLimits(max_response_bytes=100))
    assert info.value.limit == "max_stream_bytes"


# -- OpenAI Responses background mode ------------------------------------------------


def test_openai_background_stream_resumes_with_starting_after(
    server: StreamServer, client: httpx.Client, openai_transcript: Transcript
) -> None:
    server.add_faults(FaultRule(Fault(cut_inside_event=5), times=1, method="POST"))
    strategy = OpenAIResponsesResume()
    events, stream = collect(
        client,
        server.openai_url("openai"),
        method="POST",
        json={"model": "m", "background": True, "stream": True},
        headers={"Authorization": "Bearer sk-test"},
        is_terminal=OPENAI_DONE,
        resume=strategy,
    )
    assert [(e.event, e.data) for e in events] == [
        (e.event, e.data) for e in openai_transcript.events
    ]
    assert stream.state is StreamState.COMPLETED
    requests = server.requests
    assert [(r.method, r.path) for r in requests] == [
        ("POST", "/openai/openai/v1/responses"),
        ("GET", "/openai/openai/v1/responses/resp_local42"),
    ]
    assert requests[1].query == {"stream": "true", "starting_after": "4"}
    assert requests[1].body == b""
    assert strategy.sequence_number == 8


def test_openai_cut_before_the_response_id_is_not_regenerated(
    server: StreamServer, client: httpx.Client
) -> None:
    server.add_faults(FaultRule(Fault(cut_inside_event=0), times=1))
    with pytest.raises(StreamTruncatedError) as info:
        collect(
            client,
            server.openai_url("openai"),
            method="POST",
            json={"background": True},
            is_terminal=OPENAI_DONE,
            resume=OpenAIResponsesResume(),
        )
    assert info.value.reason is TruncationReason.NO_RESUME_POINT
    assert [r.method for r in server.requests] == ["POST"]

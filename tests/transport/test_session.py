"""The sans-IO session: every transport decision, driven with an explicit clock."""

from __future__ import annotations

import json
import random

import pytest

from agent_gate.errors import (
    StreamConnectError,
    StreamContentTypeError,
    StreamHTTPStatusError,
    StreamIdleTimeout,
    StreamLimitExceeded,
    StreamProgressTimeout,
    TruncationReason,
)
from agent_gate.sse import ServerSentEvent
from agent_gate.transport import (
    Finished,
    LastEventIdResume,
    OpenAIResponsesResume,
    Reconnect,
    ReconnectPolicy,
    StreamLimits,
    StreamRequest,
    StreamSession,
    StreamState,
    terminal_on,
)
from agent_gate.transport.session import Action

SSE = {"content-type": "text/event-stream; charset=utf-8"}
NO_JITTER = ReconnectPolicy(initial_delay=0.1, max_delay=1.0, jitter=0.0, max_attempts=3)


def ev(data: str, event: str | None = None, id: str | None = None) -> bytes:
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    if event is not None:
        lines.append(f"event: {event}")
    lines.append(f"data: {data}")
    return ("\n".join(lines) + "\n\n").encode()


def session(
    method: str = "GET",
    *,
    limits: StreamLimits | None = None,
    policy: ReconnectPolicy = NO_JITTER,
    resumable: bool = False,
    last_event_id: str = "",
    strategy: object = None,
) -> StreamSession:
    return StreamSession(
        StreamRequest(method, "http://127.0.0.1:1/s", headers={"Authorization": "Bearer t"}),
        is_terminal=terminal_on(event_types={"done"}),
        limits=limits,
        policy=policy,
        strategy=strategy,  # type: ignore[arg-type]
        resumable=resumable,
        last_event_id=last_event_id,
        rng=random.Random(7),
    )


def open_stream(s: StreamSession, now: float = 0.0) -> StreamRequest:
    request = s.begin_connection(now)
    assert s.response_started(now, 200, SSE) is None
    assert s.state is StreamState.STREAMING
    return request


# -- progress and idle --------------------------------------------------------


def test_heartbeats_and_comments_are_not_progress() -> None:
    s = session(limits=StreamLimits(idle_timeout=10.0, progress_timeout=1.0))
    open_stream(s)
    assert [e.event for e in s.data_received(0.4, ev('{"type": "ping"}', "ping"))] == ["ping"]
    assert s.data_received(0.8, b": keep-alive\n\n") == []
    assert s.expired(0.99) is None
    timeout = s.expired(1.0)
    assert isinstance(timeout, StreamProgressTimeout)
    assert timeout.limit_seconds == 1.0
    assert timeout.event_index == 1
    stats = s.stats
    assert (stats.heartbeats, stats.comments) == (1, 1)


def test_a_real_event_is_progress() -> None:
    s = session(limits=StreamLimits(idle_timeout=10.0, progress_timeout=1.0))
    open_stream(s)
    s.data_received(0.5, ev("x", "delta"))
    assert s.expired(1.2) is None
    assert isinstance(s.expired(1.5), StreamProgressTimeout)


def test_silence_trips_idle_first_when_idle_is_shorter() -> None:
    s = session(limits=StreamLimits(idle_timeout=0.5, progress_timeout=1.0))
    open_stream(s)
    assert s.expired(0.49) is None
    assert isinstance(s.expired(0.6), StreamIdleTimeout)


def test_heartbeats_keep_idle_away_but_not_progress() -> None:
    s = session(limits=StreamLimits(idle_timeout=0.5, progress_timeout=1.0))
    open_stream(s)
    for t in (0.3, 0.6, 0.9):
        s.data_received(t, b": hb\n\n")
        assert s.expired(t) is None
    assert isinstance(s.expired(1.05), StreamProgressTimeout)


def test_timeout_messages_carry_offsets_never_payload() -> None:
    s = session(limits=StreamLimits(idle_timeout=5.0, progress_timeout=1.0))
    open_stream(s)
    s.data_received(0.1, ev("SECRET-ARGUMENT-VALUE", "ping"))
    timeout = s.expired(2.0)
    assert timeout is not None
    assert "SECRET" not in str(timeout)
    assert "progress_timeout=1s" in str(timeout)
    assert f"byte offset {timeout.offset}" in str(timeout)
    assert timeout.offset > 0


@pytest.mark.parametrize(
    ("idle", "progress", "client", "cls", "limit"),
    [
        (0.2, 0.3, 5.0, StreamIdleTimeout, 0.2),
        (0.5, 0.3, 5.0, StreamProgressTimeout, 0.3),
        (0.3, 0.3, 5.0, StreamIdleTimeout, 0.3),
        (None, None, 1.0, StreamIdleTimeout, 1.0),
        (2.0, None, 1.0, StreamIdleTimeout, 1.0),
    ],
)
def test_read_timeout_is_the_smallest_limit_and_names_it(
    idle: float | None, progress: float | None, client: float, cls: type, limit: float
) -> None:
    s = session(limits=StreamLimits(idle_timeout=idle, progress_timeout=progress))
    open_stream(s)
    read_timeout = s.read_timeout(client)
    assert read_timeout == min(v for v in (idle, progress, client) if v is not None)
    error = s.read_timed_out(read_timeout, read_timeout)
    assert type(error) is cls
    assert error.limit_seconds == limit


def test_no_limits_no_client_timeout_means_no_read_timeout() -> None:
    s = session(limits=StreamLimits(idle_timeout=None, progress_timeout=None))
    assert s.read_timeout(None) is None
    open_stream(s)
    assert s.expired(1e9) is None


def test_stall_raises_unless_the_policy_resumes_stalls() -> None:
    s = session(limits=StreamLimits(progress_timeout=1.0))
    open_stream(s)
    s.data_received(0.1, ev("a", "delta", id="1"))
    error = s.expired(5.0)
    assert error is not None
    with pytest.raises(StreamProgressTimeout):
        s.stalled(5.0, error)
    assert s.state is StreamState.FAILED

    policy = ReconnectPolicy(initial_delay=0.1, jitter=0.0, resume_stalled=True)
    s = session(limits=StreamLimits(progress_timeout=1.0), policy=policy)
    open_stream(s)
    s.data_received(0.1, ev("a", "delta", id="1"))
    error = s.expired(5.0)
    assert error is not None
    action = s.stalled(5.0, error)
    assert isinstance(action, Reconnect)
    assert action.cause == "progress_timeout"
    assert action.request.headers["Last-Event-ID"] == "1"


# -- reconnect decisions ----------------------------------------------------------


def test_resume_sends_last_event_id_and_new_events_inherit_it() -> None:
    s = session()
    first = open_stream(s)
    assert "Last-Event-ID" not in first.headers
    got = s.data_received(0.1, ev("a", "delta", id="1") + ev("b", "delta", id="2"))
    assert [e.id for e in got] == ["1", "2"]
    action = s.connection_lost(0.2, "RemoteProtocolError")
    assert isinstance(action, Reconnect)
    assert action.request.method == "GET"
    assert action.request.headers["Last-Event-ID"] == "2"
    assert action.request.headers["Authorization"] == "Bearer t"
    assert action.cause == "RemoteProtocolError"
    # the reconnect's events without an id inherit the last one (WHATWG)
    second = open_stream(s, 1.0)
    assert second is action.request
    got = s.data_received(1.1, ev("c", "delta") + ev("d", "delta", id="5"))
    assert [(e.data, e.id) for e in got] == [("c", "2"), ("d", "5")]
    assert s.last_event_id == "5"
    assert s.stats.reconnects == 1
    assert s.stats.connections == 2


def test_an_id_only_block_moves_the_resume_point() -> None:
    s = session()
    open_stream(s)
    s.data_received(0.1, ev("a", "delta", id="1") + b"id: 7\n\n")
    action = s.connection_lost(0.2)
    assert isinstance(action, Reconnect)
    assert action.request.headers["Last-Event-ID"] == "7"


def test_no_event_id_means_truncated() -> None:
    s = session()
    open_stream(s)
    s.data_received(0.1, ev("a", "delta") + b"data: half an ev")
    action = s.connection_lost(0.2)
    assert action == Finished(StreamState.TRUNCATED, TruncationReason.NO_EVENT_ID)
    error = s.truncation_error()
    assert error.reason is TruncationReason.NO_EVENT_ID
    assert error.discarded_partial_event is True
    assert error.events == 1
    assert s.stats.discarded_partial_events == 1


def test_post_is_never_resent_unless_marked_resumable() -> None:
    s = session("POST")
    open_stream(s)
    s.data_received(0.1, ev("a", "delta", id="1"))
    action = s.connection_lost(0.2)
    assert action == Finished(StreamState.TRUNCATED, TruncationReason.NOT_RESUMABLE)
    assert s.truncation_error().last_event_id == "1"

    s = session("POST", resumable=True)
    open_stream(s)
    s.data_received(0.1, ev("a", "delta", id="1"))
    action = s.connection_lost(0.2)
    assert isinstance(action, Reconnect)
    assert action.request.method == "POST"
    assert action.request.headers["Last-Event-ID"] == "1"


def test_a_strategy_building_a_post_is_held_to_the_same_rule() -> None:
    class RepostStrategy(LastEventIdResume):
        def next_request(self, state):  # type: ignore[no-untyped-def]
            return StreamRequest("POST", state.original.url)

    s = session("GET", strategy=RepostStrategy())
    open_stream(s)
    s.data_received(0.1, ev("a", "delta", id="1"))
    assert s.connection_lost(0.2) == Finished(StreamState.TRUNCATED, TruncationReason.NOT_RESUMABLE)


def run_lost(s: StreamSession, now: float, cause: str = "eof") -> Action:
    return s.connection_lost(now, cause)


def test_attempts_without_progress_are_bounded() -> None:
    s = session(policy=ReconnectPolicy(initial_delay=0.1, jitter=0.0, max_attempts=2))
    open_stream(s)
    s.data_received(0.0, ev("a", "delta", id="1"))
    delays = []
    for t in range(1, 4):
        action = run_lost(s, float(t))
        if isinstance(action, Finished):
            break
        delays.append(action.delay)
        assert action.attempt == len(delays)
        open_stream(s, float(t) + 0.5)
        s.data_received(float(t) + 0.6, b": nothing new\n\n")
    assert action == Finished(StreamState.TRUNCATED, TruncationReason.ATTEMPTS_EXHAUSTED)
    assert delays == pytest.approx([0.1, 0.2])
    assert s.stats.connections == 3


def test_progress_resets_the_attempt_count() -> None:
    s = session(policy=ReconnectPolicy(initial_delay=0.1, jitter=0.0, max_attempts=1))
    open_stream(s)
    for i in range(1, 6):
        s.data_received(float(i), ev(str(i), "delta", id=str(i)))
        action = run_lost(s, float(i) + 0.1)
        assert isinstance(action, Reconnect)
        assert action.attempt == 1
        assert action.delay == pytest.approx(0.1)
        open_stream(s, float(i) + 0.5)
    assert s.stats.reconnects == 5


def test_total_reconnects_are_bounded_even_with_progress() -> None:
    policy = ReconnectPolicy(initial_delay=0.0, jitter=0.0, max_attempts=5, max_reconnects=3)
    s = session(policy=policy)
    open_stream(s)
    outcomes = []
    for i in range(1, 10):
        s.data_received(float(i), ev(str(i), "delta", id=str(i)))
        action = run_lost(s, float(i))
        outcomes.append(type(action).__name__)
        if isinstance(action, Finished):
            assert action.reason is TruncationReason.ATTEMPTS_EXHAUSTED
            break
        open_stream(s, float(i))
    assert outcomes == ["Reconnect"] * 3 + ["Finished"]


def test_server_retry_field_sets_the_backoff_base() -> None:
    s = session(policy=ReconnectPolicy(initial_delay=5.0, max_delay=10.0, jitter=0.0))
    open_stream(s)
    s.data_received(0.0, b"retry: 40\n\n" + ev("a", "delta", id="1"))
    action = run_lost(s, 0.1)
    assert isinstance(action, Reconnect)
    assert action.delay == pytest.approx(0.04)
    assert s.retry_ms == 40


def test_a_retryable_status_on_reconnect_is_an_attempt_with_retry_after() -> None:
    s = session()
    open_stream(s)
    s.data_received(0.0, ev("a", "delta", id="1"))
    assert isinstance(run_lost(s, 0.1), Reconnect)
    s.begin_connection(0.5)
    action = s.response_started(0.6, 503, {"retry-after": "0.75"}, b"{}")
    assert isinstance(action, Reconnect)
    assert action.delay == 0.75  # the server's own time, within the cap, no jitter
    assert action.attempt == 2
    assert action.cause == "HTTP 503"


def test_a_status_on_the_first_request_is_a_typed_error_not_a_retry() -> None:
    s = session()
    s.begin_connection(0.0)
    body = json.dumps({"error": {"type": "server_error", "message": "boom"}}).encode()
    with pytest.raises(StreamHTTPStatusError) as info:
        s.response_started(0.1, 503, {"x-should-retry": "true"}, body)
    assert info.value.status == 503
    assert info.value.retryable is True
    assert info.value.error_type == "server_error"
    assert s.state is StreamState.FAILED


def test_wrong_content_type_fails_before_decoding() -> None:
    s = session()
    s.begin_connection(0.0)
    with pytest.raises(StreamContentTypeError) as info:
        s.response_started(0.1, 200, {"content-type": "application/json"})
    assert info.value.media_type == "application/json"
    with pytest.raises(RuntimeError):
        s.data_received(0.2, ev("a"))


def test_204_means_the_server_has_nothing_more() -> None:
    s = session()
    s.begin_connection(0.0)
    action = s.response_started(0.1, 204, {})
    assert action == Finished(StreamState.TRUNCATED, TruncationReason.SERVER_ENDED)


def test_connect_failure_first_is_an_error_later_an_attempt() -> None:
    s = session()
    s.begin_connection(0.0)
    with pytest.raises(StreamConnectError) as info:
        s.connect_failed(0.1, "ConnectError")
    assert info.value.cause == "ConnectError"

    s = session()
    open_stream(s)
    s.data_received(0.0, ev("a", "delta", id="1"))
    run_lost(s, 0.1)
    s.begin_connection(0.2)
    action = s.connect_failed(0.3, "ConnectError")
    assert isinstance(action, Reconnect)
    assert action.attempt == 2


def test_a_caller_supplied_last_event_id_is_sent_first() -> None:
    s = session(last_event_id="41")
    request = s.begin_connection(0.0)
    assert request.headers["Last-Event-ID"] == "41"
    s.response_started(0.0, 200, SSE)
    got = s.data_received(0.1, ev("x", "delta"))
    assert got[0].id == "41"


# -- events ----------------------------------------------------------------------


def test_terminal_event_stops_the_chunk_and_completes() -> None:
    s = session()
    open_stream(s)
    chunk = ev("a", "delta", id="1") + ev("b", "done", id="2") + ev("c", "delta", id="3")
    got = s.data_received(0.1, chunk)
    assert [e.data for e in got] == ["a", "b"]
    assert s.state is StreamState.COMPLETED
    assert s.connection_lost(0.2) == Finished(StreamState.COMPLETED)
    assert s.last_event_id == "2"


def test_limit_violation_delivers_the_complete_events_first() -> None:
    s = session(limits=StreamLimits(max_line_bytes=32))
    open_stream(s)
    chunk = ev("ok", "delta", id="1") + b"data: " + b"A" * 100 + b"\n\n"
    got = s.data_received(0.1, chunk)
    assert [e.data for e in got] == ["ok"]
    assert s.state is StreamState.FAILED
    with pytest.raises(StreamLimitExceeded) as info:
        s.raise_pending()
    error = info.value
    assert error.limit == "max_line_bytes"
    assert error.event_index == 1
    assert error.offset == len(ev("ok", "delta", id="1"))
    assert "AAAA" not in str(error)
    s.raise_pending()  # raised once only


def test_response_byte_limit_is_per_response() -> None:
    one = ev("a" * 20, "delta", id="1")
    s = session(limits=StreamLimits(max_response_bytes=len(one) + 5))
    open_stream(s)
    s.data_received(0.1, one)
    assert isinstance(run_lost(s, 0.2), Reconnect)
    open_stream(s, 0.3)
    s.data_received(0.4, ev("b" * 20, "delta", id="2"))  # a fresh budget per connection
    s.raise_pending()
    s.data_received(0.5, b"data: overflow\n\n")
    with pytest.raises(StreamLimitExceeded) as info:
        s.raise_pending()
    assert info.value.limit == "max_stream_bytes"
    assert info.value.connection == 2


def test_misuse_of_the_state_machine_is_refused() -> None:
    s = session()
    with pytest.raises(RuntimeError):
        s.data_received(0.0, b"data: x\n\n")
    s.begin_connection(0.0)
    with pytest.raises(RuntimeError):
        s.begin_connection(0.0)


def test_close_is_final() -> None:
    s = session()
    open_stream(s)
    s.close()
    assert s.state is StreamState.CLOSED
    s.close()
    assert s.state is StreamState.CLOSED


def test_stats_are_counts_and_ids_only() -> None:
    s = session()
    open_stream(s)
    s.data_received(0.1, ev("SECRET", "delta", id="1") + b": c\n" + ev("{}", "ping"))
    stats = s.stats.as_dict()
    assert stats["events"] == 2
    assert stats["heartbeats"] == 1
    assert stats["comments"] == 1
    assert stats["last_event_id"] == "1"
    assert stats["last_event_type"] == "ping"
    assert stats["state"] == "streaming"
    assert "SECRET" not in repr(stats)


# -- OpenAI Responses background resume -----------------------------------------------


def responses_event(seq: int, etype: str, **extra: object) -> ServerSentEvent:
    return ServerSentEvent(etype, json.dumps({"type": etype, "sequence_number": seq, **extra}), "")


def resume_state(original: StreamRequest) -> object:
    from agent_gate.transport import ResumeState

    return ResumeState(original, "", None, 3, 1, False)


def test_openai_strategy_resumes_with_a_get_after_the_last_sequence_number() -> None:
    original = StreamRequest(
        "POST",
        "https://api.example/v1/responses?x=1",
        headers={"Authorization": "Bearer k", "Content-Type": "application/json"},
        json={"model": "m", "background": True, "stream": True},
    )
    strategy = OpenAIResponsesResume()
    assert strategy.next_request(resume_state(original)) is TruncationReason.NO_RESUME_POINT  # type: ignore[arg-type]
    strategy.observe(responses_event(0, "response.created", response={"id": "resp_9"}))
    strategy.observe(responses_event(1, "response.in_progress", response={"id": "resp_other"}))
    strategy.observe(ServerSentEvent("ping", "not json", ""))
    strategy.observe(responses_event(2, "response.output_text.delta", delta="x"))
    request = strategy.next_request(resume_state(original))  # type: ignore[arg-type]
    assert isinstance(request, StreamRequest)
    assert request.method == "GET"
    assert request.url == "https://api.example/v1/responses/resp_9"
    assert dict(request.params) == {"stream": "true", "starting_after": "2"}
    assert request.headers == {"Authorization": "Bearer k"}
    assert request.json is None and request.content is None
    assert strategy.response_id == "resp_9"
    assert strategy.sequence_number == 2


def test_openai_strategy_with_an_explicit_collection_url() -> None:
    original = StreamRequest("POST", "/custom/create")
    strategy = OpenAIResponsesResume("https://proxy.example/openai/v1/responses/")
    strategy.observe(responses_event(0, "response.created", response={"id": "resp_1"}))
    request = strategy.next_request(resume_state(original))  # type: ignore[arg-type]
    assert isinstance(request, StreamRequest)
    assert request.url == "https://proxy.example/openai/v1/responses/resp_1"


def test_openai_strategy_in_a_session_is_allowed_for_a_post() -> None:
    s = StreamSession(
        StreamRequest("POST", "http://h/v1/responses"),
        is_terminal=terminal_on(event_types={"response.completed"}),
        policy=NO_JITTER,
        strategy=OpenAIResponsesResume(),
    )
    open_stream(s)
    created = responses_event(0, "response.created", response={"id": "resp_5"})
    s.data_received(0.1, f"event: {created.event}\ndata: {created.data}\n\n".encode())
    action = s.connection_lost(0.2)
    assert isinstance(action, Reconnect)
    assert action.request.method == "GET"
    assert action.request.params == {"stream": "true", "starting_after": "0"}

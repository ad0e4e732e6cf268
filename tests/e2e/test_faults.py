"""Every fault the local server can inject, through the whole pipeline, in every protocol.

For each recorded response (parallel tool calls in OpenAI Responses, Chat
Completions, Anthropic and Gemini, plus the demo's stream whose sparse event ids
make the server replay events after a resume) and each fault, one live run goes
over real loopback HTTP into a gate with a SQLite ledger, and the tests check
what a user would: how many times each tool really ran (a file the tools append
to), the states in the ledger, and how the response ended.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from agent_gate import CallState, Gate
from agent_gate.errors import (
    StreamContentTypeError,
    StreamHTTPStatusError,
    StreamIdleTimeout,
    StreamProgressTimeout,
    StreamTruncatedError,
    TruncationReason,
)
from agent_gate.stream_server import (
    CutMode,
    ErrorStyle,
    Fault,
    FaultRule,
    HeartbeatKind,
    IdMode,
    RequestRecord,
    StreamServer,
    Transcript,
)
from agent_gate.transport import (
    ReconnectPolicy,
    StreamLimits,
)

from .conftest import Case, Live, allowed, cases, check_at_most_once, outcome_map, reads

CASES = cases()
Plan = Callable[[Transcript], list[FaultRule]]


def _bytes(t: Transcript) -> int:
    return len(t.encoded()[0])


# Faults after which the stream must still complete: each plan is the server's
# script for one run (rules fire in order, ``times`` bounds each).
RECOVERABLE: dict[str, Plan] = {
    "cut_after_event": lambda t: [FaultRule(Fault(cut_after_events=len(t) // 2))],
    "cut_inside_event": lambda t: [FaultRule(Fault(cut_inside_event=len(t) // 2))],
    "cut_at_byte": lambda t: [FaultRule(Fault(cut_at_byte=_bytes(t) // 3))],
    "clean_eof_before_terminal": lambda t: [
        FaultRule(Fault(cut_after_events=len(t) - 1, cut=CutMode.CLEAN))
    ],
    "two_cuts": lambda t: [
        FaultRule(Fault(cut_inside_event=len(t) // 3)),
        FaultRule(Fault(cut_inside_event=1)),
    ],
    "random_chunks": lambda t: [FaultRule(Fault(chunk_min=1, chunk_max=7, seed=3), times=None)],
    "random_chunks_and_cut": lambda t: [
        FaultRule(Fault(chunk_min=1, chunk_max=13, seed=5, cut_inside_event=len(t) // 3)),
        FaultRule(Fault(chunk_min=1, chunk_max=13, seed=6), times=None),
    ],
    "slow_drip": lambda t: [FaultRule(Fault(drip=0.002), times=None)],
    "heartbeats": lambda t: [
        FaultRule(
            Fault(heartbeat_interval=0.001, heartbeat=HeartbeatKind.BOTH, drip=0.002),
            times=None,
        )
    ],
    "server_replays_from_start": lambda t: [
        FaultRule(Fault(cut_after_events=len(t) // 2)),
        FaultRule(Fault(ignore_last_event_id=True)),
    ],
    "reconnect_refused_503": lambda t: [
        FaultRule(Fault(cut_inside_event=len(t) // 2)),
        FaultRule(Fault(status=503)),
    ],
    "reconnect_refused_429_retry_after": lambda t: [
        FaultRule(Fault(cut_after_events=len(t) // 2)),
        FaultRule(Fault(status=429, retry_after=0.01)),
    ],
    "reconnect_refused_529": lambda t: [
        FaultRule(Fault(cut_after_events=len(t) // 2)),
        FaultRule(Fault(status=529, error_style=ErrorStyle.ANTHROPIC)),
    ],
}

CUTS = {
    "cut_after_event",
    "cut_inside_event",
    "cut_at_byte",
    "clean_eof_before_terminal",
    "two_cuts",
    "random_chunks_and_cut",
    "server_replays_from_start",
    "reconnect_refused_503",
    "reconnect_refused_429_retry_after",
    "reconnect_refused_529",
}


def resent(transcript: Transcript, requests: list[RequestRecord]) -> int:
    """Events the server sent that this client already had, from the server's records."""
    had, twice = 0, 0
    for r in requests:
        if r.status != 200:
            continue
        ignore = r.fault is not None and r.fault.ignore_last_event_id
        start = 0 if ignore else transcript.start_after(r.last_event_id)
        assert start is not None
        twice += max(0, min(had, start + r.events_sent) - start)
        had = max(had, start + r.events_sent)
    return twice


def runs_of(e2e_tools: ModuleType, effects: Path, task_id: str) -> dict[str, int]:
    return dict(e2e_tools.executions(effects, task_id))


@pytest.mark.parametrize("fault", sorted(RECOVERABLE))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_recoverable_fault_runs_each_complete_allowed_call_exactly_once(
    case: Case, fault: str, gate: Gate, e2e_tools: ModuleType, effects: Path, live: Live
) -> None:
    plan = RECOVERABLE[fault](case.transcript)
    with StreamServer({"s": case.transcript}, faults=plan, join_timeout=2.0) as server:
        result = live(gate, server, case, "task")
        requests = server.requests
    assert result.stream_error is None, result.stream_error
    assert result.terminal is not None and str(result.terminal) == "completed"
    ran = check_at_most_once(result, gate, "task", case, runs_of(e2e_tools, effects, "task"))
    assert ran == allowed(case) and ran  # every case has at least one allowed call
    got = outcome_map(result.outcomes)
    assert set(got) == set(case.complete)
    for call_id, outcome in got.items():
        assert outcome.replayed is False
        if call_id not in allowed(case):
            assert outcome.state in (CallState.REJECTED, CallState.AWAITING_APPROVAL)
    if fault in CUTS:
        assert result.reconnects, "the fault cut a connection, so the stream must have resumed"
        resumed = [r for r in requests[1:] if r.status == 200]
        assert resumed and all(r.last_event_id for r in resumed)
    if fault == "heartbeats":
        assert result.stats.heartbeats > 0 and result.stats.comments > 0
    # Every event the server sent twice was recognised (and only those).
    assert result.calls.replayed_events == resent(case.transcript, requests)
    if fault == "server_replays_from_start":
        assert result.calls.replayed_events > 0
    # The same task again, served faithfully: everything is answered by the ledger.
    with StreamServer({"s": case.transcript}, join_timeout=2.0) as server:
        again = live(gate, server, case, "task")
    assert [o.replayed for o in again.outcomes] == [True] * len(again.outcomes)
    assert runs_of(e2e_tools, effects, "task") == {c: 1 for c in ran}


def test_the_demo_stream_replays_events_after_its_cut(
    gate: Gate, e2e_tools: ModuleType, effects: Path, live: Live
) -> None:
    """Sparse ids: resuming from the stream start re-sends the first call, already run."""
    case = next(c for c in CASES if c.name.startswith("demo/"))
    plan = RECOVERABLE["cut_inside_event"](case.transcript)
    with StreamServer({"s": case.transcript}, faults=plan, join_timeout=2.0) as server:
        result = live(gate, server, case, "task")
        ids = server.last_event_ids
    assert ids == [None, case.transcript.resume_ids[0]]
    assert result.calls.replayed_events == len(case.transcript) // 2 - 1
    assert not result.run.anomalies
    assert runs_of(e2e_tools, effects, "task") == {c: 1 for c in allowed(case)}


# ------------------------------------------------------------------ refusals


REFUSALS: dict[str, Fault] = {
    "wrong_content_type": Fault(content_type="application/json"),
    "html_error_page": Fault(content_type="text/html; charset=utf-8"),
    "429": Fault(status=429, retry_after=2),
    "500": Fault(status=500),
    "529": Fault(status=529, error_style=ErrorStyle.ANTHROPIC),
}


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_refused_stream_runs_nothing_and_says_why(
    case: Case, refusal: str, gate: Gate, e2e_tools: ModuleType, effects: Path, live: Live
) -> None:
    rules = [FaultRule(REFUSALS[refusal], times=None)]
    with StreamServer({"s": case.transcript}, faults=rules, join_timeout=2.0) as server:
        result = live(gate, server, case, "task")
        requests = server.requests
    assert len(requests) == 1, "a refused first request is never re-sent"
    assert result.outcomes == () and gate.calls("task") == []
    assert runs_of(e2e_tools, effects, "task") == {}
    assert str(result.terminal) == "truncated"
    error = result.stream_error
    if refusal in ("wrong_content_type", "html_error_page"):
        assert isinstance(error, StreamContentTypeError)
        assert error.media_type == REFUSALS[refusal].content_type.split(";")[0]  # type: ignore[union-attr]
    else:
        assert isinstance(error, StreamHTTPStatusError)
        assert error.status == int(refusal) and error.retryable
        if refusal == "429":
            assert error.retry_after == 2
        if refusal == "529":
            assert error.error_type == "overloaded_error"
    assert result.error == str(error)


# ------------------------------------------------------- cuts that cannot resume


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_cut_without_event_ids_truncates_and_runs_no_write(
    case: Case, gate: Gate, e2e_tools: ModuleType, effects: Path, live: Live
) -> None:
    bare = Transcript(case.transcript.events, id_mode=IdMode.NONE)
    rules = [FaultRule(Fault(cut_inside_event=len(bare) - 2))]
    with StreamServer({"s": bare}, faults=rules, join_timeout=2.0) as server:
        result = live(gate, server, case, "task")
        assert len(server.requests) == 1
    assert isinstance(result.stream_error, StreamTruncatedError)
    assert result.stream_error.reason is TruncationReason.NO_EVENT_ID
    assert str(result.terminal) == "truncated"
    ran = check_at_most_once(result, gate, "task", case, runs_of(e2e_tools, effects, "task"))
    assert ran <= reads(case, gate.tools)
    states = {o.call_id: o.state for o in gate.calls("task")}
    for call_id in set(case.complete) - reads(case, gate.tools):
        if call_id in states:
            assert states[call_id] in (
                CallState.INCOMPLETE,
                CallState.REJECTED,
            ), f"{call_id} is {states[call_id]}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_cut_post_is_never_sent_again(
    case: Case, gate: Gate, e2e_tools: ModuleType, effects: Path, live: Live
) -> None:
    """Re-sending the POST that created an answer would ask for a new answer."""
    rules = [FaultRule(Fault(cut_after_events=len(case.transcript) // 2))]
    with StreamServer({"s": case.transcript}, faults=rules, join_timeout=2.0) as server:
        result = live(gate, server, case, "task", method="POST", json={"stream": True})
        methods = [r.method for r in server.requests]
    assert methods == ["POST"]
    assert isinstance(result.stream_error, StreamTruncatedError)
    assert result.stream_error.reason is TruncationReason.NOT_RESUMABLE
    check_at_most_once(result, gate, "task", case, runs_of(e2e_tools, effects, "task"))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_post_marked_resumable_is_resumed_with_last_event_id(
    case: Case, gate: Gate, e2e_tools: ModuleType, effects: Path, live: Live
) -> None:
    rules = [FaultRule(Fault(cut_after_events=len(case.transcript) // 2))]
    with StreamServer({"s": case.transcript}, faults=rules, join_timeout=2.0) as server:
        result = live(gate, server, case, "task", method="POST", json={}, resumable=True)
        requests = server.requests
    assert [r.method for r in requests] == ["POST", "POST"]
    assert requests[0].last_event_id is None and requests[1].last_event_id
    assert str(result.terminal) == "completed"
    ran = check_at_most_once(result, gate, "task", case, runs_of(e2e_tools, effects, "task"))
    assert ran == allowed(case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_server_that_cuts_every_connection_ends_by_itself(
    case: Case, gate: Gate, e2e_tools: ModuleType, effects: Path, live: Live
) -> None:
    """Two events per connection: dense ids still finish; a sparse-id stream cannot
    get past its replayed prefix and is truncated once the bound is reached."""
    rules = [FaultRule(Fault(cut_after_events=2), times=None)]
    policy = ReconnectPolicy(initial_delay=0.001, max_delay=0.005, max_reconnects=60)
    with StreamServer({"s": case.transcript}, faults=rules, join_timeout=2.0) as server:
        result = live(gate, server, case, "task", reconnect=policy)
        connections = len(server.requests)
    assert connections <= 61
    ran = check_at_most_once(result, gate, "task", case, runs_of(e2e_tools, effects, "task"))
    if case.sparse:
        assert isinstance(result.stream_error, StreamTruncatedError)
        assert result.stream_error.reason is TruncationReason.ATTEMPTS_EXHAUSTED
        assert connections == 61
    else:
        assert result.stream_error is None and str(result.terminal) == "completed"
        assert ran == allowed(case)


# ------------------------------------------------------------------ time limits


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_silent_server_trips_the_idle_timeout(
    case: Case, gate: Gate, e2e_tools: ModuleType, effects: Path, live: Live
) -> None:
    rules = [FaultRule(Fault(stall_after_events=len(case.transcript) - 1, stall_seconds=5))]
    limits = StreamLimits(idle_timeout=0.3, progress_timeout=10)
    with StreamServer({"s": case.transcript}, faults=rules, join_timeout=2.0) as server:
        result = live(gate, server, case, "task", limits=limits)
    assert isinstance(result.stream_error, StreamIdleTimeout)
    assert str(result.terminal) == "truncated"
    check_at_most_once(result, gate, "task", case, runs_of(e2e_tools, effects, "task"))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_heartbeats_alone_trip_the_progress_timeout(
    case: Case, gate: Gate, e2e_tools: ModuleType, effects: Path, live: Live
) -> None:
    stall = Fault(
        stall_after_events=len(case.transcript) - 1,
        stall_seconds=5,
        heartbeat_interval=0.05,
        heartbeat=HeartbeatKind.BOTH,
    )
    limits = StreamLimits(idle_timeout=2.0, progress_timeout=0.6)
    with StreamServer({"s": case.transcript}, faults=[FaultRule(stall)], join_timeout=2.0) as srv:
        result = live(gate, srv, case, "task", limits=limits)
    assert isinstance(result.stream_error, StreamProgressTimeout), result.stream_error
    assert result.stats.heartbeats >= 3 and result.stats.comments >= 3
    # The ping events reached the accumulator too, and were not counted as progress.
    assert result.calls.events - result.calls.progress_events >= 3
    assert str(result.terminal) == "truncated"
    check_at_most_once(result, gate, "task", case, runs_of(e2e_tools, effects, "task"))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_stalled_stream_can_be_resumed_when_the_caller_asks(
    case: Case, gate: Gate, e2e_tools: ModuleType, effects: Path, live: Live
) -> None:
    stall = Fault(
        stall_after_events=len(case.transcript) // 2, stall_seconds=5, heartbeat_interval=0.05
    )
    limits = StreamLimits(idle_timeout=2, progress_timeout=1.0)
    policy = ReconnectPolicy(initial_delay=0.005, max_delay=0.05, resume_stalled=True)
    with StreamServer({"s": case.transcript}, faults=[FaultRule(stall)], join_timeout=2.0) as srv:
        result = live(gate, srv, case, "task", limits=limits, reconnect=policy)
    assert result.stream_error is None and str(result.terminal) == "completed"
    # The stall is resumed; on a loaded machine a resumed stream's slow start may
    # trip the progress timeout again (it once did at 0.4 s), which is resumed too.
    causes = [r.cause for r in result.reconnects]
    assert causes and set(causes) == {"progress_timeout"}, causes
    ran = check_at_most_once(result, gate, "task", case, runs_of(e2e_tools, effects, "task"))
    assert ran == allowed(case)

"""Spans, metrics and logs of gated calls, read back from the SDK's in-memory exporters."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import httpx
import pytest
from opentelemetry.trace import StatusCode
from waiting import wait_until

from agent_gate import CallState, Gate, OutcomeUnknown, ToolRegistry, telemetry
from agent_gate.accumulate import Anomaly
from agent_gate.gate.live import run_live
from agent_gate.stream_server import Fault, FaultRule, StreamServer
from agent_gate.transport import EventStream, ReconnectPolicy

from .conftest import Otel
from .scenario import chat_stream, policy_file, registry

FAST = ReconnectPolicy(initial_delay=0.001, max_delay=0.01, max_attempts=5)


def make_gate(tmp_path: Path, otel: Otel, db_url: str | None = None) -> Gate:
    """A gate reporting to ``otel``; on ``db_url`` (each backend) or a new SQLite file."""
    return Gate(
        registry(otel.tracer_provider, "s"), db_url or f"sqlite:///{tmp_path / 'ledger.db'}",
        policy=policy_file(tmp_path), telemetry=otel.observer, create=db_url is None,
    )


def plain_gate(tools: ToolRegistry, tmp_path: Path, otel: Otel) -> Gate:
    """A gate without a policy (every valid call allowed) on a SQLite file of its own."""
    return Gate(tools, f"sqlite:///{tmp_path / 'plain.db'}", telemetry=otel.observer,
                create=True)


def events_of(span: object) -> list[str]:
    return [e.name for e in span.events]  # type: ignore[attr-defined]


def test_a_call_is_one_execute_tool_span_and_the_tool_runs_inside_it(
    tmp_path: Path, otel: Otel, db_url: str
) -> None:
    with make_gate(tmp_path, otel, db_url) as gate:
        outcome = gate.execute("t1", {"call_id": "c1", "name": "lookup", "arguments": {"q": "x"}})
        stored = gate.ledger.get("t1", "c1")
    assert outcome.state is CallState.SUCCEEDED
    (span,) = otel.call_spans()
    assert span.name == "execute_tool lookup"
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.operation.name"] == "execute_tool"
    assert attrs["gen_ai.tool.name"] == "lookup"
    assert attrs["gen_ai.tool.call.id"] == "c1"
    assert attrs["gen_ai.tool.type"] == "function"
    assert attrs["agent_gate.task.id"] == "t1"
    assert attrs["agent_gate.state"] == "succeeded"
    assert attrs["agent_gate.decision"] == "authorized"
    assert attrs["agent_gate.rule_ids"] == ("lookups-allowed",)
    assert attrs["agent_gate.replayed"] is False
    assert attrs["agent_gate.attempt"] == 1
    assert events_of(span) == ["received", "decided", "claimed", "finished"]
    # The tool's own span is a child of the call's.
    (inner,) = [s for s in otel.spans() if s.name == "GET /lookup"]
    assert inner.parent is not None and inner.parent.span_id == span.context.span_id
    # The ledger keeps the trace, so an operator goes from the call to it.
    assert stored is not None
    assert stored.trace_id == format(span.context.trace_id, "032x")
    assert stored.span_id == format(span.context.span_id, "016x")
    # One INFO record per transition, with structured fields.
    records = [r for r in otel.logs.records if r.name == "agent_gate.gate"]
    assert [r.state for r in records] == ["received", "authorized", "executing", "succeeded"]
    assert {r.levelno for r in records} == {logging.INFO}
    assert all(r.call_id == "c1" and r.task_id == "t1" and r.tool == "lookup" for r in records)
    assert records[-1].trace_id == stored.trace_id


def test_a_replay_is_a_span_without_transitions(tmp_path: Path, otel: Otel) -> None:
    with make_gate(tmp_path, otel) as gate:
        gate.execute("t1", {"call_id": "c1", "name": "lookup", "arguments": {"q": "x"}})
        again = gate.execute("t1", {"call_id": "c1", "name": "lookup", "arguments": {"q": "x"}})
    assert again.replayed
    first, second = otel.call_spans()
    assert events_of(first) == ["received", "decided", "claimed", "finished"]
    assert events_of(second) == []
    assert dict(second.attributes or {})["agent_gate.replayed"] is True
    calls = {(dict(p.attributes)["agent_gate.replayed"], p.value)
             for p in otel.points("agent_gate.calls")}
    assert calls == {(False, 1), (True, 1)}


def test_a_failing_tool_marks_the_span_with_its_error_type_only(
    tmp_path: Path, otel: Otel
) -> None:
    with make_gate(tmp_path, otel) as gate:
        outcome = gate.execute("t1", {"call_id": "c1", "name": "explode", "arguments": {"q": "x"}})
    assert outcome.state is CallState.FAILED
    (span,) = otel.call_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description is None
    assert dict(span.attributes or {})["error.type"] == "ToolFailed"
    (ended,) = otel.points("agent_gate.tool.duration")
    assert dict(ended.attributes)["agent_gate.run_end"] == "error" and ended.count == 1


def test_an_approved_call_resumed_links_to_the_trace_it_was_first_seen_in(
    tmp_path: Path, otel: Otel, db_url: str
) -> None:
    with make_gate(tmp_path, otel, db_url) as gate:
        waiting = gate.execute("t1", {"call_id": "c1", "name": "pay", "arguments": {"q": "10"}})
        assert waiting.state is CallState.AWAITING_APPROVAL
        (point,) = otel.points("agent_gate.calls.awaiting_approval")
        assert point.value == 1
        gate.approve("c1", by="ana", task_id="t1")
        (done,) = gate.resume("t1")
    assert done.state is CallState.SUCCEEDED
    first, resumed = otel.call_spans()
    assert events_of(first) == ["received", "decided"]
    assert dict(first.attributes or {})["agent_gate.decision"] == "awaiting_approval"
    assert events_of(resumed) == ["claimed", "finished"]
    assert resumed.context.trace_id != first.context.trace_id
    (link,) = resumed.links
    assert link.context.trace_id == first.context.trace_id
    assert link.context.span_id == first.context.span_id
    (point,) = otel.points("agent_gate.calls.awaiting_approval")
    assert point.value == 0


def test_a_live_stream_is_one_span_with_its_reconnects_and_the_calls_inside(
    tmp_path: Path, otel: Otel
) -> None:
    transcript = chat_stream([("call_1", "lookup", {"q": "a"}), ("call_2", "lookup", {"q": "b"})])
    rules = [FaultRule(Fault(cut_after_events=2), times=1)]
    with make_gate(tmp_path, otel) as gate, StreamServer(
        {"s": transcript}, faults=rules, join_timeout=2.0
    ) as server, httpx.Client() as client:
        result = run_live(gate, server.stream_url("s"), provider="openai-chat", task_id="t1",
                          client=client, reconnect=FAST)
    assert result.completed and len(result.reconnects) == 1
    (stream,) = [s for s in otel.spans() if s.name == "agent_gate.stream"]
    attrs = dict(stream.attributes or {})
    assert attrs["agent_gate.provider"] == "openai-chat"
    assert attrs["agent_gate.stream.state"] == "completed"
    assert attrs["agent_gate.stream.reconnects"] == 1
    assert attrs["agent_gate.stream.events"] == result.stats.events
    assert attrs["agent_gate.terminal"] == "completed"
    (reconnect,) = [e for e in stream.events if e.name == "reconnect"]
    assert dict(reconnect.attributes or {})["agent_gate.last_event_id"] == "2"
    calls = otel.call_spans()
    assert len(calls) == 2
    assert all(c.parent is not None and c.parent.span_id == stream.context.span_id
               for c in calls)
    (reconnects,) = otel.points("agent_gate.stream.reconnects")
    assert reconnects.value == 1
    warnings = [r for r in otel.logs.records if r.name == "agent_gate.transport"
                and r.levelno == logging.WARNING]
    assert [r.last_event_id for r in warnings] == ["2"]


def test_a_sweep_of_a_call_in_doubt_links_to_its_first_trace(tmp_path: Path, otel: Otel) -> None:
    tools = ToolRegistry()
    runs: list[int] = []

    @tools.tool(schema={"type": "object"}, effect="write", idempotency="natural")
    def flaky() -> str:
        runs.append(1)
        if len(runs) == 1:
            raise OutcomeUnknown("the remote end went away")
        return "done"

    with plain_gate(tools, tmp_path, otel) as gate:
        first = gate.execute("t1", {"call_id": "c1", "name": "flaky", "arguments": {}})
        assert first.state is CallState.IN_DOUBT
        (point,) = otel.points("agent_gate.calls.in_doubt")
        assert point.value == 1
        (swept,) = gate.recover("t1")
    assert swept.state is CallState.SUCCEEDED and len(runs) == 2
    original, sweep = otel.call_spans()
    assert events_of(original) == ["received", "decided", "claimed", "in_doubt"]
    assert original.status.status_code is StatusCode.ERROR
    assert dict(original.attributes or {})["error.type"] == "in_doubt"
    # Retried: in_doubt -> authorized (the retry is the sweep's decision), then run.
    assert events_of(sweep) == ["decided", "claimed", "finished"]
    assert dict(sweep.events[0].attributes or {})["agent_gate.from_state"] == "in_doubt"
    (link,) = sweep.links
    assert (link.context.trace_id, link.context.span_id) == (
        original.context.trace_id, original.context.span_id
    )
    (point,) = otel.points("agent_gate.calls.in_doubt")
    assert point.value == 0
    doubt = [r for r in otel.logs.records if getattr(r, "state", None) == "in_doubt"]
    assert [r.levelno for r in doubt] == [logging.WARNING]


def test_a_late_result_settles_the_doubt_and_says_so(tmp_path: Path, otel: Otel) -> None:
    release = threading.Event()
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write", timeout=0.2)
    def sluggish() -> str:
        assert release.wait(10)
        return "finally"

    with plain_gate(tools, tmp_path, otel) as gate:
        outcome = gate.execute("t1", {"call_id": "c1", "name": "sluggish", "arguments": {}})
        assert outcome.state is CallState.IN_DOUBT
        (point,) = otel.points("agent_gate.calls.in_doubt")
        assert point.value == 1
        release.set()
        wait_until(lambda: (r := gate.ledger.get("t1", "c1")) and r.state is CallState.SUCCEEDED,
                   10, what="the late result to settle the call")
        wait_until(lambda: [r for r in otel.logs.records if getattr(r, "late", False)],
                   10, what="the late record")
    (late,) = [r for r in otel.logs.records if getattr(r, "late", False)]
    assert late.levelno == logging.WARNING
    assert (late.state, late.from_state, late.call_id) == ("succeeded", "in_doubt", "c1")
    (point,) = otel.points("agent_gate.calls.in_doubt")
    assert point.value == 0
    (ended,) = otel.points("agent_gate.tool.duration")
    assert dict(ended.attributes)["agent_gate.run_end"] == "timeout"


def test_stream_anomalies_are_span_events_by_event_index(otel: Otel) -> None:
    trace = otel.observer.stream(provider="openai-chat", task_id="t1")
    trace.result("completed", 0, 1, [Anomaly(7, "second_terminal")])
    trace.close()
    (span,) = otel.spans()
    (event,) = span.events
    assert (event.name, dict(event.attributes or {})) == (
        "anomaly", {"agent_gate.anomaly": "second_terminal", "agent_gate.event_index": 7}
    )


def test_a_plain_run_logs_each_anomaly_once_as_a_warning(tmp_path: Path, otel: Otel) -> None:
    """``Gate.run`` over events (no transport, no stream span) still logs what the
    accumulator saw: here, arguments for an item the stream never announced."""
    stray = {"type": "response.function_call_arguments.delta", "item_id": "nope",
             "delta": "x", "sequence_number": 1}
    done = {"type": "response.completed", "sequence_number": 2,
            "response": {"id": "r1", "status": "completed", "output": []}}
    with Gate(ToolRegistry(), f"sqlite:///{tmp_path / 'l.db'}", create=True,
              telemetry=otel.observer) as gate:
        result = gate.run([stray, done], task_id="t1", provider="openai-responses")
    assert [a.reason for a in result.anomalies] == ["delta_for_unknown_call"]
    warnings = [r for r in otel.logs.records if r.levelno == logging.WARNING]
    assert [(w.anomaly, w.event_index, w.task_id) for w in warnings] == [
        (a.reason, a.event_index, "t1") for a in result.anomalies
    ]


def test_the_tool_runs_inside_the_call_span_on_a_thread_and_on_the_loop(
    tmp_path: Path, otel: Otel
) -> None:
    tools = ToolRegistry()
    tracer = otel.tracer_provider.get_tracer("the-tool-itself")

    @tools.tool(schema={"type": "object"}, effect="read", timeout=30)
    def threaded() -> str:  # a timeout: it runs on a thread of its own
        with tracer.start_as_current_span("inside threaded"):
            return threading.current_thread().name

    @tools.tool(schema={"type": "object"}, effect="read")
    async def looped() -> str:
        with tracer.start_as_current_span("inside looped"):
            await asyncio.sleep(0)
            return "ok"

    async def main(gate: Gate) -> list[str]:
        first = await gate.aexecute("t1", {"call_id": "a", "name": "looped", "arguments": {}})
        second = await gate.aexecute("t1", {"call_id": "b", "name": "threaded", "arguments": {}})
        return [first.state.value, second.state.value, str(second.result)]

    with plain_gate(tools, tmp_path, otel) as gate:
        states = asyncio.run(main(gate))
        sync = gate.execute("t1", {"call_id": "c", "name": "threaded", "arguments": {}})
    assert states[:2] == ["succeeded", "succeeded"] and states[2] != "MainThread"
    assert sync.ok
    calls = {s.attributes["gen_ai.tool.call.id"]: s for s in otel.call_spans()}
    inner = [s for s in otel.spans() if s.name.startswith("inside ")]
    assert len(inner) == 3
    parents = sorted((s.name, s.parent.span_id) for s in inner if s.parent)
    assert parents == sorted([
        ("inside looped", calls["a"].context.span_id),
        ("inside threaded", calls["b"].context.span_id),
        ("inside threaded", calls["c"].context.span_id),
    ])


def test_a_stream_read_on_its_own_has_a_span_of_its_own(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(telemetry, "_resolved", otel.observer)  # the process's observer
    transcript = chat_stream([("call_1", "lookup", {"q": "a"})])
    rules = [FaultRule(Fault(cut_after_events=1), times=1)]
    with StreamServer({"s": transcript}, faults=rules, join_timeout=2.0) as server, \
            httpx.Client() as client, EventStream.open(
                client, "GET", server.stream_url("s"), reconnect=FAST,
                is_terminal=lambda e: e.data == "[DONE]",
            ) as stream:
        seen = [event.id for event in stream]
    assert seen == ["1", "2", "3", "4", "5"]
    (span,) = otel.spans()
    attrs = dict(span.attributes or {})
    assert span.name == "agent_gate.stream" and "agent_gate.provider" not in attrs
    assert attrs["agent_gate.stream.state"] == "completed"
    assert attrs["agent_gate.stream.reconnects"] == 1
    assert attrs["agent_gate.stream.last_event_id"] == "5"
    assert [e.name for e in span.events] == ["reconnect"]


def test_an_operator_settling_a_doubt_or_denying_moves_the_counters_back(
    tmp_path: Path, otel: Otel
) -> None:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write")
    def unsure() -> None:
        raise OutcomeUnknown("cannot tell")

    with make_gate(tmp_path, otel) as gate:
        gate.execute("t1", {"call_id": "p", "name": "pay", "arguments": {"q": "1"}})
    with plain_gate(tools, tmp_path, otel) as other:
        doubt = other.execute("t1", {"call_id": "u", "name": "unsure", "arguments": {}})
        assert doubt.state is CallState.IN_DOUBT
        other.resolve("u", as_="failed", task_id="t1", by="ana")
    with make_gate(tmp_path, otel) as gate:
        denied = gate.deny("p", by="bob", task_id="t1")
    assert denied.state is CallState.REJECTED
    counters = {name: [p.value for p in otel.points(name)]
                for name in ("agent_gate.calls.awaiting_approval", "agent_gate.calls.in_doubt")}
    assert counters == {"agent_gate.calls.awaiting_approval": [0],
                        "agent_gate.calls.in_doubt": [0]}
    moves = [(r.from_state, r.state, r.actor) for r in otel.logs.records
             if getattr(r, "actor", None)]
    assert moves == [("in_doubt", "failed", "operator:ana"),
                     ("awaiting_approval", "rejected", "operator:bob")]


def test_an_interrupted_run_ends_its_span_in_doubt(tmp_path: Path, otel: Otel) -> None:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write")
    def interrupted() -> None:
        raise KeyboardInterrupt

    with plain_gate(tools, tmp_path, otel) as gate:
        with pytest.raises(KeyboardInterrupt):
            gate.execute("t1", {"call_id": "c1", "name": "interrupted", "arguments": {}})
        stored = gate.ledger.get("t1", "c1")
    assert stored is not None and stored.state is CallState.IN_DOUBT
    (span,) = otel.call_spans()
    assert events_of(span) == ["received", "decided", "claimed", "in_doubt"]
    assert dict(span.attributes or {})["agent_gate.state"] == "in_doubt"
    (point,) = otel.points("agent_gate.calls.in_doubt")
    assert point.value == 1
    (ended,) = otel.points("agent_gate.tool.duration")
    assert dict(ended.attributes)["agent_gate.run_end"] == "interrupted"

"""The observer through the OpenTelemetry API: one span per gated call, one per stream,
and the gate's metrics; imported only when ``opentelemetry-api`` is installed.

Spans follow the GenAI semantic conventions for tool execution
(``SEMCONV_VERSION``): ``execute_tool {gen_ai.tool.name}``, kind INTERNAL, with
``gen_ai.operation.name``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id`` and
``gen_ai.tool.type``; ``error.type`` when the call failed or is in doubt. The
opt-in ``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result`` are never set:
what crosses is ids, states, counts and type names (``base`` says why). agent-gate's
own attributes are under ``agent_gate.*``. Without an SDK (or when a span is not
sampled) the API's spans do not record, and nothing is built for them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from importlib.metadata import PackageNotFoundError, version
from time import perf_counter
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from agent_gate.telemetry.base import (
    AnomalyView,
    CallTrace,
    Observer,
    OutcomeView,
    RowView,
    StreamTrace,
    StreamView,
    error_type,
    printable,
)

__all__ = ["GEN_AI", "SCHEMA_URL", "SEMCONV_VERSION", "OtelObserver"]

SEMCONV_VERSION = "1.41.0"
"""The OpenTelemetry semantic conventions release whose GenAI execute-tool span this
follows (the names are unchanged in the semantic-conventions-genai repository)."""
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"

OPERATION = "gen_ai.operation.name"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
ERROR_TYPE = "error.type"
EXECUTE_TOOL = "execute_tool"
GEN_AI = {
    "GEN_AI_OPERATION_NAME": OPERATION,
    "GEN_AI_TOOL_NAME": TOOL_NAME,
    "GEN_AI_TOOL_CALL_ID": TOOL_CALL_ID,
    "GEN_AI_TOOL_TYPE": TOOL_TYPE,
}
"""The convention's attributes this sets, by the name the semconv package gives them
(a test holds each to ``opentelemetry.semconv``'s own constant)."""

try:
    _VERSION = version("agent-gate")
except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
    _VERSION = "0"

_ERROR_STATES = frozenset({"failed", "in_doubt"})
_GAUGED = {"awaiting_approval": "awaiting", "in_doubt": "in_doubt"}
"""States a call waits in, each counted by an up-down counter of the same name."""


class OtelObserver(Observer):
    """Spans and metrics through the OpenTelemetry API (and the logs of ``Observer``).

    ``tracer_provider`` / ``meter_provider`` default to the global ones (set by the
    host, e.g. ``opentelemetry-instrument`` or the SDK's ``set_tracer_provider``).
    """

    def __init__(
        self, tracer_provider: Any = None, meter_provider: Any = None
    ) -> None:
        self.tracer = trace.get_tracer(
            "agent_gate", _VERSION, tracer_provider, schema_url=SCHEMA_URL
        )
        meter = metrics.get_meter("agent_gate", _VERSION, meter_provider, schema_url=SCHEMA_URL)
        self.calls = meter.create_counter(
            "agent_gate.calls", unit="{call}",
            description="Gated calls by tool, decision and the state each reached",
        )
        self.decision_duration = meter.create_histogram(
            "agent_gate.decision.duration", unit="s",
            description="From seeing a call to committing its decision",
        )
        self.tool_duration = meter.create_histogram(
            "agent_gate.tool.duration", unit="s", description="One run of a tool",
        )
        self.waiting = {
            "awaiting": meter.create_up_down_counter(
                "agent_gate.calls.awaiting_approval", unit="{call}",
                description="Calls this gate put in awaiting_approval, less those it moved on",
            ),
            "in_doubt": meter.create_up_down_counter(
                "agent_gate.calls.in_doubt", unit="{call}",
                description="Calls this gate found in doubt, less those it settled",
            ),
        }
        self.shadowed = meter.create_counter(
            "agent_gate.policy.shadow_decisions", unit="{call}",
            description="Decisions with a shadow evaluation, by tool, enforced and "
            "would-be verdict (never enforced)",
        )
        self.reconnects = meter.create_counter(
            "agent_gate.stream.reconnects", unit="{reconnect}",
            description="Stream re-subscriptions after a cut",
        )
        self.replayed = meter.create_counter(
            "agent_gate.stream.replayed_events", unit="{event}",
            description="Events a server sent again after a resume (they change nothing)",
        )

    def call(
        self, task_id: str, call_id: str, tool: str, *,
        link: tuple[str | None, str | None] | None = None,
    ) -> CallTrace:
        task_id, call_id, tool = printable(task_id), printable(call_id), printable(tool)
        links = None
        if link is not None and link[0] and link[1]:
            original = SpanContext(
                int(link[0], 16), int(link[1], 16), is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
            links = [Link(original, {"agent_gate.link": "first_seen"})]
        span = self.tracer.start_span(
            f"{EXECUTE_TOOL} {tool}",
            kind=SpanKind.INTERNAL,
            attributes={
                OPERATION: EXECUTE_TOOL,
                TOOL_NAME: tool,
                TOOL_CALL_ID: call_id,
                TOOL_TYPE: "function",
                "agent_gate.task.id": task_id,
                "agent_gate.resumed": link is not None,
            },
            links=links,
        )
        return _OtelCall(self, span, task_id, call_id, tool)

    def stream(self, *, provider: str | None, task_id: str | None = None) -> StreamTrace:
        task_id = printable(task_id) if task_id is not None else None
        attributes: dict[str, Any] = {}
        if provider is not None:
            attributes["agent_gate.provider"] = provider
        if task_id is not None:
            attributes["agent_gate.task.id"] = task_id
        span = self.tracer.start_span(
            "agent_gate.stream", kind=SpanKind.INTERNAL, attributes=attributes
        )
        return _OtelStream(self, span, provider, task_id)

    def shadow(self, task_id: str, call_id: str, tool: str, enforced: str, would: str,
               rule_ids: Sequence[str]) -> None:
        super().shadow(task_id, call_id, tool, enforced, would, rule_ids)
        self.shadowed.add(1, {TOOL_NAME: printable(tool), "agent_gate.decision": enforced,
                              "agent_gate.shadow_decision": would,
                              "agent_gate.shadow_differs": would != enforced})

    def operator(self, task_id: str, call_id: str, tool: str, before: str, after: str,
                 by: str) -> None:
        super().operator(task_id, call_id, tool, before, after, by)
        self.gauge(printable(tool), before, after)

    def gauge(self, tool: str, before: str | None, after: str) -> None:
        """Move the waiting-state counters for one transition this process committed."""
        attrs = {TOOL_NAME: tool}
        left, entered = _GAUGED.get(before or ""), _GAUGED.get(after)
        if left is not None:
            self.waiting[left].add(-1, attrs)
        if entered is not None:
            self.waiting[entered].add(1, attrs)


class _OtelCall(CallTrace):
    __slots__ = ("obs", "recording", "run_started", "span")

    def __init__(
        self, obs: OtelObserver, span: trace.Span, task_id: str, call_id: str, tool: str
    ) -> None:
        super().__init__(task_id, call_id, tool)
        self.obs = obs
        self.span = span
        self.recording = span.is_recording()
        self.run_started = 0.0
        ctx = span.get_span_context()
        if ctx.is_valid and ctx.trace_flags.sampled:
            self.ids = (format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"))

    def decided(self, seconds: float) -> None:
        self.obs.decision_duration.record(
            seconds, {TOOL_NAME: self.tool, "agent_gate.decision": self.decision or ""}
        )

    def transition(
        self, before: str | None, state: str, event: str, row: RowView | None, acted: bool,
        *, late: bool = False,
    ) -> None:
        super().transition(before, state, event, row, acted, late=late)
        if acted:
            self.obs.gauge(self.tool, before, state)
        if self.recording and self.span.is_recording():  # a late answer: maybe ended
            attributes: dict[str, Any] = {
                "agent_gate.state": state, "agent_gate.replayed": not acted,
            }
            if before is not None:
                attributes["agent_gate.from_state"] = before
            if row is not None:
                attributes["agent_gate.attempt"] = row.attempt
                if row.reason_code:
                    attributes["agent_gate.reason_code"] = row.reason_code
                if event == "decided" and row.rule_ids:
                    attributes["agent_gate.rule_ids"] = list(row.rule_ids)
            self.span.add_event(event, attributes)

    def running(self) -> AbstractContextManager[None]:
        return self._running()

    @contextmanager
    def _running(self) -> Iterator[None]:
        # The tool's own spans (HTTP, database) become children of the call's span.
        token = otel_context.attach(trace.set_span_in_context(self.span))
        self.run_started = perf_counter()
        try:
            yield
        finally:
            otel_context.detach(token)

    def ran(self, end: str) -> None:
        self.obs.tool_duration.record(
            perf_counter() - self.run_started,
            {TOOL_NAME: self.tool, "agent_gate.run_end": end},
        )

    def _end(self, outcome: OutcomeView) -> None:
        super()._end(outcome)
        state = outcome.state.value
        self.obs.calls.add(1, {
            TOOL_NAME: self.tool,
            "agent_gate.decision": self.decision or "none",
            "agent_gate.state": state,
            "agent_gate.replayed": outcome.replayed,
        })
        span = self.span
        if self.recording:
            attributes: dict[str, Any] = {
                "agent_gate.state": state,
                "agent_gate.replayed": outcome.replayed,
                "agent_gate.attempt": outcome.attempt,
            }
            if self.decision is not None:
                attributes["agent_gate.decision"] = self.decision
            if self.rule_ids:
                attributes["agent_gate.rule_ids"] = list(self.rule_ids)
            if outcome.code:
                attributes["agent_gate.reason_code"] = outcome.code
            if state in _ERROR_STATES:
                attributes[ERROR_TYPE] = (
                    error_type(outcome) if state == "failed" else None
                ) or state
                span.set_status(Status(StatusCode.ERROR))
            span.set_attributes(attributes)
        span.end()

    def _failed(self, exc: BaseException) -> None:
        super()._failed(exc)
        name = "interrupted" if isinstance(exc, GeneratorExit) else type(exc).__name__
        if self.recording:
            self.span.set_attribute(ERROR_TYPE, name)
            self.span.set_status(Status(StatusCode.ERROR))
        self.span.end()


class _OtelStream(StreamTrace):
    __slots__ = ("closed", "obs", "span")

    def __init__(
        self, obs: OtelObserver, span: trace.Span, provider: str | None, task_id: str | None
    ) -> None:
        super().__init__(provider, task_id)
        self.obs = obs
        self.span = span
        self.closed = False

    def active(self) -> AbstractContextManager[None]:
        return trace.use_span(self.span, end_on_exit=False, record_exception=False,
                              set_status_on_exception=False)

    def reconnect(self, attempt: int, delay: float, cause: str, last_event_id: str) -> None:
        super().reconnect(attempt, delay, cause, last_event_id)
        self.obs.reconnects.add(1, {"agent_gate.provider": self.provider or "",
                                    "agent_gate.cause": cause})
        self.span.add_event("reconnect", {
            "agent_gate.attempt": attempt, "agent_gate.delay_s": delay,
            "agent_gate.cause": cause, "agent_gate.last_event_id": last_event_id,
        })

    def ended(self, stats: StreamView, error: BaseException | None) -> None:
        super().ended(stats, error)
        span = self.span
        span.set_attributes({
            f"agent_gate.stream.{key}": value
            for key, value in self.fields(stats).items()
            if value is not None and key not in ("task_id", "provider")
        })
        if error is not None or stats.truncation is not None:
            span.set_attribute(
                ERROR_TYPE, type(error).__name__ if error is not None else "truncated"
            )
            span.set_status(Status(StatusCode.ERROR))

    def result(
        self, terminal: str | None, replayed_events: int, calls: int,
        anomalies: Sequence[AnomalyView] = (),
    ) -> None:
        super().result(terminal, replayed_events, calls, anomalies)
        for anomaly in anomalies:
            self.span.add_event("anomaly", {
                "agent_gate.anomaly": anomaly.reason,
                "agent_gate.event_index": anomaly.event_index,
            })
        if replayed_events:
            self.obs.replayed.add(replayed_events, {"agent_gate.provider": self.provider or ""})
        self.span.set_attributes({
            "agent_gate.terminal": terminal or "none",
            "agent_gate.stream.replayed_events": replayed_events,
            "agent_gate.stream.calls": calls,
        })

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.span.end()

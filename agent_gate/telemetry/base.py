"""The telemetry seam: what the gate and the transport tell an observer, and the
observer that needs no OpenTelemetry (it writes ``logging`` records only).

Why one seam: the gate's driver, its runner and the transport's stream loop each
call a handful of methods on one object resolved once (``Gate`` construction, a
stream's opening), never ``import opentelemetry`` or "is tracing on?" per call.
This module is that object's interface *and* its default: ``Observer`` hands out a
``CallTrace`` per gated call and a ``StreamTrace`` per stream; their methods here
log one record per transition (INFO) and per anomaly (WARNING) under the
``agent_gate`` logger hierarchy, and cost a logger level check when nobody listens.
``agent_gate.telemetry.otel`` subclasses them to add spans and metrics.

Privacy, the rule every method keeps: what crosses into telemetry is ids (task,
call, tool, rule, reason code), states, counts, sizes, hashes and exception *type*
names. Never argument values, results, a tool's error text or a ``reason`` string
(a policy's or a validator's reason may quote an argument).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from enum import Enum
from typing import Any, NamedTuple, Protocol

from agent_gate.telemetry.logs import CALL_LOG, MIGRATE_LOG, STREAM_LOG

__all__ = [
    "CALL_LOG",
    "MIGRATE_LOG",
    "STREAM_LOG",
    "AnomalyView",
    "CallTrace",
    "Observer",
    "OutcomeView",
    "RowAs",
    "RowView",
    "StreamTrace",
    "StreamView",
    "printable",
]

_NULL: AbstractContextManager[None] = nullcontext()
_INFO, _WARNING = logging.INFO, logging.WARNING

EVENTS: Mapping[str, str] = {
    "received": "received",
    "incomplete": "received",
    "authorized": "decided",
    "awaiting_approval": "decided",
    "rejected": "decided",
    "executing": "claimed",
    "succeeded": "finished",
    "failed": "finished",
    "in_doubt": "in_doubt",
}
"""The span event (and log record) a call's arrival in each ledger state is."""
_DECIDED = "decided"


class RowView(Protocol):
    """What telemetry reads of a ledger row (``CallRecord``): no payload field."""

    @property
    def state(self) -> Enum: ...
    @property
    def attempt(self) -> int: ...
    @property
    def rule_ids(self) -> tuple[str, ...]: ...
    @property
    def reason_code(self) -> str | None: ...


class RowAs(NamedTuple):
    """A ``RowView`` of a row as it stood in an earlier state of the same commit: a
    call decided and claimed at once is seen decided, with the claimed row's other
    fields (four values, not a copy of the whole row with its state changed)."""

    state: Enum
    attempt: int
    rule_ids: tuple[str, ...]
    reason_code: str | None


class OutcomeView(Protocol):
    """What telemetry reads of a gate ``Outcome``: states, codes, the error's type."""

    @property
    def state(self) -> Enum: ...
    @property
    def replayed(self) -> bool: ...
    @property
    def code(self) -> str | None: ...
    @property
    def attempt(self) -> int: ...
    @property
    def error(self) -> Mapping[str, Any] | None: ...
    @property
    def exception(self) -> BaseException | None: ...


def printable(text: str) -> str:
    """``text`` as every log handler and exporter can write it. Ids and tool names come
    from callers and from JSON, whose ``\\ud800`` escapes decode to lone surrogates that
    no UTF-8 stream or OTLP exporter accepts (a host's handler would fail on the record):
    such a character is written as its backslash escape. O(len) only for non-ASCII text."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


class AnomalyView(Protocol):
    """A protocol violation the accumulator saw: an identifier and where, no payload."""

    @property
    def event_index(self) -> int: ...
    @property
    def reason(self) -> str: ...
    @property
    def call_id(self) -> str | None: ...


class StreamView(Protocol):
    """What telemetry reads of a stream's ``StreamStats``: counts, ids and offsets."""

    @property
    def state(self) -> str: ...
    @property
    def connections(self) -> int: ...
    @property
    def reconnects(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def events(self) -> int: ...
    @property
    def heartbeats(self) -> int: ...
    @property
    def last_event_id(self) -> str: ...
    @property
    def status(self) -> int | None: ...
    @property
    def truncation(self) -> str | None: ...


def error_type(outcome: OutcomeView) -> str | None:
    """The class name of what a failed run raised: the one thing told of a tool error."""
    if outcome.exception is not None:
        return type(outcome.exception).__name__
    error = outcome.error
    kind = error.get("type") if error else None
    return kind if isinstance(kind, str) else None


class CallTrace:
    """One gated call, from the moment the gate sees it to the outcome it reports.

    The driver reports every row it sees (``seen``): a state this invocation did
    not see before is a transition, made here (``acted``) or found (another worker
    made it; ``replayed`` in the record). ``running`` brackets the tool, ``end`` the
    outcome, ``failed`` an error that escaped the driver.
    """

    __slots__ = ("call_id", "closed", "decision", "ids", "moved", "rule_ids", "started",
                 "state", "task_id", "tool")

    def __init__(self, task_id: str, call_id: str, tool: str) -> None:
        self.task_id = task_id
        self.call_id = call_id
        self.tool = tool
        self.state: str | None = None
        self.decision: str | None = None
        self.rule_ids: tuple[str, ...] = ()
        self.moved = False
        self.closed = False
        self.started = time.perf_counter()
        self.ids: tuple[str, str] | None = None
        """(trace id, span id) in hex when the call is in a sampled trace: kept in the ledger."""

    def seen(self, row: RowView, acted: bool) -> None:
        """The row as the driver now holds it; ``acted``: this invocation moved it there."""
        state = row.state.value
        before = self.state
        if state == before:
            return
        self.state = state
        if before is None:
            if not acted:
                return  # found as it is: nothing happened here yet
            if state != "received" and state != "incomplete":
                # Inserted and decided in one transaction: both arrivals happened here.
                self._arrived(None, "received", "received", None, acted)
                before = "received"
        self._arrived(before, state, EVENTS.get(state, state), row, acted)

    def _arrived(
        self, before: str | None, state: str | None, event: str, row: RowView | None,
        acted: bool, *, late: bool = False,
    ) -> None:
        """The one place an arrow is reported: ``seen``, ``end`` and ``late`` all come
        here, and each moves ``state`` first, so no arrow reaches ``transition`` twice."""
        self.moved = True
        if event == _DECIDED and state is not None:
            self.decision = state
            if row is not None:
                self.rule_ids = row.rule_ids
            if acted:
                self.decided(time.perf_counter() - self.started)
        self.transition(before, state or event, event, row, acted, late=late)

    def decided(self, seconds: float) -> None:
        """This invocation took the call's decision ``seconds`` after first seeing it."""

    def transition(
        self, before: str | None, state: str, event: str, row: RowView | None, acted: bool,
        *, late: bool = False,
    ) -> None:
        """The call arrived in ``state``: one log record (a span event in the subclass).
        ``late``: the tool's answer settled a call judged in doubt while it ran."""
        if late:
            if CALL_LOG.isEnabledFor(_WARNING):
                CALL_LOG.warning(
                    "call %s of task %s (%s): the tool returned after the call was judged "
                    "in doubt; settled as %s", self.call_id, self.task_id, self.tool, state,
                    extra={**self._fields(state, before, row, acted), "late": True},
                )
            return
        level = _WARNING if event == "in_doubt" else _INFO
        if CALL_LOG.isEnabledFor(level):
            CALL_LOG.log(
                level, "call %s of task %s (%s): %s", self.call_id, self.task_id, self.tool,
                state if before is None else f"{before} -> {state}",
                extra=self._fields(state, before, row, acted),
            )

    def _fields(
        self, state: str, before: str | None, row: RowView | None, acted: bool
    ) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "task_id": self.task_id, "call_id": self.call_id, "tool": self.tool,
            "state": state, "from_state": before, "replayed": not acted,
            "rule_ids": list(self.rule_ids),
        }
        if row is not None:
            fields["attempt"] = row.attempt
            fields["reason_code"] = row.reason_code
        if self.ids is not None:
            fields["trace_id"] = self.ids[0]
        return fields

    def running(self) -> AbstractContextManager[None]:
        """Brackets the tool: its own spans are children of the call's (subclass)."""
        return _NULL

    def ran(self, end: str) -> None:
        """The tool's run ended (``ok``, ``error``, ``timeout``, ``unknown``, ``interrupted``)."""

    def end(self, outcome: OutcomeView) -> None:
        """The outcome the gate reports; a state not seen yet is its last transition.
        The first of ``end`` and ``failed`` closes the trace; the other is then ignored
        (an interrupted run is ended by the runner, then its driver is abandoned)."""
        if not self.closed:
            self.closed = True
            self._end(outcome)

    def failed(self, exc: BaseException) -> None:
        """An error escaped the gate while it drove this call (a usage or database error)."""
        if not self.closed:
            self.closed = True
            self._failed(exc)

    def _end(self, outcome: OutcomeView) -> None:
        state = outcome.state.value
        if state != self.state:
            before, self.state = self.state, state
            self._arrived(before, state, EVENTS.get(state, state), None, not outcome.replayed)
        elif not self.moved and CALL_LOG.isEnabledFor(logging.DEBUG):
            CALL_LOG.debug(
                "call %s of task %s (%s): %s, as recorded", self.call_id, self.task_id,
                self.tool, state, extra=self._fields(state, None, None, False),
            )

    def late(self, state: str, settled: bool) -> None:
        """The tool returned after the call was judged in doubt: it ``settled`` the call
        in ``state`` (the arrow ``in_doubt -> state``, made here), or its outcome was
        discarded (the call had moved on meanwhile; no arrow).

        The trace's state moves with the arrow, so the outcome the driver then reports
        (``end``) is not a second report of it: whether the doubt was judged by this
        run (a timeout) or by another worker while the tool ran (a lease that ended)."""
        if settled:
            if state != self.state:
                self.state = state
                self._arrived("in_doubt", state, EVENTS.get(state, state), None, True,
                              late=True)
            return
        if CALL_LOG.isEnabledFor(_WARNING):
            CALL_LOG.warning(
                "call %s of task %s (%s): the tool returned after the call was judged in "
                "doubt; its outcome was discarded", self.call_id, self.task_id, self.tool,
                extra={**self._fields(state, None, None, True), "late": True},
            )

    def _failed(self, exc: BaseException) -> None:
        if CALL_LOG.isEnabledFor(_WARNING):
            CALL_LOG.warning(
                "call %s of task %s (%s): the gate raised %s", self.call_id, self.task_id,
                self.tool, type(exc).__name__,
                extra={**self._fields(self.state or "unknown", None, None, True),
                       "error_type": type(exc).__name__},
            )


class StreamTrace:
    """One logical stream (all its connections), as the transport and live wiring see it.

    The transport reports reconnects and the stream's end (``ended``, with its
    counts); the live wiring adds what only the gate knows (``result``) and runs the
    gate inside ``active`` so each call's span is a child of the stream's.
    """

    __slots__ = ("provider", "task_id")

    def __init__(self, provider: str | None, task_id: str | None) -> None:
        self.provider = provider
        self.task_id = task_id

    def active(self) -> AbstractContextManager[None]:
        """Makes the stream's span the current one (subclass); here: nothing."""
        return _NULL

    def reconnect(self, attempt: int, delay: float, cause: str, last_event_id: str) -> None:
        if STREAM_LOG.isEnabledFor(_WARNING):
            STREAM_LOG.warning(
                "stream of task %s reconnects (attempt %d, after %s, Last-Event-ID %r)",
                self.task_id, attempt, cause, last_event_id,
                extra={"task_id": self.task_id, "provider": self.provider, "attempt": attempt,
                       "delay_s": delay, "cause": cause, "last_event_id": last_event_id},
            )

    def ended(self, stats: StreamView, error: BaseException | None) -> None:
        """The transport's loop is over: its counts, and the typed error that ended it."""
        bad = error is not None or stats.truncation is not None
        level = _WARNING if bad else _INFO
        if STREAM_LOG.isEnabledFor(level):
            STREAM_LOG.log(
                level, "stream of task %s ended %s after %d events, %d bytes, %d reconnects",
                self.task_id, stats.state, stats.events, stats.bytes, stats.reconnects,
                extra={**self.fields(stats),
                       "error_type": type(error).__name__ if error is not None else None},
            )

    def fields(self, stats: StreamView) -> dict[str, Any]:
        return {
            "task_id": self.task_id, "provider": self.provider, "state": stats.state,
            "connections": stats.connections, "reconnects": stats.reconnects,
            "events": stats.events, "heartbeats": stats.heartbeats,
            "byte_offset": stats.bytes, "last_event_id": stats.last_event_id,
            "http_status": stats.status, "truncation": stats.truncation,
        }

    def result(
        self, terminal: str | None, replayed_events: int, calls: int,
        anomalies: Sequence[AnomalyView] = (),
    ) -> None:
        """What the gate made of the stream: the response's terminal, replays, calls
        (``anomalies``: span events where there is a span; their log records come from
        ``Observer.anomalies``, which every run calls, live or not)."""
        if STREAM_LOG.isEnabledFor(_INFO):
            STREAM_LOG.info(
                "response of task %s: terminal %s, %d calls, %d replayed events",
                self.task_id, terminal, calls, replayed_events,
                extra={"task_id": self.task_id, "provider": self.provider,
                       "terminal": terminal, "calls": calls,
                       "replayed_events": replayed_events},
            )

    def close(self) -> None:
        """The stream's owner is done with it (ends its span in the subclass)."""


class Observer:
    """Hands out one ``CallTrace`` per gated call and one ``StreamTrace`` per stream.

    This base writes log records only: the observer when OpenTelemetry is not
    installed. ``agent_gate.telemetry.observer()`` picks the one to use.
    """

    def call(
        self, task_id: str, call_id: str, tool: str, *,
        link: tuple[str | None, str | None] | None = None,
    ) -> CallTrace:
        """A new call's trace; ``link``: the (trace id, span id) it was first seen in."""
        return CallTrace(printable(task_id), printable(call_id), printable(tool))

    def stream(self, *, provider: str | None, task_id: str | None = None) -> StreamTrace:
        return StreamTrace(provider, printable(task_id) if task_id is not None else None)

    def anomalies(
        self, task_id: str, provider: str | None, anomalies: Sequence[AnomalyView]
    ) -> None:
        """Each protocol violation the accumulator saw in one run: a WARNING by event
        index (``Gate.run``, ``arun`` and the live runs all end here)."""
        if anomalies and STREAM_LOG.isEnabledFor(_WARNING):
            task_id = printable(task_id)
            for anomaly in anomalies:
                STREAM_LOG.warning(
                    "stream of task %s: %s at event %d", task_id, anomaly.reason,
                    anomaly.event_index,
                    extra={"task_id": task_id, "provider": provider,
                           "anomaly": anomaly.reason, "event_index": anomaly.event_index,
                           "call_id": printable(anomaly.call_id)
                           if anomaly.call_id is not None else None},
                )

    def shadow(self, task_id: str, call_id: str, tool: str, enforced: str, would: str,
               rule_ids: Sequence[str]) -> None:
        """A call's decision had a shadow evaluation (``mode: shadow`` rules or a shadow
        policy): ``would`` is its never-enforced verdict beside the ``enforced`` one. A
        DEBUG record here, a counter in the OpenTelemetry observer."""
        if would != enforced and CALL_LOG.isEnabledFor(_INFO):
            task_id, call_id, tool = printable(task_id), printable(call_id), printable(tool)
            CALL_LOG.info(
                "call %s of task %s (%s): shadow decision %s differs from %s (%s)",
                call_id, task_id, tool, would, enforced, ", ".join(rule_ids),
                extra={"task_id": task_id, "call_id": call_id, "tool": tool,
                       "decision": enforced, "shadow_decision": would,
                       "shadow_rule_ids": list(rule_ids)},
            )

    def operator(self, task_id: str, call_id: str, tool: str, before: str, after: str,
                 by: str) -> None:
        """A person moved a call (denied it, resolved it) outside any gated run."""
        task_id, call_id, tool = printable(task_id), printable(call_id), printable(tool)
        if CALL_LOG.isEnabledFor(_INFO):
            CALL_LOG.info(
                "call %s of task %s (%s): %s -> %s by %s", call_id, task_id, tool, before,
                after, by,
                extra={"task_id": task_id, "call_id": call_id, "tool": tool, "state": after,
                       "from_state": before, "actor": by},
            )

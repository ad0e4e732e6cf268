"""A response's events through the accumulator and the gate: the sans-IO core of
``Gate.run`` and ``Gate.arun``.

``StreamRun`` is fed events and hands back drivers to serve, one per call the
accumulator released, in release order; it never blocks and never runs a tool.
``Gate.run`` and ``Gate.arun`` are two thin loops over it that differ only in how
they get events and serve drivers (``runner``). Per event the work is bounded by
the calls it releases: O(calls released) drivers, each served once.

A write (a tool whose dispatch mode waits for the response) released before the
response ended is held until the terminal event, and recorded ``incomplete``, not
run, when the response then ends without success. The gate's own accumulator
never releases those early, but a caller's (``run(accumulator=...)``) may have
been built with a laxer mode: ``_Held`` keeps the policy's word over the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent_gate.accumulate import Accumulator, DispatchMode
from agent_gate.autodetect import DetectingAccumulator
from agent_gate.calls import CallStatus, Terminal, ToolCall
from agent_gate.errors import AgentGateError
from agent_gate.gate.admission import CallContext
from agent_gate.gate.outcome import Outcome, RunResult
from agent_gate.gate.runner import CallWalk
from agent_gate.ledger.lease import this_owner
from agent_gate.ledger.reasons import ReasonCode as R
from agent_gate.ledger.records import Ruling
from agent_gate.ledger.states import Event

if TYPE_CHECKING:
    from agent_gate.gate.driver import CallDriver

__all__ = ["StreamRun"]

AnyAccumulator = Accumulator | DetectingAccumulator


class _Held:
    """Calls released before the response ended that must wait for its end."""

    def __init__(self, mode: Callable[[str], DispatchMode]) -> None:
        self.mode = mode
        self.calls: list[ToolCall] = []

    def due(
        self, released: Iterable[ToolCall], terminal: Terminal | None, *, final: bool = False
    ) -> list[ToolCall]:
        """The calls to hand to the gate now, in release order; the rest are kept."""
        if terminal is not None or final:
            due, self.calls = [*self.calls, *released], []
            return due
        due = []
        for call in released:
            deferred = self.mode(call.name) is DispatchMode.ON_RESPONSE_COMPLETE
            (self.calls if deferred and call.complete else due).append(call)
        return due


@dataclass(eq=False)
class StreamRun:
    """One response for one task: events in, drivers out, a ``RunResult`` at the end."""

    driver: CallDriver
    acc: AnyAccumulator
    mode: Callable[[str], DispatchMode]
    task_id: str
    context: CallContext
    outcomes: list[Outcome] = field(default_factory=list)
    error: str | None = None
    """The stream's own failure (a limit, a decoding error): it ends the run quietly."""
    _held: _Held = field(init=False)

    def __post_init__(self) -> None:
        self._held = _Held(self.mode)

    @property
    def stopped(self) -> bool:
        return self.error is not None

    def fail(self, exc: AgentGateError) -> None:
        """The event source failed on its own terms: the run ends, what it held is kept."""
        self.error = str(exc)

    def feed(self, event: object) -> list[CallWalk]:
        """The drivers for the calls ``event`` released (none once the run stopped).

        Most events (every argument fragment) release nothing while nothing is held:
        then there is nothing to hand over, terminal or not, and no driver to make:
        O(1) per such event."""
        try:
            released = self.acc.feed(event)
        except AgentGateError as exc:
            self.fail(exc)
            return []
        if not released and not self._held.calls:
            return []
        return self._walks(self._held.due(released, self.acc.terminal))

    def close(self) -> list[CallWalk]:
        """The drivers for every call still held or released at the end."""
        try:
            closing = self.acc.close()
        except AgentGateError as exc:
            # E.g. a stream none of whose events the adapter recognised.
            closing = []
            self.error = self.error or str(exc)
        return self._walks(self._held.due(closing, self.acc.terminal, final=True))

    def _walks(self, calls: list[ToolCall]) -> list[CallWalk]:
        terminal = self.acc.terminal
        drivers = []
        for call in calls:
            if call.status is CallStatus.PROVIDER_EXECUTED:
                continue  # the provider ran it; not ours to record or run
            early: Ruling | None = None
            deferred = self.mode(call.name) is DispatchMode.ON_RESPONSE_COMPLETE
            if call.complete and deferred and not (terminal is not None and terminal.succeeded):
                ended = str(terminal) if terminal is not None else "truncated"
                early = Ruling(
                    Event.MARK_INCOMPLETE,
                    R.RESPONSE_NOT_COMPLETED,
                    f"the response ended {ended} before completing; this call waits for a "
                    "completed response and was not run",
                )
            drivers.append(self.driver.drive_call(self.task_id, call, early, self.context))
        return drivers

    def after(self) -> None:
        """Record how the response ended, and anomalies after a call was released; log
        every anomaly (``Observer.anomalies``)."""
        ledger = self.driver.ledger
        self.driver.observer.anomalies(self.task_id, self.acc.provider, self.acc.anomalies)
        terminal = self.acc.terminal
        if terminal is not None:
            ledger.record_terminal(self.task_id, terminal.kind.value, terminal.reason)
        for anomaly in self.acc.anomalies:
            if not (anomaly.after_release and anomaly.call_id):
                continue
            rec = ledger.get(self.task_id, anomaly.call_id)
            if rec is not None:
                ledger.note(
                    rec,
                    "stream_anomaly_after_release",
                    actor=this_owner(),
                    detail={"reason": anomaly.reason, "event_index": anomaly.event_index},
                )

    def result(self) -> RunResult:
        acc, outcomes = self.acc, tuple(self.outcomes)
        return RunResult(
            outcomes, acc.terminal, self.error, acc.anomalies, acc.provider, acc.turn
        )

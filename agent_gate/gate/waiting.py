"""Waiting in code for a person to answer a call: ``Gate.pending``, ``Gate.wait`` and
``Gate.await_decision``.

An agent loop that got ``awaiting_approval`` can hold the call and carry on once a
person approved or denied it (``agent-gate approve``, another process, any API),
then run it with ``Gate.execute`` again, without a separate resume process.

How the waiter learns of the answer: on PostgreSQL, the answer's transaction sends
``NOTIFY`` (``ledger.views.notify``) and the waiter ``LISTEN``s, starting before its first
read, so an answer committed at any moment wakes it; it still re-reads every
``LISTEN_SLICE`` seconds in case a notification was lost. On SQLite it re-reads the
call with backoff, from ``POLL_MIN`` to ``POLL_MAX`` seconds. Either way the answer
is what the ledger holds when re-read, never what a notification said.

The loop is written once (``_steps``, a generator of requests) and run by a blocking
and an asyncio executor: the asyncio one reads the ledger on a thread and waits for
the listener's socket on the event loop, so cancelling it stops at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agent_gate.errors import NotAwaitingApproval
from agent_gate.gate.outcome import Outcome, outcome_of
from agent_gate.ledger.approvals import ApprovalRecord
from agent_gate.ledger.records import CallRecord
from agent_gate.ledger.states import CallState
from agent_gate.ledger.store import Ledger
from agent_gate.ledger.views.notify import Listener, payload

__all__ = ["LISTEN_SLICE", "POLL_MAX", "POLL_MIN", "Answer", "AnswerStatus", "await_answer",
           "pending", "wait_answer"]

POLL_MIN = 0.05
POLL_MAX = 2.0
"""SQLite: seconds between re-reads, doubling from ``POLL_MIN`` while nobody answers."""
LISTEN_SLICE = 5.0
"""PostgreSQL: the longest wait on the listener before re-reading anyway."""


class AnswerStatus(StrEnum):
    APPROVED = "approved"
    """A usable approval stands (or was already used): ``execute`` runs the call."""
    DENIED = "denied"
    """A person denied the call: it is rejected and never runs."""
    WAITING = "waiting"
    """The time ran out and nobody answered (or the approval given expired)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What a person answered about one call, read from the ledger when the wait ended."""

    status: AnswerStatus
    outcome: Outcome
    """The call as the ledger holds it now (``replayed=True``)."""
    approval: ApprovalRecord | None
    """The answer that counts (the newest), if any was given."""

    @property
    def decided(self) -> bool:
        return self.status is not AnswerStatus.WAITING

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "task_id": self.outcome.task_id,
                **self.outcome.to_dict(),
                "approval": self.approval.to_dict() if self.approval else None}


def pending(ledger: Ledger, task_id: str | None = None) -> list[Outcome]:
    """Calls that wait for a person (of one task, or all), oldest first."""
    return [outcome_of(rec, replayed=True)
            for rec in ledger.calls(task_id, [CallState.AWAITING_APPROVAL])]


def _read(ledger: Ledger, rec: CallRecord) -> Answer | None:
    """The answer as the ledger holds it now; None when the call waits for nobody."""
    row, answer = ledger.answered(rec.row_id)
    now = row or rec
    status: AnswerStatus | None = None
    if answer is not None and answer.denied:
        status = AnswerStatus.DENIED
    elif answer is not None and (answer.consumed or not answer.expired()):
        status = AnswerStatus.APPROVED
    elif now.state is CallState.AWAITING_APPROVAL:
        status = AnswerStatus.WAITING
    if status is None:
        return None
    return Answer(status, outcome_of(now, replayed=True), answer)


_READ = None
"""A request of ``_steps``: read the call now and send the answer back."""


def _steps(rec: CallRecord, timeout: float | None, *, notified: bool
           ) -> Generator[float | None, Answer | None, Answer]:
    """The one waiting loop: yields ``_READ`` (send the answer read) or seconds to pause
    (a notification may end the pause early); returns the final answer."""
    deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
    pause = POLL_MIN
    while True:
        answer = yield _READ
        if answer is None:
            raise NotAwaitingApproval(
                f"call {rec.call_id!r} of task {rec.task_id!r} is {rec.state.value} and was "
                "never answered: it does not wait for approval")
        left = None if deadline is None else deadline - time.monotonic()
        if answer.decided or (left is not None and left <= 0):
            return answer
        step = LISTEN_SLICE if notified else pause
        pause = min(pause * 2, POLL_MAX)
        yield step if left is None else min(step, left)


def wait_answer(ledger: Ledger, rec: CallRecord, timeout: float | None) -> Answer:
    """``Gate.wait``: block until a person answers, or ``timeout`` seconds pass."""
    listener = Listener.open(ledger.engine)  # before the first read: no answer slips by
    steps, wanted = _steps(rec, timeout, notified=listener is not None), _wanted(rec)
    sent: Answer | None = None
    try:
        while True:
            request = steps.send(sent)
            sent = _read(ledger, rec) if request is _READ else None
            if request is _READ:
                continue
            if listener is not None:
                listener.wait(request, wanted)
            else:
                time.sleep(request)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        if listener is not None:
            listener.close()


async def await_answer(ledger: Ledger, rec: CallRecord, timeout: float | None) -> Answer:
    """``Gate.await_decision``: ``wait_answer`` for asyncio, reads off the loop."""
    listener = await asyncio.to_thread(Listener.open, ledger.engine)
    steps = _steps(rec, timeout, notified=listener is not None)
    sent: Answer | None = None
    try:
        while True:
            request = steps.send(sent)
            sent = await (asyncio.to_thread(_read, ledger, rec) if request is _READ
                          else _pause(listener, request, _wanted(rec)))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        if listener is not None:
            await asyncio.to_thread(listener.close)


def _wanted(rec: CallRecord) -> str:
    return payload(rec.task_id, rec.call_id)


async def _pause(listener: Listener | None, seconds: float, wanted: str) -> None:
    """Sleep, or wait for the listener's socket on the loop and take what arrived."""
    if listener is None:
        await asyncio.sleep(seconds)
        return
    await _readable(listener, seconds)
    await asyncio.to_thread(listener.wait, 0.0, wanted)


async def _readable(listener: Listener, timeout: float) -> None:
    """Until the listener's socket has data or ``timeout`` seconds pass, on the loop."""
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()
    fd = listener.fileno()
    try:
        loop.add_reader(fd, ready.set)
    except NotImplementedError:  # an event loop without readers (Windows' proactor)
        await asyncio.sleep(min(timeout, POLL_MAX))
        return
    try:
        await asyncio.wait_for(ready.wait(), timeout)
    except TimeoutError:
        pass
    finally:
        loop.remove_reader(fd)

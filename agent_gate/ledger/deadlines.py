"""The deadline of a call's wait for a person: armed by the ledger's clock, read back.

Why the ledger keeps it, not a worker: "deny when nobody answers in 30 minutes" must
hold when no worker runs, and must mean the same 30 minutes to every process. So the
deadline is written as "the database's now + timeout" (``sql.db_now_ms``, as an
approval's expiry and a lease are), in the transaction whose arrow sends the call to
a person (``states.Effects.arms_deadline``: ``flows.apply_ruling`` calls ``arm``),
and acted on by a sweeper (``ledger.sweep``) that compares it with the same clock.

A deadline belongs to one wait: it names the call's version when the wait began
(``armed_version``). A call that is answered and sent to a person again (a claim's
re-check) is armed anew, and a deadline whose call has moved on is never acted on.
An escalated call (``then: escalate``) is answerable only by the role it names
while that wait lasts (``escalated_role``): the gate's approvers check asks it.

Only calls that wait with a deadline write here: a call that is allowed or denied at
once writes nothing, and reads nothing, of this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, insert, select

from agent_gate.ledger.models import APPROVAL_DEADLINES
from agent_gate.ledger.sql import db_now_ms
from agent_gate.ledger.states import CallState

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqlalchemy import Connection

    from agent_gate.ledger.records import CallRecord, Deadline
    from agent_gate.ledger.txn import Txn

__all__ = [
    "ANSWERED",
    "ARMED",
    "DENIED",
    "ESCALATED",
    "MOOT",
    "WaitDeadline",
    "arm",
    "escalated_role",
    "of_call",
]

ARMED = "armed"
"""Waiting to pass, or passed and not yet acted on."""
DENIED = "denied"
ESCALATED = "escalated"
ANSWERED = "answered"
"""It passed while a person's approval stood unused: they answered in time."""
MOOT = "moot"
"""It passed after its call had moved on (answered, re-decided): nothing to do."""

_T = APPROVAL_DEADLINES


@dataclass(frozen=True, slots=True)
class WaitDeadline:
    """One call's deadline as a person is shown it (``inbox``, ``pending``, ``call show``)."""

    due_ms: int
    then: str
    role: str | None
    rule_id: str | None
    outcome: str
    now_ms: int
    """The database's clock when it was read: what "remaining" is measured by."""

    @property
    def due_at(self) -> datetime:
        return datetime.fromtimestamp(self.due_ms / 1000, UTC)

    @property
    def remaining_seconds(self) -> int:
        return max(0, (self.due_ms - self.now_ms) // 1000)

    @property
    def escalated(self) -> bool:
        return self.outcome == ESCALATED

    def summary(self) -> str:
        """One line for a person: ``12m left, then deny``, ``escalated to finance``."""
        if self.escalated:
            return f"escalated to {self.role}"
        then = "deny" if self.then == "deny" else f"escalate to {self.role}"
        left = self.remaining_seconds
        if left <= 0:
            return f"passed: {then} at the next sweep"
        for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
            if left >= size:
                return f"{left // size}{unit} left, then {then}"
        return f"{left}s left, then {then}"

    def to_dict(self) -> dict[str, Any]:
        return {"due_at": self.due_at.isoformat(), "then": self.then, "role": self.role,
                "rule": self.rule_id, "escalated": self.escalated,
                "remaining_seconds": self.remaining_seconds, "summary": self.summary()}


def arm(txn: Txn, rec: CallRecord, version: int, deadline: Deadline) -> None:
    """In the transaction of the arrow that sends ``rec`` to a person (its ``version``
    after the arrow): due ``deadline.timeout_ms`` after the database's clock now."""
    if rec.state is not CallState.RECEIVED:
        # sent to a person again: the earlier wait's deadline is over either way
        txn.execute(delete(_T).where(_T.c.call_row_id == rec.row_id))
    txn.execute(insert(_T).values(
        call_row_id=rec.row_id, task_id=rec.task_id, call_id=rec.call_id,
        armed_version=version, due_ms=db_now_ms() + int(deadline.timeout_ms),
        then=deadline.then, role=deadline.role, rule_id=deadline.rule_id, outcome=ARMED,
    ))


def _this_wait(rec: CallRecord) -> Any:
    return select(_T, db_now_ms().label("now_ms")).where(
        _T.c.call_row_id == rec.row_id, _T.c.armed_version == rec.version)


def of_call(txn: Txn, rec: CallRecord) -> WaitDeadline | None:
    """The deadline of ``rec``'s current wait (None: it has none, or is not waiting)."""
    if rec.state is not CallState.AWAITING_APPROVAL:
        return None
    row = txn.execute(_this_wait(rec)).mappings().first()
    return wait_deadline(row) if row is not None else None


def of_calls(conn: Connection, recs: Sequence[CallRecord]) -> dict[int, WaitDeadline]:
    """``of_call`` for a page of calls in one statement (keyed by row id): a page of
    details is a fixed number of statements however many calls it holds."""
    waiting = {r.row_id: r.version for r in recs if r.state is CallState.AWAITING_APPROVAL}
    if not waiting:
        return {}
    rows = conn.execute(select(_T, db_now_ms().label("now_ms"))
                       .where(_T.c.call_row_id.in_(list(waiting)))).mappings()
    return {int(row["call_row_id"]): wait_deadline(row) for row in rows
            if waiting.get(int(row["call_row_id"])) == int(row["armed_version"])}


def wait_deadline(row: Any) -> WaitDeadline:
    """A ``WaitDeadline`` from a row holding the table's columns and ``now_ms``."""
    return WaitDeadline(int(row["due_ms"]), row["then"], row["role"], row["rule_id"],
                        row["outcome"], int(row["now_ms"]))


def escalated_role(txn: Txn, rec: CallRecord) -> str | None:
    """The role ``rec``'s current wait was escalated to: only its holders may answer."""
    found = of_call(txn, rec)
    return found.role if found is not None and found.escalated else None

"""People's answers to calls that wait for approval, and the rules for using one.

An approval is a row bound to three things: the call's argument hash, the hash of
the policy the call was decided under (or that the approver named), and an
expiry. It does not change the call's state: the call stays ``awaiting_approval``
until a gate that runs *the same policy* consumes the approval, in the one
transaction that also moves the call ``awaiting_approval -> authorized ->
executing`` (``Ledger.claim_approved``). So an approval that expired, or that was
given under another policy, or for other arguments, leaves the call visibly
waiting, where a person can approve it again or deny it; and two processes that
resume the task at once cannot both use it, because the consuming update names
``consumed_at IS NULL`` and the call's compare-and-set names its version.

A denial moves the call to ``rejected`` (``Ledger.deny``) and is recorded here too.

Expiry is measured by the database's clock (``sql.db_now_ms``), as leases are:
the expiry is written as "database now + ttl", and every read of an approval
(``latest``) carries the database's now, which ``expired`` compares with. A
worker or an approver whose clock is off can neither stretch nor revive an
approval. A ttl is a positive, finite number of seconds up to ``MAX_TTL_SECONDS``
(``ttl_problem`` is the one judge, for ``Gate.approve`` and ``--expires-in``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, func, insert, select, update

from agent_gate.errors import NotAwaitingApproval
from agent_gate.ledger.chain import as_utc
from agent_gate.ledger.lease import now_ms
from agent_gate.ledger.models import APPROVALS
from agent_gate.ledger.records import from_row
from agent_gate.ledger.sql import db_now_ms

if TYPE_CHECKING:
    from agent_gate.ledger.txn import Txn

__all__ = [
    "APPROVED",
    "CHANNEL",
    "DENIED",
    "MAX_TTL_SECONDS",
    "ApprovalRecord",
    "NotAwaitingApproval",
    "announce",
    "answers",
    "answers_in",
    "answers_of",
    "consume",
    "insert_answer",
    "latest",
    "payload",
    "problem",
    "ttl_problem",
]

APPROVED = "approved"
DENIED = "denied"
_APPROVALS = APPROVALS
MAX_TTL_SECONDS = 366 * 86400
"""The longest an approval may stay usable (a year and a day): a person approves a
call for now-ish, and a longer ttl is almost always a unit mistake (ms for s)."""


def ttl_problem(ttl: object) -> str | None:
    """Why ``ttl`` (seconds; None for no expiry) is not a usable approval lifetime."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        return f"expected a number of seconds, got {type(ttl).__name__}"
    if not math.isfinite(ttl):
        return f"expected a finite number of seconds, got {ttl}"
    if ttl <= 0:
        return f"expected a positive number of seconds, got {ttl:g}"
    if ttl > MAX_TTL_SECONDS:
        return (f"expected at most {MAX_TTL_SECONDS} seconds (366 days), got {ttl:g}; "
                "approve it again later instead")
    if int(ttl * 1000) < 1:
        return f"expected at least a millisecond, got {ttl:g} seconds"
    return None


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One answer given to a call that waits for approval, as stored. It names the
    arguments' and policy's hashes it was given for, so that it cannot be spent on
    other arguments or under another policy."""

    id: int
    call_row_id: int
    task_id: str
    call_id: str
    verdict: str
    args_hash: str
    policy_hash: str | None
    decided_by: str
    reason: str | None
    decided_at: datetime
    expires_ms: int | None
    consumed_at: datetime | None
    consumed_attempt: int | None
    read_at_ms: int | None = None
    """The database's clock when the row was read: what ``expired`` measures by."""

    @property
    def denied(self) -> bool:
        """A person's no: the call is rejected and never runs."""
        return self.verdict == DENIED

    @property
    def consumed(self) -> bool:
        return self.consumed_at is not None

    def unusable(
        self,
        *,
        args_hash: str,
        stored_args_hash: str,
        policy_hash: str | None,
        at_ms: int | None = None,
    ) -> str | None:
        """Why this answer cannot authorize the call now, or None if it can.

        ``args_hash`` is recomputed from the arguments that would run now (so arguments
        edited in the database do not run under an old approval); ``stored_args_hash``
        is the row's; ``policy_hash`` is the hash of the policy the gate runs.
        """
        if self.verdict != APPROVED:
            return f"the last answer was {self.verdict} by {self.decided_by}"
        if self.consumed:
            return f"the approval was already used by attempt {self.consumed_attempt}"
        if self.expired(at_ms):
            return "the approval expired; approve it again"
        if self.args_hash != stored_args_hash or self.args_hash != args_hash:
            return "the arguments changed since the approval; approve it again"
        if policy_hash is None:
            return (
                f"it was approved under policy {self.policy_hash}; run with that policy "
                "to use the approval"
            )
        if self.policy_hash != policy_hash:
            return (
                f"it was approved under policy {self.policy_hash} and the gate runs "
                f"{policy_hash}; a changed policy needs a new approval"
            )
        return None

    def expired(self, at_ms: int | None = None) -> bool:
        """Whether the approval has run out at ``at_ms``, else at the database time
        it was read (this machine's clock only for a record not read from a ledger)."""
        if self.expires_ms is None:
            return False
        if at_ms is None:
            at_ms = self.read_at_ms if self.read_at_ms is not None else now_ms()
        return self.expires_ms <= at_ms

    @property
    def expires_at(self) -> datetime | None:
        if self.expires_ms is None:
            return None
        return datetime.fromtimestamp(self.expires_ms / 1000, UTC)

    def to_dict(self) -> dict[str, Any]:
        return {
            "approval_id": self.id,
            "task_id": self.task_id,
            "call_id": self.call_id,
            "verdict": self.verdict,
            "args_hash": self.args_hash,
            "policy_hash": self.policy_hash,
            "by": self.decided_by,
            "reason": self.reason,
            "decided_at": self.decided_at.isoformat(),
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "consumed": self.consumed,
            "consumed_attempt": self.consumed_attempt,
            "expired": self.expired(),
        }


def _from_row(row: Any) -> ApprovalRecord:
    consumed_at = row["consumed_at"]
    return from_row(
        ApprovalRecord,
        row,
        decided_at=as_utc(row["decided_at"]),
        consumed_at=as_utc(consumed_at) if consumed_at is not None else None,
        read_at_ms=row["db_now_ms"],
    )


def _select() -> Any:
    """Approval rows with the database's clock read in the same statement."""
    return select(_APPROVALS, db_now_ms().label("db_now_ms"))


def latest(txn: Txn, call_row_id: int) -> ApprovalRecord | None:
    """The newest answer given for the call (the one that counts)."""
    row = txn.execute(
        _select()
        .where(_APPROVALS.c.call_row_id == call_row_id)
        .order_by(_APPROVALS.c.id.desc())
        .limit(1)
    ).mappings().first()
    return _from_row(row) if row is not None else None


CHANNEL = "agent_gate_decision"
"""The PostgreSQL channel an answer is announced on (``views.notify`` listens)."""
_SEP = "\x1f"
"""Unit separator between task and call id: neither a task nor a call id contains it."""


def payload(task_id: str, call_id: str) -> str:
    """What an answer's notification says: the task and the call, ids only."""
    return f"{task_id}{_SEP}{call_id}"


def announce(txn: Txn, task_id: str, call_id: str) -> None:
    """In ``txn``: wake whoever waits for this call (``views.notify.Listener``), once
    it commits: PostgreSQL delivers a ``NOTIFY`` only if its transaction does."""
    if txn.dialect.name == "postgresql":
        txn.execute(select(func.pg_notify(CHANNEL, payload(task_id, call_id))))


def insert_answer(
    txn: Txn,
    *,
    call_row_id: int,
    task_id: str,
    call_id: str,
    verdict: str,
    args_hash: str,
    policy_hash: str | None,
    by: str,
    reason: str | None,
    expires_ms: int | None = None,
    ttl_ms: int | None = None,
) -> ApprovalRecord:
    """Record an answer; it expires at ``expires_ms``, or ``ttl_ms`` after the
    database's clock now (the way to give one: no worker's clock is involved)."""
    if expires_ms is not None and ttl_ms is not None:
        raise ValueError("give expires_ms or ttl_ms, not both")
    expiry: Any = expires_ms if ttl_ms is None else db_now_ms() + int(ttl_ms)
    now = datetime.now(UTC)
    result = txn.execute(
        insert(_APPROVALS).values(
            call_row_id=call_row_id,
            task_id=task_id,
            call_id=call_id,
            verdict=verdict,
            args_hash=args_hash,
            policy_hash=policy_hash,
            decided_by=by,
            reason=reason,
            decided_at=now,
            expires_ms=expiry,
        )
    )
    key = result.inserted_primary_key
    assert key is not None
    announce(txn, task_id, call_id)  # delivered on commit: waiters find the answer
    row = txn.execute(_select().where(_APPROVALS.c.id == key[0])).mappings().one()
    return _from_row(row)


def problem(
    approval: ApprovalRecord | None,
    *,
    args_hash: str,
    stored_args_hash: str,
    policy_hash: str | None,
    at_ms: int | None = None,
) -> str | None:
    """Why ``approval`` cannot authorize the call now (``ApprovalRecord.unusable``), or
    that none was given."""
    if approval is None:
        return "no approval has been given"
    return approval.unusable(
        args_hash=args_hash, stored_args_hash=stored_args_hash, policy_hash=policy_hash,
        at_ms=at_ms,
    )


def consume(txn: Txn, approval_id: int, attempt: int) -> bool:
    """Mark the approval used by ``attempt``; False if someone used it first."""
    result = txn.execute(
        update(_APPROVALS)
        .where(
            _APPROVALS.c.id == approval_id,
            _APPROVALS.c.verdict == APPROVED,
            _APPROVALS.c.consumed_at.is_(None),
        )
        .values(consumed_at=datetime.now(UTC), consumed_attempt=attempt)
    )
    return result.rowcount == 1


def answers(conn: Connection, call_row_id: int) -> list[ApprovalRecord]:
    """Every answer given for the call, oldest first (the ``call_row_id, id`` index)."""
    return _answers(conn.execute, call_row_id)


def answers_in(txn: Txn, call_row_id: int) -> list[ApprovalRecord]:
    """``answers`` in a ledger transaction (a quorum counts them where it decides)."""
    return _answers(txn.execute, call_row_id)


def _answers(execute: Any, call_row_id: int) -> list[ApprovalRecord]:
    rows = execute(
        _select().where(_APPROVALS.c.call_row_id == call_row_id).order_by(_APPROVALS.c.id)
    ).mappings()
    return [_from_row(row) for row in rows]


def answers_of(
    conn: Connection, call_row_ids: Sequence[int]
) -> dict[int, list[ApprovalRecord]]:
    """Every answer given for each of these calls, oldest first, in one statement (a
    page of calls and its answers: never one read per call)."""
    out: dict[int, list[ApprovalRecord]] = {i: [] for i in call_row_ids}
    if not call_row_ids:
        return out
    rows = conn.execute(
        _select().where(_APPROVALS.c.call_row_id.in_(list(call_row_ids)))
        .order_by(_APPROVALS.c.id)
    ).mappings()
    for row in rows:
        found = _from_row(row)
        out.setdefault(int(row["call_row_id"]), []).append(found)
    return out

"""The ledger's read queries, each over a connection the caller holds, and what a
decision may read inside the transaction that applies it (``LedgerTxn``).

``Ledger``'s read methods open a read snapshot (``backend.begin_read``) and call
these; the write flows read a call through their transaction (``Txn.read_call``).
Every ``tool_calls`` row becomes a record through ``records.call_record`` (or the
backend's ``Txn.call_row``), never by hand here.

``LedgerTxn`` is the narrower view a decision gets inside the transaction that
applies it (``Ledger.authorize``, ``claim_approved``, ``claim_rechecked``, ``record``
with ``decide``): the task is locked, so the usage it reads cannot change before the
charge commits; ``Ledger.reading()`` gives one over a read-only snapshot, for a
decision that is only shown.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, bindparam, func, select, text

from agent_gate.ledger import approvals, grants, quota
from agent_gate.ledger.approvals import ApprovalRecord
from agent_gate.ledger.models import SWEPT_STATES, SWEPT_WHERE
from agent_gate.ledger.records import (
    CALL_COLUMNS,
    CALLS,
    TASKS,
    CallRecord,
    TaskRecord,
    TaskSummary,
    call_record,
    task_record,
)
from agent_gate.ledger.states import CallState
from agent_gate.ledger.txn import Txn

__all__ = ["LedgerTxn", "calls", "find", "task", "tasks"]


def find(conn: Connection, call_id: str, task_id: str | None = None) -> list[CallRecord]:
    """Rows with this provider call id, in any task unless one is named."""
    stmt = select(*CALL_COLUMNS).where(CALLS.c.call_id == call_id)
    if task_id is not None:
        stmt = stmt.where(CALLS.c.task_id == task_id)
    return [call_record(r) for r in conn.execute(stmt.order_by(CALLS.c.id))]


def calls(
    conn: Connection, task_id: str | None = None, states: Iterable[CallState] | None = None
) -> list[CallRecord]:
    """A task's calls (or every call), optionally only those in ``states``, oldest first.

    Oldest is by when each was recorded (``created_at``, the recording process's
    clock), then by row id: not by row id alone, since ids are handed out ahead, in
    batches per engine on PostgreSQL (``backend.pg_fast.SPARE_BATCH``), so a call recorded
    later by an engine that took its batch earlier holds a lower id for as long as
    the batch lasts. ``resume`` runs a task's calls in this order; the audit trail's
    own order (``seq``) is the commit order, under the task's head lock.

    A task's calls are found through ``(task_id, state)``; calls in swept states across
    every task through the partial ``(state)`` index, which a query may use only if it
    states the index's predicate itself (``models.SWEPT_WHERE``), so it is added here.
    """
    stmt = select(*CALL_COLUMNS).order_by(CALLS.c.created_at, CALLS.c.id)
    if task_id is not None:
        stmt = stmt.where(CALLS.c.task_id == task_id)
    if states is not None:
        values = [s.value for s in states]
        stmt = stmt.where(CALLS.c.state.in_(values))
        if task_id is None and set(values) <= set(SWEPT_STATES):
            stmt = stmt.where(text(SWEPT_WHERE))
    return [call_record(r) for r in conn.execute(stmt)]


def task(conn: Connection, task_id: str) -> TaskRecord | None:
    row = conn.execute(select(TASKS).where(TASKS.c.id == task_id)).mappings().first()
    return task_record(row) if row is not None else None


def tasks(conn: Connection) -> list[TaskSummary]:
    """Every task with the number of its calls in each state, newest first."""
    rows = conn.execute(
        select(TASKS).order_by(TASKS.c.updated_at.desc(), TASKS.c.id)
    ).mappings().all()
    counted = conn.execute(
        select(CALLS.c.task_id, CALLS.c.state, func.count()).group_by(
            CALLS.c.task_id, CALLS.c.state
        )
    ).all()
    counts: dict[str, dict[CallState, int]] = {}
    for task_id, state, n in counted:
        counts.setdefault(task_id, {})[CallState(state)] = int(n)
    return [TaskSummary(task_record(r), counts.get(r["id"], {})) for r in rows]


class LedgerTxn:
    """The reads a decision may make inside one open ledger transaction."""

    __slots__ = ("_txn",)

    def __init__(self, txn: Txn) -> None:
        self._txn = txn

    def task_context(self, task_id: str) -> tuple[str | None, str | None]:
        """The principal and scope JSON stored on the task (None, None: no such task,
        or neither was given)."""
        return self._txn.task_context(task_id)

    def usage(
        self, task_id: str, counters: Iterable[str], *, besides: int | None = None
    ) -> dict[str, Decimal]:
        """What the task has used of each counter (``quota.usage``); ``besides``: not
        counting that call row's own charges."""
        return quota.usage(self._txn, task_id, counters, besides=besides)

    def latest_approval(self, row_id: int) -> ApprovalRecord | None:
        """The newest approval or denial given for the call row."""
        return approvals.latest(self._txn, row_id)

    def answers(self, row_id: int) -> list[ApprovalRecord]:
        """Every answer given for the call row, oldest first (a quorum counts them)."""
        return approvals.answers_in(self._txn, row_id)

    def live_grants(self, task_id: str, tool: str, policy_hash: str) -> list[grants.GrantRecord]:
        """The task's grants that may still cover a call of ``tool`` under the policy."""
        return grants.live(self._txn, task_id, tool, policy_hash)

    def spend_grant(self, grant_id: int, call_row_id: int) -> bool:
        """Count the call against the grant in this (the call's own) transaction: the
        one write a decision makes, undone with it if the transaction rolls back."""
        return grants.spend(self._txn, grant_id, call_row_id)

    def covering_grant(self, call_row_id: int) -> grants.GrantRecord | None:
        """The unrevoked grant that authorized the call, if one did."""
        return grants.covering(self._txn, call_row_id)

    def scoped_usage(
        self, task_id: str, principal: str | None, counters: Iterable[quota.ScopedCounter],
        *, besides: int | None = None,
    ) -> dict[str, Decimal]:
        """Counters summed per principal, over every task or in a window, each read under
        a lock of its scope, so deciders of different tasks take turns on it."""
        return quota.scoped_usage(self._txn, task_id, principal, counters, besides=besides)

    def earlier_calls(self, task_id: str, tool: str, before: int) -> list[CallRecord]:
        """The task's calls of ``tool`` recorded before row ``before``, oldest first (a
        policy's sequence rules: ``after``, ``not_after``, ``prior``)."""

        def build() -> Any:
            return select(*CALLS.c).where(
                CALLS.c.task_id == bindparam("task"), CALLS.c.tool == bindparam("tool"),
                CALLS.c.id < bindparam("before"),
            )

        rows = self._txn.run("earlier_calls", build,
                             {"task": task_id, "tool": tool, "before": before}).rows
        return sorted((self._txn.call_row(row) for row in rows), key=lambda r: r.row_id)

"""What a decision made inside a ledger transaction may read: ``LedgerTxn``.

The gate decides some calls inside the very transaction that applies the decision
(``Ledger.authorize``, ``claim_approved``, ``claim_rechecked``, ``record`` with
``decide``): the task is locked, so the quota usage it reads cannot change before
the charge commits. Those decisions get a ``LedgerTxn``, not the raw connection:
the three questions below are all a decision may ask, and the SQL behind them stays
in the ledger. ``Ledger.reading()`` gives one over a read-only snapshot, for a
decision that is only shown, never applied.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from sqlalchemy import Connection, bindparam, select

from agent_gate.ledger import approvals, quota
from agent_gate.ledger.approvals import ApprovalRecord
from agent_gate.ledger.backend.prepared import prepare
from agent_gate.ledger.records import TASKS

__all__ = ["LedgerTxn"]


class LedgerTxn:
    """The reads a decision may make inside one open ledger transaction."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def task_context(self, task_id: str) -> tuple[str | None, str | None]:
        """The principal and scope JSON stored on the task (None, None: no such task,
        or neither was given)."""
        rows = prepare(
            self._conn,
            "task_context_read",
            lambda: select(TASKS.c.principal, TASKS.c.scope).where(
                TASKS.c.id == bindparam("id")
            ),
        ).run(self._conn, {"id": task_id}).rows
        if not rows:
            return None, None
        principal, scope = rows[0]
        return principal, scope

    def usage(
        self, task_id: str, counters: Iterable[str], *, besides: int | None = None
    ) -> dict[str, Decimal]:
        """What the task has used of each counter (``quota.usage``); ``besides``: not
        counting that call row's own charges."""
        return quota.usage(self._conn, task_id, counters, besides=besides)

    def latest_approval(self, row_id: int) -> ApprovalRecord | None:
        """The newest approval or denial given for the call row."""
        return approvals.latest(self._conn, row_id)

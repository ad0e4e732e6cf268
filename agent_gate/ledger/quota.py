"""Per-task quota counters, charged in the transaction that authorizes a call.

A policy limit names a counter (``<tool>/calls`` or ``<tool>/sum/<argument>``).
The task's usage of a counter is the sum of the charges of its calls; a call is
charged once per counter (a unique constraint), when it enters ``authorized``:
either on the ``allow`` decision or when its approval is consumed. Reading the
usage, deciding and charging happen in one write transaction that first locks the
task (``Txn.lock_task``), so two workers can never both see the same usage and
both slip under a limit.

Charges are never refunded: a call that failed or is in doubt may have spent the
budget, and nobody can prove it did not. A retry of the same call is not charged
again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from sqlalchemy import Connection, select

from agent_gate.ledger.models import QUOTA_CHARGES

if TYPE_CHECKING:
    from agent_gate.ledger.txn import Txn

__all__ = ["charge", "charges_of", "usage"]

_CHARGES = QUOTA_CHARGES


def usage(
    txn: Txn,
    task_id: str,
    counters: Iterable[str],
    *,
    besides: int | None = None,
) -> dict[str, Decimal]:
    """What the task has used of each counter (0 for a counter never charged).

    ``besides``: leave out the charges of that call row, for re-judging a call that
    was already charged (a claim re-check must not count the call against itself).
    """
    wanted = sorted(set(counters))
    totals = {key: Decimal(0) for key in wanted}
    if not wanted:
        return totals
    query = select(_CHARGES.c.counter, _CHARGES.c.amount).where(
        _CHARGES.c.task_id == task_id, _CHARGES.c.counter.in_(wanted)
    )
    if besides is not None:
        query = query.where(_CHARGES.c.call_row_id != besides)
    rows = txn.execute(query)
    for counter, amount in rows:
        totals[counter] += Decimal(amount)
    return totals


def charge(
    txn: Txn, *, task_id: str, call_row_id: int, amounts: Mapping[str, Decimal]
) -> None:
    """Add this call's amounts to the task's counters (once per call and counter)."""
    now = datetime.now(UTC)
    for counter, amount in sorted(amounts.items()):
        txn.insert_ignore(
            _CHARGES,
            {
                "task_id": task_id,
                "call_row_id": call_row_id,
                "counter": counter,
                "amount": str(amount),
                "at": now,
            },
        )


def charges_of(conn: Connection, task_id: str) -> dict[str, Decimal]:
    """Every counter of a task and its total, for operators."""
    totals: dict[str, Decimal] = {}
    rows = conn.execute(
        select(_CHARGES.c.counter, _CHARGES.c.amount).where(_CHARGES.c.task_id == task_id)
    )
    for counter, amount in rows:
        totals[counter] = totals.get(counter, Decimal(0)) + Decimal(amount)
    return totals

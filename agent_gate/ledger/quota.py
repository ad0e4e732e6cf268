"""Per-task quota counters, charged in the transaction that authorizes a call.

A policy limit names a counter (``<tool>/calls`` or ``<tool>/sum/<argument>``).
The task's usage of a counter is the sum of the charges of its calls; a call is
charged once per counter (a unique constraint), when it enters ``authorized``:
either on the ``allow`` decision or when its approval is consumed. Reading the
usage, deciding and charging happen in one write transaction that first locks the
task (``Txn.lock_task``), so two workers can never both see the same usage and
both slip under a limit.

A call that ends ``rejected`` after it was authorized (its claim re-check denied
it), or whose write was found ``not_applied``, gets its charges back (``refund``,
in the transaction of that arrow, recorded in its audit entry as ``refunds``); a
call that failed or is in doubt keeps them: it may have spent the budget, and
nobody can prove it did not. A refunded call that runs again is charged again
when claimed. A retry of the same call is not charged again.

A charge's time, and the start of a window it is counted in, are the database's
clock (``db_clock``), as leases and approvals are (``sql.db_now_ms``): workers on
several hosts then count the same charges in a window, and a worker whose clock
runs behind (or ahead) cannot make a limit forget the calls of the last hour.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Connection,
    DateTime,
    Insert,
    Integer,
    bindparam,
    delete,
    literal,
    literal_column,
    select,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from agent_gate.ledger.models import QUOTA_CHARGES, TASKS
from agent_gate.ledger.sql import dialect_insert, lock_named

if TYPE_CHECKING:
    from agent_gate.ledger.txn import Txn

__all__ = ["ScopedCounter", "charge", "charges_of", "refund", "scoped_usage", "usage"]

_CHARGES = QUOTA_CHARGES


class db_clock(FunctionElement[datetime]):
    """The database's clock as a charge's ``at`` is stored, ``seconds`` ago: what a
    charge is stamped with (0) and where a window starts, in SQL, so that no worker's
    clock decides which charges a window holds. SQLite runs on the worker's machine,
    whose clock it is (in the text SQLAlchemy stores a ``DateTime`` as, UTC)."""

    type = DateTime(timezone=True)
    inherit_cache = True
    name = "db_clock"

    def __init__(self, seconds: int = 0) -> None:
        # a bound parameter: part of the statement's cache key by type, its value not
        super().__init__(*([literal(int(seconds), Integer())] if seconds else []))


@compiles(db_clock, "postgresql")
def _db_clock_postgresql(element: db_clock, compiler: SQLCompiler, **kw: Any) -> str:
    if not element.clauses.clauses:
        return "clock_timestamp()"
    return f"(clock_timestamp() - make_interval(secs => {compiler.process(element.clauses, **kw)}))"


@compiles(db_clock, "sqlite")
def _db_clock_sqlite(element: db_clock, compiler: SQLCompiler, **kw: Any) -> str:
    # '%f' is seconds with milliseconds: padded to SQLAlchemy's six-digit fraction,
    # the text compares in time order with the stored ones.
    if not element.clauses.clauses:
        return "strftime('%Y-%m-%d %H:%M:%f000', 'now')"
    seconds = compiler.process(element.clauses, **kw)
    return f"strftime('%Y-%m-%d %H:%M:%f000', 'now', '-' || {seconds} || ' seconds')"


def _charge_statement(name: str) -> Insert:
    """Insert one charge stamped by the database's clock, unless the call has one on
    the counter already (on PostgreSQL a ``1`` comes back for a row inserted)."""
    row: dict[str, Any] = {k: bindparam(k, type_=_CHARGES.c[k].type)
                           for k in ("task_id", "call_row_id", "counter", "amount")}
    stmt = dialect_insert(name)(_CHARGES).values({**row, "at": db_clock()})
    stmt = stmt.on_conflict_do_nothing()
    return stmt if name == "sqlite" else stmt.returning(literal_column("1"))


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


@dataclass(frozen=True, slots=True)
class ScopedCounter:
    """A counter summed beyond one task or over a sliding window: ``per`` is ``task``,
    ``principal`` (every task bound to the same principal) or ``all``; ``window`` in
    seconds, or None for every charge."""

    key: str
    per: str
    window: int | None


def scoped_usage(
    txn: Txn,
    task_id: str,
    principal: str | None,
    counters: Iterable[ScopedCounter],
    *,
    besides: int | None = None,
) -> dict[str, Decimal]:
    """What the principal (or everyone, or the task) used of each counter, in its window.

    Race-free as the task's counters are: each counter's scope is locked first
    (``lock_named``, held to the end of the deciding transaction; a no-op on SQLite,
    whose write transaction already excludes every other writer), so two deciders of
    different tasks of one principal take turns reading and charging it. Locks are
    taken in key order, always after the task's own lock, so they cannot deadlock.
    """
    totals: dict[str, Decimal] = {}
    for counter in sorted(counters, key=lambda c: c.key):
        scope = {"task": task_id, "principal": principal or "", "all": ""}[counter.per]
        lock_named(txn.conn, f"quota:{counter.key}:{scope}")
        query = select(_CHARGES.c.amount).where(_CHARGES.c.counter == counter.key)
        if counter.per == "task":
            query = query.where(_CHARGES.c.task_id == task_id)
        elif counter.per == "principal":
            query = query.join(TASKS, TASKS.c.id == _CHARGES.c.task_id).where(
                TASKS.c.principal == principal if principal is not None
                else TASKS.c.principal.is_(None)
            )
        if counter.window is not None:
            query = query.where(_CHARGES.c.at >= db_clock(counter.window))
        if besides is not None:
            query = query.where(_CHARGES.c.call_row_id != besides)
        totals[counter.key] = sum((Decimal(a) for (a,) in txn.execute(query)), Decimal(0))
    return totals


def charge(
    txn: Txn, *, task_id: str, call_row_id: int, amounts: Mapping[str, Decimal]
) -> dict[str, Decimal]:
    """Add this call's amounts to the task's counters (once per call and counter):
    the amounts charged now (a counter the call was charged already is left)."""
    name = txn.dialect.name
    charged: dict[str, Decimal] = {}
    for counter, amount in sorted(amounts.items()):
        done = txn.run(("quota_charge", name), lambda: _charge_statement(name), {
            "task_id": task_id, "call_row_id": call_row_id, "counter": counter,
            "amount": str(amount)})
        if done.rowcount == 1 if name == "sqlite" else bool(done.rows):
            charged[counter] = amount
    return charged


def refund(txn: Txn, call_row_id: int) -> dict[str, str]:
    """Delete the call's charges: what it was charged, per counter, as stored (the
    text its audit entry records), in the transaction of the arrow that gives them
    back, its task locked. A refund only lowers a usage: a decider of another task
    that read a scoped counter before the refund committed counted the charge once
    more than needed, never one too few, so no limit can be passed by a race."""
    rows = txn.execute(
        select(_CHARGES.c.counter, _CHARGES.c.amount).where(_CHARGES.c.call_row_id == call_row_id)
    ).all()
    if rows:
        txn.execute(delete(_CHARGES).where(_CHARGES.c.call_row_id == call_row_id))
    return {str(counter): str(amount) for counter, amount in sorted(rows)}


def charges_of(conn: Connection, task_id: str) -> dict[str, Decimal]:
    """Every counter of a task and its total, for operators."""
    totals: dict[str, Decimal] = {}
    rows = conn.execute(
        select(_CHARGES.c.counter, _CHARGES.c.amount).where(_CHARGES.c.task_id == task_id)
    )
    for counter, amount in rows:
        totals[counter] = totals.get(counter, Decimal(0)) + Decimal(amount)
    return totals

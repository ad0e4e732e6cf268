"""SQLite's fast backend: statements on the driver, a new call's arrows in its insert.

Its transactions are begun and ended on the driver of a connection kept between
transactions (``spares.begin_fast``), its statements run on the
driver's cursor (``fast.FastTxn``). A call decided in the transaction that records
it is inserted under the id SQLite itself would give it (``_free_id``: the write
lock is held since ``BEGIN IMMEDIATE``), as late as it can be, with the decision's
and the claim's arrows folded into that ``INSERT`` (``fast.Folded``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, bindparam, func, select

from agent_gate.ledger.backend.fast import FastTxn, Folded
from agent_gate.ledger.backend.prepared import Open, opened
from agent_gate.ledger.records import CALLS, CallRecord

__all__ = ["SqliteFastTxn"]


def _free_call_id() -> Select[Any]:
    c = CALLS.c
    task = bindparam("task_id", type_=c.task_id.type)
    call = bindparam("call_id", type_=c.call_id.type)
    key = bindparam("idem_key", type_=c.idem_key.type)
    return select(
        select(func.max(c.id)).scalar_subquery(),
        select(c.id).where(c.task_id == task, c.call_id == call).scalar_subquery(),
        select(c.id).where(c.task_id == task, c.idem_key == key).scalar_subquery(),
    )


class SqliteFastTxn(FastTxn):
    """A SQLite transaction of the fast backend."""

    __slots__ = ()

    def _may_fold(self, state: Open | None) -> bool:
        """Whether this intake may choose its row's id and fold its arrows into the
        insert: a transaction begun on the driver (the write lock held since its
        ``BEGIN IMMEDIATE``) that Core has not joined (a Core statement after the
        deferred insert would otherwise run first), on a SQLite that can return the
        row it inserts (3.35+: the folded ``INSERT`` is read back by its ``RETURNING``)."""
        return (
            state is not None and state.raw and not self.conn.in_transaction()
            and self.dialect.insert_returning
        )

    def _free_id(self, values: dict[str, Any]) -> tuple[int | None, int | None]:
        """``(free, seen)``: the id the call's row takes if inserted now, or the id of
        the row that recorded it before (under its call id, else its dedupe key).
        One statement, under the write lock: nobody else can insert before this
        transaction ends, and the free id is the one SQLite itself would give (the
        largest plus one; rows are never deleted)."""
        top, by_call, by_key = self.run("free_call_id", _free_call_id, {
            "task_id": values["task_id"], "call_id": values["call_id"],
            "idem_key": values["idem_key"],
        }).rows[0]
        seen = by_call if by_call is not None else by_key
        if seen is not None:
            return None, int(seen)
        return int(top or 0) + 1, None

    def insert_call(
        self, values: dict[str, Any], *, decided: bool
    ) -> tuple[CallRecord | None, bool]:
        state = opened(self.conn)
        if not decided or not self._may_fold(state):
            return super().insert_call(values, decided=decided)
        assert state is not None
        free, seen = self._free_id(values)
        if seen is not None:  # recorded before: read it, insert nothing
            return self.read_call(id=seen), False
        folded = Folded(self, state, {**values, "id": free})
        self.final = folded
        return folded.row(), True

"""What the two fast backends share: statements on the driver, arrows answered late
or written with the insert.

``FastTxn`` runs each statement compiled once per dialect on the driver's cursor
(``prepared``), and converts the rows it returns as Core would (``call_row``:
``driver_call_record``). On top of that, two steps of ``txn.Txn`` change:

* ``compare_and_set(..., unread=True)`` in a pipelined PostgreSQL transaction
  (``pg_pipeline``) only sends the update: it is expected to match one row (else the
  transaction rolls back before its ``COMMIT``, ``pg_pipeline.Unexpected``, a
  ``txn.Lost``), and its row is read after the commit (``Later``, ``committed``);
* a call's row inserted in this transaction and not sent yet (``Folded``: SQLite
  under its free id, PostgreSQL under a spare one) takes the arrows applied to it
  before anything else into its ``INSERT``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from sqlalchemy import BigInteger, Connection, bindparam, insert
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement

from agent_gate.ledger.backend.pg_pipeline import Pending
from agent_gate.ledger.backend.prepared import Open, Rows, prepare, result_processors
from agent_gate.ledger.cas import NO_GUARD, predicted, statement, stored_values
from agent_gate.ledger.records import (
    CALL_COLUMNS,
    CALLS,
    CallRecord,
    DbNowPlus,
    Guard,
    call_record,
)
from agent_gate.ledger.sql import db_now_ms
from agent_gate.ledger.txn import StatementResult, Txn

__all__ = ["FastTxn", "Folded", "Later", "driver_call_record"]

_PROCESSORS: dict[str, tuple[tuple[int, Callable[[Any], Any]], ...]] = {}


def driver_call_record(dialect: Dialect, values: Sequence[Any]) -> CallRecord:
    """``call_record`` for a row as the driver returned it: the columns whose type
    has a result processor for this dialect (SQLite's datetimes) are converted
    first, as Core would have."""
    processors = _PROCESSORS.get(dialect.name)
    if processors is None:
        processors = _PROCESSORS.setdefault(
            dialect.name,
            tuple(
                (i, process)
                for i, process in enumerate(result_processors(dialect, CALL_COLUMNS))
                if process is not None
            ),
        )
    row = list(values)
    if len(row) != len(CALL_COLUMNS):
        raise ValueError(f"a tool_calls row has {len(CALL_COLUMNS)} columns, not {len(row)}")
    for i, process in processors:
        value = row[i]
        if value is not None:
            row[i] = process(value)
    return call_record(row)


class Later:
    """The row a compare-and-set sent in a pipeline returns: read after the commit
    (the answer came with the round trip that carried it)."""

    __slots__ = ("dialect", "pending")

    def __init__(self, dialect: Dialect, pending: Pending | Rows | None) -> None:
        self.dialect = dialect
        self.pending = pending

    def record(self) -> CallRecord:
        pending = self.pending
        rows = pending.rows if pending is not None else None
        if not rows:  # pragma: no cover - the commit checked that it matched
            raise RuntimeError("a deferred compare-and-set returned no row")
        return driver_call_record(self.dialect, rows[0])


class Folded(Later):
    """A call's row inserted in a fast transaction, written as late as it can be.

    A call that is received, authorized and claimed in one transaction used to be an
    ``INSERT`` and two compare-and-set ``UPDATE`` statements on the row it had just
    written: three row versions, each writing every index of ``tool_calls``
    (``state`` is indexed, so PostgreSQL cannot update in place), and three
    statements to send. Nobody can see the row before the commit, so the arrows
    applied to it before anything else is sent are folded into the ``INSERT``
    instead (``FastTxn.compare_and_set``): one statement, one row version, the same
    row at the commit. Its audit events are appended as for any arrow. The
    ``INSERT`` goes out (``prepared.Open.defer``) before the next statement of any
    other kind (the audit append, a quota charge, a read, a Core statement, the
    ``COMMIT``), so it keeps its place in the transaction's order and the rows that
    refer to it find it.

    A plain ``INSERT`` (no ``ON CONFLICT``) under an id chosen beforehand (a spare id
    of PostgreSQL's sequence, ``pg_fast``; on SQLite the next one, the write lock
    held, the call checked new, ``sqlite_fast``): a call recorded before, or an id
    taken, fails it and everything after it.
    """

    __slots__ = ("txn", "values")

    def __init__(self, txn: FastTxn, state: Open, values: dict[str, Any]) -> None:
        super().__init__(txn.dialect, None)
        self.txn = txn
        self.values = values
        state.defer(self.send)

    def folds(self, rec: CallRecord, guard: Guard) -> bool:
        """Whether an arrow from ``rec`` may be folded in: the insert is not sent yet,
        and ``rec`` is the row it will write (no guard to check: nobody else can
        have touched a row that is not written yet)."""
        values = self.values
        return (
            self.pending is None
            and guard == NO_GUARD
            and rec.row_id == values["id"]
            and rec.state._value_ == values["state"]
            and rec.version == values["version"]
        )

    def row(self) -> CallRecord:
        """The row as it will be inserted, before any arrow is folded in."""
        values = self.values
        return call_record(tuple([values.get(c.name) for c in CALL_COLUMNS]))

    def send(self) -> None:
        """Send the ``INSERT`` with every arrow folded in (``Open.defer``)."""
        values = self.values
        keys = tuple(sorted(values))
        clocked = tuple([k for k in keys if isinstance(values[k], DbNowPlus)])

        def build() -> Any:
            c = CALLS.c
            row = {
                k: (
                    db_now_ms() + bindparam(k, type_=BigInteger())
                    if k in clocked
                    else bindparam(k, type_=c[k].type)
                )
                for k in keys
            }
            return insert(CALLS).values(row).returning(*CALL_COLUMNS)

        params = stored_values(values) if clocked else values
        self.pending = self.txn.run(("insert_folded", keys, clocked), build, params)  # type: ignore[assignment]


class FastTxn(Txn):
    """``txn.Txn`` with its statements on the driver (``prepared``)."""

    __slots__ = ("final",)

    def __init__(self, conn: Connection, *, staged: bool = True, guess: bool = True) -> None:
        super().__init__(conn, staged=staged, guess=guess)
        self.final: Later | None = None
        """The last arrow's row when it is read only after the commit (``committed``)."""

    def run(
        self, key: Hashable, build: Callable[[], ClauseElement], params: Mapping[str, Any]
    ) -> StatementResult:
        conn = self.conn
        return prepare(conn, key, build).run(conn, params)

    def call_row(self, values: Sequence[Any]) -> CallRecord:
        return driver_call_record(self.dialect, values)

    def compare_and_set(
        self, rec: CallRecord, values: Mapping[str, Any], guard: Guard, *, unread: bool = False
    ) -> tuple[int, CallRecord | None]:
        final = self.final
        if unread and isinstance(final, Folded) and final.folds(rec, guard):
            final.values.update(values)
            return 1, predicted(rec, values)
        key, build, params = statement(self.dialect, rec, values, guard)
        done = self.run(key, build, params)
        returning = self.dialect.update_returning
        if unread and isinstance(done, Pending) and returning:
            done.txn.expect(done, 1)
            self.final = Later(self.dialect, done)
            return 1, predicted(rec, values)
        self.final = None
        if not returning:
            return done.rowcount, None
        rows = done.rows
        return (len(rows), self.call_row(rows[0])) if rows else (0, None)

    def committed(self, rec: CallRecord) -> CallRecord:
        final = self.final
        return final.record() if final is not None else rec

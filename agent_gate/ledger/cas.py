"""The one compare-and-set builder, and the rows a pipelined transaction reads after
its commit.

Every change of a call's row the ledger makes to a row it saw goes through
``compare_and_set`` (``UPDATE tool_calls SET ... WHERE id=? AND state=? AND
version=?`` plus the guard); ``flows`` builds its arrows on it. In a pipelined
PostgreSQL transaction an update is sent without waiting, and the row it returns is
read after the commit (``Later``); a call's row inserted in the same transaction
and not sent yet takes the arrows into its ``INSERT`` instead (``Folded``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import BigInteger, Connection, bindparam, insert, update
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.elements import ColumnElement

from agent_gate.ledger.backend.dialect import db_now_ms
from agent_gate.ledger.backend.pg_pipeline import Pending
from agent_gate.ledger.backend.prepared import Open, Rows, prepare
from agent_gate.ledger.records import (
    CALL_COLUMNS,
    CALLS,
    CallRecord,
    DbNowPlus,
    Guard,
    driver_call_record,
    moved,
)
from agent_gate.ledger.states import CallState

__all__ = ["NO_GUARD", "Folded", "Later", "compare_and_set", "predicted"]

NO_GUARD = Guard()
"""The guard of an arrow that names only the row's state and version."""


def compare_and_set(
    conn: Connection,
    rec: CallRecord,
    values: Mapping[str, Any],
    guard: Guard,
    *,
    later: list[Later] | None = None,
) -> tuple[int, CallRecord | None]:
    """``UPDATE tool_calls SET values WHERE id, state, version (and guard)``.

    The one compare-and-set builder: every arrow and every column-only change of a
    row the caller saw at ``rec.state``/``rec.version`` goes through it. Returns the
    number of rows matched and, where the dialect can return them from the update
    (PostgreSQL; SQLite 3.35+), the row as updated: one statement fewer per
    transition. Compiled once per set of columns and guard (``prepared``). A
    ``DbNowPlus`` value is computed by the database.

    ``later``: in a pipelined transaction (``pipeline``) the update is only sent,
    not waited for: it is expected to match one row (else the transaction rolls
    back before its COMMIT, ``pipeline.Unexpected``), reported as matched, and its
    row is read after the commit (``Later``, appended to ``later``). Elsewhere
    ``later`` changes nothing. A row whose ``INSERT`` is still unsent (``Folded``)
    takes the values into that ``INSERT`` instead of an ``UPDATE``.
    """
    folded = later[-1] if later else None
    if isinstance(folded, Folded) and folded.folds(rec, guard):
        folded.values.update(values)
        later.append(folded)
        return 1, None
    returning = conn.dialect.update_returning
    # The columns in the caller's order: a call site always sets them in one order,
    # so this names one compiled statement per site without sorting on every call.
    keys = tuple(values)
    clocked = tuple([k for k, v in values.items() if isinstance(v, DbNowPlus)])
    owner_guard = guard.owner and guard.lease_owner is not None
    no_owner = guard.owner and guard.lease_owner is None
    shape = ("cas", keys, clocked, owner_guard, no_owner, guard.lease_expired, returning)

    def build() -> Any:
        c = CALLS.c
        where: list[ColumnElement[bool]] = [
            c.id == bindparam("w_id", type_=c.id.type),
            c.state == bindparam("w_state", type_=c.state.type),
            c.version == bindparam("w_version", type_=c.version.type),
        ]
        if owner_guard:
            where.append(c.lease_owner == bindparam("w_owner", type_=c.lease_owner.type))
        if no_owner:
            where.append(c.lease_owner.is_(None))
        if guard.lease_expired:
            where.append(c.lease_expires_ms < db_now_ms())
        sets: dict[str, Any] = {
            k: (
                db_now_ms() + bindparam(k, type_=BigInteger())
                if k in clocked
                else bindparam(k, type_=c[k].type)
            )
            for k in keys
        }
        stmt = update(CALLS).where(*where).values(sets)
        return stmt.returning(*CALL_COLUMNS) if returning else stmt

    params: dict[str, Any] = (
        {k: (v.ms if isinstance(v, DbNowPlus) else v) for k, v in values.items()}
        if clocked
        else dict(values)
    )
    params["w_id"] = rec.row_id
    params["w_state"] = rec.state._value_
    params["w_version"] = rec.version
    if owner_guard:
        params["w_owner"] = guard.lease_owner
    done = prepare(conn, shape, build).run(conn, params)
    if later is not None and isinstance(done, Pending) and returning:
        done.txn.expect(done, 1)
        later.append(Later(conn.dialect, done))
        return 1, None
    if not returning:
        return done.rowcount, None
    if not done.rows:
        return 0, None
    return len(done.rows), driver_call_record(conn.dialect, done.rows[0], done.processed)


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
        return driver_call_record(self.dialect, rows[0], pending.processed)


class Folded(Later):
    """A call's row inserted in a pipelined transaction, written as late as it can be.

    A call that is received, authorized and claimed in one transaction used to be an
    ``INSERT`` and two compare-and-set ``UPDATE`` statements on the row it had just written:
    three row versions, each writing every index of ``tool_calls`` (``state`` is
    indexed, so PostgreSQL cannot update in place), and three statements to send.
    Nobody can see the row before the commit, so the arrows applied to it before
    anything else is sent are folded into the ``INSERT`` instead
    (``compare_and_set``): one statement, one row version, the same row at the
    commit. Its audit events are appended as for any arrow. The ``INSERT`` goes out
    (``prepared.Open.defer``) before the next statement of any other kind (the audit
    append, a quota charge, a read, a Core statement, the ``COMMIT``), so it keeps
    its place in the transaction's order and the rows that refer to it find it.

    A plain ``INSERT`` (no ``ON CONFLICT``) under an id chosen beforehand (``intake``:
    a spare id of PostgreSQL's sequence; on SQLite the next one, the write lock
    held, the call checked new): a call recorded before, or an id taken, fails it and
    everything after it.
    """

    __slots__ = ("conn", "values")

    def __init__(self, conn: Connection, state: Open, values: dict[str, Any]) -> None:
        super().__init__(conn.dialect, None)
        self.conn = conn
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

    def send(self) -> None:
        """Send the ``INSERT`` with every arrow folded in (``PipelinedTxn.defer``)."""
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

        params = (
            {k: (v.ms if isinstance(v, DbNowPlus) else v) for k, v in values.items()}
            if clocked
            else values
        )
        self.pending = prepare(self.conn, ("insert_folded", keys, clocked), build).run(
            self.conn, params
        )


def predicted(rec: CallRecord, values: Mapping[str, Any]) -> CallRecord:
    """What a deferred arrow leaves of the row for the next arrow of the same
    transaction to name (its state, version and attempt); the row itself is read
    after the commit (``Later``)."""
    return moved(rec, CallState(values["state"]), values["version"],
                 values.get("attempt", rec.attempt))

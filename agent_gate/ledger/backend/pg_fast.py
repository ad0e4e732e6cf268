"""PostgreSQL's fast backend: a gate call in two round trips.

Its write transactions are pipelined (``pg_pipeline``, on connections kept between
transactions) and its statements go out on libpq (``_libpq``); ``fast.FastTxn``
sends an arrow nobody reads without waiting for it. Two more steps change here:

* ``insert_call``: a call is inserted under a row id this process holds spare
  (``SpareIds``, asked of the sequence in earlier intakes' round trips), with a
  plain ``INSERT`` sent as late as it can be, the decision's and the claim's arrows
  folded in (``fast.Folded``); its row is read with the answer to the ``COMMIT``. A
  call recorded before fails that insert, nothing of the transaction commits, and
  ``retry`` says so: the intake runs once more with nothing guessed (``ON CONFLICT
  DO NOTHING``, the insert's answer read before anything is decided).
* ``link_audit``: the audit link is computed by the server (revision 0007's
  ``agent_gate_audit_append``), so nothing waits for the chain head's answer.
"""

from __future__ import annotations

import os
from collections import deque
from contextlib import suppress
from typing import Any

from sqlalchemy import Connection, Engine, TextClause, exc, text

from agent_gate.ledger.backend.fast import FastTxn, Folded
from agent_gate.ledger.backend.pg_pipeline import PipelinedTxn
from agent_gate.ledger.backend.prepared import opened
from agent_gate.ledger.chain import GENESIS, entry_parts
from agent_gate.ledger.records import CallRecord
from agent_gate.ledger.txn import StatementResult

__all__ = ["SPARE_BATCH", "PgPipelineTxn", "SpareIds", "spare_ids"]

SPARE_BATCH = 16
"""How many row ids one intake asks the sequence for when this process is running
out (``SpareIds``): one statement per sixteen calls instead of one per call."""
_UNIQUE_VIOLATION = "23505"
_ROWS_PER_CALL = 64
"""Entries per call of the append function (as ``Txn.link_audit``'s inserts in the client)."""


def _next_call_ids() -> TextClause:
    # Not rolled back with the transaction: an id asked for is never handed twice.
    # In ascending order, each above every id handed before.
    return text(
        "SELECT nextval(pg_get_serial_sequence('tool_calls', 'id')) "
        f"FROM generate_series(1, {SPARE_BATCH}) ORDER BY 1"
    )


def _guess_failed(error: exc.IntegrityError) -> bool:
    """Whether ``error`` is a guessed-id ``INSERT``'s unique-key violation: the first
    error of its pipeline, so nothing after it ran."""
    return (
        getattr(error.orig, "sqlstate", None) == _UNIQUE_VIOLATION
        and (error.statement or "").startswith("INSERT INTO tool_calls ")
    )


class SpareIds:
    """Row ids the ``tool_calls`` sequence handed this process for its next calls.

    A call is inserted under one (``PgPipelineTxn.insert_call``), so that deciding
    and claiming it need not wait for the insert's answer: its ``RETURNING`` row
    comes with the ``COMMIT``'s answer, and one that inserted nothing (the call was
    recorded before) rolls the transaction back. A pipelined intake that finds fewer
    than two left asks the sequence for ``SPARE_BATCH`` more in its own round trip.
    Kept per process (a forked child must not reuse its parent's); ids a process
    never uses are gaps in the sequence, as a rolled-back insert's are.
    """

    __slots__ = ("ids", "pid")

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.ids: deque[int] = deque()


_SPARE_ATTR = "_agent_gate_spare_call_ids"


def spare_ids(engine: Engine) -> SpareIds:
    """``engine``'s spare row ids in this process."""
    spare: SpareIds | None = engine.__dict__.get(_SPARE_ATTR)
    if spare is None or spare.pid != os.getpid():
        spare = engine.__dict__[_SPARE_ATTR] = SpareIds()
    return spare


_APPEND_COLUMNS = (("at", "timestamptz"), ("task_id", "text"), ("call_row_id", "bigint"),
                   ("call_id", "text"), ("event", "text"), ("from_state", "text"),
                   ("to_state", "text"), ("actor", "text"), ("detail", "text"))
_APPEND_SQL: dict[int, str] = {}
"""Revision 0007's function called for ``n`` entries, by ``n``: each column an
``ARRAY[...]`` of one parameter per entry (the driver adapts a scalar several times
faster than a list), the task ids one ``text[]`` (a transaction may touch many)."""


def _append_sql(count: int) -> str:
    sql = _APPEND_SQL.get(count)
    if sql is None:
        arrays = [
            "ARRAY[" + ", ".join([f"%s::{kind}"] * count) + "]"
            for kind in [kind for _, kind in _APPEND_COLUMNS] + ["bytea", "bytea"]
        ]
        sql = _APPEND_SQL.setdefault(
            count, f"SELECT agent_gate_audit_append(%s::text[], %s::text, {', '.join(arrays)})"
        )
    return sql


def link_in_server(pipe: PipelinedTxn, entries: list[dict[str, Any]]) -> None:
    """``Txn.link_audit`` on a pipelined transaction, computed by the server: the head
    reads would otherwise be the one answer the transaction waits for before its
    ``COMMIT``. The client writes each entry's hashed text around its link
    (``chain.entry_parts``, encoded as ``entry_hash`` encodes it) and the task ids
    in lock order; the server locks the heads, splices each link in, hashes,
    inserts and moves the heads, in the order and with the locks ``Txn.link_audit``
    takes. Sent unanswered: it goes out with the ``COMMIT``.

    In chunks of ``_ROWS_PER_CALL`` entries, each naming every task of the
    transaction: the first chunk locks all of their heads, in order."""
    tasks = sorted({values["task_id"] for values in entries})
    for start in range(0, len(entries), _ROWS_PER_CALL):
        chunk = entries[start:start + _ROWS_PER_CALL]
        heads: list[bytes] = []
        tails: list[bytes] = []
        for values in chunk:
            head, tail = entry_parts(**values)
            heads.append(head.encode("utf-8", "surrogatepass"))
            tails.append(tail.encode("utf-8", "surrogatepass"))
        args: list[Any] = [tasks, GENESIS]
        for column, _ in _APPEND_COLUMNS:
            args += [values[column] for values in chunk]
        args += heads
        args += tails
        pipe.send(_append_sql(len(chunk)), args, fetch=False)


class PgPipelineTxn(FastTxn):
    """A PostgreSQL transaction of the fast backend (pipelined unless someone listens,
    ``pg_pipeline.usable``, or Core joined it)."""

    __slots__ = ("asked", "guessed", "intake", "plain_insert")

    def __init__(self, conn: Connection, *, staged: bool = True, guess: bool = True) -> None:
        super().__init__(conn, staged=staged, guess=guess)
        self.intake = False
        self.guessed = False
        self.plain_insert = False
        """A call inserted under the sequence's next id, above every spare one: a call
        inserted under a spare id after it would sort before it (``after_commit``)."""
        self.asked: StatementResult | None = None

    def _pipe(self) -> PipelinedTxn | None:
        state = opened(self.conn)
        return state.pipe if state is not None else None

    def insert_call(
        self, values: dict[str, Any], *, decided: bool
    ) -> tuple[CallRecord | None, bool]:
        self.intake = True
        state = opened(self.conn)
        # Asked now: a statement Core ran before (binding a task's principal) took
        # the transaction out of pipeline mode.
        if self.guess and state is not None and state.pipe is not None:
            row_id: int | None = None
            with suppress(IndexError):  # none left, or another thread took the last
                row_id = spare_ids(self.conn.engine).ids.popleft()
            if row_id is not None:
                self.guessed = True
                folded = Folded(self, state, {**values, "id": row_id})
                self.final = folded
                return folded.row(), True
        rec, inserted = super().insert_call(values, decided=decided)
        self.plain_insert = inserted
        return rec, inserted

    def link_audit(self, entries: list[dict[str, Any]], *, now: bool) -> None:
        pipe = self._pipe()
        if pipe is None:
            super().link_audit(entries, now=now)
            return
        link_in_server(pipe, entries)
        if now:
            pipe.wait()

    def finish(self) -> None:
        if self.intake and self.guess and self._pipe() is not None and len(
            spare_ids(self.conn.engine).ids
        ) < 2:
            # After the arrows (which it would stop folding into the insert): the
            # next calls' ids, above this one's (a process's calls keep their order
            # by id).
            self.asked = self.run("next_call_ids", _next_call_ids, {})
        super().finish()

    def after_commit(self) -> None:
        if not self.intake:
            return
        spare = spare_ids(self.conn.engine)
        if self.plain_insert:
            spare.ids.clear()
        if self.asked is not None:
            spare.ids.extend(int(row[0]) for row in self.asked.rows)

    def retry(self, error: BaseException) -> bool:
        return self.guessed and isinstance(error, exc.IntegrityError) and _guess_failed(error)

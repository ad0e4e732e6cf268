"""The one seam under the ledger's rules: ``Txn``, all a write flow may ask of one
transaction.

``flows``, ``intake``, ``approvals``, ``quota`` and the audit append are written
against this class alone: insert a call, compare-and-set an arrow, append an audit
entry, lock a task, read a call or the task's context, insert unless present, run a
statement. How the statements reach the database is a backend's
(``ledger.backend``, the one site that picks, as httpx's transports sit under one
``handle_request``): the plain-Core reference (``backend.core``), SQLite's
statements on the driver (``backend.sqlite_fast``) and PostgreSQL's pipeline
(``backend.pg_fast``). A backend provides the three primitives below (``run`` a
statement built once, ``execute`` an ad hoc Core one, ``call_row``: a returned
``tool_calls`` row as a record) and may do three steps its own way, keeping what
is promised here: ``insert_call``, ``compare_and_set`` and ``link_audit``. The
whole ledger suite runs over each backend (``tests/ledger/conftest.py``).

This module sits under the rules: it imports their vocabulary (records, the
compare-and-set builder ``cas``, the chain's hashes, ``ledger.sql``) and nothing of
the rules themselves nor of a backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from operator import itemgetter
from typing import Any, Protocol

from sqlalchemy import Connection, CursorResult, Table, bindparam, insert, select, update
from sqlalchemy.sql import ClauseElement, Executable

from agent_gate.ledger import cas
from agent_gate.ledger.chain import GENESIS, entry_hash
from agent_gate.ledger.models import AUDIT_EVENTS, AUDIT_HEADS
from agent_gate.ledger.records import CALLS, TASKS, CallRecord, Guard
from agent_gate.ledger.sql import for_update, insert_statement

__all__ = ["Lost", "StatementResult", "Txn"]


class Lost(Exception):
    """A compare-and-set the transaction counted on matched no row: it rolls back and
    nothing of it commits (the caller re-reads the row)."""


class StatementResult(Protocol):
    """What one statement returned: the rows it matched and the rows it fetched (a
    backend may answer them only when first read)."""

    @property
    def rowcount(self) -> int: ...

    @property
    def rows(self) -> list[tuple[Any, ...]]: ...


class Txn(ABC):
    """One open ledger transaction, as the rules see it."""

    __slots__ = ("audit_entries", "conn", "dialect", "guess")

    def __init__(self, conn: Connection, *, staged: bool = True, guess: bool = True) -> None:
        self.conn = conn
        """The transaction's connection: for the plain-Core read models (``pages``,
        ``details``) and for ``execute``; rules go through the methods."""
        self.dialect = conn.dialect
        self.audit_entries: list[dict[str, Any]] | None = [] if staged else None
        """Audit entries appended in this transaction, linked into their chains right
        before it commits (``finish``); None: each linked as it is appended."""
        self.guess = guess
        """Whether the backend may act on a guess that, when wrong, fails the whole
        transaction before anything of it commits (``retry``)."""

    # ------------------------------------------------------------ the primitives

    @abstractmethod
    def run(
        self, key: Hashable, build: Callable[[], ClauseElement], params: Mapping[str, Any]
    ) -> StatementResult:
        """Run the statement ``build()`` makes (built once per ``key``, which must name
        everything that shapes its SQL) with ``params``, in this transaction."""

    @abstractmethod
    def call_row(self, values: Sequence[Any]) -> CallRecord:
        """A ``tool_calls`` row ``run`` returned (every column, table order), as a record."""

    def execute(self, statement: Executable) -> CursorResult[Any]:
        """An ad hoc Core statement, off the per-call path."""
        return self.conn.execute(statement)

    # ------------------------------------------------- the steps a backend may vary

    def insert_call(
        self, values: dict[str, Any], *, decided: bool
    ) -> tuple[CallRecord | None, bool]:
        """Insert a ``received`` row unless its (task, call id) or key is recorded:
        the row and True, or the row that holds it (None: look it up) and False.
        ``decided``: arrows on the new row follow before anything else (a backend
        may write them with the insert, ``compare_and_set``)."""
        if self.dialect.insert_returning:
            done = self._insert(CALLS, values, returning=True)
            return (self.call_row(done.rows[0]), True) if done.rows else (None, False)
        return None, self.insert_ignore(CALLS, values)

    def compare_and_set(
        self, rec: CallRecord, values: Mapping[str, Any], guard: Guard, *, unread: bool = False
    ) -> tuple[int, CallRecord | None]:
        """``UPDATE tool_calls SET values WHERE id, state, version (and guard)``: the rows
        matched, and the row as updated where the dialect returns it (None: read it).

        ``unread``: nothing in this transaction reads what the update matched; a
        backend may answer it only at the commit. It then reports one row matched and
        the row's next state, version and attempt (``cas.predicted``); one that
        matched nothing raises ``Lost`` where the transaction ends, and ``committed``
        gives the row as stored."""
        key, build, params = cas.statement(self.dialect, rec, values, guard)
        done = self.run(key, build, params)
        if not self.dialect.update_returning:
            return done.rowcount, None
        rows = done.rows
        return (len(rows), self.call_row(rows[0])) if rows else (0, None)

    def link_audit(self, entries: list[dict[str, Any]], *, now: bool) -> None:
        """Link entries into their tasks' hash chains (``audit``): ``now``, linked before
        this returns (the heads locked), not only sent.

        The reference links in the client, in three statements: each task's head
        read ``FOR UPDATE`` (in task id order, so that two transactions touching the
        same tasks cannot deadlock), one multi-row ``INSERT`` of the entries, one
        ``UPDATE`` of each head. A task's first entry finds no head row; it inserts
        one (seq 0, genesis) unless a racing writer did, and reads it again under
        the lock."""
        heads = {task: self._lock_head(task)
                 for task in sorted({values["task_id"] for values in entries})}
        for values in entries:  # each dict is append's own: completed in place
            task = values["task_id"]
            seq, prev = heads[task]
            seq += 1
            digest = entry_hash(seq=seq, prev_hash=prev, **values)
            values["seq"], values["prev_hash"], values["hash"] = seq, prev, digest
            heads[task] = (seq, digest)
        for start in range(0, len(entries), _ROWS_PER_INSERT):
            chunk = entries[start:start + _ROWS_PER_INSERT]
            count = len(chunk)
            params: dict[str, Any] = {}
            for i, values in enumerate(chunk):
                params.update(zip(_entry_keys(i), _ENTRY_VALUES(values), strict=True))
            self.run(("audit_insert", count), lambda count=count: _insert_rows(count), params)
        for task, (seq, digest) in heads.items():
            self.run("audit_move_head", _move_head,
                     {"head_task": task, "seq": seq, "hash": digest})

    def _lock_head(self, task_id: str) -> tuple[int, str]:
        """The task's newest link, locked until the transaction ends."""
        dialect = self.dialect

        def read() -> list[Any]:
            return self.run("audit_head", lambda: for_update(
                dialect,
                select(AUDIT_HEADS.c.seq, AUDIT_HEADS.c.hash).where(
                    AUDIT_HEADS.c.task_id == bindparam("task_id", type_=AUDIT_HEADS.c.task_id.type)
                ),
            ), {"task_id": task_id}).rows

        head = read()
        if head:
            return int(head[0][0]), str(head[0][1])
        # The task's first entry. The row inserted here is this transaction's until it
        # commits (a racing writer waits on its key); if a racing writer inserted it
        # first, read theirs, committed by then, under the lock.
        if self.insert_ignore(AUDIT_HEADS, {"task_id": task_id, "seq": 0, "hash": GENESIS}):
            return 0, GENESIS
        head = read()
        return int(head[0][0]), str(head[0][1])

    def committed(self, rec: CallRecord) -> CallRecord:
        """After the commit: the row the transaction's last arrow left (``rec``, unless
        the backend answered that arrow only at the commit)."""
        return rec

    def retry(self, error: BaseException) -> bool:
        """Whether the transaction failed with ``error`` because of a guess of the
        backend's own, with nothing of it committed: run it once more with
        ``guess=False`` (``backend.transact``). The reference never guesses."""
        return False

    def after_commit(self) -> None:
        """Right after the commit: the backend's own bookkeeping, if any."""
        return None

    def finish(self) -> None:
        """Right before the commit: link the staged audit entries (the heads are the
        last locks a transaction takes)."""
        entries = self.audit_entries
        if entries:
            self.audit_entries = []
            self.link_audit(entries, now=False)

    # ------------------------------------------------------------ what rules ask

    def append_audit(self, values: dict[str, Any]) -> None:
        """One audit entry (``audit.append`` builds it), linked before the commit."""
        if self.audit_entries is not None:
            self.audit_entries.append(values)
        else:
            self.link_audit([values], now=True)

    def insert_ignore(self, table: Table, values: Mapping[str, Any]) -> bool:
        """Insert a row unless a unique constraint holds one already; True if inserted."""
        done = self._insert(table, values, returning=False)
        return done.rowcount == 1 if self.dialect.name == "sqlite" else bool(done.rows)

    def _insert(
        self, table: Table, values: Mapping[str, Any], *, returning: bool
    ) -> StatementResult:
        keys = tuple(sorted(values))
        name = self.dialect.name
        return self.run(
            ("insert_returning" if returning else "insert_ignore", table.name, keys),
            lambda: insert_statement(name, table, keys, returning=returning),
            values,
        )

    def lock_task(self, task_id: str) -> None:
        """Serialize the writers of one task until the transaction ends: deciding a
        call reads the task's usage and charges it, atomic per task on every backend."""
        dialect = self.dialect
        self.run(
            "lock_task",
            lambda: for_update(dialect, select(TASKS.c.id).where(TASKS.c.id == bindparam("id"))),
            {"id": task_id},
        )

    def read_call(self, **where: Any) -> CallRecord | None:
        """The row whose columns equal ``where`` (a unique key)."""
        keys = tuple(sorted(where))

        def build() -> Any:
            return select(*CALLS.c).where(
                *[CALLS.c[k] == bindparam(k, type_=CALLS.c[k].type) for k in keys]
            )

        rows = self.run(("call_by", keys), build, where).rows
        return self.call_row(rows[0]) if rows else None

    def task_context(self, task_id: str, *, lock: bool = False) -> tuple[str | None, str | None]:
        """The principal and scope JSON stored on the task (None, None: no such task,
        or neither was given); ``lock``: the row locked until the transaction ends."""
        dialect = self.dialect

        def build() -> Any:
            stmt = select(TASKS.c.principal, TASKS.c.scope).where(TASKS.c.id == bindparam("id"))
            return for_update(dialect, stmt) if lock else stmt

        rows = self.run(("task_context", lock), build, {"id": task_id}).rows
        if not rows:
            return None, None
        principal, scope = rows[0]
        return principal, scope


_ROWS_PER_INSERT = 64
"""Entries per ``INSERT`` (a call's transaction writes one to four): 768 parameters,
under every SQLite build's limit, and one statement per transaction in practice."""
_ENTRY_COLUMNS = ("at", "task_id", "call_row_id", "call_id", "event", "from_state",
                  "to_state", "actor", "detail", "seq", "prev_hash", "hash")
_ENTRY_VALUES = itemgetter(*_ENTRY_COLUMNS)
_ENTRY_KEYS: dict[int, tuple[str, ...]] = {}
"""Per position ``i`` in an ``INSERT``, its parameters' names (``column_i``), made once."""


def _entry_keys(i: int) -> tuple[str, ...]:
    keys = _ENTRY_KEYS.get(i)
    if keys is None:
        keys = _ENTRY_KEYS.setdefault(i, tuple(f"{k}_{i}" for k in _ENTRY_COLUMNS))
    return keys


def _insert_rows(count: int) -> Any:
    """One ``INSERT`` of ``count`` entries (parameters ``column_i``): a transaction's
    entries in one statement, in order, so their ids follow their chain order."""
    return insert(AUDIT_EVENTS).values([
        {k: bindparam(f"{k}_{i}", type_=AUDIT_EVENTS.c[k].type) for k in _ENTRY_COLUMNS}
        for i in range(count)
    ])


def _move_head() -> Any:
    heads = AUDIT_HEADS
    return (
        update(heads)
        # Not "task_id": Core reserves a column's name for the SET clause of an UPDATE.
        .where(heads.c.task_id == bindparam("head_task", type_=heads.c.task_id.type))
        .values(seq=bindparam("seq", type_=heads.c.seq.type),
                hash=bindparam("hash", type_=heads.c.hash.type))
    )

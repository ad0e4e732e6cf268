"""The one seam under the ledger's rules: ``Txn``, all a write flow may ask of one
transaction.

``flows``, ``intake``, ``approvals``, ``quota`` and the audit append are written
against this class alone: insert a call, compare-and-set an arrow, append an audit
entry, lock a task, read a call or the task's context, read usage, charge, give or
consume an approval. How the statements reach the database is a backend's
(``ledger.backend``, the one site that picks, as httpx's transports sit under one
``handle_request``): the plain-Core reference (``backend.core``), SQLite's
statements on the driver (``backend.sqlite_fast``) and PostgreSQL's pipeline
(``backend.pg_fast``). A backend provides the three primitives below (``run`` a
statement built once, ``execute`` an ad hoc Core one, ``call_row``: a returned
``tool_calls`` row as a record) and may do three steps its own way, keeping what is
promised here: ``insert_call``, ``compare_and_set`` and ``link_audit``. The whole
ledger suite runs over each backend (``tests/ledger/conftest.py``).

``LedgerTxn`` is the narrower view a decision gets inside the transaction that
applies it (``Ledger.authorize``, ``claim_approved``, ``claim_rechecked``, ``record``
with ``decide``): the task is locked, so the usage it reads cannot change before the
charge commits; ``Ledger.reading()`` gives one over a read-only snapshot, for a
decision that is only shown.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Protocol

from sqlalchemy import Connection, CursorResult, Table, bindparam, select
from sqlalchemy.sql import ClauseElement, Executable

from agent_gate.ledger import approvals, audit, cas, quota
from agent_gate.ledger.approvals import ApprovalRecord
from agent_gate.ledger.backend.dialect import for_update, insert_statement
from agent_gate.ledger.records import CALLS, TASKS, CallRecord, Guard

__all__ = ["LedgerTxn", "Lost", "StatementResult", "Txn"]


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
        this returns (the heads locked), not only sent."""
        audit.link(self, entries)

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

    def earlier_calls(self, task_id: str, tool: str, before: int) -> list[CallRecord]:
        """The task's calls of ``tool`` recorded before row ``before``, oldest first
        (a policy's sequence rules: ``after``, ``not_after``, ``prior``)."""

        def build() -> Any:
            return select(*CALLS.c).where(
                CALLS.c.task_id == bindparam("task"), CALLS.c.tool == bindparam("tool"),
                CALLS.c.id < bindparam("before"),
            )

        rows = self.run("earlier_calls", build,
                        {"task": task_id, "tool": tool, "before": before}).rows
        return sorted((self.call_row(row) for row in rows), key=lambda r: r.row_id)

    def audited_state(self, task_id: str, call_row_id: int) -> str | None:
        """The state the call's newest transition entry moved it to (``audit``)."""
        return audit.audited_state(self, task_id, call_row_id)

    def usage(
        self, task_id: str, counters: Iterable[str], *, besides: int | None = None
    ) -> dict[str, Decimal]:
        """What the task has used of each counter (``quota.usage``)."""
        return quota.usage(self, task_id, counters, besides=besides)

    def scoped_usage(
        self, task_id: str, principal: str | None, counters: Iterable[quota.ScopedCounter],
        *, besides: int | None = None,
    ) -> dict[str, Decimal]:
        """Counters summed per principal, over every task or in a window, each read
        under a lock of its scope (``quota.scoped_usage``)."""
        return quota.scoped_usage(self, task_id, principal, counters, besides=besides)

    def charge(
        self, task_id: str, call_row_id: int, amounts: Mapping[str, Decimal]
    ) -> dict[str, Decimal]:
        """Charge the call's amounts to the task's counters (``quota.charge``): those
        charged now."""
        return quota.charge(self, task_id=task_id, call_row_id=call_row_id, amounts=amounts)

    def refund(self, call_row_id: int) -> dict[str, str]:
        """Give the call's charges back (``quota.refund``): what they were."""
        return quota.refund(self, call_row_id)

    def latest_approval(self, call_row_id: int) -> ApprovalRecord | None:
        """The newest approval or denial given for the call row."""
        return approvals.latest(self, call_row_id)

    def consume_approval(self, approval_id: int, attempt: int) -> bool:
        """Mark the approval used by ``attempt``; False if someone used it first."""
        return approvals.consume(self, approval_id, attempt)


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
        return self._txn.usage(task_id, counters, besides=besides)

    def earlier_calls(self, task_id: str, tool: str, before: int) -> list[CallRecord]:
        """The task's calls of ``tool`` recorded before row ``before``, oldest first."""
        return self._txn.earlier_calls(task_id, tool, before)

    def scoped_usage(
        self, task_id: str, principal: str | None, counters: Iterable[quota.ScopedCounter],
        *, besides: int | None = None,
    ) -> dict[str, Decimal]:
        """Counters summed per principal, over every task or in a window, each under a
        lock of its scope, so deciders of different tasks take turns on it."""
        return self._txn.scoped_usage(task_id, principal, counters, besides=besides)

    def latest_approval(self, row_id: int) -> ApprovalRecord | None:
        """The newest approval or denial given for the call row."""
        return self._txn.latest_approval(row_id)

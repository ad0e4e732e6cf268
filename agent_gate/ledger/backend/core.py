"""The reference backend: plain SQLAlchemy Core, every statement through
``Connection.execute`` in a transaction begun by ``Connection.begin()``.

As DBOS writes its steps (``with engine.begin() as c: c.execute(...)``): each
statement is built once per key and run with Core's own bind and result processing,
nothing is deferred or folded, the audit chain is linked by three statements in the
client. It uses no SQLAlchemy internals and no driver-level features; the fast
backends (``sqlite_fast``, ``pg_fast``) must behave as this one does, which the
ledger suite checks by running over all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy.sql import ClauseElement

from agent_gate.ledger.records import CallRecord, call_record
from agent_gate.ledger.txn import Txn

__all__ = ["CoreTxn"]

_BUILT = "_agent_gate_core_statements"
"""Where a dialect keeps the statements this backend built, by key."""


class _Done(NamedTuple):
    rowcount: int
    rows: list[tuple[Any, ...]]


class CoreTxn(Txn):
    """A ledger transaction in plain Core."""

    __slots__ = ()

    def run(
        self, key: Hashable, build: Callable[[], ClauseElement], params: Mapping[str, Any]
    ) -> _Done:
        built: dict[Hashable, ClauseElement] = self.dialect.__dict__.setdefault(_BUILT, {})
        statement = built.get(key)
        if statement is None:
            statement = built.setdefault(key, build())
        result = self.conn.execute(statement, dict(params))  # type: ignore[call-overload]
        rows = [tuple(row) for row in result] if result.returns_rows else []
        return _Done(result.rowcount, rows)

    def call_row(self, values: Sequence[Any]) -> CallRecord:
        return call_record(values)

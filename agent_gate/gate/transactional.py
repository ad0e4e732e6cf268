"""Tools whose writes live in the ledger's own database (``transactional=True``): the
one case where exactly once is honest.

Such a tool runs inside the transaction that commits its outcome and writes through
the connection ``current_transaction()`` gives it (the ledger's own: same SQLite
file or PostgreSQL database). Its writes and the call's ``succeeded`` commit together,
or neither does: a worker killed before the commit leaves the call ``executing`` with
nothing written, and the next gate to see it (the same call again, ``recover``,
``resume``) knows that: the call goes to ``in_doubt`` and straight back to
``authorized``, and runs once more. A tool that raises rolls its writes back and the
call is recorded ``failed``.

The limits, which the docs repeat: the same database only (another database's
commit is not this one's), no side effects outside it inside the tool (a mail sent
from it is sent on every attempt), no timeout (a transaction cannot be left running),
a sync function, and nothing that waits on a second connection to the ledger while
the transaction holds SQLite's write lock. The lease is not renewed while it runs: a
tool slower than ``lease_seconds`` can lose its call to ``in_doubt``, and its
transaction then rolls back whole, writes included.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from agent_gate.errors import GateUsageError
from agent_gate.gate.runner import _current
from agent_gate.ledger.records import TxnConnection
from agent_gate.tools import CallInfo

__all__ = ["current_transaction", "running_in"]

_connection: contextvars.ContextVar[TxnConnection | None] = contextvars.ContextVar(
    "agent_gate_transaction", default=None
)


def current_transaction() -> TxnConnection:
    """The connection of the transaction that will commit the running tool's outcome."""
    conn = _connection.get()
    if conn is None:
        raise GateUsageError(
            "current_transaction() is only available inside a transactional tool run by the gate"
        )
    return conn


@contextmanager
def running_in(conn: TxnConnection, info: CallInfo) -> Iterator[None]:
    """Within this block the tool sees ``conn`` and its call (``current_call``)."""
    token, call = _connection.set(conn), _current.set(info)
    try:
        yield
    finally:
        _current.reset(call)
        _connection.reset(token)

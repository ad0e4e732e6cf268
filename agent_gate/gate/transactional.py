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

``joining(conn)``: the transaction is not the ledger's but one a caller holds on the
ledger's database (a DBOS datasource transaction, which records its step's output in
it): the tool's writes and the outcome go into it through a savepoint, and commit when
the caller commits, with whatever the caller wrote there.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from agent_gate.errors import GateUsageError
from agent_gate.gate.runner import serving
from agent_gate.ledger.records import TxnConnection
from agent_gate.tools import CallInfo

__all__ = ["current_transaction", "joined_transaction", "joining", "running_in"]

_connection: contextvars.ContextVar[TxnConnection | None] = contextvars.ContextVar(
    "agent_gate_transaction", default=None
)

_joined: contextvars.ContextVar[TxnConnection | None] = contextvars.ContextVar(
    "agent_gate_joined_transaction", default=None
)


def joined_transaction() -> TxnConnection | None:
    """The caller's transaction a transactional tool's outcome commits in, if any."""
    return _joined.get()


@contextmanager
def joining(conn: TxnConnection) -> Iterator[None]:
    """Within this block a transactional tool run by the gate (in this thread, or a
    task copying this context) writes, with its outcome, in ``conn``'s transaction,
    which the caller commits: it must be on the ledger's own database."""
    token = _joined.set(conn)
    try:
        yield
    finally:
        _joined.reset(token)


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
    token = _connection.set(conn)
    try:
        with serving(info):
            yield
    finally:
        _connection.reset(token)

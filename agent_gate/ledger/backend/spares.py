"""Connections an engine keeps checked out between transactions, ready for the next.

Checking a connection out of the pool, wrapping it in a ``Connection``, setting its
options and checking it back in costs about 60 us of CPU per transaction, three
times some transactions themselves, and a gate call runs two or three of them. So
SQLite's are reused (a local file has no server that could drop an idle session),
and so are PostgreSQL's for pipelined writes, each checked before use as the pool's
checkout would (``dialect._kept_write``). ``dialect`` decides when; this module
holds them.

A forked child (a prefork server, ``multiprocessing`` with ``fork``) inherits the
parent's pool and kept connections, whose sockets are the parent's sessions: the
child must never talk on them, nor close them (a PostgreSQL close is a
``Terminate`` message that ends the parent's session, mid-transaction perhaps, and
a call the parent had claimed in it would then settle in doubt). So every ledger's
engine is remembered (``forget_in_children``), and in a child, before anything runs
there, its pool is dropped untouched (``Engine.dispose(close=False)``, as SQLAlchemy
advises) and its kept connections are put away, their sockets pointed at
``/dev/null`` in the child (``_sever``): whatever the child's collector or a
finalizer does to them says goodbye to nothing. The child opens its own.
"""

from __future__ import annotations

import os
import weakref
from contextlib import suppress

from sqlalchemy import Connection, Engine

__all__ = ["SPARE_MAX", "Spares", "forget_in_children", "release_idle", "spares_of"]

SPARE_MAX = 4
"""Connections an engine keeps checked out between transactions, per kind."""


class Spares:
    """An engine's idle ``Connection`` objects, by kind (write, read).

    A transaction pops an idle one, or opens one, and puts it back after (at most
    ``SPARE_MAX`` of each kind). They belong to the pool they came from and the
    process that opened them: after ``engine.dispose()`` (a new pool) or in a forked
    child they are not used again (``spares_of``).
    """

    __slots__ = ("pid", "pool", "read", "write")

    def __init__(self, engine: Engine) -> None:
        self.pool = engine.pool
        self.pid = os.getpid()
        self.write: list[Connection] = []
        self.read: list[Connection] = []

    def close(self) -> None:
        for idle in (self.write, self.read):
            while True:
                try:  # not "while idle": another thread may take the last one in between
                    conn = idle.pop()
                except IndexError:
                    break
                conn.close()


# Kept on the engine itself, not in a weak mapping keyed by it: the connections
# refer to their engine, so such a mapping would keep every engine alive; as an
# attribute, an engine nobody closed is collected with its idle connections.
_SPARES_ATTR = "_agent_gate_idle_connections"


def release_idle(engine: Engine) -> None:
    """Close the connections ``engine`` keeps between transactions (before dispose)."""
    spares: Spares | None = engine.__dict__.pop(_SPARES_ATTR, None)
    if spares is not None and spares.pid == os.getpid():
        spares.close()


def spares_of(engine: Engine) -> Spares:
    """``engine``'s idle connections, a new set when its pool or the process changed."""
    spares: Spares | None = engine.__dict__.get(_SPARES_ATTR)
    if spares is None or spares.pool is not engine.pool or spares.pid != os.getpid():
        if spares is not None and spares.pid == os.getpid():
            spares.close()  # the engine was disposed: these belong to the old pool
        spares = Spares(engine)
        engine.__dict__[_SPARES_ATTR] = spares
    return spares


_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()
"""Every ledger's engine in this process (``forget_in_children``)."""
_INHERITED: list[Spares] = []
"""A forked child's copies of its parent's kept connections: held until the child
exits, so that no finalizer runs on them while it lives."""


def forget_in_children(engine: Engine) -> None:
    """In a process forked from this one, ``engine`` starts with a pool of its own."""
    _ENGINES.add(engine)


def _sever(conn: Connection) -> None:
    """Point this process's copy of a PostgreSQL connection's socket at ``/dev/null``
    (the parent's file descriptor is its own, untouched). A SQLite connection has no
    session to end: it is only never used or closed here."""
    with suppress(Exception):  # invalidated, closed, not PostgreSQL: nothing to sever
        pgconn = getattr(conn.connection.driver_connection, "pgconn", None)
        if pgconn is None:
            return
        fd = pgconn.socket
        null = os.open(os.devnull, os.O_RDWR)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)


def _in_forked_child() -> None:
    for engine in list(_ENGINES):
        spares: Spares | None = engine.__dict__.pop(_SPARES_ATTR, None)
        if spares is not None:
            for conn in (*spares.write, *spares.read):
                _sever(conn)
            _INHERITED.append(spares)
        engine.dispose(close=False)


if hasattr(os, "register_at_fork"):  # POSIX: Windows has no fork
    os.register_at_fork(after_in_child=_in_forked_child)

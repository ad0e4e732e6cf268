"""Connections an engine keeps checked out between transactions, and how a fast
backend begins its transactions on them.

Checking a connection out of the pool, wrapping it in a ``Connection``, setting its
options and checking it back in costs about 60 us of CPU per transaction, three
times some transactions themselves, and a gate call runs two or three of them. So
SQLite's are reused (a local file has no server that could drop an idle session),
and so are PostgreSQL's for pipelined writes, each checked before use as the pool's
checkout would (``_kept_write``). ``begin_fast`` is how the fast backends begin
every transaction (``backend.begin_write``/``begin_read`` pick it): SQLite's on a kept
connection, begun and ended on the driver unless someone listens
(``_sqlite_transaction``); PostgreSQL's writes pipelined on a kept connection; the
rest on a pooled connection, begun by Core with their statements tracked
(``prepared.tracked``).

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
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any

from sqlalchemy import Connection, Engine

from agent_gate.ledger.backend._sa_private import transaction_watched
from agent_gate.ledger.backend.dialect import OWN_BEGIN_ATTR, WRITE_OPTION, pooled
from agent_gate.ledger.backend.prepared import driver_error, track, tracked, untrack
from agent_gate.ledger.ledger_file import check_file

__all__ = ["SPARE_MAX", "Spares", "begin_fast", "forget_in_children", "release_idle", "spares_of"]

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


def begin_fast(
    engine: Engine, *, write: bool, reuse: bool = True
) -> AbstractContextManager[Connection]:
    """A fast backend's transaction on ``engine``: SQLite's on a kept connection,
    PostgreSQL's writes pipelined on one; ``reuse=False`` (for callers such as
    Alembic that keep references to the connection) and PostgreSQL's reads on a
    pooled connection of their own, begun by Core, their statements tracked."""
    if reuse and engine.dialect.name == "sqlite":
        return _sqlite_transaction(engine, write=write)
    if reuse and write and engine.dialect.name == "postgresql":
        return _kept_write(engine)
    return pooled(engine, write=write, begin=tracked)


@contextmanager
def _kept_write(engine: Engine) -> Iterator[Connection]:
    """A PostgreSQL write transaction, pipelined (``pipeline``) on a connection kept
    between transactions (``Spares``): checking one out of the pool and back in
    cost about 70 us of CPU per transaction, two per gate call. A kept connection
    is checked before each use as the pool's checkout would check it
    (``pipeline.alive``: no round trip); one the server dropped is let go."""
    from agent_gate.ledger.backend import pg_pipeline as pipeline

    spares = spares_of(engine)
    idle = spares.write
    conn: Connection | None = None
    while conn is None:
        try:  # not "while idle": another thread may take the last one in between
            conn = idle.pop()
        except IndexError:
            break
        if conn.invalidated or not pipeline.alive(conn.connection.driver_connection):
            with suppress(Exception):  # already gone: nothing to say goodbye to
                conn.invalidate()
                conn.close()
            conn = None
    if conn is None:
        conn = engine.connect()
    try:
        if pipeline.usable(conn):
            with pipeline.transaction(conn):
                yield conn
        else:  # someone listens: Core runs the transaction, as they expect
            conn = conn.execution_options(**{WRITE_OPTION: True})
            with tracked(conn):
                yield conn
    finally:
        if conn.invalidated or conn.closed or conn.in_transaction() or len(idle) >= SPARE_MAX:
            conn.close()
        else:
            idle.append(conn)


def _core_needed(conn: Connection) -> bool:
    """Whether a transaction on ``conn`` must go through Core's begin and commit.

    Yes when anyone but this module listens for the connection's begin, commit or
    rollback, for its statements or its errors, or the engine echoes: they must see
    the transaction as they always did. Also when the engine is not one
    ``create_ledger_engine`` made for SQLite (its ``begin`` hook is missing).
    """
    own = conn.engine.__dict__.get(OWN_BEGIN_ATTR)
    return own is None or transaction_watched(conn, own)


@contextmanager
def _sqlite_transaction(engine: Engine, *, write: bool) -> Iterator[Connection]:
    spares = spares_of(engine)
    idle = spares.write if write else spares.read
    try:
        conn = idle.pop()
    except IndexError:
        conn = engine.connect()
        if write:
            conn = conn.execution_options(**{WRITE_OPTION: True})
    try:
        if conn.in_transaction() or _core_needed(conn):
            with tracked(conn):
                yield conn
        else:
            # Nobody listens: begin and end the transaction on the driver, as Core's
            # conn.begin() would (its bookkeeping costs about 10 us of CPU per
            # transaction, three per gate call). The SQL is the same (BEGIN IMMEDIATE
            # or BEGIN, commit, rollback) and a driver error is raised as the
            # DBAPIError Core raises. A statement run through Core inside
            # (conn.execute) joins this transaction (_on_begin adopts it), which is
            # then committed or rolled back through Core.
            state = track(conn, watched=False)  # _core_needed asked what statements_watched asks
            try:
                check_file(engine)
                driver: Any = conn.connection.driver_connection
                error_class = conn.dialect.loaded_dbapi.Error
                sql = "BEGIN IMMEDIATE" if write else "BEGIN"
                try:
                    driver.execute(sql)
                except error_class as error:
                    raise driver_error(conn, error, sql, (), None) from error
                state.raw = True
                try:
                    yield conn
                    state.undefer()
                except BaseException:
                    _driver_rollback(conn, driver, error_class)
                    raise
                if conn.in_transaction():
                    conn.commit()
                else:
                    try:
                        driver.commit()
                    except error_class as error:
                        with suppress(error_class):  # gone bad: the error below says so
                            driver.rollback()
                        raise driver_error(conn, error, None, None, None) from error
            finally:
                untrack(conn, state)
    finally:
        if conn.invalidated or conn.closed or len(idle) >= SPARE_MAX:
            conn.close()
        else:
            idle.append(conn)


def _driver_rollback(conn: Connection, driver: Any, error_class: type[Exception]) -> None:
    """Roll back a transaction begun on the driver (through Core if Core joined it)."""
    if conn.in_transaction():
        conn.rollback()
        return
    try:
        driver.rollback()
    except error_class as error:  # pragma: no cover - a connection gone bad
        if not conn.invalidated:
            conn.invalidate(error)

"""Every use of a SQLAlchemy attribute that is not public API, in one module.

The ledger's fast path (``prepared``, the kept SQLite connections in ``dialect``)
skips Core's per-statement and per-transaction bookkeeping, which is only safe
while nobody could notice: no event listener on the connection, no echo. Asking
that cheaply needs SQLAlchemy internals, and so does one shortcut in writing
SQLite datetimes. They are all here, each behind a function, and ``problems()``
checks on a throwaway in-memory engine that each one still exists and means what
it meant: ``tests/ledger/backend/test_sa_private.py`` fails with the list when a
SQLAlchemy upgrade breaks one (the reference Core path, ``backend.CORE``, uses
none of them).

Relied on (SQLAlchemy 2.0 and 2.1):

* ``Connection._has_events``: False when no listener was added to the connection
  itself, only to its engine (Core asks the same before each event).
* ``conn.dispatch`` / ``engine.dispatch`` / ``dialect.dispatch``: the listener
  collections (``begin``, ``commit``, ``rollback``, ``before_cursor_execute``,
  ``after_cursor_execute``, ``handle_error``), whose truth and membership say who
  listens.
* ``sqlite.DATETIME._storage_format``: the ``%``-format SQLite datetimes are
  written with (``prepared.bind_processor`` writes the same text faster).

Worked around (``begin_listener``): ``Connection._begin_impl`` sets its private
``__in_begin`` flag before dispatching ``begin`` and clears it only around the
driver's BEGIN, so a ``begin`` listener that raises leaves it set, and that
Connection never autobegins again. Harmless should SQLAlchemy stop doing so: the
wrapper only drops a connection whose transaction failed to begin.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.dialects import sqlite

__all__ = [
    "begin_listener",
    "cursor_watched",
    "problems",
    "storage_format",
    "transaction_watched",
]


def cursor_watched(conn: Connection) -> bool:
    """Whether anyone listens for ``conn``'s cursor executions, or the engine echoes."""
    dispatch = conn.dispatch
    return bool(
        dispatch.before_cursor_execute or dispatch.after_cursor_execute or conn.engine.echo
    )


def transaction_watched(conn: Connection, own_begin: Any) -> bool:
    """Whether anyone but ``own_begin`` (the ledger's own ``begin`` listener) listens
    for ``conn``'s transactions, statements or errors, or the engine echoes."""
    # A Connection nobody listened on directly has only its engine's listeners
    # (Core marks one that has its own with ``_has_events``): the engine's
    # collections answer for half the cost of the connection's joined ones. When
    # unsure, ask the joined ones. Asked once per transaction, so inlined.
    dispatch = conn.dispatch if getattr(conn, "_has_events", True) else conn.engine.dispatch
    begin = dispatch.begin
    return bool(
        len(begin) != 1
        or own_begin not in begin
        or dispatch.commit
        or dispatch.rollback
        or conn.dialect.dispatch.handle_error
        or dispatch.before_cursor_execute
        or dispatch.after_cursor_execute
        or conn.engine.echo
    )


def begin_listener(listener: Callable[[Connection], None]) -> Callable[[Connection], None]:
    """A ledger ``begin`` listener whose connection is never used again if it raises.

    Raised from inside Core's begin (a busy ``BEGIN IMMEDIATE``, a deferred or
    pipelined statement refused, a lost session), the Connection would never begin a
    transaction by itself again: kept for the next transaction, its Core statements
    would run outside it (SQLite) or unanswered in pipeline mode (PostgreSQL). So it
    is invalidated; nothing of the transaction that was beginning has committed."""

    @wraps(listener)
    def guarded(conn: Connection) -> None:
        try:
            listener(conn)
        except BaseException:
            if not conn.invalidated:
                conn.invalidate()
            raise

    return guarded


def storage_format(impl: Any) -> str | None:
    """The ``%``-format a SQLite ``DATETIME`` implementation writes with, if known."""
    value = getattr(impl, "_storage_format", None)
    return value if isinstance(value, str) else None


SQLITE_DATETIME_FORMAT = (
    "%(year)04d-%(month)02d-%(day)02d %(hour)02d:%(minute)02d:%(second)02d.%(microsecond)06d"
)
"""SQLAlchemy's default storage format of a SQLite ``DATETIME``."""


def problems() -> list[str]:
    """What of the above this SQLAlchemy no longer has or means; empty when all holds."""
    found: list[str] = []
    engine: Engine = create_engine("sqlite://")
    try:
        with engine.connect() as conn:
            if not hasattr(conn, "_has_events"):
                found.append("Connection._has_events is gone")
            elif conn._has_events:
                found.append("Connection._has_events is true with no listener on it")
            for name in ("begin", "commit", "rollback", "before_cursor_execute",
                         "after_cursor_execute"):
                if bool(getattr(conn.dispatch, name, True)):
                    found.append(f"conn.dispatch.{name} is missing or not empty")
            if bool(getattr(conn.dialect.dispatch, "handle_error", True)):
                found.append("dialect.dispatch.handle_error is missing or not empty")

            def on_begin(_conn: Connection) -> None:
                return None

            event.listen(engine, "begin", on_begin)
            try:
                if transaction_watched(conn, on_begin):
                    found.append("an engine's begin listener is not in the connection's")
                if not transaction_watched(conn, None):
                    found.append("another begin listener than the ledger's is not seen")
                event.listen(conn, "commit", on_begin)
                if not getattr(conn, "_has_events", False) or not transaction_watched(
                    conn, on_begin
                ):
                    found.append("a listener on the connection is not seen (_has_events)")
                event.remove(conn, "commit", on_begin)
            finally:
                event.remove(engine, "begin", on_begin)
        impl = sqlite.DATETIME().dialect_impl(engine.dialect)
        if storage_format(impl) != SQLITE_DATETIME_FORMAT:
            found.append("sqlite.DATETIME._storage_format is gone or not the default")
    finally:
        engine.dispose()
    return found

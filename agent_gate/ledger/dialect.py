"""Everything that differs between database backends, in one place.

The rest of the ledger speaks portable SQLAlchemy Core. What cannot be portable
lives here: how an engine is configured (SQLite pragmas), how a write transaction
starts (SQLite needs ``BEGIN IMMEDIATE`` to take the write lock up front, otherwise
two deferred transactions that both read and then write fail instead of waiting),
and the "insert unless it exists" statement. PostgreSQL support (a later issue)
adds its branch to these functions and nowhere else.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, Insert, Table, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url

from agent_gate.errors import AgentGateError

__all__ = [
    "DEFAULT_URL",
    "ENV_VAR",
    "LedgerConfigError",
    "begin_read",
    "begin_write",
    "create_ledger_engine",
    "insert_ignore",
    "resolve_url",
]

DEFAULT_URL = "sqlite:///agent_gate.db"
ENV_VAR = "AGENT_GATE_DB"
DEFAULT_BUSY_TIMEOUT = 30.0
"""Seconds a SQLite writer waits for another writer's lock before failing; a ledger
write holds the lock for one short statement plus an fsync."""

_WRITE_OPTION = "agent_gate_write"


class LedgerConfigError(AgentGateError):
    """The database URL cannot hold a ledger (unsupported backend, in-memory SQLite)."""


def resolve_url(url: str | URL | None) -> str:
    """The explicit URL, else ``$AGENT_GATE_DB``, else the embedded SQLite default."""
    if url is None:
        url = os.environ.get(ENV_VAR) or DEFAULT_URL
    return url.render_as_string(hide_password=False) if isinstance(url, URL) else url


def create_ledger_engine(url: str, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> Engine:
    """An engine configured for durable compare-and-set writes on its backend."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(parsed, busy_timeout)
    if backend == "postgresql":
        return create_engine(parsed, pool_pre_ping=True)
    raise LedgerConfigError(f"unsupported ledger backend {backend!r}: use sqlite or postgresql")


def _sqlite_engine(url: URL, busy_timeout: float) -> Engine:
    database = url.database or ""
    if database in ("", ":memory:") or "mode=memory" in str(url):
        raise LedgerConfigError(
            "an in-memory SQLite ledger forgets every call when the process exits; "
            "give a file, e.g. sqlite:///agent_gate.db"
        )
    engine = create_engine(url, connect_args={"timeout": busy_timeout})
    busy_ms = int(busy_timeout * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the sqlite3 module (it would BEGIN
        # lazily, only before DML) so that _on_begin decides how each one starts.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
            cursor.execute("PRAGMA journal_mode = WAL")
            # FULL: the commit of ``executing`` is on disk before the tool runs.
            cursor.execute("PRAGMA synchronous = FULL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(_WRITE_OPTION):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")

    return engine


@contextmanager
def begin_write(engine: Engine) -> Iterator[Connection]:
    """A transaction that will write: holds the write lock from its first statement."""
    with engine.connect() as conn:
        conn = conn.execution_options(**{_WRITE_OPTION: True})
        with conn.begin():
            yield conn


@contextmanager
def begin_read(engine: Engine) -> Iterator[Connection]:
    """A read-only transaction: one consistent snapshot, no write lock."""
    with engine.connect() as conn, conn.begin():
        yield conn


def insert_ignore(conn: Connection, table: Table, values: dict[str, Any]) -> bool:
    """Insert a row unless a unique constraint already holds one; True if inserted.

    Racing processes both try; the database decides, and the loser reads the winner's
    row instead of failing its transaction.
    """
    stmt: Insert
    name = conn.dialect.name
    if name == "sqlite":
        stmt = sqlite.insert(table).values(**values).on_conflict_do_nothing()
    elif name == "postgresql":
        stmt = postgresql.insert(table).values(**values).on_conflict_do_nothing()
    else:  # pragma: no cover - create_ledger_engine refuses other backends
        raise LedgerConfigError(f"unsupported ledger backend {name!r}")
    return conn.execute(stmt).rowcount == 1

"""The SQL that differs between SQLite and PostgreSQL, as Core elements.

Statements are written once, in portable SQLAlchemy Core, by the rules and the
backends alike; what cannot be portable is built here, beneath both:

* the "insert unless it exists" statement (``ON CONFLICT DO NOTHING`` on both);
* reading a row so that nobody else can until we commit (``for_update``);
* a named lock held to the end of a write transaction (``lock_named``): a
  PostgreSQL advisory lock; nothing on SQLite, whose write transactions already
  exclude each other;
* the clock leases and approvals are measured by (``db_now_ms``): the database's,
  so that workers on several hosts compare expiries against one clock.

How a database is connected to and how its transactions begin is the backends'
(``ledger.backend``); nothing here opens a connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Insert,
    Select,
    Table,
    bindparam,
    literal_column,
    text,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from agent_gate.errors import LedgerConfigError

__all__ = ["db_now_ms", "dialect_insert", "for_update", "insert_statement", "lock_named"]


def insert_statement(
    name: str, table: Table, keys: tuple[str, ...], *, returning: bool
) -> Insert:
    """Insert a row of ``keys`` unless a unique constraint already holds one.

    Racing processes both try; the database decides, and the loser reads the winner's
    row instead of failing its transaction. On PostgreSQL the loser waits for the
    winner's transaction to end, so the row it then reads is committed.
    ``returning``: every column of the row inserted, in table order (none when a
    row was there; ``Txn.insert_call``, where the dialect can return rows from an
    ``INSERT``). Else, on PostgreSQL, a ``1`` for a row inserted: psycopg's
    ``INSERT`` rowcount is not relied on.
    """
    if name not in ("sqlite", "postgresql"):  # pragma: no cover - the engine refuses others
        raise LedgerConfigError(f"unsupported ledger backend {name!r}")
    row = {k: bindparam(k, type_=table.c[k].type) for k in keys}
    stmt = dialect_insert(name)(table).values(row).on_conflict_do_nothing()
    if returning:
        return stmt.returning(*table.c)
    return stmt if name == "sqlite" else stmt.returning(literal_column("1"))


def dialect_insert(name: str) -> Callable[[Table], Insert]:
    """The dialect's ``insert`` (``ON CONFLICT``); PostgreSQL's imported only if used."""
    if name == "sqlite":
        return sqlite.insert
    from sqlalchemy.dialects import postgresql
    return postgresql.insert


def for_update(dialect: Dialect, stmt: Select[Any]) -> Select[Any]:
    """``stmt`` locking the rows it reads until the write transaction ends.

    ``SELECT ... FOR UPDATE`` on PostgreSQL: a second reader of the same row waits
    for the first transaction to end and then reads the row as that one left it.
    Unchanged on SQLite, whose ``begin_write`` transactions already exclude each
    other (and which has no ``FOR UPDATE``).
    """
    return stmt.with_for_update() if dialect.name == "postgresql" else stmt


def lock_named(conn: Connection, name: str) -> None:
    """Hold the lock called ``name`` until the current write transaction ends.

    For work that must not interleave with itself although it touches no common row
    yet (two upgrades of an empty schema, the first writer of a new counter). On
    PostgreSQL it is a transaction-scoped advisory lock keyed by ``name`` and the
    current schema (so ledgers in different schemas of one database never wait for
    each other); it waits at most ``lock_timeout``. On SQLite it does nothing: a
    ``begin_write`` transaction already excludes every other writer. Call it only
    inside ``begin_write``.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(
            text(
                "SELECT pg_advisory_xact_lock("
                "hashtextextended(:name || coalesce(current_schema(), ''), 0))"
            ),
            {"name": f"agent_gate:{name}:"},
        )


class db_now_ms(FunctionElement[int]):
    """The database server's clock, integer milliseconds since the epoch, in SQL.

    Lease expiries are written and compared with this, never with a worker's clock:
    workers on several hosts then agree on when a lease ran out, and a worker whose
    clock runs ahead cannot judge a live lease expired. (SQLite runs on the workers'
    own machine, so there it is that machine's clock.)
    """

    type = BigInteger()
    inherit_cache = True
    name = "db_now_ms"


@compiles(db_now_ms, "postgresql")
def _db_now_ms_postgresql(_element: db_now_ms, _compiler: SQLCompiler, **_kw: Any) -> str:
    return "CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)"


@compiles(db_now_ms, "sqlite")
def _db_now_ms_sqlite(_element: db_now_ms, _compiler: SQLCompiler, **_kw: Any) -> str:
    # julianday('now') has millisecond resolution; 2440587.5 is the Unix epoch.
    return "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"

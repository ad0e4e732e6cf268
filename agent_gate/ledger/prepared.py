"""The ledger's hot statements: compiled once per backend, run on the driver's cursor.

Why this exists
===============

Every tool call costs the ledger about fifteen statements in three transactions.
Through SQLAlchemy Core each one is built, cache-keyed and executed again per call:
measured on this project's benchmark machine, building and running one
compare-and-set ``UPDATE`` takes ~190 us, running a prebuilt one through
``Connection.execute`` ~33 us, and the same SQL on the driver's cursor ~1.5 us.
With three fsyncs per call costing about a millisecond, that overhead, not the
disk, was what bounded calls per second.

So the statements on the path of every call are still *written* in SQLAlchemy
Core (the table definitions in ``models`` stay the one source of truth, and the
dialect renders quoting, ``ON CONFLICT``, ``FOR UPDATE`` and the lease clock), but
compiled once per (backend, statement shape) and executed on the DB-API cursor of
the connection the transaction already holds. Three things keep that equivalent
to ``Connection.execute``:

* values pass through the columns' own bind and result processors for the
  dialect, so what is stored (SQLite's datetime text, say) is exactly what the
  Core path would store, and what is read back is the same Python value;
* the statement runs inside the caller's SQLAlchemy transaction (same DB-API
  connection), so ``BEGIN IMMEDIATE``, commit and rollback are untouched;
* a driver error is raised as the ``sqlalchemy.exc.DBAPIError`` subclass the Core
  path raises, with parameters hidden (they may hold arguments), and a connection
  the driver reports lost is invalidated, as SQLAlchemy itself would do;
* when anything listens for ``before_cursor_execute``/``after_cursor_execute``
  (tracing, a test's fault injection) or the engine echoes statements, the
  compiled text runs through ``Connection.exec_driver_sql`` instead, so the
  listeners and the log see it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from threading import Lock
from typing import Any

from sqlalchemy import Column, Connection, exc
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement

__all__ = ["Prepared", "Rows", "driver_error", "observed", "prepare", "result_processors"]

_Processor = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class Rows:
    """What one statement returned: the affected row count and the fetched rows."""

    rowcount: int
    rows: list[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class Prepared:
    """One statement compiled for one dialect."""

    sql: str
    names: tuple[str, ...]
    """Parameter names in placeholder order (positional paramstyles)."""
    positional: bool
    binds: tuple[tuple[str, _Processor], ...]
    """Parameters whose type converts the Python value for this driver."""

    def run(self, conn: Connection, params: Mapping[str, Any]) -> Rows:
        if self.binds:
            params = dict(params)
            for name, process in self.binds:
                value = params[name]
                if value is not None:
                    params[name] = process(value)
        args: Sequence[Any] | Mapping[str, Any] = (
            tuple([params[n] for n in self.names]) if self.positional else params
        )
        if observed(conn):
            # Someone watches the statements (tracing, echo, a test's fault hook): go
            # through Core's execution so they see these too.
            result = conn.exec_driver_sql(self.sql, args)  # type: ignore[arg-type]
            fetched = [tuple(r) for r in result.fetchall()] if result.returns_rows else []
            return Rows(result.rowcount, fetched)
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(self.sql, args)
            rows = cursor.fetchall() if cursor.description is not None else []
            return Rows(cursor.rowcount, rows)
        except conn.dialect.loaded_dbapi.Error as error:
            raise driver_error(conn, error, self.sql, args, cursor) from error
        finally:
            cursor.close()


def observed(conn: Connection) -> bool:
    """Whether anyone watches ``conn``'s statements: cursor-execute listeners, or
    the engine's ``echo`` (statement logging)."""
    dispatch = conn.dispatch
    return bool(
        dispatch.before_cursor_execute or dispatch.after_cursor_execute or conn.engine.echo
    )


def driver_error(
    conn: Connection, error: Exception, sql: str, args: Any, cursor: Any
) -> exc.DBAPIError:
    """The error SQLAlchemy would raise for ``error``; a lost connection is invalidated."""
    dialect = conn.dialect
    lost = False
    try:
        lost = dialect.is_disconnect(error, conn.connection.dbapi_connection, cursor)
    except Exception:  # pragma: no cover - a dialect that cannot tell
        lost = False
    wrapped = exc.DBAPIError.instance(
        sql,
        args,
        error,
        dialect.loaded_dbapi.Error,
        hide_parameters=True,
        connection_invalidated=lost,
        dialect=dialect,
    )
    if lost and not conn.invalidated:
        conn.invalidate(error)
    return wrapped


_CACHE: dict[tuple[str, Hashable], Prepared] = {}
_CACHE_LOCK = Lock()


def prepare(conn: Connection, key: Hashable, build: Callable[[], ClauseElement]) -> Prepared:
    """The statement ``build()`` makes, compiled for ``conn``'s dialect (cached by ``key``).

    ``key`` must name everything that shapes the SQL (which columns are set, which
    guards apply): two statements with one key would share one compiled text.
    """
    dialect = conn.dialect
    cache_key = (f"{dialect.name}+{dialect.driver}", key)
    found = _CACHE.get(cache_key)
    if found is not None:
        return found
    compiled = build().compile(dialect=dialect)
    binds: list[tuple[str, _Processor]] = []
    for name, bind in compiled.binds.items():
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            binds.append((name, process))
    prepared = Prepared(
        sql=compiled.string,
        names=tuple(compiled.positiontup or ()),
        positional=bool(compiled.positional),
        binds=tuple(binds),
    )
    with _CACHE_LOCK:
        _CACHE.setdefault(cache_key, prepared)
    return prepared


def result_processors(
    dialect: Dialect, columns: Sequence[Column[Any]]
) -> tuple[_Processor | None, ...]:
    """Per column, how the driver's value becomes the Python value Core would return."""
    return tuple(
        col.type.dialect_impl(dialect).result_processor(dialect, None) for col in columns
    )

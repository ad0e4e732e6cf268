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

Within a transaction a fast backend begins (``track``, ``tracked``), that question
is asked once, at its start, and the statements share one driver cursor
(``Open``): a call runs about fifteen statements, and asking the listener
collections before each cost more than some of the statements themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from operator import itemgetter
from threading import Lock
from typing import Any, NamedTuple

from sqlalchemy import Column, Connection, exc
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.types import TypeEngine

from agent_gate.ledger.backend._sa_private import (
    SQLITE_DATETIME_FORMAT,
    cursor_watched,
    storage_format,
)

__all__ = [
    "Open",
    "Prepared",
    "Rows",
    "bind_processor",
    "driver_error",
    "is_watched",
    "opened",
    "prepare",
    "result_processors",
    "statements_watched",
    "track",
    "tracked",
    "untrack",
]

_Processor = Callable[[Any], Any]


class Rows(NamedTuple):
    """What one statement returned: the affected row count and the fetched rows."""

    rowcount: int
    rows: list[tuple[Any, ...]]
    """As the driver returned them (``result_processors`` converts them as Core would)."""


class Open:
    """What the statements of one open transaction share (``track``/``untrack``).

    Whether anyone watches the connection's statements is asked once, when the
    transaction starts, instead of before every statement (the listener collections
    cost about half a microsecond per question, and a call runs sixteen
    statements); a listener or ``echo`` set while a transaction is open applies from
    the next transaction on. The statements also share one driver cursor, which is
    dropped after a driver error so that the next statement asks the connection
    again (and sees it invalidated, as Core would).
    """

    __slots__ = ("cursor", "deferred", "pipe", "raw", "watched")

    def __init__(self, watched: bool) -> None:
        self.watched = watched
        self.cursor: Any = None
        self.pipe: Any = None
        """A PostgreSQL transaction in pipeline mode (``pipeline.PipelinedTxn``):
        statements are sent through it and answered when read."""
        self.raw = False
        """Begun on the driver, not through Core (``dialect``): a Core transaction that
        starts inside it (a ``conn.execute``) adopts it instead of beginning another."""
        self.deferred: Callable[[], None] | None = None
        """What runs a statement its caller is still writing (``defer``)."""

    def defer(self, run: Callable[[], None]) -> None:
        """Put off a statement its caller may still rewrite (``fast.Folded``): ``run``
        runs it just before the transaction's next statement, round trip, Core
        statement or commit, so it keeps its place in the transaction's order."""
        self.undefer()
        self.deferred = run

    def undefer(self) -> None:
        """Run the deferred statement now, if there is one."""
        deferred, self.deferred = self.deferred, None
        if deferred is not None:
            deferred()


_OPEN: dict[int, Open] = {}
"""Open transactions by ``id`` of their ``Connection`` (one thread uses one at a time)."""


def track(conn: Connection, watched: bool | None = None) -> Open:
    """Note that a transaction starts on ``conn``: its statements share an ``Open``.

    ``watched``: ``statements_watched(conn)`` when the caller has just found it out."""
    state = Open(statements_watched(conn) if watched is None else watched)
    _OPEN[id(conn)] = state
    return state


def untrack(conn: Connection, state: Open) -> None:
    """The transaction ``track`` noted has ended: forget it, close its cursor."""
    if _OPEN.get(id(conn)) is state:
        del _OPEN[id(conn)]
    state.deferred = None  # a transaction that failed: nothing of it is sent
    cursor, state.cursor = state.cursor, None
    if cursor is not None:
        with suppress(Exception):  # a cursor of a connection already gone
            cursor.close()


@contextmanager
def tracked(conn: Connection) -> Iterator[None]:
    """A transaction begun and ended by Core whose statements share one ``Open``
    (noted before its ``BEGIN``, which the engine's own ``begin`` hook then sends on
    the driver unless someone watches)."""
    state = track(conn)
    try:
        with conn.begin():
            yield
            state.undefer()
    finally:
        untrack(conn, state)


def opened(conn: Connection) -> Open | None:
    """The tracked transaction open on ``conn``, if any."""
    return _OPEN.get(id(conn))


def is_watched(conn: Connection) -> bool:
    """``statements_watched(conn)``, answered once per tracked transaction."""
    state = _OPEN.get(id(conn))
    return state.watched if state is not None else statements_watched(conn)


@dataclass(frozen=True, slots=True)
class Prepared:
    """One statement compiled for one dialect."""

    sql: str
    names: tuple[str, ...]
    """Parameter names in placeholder order (positional paramstyles)."""
    positional: bool
    binds: tuple[tuple[str, _Processor], ...]
    """Parameters whose type converts the Python value for this driver."""
    pick: Callable[[Mapping[str, Any]], tuple[Any, ...]]
    """Positional paramstyles: the parameters' values in placeholder order, taken
    from the mapping in one C call (``operator.itemgetter``), not one lookup per name."""
    converted: tuple[tuple[int, _Processor], ...]
    """Positional paramstyles: the placeholders whose value a bind processor converts
    (a gate call's statements have about 130 placeholders, a dozen of them converted)."""
    returns_rows: bool = True
    """Whether the statement returns rows (a ``SELECT``, a ``RETURNING``): in a
    pipeline the cursor cannot tell before the answer arrives."""

    def args(self, params: Mapping[str, Any]) -> Sequence[Any] | Mapping[str, Any]:
        """The driver's parameters: bind-processed, in placeholder order if positional."""
        if self.positional:
            values = self.pick(params)
            if not self.converted:
                return values
            converting = list(values)
            for i, process in self.converted:
                value = converting[i]
                if value is not None:
                    converting[i] = process(value)
            return tuple(converting)
        if self.binds:
            params = dict(params)
            for name, process in self.binds:
                value = params[name]
                if value is not None:
                    params[name] = process(value)
        return params

    def run(self, conn: Connection, params: Mapping[str, Any]) -> Rows:
        """Run the statement in ``conn``'s transaction. In a pipelined PostgreSQL
        transaction it is only sent: the ``Rows`` returned is a ``pipeline.Pending``
        (same attributes) answered when first read."""
        # self.args(params), inlined for the common case (no value to convert).
        args: Sequence[Any] | Mapping[str, Any] = (
            self.pick(params) if self.positional and not self.converted else self.args(params)
        )
        state = _OPEN.get(id(conn))
        if state is not None and state.deferred is not None:
            state.undefer()
        if state is not None and state.pipe is not None:
            return state.pipe.send(self.sql, args, fetch=self.returns_rows)  # type: ignore[no-any-return]
        if state.watched if state is not None else statements_watched(conn):
            # Someone watches the statements (tracing, echo, a test's fault hook): go
            # through Core's execution so they see these too.
            result = conn.exec_driver_sql(self.sql, args)  # type: ignore[arg-type]
            fetched = [tuple(r) for r in result.fetchall()] if result.returns_rows else []
            return Rows(result.rowcount, fetched)
        cursor = state.cursor if state is not None else None
        shared = cursor is not None
        if not shared:
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            if state is not None:
                state.cursor, shared = cursor, True
        try:
            cursor.execute(self.sql, args)
            rows = cursor.fetchall() if cursor.description is not None else []
            return Rows(cursor.rowcount, rows)
        except conn.dialect.loaded_dbapi.Error as error:
            if state is not None:
                state.cursor, shared = None, False
            raise driver_error(conn, error, self.sql, args, cursor) from error
        finally:
            if not shared:
                cursor.close()


def statements_watched(conn: Connection) -> bool:
    """Whether anyone watches ``conn``'s statements: cursor-execute listeners, or
    the engine's ``echo`` (statement logging)."""
    return cursor_watched(conn)


def driver_error(
    conn: Connection, error: Exception, sql: str | None, args: Any, cursor: Any
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
_DIALECT_CACHE = "_agent_gate_prepared"
"""Where a dialect keeps its own view of ``_CACHE`` (found without building a key)."""


def prepare(conn: Connection, key: Hashable, build: Callable[[], ClauseElement]) -> Prepared:
    """The statement ``build()`` makes, compiled for ``conn``'s dialect and cached by
    ``key`` (the fast backends' ``Txn.run``; the reference builds its own).

    ``key`` must name everything that shapes the SQL (which columns are set, which
    guards apply): two statements with one key would share one compiled text.
    """
    dialect = conn.dialect
    mine: dict[Hashable, Prepared] | None = dialect.__dict__.get(_DIALECT_CACHE)
    if mine is None:
        mine = dialect.__dict__.setdefault(_DIALECT_CACHE, {})
    found = mine.get(key)
    if found is not None:
        return found
    cache_key = (f"{dialect.name}+{dialect.driver}", key)
    found = _CACHE.get(cache_key)
    if found is not None:
        mine[key] = found
        return found
    compiled = build().compile(dialect=dialect)
    binds: list[tuple[str, _Processor]] = []
    for name, bind in compiled.binds.items():
        process = bind_processor(bind.type, dialect)
        if process is not None:
            binds.append((name, process))
    names = tuple(compiled.positiontup or ())
    by_name = dict(binds)
    prepared = Prepared(
        sql=compiled.string,
        returns_rows=bool(compiled.effective_returning)
        or not (compiled.isinsert or compiled.isupdate or compiled.isdelete),
        names=names,
        positional=bool(compiled.positional),
        binds=tuple(binds),
        pick=_picker(names),
        converted=tuple(
            (i, by_name[name]) for i, name in enumerate(names) if name in by_name
        ),
    )
    with _CACHE_LOCK:
        prepared = _CACHE.setdefault(cache_key, prepared)
    mine[key] = prepared
    return prepared


def _picker(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """``tuple(params[name] for name in names)``, as one C call: ``itemgetter`` of one
    name returns the bare value, so that case is wrapped to return a 1-tuple too."""
    if not names:
        return lambda params: ()
    if len(names) == 1:
        get = itemgetter(names[0])
        return lambda params: (get(params),)
    return itemgetter(*names)


_DATETIME_SAMPLES = (
    datetime(1, 1, 1),
    datetime(999, 9, 9, 9, 9, 9, 9),
    datetime(2026, 11, 30, 14, 11, 25, 123456, tzinfo=UTC),
    datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=-5))),
    datetime(9999, 12, 31, 23, 59, 59, 999999),
)


def bind_processor(type_: TypeEngine[Any], dialect: Dialect) -> _Processor | None:
    """The bind processor Core would use for ``type_`` on ``dialect``.

    For a SQLite ``DATETIME`` in its default storage format, the same text is
    written by ``datetime.isoformat`` (one C call) instead of a ``%`` format over a
    seven-key dict: a gate call writes about a dozen timestamps. Only exact
    ``datetime`` values take the short way, and only if it writes what Core's
    processor writes for a set of samples; anything else goes to Core's processor.
    """
    impl = type_.dialect_impl(dialect)
    process = impl.bind_processor(dialect)
    if (
        process is None
        or not isinstance(impl, sqlite.DATETIME)
        or storage_format(impl) != SQLITE_DATETIME_FORMAT
    ):
        return process
    core: _Processor = process

    def sqlite_datetime(value: Any) -> Any:
        if type(value) is datetime:
            return value.isoformat(" ", "microseconds")[:26]
        return core(value)

    if all(sqlite_datetime(v) == core(v) for v in _DATETIME_SAMPLES):
        return sqlite_datetime
    return core  # pragma: no cover - a SQLAlchemy that writes another text


def result_processors(
    dialect: Dialect, columns: Sequence[Column[Any]]
) -> tuple[_Processor | None, ...]:
    """Per column, how the driver's value becomes the Python value Core would return."""
    return tuple(
        col.type.dialect_impl(dialect).result_processor(dialect, None) for col in columns
    )

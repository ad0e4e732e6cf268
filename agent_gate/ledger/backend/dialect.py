"""Everything that differs between database backends, in one place.

The rest of the ledger speaks portable SQLAlchemy Core. What cannot be portable
lives here:

* how an engine is configured: SQLite pragmas; PostgreSQL's isolation level,
  lock and idle timeouts, and surviving a connection the server dropped;
* how a write transaction starts: SQLite needs ``BEGIN IMMEDIATE`` to take the
  write lock up front (otherwise two deferred transactions that both read and then
  write fail instead of waiting); PostgreSQL locks rows as it updates them;
* the "insert unless it exists" statement (``ON CONFLICT DO NOTHING`` on both);
* reading a row so that nobody else can until we commit (``for_update``);
* a named lock held to the end of a write transaction (``lock_named``): a
  PostgreSQL advisory lock; nothing on SQLite, whose write transactions already
  exclude each other;
* the clock leases are measured by (``db_now_ms``): the database's, so that workers
  on several hosts compare expiries against one clock;
* that a SQLite ledger is still the file it opened (``LedgerReplaced``) and is never
  created by accident (``LedgerMissing``): checked with ``ledger_file``'s tools.

The file a SQLite ledger opened
===============================

A process keeps its SQLite connections open. If the file is deleted (or another
file is moved to its path) those connections go on committing into the unlinked
inode, which nobody else will ever read, while a new connection (this process's
next one, or the next process) would open or create whatever is at the path now:
an empty ledger, on which every replayed call runs again. So an engine remembers
the (device, inode) of the file its first connection opened, and before every
transaction compares it with ``os.stat`` of that path: one system call, three per
gate call (one per write transaction; a gate call has no read transaction), about a
microsecond each on Linux next to a transaction's tens. On a difference it raises
``LedgerReplaced`` and commits nothing. Connections after the first are opened
with SQLite's ``mode=rw``, so they can never create a file at the path either.

Why READ COMMITTED on PostgreSQL, explicitly: every transition is one
``UPDATE ... WHERE id = ? AND state = ? AND version = ?``. Under READ COMMITTED a
second updater blocks on the row lock and, once the first commits, re-evaluates its
WHERE against the new row: it matches nothing and reports a lost race, which is what
the store expects. Under REPEATABLE READ or SERIALIZABLE it would raise a
serialization failure instead, so the ledger never inherits a stricter server
default (``default_transaction_isolation``) that would turn lost races into errors.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any
from urllib.parse import quote

from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    Insert,
    Select,
    Table,
    bindparam,
    create_engine,
    event,
    literal_column,
    text,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import URL, Dialect, make_url
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from agent_gate.errors import LedgerConfigError, LedgerMissing, LedgerReplaced
from agent_gate.ledger.backend import FAST, choose, is_fast, resolve
from agent_gate.ledger.backend._sa_private import begin_listener, transaction_watched
from agent_gate.ledger.backend.prepared import (
    driver_error,
    opened,
    statements_watched,
    track,
    untrack,
)
from agent_gate.ledger.backend.spares import SPARE_MAX, release_idle, spares_of
from agent_gate.ledger.ledger_file import (
    FILE_ATTR,
    OpenedFile,
    check_file,
    sqlite_file,
)

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_URL",
    "ENV_VAR",
    "LedgerConfigError",
    "LedgerMissing",
    "LedgerReplaced",
    "begin_read",
    "begin_write",
    "create_ledger_engine",
    "db_now_ms",
    "for_update",
    "insert_statement",
    "lock_named",
    "release_idle",
    "resolve_url",
]

DEFAULT_URL = "sqlite:///agent_gate.db"
ENV_VAR = "AGENT_GATE_DB"
DEFAULT_BUSY_TIMEOUT = 30.0
"""Seconds a writer waits for another writer's lock before failing (SQLite's busy
timeout, PostgreSQL's ``lock_timeout``); a ledger write holds its locks for a few
short statements."""

IDLE_IN_TRANSACTION_FACTOR = 4
"""PostgreSQL ends a session that sits idle inside a transaction for this many busy
timeouts. No ledger transaction ever waits on anything but the database (tools run
outside transactions), so such a session belongs to a frozen or partitioned worker;
ending it releases the row and chain locks everyone else is queued behind."""

DEFAULT_APPLICATION_NAME = "agent-gate"
"""How ledger sessions appear in ``pg_stat_activity`` unless the URL names them."""

_WRITE_OPTION = "agent_gate_write"
_OWN_BEGIN_ATTR = "_agent_gate_on_begin"
"""Where a SQLite ledger engine keeps its ``begin`` listener (``_sqlite_transaction``
must tell it from anyone else's)."""
_PG_DRIVERS = ("postgresql", "postgresql+psycopg")


def resolve_url(url: str | URL | None) -> str:
    """The explicit URL, else ``$AGENT_GATE_DB``, else the embedded SQLite default."""
    if url is None:
        url = os.environ.get(ENV_VAR) or DEFAULT_URL
    return url.render_as_string(hide_password=False) if isinstance(url, URL) else url


def create_ledger_engine(
    url: str,
    *,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    create: bool = True,
    storage: str | None = None,
) -> Engine:
    """An engine configured for durable compare-and-set writes on its backend.

    ``create=False``: not even its first connection may create a SQLite file (a
    caller that checked ``require_ledger_file`` first keeps that promise under a
    race with whoever deletes the file). ``storage``: ``"core"`` or ``"fast"``, the
    path statements take (``agent_gate.ledger.backend``; default: its ``default()``).
    """
    storage = resolve(storage)
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        engine = _sqlite_engine(parsed, busy_timeout, create)
    elif backend == "postgresql":
        engine = _postgresql_engine(parsed, busy_timeout, storage == FAST)
    else:
        raise LedgerConfigError(
            f"unsupported ledger backend {backend!r}: use sqlite or postgresql"
        )
    choose(engine.dialect, storage)
    return engine


def _sqlite_engine(url: URL, busy_timeout: float, create: bool) -> Engine:
    database = url.database or ""
    if database in ("", ":memory:") or "mode=memory" in str(url):
        raise LedgerConfigError(
            "an in-memory SQLite ledger forgets every call when the process exits; "
            "give a file, e.g. sqlite:///agent_gate.db"
        )
    engine = create_engine(url, connect_args={"timeout": busy_timeout})
    busy_ms = int(busy_timeout * 1000)
    opened_file = OpenedFile()
    engine.__dict__[FILE_ATTR] = opened_file
    plain_path = sqlite_file(url) is not None

    @event.listens_for(engine, "do_connect")
    def _on_do_connect(
        _dialect: Any, _record: Any, cargs: list[Any], cparams: dict[str, Any]
    ) -> None:
        # A plain path is opened as a URI with an explicit mode, so that only a first
        # connection told to create may create the file (sqlite3 would create it).
        if not plain_path or not cargs:
            return
        if opened_file.ident is not None:
            opened_file.check()  # deleted or replaced: do not open what is there now
        path = os.path.abspath(os.fspath(cargs[0]))
        mode = "rwc" if create and opened_file.ident is None else "rw"
        cargs[0] = f"file:{quote(path)}?mode={mode}"
        cparams["uri"] = True

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
            main = [row for row in cursor.execute("PRAGMA database_list") if row[1] == "main"]
        finally:
            cursor.close()
        opened_file.connected(main[0][2] if main else "")

    @event.listens_for(engine, "begin")
    @begin_listener
    def _on_begin(conn: Connection) -> None:
        state = opened(conn)
        if state is not None and state.raw:
            # Core adopts the transaction _sqlite_transaction began on the driver; a
            # statement deferred in it runs before Core's.
            state.undefer()
            return
        opened_file.check()
        sql = "BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE_OPTION) else "BEGIN"
        if not is_fast(conn.dialect) or statements_watched(conn):
            conn.exec_driver_sql(sql)  # statement listeners and the echo log see it
        else:
            # Every ledger transaction starts here: on the driver it costs a tenth.
            # A busy database still raises what Core would (OperationalError).
            driver = conn.connection.driver_connection
            try:
                driver.execute(sql)  # type: ignore[union-attr]
            except conn.dialect.loaded_dbapi.Error as error:
                raise driver_error(conn, error, sql, (), None) from error

    engine.__dict__[_OWN_BEGIN_ATTR] = _on_begin
    return engine


def _postgresql_engine(url: URL, busy_timeout: float, fast: bool) -> Engine:
    """psycopg 3, READ COMMITTED, bounded lock waits, dropped connections replaced.

    ``pool_pre_ping`` tests a pooled connection before each transaction, so a session
    the server ended while it sat in the pool (a restart, a failover,
    ``pg_terminate_backend``) is replaced instead of failing the next transition. A
    connection lost *inside* a transaction fails that transaction, which PostgreSQL
    rolls back; the ledger never acts on a write it did not see commit.
    """
    if url.drivername not in _PG_DRIVERS:
        raise LedgerConfigError(
            f"unsupported PostgreSQL driver {url.drivername!r}: use postgresql+psycopg:// "
            "(psycopg 3)"
        )
    if importlib.util.find_spec("psycopg") is None:
        raise LedgerConfigError(
            "a PostgreSQL ledger needs psycopg 3: pip install 'agent-gate[postgres]'"
        )
    url = url.set(drivername="postgresql+psycopg")
    lock_ms = int(busy_timeout * 1000)
    idle_ms = lock_ms * IDLE_IN_TRANSACTION_FACTOR
    # Passed as connect arguments, not written into the URL, so the engine's URL (and
    # what the CLI prints) stays the one given. Ours go first: a setting the URL's
    # own ``options`` gives again wins (libpq applies ``-c`` options in order).
    ours = f"-c lock_timeout={lock_ms} -c idle_in_transaction_session_timeout={idle_ms}"
    theirs = url.query.get("options")
    connect_args: dict[str, Any] = {
        "options": f"{ours} {theirs}" if isinstance(theirs, str) and theirs else ours
    }
    if "application_name" not in url.query:
        connect_args["application_name"] = DEFAULT_APPLICATION_NAME
    if "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = max(1, int(busy_timeout))
    engine = create_engine(
        url,
        # The Core backend, the plain reference, pings each pooled connection
        # before a transaction (a round trip). The fast one checks the socket
        # instead (``pipeline.alive``) and replays a transaction whose first round
        # trip found the connection gone (``pipeline``): no round trip.
        pool_pre_ping=not fast,
        isolation_level="READ COMMITTED",
        connect_args=connect_args,
    )
    if fast:
        # Imported here: the pipeline's errors are the rules' (``txn.Lost``), whose
        # module needs this one.
        from agent_gate.ledger.backend import pg_pipeline as pipeline

        if pipeline.supported():
            pipeline.install(engine)
    return engine


def begin_write(engine: Engine, *, reuse: bool = True) -> AbstractContextManager[Connection]:
    """A transaction that will write: holds the write lock from its first statement
    on SQLite; on PostgreSQL rows are locked as they are updated.

    ``reuse=False``: on a connection of its own, not one kept for the next
    transaction (for callers such as Alembic that keep references to it).
    """
    # The SQLite context manager itself, not wrapped in another: three write
    # transactions per gate call.
    if reuse and engine.dialect.name == "sqlite" and is_fast(engine.dialect):
        return _sqlite_transaction(engine, write=True)
    return _pooled_write(engine, pipelined=reuse)


@contextmanager
def _core_transaction(conn: Connection) -> Iterator[None]:
    """A transaction begun and ended by Core, its statements tracked for ``prepared``
    (on the fast backend; the Core backend's statements need no tracking)."""
    if not is_fast(conn.dialect):
        with conn.begin():
            yield
        return
    with conn.begin():
        state = track(conn)
        try:
            yield
            state.undefer()
        finally:
            untrack(conn, state)


@contextmanager
def _pooled_write(engine: Engine, *, pipelined: bool) -> Iterator[Connection]:
    if pipelined and is_fast(engine.dialect):
        with _kept_write(engine) as conn:
            yield conn
        return
    with engine.connect() as conn:
        conn = conn.execution_options(**{_WRITE_OPTION: True})
        with _core_transaction(conn):
            yield conn


@contextmanager
def _kept_write(engine: Engine) -> Iterator[Connection]:
    """A PostgreSQL write transaction, pipelined (``pipeline``) on a connection kept
    between transactions (``spares.Spares``): checking one out of the pool and back in
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
            conn = conn.execution_options(**{_WRITE_OPTION: True})
            with _core_transaction(conn):
                yield conn
    finally:
        if conn.invalidated or conn.closed or conn.in_transaction() or len(idle) >= SPARE_MAX:
            conn.close()
        else:
            idle.append(conn)


def begin_read(engine: Engine, *, reuse: bool = True) -> AbstractContextManager[Connection]:
    """A read-only transaction that sees one consistent snapshot, and takes no lock.

    SQLite gives a deferred transaction one snapshot by itself. PostgreSQL's READ
    COMMITTED would give each statement its own, so a reader of several tables (the
    schema check reads the revision and the table list; ``audit verify`` reads the
    chain head and then every entry) could see a writer's commit land between two
    statements; REPEATABLE READ READ ONLY pins one snapshot and never blocks writers.
    ``reuse`` as for ``begin_write``.
    """
    if reuse and engine.dialect.name == "sqlite" and is_fast(engine.dialect):
        return _sqlite_transaction(engine, write=False)
    return _pooled_read(engine)


@contextmanager
def _pooled_read(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn = conn.execution_options(
                isolation_level="REPEATABLE READ", postgresql_readonly=True
            )
        with _core_transaction(conn):
            yield conn


def _core_needed(conn: Connection) -> bool:
    """Whether a transaction on ``conn`` must go through Core's begin and commit.

    Yes when anyone but this module listens for the connection's begin, commit or
    rollback, for its statements or its errors, or the engine echoes: they must see
    the transaction as they always did. Also when the engine is not one
    ``create_ledger_engine`` made for SQLite (its ``begin`` hook is missing).
    """
    own = conn.engine.__dict__.get(_OWN_BEGIN_ATTR)
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
            conn = conn.execution_options(**{_WRITE_OPTION: True})
    try:
        if conn.in_transaction() or _core_needed(conn):
            with _core_transaction(conn):
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

"""How a ledger engine is made on each database, and how a plain transaction begins.

What cannot be portable about connecting lives here (the SQL that differs is
``ledger.sql``'s; which implementation runs the transactions is ``backend``'s):

* how an engine is configured: SQLite pragmas; PostgreSQL's isolation level,
  lock and idle timeouts, and surviving a connection the server dropped;
* how a write transaction starts: SQLite needs ``BEGIN IMMEDIATE`` to take the
  write lock up front (otherwise two deferred transactions that both read and then
  write fail instead of waiting); PostgreSQL locks rows as it updates them
  (``pooled``: a transaction on a pooled connection, begun by Core or by a
  backend's own ``begin``);
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
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

from agent_gate.errors import LedgerConfigError, LedgerMissing, LedgerReplaced
from agent_gate.ledger.backend._sa_private import begin_listener
from agent_gate.ledger.backend.prepared import driver_error, opened
from agent_gate.ledger.ledger_file import FILE_ATTR, OpenedFile, sqlite_file

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_URL",
    "ENV_VAR",
    "OWN_BEGIN_ATTR",
    "WRITE_OPTION",
    "Begin",
    "LedgerConfigError",
    "LedgerMissing",
    "LedgerReplaced",
    "build_engine",
    "plain_begin",
    "pooled",
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

WRITE_OPTION = "agent_gate_write"
"""The execution option that marks a connection's transactions as writes (SQLite's
``BEGIN IMMEDIATE``)."""
OWN_BEGIN_ATTR = "_agent_gate_on_begin"
"""Where a SQLite ledger engine keeps its ``begin`` listener (a backend that begins
transactions on the driver must tell it from anyone else's)."""
_PG_DRIVERS = ("postgresql", "postgresql+psycopg")

Begin = Callable[[Connection], AbstractContextManager[Any]]
"""How a backend begins and ends a transaction on a connection it holds
(``plain_begin``: Core's own ``Connection.begin``)."""


def resolve_url(url: str | URL | None) -> str:
    """The explicit URL, else ``$AGENT_GATE_DB``, else the embedded SQLite default."""
    if url is None:
        url = os.environ.get(ENV_VAR) or DEFAULT_URL
    return url.render_as_string(hide_password=False) if isinstance(url, URL) else url


def build_engine(url: str, *, busy_timeout: float, create: bool, ping: bool) -> Engine:
    """An engine configured for durable compare-and-set writes on its database
    (``backend.create_ledger_engine`` picks its backend). ``create=False``: not even
    its first connection may create a SQLite file. ``ping``: PostgreSQL pings each
    pooled connection before a transaction (the reference backend does)."""
    parsed = make_url(url)
    name = parsed.get_backend_name()
    if name == "sqlite":
        return _sqlite_engine(parsed, busy_timeout, create)
    if name == "postgresql":
        return _postgresql_engine(parsed, busy_timeout, ping)
    raise LedgerConfigError(f"unsupported ledger backend {name!r}: use sqlite or postgresql")


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
        sql = "BEGIN IMMEDIATE" if conn.get_execution_options().get(WRITE_OPTION) else "BEGIN"
        if state is None or state.watched:
            # Not a fast backend's transaction (``track`` notes those), or its
            # statements are watched: listeners and the echo log see the BEGIN.
            conn.exec_driver_sql(sql)
        else:
            # A fast backend's transaction: on the driver BEGIN costs a tenth.
            # A busy database still raises what Core would (OperationalError).
            driver = conn.connection.driver_connection
            try:
                driver.execute(sql)  # type: ignore[union-attr]
            except conn.dialect.loaded_dbapi.Error as error:
                raise driver_error(conn, error, sql, (), None) from error

    engine.__dict__[OWN_BEGIN_ATTR] = _on_begin
    return engine


def _postgresql_engine(url: URL, busy_timeout: float, ping: bool) -> Engine:
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
    return create_engine(
        url,
        # The Core backend, the plain reference, pings each pooled connection
        # before a transaction (a round trip). The fast one checks the socket
        # instead (``pg_pipeline.alive``) and replays a transaction whose first
        # round trip found the connection gone: no round trip.
        pool_pre_ping=ping,
        isolation_level="READ COMMITTED",
        connect_args=connect_args,
    )


def plain_begin(conn: Connection) -> AbstractContextManager[Any]:
    """A transaction begun and ended by Core (``Connection.begin``)."""
    return conn.begin()


@contextmanager
def pooled(engine: Engine, *, write: bool, begin: Begin = plain_begin) -> Iterator[Connection]:
    """A transaction on a connection checked out of the pool for it, begun by
    ``begin``. A write holds SQLite's write lock from its first statement; a read
    sees one consistent snapshot and takes no lock.

    SQLite gives a deferred transaction one snapshot by itself. PostgreSQL's READ
    COMMITTED would give each statement its own, so a reader of several tables (the
    schema check reads the revision and the table list; ``audit verify`` reads the
    chain head and then every entry) could see a writer's commit land between two
    statements; REPEATABLE READ READ ONLY pins one snapshot and never blocks writers.
    """
    with engine.connect() as conn:
        if write:
            conn = conn.execution_options(**{WRITE_OPTION: True})
        elif conn.dialect.name == "postgresql":
            conn = conn.execution_options(
                isolation_level="REPEATABLE READ", postgresql_readonly=True
            )
        with begin(conn):
            yield conn

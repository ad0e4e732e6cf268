"""PostgreSQL write transactions in a few round trips: libpq's pipeline mode.

Why this exists
===============

On a networked PostgreSQL a ledger transaction costs what it waits for, not what it
computes: each statement sent alone is a round trip (a pool pre-ping, ``BEGIN``,
each ``INSERT``/``UPDATE``, ``COMMIT``), about twenty per gate call. In pipeline
mode the client sends statements without waiting for their answers and waits only
when it needs one (the statements go out on libpq itself, ``libpq.Wire``, not
through psycopg's cursors, which cost more CPU than the ledger's own work). So a
transaction begun here (``backend.begin_write`` on the fast backend) does not wait
for anything it does not read:

* ``BEGIN`` is sent with the first statement, not answered on its own;
* ``prepared.Prepared.run`` sends its statement and returns ``Pending`` rows: the
  transaction waits (one round trip for everything sent so far) only when a caller
  reads ``rows`` or ``rowcount``;
* ``COMMIT`` is one round trip with whatever is still unanswered.

Nothing on the common path reads before its ``COMMIT``, so each of its transactions
is one round trip. Two things that used to need an answer first are done by the
server instead (functions revision 0007 installs):

* the audit link (``pg_fast.link_in_server``): each entry's hash covers its
  task's previous hash, which only the locked head row knows; the client sends the
  entries and the hashed text around each link (``chain.entry_parts``), the server
  locks the heads, splices the links in, hashes, inserts and moves the heads;
* expectations: a statement sent without being read whose outcome decides whether
  the transaction may commit (a compare-and-set the caller assumes won:
  ``Txn.compare_and_set``'s ``unread``, ``fast.FastTxn``) is wrapped by
  ``PipelinedTxn.expect`` so that the server raises ``EXPECTATION_FAILED`` when it
  matched another number of rows. The
  error aborts the transaction (the ``COMMIT`` behind it rolls back) and is raised
  as ``Unexpected`` where that round trip is answered. That is why the statement
  last sent is held back (``held``) until the next one or the next round trip:
  ``expect`` may still wrap it.

A gate call that runs at once then costs two round trips (the count
``tests/ledger/backend/test_pg_pipeline_round_trips.py`` holds): the intake's ``BEGIN``, insert
(under an id handed out in an earlier call's transaction, ``pg_fast.SpareIds``,
with the decision's and the claim's arrows folded in, ``fast.Folded``), audit
append and ``COMMIT`` in one, the outcome's ``BEGIN``, update, audit append and
``COMMIT`` in the other: eight statements.

The server runs the statements in the order sent, so locks are taken in the order
the code asks for them (the audit head stays the last, ``audit``'s docstring), and
a statement that fails aborts the ones after it: the ``COMMIT`` sent behind a
failing statement never commits. The error is raised as the ``DBAPIError`` subclass
Core would raise for that statement (``prepared.driver_error``, parameters hidden),
where the caller reads a result or at the commit.

A connection the server dropped while it sat in the pool
========================================================

Without a pre-ping such a connection is found out at checkout when the server said
so (``alive``: its socket is readable), or else when the transaction first sends or
waits. If the ``COMMIT`` had not been handed to the driver by then, nothing of the
transaction can have committed, and no caller has read anything yet: the statements
sent so far are sent again, in order, on a fresh connection (``_replay``), once. A
connection lost at any later round trip, or at the one that carries the ``COMMIT``,
is raised as lost (the ledger never acts on a write it did not see commit).

A session dropped silently (a partition, a failover) shows nothing until a round
trip fails, and with the ``COMMIT`` in the transaction's only round trip that is a
lost commit (nobody can tell whether the server got it). So a connection that has
not answered for ``PROBE_AFTER_IDLE_S`` (idle in the pool, or new) sends its first
round trip without the ``COMMIT``, as every transaction did before revision 0007,
and can be replayed; a connection in steady use commits in one round trip, and one
dropped silently within that second is raised as lost.

A statement run through Core inside the transaction (``conn.execute``: rare, off
the per-call path) first collects every pending answer and leaves pipeline mode
(``leave``, from the engine's ``begin`` listener): Core reads results as soon as it
executes, which pipeline mode cannot give it. The transaction continues outside the
pipeline and Core commits it.
"""

from __future__ import annotations

import select
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, event, exc

from agent_gate.ledger.backend._sa_private import begin_listener, transaction_watched
from agent_gate.ledger.backend.prepared import Open, driver_error, opened, track, untrack
from agent_gate.ledger.txn import Lost

if TYPE_CHECKING:  # psycopg's, imported by a PostgreSQL ledger only (``_enter``)
    from agent_gate.ledger.backend._libpq import Reply, Wire

__all__ = [
    "EXPECTATION_FAILED",
    "PROBE_AFTER_IDLE_S",
    "Pending",
    "PipelinedTxn",
    "Unexpected",
    "alive",
    "install",
    "supported",
    "transaction",
    "usable",
]


class Unexpected(Lost):
    """A statement sent without waiting did not match the rows it was expected to
    (``PipelinedTxn.expect``); the transaction was rolled back (``txn.Lost``)."""


EXPECTATION_FAILED = "AG001"
"""The SQLSTATE of ``agent_gate_expect`` (installed by revision 0007): a statement
did not match the rows its transaction assumed, and the server aborted it."""

_EXPECT_HEAD = "WITH expected AS ("
_EXPECT_TAIL = (
    ") SELECT expected.* FROM (SELECT agent_gate_expect(count(*), {rows}) AS ok "
    "FROM expected) AS matched LEFT JOIN expected ON matched.ok"
)
"""How ``expect`` wraps a statement with ``RETURNING``: its rows, unchanged, unless
it returned another number of them, which raises ``EXPECTATION_FAILED`` in the
server. The count is the outer side of the join, so it is evaluated even when the
statement returned nothing."""

_BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED"
"""What psycopg itself sends before a write transaction of the ledger's engine
(``dialect._postgresql_engine`` sets READ COMMITTED)."""


PROBE_AFTER_IDLE_S = 1.0
"""A connection that has not answered for this long sends its transaction's first
round trip without the ``COMMIT`` (two round trips instead of one), so that finding
it dead there leaves nothing in doubt and the transaction can be sent again
(``_replay``). A connection in steady use commits in its first round trip."""

_LAST_ANSWER: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
"""When each psycopg connection last answered a round trip (``time.monotonic``)."""

_OWN_BEGIN_ATTR = "_agent_gate_pg_on_begin"
"""Where a PostgreSQL ledger engine keeps its ``begin`` listener (``usable`` must
tell it from anyone else's)."""


def install(engine: Engine) -> None:
    """Give a PostgreSQL ledger engine what pipelined transactions need: a check at
    every pool checkout that the server has not dropped the connection (no round
    trip), and a ``begin`` listener that takes a transaction out of pipeline mode
    when Core joins it."""

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        if not alive(dbapi_connection):
            # The pool replaces the connection and checks the new one out instead.
            raise exc.DisconnectionError("the server closed this pooled connection")

    @event.listens_for(engine, "begin")
    @begin_listener  # a statement sent earlier may fail in leave(): never kept then
    def _on_begin(conn: Connection) -> None:
        state = opened(conn)
        if state is not None and state.pipe is not None:
            # Unhooked after leaving: a deferred statement still goes out through it.
            state.pipe.leave()
            state.pipe = None

    engine.__dict__[_OWN_BEGIN_ATTR] = _on_begin


def usable(conn: Connection) -> bool:
    """Whether a write transaction on ``conn`` may be pipelined: nobody but the
    ledger listens for its transactions, statements or errors, nor echoes (they
    must see each statement as Core runs it), and the engine was made for it."""
    own = conn.engine.__dict__.get(_OWN_BEGIN_ATTR)
    return own is not None and not transaction_watched(conn, own)


def alive(driver: Any) -> bool:
    """Whether a psycopg connection sitting idle in the pool may be used, without a
    round trip. A server that ended the session (a restart, ``pg_terminate_backend``,
    an idle timeout) sends its last words and closes the socket, which is then
    readable; an idle session of the ledger is sent nothing else it needs (it
    listens for no notifications), so a readable socket counts as gone: at worst a
    needless reconnect. A session dropped silently (a partition) looks alive: the
    first round trip finds it out, and ``PipelinedTxn`` replays the transaction if
    its ``COMMIT`` was not in that round trip (``PROBE_AFTER_IDLE_S``)."""
    if driver.closed or driver.broken:
        return False
    try:
        readable, _, _ = select.select([driver.pgconn.socket], [], [], 0)
    except Exception:  # no socket any more: not usable either way
        return False
    return not readable


@contextmanager
def transaction(conn: Connection) -> Iterator[Connection]:
    """A write transaction on ``conn`` in pipeline mode (``usable(conn)`` is true)."""
    state = track(conn, watched=False)
    txn = PipelinedTxn(conn, state)
    try:
        txn.begin()
        state.pipe = txn
        try:
            yield conn
            state.undefer()  # while the pipeline is hooked: it goes out through it
        except BaseException:
            state.pipe = None
            if conn.in_transaction():  # Core joined (``install``'s begin listener)
                conn.rollback()
            else:
                txn.rollback()
            raise
        state.pipe = None
        if conn.in_transaction():
            conn.commit()
        else:
            try:
                txn.commit()
            except BaseException:
                txn.rollback()
                raise
    finally:
        state.pipe = None
        txn.close()
        untrack(conn, state)


def supported() -> bool:
    """Whether this psycopg's libpq has pipeline mode (libpq 14 and later)."""
    try:
        import psycopg
    except ImportError:  # pragma: no cover - the engine refuses to start without it
        return False
    return bool(psycopg.Pipeline.is_supported())


class Pending:
    """The answer to one statement sent in a pipeline: read on first use.

    The attributes of ``prepared.Rows``: ``rows`` (fetched rows, the driver's values)
    and ``rowcount``. Reading either waits for
    every statement sent so far (one round trip) unless the answer is already in.
    """

    __slots__ = ("_rowcount", "_rows", "answer", "args", "done", "fetch", "sql", "txn")

    def __init__(self, txn: PipelinedTxn, sql: str, args: Any, fetch: bool) -> None:
        self.txn = txn
        self.sql = sql
        self.args = args
        self.fetch = fetch
        self.done = False
        self.answer: Reply | None = None
        """The server's answer, once its round trip is read (``libpq.Wire``)."""
        self._rows: list[tuple[Any, ...]] = []
        self._rowcount = -1

    def answered(self, answer: Reply) -> None:
        self.answer = answer

    def collect(self) -> None:
        """Take the answer read with its round trip (no round trip here)."""
        answer = self.answer
        if answer is not None:
            self._rows = answer.rows
            self._rowcount = answer.rowcount
        self.done = True

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        if not self.done:
            self.txn.wait()
        return self._rows

    @property
    def rowcount(self) -> int:
        if not self.done:
            self.txn.wait()
        return self._rowcount


class _Discarded:
    """Where the answer to a statement nobody reads goes."""

    fetch = False

    def answered(self, answer: Reply) -> None:
        pass


_DISCARDED = _Discarded()


class PipelinedTxn:
    """One write transaction on a psycopg connection in pipeline mode."""

    __slots__ = ("answered", "conn", "driver", "error_class", "held", "pending", "replayed",
                 "state", "wire")

    def __init__(self, conn: Connection, state: Open) -> None:
        self.conn = conn
        self.state = state
        """The transaction's shared record (``prepared.Open``): a statement deferred
        there (``Open.defer``) goes out before anything this sends or waits for."""
        self.error_class: type[Exception] = conn.dialect.loaded_dbapi.Error
        self.pending: list[Pending] = []
        self.answered = False
        """A round trip was answered: a caller may have read something (no replay)."""
        self.replayed = False
        self.held: Pending | None = None
        """The statement last sent, not yet handed to the driver: ``expect`` may still
        wrap it. It goes out with the next statement or round trip."""
        self.driver: Any = None
        self.wire: Wire | None = None
        """The connection's pipeline while in pipeline mode (``libpq``)."""

    # ------------------------------------------------------------ lifecycle

    def begin(self) -> None:
        """Enter pipeline mode and send ``BEGIN`` (answered with the first wait)."""
        conn = self.conn
        try:
            self._enter(conn.connection.driver_connection)
        except self.error_class as error:  # known dead before anything was sent
            if not conn.invalidated:
                conn.invalidate(error)
            try:
                self._enter(conn.connection.driver_connection)
            except self.error_class as again:
                raise driver_error(conn, again, _BEGIN, None, None) from again
        self.send(_BEGIN, None, fetch=False)

    def _enter(self, driver: Any) -> None:
        # autocommit: psycopg must not send (and wait for) a BEGIN of its own; ours
        # goes out with the first statement.
        driver.autocommit = True
        from agent_gate.ledger.backend._libpq import Wire

        wire = Wire(driver)
        wire.enter()
        self.driver, self.wire = driver, wire

    @property
    def in_pipeline(self) -> bool:
        return self.wire is not None

    def send(
        self, sql: str, args: Sequence[Any] | Mapping[str, Any] | None, *, fetch: bool
    ) -> Pending:
        """Send one statement; its answer is read when needed (``Pending``)."""
        if self.state.deferred is not None:
            self.state.undefer()
        if self.held is not None:
            self._push()
        pending = Pending(self, sql, args, fetch)
        self.pending.append(pending)
        self.held = pending
        return pending

    def _push(self, *, committing: bool = False) -> None:
        """Hand the held statement to libpq, which writes it out at once when the
        socket takes it (the server starts on it before the round trip)."""
        pending, self.held = self.held, None
        if pending is None:
            return
        assert self.wire is not None
        try:
            self.wire.send(pending.sql, pending.args, pending)
        except self.error_class as error:  # sending fails when the connection is gone
            self._on_error(error, committing=committing)

    def wait(self) -> None:
        """One round trip: every statement sent so far answered, or its error raised."""
        self.state.undefer()
        self._push()
        wire = self.wire
        assert wire is not None
        error = self._round_trip(wire, leave=False)
        if error is not None:
            self._on_error(error, committing=False)
            return
        self._answered()

    def _round_trip(self, wire: Wire, *, leave: bool) -> Exception | None:
        """Sync and read every answer (sent again unnamed when the server had forgotten
        a prepared name, ``_sent_unnamed``), then leave pipeline mode if ``leave``.
        Returns the error the round trip ended in, a lost connection's included."""
        try:
            error = wire.round_trip()
            if error is not None and self._sent_unnamed(wire):
                error = None
            if error is None and leave:
                self.wire = None
                wire.exit()
        except self.error_class as lost:
            return lost
        return error

    def expect(self, pending: Pending, rowcount: int) -> None:
        """``pending``, the statement just sent (with ``RETURNING``), must return
        ``rowcount`` rows, or the server aborts the transaction: the ``COMMIT`` sent
        behind it rolls back, and ``Unexpected`` is raised where its round trip is
        answered. Checked in the server so that the ``COMMIT`` need not wait for the
        answer: the transaction stays one round trip."""
        if pending is not self.held or not pending.fetch:
            raise ValueError("expect() follows its statement, which returns rows")
        pending.sql = f"{_EXPECT_HEAD}{pending.sql}{_EXPECT_TAIL.format(rows=int(rowcount))}"

    def commit(self) -> None:
        """Send ``COMMIT`` behind everything unanswered and leave pipeline mode: the
        one round trip answers all of it (leaving syncs).

        Unless nothing has proven the connection alive lately (``PROBE_AFTER_IDLE_S``):
        then what is unanswered goes first, alone, in a round trip that may still be
        sent again on a new connection."""
        if not self.answered:
            last = _LAST_ANSWER.get(self.driver)
            if last is None or time.monotonic() - last >= PROBE_AFTER_IDLE_S:
                self.wait()
        self.send("COMMIT", None, fetch=False)
        self._push(committing=True)
        self._leave(committing=True)

    def leave(self) -> None:
        """Core joins the transaction (a ``conn.execute``): answer everything and
        leave pipeline mode; the transaction goes on in the plain protocol."""
        if self.wire is not None:
            self.state.undefer()
            self._push()
            self._leave(committing=False)

    def _leave(self, *, committing: bool) -> None:
        """The last round trip in pipeline mode, then out of it."""
        wire = self.wire
        assert wire is not None
        error = self._round_trip(wire, leave=True)
        if error is None:
            self._answered()
            return
        self._drop_pipeline()
        # Raises, unless the connection was found gone with nothing committed: then
        # everything was sent again on a new connection and answered (``_replay``),
        # and that connection leaves pipeline mode here.
        self._on_error(error, committing=committing)
        replayed, self.wire = self.wire, None
        if replayed is not None:
            replayed.exit()

    def _answered(self) -> None:
        self.answered = True
        _LAST_ANSWER[self.driver] = time.monotonic()
        pending, self.pending = self.pending, []
        for item in pending:
            item.collect()

    def rollback(self) -> None:
        """End a failed transaction: nothing of it commits.

        Pipeline mode is left (the answers of a failed pipeline are aborted ones),
        then ``ROLLBACK`` is sent plainly; a connection that is gone is left to be
        invalidated (the server ends its transaction with it).
        """
        self.pending = []
        self.held = None
        self.state.deferred = None
        self._drop_pipeline()
        driver = self.driver
        if driver is None or driver.closed or driver.broken:
            return
        try:
            driver.rollback()
        except self.error_class as error:
            raise driver_error(self.conn, error, "ROLLBACK", None, None) from error

    def close(self) -> None:
        """Leave pipeline mode if still in it; give psycopg its own transactions back.

        A connection that cannot be put back as psycopg expects it (idle, not in
        autocommit) is invalidated rather than pooled."""
        self._drop_pipeline()
        driver = self.driver
        if driver is None or driver.closed or driver.broken:
            return
        try:
            if driver.info.transaction_status != 0:  # not IDLE: end it, commit nothing
                driver.rollback()
            driver.autocommit = False
        except self.error_class as error:
            if not self.conn.invalidated:
                self.conn.invalidate(error)

    def _drop_pipeline(self) -> None:
        wire, self.wire = self.wire, None
        if wire is not None:
            with suppress(self.error_class):
                wire.drain()
                wire.exit()

    # ------------------------------------------------------------ failures

    def _on_error(self, error: Exception, *, committing: bool) -> None:
        driver = self.driver
        lost = driver is None or driver.closed or driver.broken
        if lost and not (self.answered or committing or self.replayed):
            self._replay(error)
            return
        self._failed(error)

    def _sent_unnamed(self, wire: Wire) -> bool:
        """The round trip failed because the server had forgotten a prepared name
        (``libpq``'s docstring): the transaction aborted and nothing of it committed,
        its ``COMMIT`` included. Unless an answer was read already, send the whole
        transaction again on the same connection, unnamed, after a ``ROLLBACK`` that
        ends what is left of it, and answer it in one more round trip (a failure
        there raises). False: the error stands."""
        if not wire.stale or self.answered:
            return False
        wire.forget()
        wire.send("ROLLBACK", None, _DISCARDED)
        for item in self.pending:
            item.answer = None
            wire.send(item.sql, item.args, item)
        error = wire.round_trip()
        if error is not None:
            self._failed(error)
        return True

    def _failed(self, error: Exception) -> None:
        """Raise ``error`` as Core would, naming the statement that failed; a failed
        expectation as ``Unexpected``."""
        failed = next(
            (p for p in self.pending if p.answer is None or p.answer.error is not None), None
        )
        sql, args = (failed.sql, failed.args) if failed is not None else (None, None)
        self.pending = []
        self.held = None
        if getattr(error, "sqlstate", None) == EXPECTATION_FAILED:
            raise Unexpected(sql) from error
        raise driver_error(self.conn, error, sql, args, None) from error

    def _replay(self, error: Exception) -> None:
        """The connection was found gone before any answer, with no ``COMMIT`` sent:
        nothing of this transaction can have committed and nobody has read anything.
        Send the same statements again, in order, on a new connection (once)."""
        conn = self.conn
        self.replayed = True
        self.wire = None  # gone with the old connection
        if not conn.invalidated:
            conn.invalidate(error)
        # A session that died silently (a partition, a failover) rarely dies alone:
        # the others idle in the pool are as old, and the replay must not be handed
        # one of them. A new pool, as SQLAlchemy itself starts after a disconnect;
        # the old one's idle connections are dropped, not closed over the network.
        conn.engine.dispose(close=False)
        self.held = None  # sent below with the others
        try:
            self._enter(conn.connection.driver_connection)  # the pool connects anew
            wire = self.wire
            assert wire is not None
            for item in self.pending:
                item.answer = None
                wire.send(item.sql, item.args, item)
        except self.error_class as again:
            self._failed(again)
        self.wait()

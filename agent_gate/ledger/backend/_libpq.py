"""A pipelined transaction's statements sent and answered on libpq itself.

Why not psycopg's cursors
=========================

``pipeline.PipelinedTxn`` sends a gate call's eleven statements in two round trips.
Through psycopg's cursors each statement costs a cursor, a query conversion, a
parameter dump and a communicate cycle on the socket (about 70 us of Python), and
entering and leaving psycopg's ``Pipeline`` another cycle each: about 1 ms of the
2.3 ms of client CPU a gate call spent on PostgreSQL, which bounds both a single
worker's calls per second and how many workers two cores can serve. Here a
statement costs a cached conversion, one parameter dump and one libpq send, and a
round trip one sync and one read loop.

Only psycopg's public layers are used, so that the values on the wire are the ones
its cursors would send and the rows the ones they would return:
``Connection.pgconn`` (libpq, ``psycopg.pq``), ``psycopg.adapt.Transformer`` (the
connection's own dumpers and loaders), ``psycopg.errors.error_from_result`` (the
error class a cursor would raise for a failed statement).

Theory of operation
===================

``Wire`` is one driver connection's pipeline. ``send`` converts the statement's
``%(name)s`` / ``%s`` placeholders to ``$n`` once per text (``_convert``), dumps the
parameters and hands the statement to libpq, which writes it to the socket at once
when it can (``flush``; the rest goes with the sync), so the server works on it
while the client goes on. ``round_trip`` sends a sync and reads every answer up to
it: one result per statement, in order (a statement after a failed one answers
``PIPELINE_ABORTED``), then the sync's. What each answer belongs to is the queue of
``_inflight`` targets, one per command sent.

A statement the connection has sent ``prepare_threshold`` times (psycopg's own
setting; ``None`` never prepares, as behind a transaction-pooling bouncer) is
prepared on the server under a name of this module's (``ag_N``), in the same
pipeline, and run by name afterwards: the server parses and plans it once per
session instead of once per call (unnamed, the server spent twice the CPU per gate
call). A name counts as prepared once its own answer came back (a prepare aborted
with its pipeline prepared nothing); at most ``prepared_max`` per session.

The server may forget the names behind this module's back: psycopg sends
``DEALLOCATE ALL`` after rolling back a connection that has prepared statements of
its own, and nothing public tells. A statement sent by a forgotten name fails with
``invalid_sql_statement_name``; the transaction aborts (even with its ``COMMIT`` in
the same round trip: nothing of it commits), ``stale`` reports it, and
``PipelinedTxn`` forgets the session's names (``forget``) and sends the transaction
again, unnamed, before anyone has read an answer: every transaction begins with a
named ``BEGIN`` once the session has sent a few, so a forgotten name fails the
first statement of the first round trip.

A connection found gone (libpq reports it ``BAD``) raises ``OperationalError``
wherever it is found, as psycopg would; ``PipelinedTxn`` decides whether the
transaction may be sent again.
"""

from __future__ import annotations

import re
import select
import weakref
from collections import deque
from typing import Any, Protocol

from psycopg import OperationalError, pq
from psycopg import errors as pg_errors
from psycopg.adapt import PyFormat, Transformer

__all__ = ["INVALID_NAME", "Reply", "Target", "Wire"]

_OK = pq.ExecStatus.COMMAND_OK
_TUPLES = pq.ExecStatus.TUPLES_OK
_SYNC = pq.ExecStatus.PIPELINE_SYNC
_ABORTED = pq.ExecStatus.PIPELINE_ABORTED
_BAD = pq.ConnStatus.BAD
_TEXT = pq.Format.TEXT

_PLACEHOLDER = re.compile(rb"%(?:\(([^)]+)\))?s|%%|%")


class Reply:
    """What the server answered one statement: its rows (when it returns rows), its
    row count, or the error it failed with (none of them for a statement never run
    because one before it failed)."""

    __slots__ = ("error", "rowcount", "rows")

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.rowcount = -1
        self.error: Exception | None = None


class Target(Protocol):
    """Where an answer goes (``pipeline.Pending``)."""

    fetch: bool

    def answered(self, answer: Reply) -> None: ...


class _Converted:
    """A statement's text as libpq takes it: ``$n`` placeholders, and the order in
    which named parameters fill them."""

    __slots__ = ("names", "query")

    def __init__(self, query: bytes, names: tuple[str, ...] | None) -> None:
        self.query = query
        self.names = names


_CONVERTED: dict[str, _Converted] = {}
"""Every statement text seen, converted (the ledger's statements are a fixed set)."""


def _convert(sql: str) -> _Converted:
    """``%(name)s`` or ``%s`` placeholders to ``$n``, ``%%`` to ``%``: psycopg's
    rules for the texts SQLAlchemy compiles for it (a name used twice is one
    parameter; the two styles are not mixed in one statement)."""
    found = _CONVERTED.get(sql)
    if found is not None:
        return found
    names: list[str] = []
    positional = 0
    parts: list[bytes] = []
    last = 0
    raw = sql.encode()
    for match in _PLACEHOLDER.finditer(raw):
        token = match.group(0)
        parts.append(raw[last:match.start()])
        last = match.end()
        if token == b"%%":
            parts.append(b"%")
            continue
        if token == b"%":
            raise ValueError(f"a lone '%' at byte {match.start()} of a statement")
        name = match.group(1)
        if name is None:
            if names:
                raise ValueError("a statement mixes %s and %(name)s placeholders")
            positional += 1
            parts.append(b"$%d" % positional)
            continue
        if positional:
            raise ValueError("a statement mixes %s and %(name)s placeholders")
        key = name.decode()
        if key not in names:
            names.append(key)
        parts.append(b"$%d" % (names.index(key) + 1))
    parts.append(raw[last:])
    converted = _Converted(b"".join(parts), tuple(names) if names else None)
    _CONVERTED[sql] = converted
    return converted


class _Session:
    """What a connection keeps between transactions: the Transformer that dumps and
    loads with its adapters, and the statements prepared on its server session."""

    __slots__ = ("names", "tx", "uses")

    def __init__(self, driver: Any) -> None:
        self.tx = Transformer(driver)
        self.names: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self.uses: dict[tuple[bytes, tuple[int, ...]], int] = {}


_SESSIONS: weakref.WeakKeyDictionary[Any, _Session] = weakref.WeakKeyDictionary()
_NAMES = iter(range(1, 1 << 62))
"""Prepared statement names (``ag_N``): unique in the process, so in every session."""

INVALID_NAME = "26000"
"""The SQLSTATE of a statement sent by a name its session does not know."""


class _Prepare:
    """An in-flight ``Parse`` of ours: the name counts once it is answered."""

    __slots__ = ("key", "name", "session")

    def __init__(
        self, session: _Session, key: tuple[bytes, tuple[int, ...]], name: bytes
    ) -> None:
        self.session = session
        self.key = key
        self.name = name


class Wire:
    """One psycopg connection's pipeline on libpq (see the module docstring)."""

    __slots__ = ("_inflight", "driver", "named", "pgconn", "session", "stale", "tx")

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.pgconn = driver.pgconn
        session = _SESSIONS.get(driver)
        if session is None:
            session = _SESSIONS[driver] = _Session(driver)
        self.session = session
        self.tx = session.tx
        self._inflight: deque[Target | _Prepare] = deque()
        self.named = True
        """Whether statements may go by name (``forget`` turns it off)."""
        self.stale = False
        """A statement went by a name the server had forgotten (module docstring)."""

    def forget(self) -> None:
        """The server forgot this session's names: send everything unnamed from now
        on in this transaction; the next one prepares afresh."""
        self.session.names.clear()
        self.session.uses.clear()
        self.named = False
        self.stale = False

    def enter(self) -> None:
        self.pgconn.enter_pipeline_mode()

    def exit(self) -> None:
        """Leave pipeline mode (every answer read): the connection is psycopg's again."""
        self.pgconn.exit_pipeline_mode()

    def send(self, sql: str, args: Any, target: Target) -> None:
        """Hand one statement to libpq and write what it can to the socket."""
        converted = _convert(sql)
        if args is None:
            values: Any = ()
        elif converted.names is not None:
            values = [args[name] for name in converted.names]
        else:
            values = args
        pgconn = self.pgconn
        tx = self.tx
        if values:
            params = tx.dump_sequence(values, [PyFormat.AUTO] * len(values))
            types, formats = tx.types, tx.formats
        else:
            params, types, formats = None, (), None
        name = self._name(converted.query, types) if self.named else None
        if name is None:
            pgconn.send_query_params(converted.query, params, param_types=types,
                                     param_formats=formats, result_format=_TEXT)
        else:
            pgconn.send_query_prepared(name, params, param_formats=formats,
                                       result_format=_TEXT)
        self._inflight.append(target)
        pgconn.flush()

    def _name(self, query: bytes, types: Any) -> bytes | None:
        """The statement's prepared name, preparing it now (in this pipeline) when
        it has been sent often enough; None: send it unnamed."""
        session = self.session
        key = (query, tuple(types))
        name = session.names.get(key)
        if name is not None:
            return name
        driver = self.driver
        threshold = driver.prepare_threshold
        if threshold is None or len(session.names) >= driver.prepared_max:
            return None
        uses = session.uses.get(key, 0) + 1
        if uses <= threshold:
            session.uses[key] = uses
            return None
        del session.uses[key]
        name = b"ag_%d" % next(_NAMES)
        self.pgconn.send_prepare(name, query, param_types=types)
        self._inflight.append(_Prepare(session, key, name))
        return name

    def round_trip(self) -> Exception | None:
        """Sync and read every answer: the first statement's error, if one failed
        (the ones after it were aborted). A lost connection raises."""
        pgconn = self.pgconn
        pgconn.pipeline_sync()
        while pgconn.flush():
            self._wait(write=True)
        first: Exception | None = None
        inflight = self._inflight
        while True:
            while pgconn.is_busy():
                self._wait(write=False)
            result = pgconn.get_result()
            if result is None:
                if pgconn.status == _BAD:
                    raise self._lost()
                continue
            status = result.status
            if status == _SYNC:
                break
            if not inflight:
                # An error no statement asked for: the server ending the session
                # ("terminating connection due to administrator command"). The end
                # of the connection follows, and is raised when read.
                if first is None:
                    first = pg_errors.error_from_result(result, encoding=self.tx.encoding)
                continue
            target = inflight.popleft()
            if isinstance(target, _Prepare):
                if status == _OK:
                    target.session.names[target.key] = target.name
                elif status != _ABORTED and first is None:
                    first = pg_errors.error_from_result(result, encoding=self.tx.encoding)
                continue
            answer = Reply()
            if status in (_TUPLES, _OK):
                if target.fetch and status == _TUPLES:
                    tx = self.tx
                    tx.set_pgresult(result)
                    answer.rows = tx.load_rows(0, result.ntuples, tuple)
                count = result.command_tuples
                answer.rowcount = -1 if count is None else count
            elif status != _ABORTED:  # an aborted one was never run: no rows, no error
                answer.error = pg_errors.error_from_result(result, encoding=self.tx.encoding)
                if first is None:
                    first = answer.error
                    self.stale = answer.error.sqlstate == INVALID_NAME
            target.answered(answer)
        return first

    def drain(self) -> None:
        """Read whatever is still unanswered, ignoring errors (the transaction is
        being abandoned), unless the connection is gone."""
        if self._inflight and self.pgconn.status != _BAD:
            self.round_trip()

    def _wait(self, *, write: bool) -> None:
        """Block until the socket is readable (and writable when ``write``), then take
        in what arrived; a connection libpq finds gone raises."""
        pgconn = self.pgconn
        fd = pgconn.socket
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(fd, select.POLLIN | (select.POLLOUT if write else 0))
            poller.poll()
        else:  # pragma: no cover - Windows
            select.select([fd], [fd] if write else [], [])
        pgconn.consume_input()
        if pgconn.status == _BAD:
            raise self._lost()

    def _lost(self) -> Exception:
        message = self.pgconn.error_message.decode(self.tx.encoding, "replace").strip()
        return OperationalError(message or "the connection to the server was lost")

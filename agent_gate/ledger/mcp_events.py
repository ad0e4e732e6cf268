"""The MCP proxy's event store in the ledger's database: every read and write of ``mcp_events``.

``agent-gate mcp proxy --listen`` keeps here what it sent on each client session's
Streamable HTTP streams (and the requests and ``initialize`` each session sent), so a
client resumes a response with ``Last-Event-ID``, after the proxy restarted too
(``integrations.mcp.events`` is the SDK-facing side). Why in the ledger's database and
not in memory: a stream outlives the process that began it only if its events do.

Every lookup names the session: an event id is found only together with the session
id it was stored under, so another session's ``Last-Event-ID`` (or a guessed one)
finds nothing. Event ids are random (``secrets.token_urlsafe``), never counted.

Bounded: rows older than ``EventBounds.max_age`` go, and past ``max_bytes`` of stored
messages the oldest events go first. A session's own row (its ``initialize``) is
dated by the session's newest event, so an active session is never aged out; it goes
with its session (``end_session``) or once the session has been silent ``max_age``.

Plain SQLAlchemy Core on the ledger's engine (each method one short transaction); it
shares nothing with the ledger's write path but the connection pool.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import Engine, delete, func, select, update

from agent_gate.errors import GateUsageError
from agent_gate.ledger.models import ID_LEN, MCP_EVENTS

__all__ = ["DEFAULT_EVENT_BOUNDS", "EventBounds", "EventKind", "McpEventLog", "StoredEvent",
           "new_event_id"]

_T = MCP_EVENTS.c


class EventKind(StrEnum):
    """What a row of ``mcp_events`` holds."""

    SESSION = "session"
    """The session's ``initialize`` request: what a restarted proxy re-adopts it from."""
    REQUEST = "request"
    """A request the client sent on a stream: run again if the stream is resumed in a
    process that never saw it (answered from the ledger: a tool never runs twice)."""
    EVENT = "event"
    """An SSE event the proxy sent (``message`` NULL for a priming event)."""


@dataclass(frozen=True, slots=True)
class EventBounds:
    """How much of the event store is kept: ``max_bytes`` of messages, ``max_age`` seconds."""

    max_bytes: int = 64 * 1024 * 1024
    max_age: float = 6 * 3600.0

    def __post_init__(self) -> None:
        if self.max_bytes <= 0:
            raise GateUsageError(f"event store max_bytes must be positive, not {self.max_bytes}")
        if not (math.isfinite(self.max_age) and self.max_age > 0):
            raise GateUsageError(f"event store max_age must be a positive number of seconds, "
                                 f"not {self.max_age}")


DEFAULT_EVENT_BOUNDS = EventBounds()


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One row of a stream, in order."""

    seq: int
    event_id: str
    kind: EventKind
    message: str | None


def new_event_id() -> str:
    """An id nobody can guess or count from another (192 random bits)."""
    return secrets.token_urlsafe(24)


def _now_ms() -> int:
    return int(time.time() * 1000)


class McpEventLog:
    """The ``mcp_events`` table of one ledger database."""

    SESSION_ID_LEN = MCP_EVENTS.c.session_id.type.length or 64

    def __init__(self, engine: Engine, bounds: EventBounds = DEFAULT_EVENT_BOUNDS) -> None:
        self.engine = engine
        self.bounds = bounds
        self._lock = threading.Lock()
        self._unpruned = 0
        self._pruned_at = time.monotonic()

    # ------------------------------------------------------------ sessions

    def open_session(self, session_id: str, initialize: str) -> None:
        """Record a session and the ``initialize`` request that opened it."""
        self._insert(session_id, "", EventKind.SESSION, initialize)

    def session(self, session_id: str) -> str | None:
        """The ``initialize`` request of a session still kept, else None."""
        if not session_id or len(session_id) > self.SESSION_ID_LEN:
            return None
        with self.engine.begin() as conn:
            return conn.execute(
                select(_T.message).where(_T.session_id == session_id,
                                         _T.kind == EventKind.SESSION.value)
            ).scalar()

    def end_session(self, session_id: str) -> int:
        """Forget a session and everything it sent and was sent; rows deleted."""
        with self.engine.begin() as conn:
            return conn.execute(delete(MCP_EVENTS).where(_T.session_id == session_id)).rowcount

    # ------------------------------------------------------------ streams

    def append(self, session_id: str, stream_id: str, kind: EventKind, message: str | None) -> str:
        """Store one row of a stream; its new event id. Prunes when enough was added."""
        event_id = self._insert(session_id, stream_id, kind, message)
        with self._lock:
            self._unpruned += len(message.encode()) if message else 0
            due = (self._unpruned * 8 >= self.bounds.max_bytes
                   or time.monotonic() - self._pruned_at >= min(60.0, self.bounds.max_age))
            if due:
                self._unpruned, self._pruned_at = 0, time.monotonic()
        if due:
            self.prune()
        return event_id

    def find(self, session_id: str, event_id: str) -> tuple[str, StoredEvent] | None:
        """The stream of this session's event ``event_id``, and the event; None for an
        id of another session, a pruned one, or one never issued."""
        if not event_id or len(event_id) > 64:
            return None
        with self.engine.begin() as conn:
            row = conn.execute(
                select(_T.stream_id, _T.seq, _T.message).where(
                    _T.event_id == event_id, _T.session_id == session_id,
                    _T.kind == EventKind.EVENT.value)
            ).first()
        if row is None:
            return None
        return row.stream_id, StoredEvent(row.seq, event_id, EventKind.EVENT, row.message)

    def after(self, session_id: str, stream_id: str, seq: int) -> list[StoredEvent]:
        """This session's rows of ``stream_id`` after position ``seq``, in order."""
        with self.engine.begin() as conn:
            rows = conn.execute(
                select(_T.seq, _T.event_id, _T.kind, _T.message)
                .where(_T.session_id == session_id, _T.stream_id == stream_id, _T.seq > seq)
                .order_by(_T.seq)
            ).all()
        return [StoredEvent(r.seq, r.event_id, EventKind(r.kind), r.message) for r in rows]

    def request(self, session_id: str, stream_id: str) -> str | None:
        """The newest request this session sent on ``stream_id``, if kept."""
        with self.engine.begin() as conn:
            return conn.execute(
                select(_T.message).where(_T.session_id == session_id, _T.stream_id == stream_id,
                                         _T.kind == EventKind.REQUEST.value)
                .order_by(_T.seq.desc()).limit(1)
            ).scalar()

    # ------------------------------------------------------------ bounds

    def prune(self, now_ms: int | None = None) -> int:
        """Delete rows past the bounds: too old, then the oldest events past
        ``max_bytes`` (session rows are dated by their newest event and not counted
        in the size). The number of rows deleted."""
        now = _now_ms() if now_ms is None else now_ms
        cutoff = now - int(self.bounds.max_age * 1000)
        with self.engine.begin() as conn:
            gone = conn.execute(delete(MCP_EVENTS).where(_T.created_ms < cutoff)).rowcount
            counted = _T.kind != EventKind.SESSION.value
            total = conn.execute(select(func.coalesce(func.sum(_T.size), 0)).where(counted)
                                 ).scalar_one()
            excess = int(total) - self.bounds.max_bytes
            if excess > 0:
                last = None
                for seq, size in conn.execute(
                    select(_T.seq, _T.size).where(counted).order_by(_T.seq)
                ):
                    last, excess = seq, excess - size
                    if excess <= 0:
                        break
                if last is not None:
                    gone += conn.execute(
                        delete(MCP_EVENTS).where(counted, _T.seq <= last)).rowcount
        return gone

    # ------------------------------------------------------------ rows

    def _insert(self, session_id: str, stream_id: str, kind: EventKind, message: str | None) -> str:
        if len(stream_id) > ID_LEN:
            raise GateUsageError(f"MCP stream id longer than {ID_LEN} characters")
        event_id, now = new_event_id(), _now_ms()
        size = len(message.encode()) if message else 0
        with self.engine.begin() as conn:
            conn.execute(MCP_EVENTS.insert().values(
                event_id=event_id, session_id=session_id, stream_id=stream_id, kind=kind.value,
                message=message, size=size, created_ms=now,
            ))
            if kind is not EventKind.SESSION:  # the session is as young as its newest row
                conn.execute(update(MCP_EVENTS).where(
                    _T.session_id == session_id, _T.kind == EventKind.SESSION.value,
                ).values(created_ms=now))
        return event_id

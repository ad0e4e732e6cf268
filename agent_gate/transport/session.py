"""The transport's decisions as a sans-IO state machine (h11 style).

``StreamSession`` never touches a socket, a clock or a sleep: the stream loop
(``loop``, run by ``sync_io`` and ``async_io``) tells it what happened and
*when* (``now`` is an argument of every method that needs time), and it answers
with events to yield, an action (reconnect after a delay, or finish) or a typed
error. Every rule of issue 6 lives here once, for both the sync and the async paths:

* a non-2xx status or a non-``text/event-stream`` 2xx is an error before any
  byte is decoded;
* byte limits are the decoder's, time limits are checked against ``now`` on
  every chunk, and heartbeats never count as progress;
* a lost connection is resumed only through the resume strategy, only when
  the request is safe to send again (GET) or the caller marked it resumable,
  and only within the policy's bounds; otherwise the stream is truncated;
* the WHATWG last event ID and reconnection time survive reconnects.

Life of a session::

    READY --begin_connection--> CONNECTING --response_started(2xx SSE)--> STREAMING
    CONNECTING/STREAMING --connection lost, resumable--> BACKOFF --begin_connection--> CONNECTING
    STREAMING --terminal event--> COMPLETED
    any --cannot resume--> TRUNCATED      any --typed error--> FAILED
    any --caller stops--> CLOSED
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from enum import Enum
from typing import NoReturn

from agent_gate.errors import (
    StreamConnectError,
    StreamContentTypeError,
    StreamError,
    StreamHTTPStatusError,
    StreamIdleTimeout,
    StreamLimitExceeded,
    StreamProgressTimeout,
    StreamTimeout,
    StreamTruncatedError,
    TruncationReason,
)
from agent_gate.sse import ServerSentEvent, SSEDecoder, SSELimitExceeded
from agent_gate.transport.config import ReconnectPolicy, StreamLimits
from agent_gate.transport.http import (
    error_excerpt,
    is_event_stream,
    is_retryable,
    retry_after_seconds,
    shown_media_type,
)
from agent_gate.transport.resume import (
    LastEventIdResume,
    ResumeState,
    ResumeStrategy,
    StreamRequest,
)

TerminalPredicate = Callable[[ServerSentEvent], bool]


class StreamState(Enum):
    READY = "ready"
    """Nothing sent yet."""
    CONNECTING = "connecting"
    """A request was sent; its response headers have not arrived."""
    STREAMING = "streaming"
    """A 2xx ``text/event-stream`` body is being decoded."""
    BACKOFF = "backoff"
    """The connection was lost; a resume request waits for its delay."""
    COMPLETED = "completed"
    """The caller's terminal event arrived. The only state that means the answer is whole."""
    TRUNCATED = "truncated"
    """Ended without the terminal event and cannot be resumed (see ``truncation``)."""
    FAILED = "failed"
    """A typed error ended the stream."""
    CLOSED = "closed"
    """The caller stopped reading first."""


_FINAL = frozenset(
    {StreamState.COMPLETED, StreamState.TRUNCATED, StreamState.FAILED, StreamState.CLOSED}
)


@dataclass(frozen=True, slots=True)
class Reconnect:
    """Wait ``delay`` seconds, then send ``request`` (reconnect ``attempt`` of the current run)."""

    delay: float
    request: StreamRequest
    attempt: int
    last_event_id: str
    cause: str
    """Why the previous connection ended: ``eof``, an httpx error class name, a status."""


@dataclass(frozen=True, slots=True)
class Finished:
    """The stream is over: ``state`` is COMPLETED or TRUNCATED."""

    state: StreamState
    reason: TruncationReason | None = None


Action = Reconnect | Finished


@dataclass(frozen=True, slots=True)
class StreamStats:
    """Diagnostics of one stream: counts, ids and offsets, never payload."""

    state: str
    connections: int
    reconnects: int
    bytes: int
    """Body bytes received, all connections together."""
    events: int
    """Events yielded, heartbeats included."""
    heartbeats: int
    comments: int
    last_event_id: str
    last_event_type: str | None
    retry_ms: int | None
    status: int | None
    """HTTP status of the latest response."""
    discarded_partial_events: int
    """Connections that ended inside an event (its bytes were dropped, never dispatched)."""
    truncation: str | None

    def as_dict(self) -> dict[str, object]:
        """Every field by its name (``StreamEnd.as_dict`` is the decoder's counterpart)."""
        return asdict(self)


class StreamSession:
    """Decisions for one logical stream, across all of its connections."""

    def __init__(
        self,
        request: StreamRequest,
        *,
        is_terminal: TerminalPredicate,
        limits: StreamLimits | None = None,
        policy: ReconnectPolicy | None = None,
        strategy: ResumeStrategy | None = None,
        resumable: bool = False,
        last_event_id: str = "",
        rng: random.Random | None = None,
    ) -> None:
        self._original = request
        self._is_terminal = is_terminal
        self.limits = limits or StreamLimits()
        self.policy = policy or ReconnectPolicy()
        self._strategy: ResumeStrategy = strategy or LastEventIdResume()
        self._resumable = resumable
        self._rng = rng or random.Random()
        self._state = StreamState.READY
        self._request = (
            request.with_header("Last-Event-ID", last_event_id) if last_event_id else request
        )
        self._last_id = last_event_id
        self._last_event: ServerSentEvent | None = None
        self._last_type: str | None = None
        self._retry_ms: int | None = None
        self._status: int | None = None
        self._decoder: SSEDecoder | None = None
        self._conn_has_id = False
        self._connections = 0
        self._reconnects = 0
        self._attempt = 0  # reconnects since the last event that was progress
        self._bytes_done = 0  # bytes of connections already ended
        self._comments_done = 0
        self._events = 0
        self._heartbeats = 0
        self._discarded = 0
        self._truncation: TruncationReason | None = None
        self._pending_error: StreamError | None = None
        self._started = 0.0
        self._last_byte = 0.0
        self._last_progress = 0.0

    # -- observation ----------------------------------------------------------

    @property
    def state(self) -> StreamState:
        return self._state

    @property
    def connection(self) -> int:
        """1-based number of the current (or last) connection."""
        return self._connections

    @property
    def last_event_id(self) -> str:
        return self._last_id

    @property
    def retry_ms(self) -> int | None:
        return self._retry_ms

    @property
    def truncation(self) -> TruncationReason | None:
        return self._truncation

    @property
    def stats(self) -> StreamStats:
        dec = self._decoder
        live_bytes = dec.bytes_received if dec is not None else 0
        live_comments = dec.comments if dec is not None else 0
        return StreamStats(
            state=self._state.value,
            connections=self._connections,
            reconnects=self._reconnects,
            bytes=self._bytes_done + live_bytes,
            events=self._events,
            heartbeats=self._heartbeats,
            comments=self._comments_done + live_comments,
            last_event_id=self._last_id,
            last_event_type=self._last_type,
            retry_ms=self._retry_ms,
            status=self._status,
            discarded_partial_events=self._discarded,
            truncation=self._truncation.value if self._truncation else None,
        )

    def truncation_error(self) -> StreamTruncatedError:
        reason = self._truncation or TruncationReason.ATTEMPTS_EXHAUSTED
        return StreamTruncatedError(
            reason,
            events=self._events,
            connections=self._connections,
            last_event_id=self._last_id,
            discarded_partial_event=self._discarded > 0,
        )

    # -- time -------------------------------------------------------------------

    def read_timeout(self, client_read: float | None) -> float | None:
        """The httpx read timeout to give every request of this stream.

        A read that sees no byte for this long proves the smallest of the
        limits was exceeded (see ``read_timed_out``); the loop's own clock
        checks catch what a read timeout cannot (heartbeats keep reads short).
        """
        values = [
            v
            for v in (client_read, self.limits.idle_timeout, self.limits.progress_timeout)
            if v is not None
        ]
        return min(values) if values else None

    def expired(self, now: float) -> StreamTimeout | None:
        """The time limit exceeded at ``now``, if any; the earliest deadline wins."""
        if self._state not in (StreamState.CONNECTING, StreamState.STREAMING):
            return None
        limits = self.limits
        found: list[tuple[float, StreamTimeout]] = []
        if limits.idle_timeout is not None and now - self._last_byte >= limits.idle_timeout:
            found.append(
                (
                    self._last_byte + limits.idle_timeout,
                    self._timeout(StreamIdleTimeout, limits.idle_timeout, now - self._last_byte),
                )
            )
        if (
            limits.progress_timeout is not None
            and now - self._last_progress >= limits.progress_timeout
        ):
            found.append(
                (
                    self._last_progress + limits.progress_timeout,
                    self._timeout(
                        StreamProgressTimeout, limits.progress_timeout, now - self._last_progress
                    ),
                )
            )
        if not found:
            return None
        return min(found, key=lambda pair: pair[0])[1]

    def read_timed_out(self, now: float, read_timeout: float) -> StreamTimeout:
        """Name the limit behind an httpx read timeout of ``read_timeout`` seconds.

        No byte arrived for ``read_timeout``, so no event either: the smallest
        configured limit is exceeded. A tie is reported as idle, the more
        specific statement. A client read timeout smaller than both limits is
        reported as idle with that value as its limit.
        """
        limits = self.limits
        idle, progress = limits.idle_timeout, limits.progress_timeout
        if progress is not None and progress <= read_timeout and (idle is None or progress < idle):
            return self._timeout(StreamProgressTimeout, progress, now - self._last_progress)
        limit = idle if idle is not None and idle <= read_timeout else read_timeout
        return self._timeout(StreamIdleTimeout, limit, now - self._last_byte)

    def _timeout(self, cls: type[StreamTimeout], limit: float, waited: float) -> StreamTimeout:
        offset = self._decoder.bytes_received if self._decoder is not None else 0
        return cls(limit, waited, offset, self._events, self._connections)

    # -- connection lifecycle ---------------------------------------------------

    def begin_connection(self, now: float) -> StreamRequest:
        """The request to send now; starts this connection's clocks."""
        if self._state not in (StreamState.READY, StreamState.BACKOFF):
            raise RuntimeError(f"begin_connection() in state {self._state.value}")
        self._state = StreamState.CONNECTING
        self._connections += 1
        self._started = self._last_byte = self._last_progress = now
        return self._request

    def connect_failed(self, now: float, cause: str) -> Action:
        """The request could not be sent or no response headers arrived.

        The first request is never sent twice by the transport: the failure is
        the caller's (or its retry layer's) to judge. A failed *resume* counts
        as an attempt and is retried within the policy.
        """
        self._require(StreamState.CONNECTING)
        if self._connections == 1:
            self._fail(StreamConnectError(cause, self._connections))
        return self._lost(now, cause, retry_after=None)

    def response_started(
        self,
        now: float,
        status: int,
        headers: Mapping[str, str],
        error_body: bytes = b"",
        *,
        error_body_truncated: bool = False,
    ) -> Action | None:
        """Judge the response head; ``None`` means: read the body as SSE.

        For a non-2xx status the I/O layer reads at most
        ``limits.max_error_body_bytes`` of the body first and passes it here.
        """
        self._require(StreamState.CONNECTING)
        self._status = status
        self._last_byte = now
        if 200 <= status < 300:
            if status == 204:
                # WHATWG: 204 means "do not reconnect". Nothing more will come.
                return self._finish_truncated(TruncationReason.SERVER_ENDED)
            content_type = headers.get("content-type")
            if not is_event_stream(content_type):
                self._fail(
                    StreamContentTypeError(
                        status, shown_media_type(content_type), self._connections
                    )
                )
            self._state = StreamState.STREAMING
            self._decoder = SSEDecoder(
                max_line_bytes=self.limits.max_line_bytes,
                max_event_bytes=self.limits.max_event_bytes,
                max_stream_bytes=self.limits.max_response_bytes,
            )
            self._conn_has_id = False
            return None
        retry_after = retry_after_seconds(headers)
        if self._connections > 1 and status in self.policy.reconnect_statuses:
            return self._lost(now, f"HTTP {status}", retry_after=retry_after)
        excerpt, error_type = error_excerpt(error_body, truncated=error_body_truncated)
        self._fail(
            StreamHTTPStatusError(
                status,
                excerpt=excerpt,
                error_type=error_type,
                retryable=is_retryable(status, headers),
                retry_after=retry_after,
                connection=self._connections,
            )
        )

    def data_received(self, now: float, chunk: bytes) -> list[ServerSentEvent]:
        """Decode a chunk; return the events to yield, in order.

        Stops at the caller's terminal event (state COMPLETED; anything after
        it in the chunk is not yielded). A byte limit violation returns the
        events completed before it and leaves the error for ``raise_pending``,
        so that nothing the stream did deliver is lost.
        """
        self._require(StreamState.STREAMING)
        if not chunk:
            return []
        self._last_byte = now
        dec = self._decoder
        assert dec is not None
        try:
            raw = dec.feed(chunk)
        except SSELimitExceeded as exc:
            raw = list(exc.events)
            error: StreamError | None = StreamLimitExceeded(
                exc.limit, exc.limit_bytes, exc.offset, self._events + len(raw), self._connections
            )
        else:
            error = None
        if dec.retry is not None:
            self._retry_ms = dec.retry
        out = self._accept(now, raw)
        if error is not None and self._state is not StreamState.COMPLETED:
            self._bytes_done += dec.bytes_received
            self._comments_done += dec.comments
            self._decoder = None
            self._state = StreamState.FAILED
            self._pending_error = error
        return out

    def _accept(self, now: float, raw: list[ServerSentEvent]) -> list[ServerSentEvent]:
        out: list[ServerSentEvent] = []
        is_heartbeat = self.limits.is_heartbeat
        for event in raw:
            if event.id:
                self._conn_has_id = True
            elif not self._conn_has_id and self._last_id:
                # A new connection inherits the last event ID until the server
                # sets one (WHATWG keeps it on the EventSource, not the response).
                event = event._replace(id=self._last_id)
            self._last_id = event.id
            self._events += 1
            self._last_event = event
            self._last_type = event.event
            if is_heartbeat(event):
                self._heartbeats += 1
            else:
                self._last_progress = now
                self._attempt = 0
            self._strategy.observe(event)
            out.append(event)
            if self._is_terminal(event):
                self._close_decoder()
                self._state = StreamState.COMPLETED
                return out
        dec = self._decoder
        if dec is not None and dec.last_event_id:
            self._conn_has_id = True
        if self._conn_has_id and dec is not None:
            self._last_id = dec.last_event_id  # an id-only block moves it too
        return out

    def raise_pending(self) -> None:
        """Raise the error ``data_received`` deferred, once its events were yielded."""
        error, self._pending_error = self._pending_error, None
        if error is not None:
            raise error

    def connection_lost(self, now: float, cause: str = "eof") -> Action:
        """The body ended or broke before the terminal event: resume or truncate."""
        if self._state is StreamState.COMPLETED:
            return Finished(StreamState.COMPLETED)
        if self._state not in (StreamState.CONNECTING, StreamState.STREAMING):
            raise RuntimeError(f"connection_lost() in state {self._state.value}")
        return self._lost(now, cause, retry_after=None)

    def stalled(self, now: float, timeout: StreamTimeout) -> Action:
        """A time limit tripped: raise it, or resume if the policy says so."""
        if not self.policy.resume_stalled:
            self._close_decoder()
            self._fail(timeout)
        return self._lost(now, timeout.limit, retry_after=None)

    def close(self) -> None:
        """The caller stopped reading: no reconnect will follow."""
        if self._state not in _FINAL:
            self._close_decoder()
            self._state = StreamState.CLOSED

    # -- internals --------------------------------------------------------------

    def _require(self, state: StreamState) -> None:
        if self._state is not state:
            raise RuntimeError(f"expected state {state.value}, not {self._state.value}")

    def _close_decoder(self) -> None:
        dec = self._decoder
        if dec is None:
            return
        self._decoder = None
        self._bytes_done += dec.bytes_received
        self._comments_done += dec.comments
        end = dec.end()
        if end.discarded_partial_event:
            self._discarded += 1

    def _fail(self, error: StreamError) -> NoReturn:
        self._state = StreamState.FAILED
        raise error

    def _finish_truncated(self, reason: TruncationReason) -> Finished:
        self._close_decoder()
        self._state = StreamState.TRUNCATED
        self._truncation = reason
        return Finished(StreamState.TRUNCATED, reason)

    def _lost(self, now: float, cause: str, *, retry_after: float | None) -> Action:
        self._close_decoder()
        self._attempt += 1
        state = ResumeState(
            original=self._original,
            last_event_id=self._last_id,
            last_event=self._last_event,
            events=self._events,
            attempt=self._attempt,
            resumable=self._resumable,
        )
        nxt = self._strategy.next_request(state)
        if isinstance(nxt, TruncationReason):
            return self._finish_truncated(nxt)
        if not nxt.is_safe and not self._resumable:
            # Re-sending a POST would ask for a new answer: never automatic.
            return self._finish_truncated(TruncationReason.NOT_RESUMABLE)
        if (
            self._attempt > self.policy.max_attempts
            or self._reconnects >= self.policy.max_reconnects
        ):
            return self._finish_truncated(TruncationReason.ATTEMPTS_EXHAUSTED)
        delay = self.policy.delay(
            self._attempt, retry_ms=self._retry_ms, retry_after=retry_after, rng=self._rng
        )
        self._reconnects += 1
        self._request = nxt
        self._state = StreamState.BACKOFF
        return Reconnect(delay, nxt, self._attempt, self._last_id, cause)

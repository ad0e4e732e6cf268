"""Typed errors of the streaming transport.

Each names what tripped (a status, a limit, a reason) with counts and byte
offsets, never a byte of the stream's payload: these messages reach logs, and a
stream carries the model's output and the user's tool arguments. The one place
a response body is quoted at all is ``StreamHTTPStatusError.excerpt``, and that
is bounded and redacted (see ``agent_gate.transport.http.error_excerpt``).
"""

from __future__ import annotations

from enum import Enum

from agent_gate.errors import AgentGateError


class TruncationReason(Enum):
    """Why a stream that ended without its terminal event could not be resumed."""

    NO_EVENT_ID = "no_event_id"
    """The server gave no event id before the cut: there is no position to resume from."""
    NOT_RESUMABLE = "not_resumable"
    """The request was not a GET and the caller did not mark it resumable: re-sending
    it would ask for a new answer, not for the rest of this one."""
    NO_RESUME_POINT = "no_resume_point"
    """A resume strategy had not seen what it needs (e.g. a response id) to resume."""
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    """Reconnects kept failing or kept delivering nothing new; the bound was reached."""
    SERVER_ENDED = "server_ended"
    """The server answered 204 No Content: WHATWG's "stop reconnecting"."""


class StreamError(AgentGateError):
    """Base of every error the transport raises on purpose."""


class StreamConnectError(StreamError):
    """The request could not be sent or its response headers never arrived.

    Carries the httpx exception class name only: its message may quote a URL
    with credentials in the query string.
    """

    def __init__(self, cause: str, connection: int) -> None:
        self.cause = cause
        self.connection = connection
        super().__init__(f"stream connection {connection} failed: {cause}")


class StreamHTTPStatusError(StreamError):
    """A non-2xx status: the server refused, before any event was decoded."""

    def __init__(
        self,
        status: int,
        *,
        excerpt: str,
        error_type: str | None,
        retryable: bool,
        retry_after: float | None,
        connection: int,
    ) -> None:
        self.status = status
        self.excerpt = excerpt
        """Bounded and redacted summary of a JSON error body; never the whole body."""
        self.error_type = error_type
        """The provider's error type or code (``rate_limit_error``, ``overloaded_error``...)."""
        self.retryable = retryable
        """What a retry layer should conclude (429, 408, 409, 5xx, ``x-should-retry``).
        The transport itself never re-sends a request that was refused."""
        self.retry_after = retry_after
        self.connection = connection
        kind = f" {error_type}" if error_type else ""
        super().__init__(
            f"stream request got HTTP {status}{kind} (connection {connection}): {excerpt}"
        )


class StreamContentTypeError(StreamError):
    """A 2xx response that is not ``text/event-stream``: its body is never parsed as SSE."""

    def __init__(self, status: int, media_type: str, connection: int) -> None:
        self.status = status
        self.media_type = media_type
        self.connection = connection
        shown = media_type or "(none)"
        super().__init__(
            f"stream response HTTP {status} has Content-Type {shown}, not text/event-stream "
            f"(connection {connection}); the body was not read"
        )


class StreamLimitExceeded(StreamError):
    """A byte limit of the decoder tripped (line, event data, or one response).

    ``offset`` is the byte offset in the response of connection ``connection``;
    ``event_index`` counts events across the whole stream, reconnects included.
    """

    def __init__(
        self, limit: str, limit_bytes: int, offset: int, event_index: int, connection: int
    ) -> None:
        self.limit = limit
        self.limit_bytes = limit_bytes
        self.offset = offset
        self.event_index = event_index
        self.connection = connection
        super().__init__(
            f"stream limit {limit}={limit_bytes} bytes exceeded at byte offset {offset} "
            f"of connection {connection} (event index {event_index})"
        )


class StreamTimeout(StreamError):
    """Base of the two time limits."""

    limit: str

    def __init__(
        self, limit_seconds: float, waited: float, offset: int, event_index: int, connection: int
    ) -> None:
        self.limit_seconds = limit_seconds
        self.waited = waited
        self.offset = offset
        self.event_index = event_index
        self.connection = connection
        super().__init__(
            f"stream limit {self.limit}={limit_seconds:g}s exceeded after {waited:.3f}s "
            f"at byte offset {offset} of connection {connection} (event index {event_index})"
        )


class StreamIdleTimeout(StreamTimeout):
    """No byte at all arrived for ``limit_seconds``: the connection is silent."""

    limit = "idle_timeout"


class StreamProgressTimeout(StreamTimeout):
    """No event other than a heartbeat arrived for ``limit_seconds``.

    Bytes may have kept flowing (comments, ``ping`` events): a server or proxy
    that only keeps the connection alive is not producing an answer.
    """

    limit = "progress_timeout"


class StreamTruncatedError(StreamError):
    """The stream ended before the caller's terminal event and could not be resumed.

    Nothing received after the last complete event may be treated as delivered,
    and a closed connection says nothing about whether the response finished.
    """

    def __init__(
        self,
        reason: TruncationReason,
        *,
        events: int,
        connections: int,
        last_event_id: str,
        discarded_partial_event: bool,
    ) -> None:
        self.reason = reason
        self.events = events
        self.connections = connections
        self.last_event_id = last_event_id
        self.discarded_partial_event = discarded_partial_event
        partial = ", a partial event was discarded" if discarded_partial_event else ""
        super().__init__(
            f"stream truncated ({reason.value}) after {events} events over "
            f"{connections} connection(s){partial}"
        )

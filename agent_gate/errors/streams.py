"""What the stream rooms raise, bottom up: plain and strict JSON, the SSE decoder, the
transport, the provider adapters and the accumulator. Each names limits, byte
offsets, event indexes and ids; never a byte of the payload.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any

from agent_gate.errors.base import AgentGateError, safe_name

__all__ = [
    "AccumulatorClosedError", "AccumulatorError", "AccumulatorLimitExceeded", "ArgumentsTooDeep",
    "MalformedEventError", "ProtocolNotDetected", "ProviderError", "ReplayConflictError",
    "ReplayLimitExceeded", "SSEError", "SSELimitExceeded", "SSEStateError", "StreamConnectError",
    "StreamContentTypeError", "StreamError", "StreamHTTPStatusError", "StreamIdleTimeout",
    "StreamLimitExceeded", "StreamProgressTimeout", "StreamTimeout", "StreamTruncatedError",
    "StrictParseError", "TruncationReason", "UnknownProviderError", "UnrecognizedStream",
]


# ------------------------------------------------------------ plain JSON


class ArgumentsTooDeep(AgentGateError, ValueError):
    """Arguments nest deeper than the configured limit. The message names the limit,
    never the value; ``reason`` is the identifier a rejected call records."""

    reason = "arguments_too_deep"

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"arguments nest deeper than {limit} levels")


# ----------------------------------------------------------- strict JSON


class StrictParseError(AgentGateError):
    """Argument text failed strict parsing; ``reason`` is an identifier
    (``invalid_json``, ``duplicate_key``, ``concatenated_json``,
    ``arguments_not_object``, ``invalid_unicode``, ``arguments_too_deep``), never
    the text."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


# ------------------------------------------------------------------- sse
# Each names the limit, the byte offset and the event index; never a byte of the payload.


class SSEError(AgentGateError):
    """Base of the SSE decoder's errors."""


class SSEStateError(SSEError):
    """The decoder was used after ``end()`` or after it raised a limit error."""


class SSELimitExceeded(SSEError):
    """A configured limit was exceeded; the decoder is unusable afterwards.

    ``events`` holds the events that were completed by the same ``feed()`` call
    before the violation, so nothing the stream did deliver is lost.
    """

    def __init__(
        self, limit: str, limit_bytes: int, offset: int, event_index: int,
        events: list[Any] | None = None,
    ) -> None:
        self.limit = limit
        self.limit_bytes = limit_bytes
        self.offset = offset
        self.event_index = event_index
        self.events: list[Any] = list(events or ())  # the ServerSentEvents
        super().__init__(
            f"SSE limit {limit}={limit_bytes} bytes exceeded at byte offset {offset} "
            f"(event index {event_index})"
        )


# ------------------------------------------------------------- transport
# Counts, offsets and reasons, never the stream's payload; the one response excerpt
# quoted anywhere (StreamHTTPStatusError.excerpt) is bounded and redacted.


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

    def _at(self, offset: int, event_index: int, connection: int) -> str:
        """Keep where the stream stopped and say it as every transport error does.

        ``offset`` is the byte offset in the response of connection ``connection``;
        ``event_index`` counts events across the whole stream, reconnects included.
        """
        self.offset = offset
        self.event_index = event_index
        self.connection = connection
        return f"at byte offset {offset} of connection {connection} (event index {event_index})"


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
    """A byte limit of the decoder tripped (line, event data, or one response)."""

    def __init__(
        self, limit: str, limit_bytes: int, offset: int, event_index: int, connection: int
    ) -> None:
        self.limit = limit
        self.limit_bytes = limit_bytes
        where = self._at(offset, event_index, connection)
        super().__init__(f"stream limit {limit}={limit_bytes} bytes exceeded {where}")


class StreamTimeout(StreamError):
    """Base of the two time limits."""

    limit: str

    def __init__(
        self, limit_seconds: float, waited: float, offset: int, event_index: int, connection: int
    ) -> None:
        self.limit_seconds = limit_seconds
        self.waited = waited
        where = self._at(offset, event_index, connection)
        super().__init__(
            f"stream limit {self.limit}={limit_seconds:g}s exceeded after {waited:.3f}s {where}"
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


# ------------------------------------------------------------- providers
# The event index, the provider and the field that was wrong; never the event's data.


class ProviderError(AgentGateError):
    """Base of the errors raised while translating a provider's events."""


class UnknownProviderError(ProviderError):
    """No adapter is registered under the requested name."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"unknown provider {safe_name(name)!r}; known: {', '.join(known)}")


class MalformedEventError(ProviderError):
    """An event could not be parsed or does not have the shape its type requires."""

    def __init__(self, provider: str, event_index: int, problem: str) -> None:
        self.provider = provider
        self.event_index = event_index
        self.problem = problem
        super().__init__(f"{provider}: malformed event at index {event_index}: {problem}")


class ReplayConflictError(ProviderError):
    """A replayed event (same sequence number or event id) carries different content.

    A stream that resumes with different bytes under the same position is not a
    replay but a different response; continuing would mix two answers.
    """

    def __init__(self, event_index: int, key: str) -> None:
        self.event_index = event_index
        self.key = key
        super().__init__(
            f"event at index {event_index} repeats position {key} with different content"
        )


class ReplayLimitExceeded(ProviderError):
    """The replay guard would remember more positions than its bound allows.

    Forgetting one instead would let a replayed event (an argument fragment) be
    applied twice, so the stream is abandoned, as for the accumulator's own limits.
    """

    def __init__(self, limit: str, limit_value: int, event_index: int) -> None:
        self.limit = limit
        self.limit_value = limit_value
        self.event_index = event_index
        super().__init__(f"limit {limit}={limit_value} exceeded at event index {event_index}")


# ----------------------------------------------------------- accumulator


class AccumulatorError(AgentGateError):
    """Base of the accumulator's own errors."""


class AccumulatorClosedError(AccumulatorError):
    """``feed`` was called after ``close``."""


class UnrecognizedStream(AccumulatorError):
    """The chosen adapter recognised none of the stream's events: the wrong
    protocol was chosen (or the server speaks another one). Raised after
    ``UNRECOGNIZED_LIMIT`` such events, or at ``close()`` for a shorter stream,
    instead of ending the response quietly as ``truncated``."""

    def __init__(self, provider: str, unknown: int, types: Iterable[str]) -> None:
        self.provider = provider
        self.unknown = unknown
        listed = ", ".join(sorted(types)[:6]) or "none named"
        super().__init__(
            f"none of the {unknown} events is of the {provider} protocol (types seen: "
            f"{listed}); is the provider the right one?"
        )


class AccumulatorLimitExceeded(AccumulatorError):
    """A configured bound was exceeded; the stream must be abandoned."""

    def __init__(self, limit: str, limit_value: int, event_index: int) -> None:
        self.limit = limit
        self.limit_value = limit_value
        self.event_index = event_index
        super().__init__(f"limit {limit}={limit_value} exceeded at event index {event_index}")


class ProtocolNotDetected(AccumulatorError):
    """``provider="auto"`` could not tell the protocol from the stream's first events."""

    def __init__(self, seen: int) -> None:
        self.seen = seen
        super().__init__(
            f"could not tell the protocol from the first {seen} events (none is an OpenAI "
            "Responses, Chat Completions, Anthropic or Gemini event); name the provider"
        )

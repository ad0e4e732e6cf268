"""How a stream is re-subscribed after a cut: the request value and the strategies.

Reconnect is not retry. Re-sending the request that *created* an answer (a
``POST /v1/responses``, ``POST /v1/messages``) asks the model again: a new
answer, new call ids, possibly the same external writes proposed twice. What a
reconnect may do is ask for the rest of the answer already being produced, and
only a server can say how: the WHATWG ``Last-Event-ID`` header on a GET
subscription, or an API's own cursor (OpenAI Responses background mode:
``GET /v1/responses/{id}?stream=true&starting_after=N``).

A strategy is a small pure object: it watches the events of one stream
(``observe``) and, when the connection is lost, builds the request that resumes
it or says why it cannot (``next_request``). It never sends anything; the
transport decides *whether* to send (bounds, backoff, the POST rule) and does.
One strategy instance serves exactly one stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from agent_gate.errors import TruncationReason
from agent_gate.sse import ServerSentEvent

SAFE_METHODS = frozenset({"GET", "HEAD"})
"""Methods whose re-sending asks for a representation, never for a new answer."""

_BODY_HEADERS = frozenset({"content-type", "content-length", "transfer-encoding"})


@dataclass(frozen=True, slots=True)
class StreamRequest:
    """What to send, independent of any client.

    The I/O layer turns it into a request with the caller's
    ``client.build_request`` so the client's base URL, default headers, auth,
    cookies and proxies apply to every reconnect as to the first request.
    """

    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str] = field(default_factory=dict)
    content: bytes | None = None
    json: Any = None

    @property
    def is_safe(self) -> bool:
        return self.method.upper() in SAFE_METHODS

    def with_header(self, name: str, value: str) -> StreamRequest:
        """A copy with ``name`` set to ``value`` (any previous spelling of it removed)."""
        lowered = name.lower()
        headers = {k: v for k, v in self.headers.items() if k.lower() != lowered}
        headers[name] = value
        return replace(self, headers=headers)

    def as_get(self, url: str, params: Mapping[str, str]) -> StreamRequest:
        """A body-less GET to ``url`` keeping this request's headers (auth, versions)."""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _BODY_HEADERS}
        return StreamRequest("GET", url, headers=headers, params=dict(params))


@dataclass(frozen=True, slots=True)
class ResumeState:
    """What the transport knows when a connection is lost."""

    original: StreamRequest
    """The request the caller asked for (never modified by reconnects)."""
    last_event_id: str
    """The WHATWG last event ID string, carried across connections (``""`` if none)."""
    last_event: ServerSentEvent | None
    events: int
    """Events yielded so far, all connections together."""
    attempt: int
    """1-based number of the reconnect being prepared within the current run."""
    resumable: bool
    """The caller declared that re-sending a non-GET request with ``Last-Event-ID``
    resumes the same answer instead of creating a new one."""


@runtime_checkable
class ResumeStrategy(Protocol):
    """Builds the request that continues a stream, or says why there is none."""

    def observe(self, event: ServerSentEvent) -> None:
        """Called with every event the transport yields, in order."""

    def next_request(self, state: ResumeState) -> StreamRequest | TruncationReason:
        """The request that resumes the stream after the events seen so far."""


class LastEventIdResume:
    """The WHATWG way: send the same request again with ``Last-Event-ID``.

    Only meaningful when the server put ids on its events and replays what
    follows an id. The same request is re-sent, so for a POST it is used only
    when the caller marked the endpoint resumable (a POST that merely
    *subscribes*, like MCP's streamable HTTP); otherwise the POST rule of the
    transport refuses it and the stream is reported truncated.
    """

    __slots__ = ()

    def observe(self, event: ServerSentEvent) -> None:
        """Stateless: the transport already tracks the last event ID."""

    def next_request(self, state: ResumeState) -> StreamRequest | TruncationReason:
        if not state.last_event_id:
            return TruncationReason.NO_EVENT_ID
        return state.original.with_header("Last-Event-ID", state.last_event_id)

"""Streaming transport: an httpx response in, ``ServerSentEvent``s out.

Checks the status and the media type before decoding, enforces byte and time
limits (heartbeats are not progress), and re-subscribes after a cut only where
that continues the same answer: ``Last-Event-ID`` on a GET (or an endpoint the
caller marked resumable), or an API's own cursor through a resume strategy.
It never re-sends a request that would regenerate an answer; see
``agent_gate.transport.resume`` for why.

The transport knows no provider: the caller says which event is terminal
(``is_terminal``), and ``terminal_on`` builds the usual predicates. Its errors
(``StreamError`` and its subclasses) live with every other in ``agent_gate.errors``.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent_gate.sse import ServerSentEvent
from agent_gate.transport.async_io import AsyncEventStream, astream_events
from agent_gate.transport.config import ReconnectPolicy, StreamLimits
from agent_gate.transport.http import error_excerpt, is_event_stream, media_type, redact
from agent_gate.transport.openai_responses import OpenAIResponsesResume
from agent_gate.transport.options import StreamOptions
from agent_gate.transport.resume import (
    LastEventIdResume,
    ResumeState,
    ResumeStrategy,
    StreamRequest,
)
from agent_gate.transport.session import (
    Finished,
    Reconnect,
    StreamSession,
    StreamState,
    StreamStats,
    TerminalPredicate,
)
from agent_gate.transport.sync_io import EventStream, stream_events


def terminal_on(event_types: Iterable[str] = (), data: Iterable[str] = ()) -> TerminalPredicate:
    """A terminal predicate by SSE event type and/or exact data.

    ``terminal_on(event_types={"response.completed", "response.failed",
    "response.incomplete"})`` for OpenAI Responses, ``terminal_on(event_types=
    {"message_stop"})`` for Anthropic, ``terminal_on(data={"[DONE]"})`` for Chat
    Completions. Providers that name the type only inside the JSON need their
    adapter's predicate instead.
    """
    types = frozenset(event_types)
    values = frozenset(data)
    if not types and not values:
        raise ValueError("terminal_on needs at least one event type or data value")

    def is_terminal(event: ServerSentEvent) -> bool:
        return event.event in types or event.data in values

    return is_terminal


__all__ = [
    "AsyncEventStream",
    "EventStream",
    "Finished",
    "LastEventIdResume",
    "OpenAIResponsesResume",
    "Reconnect",
    "ReconnectPolicy",
    "ResumeState",
    "ResumeStrategy",
    "StreamLimits",
    "StreamOptions",
    "StreamRequest",
    "StreamSession",
    "StreamState",
    "StreamStats",
    "TerminalPredicate",
    "astream_events",
    "error_excerpt",
    "is_event_stream",
    "media_type",
    "redact",
    "stream_events",
    "terminal_on",
]

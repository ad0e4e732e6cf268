"""Typed errors of the SSE layer.

Every message names the limit, the byte offset in the stream and the index of
the event being assembled, and never a byte of the payload: these errors are
logged, and a stream's data is the model's output or the user's arguments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_gate.errors import AgentGateError

if TYPE_CHECKING:
    from agent_gate.sse.event import ServerSentEvent


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
        self,
        limit: str,
        limit_bytes: int,
        offset: int,
        event_index: int,
        events: list[ServerSentEvent] | None = None,
    ) -> None:
        self.limit = limit
        self.limit_bytes = limit_bytes
        self.offset = offset
        self.event_index = event_index
        self.events: list[ServerSentEvent] = list(events or ())
        super().__init__(
            f"SSE limit {limit}={limit_bytes} bytes exceeded at byte offset {offset} "
            f"(event index {event_index})"
        )

"""The values the SSE decoder hands out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class ServerSentEvent(NamedTuple):
    """One dispatched event, exactly as the WHATWG dispatch step defines it.

    A NamedTuple rather than a dataclass: it is immutable, compares by value, and
    costs one tuple allocation, which matters at millions of events per stream.
    """

    event: str
    """The event type; ``"message"`` when the block set none (or set it empty)."""
    data: str
    """The ``data`` lines of the block joined with LF (no trailing LF)."""
    id: str
    """The last event ID at dispatch time (inherited from earlier blocks)."""


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """What ``SSEDecoder.end()`` reports about a finished stream.

    ``discarded_partial_event`` is the negative control of SSE framing: an event
    whose terminating blank line never arrived was dropped, not dispatched, and
    the caller must not treat the stream as having delivered it.
    """

    discarded_partial_event: bool
    pending_bytes: int
    """Bytes buffered for the discarded event: its data so far and any unterminated line."""
    last_event_id: str
    retry: int | None
    events: int
    bytes: int
    comments: int

    def as_dict(self) -> dict[str, object]:
        return {
            "discarded_partial_event": self.discarded_partial_event,
            "pending_bytes": self.pending_bytes,
            "last_event_id": self.last_event_id,
            "retry": self.retry,
            "events": self.events,
            "bytes": self.bytes,
            "comments": self.comments,
        }

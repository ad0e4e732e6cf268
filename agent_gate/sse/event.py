"""The values the SSE decoder hands out."""

from __future__ import annotations

from dataclasses import asdict, dataclass
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
        """Every field by its name, so a field added later is never left out."""
        return asdict(self)

"""The proxy's event store: what lets a Streamable HTTP client resume a response.

Every message the proxy sends on a request's SSE stream is kept here under an
event id before it is sent; a client whose connection broke reconnects with
``Last-Event-ID`` and is sent the rest of that stream (the SDK's transport does the
replaying). Resuming re-sends what was produced; it never runs a tool: the call
itself is recorded in the ledger, and a request sent again as a new request is
answered from there (``identity``).

The store is in memory and bounded: the oldest events go first once ``max_events``
is reached, so a client that comes back after that many events starts its call
again (and is answered from the ledger). It is not kept on disk on purpose: the
SDK's session manager keeps sessions in memory, so after a restart the old session
id answers 404 before any event store is asked, and the stream being resumed died
with the process. A restart is survived by the ledger (a new session, the same
task, the call sent again), not by events.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.types import JSONRPCMessage

__all__ = ["MemoryEventStore"]


class MemoryEventStore(EventStore):
    """Events by id, in order, oldest dropped first past ``max_events``."""

    def __init__(self, max_events: int = 10_000) -> None:
        self.max_events = max_events
        self._events: OrderedDict[str, tuple[StreamId, JSONRPCMessage | None]] = OrderedDict()
        self._ids = itertools.count(1)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = str(next(self._ids))
        self._events[event_id] = (stream_id, message)
        while len(self._events) > self.max_events:
            self._events.popitem(last=False)
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        if last_event_id not in self._events:
            return None
        stream_id = self._events[last_event_id][0]
        after = False
        for event_id, (stream, message) in list(self._events.items()):
            if after and stream == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
            after = after or event_id == last_event_id
        return stream_id

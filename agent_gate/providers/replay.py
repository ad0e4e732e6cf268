"""Recognising events seen again after a reconnect, so they change nothing.

A resumed stream may overlap what was already read. Two positions identify an
event:

* a provider sequence number (OpenAI Responses ``sequence_number``): exact,
  one per event;
* the SSE last event ID. A server need not put ``id:`` on every event, so events
  are grouped into *runs* sharing one ID and identified by (ID, position in the
  run). A run that starts again is compared event by event with what was seen.

Content is compared exactly, and only when a position comes again: the guard
keeps each event's SSE data text by reference (the decoder allocated it anyway,
and it is immutable), or a mapping's sorted JSON snapshot
(``agent_gate.providers.base.event_content``), so the common case, a position
seen for the first time, costs a dictionary insert and nothing is hashed just
in case. An argument delta given as a mapping is kept as a shallow copy (its
fields are scalars) and snapshotted only if its position comes again. The
price is memory: the text of every positioned event stays alive for the
stream's life. The same position with the same content is a replay and
is dropped. The same sequence number with different content, or a
replay that diverges after its first event, is a different response and raises
``ReplayConflictError``. A revisited run may start again at its first event (a
server that resends the event carrying the ID) or at its second (a server that
resumes *after* that event, as WHATWG servers and agent-gate's own do, resending
the events that inherited the ID). A revisited run that matches neither is a
continuation: the client had only the event with the ID, and what follows is new.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from agent_gate.providers.base import mapping_content
from agent_gate.providers.errors import ReplayConflictError, safe_name


class ReplayGuard:
    """Per-stream memory of event positions and what was seen at each."""

    __slots__ = ("_by_key", "_current", "_cursor", "_runs")

    def __init__(self) -> None:
        self._by_key: dict[Hashable, Any] = {}
        self._runs: dict[str, list[Any]] = {}
        self._current: str | None = None
        self._cursor: int | None = None

    @property
    def positions(self) -> dict[Hashable, Any]:
        """What was seen at each provider position (sequence number), for a caller that
        records a first sighting itself: a position absent from it was never seen, and
        the caller stores the event's content (``event_content``, or a shallow copy of
        a mapping whose values are scalars) under it before applying the event."""
        return self._by_key

    def reconnected(self) -> None:
        """The transport opened a new connection: the next event starts a new run."""
        self._current = None
        self._cursor = None

    def is_replay(
        self,
        key: Hashable | None,
        sse_id: str,
        content: Callable[[], Hashable],
        event_index: int,
    ) -> bool:
        """Whether the event is one already applied; ``content`` is called only when
        the event has a position to compare at."""
        if key is None and not sse_id:
            self.unpositioned()
            return False
        return self.check(key, sse_id, content(), event_index)

    def unpositioned(self) -> None:
        """An event with neither key nor id: it ends any run being revisited."""
        self._current = None
        self._cursor = None

    def check(self, key: Hashable | None, sse_id: str, content: Any, event_index: int) -> bool:
        """``is_replay`` for an event that has a key or an SSE id, its content in hand."""
        if key is not None:
            seen = self._by_key.get(key)
            if seen is None:
                self._by_key[key] = content
                return False
            if type(seen) is dict:  # a mapping kept as a copy: compare as its snapshot would
                seen = mapping_content(seen)
            if seen == content:
                return True
            raise ReplayConflictError(event_index, _describe(key))
        return self._by_run(sse_id, content, event_index)

    def _by_run(self, sse_id: str, content: Any, event_index: int) -> bool:
        if sse_id != self._current:
            self._current = sse_id
            run = self._runs.get(sse_id)
            if run is None:
                self._runs[sse_id] = [content]
                self._cursor = None
                return False
            if run[0] == content:
                self._cursor = 1  # the server resent the event that set the id
                return True
            if len(run) > 1 and run[1] == content:
                # The WHATWG way (and agent-gate's own server): resume *after* the event
                # that set the id, resending the events that inherited it.
                self._cursor = 2
                return True
            run.append(content)
            self._cursor = None
            return False
        run = self._runs[sse_id]
        if self._cursor is None:
            run.append(content)
            return False
        if self._cursor < len(run):
            if run[self._cursor] != content:
                raise ReplayConflictError(event_index, f"id {safe_name(sse_id)} +{self._cursor}")
            self._cursor += 1
            return True
        run.append(content)
        self._cursor = None
        return False


def _describe(key: Hashable) -> str:
    if isinstance(key, tuple) and len(key) == 2:
        return f"{safe_name(key[0])}={key[1]!s}"
    return "<key>"

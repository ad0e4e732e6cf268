"""Recognising events seen again after a reconnect, so they change nothing.

A resumed stream may overlap what was already read. Two positions identify an
event:

* a provider sequence number (OpenAI Responses ``sequence_number``): exact,
  one per event;
* the SSE last event ID. A server need not put ``id:`` on every event, so events
  are grouped into *runs* sharing one ID and identified by (ID, position in the
  run). A run that starts again is compared event by event with what was seen.

Content is compared by digest only. The same position with the same content is
a replay and is dropped. The same sequence number with different content, or a
replay that diverges after its first event, is a different response and raises
``ReplayConflictError``. A revisited run may start again at its first event (a
server that resends the event carrying the ID) or at its second (a server that
resumes *after* that event, as WHATWG servers and agent-gate's own do, resending
the events that inherited the ID). A revisited run that matches neither is a
continuation: the client had only the event with the ID, and what follows is new.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from agent_gate.providers.errors import ReplayConflictError, safe_name


class ReplayGuard:
    """Per-stream memory of event positions and content digests."""

    __slots__ = ("_by_key", "_current", "_cursor", "_runs")

    def __init__(self) -> None:
        self._by_key: dict[Hashable, bytes] = {}
        self._runs: dict[str, list[bytes]] = {}
        self._current: str | None = None
        self._cursor: int | None = None

    def reconnected(self) -> None:
        """The transport opened a new connection: the next event starts a new run."""
        self._current = None
        self._cursor = None

    def is_replay(
        self,
        key: Hashable | None,
        sse_id: str,
        fingerprint: Callable[[], bytes],
        event_index: int,
    ) -> bool:
        if key is not None:
            digest = fingerprint()
            seen = self._by_key.get(key)
            if seen is None:
                self._by_key[key] = digest
                return False
            if seen == digest:
                return True
            raise ReplayConflictError(event_index, _describe(key))
        if not sse_id:
            self._current = None
            self._cursor = None
            return False
        return self._by_run(sse_id, fingerprint(), event_index)

    def _by_run(self, sse_id: str, digest: bytes, event_index: int) -> bool:
        if sse_id != self._current:
            self._current = sse_id
            run = self._runs.get(sse_id)
            if run is None:
                self._runs[sse_id] = [digest]
                self._cursor = None
                return False
            if run[0] == digest:
                self._cursor = 1  # the server resent the event that set the id
                return True
            if len(run) > 1 and run[1] == digest:
                # The WHATWG way (and agent-gate's own server): resume *after* the event
                # that set the id, resending the events that inherited it.
                self._cursor = 2
                return True
            run.append(digest)
            self._cursor = None
            return False
        run = self._runs[sse_id]
        if self._cursor is None:
            run.append(digest)
            return False
        if self._cursor < len(run):
            if run[self._cursor] != digest:
                raise ReplayConflictError(event_index, f"id {safe_name(sse_id)} +{self._cursor}")
            self._cursor += 1
            return True
        run.append(digest)
        self._cursor = None
        return False


def _describe(key: Hashable) -> str:
    if isinstance(key, tuple) and len(key) == 2:
        return f"{safe_name(key[0])}={key[1]!s}"
    return "<key>"

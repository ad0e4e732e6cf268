"""Recognising events seen again after a reconnect, so they change nothing.

A resumed stream may overlap what was already read. Two positions identify an
event:

* a provider sequence number (OpenAI Responses ``sequence_number``): exact,
  one per event;
* the SSE last event ID. A server need not put ``id:`` on every event, so events
  are grouped into *runs* sharing one ID and identified by (ID, position in the
  run). A run that starts again is compared event by event with what was seen.

What is kept per event, and the bound. For every positioned event the guard keeps
a 16-byte BLAKE2b digest of its content (``content_digest`` of what
``event_content`` compares: the SSE data text as received with its event type, or
a mapping's sorted JSON snapshot, so ``1``, ``1.0`` and ``true`` still differ),
never the event itself, under its position: a sequence number as an ``int`` key,
or one slot of its ID's run (the run keyed by a 16-byte digest of the ID, since a
server chooses how long its IDs are). That is about 110 bytes per position in
CPython, 130 when every event has an ID of its own (``PER_POSITION_BYTES`` is the
stated ceiling, the dicts' spare slots after a resize included), whatever the size
of the event. At most ``max_positions`` positions are
kept (``DEFAULT_MAX_REPLAY_POSITIONS``, 2**20: eight times the events of a
128k-token response, and 200 MiB of 200-byte events, so at most 192 MiB, under
the decoder's default 256 MiB per stream); the next one raises
``ReplayLimitExceeded``, since forgetting a position would let a replayed argument
fragment be applied twice. A guard is per response, and dropped with it.

The same position with the same digest is a replay and is dropped. The same
sequence number with a different digest, or a replay that diverges after its first
event, is a different response and raises ``ReplayConflictError``. A revisited run
may start again at its first event (a server that resends the event carrying the
ID) or at its second (a server that resumes *after* that event, as WHATWG servers
and agent-gate's own do, resending the events that inherited the ID). A revisited
run that matches neither is a continuation: the client had only the event with the
ID, and what follows is new.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable

from agent_gate.errors import ReplayConflictError, ReplayLimitExceeded, safe_name
from agent_gate.providers.base import content_digest

DEFAULT_MAX_REPLAY_POSITIONS = 1 << 20
"""Positions one response's guard remembers (see the module docstring)."""

PER_POSITION_BYTES = 192
"""The most memory one remembered position costs (measured with tracemalloc: about 110
bytes, 130 with an SSE ID per event, the dicts' spare slots after a resize included)."""


class ReplayGuard:
    """Per-stream memory of event positions and a digest of what was seen at each."""

    __slots__ = (
        "_by_key",
        "_count",
        "_current",
        "_cursor",
        "_field",
        "_limit",
        "_run_key",
        "_runs",
    )

    def __init__(
        self,
        max_positions: int = DEFAULT_MAX_REPLAY_POSITIONS,
        *,
        sequence_field: str | None = None,
    ) -> None:
        self._by_key: dict[Hashable, bytes] = {}
        self._runs: dict[bytes, bytes | list[bytes]] = {}
        self._current: str | None = None
        self._run_key = b""
        self._cursor: int | None = None
        self._field = sequence_field
        self._limit = max_positions
        self._count = 0

    @property
    def positions(self) -> int:
        """How many positions are remembered."""
        return self._count

    def _key(self, key: Hashable) -> Hashable:
        """A ``(sequence_field, n)`` key is kept as the bare ``n`` (half the memory)."""
        if type(key) is tuple and len(key) == 2 and key[0] == self._field:
            seq = key[1]
            if isinstance(seq, int) and not isinstance(seq, bool):
                return int(seq)
        return key

    def _grow(self, event_index: int) -> None:
        if self._count >= self._limit:
            raise ReplayLimitExceeded("max_replay_positions", self._limit, event_index)
        self._count += 1

    def first_sight(self, seq: int, digest: bytes, event_index: int) -> bool:
        """Remember sequence number ``seq`` with ``digest`` if it was never seen and
        return True; False (nothing changed) if it was: then ``check`` compares.

        The caller's short path for the common event, in one call: what
        ``check((sequence_field, seq), ...)`` does for a new position, no more."""
        by_key = self._by_key
        if seq in by_key:
            return False
        if self._count >= self._limit:
            raise ReplayLimitExceeded("max_replay_positions", self._limit, event_index)
        self._count += 1
        by_key[seq] = digest
        return True

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
        return self.check(key, sse_id, content_digest(content()), event_index)

    def unpositioned(self) -> None:
        """An event with neither key nor id: it ends any run being revisited."""
        self._current = None
        self._cursor = None

    def check(self, key: Hashable | None, sse_id: str, digest: bytes, event_index: int) -> bool:
        """``is_replay`` for an event that has a key or an SSE id, its digest in hand."""
        if key is not None:
            slot = self._key(key)
            seen = self._by_key.get(slot)
            if seen is None:
                self._grow(event_index)
                self._by_key[slot] = digest
                return False
            if seen == digest:
                return True
            raise ReplayConflictError(event_index, _describe(key))
        return self._by_run(sse_id, digest, event_index)

    def _by_run(self, sse_id: str, digest: bytes, event_index: int) -> bool:
        runs = self._runs
        if sse_id != self._current:
            self._current = sse_id
            self._run_key = run_key = _id_digest(sse_id)
            run = runs.get(run_key)
            if run is None:
                self._grow(event_index)
                runs[run_key] = digest  # a run of one event is kept without a list
                self._cursor = None
                return False
            if type(run) is bytes:
                run = runs[run_key] = [run]
            if run[0] == digest:
                self._cursor = 1  # the server resent the event that set the id
                return True
            if len(run) > 1 and run[1] == digest:
                # The WHATWG way (and agent-gate's own server): resume *after* the event
                # that set the id, resending the events that inherited it.
                self._cursor = 2
                return True
        else:
            run = runs[self._run_key]
            if type(run) is bytes:
                run = runs[self._run_key] = [run]
            if self._cursor is not None and self._cursor < len(run):
                if run[self._cursor] != digest:
                    raise ReplayConflictError(
                        event_index, f"id {safe_name(sse_id)} +{self._cursor}"
                    )
                self._cursor += 1
                return True
        # Not one the run holds: a new event of it, and no longer a resent stretch.
        self._grow(event_index)
        run.append(digest)
        self._cursor = None
        return False


def _id_digest(sse_id: str) -> bytes:
    """An SSE id as the guard keys its run: a server picks the id's length, the guard
    keeps 16 bytes."""
    return hashlib.blake2b(sse_id.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _describe(key: Hashable) -> str:
    if isinstance(key, tuple) and len(key) == 2:
        return f"{safe_name(key[0])}={key[1]!s}"
    return "<key>"

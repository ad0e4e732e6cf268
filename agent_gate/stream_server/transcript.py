"""Recorded streams the local server replays, event by event, with ids.

A transcript is a sequence of whole events. The server needs event boundaries
(to replay "from the event after Last-Event-ID", to cut "at event k") so raw
SSE bytes are framed once, by agent-gate's own decoder, when loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from agent_gate.sse import ServerSentEvent, SSEDecoder


class IdMode(Enum):
    """Where the served events' ids come from."""

    AUTO = "auto"
    """Keep the transcript's ids; if it has none, number the events 1, 2, 3..."""
    ASSIGN = "assign"
    """Always number the events 1, 2, 3..., replacing any ids."""
    NONE = "none"
    """Serve no ids: a cut connection then has nothing to resume from."""


@dataclass(frozen=True, slots=True)
class TranscriptEvent:
    """One event as served: its own ``id`` line is written only when it has one."""

    data: str
    event: str | None = None
    id: str | None = None

    def encode(self) -> bytes:
        lines: list[str] = []
        if self.id is not None:
            lines.append(f"id: {self.id}")
        if self.event is not None and self.event != "message":
            lines.append(f"event: {self.event}")
        lines.extend(f"data: {line}" for line in self.data.split("\n"))
        return ("\n".join(lines) + "\n\n").encode("utf-8")

    def json(self) -> Any:
        """The data parsed as JSON, or ``None`` when it is not JSON."""
        try:
            return json.loads(self.data)
        except ValueError:
            return None


def _coerce(item: TranscriptEvent | ServerSentEvent | Mapping[str, Any] | str) -> TranscriptEvent:
    if isinstance(item, TranscriptEvent):
        return item
    if isinstance(item, ServerSentEvent):
        return TranscriptEvent(item.data, item.event, item.id or None)
    if isinstance(item, str):
        return TranscriptEvent(item)
    data = item.get("data", "")
    if not isinstance(data, str):
        data = json.dumps(data, separators=(",", ":"))
    event = item.get("event")
    ident = item.get("id")
    return TranscriptEvent(data, event, None if ident in (None, "") else str(ident))


class Transcript:
    """An immutable list of events, each with the id a client holds after it.

    ``resume_ids[i]`` is the WHATWG last event ID a client has after receiving
    event ``i`` (ids are inherited by later events that set none), which is
    what it will send as ``Last-Event-ID``.
    """

    __slots__ = ("events", "resume_ids")

    def __init__(
        self,
        events: Iterable[TranscriptEvent | ServerSentEvent | Mapping[str, Any] | str],
        *,
        id_mode: IdMode = IdMode.AUTO,
    ) -> None:
        items = [_coerce(e) for e in events]
        has_ids = any(e.id is not None for e in items)
        if id_mode is IdMode.ASSIGN or (id_mode is IdMode.AUTO and not has_ids):
            items = [TranscriptEvent(e.data, e.event, str(i + 1)) for i, e in enumerate(items)]
        elif id_mode is IdMode.NONE:
            items = [TranscriptEvent(e.data, e.event, None) for e in items]
        self.events: tuple[TranscriptEvent, ...] = tuple(items)
        resume: list[str] = []
        current = ""
        for e in self.events:
            if e.id is not None:
                current = e.id
            resume.append(current)
        self.resume_ids: tuple[str, ...] = tuple(resume)

    def __len__(self) -> int:
        return len(self.events)

    @classmethod
    def from_sse(cls, raw: bytes, *, id_mode: IdMode = IdMode.AUTO) -> Transcript:
        """Frame raw ``text/event-stream`` bytes; an id is kept where the stream set one."""
        decoder = SSEDecoder()
        decoded = decoder.feed(raw)
        decoder.end()
        items: list[TranscriptEvent] = []
        previous = ""
        for e in decoded:
            own = e.id if e.id != previous else None
            previous = e.id
            items.append(TranscriptEvent(e.data, e.event, own or None))
        return cls(items, id_mode=id_mode)

    @classmethod
    def from_file(cls, path: str | Path, *, id_mode: IdMode = IdMode.AUTO) -> Transcript:
        """A ``.sse`` file of raw event-stream bytes, or a ``.json``/``.jsonl`` list of events."""
        p = Path(path)
        raw = p.read_bytes()
        if p.suffix == ".jsonl":
            rows = [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
            return cls(rows, id_mode=id_mode)
        if p.suffix == ".json":
            return cls(json.loads(raw), id_mode=id_mode)
        return cls.from_sse(raw, id_mode=id_mode)

    def start_after(self, last_event_id: str | None) -> int | None:
        """Index of the first event to serve to a client holding ``last_event_id``.

        Serves from the event after the one that *set* the id. When later
        events inherit it (a sparse-id stream), a client holding the id may
        have received some of them too: they are sent again rather than
        risked lost, and the reader's replay detection drops them. ``None``
        when the id is unknown: the server must not guess where that client is.
        """
        if not last_event_id:
            return 0
        for i, ident in enumerate(self.resume_ids):
            if ident == last_event_id:
                return i + 1
        return None

    def start_after_sequence(self, sequence_number: int) -> int:
        """Index of the first event whose JSON ``sequence_number`` exceeds the given one."""
        for i, e in enumerate(self.events):
            obj = e.json()
            if isinstance(obj, dict):
                seq = obj.get("sequence_number")
                if isinstance(seq, int) and seq > sequence_number:
                    return i
        return len(self.events)

    def response_id(self) -> str | None:
        """The OpenAI Responses id announced by the transcript (``response.id``), if any."""
        for e in self.events:
            obj = e.json()
            if isinstance(obj, dict) and isinstance(obj.get("response"), dict):
                rid = obj["response"].get("id")
                if isinstance(rid, str) and rid:
                    return rid
        return None

    def encoded(self, start: int = 0) -> tuple[bytes, list[int]]:
        """The bytes of events ``start...`` and the offset where each of them ends."""
        parts: list[bytes] = []
        ends: list[int] = []
        total = 0
        for e in self.events[start:]:
            chunk = e.encode()
            parts.append(chunk)
            total += len(chunk)
            ends.append(total)
        return b"".join(parts), ends

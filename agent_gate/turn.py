"""The assistant's turn as the stream delivered it, kept for the agent's next request.

An agent loop appends the model's own turn to the conversation before the tool
results: the provider needs its reasoning items and signatures back, each call
with the arguments it sent, the text it wrote. Each adapter says what the turn is
made of, in its provider's form (``TurnPart``; text that grows a part:
``TextDelta``, ``TurnDelta``; objects that join a list of a part: ``TurnAppend``);
the accumulator hands those here, and this module keeps them in order until
the response ends. What is kept is bounded: ``max_chars`` counts every kept
character (a part's JSON text, each text fragment, each appended object), and
a turn that would exceed it is dropped whole (``Turn.dropped`` says so), never
cut: half a turn sent back would misstate what the model said.
The calls of that response are unaffected; they are the accumulator's.

Text fragments are kept as a list and joined once, when the turn is read, so a
long answer streamed in many small deltas costs linear time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_gate.calls import ToolCall
from agent_gate.plainjson import dumps

__all__ = ["DEFAULT_MAX_TURN_CHARS", "Turn", "TurnEntry", "TurnRecorder"]

DEFAULT_MAX_TURN_CHARS = 16 * 1024 * 1024
"""Characters of one assistant turn kept for ``RunResult.next_input``."""


@dataclass(frozen=True, slots=True)
class TurnEntry:
    """One piece of the turn: the provider's own form, and the call it is, if any.

    For a call, ``part`` is what the provider announced (a Responses item, an
    Anthropic ``tool_use`` block, a Gemini part; empty for Chat Completions) and
    ``call`` is the call as the accumulator settled it, with the argument text the
    model sent (``raw_arguments``).
    """

    part: Mapping[str, Any]
    call: ToolCall | None = None
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """The assistant's turn, in order; ``dropped`` names the bound that dropped it."""

    provider: str
    entries: tuple[TurnEntry, ...] = ()
    dropped: str | None = None


@dataclass(slots=True)
class _Piece:
    position: int
    seq: int
    part: Mapping[str, Any]
    call_id: str | None = None
    grown: dict[str, list[str]] = field(default_factory=dict)
    appended: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)

    def value(self) -> dict[str, Any]:
        out = dict(self.part)
        for name, pieces in self.grown.items():
            base = out.get(name)
            text = "".join(pieces)
            out[name] = base + text if isinstance(base, str) else text
        for name, values in self.appended.items():
            base = out.get(name)
            out[name] = [*(base if isinstance(base, list) else ()), *values]
        return out


class TurnRecorder:
    """The pieces of one response's turn, bounded by ``max_chars``."""

    def __init__(self, max_chars: int = DEFAULT_MAX_TURN_CHARS) -> None:
        self._max = max_chars
        self._chars = 0
        self._pieces: dict[int | tuple[str, str], _Piece] = {}
        self._seq = 0
        self.dropped: str | None = None

    def _spend(self, chars: int) -> bool:
        """Count ``chars`` more; False (and the turn dropped) past the bound."""
        if self.dropped is not None:
            return False
        self._chars += chars
        if self._chars > self._max:
            self._pieces.clear()
            self.dropped = "max_turn_chars"
            return False
        return True

    def _key(self, position: int, call_id: str | None) -> int | tuple[str, str]:
        return ("call", call_id) if call_id is not None else position

    def _new(
        self, key: int | tuple[str, str], position: int, part: Mapping[str, Any],
        call_id: str | None = None,
    ) -> _Piece:
        """A piece not seen before, under ``key``: it goes back after every earlier one."""
        piece = self._pieces[key] = _Piece(position, self._seq, part, call_id)
        self._seq += 1
        return piece

    def part(self, position: int, part: Mapping[str, Any], call_id: str | None = None) -> None:
        """A whole piece; the same position (or call) again replaces it in place."""
        if not self._spend(len(dumps(part, default=str))):
            return
        key = self._key(position, call_id)
        known = self._pieces.get(key)
        if known is not None:
            known.part, known.position, known.grown, known.appended = part, position, {}, {}
            return
        self._new(key, position, part, call_id)

    def call_started(self, call_id: str, position: int) -> None:
        """A client call began: it has a place in the turn even if no part names it
        (Chat Completions), until a part of its own replaces the empty one."""
        key = self._key(position, call_id)
        if key not in self._pieces and self._spend(len(call_id)):
            self._new(key, position, {}, call_id)

    def grow(self, position: int, name: str, text: str) -> None:
        """Append ``text`` to field ``name`` of the piece at ``position`` (made empty
        if none is there yet: Chat Completions' text has no announcement). Empty
        text still marks the field as present (DeepSeek's ``reasoning_content: ""``
        must go back as such with tool calls)."""
        if not self._spend(len(text)):
            return
        piece = self._pieces.get(position)
        if piece is None:
            piece = self._new(position, position, {})
        pieces = piece.grown.setdefault(name, [])
        if text:
            pieces.append(text)

    def append(self, position: int, name: str, value: Mapping[str, Any]) -> None:
        """Append ``value`` to list field ``name`` of the piece at ``position``."""
        if not self._spend(len(dumps(value, default=str))):
            return
        piece = self._pieces.get(position)
        if piece is None:
            piece = self._new(position, position, {})
        piece.appended.setdefault(name, []).append(value)

    def turn(self, provider: str, calls: Mapping[str, ToolCall | None]) -> Turn:
        """The turn so far, with each call's piece bound to the call as it settled."""
        if self.dropped is not None:
            return Turn(provider, (), self.dropped)
        ordered = sorted(self._pieces.values(), key=lambda p: (p.position, p.seq))
        return Turn(
            provider,
            tuple(
                TurnEntry(
                    piece.value(),
                    calls.get(piece.call_id) if piece.call_id is not None else None,
                    piece.call_id,
                )
                for piece in ordered
            ),
        )

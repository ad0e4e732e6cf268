"""``provider="auto"``: tell the wire protocol from the stream's first events.

A recorded stream or a proxy's output does not always say which API produced it,
and the wrong adapter sees nothing it knows (``UnrecognizedStream``). The four
protocols are told apart by shapes none of the others has:

- OpenAI Responses: a ``type`` beginning ``response.``;
- Anthropic Messages: a ``type`` among its event names (``message_start``, ...);
- OpenAI Chat Completions: ``object: chat.completion.chunk``, a ``choices`` list,
  or the ``[DONE]`` sentinel;
- Gemini: ``candidates``, ``usageMetadata`` or ``promptFeedback``.

``DetectingAccumulator`` holds events (and reconnects, in order) until one of them
tells, then hands them all to an ``Accumulator`` of that protocol and delegates
from there; it is built by ``accumulator(provider, ...)``. Detection reads at most
``UNRECOGNIZED_LIMIT`` events that carry a payload: a stream that has not told by
then, or ends first, is ``ProtocolNotDetected``. Heartbeats and comments neither
tell nor count. Memory: the held events, at most that many plus heartbeats.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from agent_gate.accumulate import (
    UNRECOGNIZED_LIMIT,
    Accumulator,
    AccumulatorClosedError,
    AccumulatorStats,
    Anomaly,
)
from agent_gate.calls import Terminal, TerminalKind, ToolCall
from agent_gate.errors import ProtocolNotDetected
from agent_gate.providers import AUTO
from agent_gate.providers.base import dump_sdk_event
from agent_gate.turn import Turn

__all__ = ["AUTO", "DetectingAccumulator", "ProtocolNotDetected", "accumulator", "detect"]

_ANTHROPIC_TYPES: Final = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "ping",
    }
)




def _payload(event: object) -> Mapping[str, Any] | str | None:
    """The event's JSON object (or the ``[DONE]`` sentinel); None for a heartbeat."""
    if isinstance(event, Mapping):
        return event
    sdk = type(event).__module__.startswith(("openai.", "anthropic.", "google."))
    if sdk and callable(getattr(event, "model_dump", None)):
        dumped = dump_sdk_event(event)
        return dumped if isinstance(dumped, Mapping) else {}
    data = getattr(event, "data", None)
    if not isinstance(data, str) or not data.strip():
        return None
    text = data.strip()
    if text == "[DONE]":
        return text
    if not text.startswith("{"):
        return {}
    try:
        parsed = json.loads(text)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def detect(event: object) -> str | None:
    """The protocol one event belongs to; None when it does not tell (a heartbeat,
    an error object several protocols share, anything unknown)."""
    payload = _payload(event)
    if payload is None:
        return None
    if payload == "[DONE]":
        return "openai-chat"
    assert isinstance(payload, Mapping)
    etype = payload.get("type")
    if isinstance(etype, str):
        if etype.startswith("response."):
            return "openai-responses"
        if etype in _ANTHROPIC_TYPES:
            return "anthropic"
    if payload.get("object") == "chat.completion.chunk" or isinstance(
        payload.get("choices"), list
    ):
        return "openai-chat"
    if any(key in payload for key in ("candidates", "usageMetadata", "promptFeedback")):
        return "gemini"
    return None


class DetectingAccumulator:
    """An ``Accumulator`` whose protocol is told by the stream (see the module doc)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._held: list[object | None] = []  # None marks a reconnect
        self._payloads = 0
        self._inner: Accumulator | None = None
        self._terminal: Terminal | None = None
        self._on_text: Callable[[str], object] | None = None

    @property
    def provider(self) -> str:
        """The protocol chosen, or ``auto`` while undecided."""
        return self._inner.provider if self._inner is not None else AUTO

    @property
    def terminal(self) -> Terminal | None:
        return self._inner.terminal if self._inner is not None else self._terminal

    @property
    def anomalies(self) -> tuple[Anomaly, ...]:
        return self._inner.anomalies if self._inner is not None else ()

    @property
    def stats(self) -> AccumulatorStats:
        if self._inner is not None:
            return self._inner.stats
        return AccumulatorStats(
            events=len([e for e in self._held if e is not None]), progress_events=0,
            heartbeats=0, unknown_events=self._payloads, unknown_types={}, replayed_events=0,
            events_after_terminal=0, calls=0, released=0, anomalies=0, argument_bytes=0,
            text_chars=0,
        )

    @property
    def turn(self) -> Turn:
        return self._inner.turn if self._inner is not None else Turn(AUTO)

    def listen_text(self, on_text: Callable[[str], object] | None) -> None:
        self._on_text = on_text
        if self._inner is not None:
            self._inner.listen_text(on_text)

    def reconnected(self) -> None:
        if self._inner is not None:
            self._inner.reconnected()
        else:
            self._held.append(None)

    def feed(self, event: object) -> list[ToolCall]:
        if self._inner is not None:
            return self._inner.feed(event)
        if self._terminal is not None:
            raise AccumulatorClosedError("feed() after close()")
        self._held.append(event)
        chosen = detect(event)
        if chosen is None:
            if _payload(event) is not None:
                self._payloads += 1
                if self._payloads >= UNRECOGNIZED_LIMIT:
                    raise ProtocolNotDetected(self._payloads)
            return []
        return self._choose(chosen)

    def _choose(self, provider: str) -> list[ToolCall]:
        inner = self._inner = Accumulator(provider, **self._options)
        inner.listen_text(self._on_text)
        released: list[ToolCall] = []
        held, self._held = self._held, []
        for event in held:
            if event is None:
                inner.reconnected()
            else:
                released.extend(inner.feed(event))
        return released

    def close(self) -> list[ToolCall]:
        if self._inner is not None:
            return self._inner.close()
        if self._terminal is not None:
            return []
        self._terminal = Terminal(TerminalKind.TRUNCATED)
        if self._payloads:
            raise ProtocolNotDetected(self._payloads)
        return []


def accumulator(provider: str, **options: Any) -> Accumulator | DetectingAccumulator:
    """An accumulator for ``provider``, or one that detects it when ``provider`` is
    ``auto``; ``options`` as for ``Accumulator``."""
    if provider == AUTO:
        return DetectingAccumulator(**options)
    return Accumulator(provider, **options)

"""The accumulator's short path for the built-in adapters, beside its reference.

``Accumulator.feed`` hands every event of a built-in adapter (unless
``AGENT_GATE_PURE_PYTHON=1``) to ``KnownPath._feed_known``, which makes the
decisions of the reference, ``Accumulator._feed_any`` (decode -> replay guard ->
translate -> apply), without building their intermediate objects, and appends an
argument fragment of a call still streaming without a normalized event
(``tests/providers/test_fast_paths.py`` holds the two equal on every transcript,
damaged or not). It is a mixin of ``Accumulator`` because it is its hot loop: it
reads and counts in the accumulator's own state, declared below.

Per event: O(1) Python calls (a decode, a digest for a positioned event, the
adapter's ``hot_delta`` or ``hot_fragment``, an append) plus O(len(event)) in C.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agent_gate.calls import Terminal, ToolCall
from agent_gate.providers import base as providers_base
from agent_gate.providers.base import (
    ProviderAdapter,
    WireEvent,
    WireKind,
    content_digest,
    mapping_content,
    sse_digest,
)
from agent_gate.providers.replay import ReplayGuard
from agent_gate.sse import ServerSentEvent

__all__ = ["KnownPath"]

_UNREAD: Mapping[str, Any] = {}
"""The payload of an event ``hot_decode`` read, until (unless) it is decoded to a dict."""


class KnownPath:
    """``Accumulator``'s short path (a mixin: ``Accumulator`` holds the state)."""

    _adapter: ProviderAdapter
    _hot_decode: Callable[[str], Any] | None
    _hot_marker: str
    _sequence_field: str | None
    _replay: ReplayGuard
    _replayed: int
    _terminal: Terminal | None
    _after_terminal: int
    # Accumulator's methods the short path hands over to:
    _feed_any: Callable[[object, int], list[ToolCall]]  # the reference, for the rest
    _translate: Callable[[WireEvent, int], list[ToolCall]]  # an event that is no fragment
    _fragment: Callable[[str, str], list[ToolCall]]  # a fragment, appended

    def _feed_known(self, event: object, index: int) -> list[ToolCall]:
        """The short path of a built-in adapter, with ``_feed_any``'s interface and
        decisions (``tests/providers/test_fast_paths.py`` holds them equal).

        Plain dicts (an SDK's dump, a parsed event) and agent-gate's own
        ``ServerSentEvent`` carrying a JSON object: it makes the same decisions as
        decode -> replay guard -> translate -> _apply without building the
        intermediate objects, and an argument fragment of a call still streaming
        (the adapter's ``hot_delta``, or its ``hot_fragment`` of what ``hot_decode``
        read) is appended without a normalized event.
        Anything else (heartbeats, [DONE], SDK objects, other SSE libraries, broken
        data) takes ``_feed_any``.
        """
        cls = type(event)
        typed: Any = None
        if cls is ServerSentEvent:
            sse_type, raw, sse_id = event  # type: ignore[misc]
            if raw[:1] != "{":
                return self._feed_any(event, index)
            sse_type = sse_type or "message"
            sse_id = sse_id or ""
            # Under 640 characters no integer can pass ``sys.get_int_max_str_digits``
            # (0 or at least 640), which json.loads enforces and a skipping decoder
            # does not: so a typed decode that succeeds is one json.loads agrees with.
            if (
                self._hot_decode is not None
                and len(raw) < 640
                and self._hot_marker in raw
            ):
                try:
                    typed = self._hot_decode(raw)
                except Exception:  # not the hot shape, or not JSON: the dict decides
                    typed = None
            if typed is not None:
                # Not decoded to a dict unless ``hot_fragment`` declines it below; the
                # sequence field, if any, is read from the typed value.
                data: Mapping[str, Any] = _UNREAD
            else:
                # ``load_payload``'s answer: msgspec's value when it decodes (always an
                # object here, the text starts with "{"), else ``load_payload`` decides
                # (json.loads, or the error) as the long way does.
                loads = providers_base.fast_loads
                if loads is None:
                    data = self._adapter.load_payload(raw, index)
                else:
                    try:
                        data = loads(raw)
                    except Exception:  # msgspec's errors, RecursionError: the reference decides
                        data = self._adapter.load_payload(raw, index)
        elif cls is dict:
            data = event  # type: ignore[assignment]
            raw = None
            sse_type = "message"
            sse_id = ""
        else:
            return self._feed_any(event, index)
        seq: int | None = None
        field = self._sequence_field
        if field is not None:
            if typed is not None:
                seq = getattr(typed, field)  # the type made it an int (never a bool)
            else:
                value = data.get(field)
                if type(value) is int or (isinstance(value, int) and not isinstance(value, bool)):
                    seq = int(value)
        # A position never seen is the common case (every Responses event carries a new
        # sequence number): its digest is remembered at once, never the event itself
        # (``agent_gate.providers.replay`` states what is kept and the bound).
        replay = self._replay
        if seq is not None or sse_id:
            if raw is None:
                digest = content_digest(mapping_content(data))
            else:
                digest = sse_digest(sse_type, raw)
            if seq is None or not replay.first_sight(seq, digest, index):
                key = None if seq is None else (field, seq)
                if replay.check(key, sse_id, digest, index):
                    self._replayed += 1
                    return []
        else:
            replay.unpositioned()
        if self._terminal is not None:
            self._after_terminal += 1
            return []
        if typed is None:
            hot = self._adapter.hot_delta(data, sse_type)
        else:
            hot = self._adapter.hot_fragment(typed, sse_type)
            if hot is None:  # not a fragment after all: decoded and translated as any other
                data = self._adapter.load_payload(raw, index)  # type: ignore[arg-type]
        if hot is None:
            return self._translate(WireEvent(WireKind.PAYLOAD, data, sse_type, sse_id, raw), index)
        return self._fragment(*hot)

"""What every adapter shares: turning one incoming event into a parsed wire event.

Callers hand the accumulator three kinds of things: ``ServerSentEvent``s from
agent-gate's decoder (or any SSE library's event with ``event``/``data``/``id``
attributes), plain mappings, and the typed objects an official SDK yields
(anything with ``model_dump()``). An SDK that frames SSE itself has already
parsed the JSON; its objects are dumped, never re-serialized and re-split.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from agent_gate.providers.errors import MalformedEventError, safe_name
from agent_gate.providers.events import StreamEvent


class WireKind(Enum):
    """What an incoming event turned out to be before any provider logic."""

    PAYLOAD = "payload"
    """A JSON object: the provider's event."""
    DONE = "done"
    """The ``[DONE]`` sentinel (Chat Completions ends its stream with it)."""
    HEARTBEAT = "heartbeat"
    """An event with empty data: a keep-alive, never progress."""


@dataclass(frozen=True, slots=True)
class WireEvent:
    """One incoming event, parsed, with what replay detection needs."""

    kind: WireKind
    data: Mapping[str, Any]
    sse_type: str
    """The SSE ``event`` field (``"message"`` when none, or for non-SSE input)."""
    sse_id: str
    """The SSE last event ID at dispatch (``""`` for non-SSE input)."""
    raw: str | None
    """The SSE data text, kept only to fingerprint the event for replay checks."""

    def fingerprint(self) -> bytes:
        """A digest of the event's content, so replays can be compared without storing them."""
        if self.raw is not None:
            text = f"{self.sse_type}\n{self.raw}"
        else:
            text = json.dumps(self.data, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


_EMPTY: Mapping[str, Any] = {}


def _is_sse_like(event: object) -> bool:
    """agent-gate's ``ServerSentEvent`` or another SSE library's event (``None`` allowed
    for the type and the id, as some libraries use it for "not set")."""
    if not isinstance(getattr(event, "data", None), str):
        return False
    return all(
        hasattr(event, name) and isinstance(getattr(event, name), str | None)
        for name in ("event", "id")
    )


def _dump(event: Any) -> Any:
    """Dump an SDK object as its wire JSON would look (aliases, enums as strings)."""
    try:
        return event.model_dump(mode="json", by_alias=True, exclude_none=True)
    except TypeError:
        return event.model_dump()


class ProviderAdapter(ABC):
    """Translates one response's events of one wire protocol into ``StreamEvent``s.

    An adapter is a state machine for exactly one response stream: create a
    new one (``adapter_for``) per response. It does no I/O and reads no clock.
    """

    name: ClassVar[str]

    def decode(self, event: object, index: int) -> WireEvent:
        """Parse one incoming event; raise ``MalformedEventError`` if it is not JSON."""
        if isinstance(event, Mapping):
            return WireEvent(WireKind.PAYLOAD, event, "message", "", None)
        if hasattr(event, "model_dump") and callable(event.model_dump):
            dumped = _dump(event)
            if not isinstance(dumped, Mapping):
                raise self.malformed(index, "SDK object did not dump to a mapping")
            return WireEvent(WireKind.PAYLOAD, dumped, "message", "", None)
        if _is_sse_like(event):
            return self._decode_sse(event, index)
        raise self.malformed(index, f"unsupported event object {type(event).__name__}")

    def _decode_sse(self, event: Any, index: int) -> WireEvent:
        text: str = event.data
        sse_type: str = event.event or "message"
        sse_id: str = event.id or ""
        if not text.strip():
            return WireEvent(WireKind.HEARTBEAT, _EMPTY, sse_type, sse_id, text)
        if text.strip() == "[DONE]":
            return WireEvent(WireKind.DONE, _EMPTY, sse_type, sse_id, text)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise self.malformed(index, f"data is not valid JSON (char {exc.pos})") from None
        except RecursionError:
            raise self.malformed(index, "data nests too deeply") from None
        if not isinstance(data, dict):
            raise self.malformed(index, "data is not a JSON object")
        return WireEvent(WireKind.PAYLOAD, data, sse_type, sse_id, text)

    @abstractmethod
    def translate(self, wire: WireEvent, index: int) -> list[StreamEvent]:
        """The normalized events one wire event means, in order."""

    def replay_key(self, wire: WireEvent) -> Hashable | None:
        """A provider-defined position of the event (a sequence number), if it has one."""
        return None

    # -- typed field access: a wrong shape is a MalformedEventError, never a KeyError

    def malformed(self, index: int, problem: str) -> MalformedEventError:
        return MalformedEventError(self.name, index, problem)

    def event_type(self, wire: WireEvent, index: int) -> str:
        """The payload's ``type``, checked against the SSE event name when there is one."""
        etype = wire.data.get("type")
        if not isinstance(etype, str):
            raise self.malformed(index, "field 'type' missing or not a string")
        if wire.sse_type != "message" and wire.sse_type != etype:
            raise self.malformed(
                index,
                f"SSE event {safe_name(wire.sse_type)} disagrees with payload type "
                f"{safe_name(etype)}",
            )
        return etype

    def field_str(self, obj: Mapping[str, Any], key: str, index: int, where: str) -> str:
        value = obj.get(key)
        if not isinstance(value, str):
            raise self.malformed(
                index, f"field '{key}' of {safe_name(where)} missing or not a string"
            )
        return value

    def field_int(self, obj: Mapping[str, Any], key: str, index: int, where: str) -> int:
        value = obj.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.malformed(
                index, f"field '{key}' of {safe_name(where)} missing or not an integer"
            )
        return value

    def field_map(
        self, obj: Mapping[str, Any], key: str, index: int, where: str
    ) -> Mapping[str, Any]:
        value = obj.get(key)
        if not isinstance(value, Mapping):
            raise self.malformed(
                index, f"field '{key}' of {safe_name(where)} missing or not an object"
            )
        return value

    def optional_str(self, obj: Mapping[str, Any], key: str, index: int, where: str) -> str | None:
        value = obj.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.malformed(index, f"field '{key}' of {safe_name(where)} is not a string")
        return value

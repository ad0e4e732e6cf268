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
import json.encoder
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from agent_gate import _speedups
from agent_gate.errors import MalformedEventError, safe_name
from agent_gate.plainjson import cut_below, dumps
from agent_gate.providers.events import Heartbeat, StreamEvent, UnknownEvent


def _refuse(value: object) -> Any:
    raise TypeError(type(value).__name__)


MAX_EVENT_DEPTH = 256
"""Containers deeper than this in an event too deep to parse are cut (``cut_below``).

Every field an adapter reads lies within ten levels of the event's root; what lies
deeper is a tool call's arguments (a Gemini ``args``, an Anthropic ``input``), which
then still nest over 240 levels deep and are rejected as ``arguments_too_deep`` for
that call alone, while the event's other calls go on."""

_blake2b = hashlib.blake2b
fast_loads = _speedups.msgspec_decode
"""msgspec's decoder, or None (not installed, or switched off): ``loads_event`` and the
known-shape path (``known_path``) read it at each event, so setting it to None runs the
reference, ``json.loads``, everywhere at once (tests and benchmarks do)."""
_fast_dumps = _speedups.orjson_dumps
_SNAPSHOT_OPTION = _speedups.ORJSON_SNAPSHOT_OPTION


def loads_event(text: str) -> Any:
    """``json.loads(text)``, exactly: same value, same exceptions, faster when it can be.

    msgspec decodes most events in a third of the time. It was chosen over orjson
    because orjson silently turns integers beyond 64 bits into floats, where msgspec
    keeps them exact. Whatever msgspec refuses (NaN, lone surrogate escapes, numbers
    out of range, nesting, broken JSON) is handed to ``json.loads``, whose answer or
    error is the one returned: the verdict is always the standard library's.
    """
    if fast_loads is not None:
        try:
            return fast_loads(text)
        except Exception:  # msgspec's errors, RecursionError: json.loads decides
            pass
    return json.loads(text)


def mapping_content(data: Mapping[str, Any]) -> tuple[str | None, str]:
    """A snapshot of a mapping event's content for replay comparison.

    Equal snapshots mean ``json.dumps(sort_keys=True, ensure_ascii=False,
    default=str)`` would give equal text. orjson's sorted compact text is used when
    it cannot disagree with that: no ``null`` in it (orjson writes NaN and Infinity
    as ``null``) and nothing orjson serializes its own way (``default`` refuses
    those). Anything else is tagged ``None`` instead of ``""`` and carries the
    json.dumps text, so the two forms never compare equal: such a pair is a
    conflict (fail closed), never a replay.

    The snapshot also names content (Gemini's call ids are digests of it), so it
    must not depend on whether orjson is installed or AGENT_GATE_PURE_PYTHON is
    set: ``snapshot_text`` writes orjson's exact text in plain Python, and
    ``_fast_snapshot`` is orjson itself (its bytes copied into a str: kept, its
    output buffers made each event cost 2.7 us instead of 0.5 us).
    """
    text = _fast_snapshot(data) if _fast_dumps is not None else snapshot_text(data)
    if text is not None and "null" not in text:  # (searching the str is cheaper)
        return ("", text)
    return (None, dumps(data, sort_keys=True, default=str))


def _fast_snapshot(data: Mapping[str, Any]) -> str | None:
    assert _fast_dumps is not None
    try:
        return _fast_dumps(data, _refuse, _SNAPSHOT_OPTION).decode()
    except TypeError:  # orjson.JSONEncodeError: big ints, non-str keys, others
        return None


class _Refused(Exception):
    """``snapshot_text`` met what orjson refuses with the snapshot's options."""


_SNAPSHOT_MAX_DEPTH = 254
"""Containers orjson nests before "Recursion limit reached"."""
_INT_RANGE = range(-(2**63), 2**64)
"""orjson writes 64-bit signed and unsigned integers; anything wider is refused."""
_encode_str = json.encoder.encode_basestring  # type: ignore[attr-defined]


def snapshot_text(value: object) -> str | None:
    """The text ``orjson.dumps(value, option=OPT_SORT_KEYS | OPT_PASSTHROUGH_*)``
    writes, in plain Python; None where orjson refuses ``value`` (a type other than
    exact dict/list/tuple/str/int/float/bool/None, a key that is not a str, an
    integer beyond 64 bits, a lone surrogate, more than 254 nested containers).

    The reference beside ``_fast_snapshot``: tests/providers/test_snapshot_text.py
    holds the two to the same text for every value."""
    out: list[str] = []
    try:
        _write(value, out, 0)
    except _Refused:
        return None
    return "".join(out)


def _write(value: object, out: list[str], depth: int) -> None:
    kind = type(value)
    if kind is str:
        out.append(_text(value))  # type: ignore[arg-type]
    elif value is None or kind is bool:
        out.append("null" if value is None else "true" if value else "false")
    elif kind is int:
        if value not in _INT_RANGE:
            raise _Refused
        out.append(str(value))
    elif kind is float:
        out.append(_float_text(value))  # type: ignore[arg-type]
    elif kind is dict or kind is list or kind is tuple:
        if depth == _SNAPSHOT_MAX_DEPTH:
            raise _Refused
        if kind is dict:
            items: dict[Any, Any] = value  # type: ignore[assignment]
            if any(type(key) is not str for key in items):
                raise _Refused
            out.append("{")
            for n, key in enumerate(sorted(items)):
                out.append(f"{',' if n else ''}{_text(key)}:")
                _write(items[key], out, depth + 1)
            out.append("}")
        else:
            out.append("[")
            for n, item in enumerate(value):  # type: ignore[attr-defined]
                if n:
                    out.append(",")
                _write(item, out, depth + 1)
            out.append("]")
    else:
        raise _Refused  # datetimes, dataclasses, subclasses: orjson's passthrough


def _text(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: orjson refuses it
        raise _Refused from None
    return _encode_str(value)  # type: ignore[no-any-return]


def _float_text(value: float) -> str:
    """A float as orjson writes it: Python's shortest repr, but NaN and infinities as
    ``null``, exponents unpadded (``1e-7``, ``1e+16``) and 1e-5 .. 1e-4 in decimals."""
    if value != value or value in (math.inf, -math.inf):
        return "null"
    text = repr(value)
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    power = int(exponent)
    if power == -5:
        sign, digits = ("-", mantissa[1:]) if mantissa[0] == "-" else ("", mantissa)
        return f"{sign}0.0000{digits.replace('.', '')}"
    return f"{mantissa}e{'+' if power > 0 else '-'}{abs(power)}"


def event_content(sse_type: str, raw: str | None, data: Mapping[str, Any]) -> Hashable:
    """What replay detection compares for one event: the SSE data text as received
    (with its event type unless it is the default), or a mapping's snapshot.

    The text is kept by reference (the decoder already allocated it), so an event is
    never re-serialized or hashed just in case it is replayed later. The three forms
    (a str, a pair with a non-empty type, a pair tagged ``""`` or ``None``) never
    compare equal to each other, as an SSE event and a mapping never did.
    """
    if raw is None:
        return mapping_content(data)
    return raw if sse_type == "message" else (sse_type, raw)


def content_digest(content: Hashable) -> bytes:
    """A 16-byte BLAKE2b digest of ``event_content``'s value: what the replay guard
    keeps instead of the event. Each form is tagged (a str, a pair with an SSE type,
    a pair tagged ``""`` or ``None``) so that forms that never compared equal never
    share a digest; an SSE type cannot hold the LF that ends the tag."""
    if type(content) is str:
        blob = "s\n" + content
    else:
        tag, text = content  # type: ignore[misc]
        blob = f"{'-' if tag is None else 't' + tag}\n{text}"
    return _blake2b(blob.encode("utf-8", "surrogatepass"), digest_size=16).digest()


_SEEDED: dict[str, Any] = {}
"""A BLAKE2b state per SSE type that has absorbed the type's tag (``sse_digest``)."""
_MAX_SEEDED = 64  # distinct event types kept; providers use a few dozen
_SEEDED_DIGEST = not _speedups.PURE_PYTHON


def sse_digest(sse_type: str, raw: str) -> bytes:
    """``content_digest(event_content(sse_type, raw, ...))`` for an SSE event's data
    text: the same bytes hashed, the same digest.

    The replay guard digests every positioned event (each Responses event carries a
    sequence number), so this is per-event work: the tag of each SSE type (``t`` +
    the type + LF, or ``s`` + LF for ``message``) is absorbed once into a kept
    BLAKE2b state, which is copied and fed only the event's text, instead of
    building ``tag + text`` and hashing it from scratch (about 0.55 us against
    0.95 per 250-byte event). O(len(raw)); the kept states are bounded by
    ``_MAX_SEEDED`` (a type beyond it is digested the plain way). The reference,
    ``content_digest``, is what ``AGENT_GATE_PURE_PYTHON=1`` runs;
    tests/providers/test_fast_paths.py holds the two equal.
    """
    if not _SEEDED_DIGEST:
        return content_digest(raw if sse_type == "message" else (sse_type, raw))
    seeded = _SEEDED.get(sse_type)
    if seeded is None:
        if len(_SEEDED) >= _MAX_SEEDED:
            return content_digest(raw if sse_type == "message" else (sse_type, raw))
        tag = "s\n" if sse_type == "message" else f"t{sse_type}\n"
        seeded = _SEEDED[sse_type] = _blake2b(tag.encode("utf-8", "surrogatepass"), digest_size=16)
    state = seeded.copy()
    state.update(raw.encode("utf-8", "surrogatepass"))
    return state.digest()  # type: ignore[no-any-return]


def provider_error_code(
    error: object, keys: tuple[str, ...] = ("code", "type"), *, numbers: bool = False
) -> str | None:
    """The first of ``keys`` in a provider's error object that holds an identifier
    (a non-empty string, or with ``numbers`` an integer as text), never the human
    message; None when ``error`` is not an object or names none. Why one place: a
    failed stream is reported by this code, and each adapter read it by hand."""
    if not isinstance(error, Mapping):
        return None
    for key in keys:
        value = error.get(key)
        if isinstance(value, str) and value:
            return value
        if numbers and isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return None


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
    """The SSE data text, kept so that a replayed event can be compared with it."""

    def content(self) -> Hashable:
        """What replay detection compares (see ``event_content``)."""
        return event_content(self.sse_type, self.raw, self.data)

    def fingerprint(self) -> bytes:
        """A digest of ``content()``: equal exactly when the contents are equal."""
        return content_digest(self.content())


_EMPTY: Mapping[str, Any] = {}


def _is_sse_like(event: object) -> bool:
    """agent-gate's ``ServerSentEvent`` or another SSE library's event (``None`` allowed
    for the type and the id, as some libraries use it for "not set")."""
    if not isinstance(getattr(event, "data", None), str):
        return False
    if not hasattr(event, "event") or not hasattr(event, "id"):
        return False
    etype = event.event  # type: ignore[attr-defined]
    eid = event.id  # type: ignore[attr-defined]
    return (etype is None or isinstance(etype, str)) and (eid is None or isinstance(eid, str))


def dump_sdk_event(event: Any) -> Any:
    """Dump an SDK object as its wire JSON would look (aliases, enums as strings).

    ``warnings=False``: the OpenAI SDK's stream helpers build their events without
    validation and put ``Parsed*`` subclasses where a union names the base types,
    so pydantic warns (``PydanticSerializationUnexpectedValue``) about values it
    then serializes correctly; those warnings would reach the host application
    (or fail it, under ``-W error``) for events that are fine."""
    try:
        return event.model_dump(mode="json", by_alias=True, exclude_none=True, warnings=False)
    except TypeError:  # a model_dump without pydantic v2's keywords
        return event.model_dump()


class ProviderAdapter(ABC):
    """Translates one response's events of one wire protocol into ``StreamEvent``s.

    An adapter is a state machine for exactly one response stream: create a
    new one (``adapter_for``) per response. It does no I/O and reads no clock.
    """

    name: ClassVar[str]

    sequence_field: ClassVar[str | None] = None
    """The payload field holding a per-event sequence number, if the protocol has one:
    it is then the exact replay key (see ``replay_key``)."""

    def decode(self, event: object, index: int) -> WireEvent:
        """Parse one incoming event; raise ``MalformedEventError`` if it is not JSON."""
        if type(event) is dict or isinstance(event, Mapping):
            return WireEvent(WireKind.PAYLOAD, event, "message", "", None)
        if hasattr(event, "model_dump") and callable(event.model_dump):
            dumped = dump_sdk_event(event)
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
        return WireEvent(WireKind.PAYLOAD, self.load_payload(text, index), sse_type, sse_id, text)

    def load_payload(self, text: str, index: int) -> dict[str, Any]:
        """The JSON object an event's data holds, decoded as ``json.loads`` would."""
        try:
            data = loads_event(text)
        except json.JSONDecodeError as exc:
            raise self.malformed(index, f"data is not valid JSON (char {exc.pos})") from None
        except RecursionError:
            data = self._load_cut(text, index)
        if not isinstance(data, dict):
            raise self.malformed(index, "data is not a JSON object")
        return data

    def _load_cut(self, text: str, index: int) -> Any:
        """An event nesting deeper than the parser can recurse, its depths cut away
        (``MAX_EVENT_DEPTH``): a call nested too deep is rejected, not the event."""
        try:
            return json.loads(cut_below(text, MAX_EVENT_DEPTH))
        except (json.JSONDecodeError, RecursionError):
            raise self.malformed(index, "data nests too deeply") from None

    def translate(self, wire: WireEvent, index: int) -> list[StreamEvent]:
        """The normalized events one wire event means, in order.

        A heartbeat is a heartbeat in every protocol and ``[DONE]`` is the adapter's
        to judge (``translate_done``); a payload is the protocol's own
        (``translate_payload``).
        """
        if wire.kind is WireKind.HEARTBEAT:
            return [Heartbeat()]
        if wire.kind is WireKind.DONE:
            return self.translate_done()
        return self.translate_payload(wire, index)

    def translate_done(self) -> list[StreamEvent]:
        """The ``[DONE]`` sentinel. Only Chat Completions ends with it; elsewhere some
        proxies append it, and it proves nothing."""
        return [UnknownEvent("[DONE]")]

    @abstractmethod
    def translate_payload(self, wire: WireEvent, index: int) -> list[StreamEvent]:
        """The normalized events one JSON payload of the protocol means, in order."""

    def hot_delta(self, data: Mapping[str, Any], sse_type: str) -> tuple[str, str] | None:
        """The short path for the event that dominates every stream: an argument fragment.

        Returns ``(call_id, fragment)`` when ``data`` is exactly an argument delta of a
        known call still streaming, with every field of the expected type, which is what
        ``translate`` would turn into one ``ToolCallArgumentsDelta``, and records that
        the adapter saw it. Anything else returns ``None`` having changed nothing, and
        the caller takes ``translate``, which decides (and raises) as always.
        """
        return None

    hot_decode: ClassVar[Callable[[str], Any] | None] = None
    """A compiled decoder of the dominant event's text into a typed value, or None.

    Where it decodes (no error), the text is an object that ``json.loads`` reads
    with the same values in every field the type names; ``hot_fragment`` then
    decides on that value alone, as ``hot_delta`` would on the dict. Anything it
    refuses is decoded to a dict the ordinary way. An adapter with a
    ``sequence_field`` declares it in the type as an ``int`` field of that name: the
    replay guard keys the event by it (and digests the text, as always)."""

    hot_marker: ClassVar[str] = ""
    """Text every event ``hot_decode`` reads as a fragment contains: an event
    without it is not tried (a failed typed decode would cost as much as the dict's;
    the marker only skips, it never decides)."""

    def hot_fragment(self, event: Any, sse_type: str) -> tuple[str, str] | None:
        """``hot_delta`` for a value ``hot_decode`` made: the same answer, the same
        record of the fragment; None having changed nothing."""
        return None

    def replay_key(self, wire: WireEvent) -> Hashable | None:
        """A provider-defined position of the event (a sequence number), if it has one."""
        field = self.sequence_field
        if field is None:
            return None
        seq = wire.data.get(field)
        if isinstance(seq, int) and not isinstance(seq, bool):
            return (field, seq)
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

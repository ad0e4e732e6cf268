"""Strict parsing of a tool call's frozen argument text.

A call's arguments are parsed once, when the provider's completion signal has
frozen them, and never repaired: ``json.loads`` semantics, an object required,
no duplicate keys (a repair-minded parser keeps the last and hides the
ambiguity), no NaN or Infinity, no lone surrogates, no second value after the
first, no nesting deeper than a limit (``MAX_ARGUMENT_DEPTH`` by default: a call
nested deeper is rejected as ``arguments_too_deep``, alone, before anything recurses
over it). A rejection carries a fixed reason identifier, never the payload.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from agent_gate import _speedups
from agent_gate.errors import AgentGateError
from agent_gate.plainjson import MAX_ARGUMENT_DEPTH, depth_exceeds, text_depth_exceeds


class StrictParseError(AgentGateError):
    """Argument text failed strict parsing; ``reason`` is an identifier
    (``invalid_json``, ``duplicate_key``, ``concatenated_json``,
    ``arguments_not_object``, ``invalid_unicode``, ``arguments_too_deep``), never
    the text."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def _no_constants(token: str) -> Any:
    raise StrictParseError("invalid_json")


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise StrictParseError("duplicate_key")
        obj[key] = value
    return obj


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_object, parse_constant=_no_constants)


def _compiled_codec() -> tuple[Callable[[str], Any], Callable[[Any], int]] | None:
    """msgspec's decoder, and a count of the ``:`` in a compact encoding of a value.

    orjson encodes the 2 KB of a typical call about twice as fast as msgspec, but
    refuses integers beyond 64 bits, which msgspec decodes exactly: those are counted
    in msgspec's encoding.
    """
    decode = _speedups.msgspec_decode
    encode = _speedups.msgspec_encode
    if decode is None or encode is None:
        return None
    dumps = _speedups.orjson_dumps
    if dumps is None:

        def colons(value: Any) -> int:
            return encode(value).count(b":")

        return decode, colons

    def colons_fast(value: Any) -> int:
        try:
            return dumps(value).count(b":")
        except TypeError:  # orjson.JSONEncodeError: an integer beyond 64 bits
            return encode(value).count(b":")

    return decode, colons_fast


_CODEC = _compiled_codec()


def parse_arguments(text: str, max_depth: int = MAX_ARGUMENT_DEPTH) -> dict[str, Any]:
    """Parse frozen argument text strictly, or raise ``StrictParseError`` with a reason.

    Whitespace around one JSON value is allowed (``json.loads`` semantics); a
    second value after it (``{}{"a":1}``) is a concatenation, which a repair
    parser would silently merge or truncate.

    The verdict is always ``parse_arguments_reference``'s; msgspec (about 3x faster
    on 2 KB) only answers when it cannot differ. msgspec already refuses NaN,
    Infinity, lone surrogates, trailing values and numbers out of range (big
    integers it keeps exact), but it keeps the last of duplicate keys. So its value
    is accepted only if it is an object and re-encoding it gives as many ``:`` as
    the text has: outside strings every ``:`` separates one member, inside strings
    it is a literal character, so a dropped duplicate member is always a missing
    ``:``, unless the text wrote a colon as ``\\u003a``, which is left to the
    reference (looked for only when the text has a backslash at all, which is one
    fast ``memchr``-like scan).

    Deep texts are the reference's too (msgspec nests a few levels deeper before
    its RecursionError): the fast path needs a nesting depth of at most a quarter of
    the recursion limit. The depth is bounded by the ``[`` plus one more than the
    ``:``, already counted (each object on a path but the innermost holds the next
    container in a member of its own), and only when that bound is too loose by the
    ``[`` plus the ``{``. Everything else, and every rejection, is the reference's,
    reasons included, except a value deeper than ``max_depth``, which is the depth of
    its text (only looked for when the text has more than ``max_depth`` brackets).
    """
    codec = _CODEC
    if codec is not None and ("\\" not in text or "\\u003" not in text):
        decode, colons_of = codec
        try:
            value = decode(text)
        except Exception:  # msgspec's errors, RecursionError: the reference decides
            value = None
        if type(value) is dict:
            colons = text.count(":")
            depth = sys.getrecursionlimit() // 4
            brackets = text.count("[")
            if (
                brackets + colons + 1 <= depth or brackets + text.count("{") <= depth
            ) and colons_of(value) == colons:
                if brackets + text.count("{") > max_depth and depth_exceeds(value, max_depth):
                    raise StrictParseError("arguments_too_deep")
                return value
    return parse_arguments_reference(text, max_depth)


def parse_arguments_reference(text: str, max_depth: int = MAX_ARGUMENT_DEPTH) -> dict[str, Any]:
    """The definition of strict parsing: the nesting depth of the text, then ``json``
    with hooks, then a Unicode check."""
    if text_depth_exceeds(text, max_depth):
        raise StrictParseError("arguments_too_deep")
    try:
        value, end = _DECODER.raw_decode(text, _skip_ws(text, 0))
    except json.JSONDecodeError:
        raise StrictParseError("invalid_json") from None
    except RecursionError:
        raise StrictParseError("invalid_json") from None
    if _skip_ws(text, end) != len(text):
        raise StrictParseError("concatenated_json")
    if not isinstance(value, dict):
        raise StrictParseError("arguments_not_object")
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise StrictParseError("invalid_unicode") from None
    return value


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\n\r":
        pos += 1
    return pos

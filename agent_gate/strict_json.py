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
from typing import Any

from agent_gate.errors import StrictParseError
from agent_gate.plainjson import MAX_ARGUMENT_DEPTH, text_depth_exceeds


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


def parse_arguments(text: str, max_depth: int = MAX_ARGUMENT_DEPTH) -> dict[str, Any]:
    """Parse frozen argument text strictly, or raise ``StrictParseError`` with a reason.

    Whitespace around one JSON value is allowed (``json.loads`` semantics); a
    second value after it (``{}{"a":1}``) is a concatenation, which a repair
    parser would silently merge or truncate. The nesting depth of the text is
    checked first, then ``json`` parses with hooks (duplicate keys, constants), then
    the value must encode as UTF-8 (no lone surrogate).

    A msgspec fast path (about 2x on 2 KB) stood here until issue 15 measured it:
    it saved about 8 us of a call whose decision path costs over a millisecond,
    under 1% (``tests/benchmarks/run.py --only tricks``), so it went.
    """
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


parse_arguments_reference = parse_arguments
"""The same function under the name it had while a fast path stood beside it."""


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\n\r":
        pos += 1
    return pos

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
import re
from itertools import accumulate
from typing import Any

from agent_gate._speedups import PURE_PYTHON
from agent_gate.errors import StrictParseError
from agent_gate.plainjson import MAX_ARGUMENT_DEPTH, text_depth_exceeds

_FAST_PATH = not PURE_PYTHON
"""Whether ``parse_arguments`` takes its short path (``_speedups``); the reference,
``parse_arguments_reference``, is what it is held to."""


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


def parse_arguments_reference(
    text: str, max_depth: int = MAX_ARGUMENT_DEPTH
) -> dict[str, Any]:
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


_BRACKETS = re.compile(
    r'[^"\[\]{}]*(?:"[^"\\]*(?:\\.[^"\\]*)*"?[^"\[\]{}]*)*([\[\]{}]?)', re.DOTALL
)
"""Everything up to the next bracket outside a string (skipped: other characters and
whole strings, tokenized exactly as ``plainjson``'s scan does, an unterminated one
running to the end), then that bracket: ``findall`` gives the brackets alone."""
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A ``\\uD800``-``\\uDFFF`` escape (or text that merely looks like one after an
escaped backslash, which only sends the value to the full check)."""


def _depth_exceeds(text: str, limit: int) -> bool:
    """``plainjson.text_depth_exceeds``, with the per-token loop in C.

    The same tokens (strings skipped whole, brackets counted, every closer one level
    up whatever it closes), so the same answer for every text: the depth is the
    running sum of +1 per opener and -1 per closer, and the text is too deep when
    that sum ever passes ``limit`` (for a limit of 0 or more the highest sum is one an
    opener reached, as the reference counts). ``findall`` returns each bracket (one character,
    shared) and ``accumulate`` sums them: O(len(text)) in the regex engine and
    O(brackets) in C, against one match object and Python iteration per token,
    strings included (about 1.6x).
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    if limit < 0:  # a closer's running sum can pass a negative limit: only openers count
        return text_depth_exceeds(text, limit)
    brackets = "".join(_BRACKETS.findall(text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > limit


def _may_hold_surrogate(text: str) -> bool:
    """Whether the value parsed from ``text`` may hold a lone surrogate.

    Every character of every string in the value is a character of the text or the
    result of an escape; only a raw surrogate or a ``\\uD800``-``\\uDFFF`` escape makes
    a surrogate (a pair of escapes makes one character, fine, but is sent to the full
    check too). So text that encodes as UTF-8 and has no such escape cannot, and the
    check costs one ``encode`` and one literal-prefixed search instead of
    serializing the whole value again. O(len(text)).
    """
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return True
    return "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None


def parse_arguments(text: str, max_depth: int = MAX_ARGUMENT_DEPTH) -> dict[str, Any]:
    """``parse_arguments_reference``'s answer for every text, cheaper for the common one.

    A text that passes takes three C-speed steps besides the parse: the depth scan
    with its loop in C (``_depth_exceeds``), the parse with the same hooks, and the
    surrogate check on the text instead of on a re-serialized value
    (``_may_hold_surrogate``; the value is serialized as the reference does only when
    the text could hold one). Any text that fails a step goes to the reference, which
    gives the verdict and its reason in the reference's order; the depth scan comes
    first, so nothing recurses over text nested too deep. Off with
    ``AGENT_GATE_PURE_PYTHON=1``; tests/accumulate/test_parse_arguments.py holds the
    two equal.
    """
    if not _FAST_PATH or _depth_exceeds(text, max_depth):
        return parse_arguments_reference(text, max_depth)
    try:
        value, end = _DECODER.raw_decode(text, _skip_ws(text, 0))
    except (json.JSONDecodeError, RecursionError, StrictParseError):
        return parse_arguments_reference(text, max_depth)
    if type(value) is not dict or _skip_ws(text, end) != len(text):
        return parse_arguments_reference(text, max_depth)
    if max_depth > MAX_ARGUMENT_DEPTH or _may_hold_surrogate(text):
        # (A caller's deeper limit lets values near the recursion limit through:
        # then serializing them may fail as the reference's would, so it is done.)
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise StrictParseError("invalid_unicode") from None
    return value


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\n\r":
        pos += 1
    return pos

"""Plain JSON data: is a value made of it, how deep does it nest, its text at any
depth, its canonical text and that text's SHA-256 (the one definition of each: the
ledger, the policies and the MCP identity all hash with these).

The compiled fast path of ``schema`` (jsonschema-rs's accept) may only answer for
values it reads exactly as the standard-library reference does: dicts with str
keys, lists, str, bool, None, ints within 64 bits and finite floats. Anything else
(subclasses, tuples, big ints, NaN, objects) goes to the reference.

The walk is iterative (no recursion limit to hit on deep data) and touches each
value once: O(size of the value).

Nesting depth is bounded where arguments enter (``MAX_ARGUMENT_DEPTH``, enforced by
``check_depth`` here and by ``strict_json`` on argument text), because every later
step (schema validation, policies, the tool itself, reading a stored row back) may
recurse once per level, and the interpreter's recursion limit must never decide
what happens to one call of a batch. ``dumps`` serializes what a recursive encoder
cannot (a value nested deeper than the stack allows) with the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring
from typing import Any

from agent_gate.errors import ArgumentsTooDeep

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "ArgumentsTooDeep",
    "canonical_bytes",
    "canonical_json",
    "check_depth",
    "depth_exceeds",
    "dumps",
    "plain_json",
    "sha256_hex",
    "text_depth_exceeds",
]

MAX_ARGUMENT_DEPTH = 64
"""How many containers a tool call's arguments may nest, the arguments object itself
counted as the first (``{"a": [1]}`` nests 2 deep).

Real tool schemas nest a handful of levels (OpenAI's strict mode caps schemas at 10);
64 leaves six times that, while the walks that follow stay far from the interpreter's
recursion limit of 1000 even when each level costs several frames (a recursive JSON
Schema through ``$ref`` takes about six per level: 64 x 6 = 384) and under the
255 levels orjson and pydantic serialize."""

_INT64 = 2**63
_INT64_MIN = -_INT64
_isfinite = math.isfinite


def plain_json(value: object) -> bool:
    """Whether ``value`` is made only of plain JSON data (see the module docstring).

    It runs on every call (the schema gate), so its
    shape is for speed: a container's members are checked where they are met and only
    containers go on the stack (most members are strings), a dict's keys are checked
    in a loop of their own before its values join the one member loop, and the
    stack's methods are called as methods, which Python 3.11 specializes (a bound
    ``push = stack.append`` is about twice as slow).
    """
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        members: Any
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            members = item.values()
        elif kind is list:
            members = item
        else:
            members = (item,)
        for member in members:
            kind = type(member)
            if kind is str or kind is bool or member is None:
                continue
            if kind is dict or kind is list:
                stack.append(member)
            elif kind is int:
                if not _INT64_MIN <= member < _INT64:
                    return False
            elif kind is float:
                if not _isfinite(member):
                    return False
            else:
                return False
    return True




_CONTAINERS = (dict, list, tuple, Mapping)


def depth_exceeds(value: object, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` containers deep (dicts, lists,
    tuples and other mappings; a scalar is depth 0). Iterative, and it stops at the
    first container past the limit, so a hostile value costs at most its size."""
    if limit < 0:
        return True
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, _CONTAINERS):
            depth += 1
            if depth > limit:
                return True
            members = item.values() if isinstance(item, Mapping) else item
            for member in members:
                if isinstance(member, _CONTAINERS):
                    stack.append((member, depth))
    return False


def check_depth(value: object, limit: int = MAX_ARGUMENT_DEPTH) -> None:
    """Raise ``ArgumentsTooDeep`` when ``value`` nests deeper than ``limit``.

    For arguments that reach the gate already parsed (``Gate.execute`` with a dict,
    a provider whose calls arrive as objects): text is bounded while it is parsed.
    """
    if depth_exceeds(value, limit):
        raise ArgumentsTooDeep(limit)


_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
"""A string (skipped whole, so brackets inside it do not count; an unterminated one
runs to the end) or one bracket."""


def text_depth_exceeds(text: str, limit: int) -> bool:
    """Whether JSON text nests more than ``limit`` containers deep, found without
    parsing it (a parser recurses once per level). Text with at most ``limit``
    brackets cannot, which is one fast count; otherwise one pass over its strings and
    brackets, stopping at the first level past the limit."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _STRUCTURE.finditer(text):
        first = text[match.start()]
        if first == '"':
            continue
        if first == "[" or first == "{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def cut_below(text: str, limit: int) -> str:
    """JSON text with every container nested deeper than ``limit`` replaced by ``null``.

    For an event too deep to parse at all: what is cut lies deeper than ``limit``,
    so a field read from it is at most ``limit`` deep and a tool call's arguments
    holding the cut still nest far past ``MAX_ARGUMENT_DEPTH`` and are rejected as
    too deep; nothing cut is ever handed to a tool. Text that does not balance is
    returned as it is, for the parser to reject.
    """
    pieces: list[str] = []
    depth = 0
    start = 0
    cut_from = -1
    for match in _STRUCTURE.finditer(text):
        position = match.start()
        first = text[position]
        if first == '"':
            continue
        if first == "[" or first == "{":
            depth += 1
            if depth == limit + 1:
                cut_from = position
        else:
            depth -= 1
            if depth == limit and cut_from >= 0:
                pieces.append(text[start:cut_from])
                pieces.append("null")
                start = position + 1
                cut_from = -1
    if depth != 0:
        return text
    pieces.append(text[start:])
    return "".join(pieces)


class _Piece:
    """Literal text on ``dumps``'s stack; leaving a container releases its id."""

    __slots__ = ("release", "text")

    def __init__(self, text: str, release: int | None = None) -> None:
        self.text = text
        self.release = release


def _float_text(value: float, allow_nan: bool) -> str:
    if value != value:
        text = "NaN"
    elif value == math.inf:
        text = "Infinity"
    elif value == -math.inf:
        text = "-Infinity"
    else:
        return float.__repr__(value)
    if not allow_nan:
        raise ValueError("Out of range float values are not JSON compliant")
    return text


def _key_text(key: object, allow_nan: bool) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, float):
        return _float_text(key, allow_nan)
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return int.__repr__(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def dumps(
    value: object,
    *,
    sort_keys: bool = False,
    separators: tuple[str, str] = (", ", ": "),
    allow_nan: bool = True,
    default: Callable[[Any], Any] | None = None,
) -> str:
    """``json.dumps(value, ensure_ascii=False, ...)`` at any depth.

    The standard library's encoder recurses once per level and raises
    ``RecursionError`` near the interpreter's limit (sooner the deeper the caller's
    own stack); only then is the value encoded again without recursion, to the same
    text with the same errors (``TypeError`` for what has no JSON form and no
    ``default``, ``ValueError`` for NaN when refused and for a circular reference).
    The fallback is several times slower, and only deep values take it.
    """
    try:
        return json.dumps(
            value,
            ensure_ascii=False,
            sort_keys=sort_keys,
            separators=separators,
            allow_nan=allow_nan,
            default=default,
        )
    except RecursionError:
        return _dumps_iterative(value, sort_keys, separators, allow_nan, default)


def _dumps_iterative(
    value: object,
    sort_keys: bool,
    separators: tuple[str, str],
    allow_nan: bool,
    default: Callable[[Any], Any] | None,
) -> str:
    item_sep, key_sep = separators
    out: list[str] = []
    active: set[int] = set()
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if type(item) is _Piece:
            out.append(item.text)
            if item.release is not None:
                active.discard(item.release)
            continue
        if isinstance(item, str):
            out.append(encode_basestring(item))
        elif item is None:
            out.append("null")
        elif item is True:
            out.append("true")
        elif item is False:
            out.append("false")
        elif isinstance(item, int):
            out.append(int.__repr__(item))
        elif isinstance(item, float):
            out.append(_float_text(item, allow_nan))
        elif isinstance(item, list | tuple | dict):
            ident = id(item)
            if ident in active:
                raise ValueError("Circular reference detected")
            if not item:
                out.append("{}" if isinstance(item, dict) else "[]")
                continue
            active.add(ident)
            if isinstance(item, dict):
                pairs = sorted(item.items()) if sort_keys else list(item.items())
                out.append("{")
                stack.append(_Piece("}", ident))
                for position in range(len(pairs) - 1, -1, -1):
                    key, member = pairs[position]
                    stack.append(member)
                    lead = item_sep if position else ""
                    key_text = encode_basestring(_key_text(key, allow_nan))
                    stack.append(_Piece(lead + key_text + key_sep))
            else:
                out.append("[")
                stack.append(_Piece("]", ident))
                for position in range(len(item) - 1, -1, -1):
                    stack.append(item[position])
                    if position:
                        stack.append(_Piece(item_sep))
        else:
            if default is None:
                raise TypeError(f"Object of type {type(item).__name__} is not JSON serializable")
            ident = id(item)
            if ident in active:
                raise ValueError("Circular reference detected")
            active.add(ident)
            stack.append(_Piece("", ident))
            stack.append(default(item))
    return "".join(out)


# -- canonical JSON: the one definition (ledger hashes, policy hashes, stored text) -----


def canonical_json(value: object) -> str:
    """Serialize ``value`` canonically: ``json.dumps`` with sorted keys, no
    insignificant whitespace, non-ASCII as itself, NaN and Infinity refused
    (``ValueError``), at any depth.

    An orjson fast path (the same bytes for plain JSON data, about 6x faster) stood
    here until issue 15 measured it: it saved about 30 us of a call whose decision
    path costs over a millisecond, under 5% (``tests/benchmarks/run.py --only
    tricks``), so it went.
    """
    return dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def canonical_bytes(value: object, errors: str = "strict") -> bytes:
    """``canonical_json(value)`` as UTF-8. ``errors`` is the encoder's for a lone
    surrogate: ``"strict"`` raises ``UnicodeEncodeError`` (the ledger's argument
    hash), ``"surrogatepass"`` writes it (the policy hash)."""
    return canonical_json(value).encode("utf-8", errors)


def sha256_hex(data: bytes | str) -> str:
    """The SHA-256 of bytes, or of text as UTF-8, in lowercase hex: the one spelling of
    every hash agent-gate stores (arguments, policies, principals, keys)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()

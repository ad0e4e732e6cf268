"""Addressing a field inside a call's arguments (or a principal, or a task).

Policy authors write ``recipient.email`` or ``items.0.price``; keys that contain
dots are reachable with an RFC 6901 JSON Pointer (``/odd.key/0``). A segment
indexes a list only when it is a canonical non-negative integer, so ``01`` or
``-1`` never silently address an element. ``*`` (any key or index) exists for
redaction only: a condition over "some element" is written with ``each`` /
``some``, which say whether one or all elements must pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

__all__ = ["MISSING", "ArgPath", "display", "iter_matches", "list_index", "parse_path", "resolve"]

MAX_PATH_SEGMENTS: Final = 32

WILDCARD: Final = "*"


class _Missing:
    """Marks an absent field; distinct from a JSON ``null``, which is present."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final = _Missing()

ArgPath = tuple[str, ...]


def parse_path(text: str, *, wildcard: bool = False) -> ArgPath:
    """Split a dotted path or a JSON Pointer; raises ``ValueError`` with a reason."""
    if not text:
        raise ValueError("path must not be empty")
    if text.startswith("/"):
        segments = tuple(s.replace("~1", "/").replace("~0", "~") for s in text[1:].split("/"))
    else:
        segments = tuple(text.split("."))
        if any(s == "" for s in segments):
            raise ValueError("empty segment in dotted path (use a /json/pointer for odd keys)")
    if len(segments) > MAX_PATH_SEGMENTS:
        raise ValueError(f"path deeper than {MAX_PATH_SEGMENTS} segments")
    if not wildcard and WILDCARD in segments:
        raise ValueError("'*' is only allowed in redaction paths; use each/some in conditions")
    return segments


def list_index(segment: str, length: int) -> int | None:
    """The list index ``segment`` names in a list of ``length`` items, or None: ASCII
    digits, no leading zero, in range. One definition, so that an approver's edit
    (``policy.edits``) writes exactly where a condition reads."""
    if not segment.isascii() or not segment.isdigit():
        return None
    if len(segment) > 1 and segment[0] == "0":
        return None
    index = int(segment)
    return index if index < length else None


def resolve(value: Any, path: ArgPath) -> Any:
    """The value at ``path`` or ``MISSING``; never raises on a shape mismatch."""
    current = value
    for segment in path:
        if isinstance(current, dict):
            if segment not in current:
                return MISSING
            current = current[segment]
        elif isinstance(current, list):
            index = list_index(segment, len(current))
            if index is None:
                return MISSING
            current = current[index]
        else:
            return MISSING
    return current


def iter_matches(value: Any, path: ArgPath) -> Iterator[tuple[Any, str | int]]:
    """Yield ``(container, key)`` for every location ``path`` (with ``*``) reaches."""
    if not path:
        return
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        keys: list[str | int] = list(value) if head == WILDCARD else [head] if head in value else []
    elif isinstance(value, list):
        if head == WILDCARD:
            keys = list(range(len(value)))
        else:
            index = list_index(head, len(value))
            keys = [] if index is None else [index]
    else:
        return
    for key in keys:
        if rest:
            yield from iter_matches(value[key], rest)  # type: ignore[index]
        else:
            yield value, key


def display(path: ArgPath) -> str:
    """How a path is named in explanations (dotted unless a segment needs a pointer)."""
    if any("." in s or "/" in s or s == "" for s in path):
        return "/" + "/".join(s.replace("~", "~0").replace("/", "~1") for s in path)
    return ".".join(path)

"""Bounding and scrubbing what the ledger stores about failures.

A tool's exception message is written by code we do not control: it may quote the
arguments, a token from a header, or a whole response body. The ledger keeps the
exception's type and a short message with argument values and credential-looking
strings replaced, which is enough to diagnose and never a copy of the payload.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["MAX_ERROR_CHARS", "bound", "describe_error", "scrub", "string_values"]

MAX_ERROR_CHARS = 500
MIN_SCRUBBED_VALUE = 4
"""Argument strings shorter than this are not scrubbed: "id" or "a" would otherwise
mangle every message while revealing nothing."""

_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Authorization schemes first, so the key=value rule below sees no token.
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 <redacted>"),
    # key=value / key: value for names that usually hold credentials
    (
        re.compile(
            r"(?i)\b(authorization|proxy-authorization|api[-_]?key|access[-_]?token|"
            r"refresh[-_]?token|token|secret|password|passwd|pwd|cookie|session)"
            r"(\s*[:=]\s*)(\"[^\"]*\"|'[^']*'|\S+)"
        ),
        r"\1\2<redacted>",
    ),
    (re.compile(r"\b(?:sk|pk|rk|ghp|gho|ghs|xox[abpr])[-_][A-Za-z0-9_-]{10,}"), "<redacted>"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "<redacted>"),
    (re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), "<redacted>"),
    (re.compile(r"(://[^/\s:@]+:)[^/\s@]+@"), r"\1<redacted>@"),
)


def bound(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """Cut ``text`` to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    return f"{text[:limit]}… [{cut} more chars]"


def string_values(value: Any, *, _depth: int = 0) -> Iterable[str]:
    """Every string (keys excluded) nested in a JSON value, for scrubbing."""
    if _depth > 32:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from string_values(v, _depth=_depth + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from string_values(v, _depth=_depth + 1)
    elif isinstance(value, int | float) and not isinstance(value, bool) and abs(value) >= 1000:
        # Account numbers, amounts: long numbers identify things as well as strings do.
        yield str(value)


def scrub(text: str, values: Iterable[str] = ()) -> str:
    """Replace argument values and credential-looking strings in ``text``."""
    for v in sorted({v for v in values if len(v) >= MIN_SCRUBBED_VALUE}, key=len, reverse=True):
        text = text.replace(v, "<argument>")
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def describe_error(exc: BaseException, arguments: Any = None) -> dict[str, str]:
    """What the ledger stores about an exception: its type and a scrubbed message."""
    message = scrub(str(exc), string_values(arguments))
    return {"type": type(exc).__name__, "message": bound(message)}

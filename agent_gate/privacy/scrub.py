"""Bounding and scrubbing what the ledger stores about results and failures.

A tool's exception message is written by code we do not control: it may quote the
arguments, a token from a header, or a whole response body. The ledger keeps the
exception's type and a short message with argument values and credential-looking
strings replaced, which is enough to diagnose and never a copy of the payload.

Fields a policy redacts are held to a stricter rule (``SecretScrubber``): not only
the value but every piece of it 8 characters or longer, in any letter case, is cut
out of results and errors, because a tool that echoes ``body[:12]`` or
``body.upper()`` leaks as much as one that echoes ``body``.

Nothing here may raise on what a tool hands back (a ``__str__`` that raises, a lone
surrogate): it runs after the side effect, and an exception would leave the call
``executing`` for recovery to run again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = [
    "MAX_ERROR_CHARS",
    "REDACTED_TEXT",
    "SecretScrubber",
    "bound",
    "clean_message",
    "describe_error",
    "safe_text",
    "scrub",
    "string_values",
]

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


REDACTED_TEXT: Final = "[redacted]"
SECRET_GRAM: Final = 8
"""Length of the pieces of a redacted value that are searched for (see SecretScrubber)."""
_ANCHOR: Final = SECRET_GRAM // 2
MAX_TYPE_CHARS: Final = 120
_SURROGATE = re.compile("[\ud800-\udfff]")


def safe_text(text: str) -> str:
    """``text`` with lone surrogates replaced (U+FFFD), so it encodes as UTF-8.

    Python strings may hold them (``"\\udc80"``, ``bytes.decode(errors="surrogateescape")``);
    no database text column accepts them. NUL is left alone: it only reaches the
    database inside JSON, which writes it as ``\\u0000``.
    """
    return _SURROGATE.sub("\ufffd", text)


def _fold_char(char: str) -> str:
    """One character in one case, or itself when its case mapping is not one character
    (``ß`` upper-cases to ``SS``): positions in folded text must be positions in the text."""
    folded = char.upper().lower()
    if len(folded) == 1:
        return folded
    lower = char.lower()
    return lower if len(lower) == 1 else char


def _fold(text: str) -> str:
    if text.isascii():
        return text.lower()
    return "".join(_fold_char(c) for c in text)


class SecretScrubber:
    """Cuts a call's redacted values out of any text, whole or in pieces, any case.

    The algorithm: every redacted value is folded to one case, character by
    character (so indexes line up). A value of at least ``SECRET_GRAM`` (8)
    characters contributes all its windows of 8 characters to a set; a shorter one
    (4 to 7 characters; shorter ones would only mangle text) is kept whole. A text
    is folded the same way and every window of 8 (and of each short value's
    length) is looked up in those sets; the union of the windows that hit is
    replaced by ``[redacted]``, adjacent hits merged into one. A piece of a value
    8 or more characters long is made of its own 8-windows, so the union covers it
    entirely: the matches extend as far as they go.

    Cost: building is O(sum of value lengths) set insertions. Scrubbing a text of
    n characters looks up n/4 windows of 4 characters (anchors) and, around each
    anchor that is a piece of a value, at most 4 windows of 8: between n/4 and
    5n/4 lookups, plus n per distinct short-value length (at most 4 of them). Each
    lookup is one slice and one hash, so the cost does not grow with the number
    or length of the redacted values. Limits: a character whose case mapping changes
    length (``ß``/``SS``, ``ﬁ``) matches only in its own case; a piece shorter than
    8 characters, or a value transformed otherwise than by case (reversed, encoded
    as base64 or hex, spaced out), is not recognised.
    """

    __slots__ = ("_anchors", "_grams", "_short")

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._grams: set[str] = set()
        self._anchors: set[str] = set()
        self._short: dict[int, set[str]] = {}
        for value in values:
            folded = _fold(safe_text(value))
            if len(folded) >= SECRET_GRAM:
                self._grams.update(
                    folded[i : i + SECRET_GRAM] for i in range(len(folded) - SECRET_GRAM + 1)
                )
                self._anchors.update(
                    folded[i : i + _ANCHOR] for i in range(len(folded) - _ANCHOR + 1)
                )
            elif len(folded) >= MIN_SCRUBBED_VALUE:
                self._short.setdefault(len(folded), set()).add(folded)

    def __bool__(self) -> bool:
        return bool(self._grams or self._short)

    def _gram_starts(self, folded: str) -> set[int]:
        """Starts of the 8-windows of ``folded`` that are pieces of a value.

        Only every 4th position is looked up first, in the set of the values'
        4-windows: a matching 8-window at ``s`` contains the 4-window at the first
        multiple of 4 from ``s`` on, so it is found by checking the 8-windows
        starting up to 3 places before each anchor that hit.
        """
        grams, anchors, last = self._grams, self._anchors, len(folded) - SECRET_GRAM
        starts: set[int] = set()
        for p in range(0, len(folded) - _ANCHOR + 1, _ANCHOR):
            if folded[p : p + _ANCHOR] in anchors:
                for s in range(max(0, p - _ANCHOR + 1), min(p, last) + 1):
                    if folded[s : s + SECRET_GRAM] in grams:
                        starts.add(s)
        return starts

    def _hits(self, folded: str) -> list[tuple[int, int]]:
        spans = [(s, s + SECRET_GRAM) for s in self._gram_starts(folded)] if self._grams else []
        for size, whole in self._short.items():
            spans += [
                (i, i + size)
                for i in range(len(folded) - size + 1)
                if folded[i : i + size] in whole
            ]
        return spans

    def scrub(self, text: str) -> str:
        """``text`` with every piece of a redacted value replaced by ``[redacted]``."""
        if not self or len(text) < MIN_SCRUBBED_VALUE:
            return text
        spans = self._hits(_fold(text))
        if not spans:
            return text
        spans.sort()
        out: list[str] = []
        position = 0
        start, end = spans[0]
        for s, e in spans[1:]:
            if s <= end:
                end = max(end, e)
                continue
            out += [text[position:start], REDACTED_TEXT]
            position, (start, end) = end, (s, e)
        out += [text[position:start], REDACTED_TEXT, text[end:]]
        return "".join(out)


def _message_of(value: object) -> str:
    """``str(value)``, or a placeholder when that raises: the tool already ran."""
    try:
        return str(value)
    except Exception:
        return f"<the message could not be read ({type(value).__name__})>"


def clean_message(
    value: object,
    arguments: Any = None,
    secrets: SecretScrubber | None = None,
    limit: int = MAX_ERROR_CHARS,
) -> str:
    """A message written by code we do not control (an exception, a reconcile hook),
    as it may be stored: readable, valid UTF-8, scrubbed, bounded. Never raises.

    ``secrets`` holds the call's redacted values (``SecretScrubber``); argument
    values are replaced whole in any case. The text is cut to a few times its
    final bound before scrubbing, so megabytes of message cost no more than a line.
    """
    message = safe_text(_message_of(value)[: limit * 4])
    if secrets:
        message = secrets.scrub(message)
    return bound(scrub(message, string_values(arguments)), limit)


def describe_error(
    exc: BaseException, arguments: Any = None, secrets: SecretScrubber | None = None
) -> dict[str, str]:
    """What the ledger stores about an exception: its type and a scrubbed message."""
    kind = safe_text(bound(type(exc).__name__, MAX_TYPE_CHARS))
    if secrets:
        kind = secrets.scrub(kind)
    return {"type": kind, "message": clean_message(exc, arguments, secrets)}

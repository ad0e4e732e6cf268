"""Compiling a policy's regular expressions so they cannot be turned against the gate.

The text a pattern is matched against comes from the model, so a pattern must not
be a denial-of-service lever, and it must match the *whole* value:

* matching is always ``re.fullmatch``: ``^`` / ``$`` are not needed and ``$``'s
  "or before a final newline" loophole does not exist;
* the pattern is capped at ``MAX_PATTERN_CHARS`` and the input at a per-condition
  ``max_input`` (over the cap is an evaluation *error*, so padding a value can't
  dodge a deny rule);
* patterns are ASCII by default: ``\\d`` means ``[0-9]``, not every Unicode digit
  (``unicode: true`` opts in);
* a pattern with a repeat inside an unbounded repeat (``(a+)+``, ``(\\w+\\s?)*``),
  the classic catastrophic-backtracking shape, is refused at load time unless the
  inner part is atomic (``(?>...)``) or possessive (``a++``). This is a heuristic
  over Python's own regex parser, not a proof: polynomial blow-ups such as
  ``.*a.*b.*c`` still pass, which is what the input cap bounds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any, Final

try:  # Python's regex parser: private, but the only exact view of a pattern's structure.
    from re import _constants as _sre_constants
    from re import _parser as _sre_parser
except ImportError:  # pragma: no cover - a future Python without it loses only the heuristic
    _sre_parser = None  # type: ignore[assignment]
    _sre_constants = None  # type: ignore[assignment]

__all__ = ["DEFAULT_MAX_INPUT", "MAX_INPUT_LIMIT", "MAX_PATTERN_CHARS", "compile_pattern"]

MAX_PATTERN_CHARS: Final = 512
DEFAULT_MAX_INPUT: Final = 1024
MAX_INPUT_LIMIT: Final = 65536


def _children(av: Any) -> Iterator[Any]:
    if _sre_parser is not None and isinstance(av, _sre_parser.SubPattern):
        yield av
    elif isinstance(av, list | tuple):
        for item in av:
            yield from _children(item)


def _has_nested_repeat(items: Iterable[tuple[Any, Any]], inside_unbounded: bool) -> bool:
    c = _sre_constants
    for op, av in items:
        if op in (c.MAX_REPEAT, c.MIN_REPEAT):
            _low, high, sub = av
            if inside_unbounded and high > 1:
                return True
            if _has_nested_repeat(sub, inside_unbounded or high == c.MAXREPEAT):
                return True
        elif op in (c.ATOMIC_GROUP, c.POSSESSIVE_REPEAT):
            continue  # no backtracking into these
        else:
            for child in _children(av):
                if _has_nested_repeat(child, inside_unbounded):
                    return True
    return False


@lru_cache(maxsize=1024)
def compile_pattern(pattern: str, unicode: bool = False) -> re.Pattern[str]:
    """Compile ``pattern`` for ``fullmatch``; raises ``ValueError`` saying what to change."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"pattern longer than {MAX_PATTERN_CHARS} characters")
    flags = 0 if unicode else re.ASCII
    try:
        compiled = re.compile(pattern, flags)
    except re.error as exc:
        raise ValueError(f"invalid regular expression: {exc.msg} at position {exc.pos}") from None
    if _sre_parser is not None and _has_nested_repeat(
        _sre_parser.parse(pattern, flags), inside_unbounded=False
    ):
        raise ValueError(
            "nested repetition inside an unbounded repeat can backtrack catastrophically; "
            "rewrite it, or make the inner part atomic '(?>...)' or possessive ('a++')"
        )
    return compiled

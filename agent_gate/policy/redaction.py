"""The redacted form of a call's arguments, for the audit trail.

A field the policy names under ``redact:`` is replaced by a small object:

    {"redacted": "sha256:9f86...", "preview": "He…", "size": 412, "type": "string"}

so the trail can still prove what was sent (recompute the digest from a
candidate value) and show a person roughly what it was, without holding the
value. ``preview`` shows at most the number of leading characters the policy
allows and never more than a quarter of the string; non-strings get no preview.
The audit chain hashes this redacted form, so the clear value never has to be
stored anywhere to verify the chain.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from agent_gate.policy.hashing import canonical_json, digest
from agent_gate.policy.paths import ArgPath, iter_matches, parse_path

__all__ = ["REDACTED_KEY", "RedactionRule", "redact_arguments", "redacted_value"]

REDACTED_KEY: Final = "redacted"
_ELLIPSIS: Final = "…"


@dataclass(frozen=True, slots=True)
class RedactionRule:
    """One path (``*`` matches any key or index) and how many characters to preview."""

    path: ArgPath
    preview: int = 0

    @classmethod
    def parse(cls, path: str, preview: int = 0) -> RedactionRule:
        return cls(parse_path(path, wildcard=True), preview)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def redacted_value(value: Any, preview: int = 0, key: bytes | None = None) -> dict[str, Any]:
    """The stand-in stored instead of ``value``; ``size`` counts characters of a string,
    bytes of canonical JSON otherwise."""
    kind = _type_name(value)
    if isinstance(value, str):
        size = len(value)
        shown = min(preview, size // 4)
        text = value[:shown] + _ELLIPSIS if shown else _ELLIPSIS
    else:
        size = len(canonical_json(value))
        text = _ELLIPSIS
    return {REDACTED_KEY: digest(value, key), "preview": text, "size": size, "type": kind}


def redact_arguments(
    arguments: Mapping[str, Any], rules: Iterable[RedactionRule], *, key: bytes | None = None
) -> dict[str, Any]:
    """A deep copy of ``arguments`` with every field a rule names redacted.

    The input is never modified. Paths that reach nothing are ignored: an
    optional field that was not sent has nothing to hide. Overlapping rules are
    fine; a field already redacted is not redacted again.
    """
    result: dict[str, Any] = copy.deepcopy(dict(arguments))
    # Stand-ins are _Redacted until the end, then turned back into plain dicts.
    for rule in rules:
        for container, slot in list(iter_matches(result, rule.path)):
            current = container[slot]
            if isinstance(current, _Redacted):
                continue
            container[slot] = _Redacted(redacted_value(current, rule.preview, key))
    return _plain(result)


class _Redacted(dict[str, Any]):
    """Marks stand-ins created in this call so overlapping rules don't re-redact them."""


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value

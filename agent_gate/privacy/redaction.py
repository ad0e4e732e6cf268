"""The redacted form of a call's arguments and results: what the policy's
``redact:`` and ``redact_result:`` rules (``policy.redaction.RedactionRule``, the
declaration) do to a value.

A field a rule names is replaced by a small object:

    {"redacted": "sha256:9f86...", "preview": "He…", "size": 412, "type": "string"}

so the trail can still prove what was sent (recompute the digest from a
candidate value) and show a person roughly what it was, without holding the
value. ``preview`` shows at most the number of leading characters the policy
allows and never more than a quarter of the string; non-strings get no preview.
The audit chain hashes this redacted form, so the clear value never has to be
stored anywhere to verify the chain.

A tool's *result* is redacted the same way (``redact_result``); the gate stores
and renders it with the same stand-ins, and passes every other string of it
through a scrubber (``scrub_strings``) that cuts out the call's redacted values.

The application lives here, in privacy, and not beside the declaration: the policy
layer says which fields are secret, this room decides what of them may be kept,
and the policy never imports it back (``tests/test_layers.py``).
"""

from __future__ import annotations

import copy
import hashlib
import hmac
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from agent_gate.errors import json_type_name
from agent_gate.plainjson import canonical_bytes, sha256_hex
from agent_gate.policy.paths import iter_matches
from agent_gate.policy.redaction import RedactionRule

__all__ = [
    "REDACTED_KEY",
    "digest",
    "redact_arguments",
    "redact_result",
    "redacted_value",
    "scrub_strings",
]

REDACTED_KEY: Final = "redacted"
_ELLIPSIS: Final = "…"


def digest(value: Any, key: bytes | None = None) -> str:
    """``sha256:<hex>`` of a value's canonical JSON, or ``hmac-sha256:<hex>`` with a key.

    Unkeyed hashes of short values (an amount, an e-mail address) can be reversed
    by guessing; a secret key makes the stored digest useless to whoever only has
    the audit trail, while still letting the key holder prove what was sent.
    """
    data = canonical_bytes(value, "surrogatepass")  # hashed whatever text it holds
    if key is None:
        return "sha256:" + sha256_hex(data)
    return "hmac-sha256:" + hmac.new(key, data, hashlib.sha256).hexdigest()


def redacted_value(value: Any, preview: int = 0, key: bytes | None = None) -> dict[str, Any]:
    """The stand-in stored instead of ``value``; ``size`` counts characters of a string,
    bytes of canonical JSON otherwise."""
    kind = json_type_name(value)
    if isinstance(value, str):
        size = len(value)
        shown = min(preview, size // 4)
        text = value[:shown] + _ELLIPSIS if shown else _ELLIPSIS
    else:
        size = len(canonical_bytes(value, "surrogatepass"))
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
    _stand_in(result, rules, key)
    return _plain(result)


def _stand_in(copied: Any, rules: Iterable[RedactionRule], key: bytes | None) -> list[Any]:
    """Put a marked stand-in in place of every field of ``copied`` a rule names (one
    already standing in is left as it is); returns the clear values replaced."""
    found: list[Any] = []
    for rule in rules:
        for container, slot in list(iter_matches(copied, rule.path)):
            current = container[slot]
            if isinstance(current, _Redacted):
                continue
            found.append(current)
            container[slot] = _Redacted(redacted_value(current, rule.preview, key))
    return found


def redact_result(
    result: Any, rules: Iterable[RedactionRule], *, key: bytes | None = None
) -> tuple[Any, list[Any]]:
    """A copy of a tool's JSON result with every field a rule names redacted, and the
    clear values that were replaced (the rest of the result is scrubbed of them).

    The stand-ins stay marked until ``scrub_strings`` turns the copy into plain
    JSON, so that scrubbing leaves their preview and digest alone. A result that is
    not an object or a list has no fields: it is returned as it is.
    """
    rules = tuple(rules)
    if not rules or not isinstance(result, dict | list):
        return result, []
    copied = copy.deepcopy(result)
    return copied, _stand_in(copied, rules, key)


def scrub_strings(value: Any, scrub: Callable[[str], str]) -> Any:
    """Plain JSON: ``value`` with every string and key passed through ``scrub``.

    Numbers are written out and scrubbed too (an account number echoed as an
    integer); one that ``scrub`` changes becomes the scrubbed text. Stand-ins made
    by ``redact_result`` are kept as they are.
    """
    if isinstance(value, _Redacted):
        return dict(value)
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        text = str(value)
        cleaned = scrub(text)
        return value if cleaned == text else cleaned
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            name = scrub(k)
            while name in out:  # two keys scrubbed alike: keep both entries
                name += "'"
            out[name] = scrub_strings(v, scrub)
        return out
    if isinstance(value, list | tuple):
        return [scrub_strings(v, scrub) for v in value]
    return value


class _Redacted(dict[str, Any]):
    """Marks stand-ins created in this call so overlapping rules don't re-redact them."""


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value

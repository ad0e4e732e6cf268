"""Is a value plain JSON data, as JSON parsing produces it? The gate for compiled paths.

The compiled fast paths (orjson's canonical bytes in ``ledger.canonical``,
jsonschema-rs's accept in ``schema``) may only answer for values they read
exactly as the standard-library reference does: dicts with str keys, lists, str,
bool, None, ints within 64 bits and finite floats. Anything else (subclasses,
tuples, big ints, NaN, objects) goes to the reference. One walker serves both,
with the two places where their tolerances differ as parameters.

The walk is iterative (no recursion limit to hit on deep data) and touches each
value once: O(size of the value).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["plain_json"]

_INT64 = 2**63
_INT64_MIN = -_INT64
_isfinite = math.isfinite


def plain_json(value: object, *, tuples: bool = False, min_float: float = 0.0) -> bool:
    """Whether ``value`` is made only of plain JSON data (see the module docstring).

    ``tuples``: also accept tuples as arrays. ``min_float``: also refuse a nonzero
    float smaller in magnitude than this.

    It runs on every call, twice (the schema gate, then the canonical one), so its
    shape is for speed: a container's members are checked where they are met and only
    containers go on the stack (most members are strings), and the stack's methods
    are called as methods, which Python 3.11 specializes (a bound ``push = stack.append``
    is about twice as slow).
    """
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            for key, member in item.items():
                if type(key) is not str:
                    return False
                kind = type(member)
                if kind is str or kind is bool or member is None:
                    continue
                if kind is dict or kind is list or (tuples and kind is tuple):
                    stack.append(member)
                elif kind is int:
                    if not _INT64_MIN <= member < _INT64:
                        return False
                elif kind is float:
                    if not _isfinite(member) or (
                        min_float and member != 0.0 and abs(member) < min_float
                    ):
                        return False
                else:
                    return False
            continue
        if kind is list or (tuples and kind is tuple):
            members: Any = item
        else:
            members = (item,)
        for member in members:
            kind = type(member)
            if kind is str or kind is bool or member is None:
                continue
            if kind is dict or kind is list or (tuples and kind is tuple):
                stack.append(member)
            elif kind is int:
                if not _INT64_MIN <= member < _INT64:
                    return False
            elif kind is float:
                if not _isfinite(member) or (
                    min_float and member != 0.0 and abs(member) < min_float
                ):
                    return False
            else:
                return False
    return True

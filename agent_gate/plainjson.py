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


def plain_json(value: object, *, tuples: bool = False, min_float: float = 0.0) -> bool:
    """Whether ``value`` is made only of plain JSON data (see the module docstring).

    ``tuples``: also accept tuples as arrays. ``min_float``: also refuse a nonzero
    float smaller in magnitude than this.
    """
    stack: list[Any] = [value]
    pop = stack.pop
    push = stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            push(item.values())
        elif kind is list or (tuples and kind is tuple):
            push(item)
        elif kind is int:
            if not -_INT64 <= item < _INT64:
                return False
        elif kind is float:
            if not math.isfinite(item) or (min_float and item != 0.0 and abs(item) < min_float):
                return False
        else:
            return False
    return True

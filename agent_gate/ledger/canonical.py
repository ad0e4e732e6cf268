"""Canonical JSON and the hashes built on it.

Two calls carry "the same arguments" exactly when their canonical JSON is byte for
byte equal: keys sorted, no insignificant whitespace, UTF-8, no NaN or Infinity.
The ledger compares hashes of that form, so a replayed stream that re-serializes the
same object with other spacing or key order is still recognised, while any change
of a value is a conflict. Serializing never recurses past the interpreter's limit:
a value too deep for the recursive encoders is written by an iterative one, to the
same bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from agent_gate._speedups import PURE_PYTHON
from agent_gate.plainjson import dumps, plain_json

__all__ = [
    "arguments_hash",
    "canonical_json",
    "raw_arguments_hash",
    "sha256_hex",
    "to_jsonable",
]


def _compiled_sorted_dumps() -> Callable[[Any], bytes] | None:
    if PURE_PYTHON:
        return None
    try:
        import orjson
    except ImportError:
        return None
    option = orjson.OPT_SORT_KEYS

    def dumps(value: Any) -> bytes:
        return orjson.dumps(value, option=option)

    return dumps


_fast_dumps = _compiled_sorted_dumps()
"""orjson with sorted keys, or ``None`` (not installed, or AGENT_GATE_PURE_PYTHON=1)."""

def _same_bytes_as_orjson(value: Any) -> bool:
    """Whether orjson's sorted output is byte for byte ``_reference``'s for ``value``.

    True only for plain JSON data where the two were found to agree: dicts with str
    keys, lists, tuples, str, bool, None, ints within 64 bits (orjson refuses bigger
    ones) and finite floats that are zero or at least 1e-4 in magnitude (below that
    ``repr`` writes ``1e-05`` where orjson writes ``0.00001``). Everything else
    (subclasses, NaN, which orjson writes as ``null`` where json.dumps raises,
    UUIDs and enums, which orjson serializes where json.dumps raises) is left to
    the reference, which decides or raises as it always did.
    """
    return plain_json(value, tuples=True, min_float=1e-4)


def _reference(value: Any) -> str:
    """``json.dumps`` sorted and compact, at any depth (no ``RecursionError``)."""
    return dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _canonical_bytes(value: Any) -> bytes | None:
    """orjson's canonical bytes when they are certainly ``_reference``'s, else None."""
    if _fast_dumps is None or not _same_bytes_as_orjson(value):
        return None
    try:
        return _fast_dumps(value)
    except TypeError:  # orjson.JSONEncodeError: a lone surrogate, too deep
        return None


def canonical_json(value: Any) -> str:
    """Serialize ``value`` canonically; raises ``ValueError`` for NaN / Infinity.

    orjson writes the same bytes about 7x faster for plain JSON data (see
    ``_same_bytes_as_orjson``); anything else is serialized by json.dumps.
    """
    fast = _canonical_bytes(value)
    if fast is not None:
        return fast.decode("utf-8")
    return _reference(value)


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def arguments_hash(arguments: Any) -> str:
    """Hash of parsed arguments, the value the idempotency check compares."""
    fast = _canonical_bytes(arguments)
    if fast is not None:
        return hashlib.sha256(fast).hexdigest()
    return sha256_hex(_reference(arguments))


def raw_arguments_hash(text: str | None) -> str:
    """Hash of argument text that never parsed (incomplete or not JSON).

    Domain-separated from ``arguments_hash`` so that unparsed text can never be
    mistaken for a parsed object that happens to serialize to the same bytes.
    """
    return sha256_hex(b"raw\x00" + (text or "").encode("utf-8", "surrogatepass"))


def to_jsonable(value: Any) -> Any:
    """Turn a tool's return value into plain JSON data for storage and replay.

    Pydantic models, dataclasses, dates and the like become what their JSON form
    is; anything without a JSON form becomes its ``str``. A value that still has no
    JSON form (nested deeper than serializers go, a cycle, a ``__str__`` that raises)
    raises: ``ledger.outcome_store.keep_result`` turns that into a stored stand-in,
    so the call still ends ``succeeded`` (one rule for every unstorable result).
    """
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return to_jsonable_python(value, fallback=str)

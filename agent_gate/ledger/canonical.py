"""Canonical JSON and the hashes built on it.

Two calls carry "the same arguments" exactly when their canonical JSON is byte for
byte equal: keys sorted, no insignificant whitespace, UTF-8, no NaN or Infinity.
The ledger compares hashes of that form, so a replayed stream that re-serializes the
same object with other spacing or key order is still recognised, while any change
of a value is a conflict.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

__all__ = [
    "arguments_hash",
    "canonical_json",
    "raw_arguments_hash",
    "sha256_hex",
    "to_jsonable",
]


def canonical_json(value: Any) -> str:
    """Serialize ``value`` canonically; raises ``ValueError`` for NaN / Infinity."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def arguments_hash(arguments: Any) -> str:
    """Hash of parsed arguments, the value the idempotency check compares."""
    return sha256_hex(canonical_json(arguments))


def raw_arguments_hash(text: str | None) -> str:
    """Hash of argument text that never parsed (incomplete or not JSON).

    Domain-separated from ``arguments_hash`` so that unparsed text can never be
    mistaken for a parsed object that happens to serialize to the same bytes.
    """
    return sha256_hex(b"raw\x00" + (text or "").encode("utf-8", "surrogatepass"))


def to_jsonable(value: Any) -> Any:
    """Turn a tool's return value into plain JSON data for storage and replay.

    Pydantic models, dataclasses, dates and the like become what their JSON form
    is; anything without a JSON form becomes its ``str`` rather than failing the
    call after the side effect already happened.
    """
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return to_jsonable_python(value, fallback=str)

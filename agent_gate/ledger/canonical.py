"""The argument hashes the ledger compares, built on canonical JSON.

Two calls carry "the same arguments" exactly when their canonical JSON is byte for
byte equal: keys sorted, no insignificant whitespace, UTF-8, no NaN or Infinity.
The ledger compares hashes of that form, so a replayed stream that re-serializes the
same object with other spacing or key order is still recognised, while any change
of a value is a conflict. Serializing never recurses past the interpreter's limit:
a value too deep for the recursive encoders is written by an iterative one, to the
same bytes. The one definition of canonical JSON, and of ``sha256_hex``, is
``agent_gate.plainjson`` (the policy hash uses them too); callers import them from there.
"""

from __future__ import annotations

from typing import Any

from agent_gate.plainjson import canonical_bytes, sha256_hex

__all__ = [
    "arguments_hash",
    "raw_arguments_hash",
]


def arguments_hash(arguments: Any) -> str:
    """Hash of parsed arguments, the value the idempotency check compares."""
    return sha256_hex(canonical_bytes(arguments))


def raw_arguments_hash(text: str | None) -> str:
    """Hash of argument text that never parsed (incomplete or not JSON).

    Domain-separated from ``arguments_hash`` so that unparsed text can never be
    mistaken for a parsed object that happens to serialize to the same bytes.
    """
    return sha256_hex(b"raw\x00" + (text or "").encode("utf-8", "surrogatepass"))

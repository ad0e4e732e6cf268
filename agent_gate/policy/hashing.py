"""The hashes a decision carries, over canonical JSON (``plainjson``: the one
definition of the text and of ``sha256_hex``).

A decision records ``policy_hash``: SHA-256 over the canonical JSON of the
*validated* policy (keys sorted, no insignificant whitespace, UTF-8, defaults
written out). Reformatting the YAML, reordering mapping keys, adding comments or
writing a default explicitly therefore keeps the hash, so approvals bound to it
survive cosmetic edits; any change of meaning (a rule, a bound, the order of
list items) changes it. The raw file's SHA-256 is kept next to it as
``source_sha256`` for provenance ("which bytes were deployed").
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from agent_gate.plainjson import canonical_bytes, sha256_hex

__all__ = ["digest"]


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

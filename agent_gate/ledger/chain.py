"""The audit trail's hash chain: how one entry's hash is computed.

Every audit event carries ``seq`` (its position, 1, 2, 3... without gaps),
``prev_hash`` (the hash of entry ``seq - 1``; 64 zeros for the first) and ``hash``,
the SHA-256 of a canonical JSON object holding every stored column of the entry
and ``prev_hash``. Editing any column of an entry changes its hash; deleting or
reordering entries breaks a ``seq`` step or a ``prev_hash`` link. The chain's
newest link is also kept in the one-row table ``audit_chain``, so deleting the
newest entries is noticed too.

What is hashed is exactly what is stored: ``detail`` as its stored text, which
never holds argument values (redacted stand-ins at most), so the chain can be
verified by anyone who can read the database, without any key. An attacker who
can write the database can recompute a whole chain; to notice that, keep the head
(``agent-gate audit verify`` prints it) somewhere else and pass it back with
``--anchor``.

This module is pure; ``agent_gate.ledger.audit`` writes and verifies the chain.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

__all__ = ["CHAIN_VERSION", "GENESIS", "as_utc", "entry_hash", "timestamp_us"]

GENESIS: Final = "0" * 64
CHAIN_VERSION: Final = 1
"""Part of every hashed object, so that a future change of the format is explicit."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def as_utc(value: datetime) -> datetime:
    """A stored timestamp as an aware UTC datetime (SQLite hands back naive UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def timestamp_us(value: datetime) -> int:
    """Integer microseconds since the epoch: the same number on every backend."""
    delta = as_utc(value) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def entry_hash(
    *,
    seq: int,
    prev_hash: str,
    at: datetime,
    task_id: str,
    call_row_id: int | None,
    call_id: str | None,
    event: str,
    from_state: str | None,
    to_state: str | None,
    actor: str | None,
    detail: str | None,
) -> str:
    """SHA-256 (hex) of one entry linked to its predecessor's hash."""
    at_us = timestamp_us(at)
    if (
        type(seq) is int
        and type(at_us) is int
        and type(call_row_id) in _INT_OR_NONE
        and type(prev_hash) is str
        and type(task_id) is str
        and type(event) is str
        and type(call_id) in _STR_OR_NONE
        and type(from_state) in _STR_OR_NONE
        and type(to_state) in _STR_OR_NONE
        and type(actor) in _STR_OR_NONE
        and type(detail) in _STR_OR_NONE
    ):
        # _body_text's output for these types, in one format (keys in sorted order).
        text = (
            f'{{"actor":{_text(actor)},"at_us":{at_us},"call":{_text(call_id)},'
            f'"call_row":{"null" if call_row_id is None else call_row_id},'
            f'"detail":{_text(detail)},"event":{_encode_str(event)},'
            f'"from":{_text(from_state)},"prev":{_encode_str(prev_hash)},"seq":{seq},'
            f'"task":{_encode_str(task_id)},"to":{_text(to_state)},"v":{CHAIN_VERSION}}}'
        )
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    body: dict[str, Any] = {
        "v": CHAIN_VERSION,
        "seq": seq,
        "prev": prev_hash,
        "at_us": timestamp_us(at),
        "task": task_id,
        "call_row": call_row_id,
        "call": call_id,
        "event": event,
        "from": from_state,
        "to": to_state,
        "actor": actor,
        "detail": detail,
    }
    text = _body_text(body)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_encode_str: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]
"""How ``json.dumps(..., ensure_ascii=False)`` writes a string (the C encoder if built)."""
_STR_OR_NONE = (str, type(None))
_INT_OR_NONE = (int, type(None))


def _text(value: str | None) -> str:
    return "null" if value is None else _encode_str(value)


_TEXT_FIELDS = ("actor", "call", "detail", "event", "from", "prev", "task", "to")
_INT_FIELDS = ("at_us", "call_row", "seq", "v")
_SORTED = tuple(sorted(_TEXT_FIELDS + _INT_FIELDS))


def _reference_text(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _body_text(body: dict[str, Any]) -> str:
    """``_reference_text(body)``, written directly when every value has the expected
    type (str or None; int, not bool, or None): four entries per gate call are
    hashed, and ``json.dumps`` with ``sort_keys`` costs several times more. Any other
    value goes to ``json.dumps`` itself, so the text is the same in every case."""
    parts = []
    for key in _SORTED:
        value = body[key]
        kind = type(value)
        if value is None:
            parts.append(f'"{key}":null')
        elif kind is str and key in _TEXT_FIELDS:
            parts.append(f'"{key}":{_encode_str(value)}')
        elif kind is int and key in _INT_FIELDS:
            parts.append(f'"{key}":{int.__repr__(value)}')
        else:
            return _reference_text(body)
    if len(body) != len(_SORTED):
        return _reference_text(body)
    return "{" + ",".join(parts) + "}"

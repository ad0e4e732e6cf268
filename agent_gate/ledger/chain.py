"""The audit trail's hash chains and checkpoints: how each hash is computed.

Entries (format 2, ``CHAIN_VERSION``)
=====================================

The trail is sharded by task: each task's entries form their own chain. An entry
carries ``seq`` (its position in its task's chain, 1, 2, 3... without gaps),
``prev_hash`` (the hash of the task's entry ``seq - 1``; 64 zeros for the first)
and ``hash``, the SHA-256 of a canonical JSON object holding every stored column
of the entry, ``prev_hash`` and the format version ``v``. Editing any column of an
entry changes its hash; deleting or reordering entries breaks a ``seq`` step or a
``prev_hash`` link. Each task's newest link is also kept in ``audit_heads``, so
deleting the newest entries of a task is noticed too.

Format 1 was one global chain (``seq`` across all tasks). It is still computed
here (``version=1``) because ``audit verify`` recomputes the pre-upgrade global
chain to recognise the head recorded by the upgrade and anchors exported before it.

Checkpoints
===========

A checkpoint binds every task's head into one ``root``: the SHA-256 of the
canonical JSON list ``[[task, seq, hash], ...]`` of every head, sorted by task id
(code point order). Each checkpoint's own ``hash`` covers its position, the time,
the number of heads, the root, the previous checkpoint's hash (checkpoints form
their own chain) and, for the first checkpoint of an upgraded ledger, the old
global chain's head. Exporting one checkpoint (id and hash) commits to every
entry of every task up to the heads it binds.

What is hashed is exactly what is stored: ``detail`` as its stored text, which
never holds argument values (redacted stand-ins at most), so everything can be
verified by anyone who can read the database, without any key. An attacker who
can write the database can recompute chains and checkpoints; to notice that, keep
a checkpoint (``agent-gate audit verify`` prints the newest) somewhere else and
pass it back with ``--anchor``.

This module is pure; ``agent_gate.ledger.audit`` writes the chains,
``agent_gate.ledger.checkpoints`` the checkpoints, ``agent_gate.ledger.trail_verify``
checks them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Final

__all__ = [
    "CHAIN_VERSION",
    "GENESIS",
    "LEGACY_VERSION",
    "as_utc",
    "checkpoint_hash",
    "entry_hash",
    "root_hash",
    "timestamp_us",
]

GENESIS: Final = "0" * 64
CHAIN_VERSION: Final = 2
"""Part of every hashed object, so that a change of the format is explicit: 2 is one
chain per task (``seq`` and ``prev_hash`` within the task)."""
LEGACY_VERSION: Final = 1
"""The one global chain written before revision 0006 (same fields, ``seq`` global)."""

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
    version: int = CHAIN_VERSION,
) -> str:
    """SHA-256 (hex) of one entry linked to its predecessor's hash, in format
    ``version`` (the fields are the same in 1 and 2; only what ``seq`` counts differs)."""
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
        and type(version) is int
    ):
        # _body_text's output for these types, in one format (keys in sorted order).
        text = (
            f'{{"actor":{_text(actor)},"at_us":{at_us},"call":{_text(call_id)},'
            f'"call_row":{"null" if call_row_id is None else call_row_id},'
            f'"detail":{_text(detail)},"event":{_encode_str(event)},'
            f'"from":{_text(from_state)},"prev":{_encode_str(prev_hash)},"seq":{seq},'
            f'"task":{_encode_str(task_id)},"to":{_text(to_state)},"v":{version}}}'
        )
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    body: dict[str, Any] = {
        "v": version,
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


def root_hash(heads: Iterable[tuple[str, int, str]]) -> str:
    """SHA-256 (hex) over every task head ``(task, seq, hash)``: the canonical JSON list
    of them sorted by task id. Hashed incrementally: a ledger may hold many tasks."""
    digest = hashlib.sha256(b"[")
    first = True
    for task_id, seq, head in sorted(heads):
        item = f"[{_encode_str(task_id)},{int(seq)},{_encode_str(head)}]"
        digest.update((item if first else "," + item).encode("utf-8", "surrogatepass"))
        first = False
    digest.update(b"]")
    return digest.hexdigest()


def checkpoint_hash(
    *,
    checkpoint_id: int,
    prev_hash: str,
    at: datetime,
    tasks: int,
    root: str,
    legacy_seq: int | None,
    legacy_hash: str | None,
    legacy_last_id: int | None,
) -> str:
    """SHA-256 (hex) of one checkpoint linked to the previous checkpoint's hash."""
    body = {
        "v": CHAIN_VERSION,
        "kind": "checkpoint",
        "id": checkpoint_id,
        "prev": prev_hash,
        "at_us": timestamp_us(at),
        "tasks": tasks,
        "root": root,
        "legacy": None if legacy_seq is None else
        {"seq": legacy_seq, "hash": legacy_hash, "last_id": legacy_last_id},
    }
    return hashlib.sha256(_reference_text(body).encode("utf-8", "surrogatepass")).hexdigest()

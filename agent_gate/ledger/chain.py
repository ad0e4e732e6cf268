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

A checkpoint binds the tasks' heads into one ``root``: the SHA-256 of the canonical
JSON list ``[[task, seq, hash], ...]`` of heads, sorted by task id (code point order).
Which heads, and what ``tasks`` counts, is the checkpoint's heads format:

* written before revision 0018 (``heads_format`` None): every task's head; the full
  set at a checkpoint is each task's newest head stored at it or before;
* ``HEADS_MOVED`` (2): only the heads that moved since the previous checkpoint, each
  task's newest entry among the leaves its Merkle tree grew by. Every earlier set is
  committed to through the checkpoints' own hash chain, so nothing is lost, and
  writing or checking a checkpoint costs its changes, not every task ever seen.

Each checkpoint's own ``hash`` covers its position, the time, the number of heads, the
root, the previous checkpoint's hash (checkpoints form their own chain), its Merkle
tree and heads format when it has them and, for the first checkpoint of an upgraded
ledger, the old global chain's head. Exporting one checkpoint (id and hash) commits to every
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

from agent_gate.evidence.merkle import leaf_hash

__all__ = [
    "CHAIN_VERSION",
    "GENESIS",
    "HEADS_MOVED",
    "LEGACY_VERSION",
    "LINK_SQL",
    "HeadsRoot",
    "as_utc",
    "checkpoint_hash",
    "entry_hash",
    "entry_leaf",
    "entry_parts",
    "entry_text",
    "link_text",
    "root_hash",
    "row_leaf",
    "timestamp_us",
]

GENESIS: Final = "0" * 64
HEADS_MOVED: Final = 2
"""The heads format of a checkpoint that binds only the heads that moved since the
previous one (revision 0018)."""
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
    ``version`` (the fields are the same in 1 and 2; only what ``seq`` counts differs).

    The text hashed is ``entry_text``'s: the entry's own fields (``entry_parts``)
    around its link (``link_text``)."""
    head, tail = entry_parts(
        at=at, task_id=task_id, call_row_id=call_row_id, call_id=call_id, event=event,
        from_state=from_state, to_state=to_state, actor=actor, detail=detail,
        version=version,
    )
    return hashlib.sha256(
        entry_text(head, prev_hash, seq, tail).encode("utf-8", "surrogatepass")
    ).hexdigest()


def entry_leaf(
    *, seq: int, prev_hash: str, version: int = CHAIN_VERSION, **fields: Any
) -> tuple[str, bytes]:
    """``(entry_hash, leaf)``: the entry's chain hash and its leaf in the trail's Merkle
    tree, ``SHA-256(0x00 || text)`` over the same hashed text (RFC 6962's leaf hash),
    the text written once for both."""
    head, tail = entry_parts(version=version, **fields)
    data = entry_text(head, prev_hash, seq, tail).encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest(), leaf_hash(data)


def row_leaf(row: Any) -> tuple[str, bytes]:
    """``entry_leaf`` of a stored ``audit_events`` row (a mapping): the same text, read
    straight off the row (the verifier's and the checkpoint's per-entry path)."""
    head, tail = entry_parts(
        at=row["at"], task_id=row["task_id"], call_row_id=row["call_row_id"],
        call_id=row["call_id"], event=row["event"], from_state=row["from_state"],
        to_state=row["to_state"], actor=row["actor"], detail=row["detail"],
    )
    data = (head + link_text(row["prev_hash"], row["seq"]) + tail).encode(
        "utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest(), hashlib.sha256(b"\x00" + data).digest()


def entry_parts(
    *,
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
) -> tuple[str, str]:
    """The hashed text of an entry around its link, ``(head, tail)``: the canonical
    JSON object (``json.dumps`` with sorted keys, compact, not ASCII-escaped) whose
    keys sort as ``actor, at_us, call, call_row, detail, event, from`` (``head``, up to
    and including ``"prev":``), then ``prev`` and ``seq`` (``link_text``), then
    ``task, to, v`` (``tail``, from the comma before ``"task"``).

    Split there because the link is the one part only the chain's writer knows: on
    PostgreSQL the server reads the task's head and splices the link in
    (``audit``'s server-side append, ``LINK_SQL``), the rest is written here once.
    """
    at_us = timestamp_us(at)
    if (
        type(at_us) is int
        and type(call_row_id) in _INT_OR_NONE
        and type(task_id) is str
        and type(event) is str
        and type(call_id) in _STR_OR_NONE
        and type(from_state) in _STR_OR_NONE
        and type(to_state) in _STR_OR_NONE
        and type(actor) in _STR_OR_NONE
        and type(detail) in _STR_OR_NONE
        and type(version) is int
    ):
        # _value's output for these types, written in one format string.
        return (
            f'{{"actor":{_text(actor)},"at_us":{at_us},"call":{_text(call_id)},'
            f'"call_row":{"null" if call_row_id is None else call_row_id},'
            f'"detail":{_text(detail)},"event":{_encode_str(event)},'
            f'"from":{_text(from_state)},"prev":',
            f',"task":{_encode_str(task_id)},"to":{_text(to_state)},"v":{version}}}',
        )
    return (
        f'{{"actor":{_value(actor)},"at_us":{_value(at_us)},"call":{_value(call_id)},'
        f'"call_row":{_value(call_row_id)},"detail":{_value(detail)},'
        f'"event":{_value(event)},"from":{_value(from_state)},"prev":',
        f',"task":{_value(task_id)},"to":{_value(to_state)},"v":{_value(version)}}}',
    )


def link_text(prev_hash: str, seq: int) -> str:
    """The link's part of the hashed text, between ``entry_parts``' head and tail."""
    if type(prev_hash) is str and type(seq) is int:
        return f'{_encode_str(prev_hash)},"seq":{seq}'
    return f'{_value(prev_hash)},"seq":{_value(seq)}'


def entry_text(head: str, prev_hash: str, seq: int, tail: str) -> str:
    """The whole hashed text of an entry: its parts around its link."""
    return head + link_text(prev_hash, seq) + tail


LINK_SQL: Final = """'"' || {prev} || '","seq":' || {seq}"""
"""``link_text`` in SQL for PostgreSQL's server-side append (a chain's ``prev`` is
always 64 hex digits and ``seq`` an integer, which ``link_text`` writes this way):
``{prev}`` and ``{seq}`` are the SQL expressions of the two. The revision that
installs the append function (``migrations/versions/0007_...``) renders it, and a
test holds the two to the same hashes."""


_encode_str: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]
"""How ``json.dumps(..., ensure_ascii=False)`` writes a string (the C encoder if built)."""
_STR_OR_NONE = (str, type(None))
_INT_OR_NONE = (int, type(None))


def _text(value: str | None) -> str:
    return "null" if value is None else _encode_str(value)


def _value(value: Any) -> str:
    """One value as ``_reference_text`` writes it inside the object: a str, None or
    int (not bool) directly, any other value by ``json.dumps`` itself (same options)."""
    kind = type(value)
    if value is None:
        return "null"
    if kind is str:
        return _encode_str(value)
    if kind is int:
        return int.__repr__(value)
    return _reference_text(value)


def _reference_text(body: Any) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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


class HeadsRoot:
    """``root_hash`` over a set of heads that changes a few at a time, as a verifier
    folds checkpoint after checkpoint: each head's text is made once when it changes,
    the task order is kept between roots, and a root is one join and one SHA-256 over
    all of them (C speed), not a sort and a format per head. The same bytes as
    ``root_hash`` (a test holds them together)."""

    __slots__ = ("_fresh", "_order", "_text")

    def __init__(self) -> None:
        self._text: dict[str, str] = {}
        self._order: list[str] = []
        self._fresh: list[str] = []

    def __len__(self) -> int:
        return len(self._text)

    def set(self, task_id: str, seq: int, head: str) -> None:
        if task_id not in self._text:
            self._fresh.append(task_id)
        self._text[task_id] = f"[{_encode_str(task_id)},{int(seq)},{_encode_str(head)}]"

    def hexdigest(self) -> str:
        if self._fresh:  # two sorted runs: timsort merges them in one pass
            self._order = sorted(self._order + sorted(self._fresh))
            self._fresh = []
        text = self._text
        body = ",".join([text[task] for task in self._order])
        return hashlib.sha256(f"[{body}]".encode("utf-8", "surrogatepass")).hexdigest()


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
    tree: tuple[int, int, str] | None = None,
    heads_format: int | None = None,
) -> str:
    """SHA-256 (hex) of one checkpoint linked to the previous checkpoint's hash.

    ``tree`` (size, last entry id, root hex) is the Merkle tree over every entry the
    checkpoint binds (revision 0010); ``heads_format`` how ``root`` binds the heads
    (``HEADS_MOVED``, revision 0018). Each is hashed only when present, so the hashes
    of older checkpoints recompute as they were written, and a checkpoint cannot be
    passed off in the other format."""
    body: dict[str, Any] = {
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
    if tree is not None:
        body["tree"] = {"size": tree[0], "last_id": tree[1], "root": tree[2]}
    if heads_format is not None:
        body["heads"] = heads_format
    return hashlib.sha256(_reference_text(body).encode("utf-8", "surrogatepass")).hexdigest()

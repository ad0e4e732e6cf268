"""Archived leaves as perfect subtrees: what a full ``audit verify`` reads in their place.

An archive batch prunes leaves of the trail's Merkle tree; every root above them must
still verify. Walking each kept leaf (``audit_pruned``) makes a full verify cost every
entry ever written. RFC 6962's tree needs less: an aligned perfect subtree
``[start, start + 2**level)`` enters a root only through its hash, so the archive keeps,
per batch, the hashes of the aligned subtrees that cover its leaves (``cover``: each run
of consecutive pruned positions split at every checkpoint's size, then into the widest
aligned pieces, as C2SP tlog-tiles stores whole tiles). The verifier appends each one
to the frontier where its leaves stood (``Frontier.extend_piece``) and recomputes every
checkpoint's size, root and frontier from O(live entries + subtrees) inputs; the cut at
each checkpoint's size keeps every checkpoint's frontier computable.

Why a stored subtree hash is believed:

* the archive takes it from the signed tree it exported against, after checking each
  pruned leaf is that tree's leaf at that position (``evidence.archive``);
* the batch's ``archived`` entry (hash-chained, bound by the next checkpoints) commits
  to the list: its count and ``subtrees_hash`` over ``(start, level, first_id, last_id,
  hash)`` in order, and names the signed tree the leaves were in (``batch_problem``);
* every checkpoint root over the pruned range recomputes only with the right hash at
  the right position (``trail_tree.TreeWalk.add_subtree``).

A pruned entry's own row is still read where a live chain or a checkpoint's head names
it (the link into a re-used task, an archived task's head), and it must lie inside a
subtree of its own batch (``Kept.covers``): a row passed off as pruned without one is a
deleted entry. Batches archived before revision 0017 have no subtrees: their leaves are
walked one by one and checked against the record's root (``pruned.archive_problem``).
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Final

from sqlalchemy import Connection, func, or_, select

from agent_gate.evidence.merkle import range_pieces
from agent_gate.ledger.models import (
    ARCHIVED_HEADS,
    AUDIT_EVENTS,
    AUDIT_HEADS,
    AUDIT_PRUNED,
    AUDIT_PRUNED_HEADS,
    AUDIT_SUBTREES,
)
from agent_gate.ledger.pruned import ARCHIVE_EVENT, ARCHIVE_TASK, merge, pruned_rows

__all__ = ["BOUND_HASH_KEY", "BOUND_KEY", "COUNT_KEY", "HASH_KEY", "HEADS_KEY", "Bound", "Ended",
           "Kept", "Subtree", "archived_heads", "batch_problem", "bound_counts", "bound_hash",
           "cover", "ends_problem", "head_count", "heads_hash", "heads_of", "hidden_heads",
           "junction", "leafwise", "moved_out", "records", "subtrees_hash", "walk"]

COUNT_KEY: Final = "subtrees"
"""The archive record's key for the number of subtrees its batch kept."""
HASH_KEY: Final = "subtrees_hash"
"""The archive record's key for ``subtrees_hash`` of its batch's subtrees."""
HEADS_KEY: Final = "heads_hash"
"""The archive record's key for ``heads_hash`` of the chain ends its batch archived."""
BOUND_KEY: Final = "bound"
"""The archive record's key for how many heads its batch moved out of each checkpoint
(``{checkpoint id: count}``, into ``audit_pruned_heads``)."""
BOUND_HASH_KEY: Final = "bound_hash"
"""The archive record's key for ``bound_hash`` of the heads its batch moved out."""
_BATCH = 5000
_KEYS = 500
"""Keys per ``IN`` list."""


@dataclass(frozen=True, slots=True)
class Subtree:
    """``2**level`` pruned leaves from leaf ``start``: rows ``first_id..last_id``."""

    start: int
    level: int
    first_id: int
    last_id: int
    hash: str
    archive: str

    @property
    def width(self) -> int:
        return 1 << self.level


def cover(positions: Sequence[int], cuts: Iterable[int]) -> list[tuple[int, int]]:
    """``(start, level)`` of the aligned perfect subtrees covering the sorted leaf
    ``positions``: each run of consecutive positions, split at each of ``cuts`` (the
    checkpoints' sizes) that falls inside it, as the widest aligned pieces."""
    edges = sorted(set(cuts))
    out: list[tuple[int, int]] = []
    at = 0
    while at < len(positions):
        end = at
        while end + 1 < len(positions) and positions[end + 1] == positions[end] + 1:
            end += 1
        lo, hi = positions[at], positions[end] + 1
        inner = edges[bisect.bisect_right(edges, lo):bisect.bisect_left(edges, hi)]
        bounds = [lo, *inner, hi]
        for a, b in pairwise(bounds):
            out.extend((start, width.bit_length() - 1) for start, width in range_pieces(a, b))
        at = end + 1
    return out


def subtrees_hash(subtrees: Iterable[Subtree]) -> str:
    """SHA-256 over the subtrees in ``start`` order, as the archive record commits to it."""
    rows = [[s.start, s.level, s.first_id, s.last_id, s.hash]
            for s in sorted(subtrees, key=lambda s: s.start)]
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


def _subtree(row: Any) -> Subtree:
    return Subtree(int(row.start), int(row.level), int(row.first_id), int(row.last_id),
                   row.hash, row.archive)


def walk(conn: Connection, *, after: int = 0, leafwise: set[str] | frozenset[str] = frozenset(),
         every_leaf: bool = False) -> Iterator[Any]:
    """The trail after row ``after`` in id order, as a verifier reads it: live entries,
    each subtree (a mapping with ``id`` its first row and ``subtree``), and the kept leaves
    of the ``leafwise`` batches (archived before subtrees were kept; ``leaf`` key).
    ``every_leaf``: no subtree, every kept leaf of every batch instead (a deep verify)."""
    live = conn.execute(select(AUDIT_EVENTS).where(AUDIT_EVENTS.c.id > after)
                        .order_by(AUDIT_EVENTS.c.id)
                        .execution_options(yield_per=_BATCH)).mappings()
    if every_leaf:
        return merge(live, pruned_rows(conn, after=after))
    kept = conn.execute(select(AUDIT_SUBTREES).where(AUDIT_SUBTREES.c.first_id > after)
                        .order_by(AUDIT_SUBTREES.c.first_id))
    pieces = ({"id": int(row.first_id), "subtree": _subtree(row)} for row in kept)
    leaves = pruned_rows(conn, after=after, batches=leafwise) if leafwise else iter(())
    return merge(merge(live, pieces), leaves)


@dataclass(slots=True)
class Kept:
    """The subtrees a walk met, in id order: which rows they cover, per batch."""

    leafwise: frozenset[str] = frozenset()
    """Batches archived before subtrees were kept: their rows are walked one by one."""
    firsts: list[int] = field(default_factory=list)
    items: list[Subtree] = field(default_factory=list)
    batches: dict[str, list[Subtree]] = field(default_factory=dict)

    def add(self, subtree: Subtree) -> None:
        self.firsts.append(subtree.first_id)
        self.items.append(subtree)
        self.batches.setdefault(subtree.archive, []).append(subtree)

    def covers(self, row_id: int, archive: str) -> bool:
        """Whether pruned row ``row_id`` lies inside a subtree of its batch ``archive`` (or
        the batch is walked leaf by leaf, each of its rows checked against its record)."""
        if archive in self.leafwise:
            return True
        at = bisect.bisect_right(self.firsts, row_id) - 1
        return at >= 0 and self.items[at].last_id >= row_id and self.items[at].archive == archive


def leafwise(found: dict[str, dict[str, Any]]) -> frozenset[str]:
    """The batches whose record names no subtrees: archived before revision 0017."""
    return frozenset(batch for batch, record in found.items() if HASH_KEY not in record)


def records(conn: Connection, *, after: int = 0) -> dict[str, dict[str, Any]]:
    """Every archive record's detail by batch id (the ``task_id`` index: one per batch),
    or only those written after row ``after``. A batch prunes entries written before its
    record, so the batches whose entries lie after a row all have their record after it:
    a verify from a checkpoint reads those, not one per batch ever archived."""
    out: dict[str, dict[str, Any]] = {}
    for detail, in conn.execute(select(AUDIT_EVENTS.c.detail).where(
            AUDIT_EVENTS.c.task_id == ARCHIVE_TASK, AUDIT_EVENTS.c.event == ARCHIVE_EVENT,
            AUDIT_EVENTS.c.id > after)):
        try:
            body = json.loads(detail)
        except (TypeError, ValueError):
            continue
        if isinstance(body, dict) and isinstance(body.get("archive"), str):
            out[body["archive"]] = body
    return out


def batch_problem(conn: Connection, found: dict[str, dict[str, Any]],
                  met: dict[str, list[Subtree]], trees: set[tuple[int, str]], *,
                  whole: bool, ended: dict[str, Ended] | None = None) -> str | None:
    """The first batch whose subtrees (or, given ``ended``, whose archived chain ends) are
    not the ones its archive record commits to, or whose record names no tree a
    checkpoint holds. ``met``: the subtrees a walk read, by batch; ``whole``: the walk
    read every subtree (a full verify; else each batch met is read again whole), and
    every record that names subtrees must then have met some."""
    if ended is not None:
        by_batch: dict[str, list[tuple[str, int, str]]] = {}
        for task, (seq, digest, batch) in ended.items():
            by_batch.setdefault(batch, []).append((task, seq, digest))
        for batch in sorted(set(by_batch) | {b for b, r in found.items() if HEADS_KEY in r}):
            record, rows = found.get(batch) or {}, by_batch.get(batch, [])
            if (len(rows), heads_hash(rows)) != (record.get("tasks"), record.get(HEADS_KEY)):
                return (f"archive batch {batch!r} recorded the chain ends of "
                        f"{record.get('tasks')} archived tasks, but the {len(rows)} kept are "
                        "not those: an archived task's head was altered, added or removed")
    for batch in sorted(met):
        record = found.get(batch)
        if record is None or HASH_KEY not in record:
            return (f"audit entries were removed as archive batch {batch!r}, but the trail "
                    "holds no archive record of that batch's subtrees: they were deleted, "
                    "not archived")
        kept = met[batch] if whole else _of_batch(conn, batch)
        if (len(kept), subtrees_hash(kept)) != (record.get(COUNT_KEY), record.get(HASH_KEY)):
            return (f"archive batch {batch!r} recorded {record.get(COUNT_KEY)} subtrees, but "
                    f"the {len(kept)} kept are not those: a subtree hash, position or range "
                    "was altered, added or removed")
        leaves = sum(s.width for s in kept)
        if leaves != record.get("entries"):
            return (f"archive batch {batch!r} recorded {record.get('entries')} pruned "
                    f"entries, but its subtrees hold {leaves}")
        size = record.get("tree_size")
        if (size, record.get("tree_root")) not in trees or max(
                s.start + s.width for s in kept) > size:
            return (f"archive batch {batch!r} names a tree of {size} entries that no "
                    "checkpoint holds, or its subtrees reach past it: its leaves were never "
                    "in the checkpoint the archive exported against")
    if whole:
        for batch in sorted(b for b, r in found.items() if HASH_KEY in r and b not in met):
            return (f"archive batch {batch!r} recorded {found[batch].get(COUNT_KEY)} "
                    "subtrees, and none is kept: they were deleted")
    return None


def _of_batch(conn: Connection, batch: str) -> list[Subtree]:
    return [_subtree(row) for row in conn.execute(
        select(AUDIT_SUBTREES).where(AUDIT_SUBTREES.c.archive == batch)
        .order_by(AUDIT_SUBTREES.c.start))]


Pruned = tuple[str, int, str]
"""A pruned entry's ``hash``, ``id`` and ``archive`` batch."""
Ended = tuple[int, str, str]
"""Where an archived task's chain ended: ``seq``, ``hash``, and the batch that pruned it."""


def archived_heads(conn: Connection, *, moved_only: bool = False
                   ) -> tuple[dict[str, tuple[int, str]], dict[str, Ended]]:
    """Every task's head, and every archived task's chain end (``archived_heads``), in one
    statement (one snapshot, one pass over the tasks). A chain end whose task has no head
    any more is left out: its batch's ``heads_hash`` then fails (``batch_problem``).

    ``moved_only``: leave out, in the database, every task whose head is still where its
    batch archived it (a task archived whole): a full verify reads the live tasks' heads
    and the re-used ones', not one row per task ever archived (``heads_of`` reads any
    other it meets)."""
    return _heads(conn, moved_only=moved_only)


def heads_of(conn: Connection, tasks: Iterable[str]
             ) -> tuple[dict[str, tuple[int, str]], dict[str, Ended]]:
    """``archived_heads`` of ``tasks`` only (by key, a bounded list at a time)."""
    wanted = sorted(set(tasks))
    heads: dict[str, tuple[int, str]] = {}
    ended: dict[str, Ended] = {}
    for at in range(0, len(wanted), _KEYS):
        more, ends = _heads(conn, only=wanted[at:at + _KEYS])
        heads.update(more)
        ended.update(ends)
    return heads, ended


def _heads(conn: Connection, *, moved_only: bool = False, only: Sequence[str] | None = None
           ) -> tuple[dict[str, tuple[int, str]], dict[str, Ended]]:
    h, a = AUDIT_HEADS.c, ARCHIVED_HEADS.c
    stmt = (select(h.task_id, h.seq, h.hash, a.seq, a.hash, a.archive)
            .select_from(AUDIT_HEADS.outerjoin(ARCHIVED_HEADS, a.task_id == h.task_id)))
    if moved_only:
        stmt = stmt.where(or_(a.task_id.is_(None), h.seq != a.seq, h.hash != a.hash))
    if only is not None:
        stmt = stmt.where(h.task_id.in_(only))
    heads: dict[str, tuple[int, str]] = {}
    ended: dict[str, Ended] = {}
    for task, seq, digest, end_seq, end_hash, batch in conn.execute(
            stmt.execution_options(yield_per=_BATCH)):
        heads[task] = (int(seq), digest)
        if batch is not None:
            ended[task] = (int(end_seq), end_hash, batch)
    return heads, ended


def ends_problem(conn: Connection, found: dict[str, dict[str, Any]]) -> str | None:
    """Whether the ledger holds as many archived chain ends as the batches' records say,
    counted in the database (one ``count``, no row read): a task deleted and passed off
    as archived adds one. A full verify counts them; a deep one rehashes each batch's
    (``batch_problem`` given ``ended``). One count for all batches: a count per batch
    would sort every row and catch nothing more, since a chain end traded for a forged
    one leaves its task's head with no chain end, which the head check names (a task
    whose head goes too is gone whole: ``--deep`` names its batch)."""
    held = int(conn.execute(select(func.count()).select_from(ARCHIVED_HEADS)).scalar_one())
    recorded = sum(r["tasks"] for r in found.values()
                   if HEADS_KEY in r and isinstance(r.get("tasks"), int))
    if held == recorded:
        return None
    return (f"the archive batches recorded the chain ends of {recorded} archived tasks, but "
            f"{held} are kept: an archived task's chain end was added or removed")


def head_count(conn: Connection) -> int:
    """How many task heads the ledger holds (counted in the database)."""
    return int(conn.execute(select(func.count()).select_from(AUDIT_HEADS)).scalar_one())


def heads_hash(heads: Iterable[tuple[str, int, str]]) -> str:
    """SHA-256 over the ``(task, seq, hash)`` a batch archived, in task order, as its
    archive record commits to it."""
    rows = sorted([task, seq, digest] for task, seq, digest in heads)
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


Bound = tuple[int, str, int, str]
"""A head a checkpoint bound: checkpoint id, task, ``seq``, ``hash``."""


def bound_hash(rows: Iterable[Bound]) -> str:
    """SHA-256 over the checkpoint heads a batch moved out, in (checkpoint, task) order,
    as its archive record commits to them."""
    ordered = sorted([cp_id, task, seq, digest] for cp_id, task, seq, digest in rows)
    return hashlib.sha256(json.dumps(ordered, separators=(",", ":")).encode()).hexdigest()


def bound_counts(rows: Iterable[Bound]) -> dict[str, int]:
    """How many of ``rows`` each checkpoint bound, keyed as a record's ``BOUND_KEY``
    holds it (the checkpoint id as text: a JSON object's key)."""
    out: dict[str, int] = {}
    for cp_id, *_ in rows:
        out[str(cp_id)] = out.get(str(cp_id), 0) + 1
    return out


def hidden_heads(found: dict[str, dict[str, Any]]) -> dict[int, int]:
    """How many heads archive batches moved out of each checkpoint, as their records say:
    what a full verify counts in place of reading them (``audit_pruned_heads``)."""
    out: dict[int, int] = {}
    for record in found.values():
        counts = record.get(BOUND_KEY)
        if not isinstance(counts, dict):
            continue
        for cp_id, count in counts.items():
            if str(cp_id).isdigit() and isinstance(count, int):
                out[int(cp_id)] = out.get(int(cp_id), 0) + count
    return out


def moved_out(conn: Connection, found: dict[str, dict[str, Any]]
              ) -> tuple[list[Bound], str | None]:
    """Every head archive batches moved out of the checkpoints (a deep verify puts them
    back), and the first batch whose moved heads are not the ones its record commits to
    (their count per checkpoint and their hash)."""
    p = AUDIT_PRUNED_HEADS.c
    by_batch: dict[str, list[Bound]] = {}
    for cp_id, task, seq, digest, batch in conn.execute(
            select(p.checkpoint_id, p.task_id, p.seq, p.hash, p.archive)
            .execution_options(yield_per=_BATCH)):
        by_batch.setdefault(batch, []).append((int(cp_id), task, int(seq), digest))
    rows = [row for batch in sorted(by_batch) for row in by_batch[batch]]
    for batch in sorted(set(by_batch) | {b for b, r in found.items() if BOUND_HASH_KEY in r}):
        record, kept = found.get(batch) or {}, by_batch.get(batch, [])
        recorded = (record.get(BOUND_KEY), record.get(BOUND_HASH_KEY))
        if (bound_counts(kept), bound_hash(kept)) != recorded:
            return rows, (
                f"archive batch {batch!r} recorded the checkpoint heads it moved out, but "
                f"the {len(kept)} kept are not those: a moved head was altered, added or "
                "removed")
    return rows, None


def junction(conn: Connection, task: str, seq: int) -> Pruned | None:
    """The pruned entry ``seq`` of ``task`` (the ``task_id, seq`` key): where a re-used
    task's first live entry links into its archived part."""
    row = conn.execute(select(AUDIT_PRUNED.c.hash, AUDIT_PRUNED.c.id, AUDIT_PRUNED.c.archive)
                       .where(AUDIT_PRUNED.c.task_id == task, AUDIT_PRUNED.c.seq == seq)).first()
    return None if row is None else (row[0], int(row[1]), row[2])

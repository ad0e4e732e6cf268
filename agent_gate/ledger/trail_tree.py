"""The Merkle tree over the audit trail: its leaves read from the database, grown at each
checkpoint, and walked again by ``audit verify``.

Leaf ``i`` is the ``i``-th entry of ``audit_events`` in ``id`` order, and its leaf hash is
RFC 6962's ``SHA-256(0x00 || text)`` over the same canonical text the entry's chain hash
covers (``chain.entry_leaf``): one text, two commitments. The tree is one order over all
tasks, where the chains are one order per task; a checkpoint keeps the tree's size, the
id of its last leaf, its root and its frontier, so

* the next checkpoint hashes only the entries after that id: O(new entries + log n);
* ``audit verify`` recomputes the tree in its one pass over the trail and compares
  every checkpoint's size, root and frontier (``TreeWalk``), taking archived leaves as
  the perfect subtrees their batch kept (``TreeWalk.add_subtree``, ``ledger.subtrees``);
* a verifier that trusts one checkpoint (signed, or published) starts from its frontier,
  once the frontier hashes to the trusted root, and reads only what came after
  (``trail_verify.verify_since``).

Which entries a checkpoint's tree may take: on PostgreSQL ids are drawn at INSERT and
transactions of different tasks commit in any order, so a checkpoint takes leaves only up
to ``settled``'s bound (every smaller id committed or never will be); a leaf can
then never appear later below the tree's last id. On SQLite ids commit in order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import Connection, select

from agent_gate.errors import AuditCheckpointRefused
from agent_gate.evidence.merkle import Frontier
from agent_gate.ledger.chain import row_leaf
from agent_gate.ledger.models import AUDIT_EVENTS
from agent_gate.ledger.pruned import merge, pruned_rows

__all__ = ["FIELDS", "TreeHeadRow", "TreeWalk", "extend", "leaf_of", "leaves"]


class TreeHeadRow(Protocol):
    """What this module reads of a stored checkpoint (``checkpoints.Checkpoint``): named
    by shape, so that the checkpoints, which grow their tree here, are not imported."""

    @property
    def id(self) -> int: ...
    @property
    def tree_size(self) -> int | None: ...
    @property
    def tree_last_id(self) -> int | None: ...
    @property
    def tree_root(self) -> str | None: ...
    @property
    def tree_frontier(self) -> str | None: ...
    @property
    def tree(self) -> tuple[int, int, str] | None: ...

_EVENTS = AUDIT_EVENTS
FIELDS = ("at", "task_id", "call_row_id", "call_id", "event", "from_state", "to_state",
          "actor", "detail")
"""The stored columns an entry's hashed text is made of (with ``seq`` and ``prev_hash``)."""
_BATCH = 5000
"""Rows fetched at a time while reading leaves: memory stays flat on a long trail."""


def leaf_of(row: Mapping[str, Any]) -> tuple[str, bytes]:
    """``(recomputed chain hash, leaf hash)`` of one stored entry (``chain.row_leaf``;
    a test holds it to ``chain.entry_leaf``)."""
    return row_leaf(row)


def leaves(
    conn: Connection, *, after: int = 0, upto: int | None = None
) -> Iterator[tuple[Mapping[str, Any], bytes]]:
    """Every entry with ``after < id <= upto`` in id order, with its leaf hash; a pruned
    one (``ledger.pruned``) as its kept hashes, marked by its ``leaf`` key."""
    for row in _entries(conn, after, upto):
        yield row, (row["leaf"] if "leaf" in row else leaf_of(row)[1])


def _entries(conn: Connection, after: int, upto: int | None) -> Iterator[Mapping[str, Any]]:
    stmt = select(_EVENTS).where(_EVENTS.c.id > after).order_by(_EVENTS.c.id)
    if upto is not None:
        stmt = stmt.where(_EVENTS.c.id <= upto)
    result = conn.execute(stmt.execution_options(yield_per=_BATCH)).mappings()
    return merge(result, pruned_rows(conn, after=after, upto=upto))


def start_of(prev: TreeHeadRow | None) -> tuple[Frontier, int]:
    """The tree a checkpoint left (its frontier and last leaf's id); empty when there is
    none, or the checkpoint predates the tree (the next one hashes the whole trail once)."""
    if prev is None or prev.tree_size is None or prev.tree_last_id is None:
        return Frontier(), 0
    return Frontier.from_text(prev.tree_size, prev.tree_frontier), prev.tree_last_id


def extend(
    conn: Connection, prev: TreeHeadRow | None, upto: int | None,
    moved: dict[str, tuple[int, str]] | None = None,
) -> tuple[Frontier, int]:
    """The tree after ``prev``'s, grown by every entry after its last leaf up to ``upto``:
    the new frontier and the id of its last leaf.

    ``moved``, if given, receives each task's newest entry among the new leaves as
    ``(seq, hash)``: the heads that moved, read in the same pass (a checkpoint binds
    them). An entry whose fields no longer match its hash is refused there, so that a
    checkpoint never binds an edited entry."""
    frontier, last_id = start_of(prev)
    if upto is not None and upto <= last_id:
        return frontier, last_id
    for row in _entries(conn, last_id, upto):
        last_id = int(row["id"])
        if "leaf" in row:
            frontier.append(row["leaf"])
            continue
        recomputed, leaf = leaf_of(row)
        frontier.append(leaf)
        if moved is not None:
            if recomputed != row["hash"]:
                raise AuditCheckpointRefused(
                    f"audit entry #{row['seq']} of task {row['task_id']!r} (row {last_id}) "
                    "no longer matches its hash: run `agent-gate audit verify`")
            moved[row["task_id"]] = (int(row["seq"]), row["hash"])
    return frontier, last_id


@dataclass(slots=True)
class TreeWalk:
    """The tree recomputed during one pass over the trail in id order, checked against
    each checkpoint as the pass crosses its last leaf. ``problem`` is the first
    checkpoint whose tree is not the tree of the entries (a message; the caller names
    the kind)."""

    checkpoints: Sequence[TreeHeadRow]
    frontier: Frontier = field(default_factory=Frontier)
    last_id: int = 0
    problem: tuple[int, str] | None = None
    _next: int = 0
    _due: int = -1
    """The last leaf id of the next checkpoint to compare: below it, ``add`` only appends."""

    def __post_init__(self) -> None:
        self.checkpoints = sorted((c for c in self.checkpoints if c.tree is not None),
                                  key=lambda c: c.id)
        self._due = self._next_due()

    def _next_due(self) -> int:
        if self._next < len(self.checkpoints):
            return self.checkpoints[self._next].tree_last_id or 0
        return 1 << 62

    def add(self, row_id: int, leaf: bytes) -> None:
        if row_id > self._due:
            self._settle(row_id)
        self.frontier.append(leaf)
        self.last_id = row_id

    def add_subtree(self, first_id: int, last_id: int, start: int, level: int,
                    digest: str) -> None:
        """Append ``2**level`` pruned leaves (rows ``first_id..last_id``) by their perfect
        subtree's hash (``ledger.subtrees``). It must stand where it was recorded (leaf
        ``start``, aligned to its width) and no checkpoint's tree may end inside it:
        otherwise an entry before it was added or removed, or the subtree was moved."""
        if first_id > self._due:
            self._settle(first_id)
        if self.problem is not None:
            return
        width = 1 << level if 0 <= level < 63 else 0
        try:
            node = bytes.fromhex(digest)
        except ValueError:
            node = b""
        if len(node) != 32:
            self.problem = (0, f"the archived subtree at leaf {start} has no valid hash")
            return
        if not width or start != self.frontier.size or start % width:
            self.problem = (0, (
                f"the archived subtree of {width} leaves recorded at leaf {start} (rows "
                f"{first_id}..{last_id}) stands at leaf {self.frontier.size} of the trail: "
                "entries before it were added or deleted, or it was moved"))
            return
        if self._due < last_id:
            cp = self.checkpoints[self._next]
            self.problem = (cp.id, (
                f"checkpoint #{cp.id}'s tree ends at row {cp.tree_last_id}, inside the "
                f"archived subtree of rows {first_id}..{last_id}: the subtree or the "
                "checkpoint was altered"))
            return
        self.frontier.extend_piece(node, level)
        self.last_id = last_id

    def finish(self) -> tuple[int, str] | None:
        self._settle(None)
        return self.problem

    def _settle(self, row_id: int | None) -> None:
        """Check every checkpoint whose last leaf comes before ``row_id`` (all, at the end)."""
        while self._next < len(self.checkpoints):
            cp = self.checkpoints[self._next]
            assert cp.tree_last_id is not None
            if row_id is not None and row_id <= cp.tree_last_id:
                return
            self._next += 1
            self._due = self._next_due()
            if self.problem is None:
                self.problem = self._compare(cp)

    def _compare(self, cp: TreeHeadRow) -> tuple[int, str] | None:
        size, root = self.frontier.size, self.frontier.root().hex()
        if (cp.tree_size, cp.tree_root) != (size, root) or cp.tree_last_id != self.last_id:
            return cp.id, (
                f"checkpoint #{cp.id}'s Merkle tree holds {cp.tree_size} entries up to row "
                f"{cp.tree_last_id}, but the trail holds {size} up to row {self.last_id} "
                "with another root: entries it bound were edited, deleted, inserted or "
                "reordered, or the checkpoint was"
            )
        if cp.tree_frontier != self.frontier.to_text():
            return cp.id, (
                f"checkpoint #{cp.id}'s stored frontier is not its tree's: the next "
                "checkpoint would be built on hashes the trail does not hold"
            )
        return None

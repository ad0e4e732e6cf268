"""``audit verify --checkpoint NOTE --key KEY``: the trail checked from a trusted checkpoint
on, reading only what came after it.

The trusted checkpoint (signed, and kept outside the database: a witness's copy, an
export) states the tree's size and root. The ledger must hold a checkpoint of that size
with that root; its stored frontier must hash to the root (so the tree can go on from
it without rereading the leaves it covers); then every entry after its last leaf is
checked as a full verify checks it (hash, chain link, leaf), every later checkpoint's
tree, link and the heads it binds (those that moved: revision 0018), and the heads of
the tasks those entries touched. Cost: O(entries after the checkpoint + log n + later
checkpoints and their heads + tasks touched).

What it does not look at: entries the trusted checkpoint covers (they are proven by it:
a proof or an export checks any of them against its root), and the call rows' states and
charges (the full ``audit verify`` walks every call). A chain's link into the covered
part is checked against the stored hash of the entry before it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, select

from agent_gate.evidence.checkpoint import TreeHead
from agent_gate.evidence.merkle import Frontier
from agent_gate.ledger.chain import GENESIS, HEADS_MOVED
from agent_gate.ledger.checkpoints import Checkpoint, checkpoints
from agent_gate.ledger.models import AUDIT_CHECKPOINT_HEADS, AUDIT_EVENTS
from agent_gate.ledger.pruned import archive_problem
from agent_gate.ledger.subtrees import (
    Kept,
    batch_problem,
    heads_of,
    hidden_heads,
    junction,
    leafwise,
    records,
    walk,
)
from agent_gate.ledger.trail_tree import TreeWalk, leaf_of
from agent_gate.ledger.trail_verify import ChainProblem, ChainReport, moved_heads_problem

__all__ = ["verify_since"]

_EVENTS = AUDIT_EVENTS


def verify_since(conn: Connection, trusted: TreeHead) -> ChainReport:
    """Check the trail after ``trusted`` in one snapshot; name the first problem."""
    stored = checkpoints(conn)
    newest = stored[-1] if stored else None
    base = next((c for c in stored if c.tree_size == trusted.size), None)
    problem = _base_problem(base, stored, trusted)
    if problem is not None or base is None:
        return ChainReport(0, 0, newest, problem)
    assert base.tree_last_id is not None
    newer = [c for c in stored if c.id > base.id]
    tree = TreeWalk(newer, frontier=Frontier.from_text(trusted.size, base.tree_frontier),
                    last_id=base.tree_last_id)
    chains: dict[str, tuple[int, str]] = {}
    archived: set[str] = set()
    found = records(conn, after=base.tree_last_id)
    kept = Kept(leafwise(found))
    count = 0
    for row in walk(conn, after=base.tree_last_id, leafwise=kept.leafwise):
        if "subtree" in row:  # archived leaves after the checkpoint, by their subtree
            piece = row["subtree"]
            count += piece.width
            tree.add_subtree(piece.first_id, piece.last_id, piece.start, piece.level,
                             piece.hash)
            kept.add(piece)
            continue
        count += 1
        tree.add(int(row["id"]), row["leaf"] if "leaf" in row else leaf_of(row)[1])
        if problem is None:
            problem = _entry_problem(conn, row, chains, archived, kept, base.tree_last_id)
    if problem is None and (wrong := tree.finish()) is not None:
        problem = ChainProblem("tree", wrong[0], None, wrong[1])
    if problem is None and (unrecorded := archive_problem(conn, archived, found)) is not None:
        problem = ChainProblem("deleted", 0, None, unrecorded)
    trees = {(t[0], t[2]) for c in stored if (t := c.tree) is not None}
    if problem is None and (
        unkept := batch_problem(conn, found, kept.batches, trees, whole=False)
    ) is not None:
        problem = ChainProblem("deleted", 0, None, unkept)
    if problem is None:
        problem = _newer_problem(base, newer)
    if problem is None:
        problem = _newer_heads_problem(conn, base, newer, hidden_heads(found))
    if problem is None:
        # The heads of the tasks the entries after the checkpoint moved, not every head:
        # a ledger keeps the head of every task it ever had (an archived one's too, its
        # chain may go on), and this verify costs what came after the checkpoint.
        heads, _ = heads_of(conn, chains)
        for task, (seq, digest) in sorted(chains.items()):
            if heads.get(task) != (seq, digest):
                problem = ChainProblem(
                    "deleted", seq + 1, None,
                    f"the head of task {task!r} is not its newest entry #{seq}: entries after "
                    "it were deleted or the head was altered", task)
                break
    return ChainReport(count, len(chains), newest, problem)


def _base_problem(base: Checkpoint | None, stored: list[Checkpoint], trusted: TreeHead
                  ) -> ChainProblem | None:
    if base is None:
        biggest = max((c.tree_size or 0 for c in stored), default=0)
        if trusted.size > biggest:
            return ChainProblem(
                "anchor", trusted.size, None,
                f"the trusted checkpoint has {trusted.size} entries but this ledger's trees "
                f"reach only {biggest}: it was rolled back, or it is another ledger")
        return ChainProblem(
            "anchor", trusted.size, None,
            f"no checkpoint of this ledger has a tree of {trusted.size} entries: the trusted "
            "checkpoint is not one of its own")
    if base.tree_root != trusted.root.hex():
        return ChainProblem(
            "anchor", base.id, None,
            f"checkpoint #{base.id} has {trusted.size} entries but another root than the "
            "trusted checkpoint: the trail was rewritten up to it (or it is another ledger)")
    frontier = Frontier.from_text(trusted.size, base.tree_frontier)
    if frontier.root() != trusted.root:
        return ChainProblem(
            "tree", base.id, None,
            f"checkpoint #{base.id}'s stored frontier does not hash to the trusted root: it "
            "was edited")
    return None


def _entry_problem(conn: Connection, row: Mapping[str, Any],
                   chains: dict[str, tuple[int, str]], archived: set[str], kept: Kept,
                   base_id: int) -> ChainProblem | None:
    task, seq, row_id = row["task_id"], int(row["seq"]), int(row["id"])
    recomputed = row["hash"] if "leaf" in row else leaf_of(row)[0]
    if "leaf" in row:
        archived.add(row["archive"])
    if recomputed != row["hash"]:
        return ChainProblem("edited", seq, row_id, f"audit entry #{seq} of task {task!r} "
                            f"(row {row_id}) was edited: its fields no longer match its hash",
                            task)
    before = chains.get(task)
    if before is None:
        before = (seq - 1, _stored_hash(conn, task, seq - 1, kept, base_id))
    if seq != before[0] + 1 or row["prev_hash"] != before[1]:
        return ChainProblem("deleted", seq, row_id, f"audit entry #{seq} of task {task!r} "
                            f"(row {row_id}) does not follow entry #{before[0]}: an entry was "
                            "deleted, moved or replaced", task)
    chains[task] = (seq, row["hash"])
    return None


def _stored_hash(conn: Connection, task: str, seq: int, kept: Kept, base_id: int
                 ) -> str | None:
    """The hash of the task's entry before the first one walked (the ``task_id, seq``
    index): the link that entry must name. Live, or archived: an archived one after the
    trusted checkpoint must lie inside a subtree of its batch the walk checked (else it
    is a deleted entry passed off as pruned); one before it is covered by the checkpoint."""
    if seq == 0:
        return GENESIS
    live = conn.execute(select(_EVENTS.c.hash).where(
        _EVENTS.c.task_id == task, _EVENTS.c.seq == seq)).scalar()
    if live is not None:
        return str(live)
    pruned = junction(conn, task, seq)
    if pruned is None or (pruned[1] > base_id and not kept.covers(pruned[1], pruned[2])):
        return None
    return pruned[0]


def _newer_heads_problem(conn: Connection, base: Checkpoint, newer: list[Checkpoint],
                         hidden: dict[int, int]) -> ChainProblem | None:
    """Each newer checkpoint of ``HEADS_MOVED`` holds the heads it binds: O(their heads).
    A batch that moved heads out of one of them wrote its record after it, so after the
    trusted checkpoint: ``hidden`` counts from the records this verify reads."""
    moved = [cp for cp in newer if cp.heads_format == HEADS_MOVED]
    if not moved:
        return None
    rows: dict[int, list[tuple[str, int, str]]] = {}
    b = AUDIT_CHECKPOINT_HEADS.c
    for cp_id, task, seq, digest in conn.execute(
            select(b.checkpoint_id, b.task_id, b.seq, b.hash)
            .where(b.checkpoint_id > base.id)):
        rows.setdefault(int(cp_id), []).append((task, int(seq), digest))
    for cp in moved:
        if (wrong := moved_heads_problem(cp, rows.get(cp.id, []), hidden)) is not None:
            return wrong
    return None


def _newer_problem(base: Checkpoint, newer: list[Checkpoint]) -> ChainProblem | None:
    if base.recomputed_hash() != base.hash:
        return ChainProblem("checkpoint", base.id, None, f"checkpoint #{base.id} was edited: "
                            "its fields no longer match its hash")
    prev = base
    for cp in newer:
        if cp.id != prev.id + 1 or cp.prev_hash != prev.hash:
            return ChainProblem("checkpoint", cp.id, None,
                                f"checkpoint #{cp.id} does not link to checkpoint #{prev.id}")
        if cp.recomputed_hash() != cp.hash:
            return ChainProblem("checkpoint", cp.id, None, f"checkpoint #{cp.id} was edited: "
                                "its fields no longer match its hash")
        prev = cp
    return None

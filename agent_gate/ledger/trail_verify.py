"""``audit verify``: proving the stored trail is the trail that was written.

What is checked, in one snapshot, and in this order (the first problem is named:
kind, task, chain position and ``audit_events`` row):

1. Every entry, in insertion order (``id``), against its task's chain: its hash is
   the hash of its fields (else *edited*), its ``seq`` follows the task's previous
   entry (a jump forward: *deleted*; anything else: *reordered*), its ``prev_hash``
   is the previous entry's hash (else that entry was *deleted* or replaced).
2. Every task's head row (``audit_heads``) names the task's newest entry: a head
   ahead of its entries means the newest entries were *deleted*.
3. The checkpoints: positions without gaps, each linked to the previous one's hash,
   each hash recomputed, each root recomputed over the heads it binds: the heads that
   moved at it (``chain.HEADS_MOVED``), or every task's for one written before revision
   0018 (*checkpoint*). A checkpoint whose heads an archive batch moved out of it must
   hold the rest, as many as the batches' records say; ``deep`` rehashes it whole.
   The Merkle tree over every entry in id order is recomputed in the same pass and
   compared with each checkpoint's size, root and frontier (*tree*: ``trail_tree``).
   Then every head a checkpoint bound is still in its task's chain, as bound: an
   entry with another hash at that position means the chain was *rewritten* after
   the checkpoint, a chain cut below it is *truncated*, a task gone entirely is
   *deleted*.
4. The pre-upgrade entries still hash, in format 1, to the old global head the
   upgrade recorded on checkpoint #1 (*legacy*).
5. ``anchor``, a checkpoint (id, hash) printed earlier and kept elsewhere, is still
   there (or, for an anchor exported before the upgrade, a position of the old
   global chain): that catches a trail rewritten wholesale, checkpoints included
   (*anchor*).
6. Every call's row is in the state its newest transition entry recorded
   (*state_rewritten*), and every call the trail recorded (its ``received``) still
   has its row (*call_deleted*).
   Entries pruned by ``audit archive`` enter the tree as the perfect subtrees their
   batch kept (``subtrees``: O(subtrees), not O(entries)), and each batch's subtrees must
   be the ones its archive record commits to. A pruned entry's own row is read only where
   the trail names it (a re-used task's link into its archived part, an archived task's
   head, a head a checkpoint bound), and must lie inside a subtree of its batch.
   Batches archived before revision 0017 are walked leaf by leaf (``pruned``).
   What an archived task left in the live ledger is counted, not read: the database
   leaves out every task whose head is still its archived chain end, counts each batch's
   chain ends against its record, and the checkpoint heads moved out are counted from the
   records (``deep`` reads and rehashes both against each record).
7. Every quota charge the trail recorded (the ``charges`` of the arrow that
   authorized the call) is still stored, with that amount (*charge_rewritten*): a
   charge deleted or lowered would let the task spend past its limit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select

from agent_gate.ledger.chain import (
    GENESIS,
    HEADS_MOVED,
    LEGACY_VERSION,
    HeadsRoot,
    entry_hash,
    root_hash,
)
from agent_gate.ledger.checkpoints import Checkpoint, checkpoints
from agent_gate.ledger.models import (
    AUDIT_CHECKPOINT_HEADS,
    QUOTA_CHARGES,
    TOOL_CALLS,
)
from agent_gate.ledger.pruned import archive_problem
from agent_gate.ledger.subtrees import (
    Ended,
    Kept,
    archived_heads,
    batch_problem,
    ends_problem,
    head_count,
    heads_of,
    hidden_heads,
    leafwise,
    moved_out,
    records,
    walk,
)
from agent_gate.ledger.trail_tree import TreeWalk, leaf_of

__all__ = ["ChainProblem", "ChainReport", "moved_heads_problem", "verify"]

_BOUND = AUDIT_CHECKPOINT_HEADS
_CALLS = TOOL_CALLS
_FIELDS = ("at", "task_id", "call_row_id", "call_id", "event", "from_state", "to_state",
           "actor", "detail")


def is_transition(from_state: str | None, to_state: str | None) -> bool:
    """Whether an entry records a change of a call's state: ``received`` (from
    nothing) or an arrow of the state machine, none of which ends where it began.
    Audit-only entries (seen again, approval granted...) repeat one state."""
    return to_state is not None and from_state != to_state


@dataclass(frozen=True, slots=True)
class ChainProblem:
    """The first place where the stored trail is not the trail that was written."""

    kind: str
    """``edited``, ``deleted``, ``reordered``, ``truncated`` (a task's chain ends below
    a head a checkpoint bound), ``rewritten`` (an entry differs from the one a
    checkpoint bound), ``legacy`` (pre-upgrade entries no longer hash to the old
    global head), ``checkpoint`` (a checkpoint edited, deleted or unlinked),
    ``anchor``, ``tree`` (a checkpoint's Merkle tree is not the tree of the entries it
    bound), ``state_rewritten`` (a call's row is not in the state its trail
    last recorded), ``call_deleted`` (a call's trail names a row that is gone or
    holds another call), or ``charge_rewritten`` (a quota charge the trail recorded
    is gone or holds another amount)."""
    seq: int
    """The position where the problem shows: in the task's chain, or the checkpoint's
    number for ``checkpoint``/``anchor`` problems."""
    row_id: int | None
    """``audit_events.id`` of the entry named (None when the entry is gone)."""
    message: str
    task_id: str | None = None
    """The task whose chain is wrong (None for checkpoint and anchor problems)."""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "task": self.task_id, "seq": self.seq,
                "row_id": self.row_id, "message": self.message}


@dataclass(frozen=True, slots=True)
class ChainReport:
    entries: int
    tasks: int
    checkpoint: Checkpoint | None
    """The newest checkpoint (what to keep elsewhere as the next anchor)."""
    problem: ChainProblem | None

    @property
    def ok(self) -> bool:
        return self.problem is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "entries": self.entries,
            "tasks": self.tasks,
            "checkpoint": self.checkpoint.to_dict() if self.checkpoint else None,
            "problem": self.problem.to_dict() if self.problem else None,
        }


@dataclass(slots=True)
class _Chain:
    """How far one task's chain has been walked."""

    seq: int = 0
    hash: str = GENESIS
    row_id: int | None = None
    first: int = 1
    """The first position walked live: the ones before it were archived (kept as
    subtrees, their rows read only where a head names them)."""
    rewritten: ChainProblem | None = None
    """The first entry that differs from the one a checkpoint bound (reported once
    the checkpoints themselves are known to be whole)."""


@dataclass(slots=True)
class _Legacy:
    """The old global chain (format 1), recomputed over the pre-upgrade entries."""

    last_id: int
    seq: int = 0
    hash: str = GENESIS
    anchored: bool = False


def verify(conn: Connection, *, anchor: tuple[int, str] | None = None,
           deep: bool = False) -> ChainReport:
    """Walk the whole trail in one snapshot and name the first thing that is wrong
    (see the module docstring for what is proved, in what order).

    ``deep``: when that walk finds nothing, walk again with every archived entry's kept
    hashes (``audit_pruned``) in place of its batch's subtrees, each batch's root
    recomputed from them. The first walk proves the checkpoints from the subtrees and
    never reads the kept leaves, so an edit to one of those shows only where they are
    used (``prove``, ``export``); the second proves them too, at the cost of reading
    every entry ever archived."""
    report = _walk(conn, anchor, every_leaf=False)
    if deep and report.ok:
        report = _walk(conn, anchor, every_leaf=True)
    return report


def _walk(conn: Connection, anchor: tuple[int, str] | None, *, every_leaf: bool
          ) -> ChainReport:
    # A full walk reads the heads that left where their batch archived them; a deep one
    # every head, and checks every batch's chain ends against its record.
    heads, ended = archived_heads(conn, moved_only=not every_leaf)
    stored = checkpoints(conn)
    stored_heads = [(int(cp_id), task, int(seq), digest) for cp_id, task, seq, digest in
                    conn.execute(select(_BOUND.c.checkpoint_id, _BOUND.c.task_id, _BOUND.c.seq,
                                        _BOUND.c.hash).order_by(_BOUND.c.checkpoint_id))]
    found = records(conn)
    hidden = hidden_heads(found)
    problem: ChainProblem | None = None
    if every_leaf:  # the heads archive moved out of the checkpoints, back in their place
        moved, wrong_moved = moved_out(conn, found)
        stored_heads = sorted(stored_heads + moved)
        hidden = {}
        if wrong_moved is not None:
            problem = ChainProblem("deleted", 0, None, wrong_moved)
    bound: dict[tuple[str, int], tuple[str, int]] = {}
    for cp_id, task, seq, digest in stored_heads:
        bound.setdefault((task, seq), (digest, cp_id))
    kept = Kept(frozenset(found) if every_leaf else leafwise(found))
    first = stored[0] if stored else None
    legacy = (_Legacy(first.legacy_last_id) if first is not None
              and first.legacy_last_id is not None else None)
    legacy_anchor = anchor if anchor is not None and legacy is not None else None
    chains: dict[str, _Chain] = {}
    audited: dict[int, str] = {}
    received: dict[int, tuple[str, str]] = {}
    charged: dict[tuple[int, str], tuple[str, str, str]] = {}
    count = 0
    tree = TreeWalk(stored)
    archived: set[str] = set()
    for row in walk(conn, leafwise=kept.leafwise, every_leaf=every_leaf):
        if "subtree" in row:  # archived leaves, by their perfect subtree's hash
            piece = row["subtree"]
            count += piece.width
            tree.add_subtree(piece.first_id, piece.last_id, piece.start, piece.level,
                             piece.hash)
            kept.add(piece)
            continue
        count += 1
        if "leaf" in row:  # pruned: its hashes as kept, covered by its archive record
            recomputed, leaf = row["hash"], row["leaf"]
            archived.add(row["archive"])
        else:
            recomputed, leaf = leaf_of(row)
        tree.add(int(row["id"]), leaf)
        if row["call_row_id"] is not None and is_transition(row["from_state"], row["to_state"]):
            audited[int(row["call_row_id"])] = row["to_state"]
            if row["event"] == "received":  # the call the row was made for
                received.setdefault(int(row["call_row_id"]), (row["task_id"], row["call_id"]))
            elif row["detail"] is not None and (
                '"charges"' in row["detail"] or '"refunds"' in row["detail"]
            ):
                _note_charges(row, charged)
        if legacy is not None and row["id"] <= legacy.last_id:
            legacy.seq += 1
            legacy.hash = entry_hash(seq=legacy.seq, prev_hash=legacy.hash,
                                     version=LEGACY_VERSION, **{k: row[k] for k in _FIELDS})
            if legacy_anchor == (legacy.seq, legacy.hash):
                legacy.anchored = True
        if problem is None:
            chain = chains.get(row["task_id"])
            if chain is None:
                chain = chains[row["task_id"]] = _Chain()
                end = ended.get(row["task_id"])
                if end is not None and "leaf" not in row and int(row["seq"]) == end[0] + 1:
                    chain.seq, chain.hash, chain.first = end[0], end[1], end[0] + 1
                elif end is not None and "leaf" not in row and int(row["seq"]) <= end[0]:
                    problem = _restarted(row, end)
            if problem is None:
                problem = _entry_problem(row, chain, bound, recomputed)
    if not every_leaf:  # the heads the walk met that the moved-only read left out
        met = {task for task in chains if task not in heads}
        met |= {task for task, _ in bound if task not in chains and task not in heads}
        more, more_ended = heads_of(conn, met)
        heads.update(more)
        ended.update(more_ended)
    # Archived whole: no live entry, the head where the chain was archived. Most tasks of
    # an old ledger; kept out of ``chains``, so each costs a lookup here, not a chain.
    whole = {task for task, end in ended.items()
             if task not in chains and heads.get(task) == end[:2]}
    if problem is None:
        problem = _head_problem(chains, heads, whole)
    if problem is None:
        problem = _checkpoint_problem(stored, stored_heads, hidden)
    if problem is None:
        rewritten = [task for task, chain in chains.items() if chain.rewritten is not None]
        problem = chains[min(rewritten)].rewritten if rewritten else None
    if problem is None:
        problem = _bound_problem(chains, bound, ended, whole)
    if problem is None and legacy is not None:
        problem = _legacy_problem(legacy, first)
    if problem is None and (wrong_tree := tree.finish()) is not None:
        problem = ChainProblem("tree", wrong_tree[0], None, wrong_tree[1])
    if problem is None and (unrecorded := archive_problem(conn, archived, found)) is not None:
        problem = ChainProblem("deleted", 0, None, unrecorded)
    trees = {(tree[0], tree[2]) for c in stored if (tree := c.tree) is not None}
    if problem is None and (
        unkept := batch_problem(conn, found, kept.batches, trees, whole=not every_leaf,
                                ended=ended if every_leaf else None)
        or (None if every_leaf else ends_problem(conn, found))
    ) is not None:
        problem = ChainProblem("deleted", 0, None, unkept)
    if problem is None and anchor is not None:
        problem = _anchor_problem(anchor, stored, legacy)
    if problem is None:
        problem = _state_problem(conn, audited, received)
    if problem is None:
        problem = _charge_problem(conn, charged)
    tasks = len(heads) if every_leaf else head_count(conn)
    return ChainReport(count, tasks, stored[-1] if stored else None, problem)


def _entry_problem(
    row: Any, chain: _Chain,
    bound: dict[tuple[str, int], tuple[str, int]], recomputed: str,
) -> ChainProblem | None:
    task, expected = row["task_id"], chain.seq + 1
    seq, row_id = int(row["seq"]), int(row["id"])
    where = f"audit entry #{seq} of task {task!r} (row {row_id}, event {row['event']!r})"
    if recomputed != row["hash"] and seq != expected and entry_hash(
        seq=expected, prev_hash=row["prev_hash"], **{k: row[k] for k in _FIELDS}
    ) == row["hash"]:
        return ChainProblem(
            "reordered", expected, row_id,
            f"audit entry #{expected} of task {task!r} (row {row_id}, event "
            f"{row['event']!r}) was moved to position #{seq}: the entries were reordered",
            task,
        )
    if recomputed != row["hash"]:
        return ChainProblem("edited", seq, row_id,
                            f"{where} was edited: its fields no longer match its hash", task)
    if seq != expected:
        if seq > expected:
            missing = f"#{expected}" if seq == expected + 1 else f"#{expected}..#{seq - 1}"
            return ChainProblem(
                "deleted", expected, None,
                f"audit entry {missing} of task {task!r} was deleted: the task's chain "
                f"jumps from #{expected - 1} to #{seq} (row {row_id})", task,
            )
        return ChainProblem(
            "reordered", seq, row_id,
            f"audit entry #{seq} of task {task!r} (row {row_id}) is out of order: expected "
            f"#{expected} at this place", task,
        )
    if row["prev_hash"] != chain.hash:
        return ChainProblem(
            "deleted", seq, row_id,
            f"audit entry #{seq} of task {task!r} (row {row_id}) does not link to the "
            f"entry before it: entry #{seq - 1} was replaced or deleted", task,
        )
    pinned = bound.get((task, seq))
    if pinned is not None and pinned[0] != row["hash"] and chain.rewritten is None:
        chain.rewritten = ChainProblem(
            "rewritten", seq, row_id,
            f"{where} is not the entry checkpoint #{pinned[1]} bound: the task's chain "
            "up to it was rewritten after that checkpoint was taken", task,
        )
    chain.seq, chain.hash, chain.row_id = seq, row["hash"], row_id
    return None


def _restarted(row: Any, end: Ended) -> ChainProblem:
    task, seq = row["task_id"], int(row["seq"])
    return ChainProblem(
        "deleted", seq, int(row["id"]),
        f"task {task!r} was archived ending at entry #{end[0]}, but its chain starts again "
        f"at #{seq} (row {row['id']}): its head was deleted or moved back after the archive",
        task,
    )


def _head_problem(
    chains: dict[str, _Chain], heads: dict[str, tuple[int, str]], whole: set[str]
) -> ChainProblem | None:
    """The first task, in task order, whose head row is not its chain's end. A task
    archived whole (``whole``) has its head at its archived end: nothing to compare.
    The tasks that differ are found first and only they are sorted: O(tasks), not
    O(tasks log tasks), when nothing is wrong."""
    blank = _Chain()
    wrong = [task for task, head in heads.items() if task not in whole
             and ((chain := chains.get(task, blank)).seq, chain.hash) != head]
    wrong += [task for task in chains if task not in heads]
    for task in sorted(wrong):
        chain = chains.get(task, blank)
        head = heads.get(task)
        if head is None:
            return ChainProblem(
                "deleted", chain.seq, chain.row_id,
                f"task {task!r} has entries up to #{chain.seq} but no chain head: its head "
                "row was deleted", task,
            )
        seq, digest = head
        if (seq, digest) == (chain.seq, chain.hash):
            continue
        if seq > chain.seq:
            return ChainProblem(
                "deleted", chain.seq + 1, None,
                f"audit entries #{chain.seq + 1}..#{seq} of task {task!r} were deleted: the "
                f"task's chain ends at #{chain.seq} but its head records #{seq}", task,
            )
        return ChainProblem(
            "edited", seq, chain.row_id,
            f"the head of task {task!r} records #{seq} but its entries run to "
            f"#{chain.seq}: the head or the newest entries were altered", task,
        )
    return None


def _bound_problem(
    chains: dict[str, _Chain], bound: dict[tuple[str, int], tuple[str, int]],
    ended: dict[str, Ended], whole: set[str],
) -> ChainProblem | None:
    """The first head a checkpoint bound, in (task, position) order, that is not in its
    task's chain as bound. Each is checked, then only those wrong are sorted."""
    wrong = [key for key, (digest, cp_id) in bound.items()
             if _bound_check(key, digest, cp_id, chains, ended, whole) is not None]
    if not wrong:
        return None
    key = min(wrong)
    return _bound_check(key, *bound[key], chains, ended, whole)


def _bound_check(
    key: tuple[str, int], digest: str, cp_id: int, chains: dict[str, _Chain],
    ended: dict[str, Ended], whole: set[str],
) -> ChainProblem | None:
    task, seq = key
    end = ended.get(task)
    if end is not None and task in whole:  # its chain ends where it was archived
        reach, first = end[0], end[0] + 1
    else:
        chain = chains.get(task)
        if chain is None:
            return ChainProblem(
                "deleted", seq, None,
                f"checkpoint #{cp_id} bound task {task!r} at #{seq}, but the task has no "
                "entries and no head any more: the whole task was deleted", task,
            )
        reach, first = chain.seq, chain.first
    if reach < seq:
        return ChainProblem(
            "truncated", reach + 1, None,
            f"the chain of task {task!r} ends at #{reach}, below entry #{seq} that "
            f"checkpoint #{cp_id} bound: entries #{reach + 1}..#{seq} were deleted",
            task,
        )
    if seq < first and (end is None or end[0] < seq):
        return ChainProblem(
            "deleted", seq, None,
            f"checkpoint #{cp_id} bound entry #{seq} of task {task!r}, which is neither "
            "in the trail nor archived: it was deleted", task,
        )
    if end is not None and seq == end[0] and digest != end[1]:
        return ChainProblem(
            "rewritten", seq, None,
            f"task {task!r} was archived ending at entry #{seq}, but not with the entry "
            f"checkpoint #{cp_id} bound there: its archived head was rewritten", task,
        )
    return None


def _legacy_problem(legacy: _Legacy, first: Checkpoint | None) -> ChainProblem | None:
    assert first is not None
    if (legacy.seq, legacy.hash) == (first.legacy_seq, first.legacy_hash):
        return None
    return ChainProblem(
        "legacy", legacy.seq, None,
        f"the {legacy.seq} entries written before the upgrade to per-task chains no longer "
        f"hash to the old chain's head #{first.legacy_seq} recorded by checkpoint #1: "
        "they were edited, deleted or reordered (or the old chain was already broken "
        "when the ledger was upgraded)",
    )


def _checkpoint_problem(
    stored: list[Checkpoint], stored_heads: list[tuple[int, str, int, str]],
    hidden: dict[int, int],
) -> ChainProblem | None:
    """Each checkpoint in place, linked, unedited, and its root the hash of the heads it
    binds: every task's newest head for one written before revision 0018 (folded
    checkpoint after checkpoint), the heads stored with it for one of ``HEADS_MOVED``.
    ``hidden``: how many heads archive batches moved out of each checkpoint (their
    records say so); such a root is only counted here, and a deep verify rehashes it
    with the moved heads back in place."""
    if not stored:
        return None
    changed: dict[int, list[tuple[str, int, str]]] = {}
    for cp_id, task, seq, digest in stored_heads:
        changed.setdefault(cp_id, []).append((task, seq, digest))
    heads = HeadsRoot()
    prev = GENESIS
    for position, cp in enumerate(stored, start=1):
        if cp.id != position:
            return ChainProblem(
                "checkpoint", position, None,
                f"checkpoint #{position} was deleted: the checkpoints jump to #{cp.id}",
            )
        if cp.prev_hash != prev:
            return ChainProblem(
                "checkpoint", cp.id, None,
                f"checkpoint #{cp.id} does not link to checkpoint #{cp.id - 1}: the one "
                "before it was replaced",
            )
        if cp.recomputed_hash() != cp.hash:
            return ChainProblem("checkpoint", cp.id, None,
                                f"checkpoint #{cp.id} was edited: its fields no longer "
                                "match its hash")
        rows = changed.get(cp.id, [])
        if cp.heads_format == HEADS_MOVED:
            if (wrong := moved_heads_problem(cp, rows, hidden)) is not None:
                return wrong
        else:
            for task, seq, digest in rows:
                heads.set(task, seq, digest)
            if len(heads) != cp.tasks or heads.hexdigest() != cp.root:
                return _root_problem(cp, len(heads))
        prev = cp.hash
    for cp_id in sorted(set(changed) - {cp.id for cp in stored}):
        return ChainProblem("checkpoint", cp_id, None,
                            f"heads are stored for checkpoint #{cp_id}, which does not exist")
    return None


def moved_heads_problem(cp: Checkpoint, rows: list[tuple[str, int, str]],
                        hidden: dict[int, int]) -> ChainProblem | None:
    """Whether a checkpoint of ``HEADS_MOVED`` holds the heads its root and count bind:
    rehashed from ``rows`` (its stored heads), or, when archive batches moved some of
    them out (``hidden``: how many, per checkpoint, as their records say), counted."""
    count = len(rows) + hidden.get(cp.id, 0)
    if count == cp.tasks and (cp.id in hidden or root_hash(rows) == cp.root):
        return None
    return _root_problem(cp, count)


def _root_problem(cp: Checkpoint, count: int) -> ChainProblem:
    return ChainProblem(
        "checkpoint", cp.id, None,
        f"checkpoint #{cp.id}'s root is not the hash of the {count} task heads it binds: "
        "its stored heads were edited, added or deleted",
    )


def _anchor_problem(
    anchor: tuple[int, str], stored: list[Checkpoint], legacy: _Legacy | None
) -> ChainProblem | None:
    number, digest = anchor
    if any((cp.id, cp.hash) == (number, digest) for cp in stored):
        return None
    if legacy is not None and legacy.anchored:
        return None
    return ChainProblem(
        "anchor", number, None,
        f"the anchor #{number} {digest[:16]}… is neither a checkpoint of this ledger nor a "
        "head of its chain from before the upgrade: the trail was rewritten at or before it",
    )


def _state_problem(
    conn: Connection, audited: dict[int, str], received: dict[int, tuple[str, str]]
) -> ChainProblem | None:
    """The first call whose row state is not the state its trail last recorded; else
    the first call the trail recorded whose row is gone (``_deleted_call``)."""
    wrong: list[tuple[int, str, str, str, str | None]] = []
    calls = conn.execute(
        select(_CALLS.c.id, _CALLS.c.task_id, _CALLS.c.call_id, _CALLS.c.state)
        .order_by(_CALLS.c.id)
    )
    holds: dict[int, tuple[str, str]] = {}
    for row_id, task_id, call_id, state in calls:
        holds[int(row_id)] = (task_id, call_id)
        trail = audited.get(int(row_id))
        if trail != state:
            wrong.append((int(row_id), task_id, call_id, state, trail))
    if not wrong:
        return _deleted_call(holds, received)
    row_id, task_id, call_id, state, trail = wrong[0]
    more = f" ({len(wrong) - 1} more calls like it)" if len(wrong) > 1 else ""
    recorded = (f"its audit trail last recorded {trail!r}" if trail is not None
                else "its audit trail has no transition for it")
    return ChainProblem(
        "state_rewritten", 0, None,
        f"call {call_id!r} of task {task_id!r} (tool_calls row {row_id}) is {state!r} but "
        f"{recorded}: its state was rewritten outside agent-gate{more}", task_id,
    )


def _deleted_call(
    holds: dict[int, tuple[str, str]], received: dict[int, tuple[str, str]]
) -> ChainProblem | None:
    """The first call whose ``received`` entry names a ``tool_calls`` row that is gone,
    or that now holds another call (the row deleted, its id taken by the next call:
    SQLite gives a new row the largest id plus one). Rows are never deleted; a call
    without its row would run again when it is sent again."""
    for row_id, (task_id, call_id) in sorted(received.items()):
        now = holds.get(row_id)
        if now == (task_id, call_id):
            continue
        taken = (f"; its id now holds call {now[1]!r} of task {now[0]!r}"
                 if now is not None else "")
        return ChainProblem(
            "call_deleted", 0, None,
            f"call {call_id!r} of task {task_id!r} (tool_calls row {row_id}) was recorded "
            f"by its audit trail but its row was deleted{taken}: sent again, it would "
            "run again", task_id,
        )
    return None


def _note_charges(
    row: Any, charged: dict[tuple[int, str], tuple[str, str, str]]
) -> None:
    """The charges an authorizing entry recorded (the first entry per call and counter:
    a call is charged once, ``quota.charge``), less those an entry refunded (a
    refunded call claimed again records its new charges). A detail that does not
    parse is left to the hash check, which names it."""
    try:
        detail = json.loads(row["detail"])
        charges, refunds = detail.get("charges"), detail.get("refunds")
    except (ValueError, AttributeError):
        return
    if isinstance(refunds, dict):  # given back with this arrow: no longer stored
        for counter in refunds:
            charged.pop((int(row["call_row_id"]), str(counter)), None)
    if not isinstance(charges, dict):
        return
    for counter, amount in charges.items():
        charged.setdefault((int(row["call_row_id"]), str(counter)),
                           (row["task_id"], row["call_id"], str(amount)))


def _charge_problem(
    conn: Connection, charged: dict[tuple[int, str], tuple[str, str, str]]
) -> ChainProblem | None:
    """The first charge the trail recorded that is not stored as recorded."""
    if not charged:
        return None
    stored = {
        (int(row_id), counter): amount
        for row_id, counter, amount in conn.execute(
            select(QUOTA_CHARGES.c.call_row_id, QUOTA_CHARGES.c.counter, QUOTA_CHARGES.c.amount)
        )
    }
    for (row_id, counter), (task_id, call_id, amount) in sorted(charged.items()):
        now = stored.get((row_id, counter))
        if now == amount:
            continue
        what = "is gone" if now is None else f"now holds {now}"
        return ChainProblem(
            "charge_rewritten", 0, None,
            f"call {call_id!r} of task {task_id!r} (tool_calls row {row_id}) was charged "
            f"{amount} to {counter!r}, as its audit trail recorded, but that charge {what}: "
            "the task's usage was rewritten outside agent-gate", task_id,
        )
    return None

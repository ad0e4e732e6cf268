"""Checkpoints: the trail's Merkle tree and the heads that moved, linked into a chain.

The trail is one hash chain per task (``agent_gate.ledger.audit``), so no single
hash commits to all of it until a checkpoint does. A checkpoint grows the Merkle tree
over every entry (``trail_tree``) from the previous checkpoint's frontier by the entries
after its last leaf and, in the same pass, reads which task heads moved: each task's
newest entry among those leaves. It stores the tree (size, last leaf, root, frontier),
the moved heads (``audit_checkpoint_heads``), ``root``, the SHA-256 over the moved heads
sorted by task (``chain.root_hash``), and the previous checkpoint's hash, so
checkpoints form a chain of their own and each one commits to every head before it.
Cost: O(new entries + log n + moved tasks); a task no entry touched is never read.

Checkpoints written before revision 0018 (``heads_format`` None) bound every task's
head, read from ``audit_heads``: their heads at checkpoint N are the newest stored
head of each task at N or before, and ``audit verify`` still hashes them that way.

Who writes them: ``agent-gate audit checkpoint`` (cron, an operator, or after a
batch), ``serve``'s checkpointer, or an application through ``take``. The ledger's
write path never does, so no transaction of a call waits on one. Writing one takes no
lock that a call's transaction takes: on PostgreSQL it reads the entries in its own
snapshot while calls go on. Checkpoint writers take turns among themselves (``take``
holds the named lock ``audit_checkpoint``, which no call's transaction takes); a writer
that bypasses it and races for the same position collides on its key instead, and
``take`` tries again on top of the winner. On SQLite it holds the database's write
lock for the read, as every write does.

A checkpoint never binds over a rewrite it reads: the previous tree's last leaf gone, a
new entry that no longer matches its hash, or a moved task whose head went back or
sideways from the one its newest checkpoint bound, makes the writer refuse
(``AuditCheckpointRefused``); ``audit verify`` names what happened. A task's head
deleted or cut back with no new entry after it is not read by the writer (that would
be a read of every task); ``audit verify`` catches it (``trail_verify``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from agent_gate.errors import AuditCheckpointRefused
from agent_gate.evidence.checkpoint import TreeHead
from agent_gate.evidence.note import SignerKey
from agent_gate.ledger.backend import begin_read, begin_write
from agent_gate.ledger.chain import GENESIS, HEADS_MOVED, as_utc, checkpoint_hash, root_hash
from agent_gate.ledger.models import (
    AUDIT_CHECKPOINT_HEADS,
    AUDIT_CHECKPOINTS,
    AUDIT_EVENTS,
    AUDIT_PRUNED,
)
from agent_gate.ledger.settled import settled
from agent_gate.ledger.sql import lock_named
from agent_gate.ledger.trail_tree import extend

__all__ = [
    "CHECKPOINT_LOCK",
    "Checkpoint",
    "checkpoints",
    "first_of_moved",
    "newest",
    "newest_of",
    "sign",
    "take",
    "tree_head",
    "write",
]

_CHECKPOINTS = AUDIT_CHECKPOINTS
_BOUND = AUDIT_CHECKPOINT_HEADS
CHECKPOINT_LOCK = "audit_checkpoint"
"""The ``sql.lock_named`` lock checkpoint writers take turns on."""
_RACES = 5
"""Times ``take`` tries again after another writer took the same position."""
_CHUNK = 500
"""Tasks per ``IN`` list when reading the heads their newest checkpoint bound."""

Heads = dict[str, tuple[int, str]]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One stored checkpoint. ``id:hash`` is what to keep elsewhere (the anchor)."""

    id: int
    at: datetime
    tasks: int
    root: str
    prev_hash: str
    hash: str
    legacy_seq: int | None = None
    legacy_hash: str | None = None
    legacy_last_id: int | None = None
    tree_size: int | None = None
    """Leaves of the Merkle tree over every entry (``trail_tree``); None before 0010."""
    tree_last_id: int | None = None
    """``audit_events.id`` of the tree's last leaf (0 for an empty tree)."""
    tree_root: str | None = None
    tree_frontier: str | None = None
    note: str | None = None
    """The checkpoint signed as a C2SP tlog-checkpoint, if it was signed."""
    heads_format: int | None = None
    """How ``root`` and ``tasks`` bind the heads (``chain.HEADS_MOVED``); None: every
    task's head (written before revision 0018)."""

    @property
    def tree(self) -> tuple[int, int, str] | None:
        if self.tree_size is None or self.tree_last_id is None or self.tree_root is None:
            return None
        return self.tree_size, self.tree_last_id, self.tree_root

    @property
    def heads_text(self) -> str:
        """What ``tasks`` counts, in words (``audit checkpoint``, ``audit verify``)."""
        moved = " that moved" if self.heads_format == HEADS_MOVED else ""
        return f"{self.tasks} task heads{moved}"

    @property
    def anchor(self) -> str:
        """``ID:HASH``: what ``audit verify --anchor`` takes back."""
        return f"{self.id}:{self.hash}"

    def recomputed_hash(self) -> str:
        return checkpoint_hash(
            checkpoint_id=self.id, prev_hash=self.prev_hash, at=self.at, tasks=self.tasks,
            root=self.root, legacy_seq=self.legacy_seq, legacy_hash=self.legacy_hash,
            legacy_last_id=self.legacy_last_id, tree=self.tree,
            heads_format=self.heads_format,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "hash": self.hash, "at": self.at.isoformat(),
                               "tasks": self.tasks, "root": self.root,
                               "anchor": self.anchor}
        if self.legacy_seq is not None:
            out["legacy_head"] = {"seq": self.legacy_seq, "hash": self.legacy_hash}
        if self.tree is not None:
            out["tree"] = {"size": self.tree_size, "root": self.tree_root}
        out["heads"] = "moved" if self.heads_format == HEADS_MOVED else "all"
        out["signed"] = self.note is not None
        return out


def _checkpoint(row: Any) -> Checkpoint:
    return Checkpoint(
        id=int(row.id), at=as_utc(row.at), tasks=int(row.tasks), root=row.root,
        prev_hash=row.prev_hash, hash=row.hash,
        legacy_seq=None if row.legacy_seq is None else int(row.legacy_seq),
        legacy_hash=row.legacy_hash,
        legacy_last_id=None if row.legacy_last_id is None else int(row.legacy_last_id),
        tree_size=None if row.tree_size is None else int(row.tree_size),
        tree_last_id=None if row.tree_last_id is None else int(row.tree_last_id),
        tree_root=row.tree_root, tree_frontier=row.tree_frontier, note=row.note,
        heads_format=None if row.heads_format is None else int(row.heads_format),
    )


def newest(conn: Connection) -> Checkpoint | None:
    row = conn.execute(
        select(_CHECKPOINTS).order_by(_CHECKPOINTS.c.id.desc()).limit(1)
    ).first()
    return _checkpoint(row) if row is not None else None


def checkpoints(conn: Connection) -> list[Checkpoint]:
    """Every checkpoint, oldest first."""
    return [_checkpoint(r) for r in conn.execute(select(_CHECKPOINTS).order_by(_CHECKPOINTS.c.id))]


def write(
    conn: Connection,
    *,
    at: datetime | None = None,
    legacy: tuple[int, str, int] | None = None,
    upto: int | None = None,
) -> Checkpoint:
    """Write the next checkpoint in ``conn``'s transaction, or return the newest one
    when nothing moved since it (and no ``legacy`` head is to be recorded).

    The Merkle tree grows from the previous checkpoint's frontier by the entries after
    its last leaf, up to ``upto`` (``trail_tree.settled``: on PostgreSQL an id below which
    nothing can still commit; None on SQLite, where ids commit in order), and the same
    pass reads the heads that moved: each task's newest entry among the new leaves
    (``HEADS_MOVED``). O(new entries + log n + moved tasks), never a rescan of the trail
    or of the tasks. ``legacy`` (seq, hash, last entry id) is the old global chain's
    head, recorded by the upgrade that split it (revision 0006).
    """
    prev = newest(conn)
    _last_leaf_kept(conn, prev)
    moved: Heads = {}
    frontier, last_id = extend(conn, prev, upto, moved)
    changed = _changed(conn, moved)
    grown = prev is None or prev.tree_size != frontier.size
    if prev is not None and not changed and legacy is None and not grown:
        return prev
    number = prev.id + 1 if prev is not None else 1
    stamp = as_utc(at) if at is not None else datetime.now(UTC)
    legacy_seq, legacy_hash, legacy_last_id = legacy if legacy is not None else (None, None, None)
    made = Checkpoint(
        id=number, at=stamp, tasks=len(changed),
        root=root_hash((task, seq, digest) for task, (seq, digest) in changed.items()),
        prev_hash=prev.hash if prev is not None else GENESIS, hash="",
        legacy_seq=legacy_seq, legacy_hash=legacy_hash, legacy_last_id=legacy_last_id,
        tree_size=frontier.size, tree_last_id=last_id, tree_root=frontier.root().hex(),
        tree_frontier=frontier.to_text(), heads_format=HEADS_MOVED,
    )
    made = replace(made, hash=made.recomputed_hash())
    conn.execute(insert(_CHECKPOINTS).values(_fields(made)))
    if changed:
        conn.execute(insert(_BOUND), [
            {"checkpoint_id": number, "task_id": task, "seq": seq, "hash": digest}
            for task, (seq, digest) in sorted(changed.items())
        ])
    return made


def _last_leaf_kept(conn: Connection, prev: Checkpoint | None) -> None:
    """Refuse to go on from a tree whose last leaf is gone (neither live nor archived): the
    trail was cut behind the previous checkpoint, and its frontier would hide that. Two
    key lookups."""
    if prev is None or not prev.tree_last_id:
        return
    for table in (AUDIT_EVENTS, AUDIT_PRUNED):
        if conn.execute(select(table.c.id).where(table.c.id == prev.tree_last_id)).first():
            return
    raise AuditCheckpointRefused(
        f"audit entry row {prev.tree_last_id}, the last leaf of checkpoint #{prev.id}'s tree, "
        "is gone: the trail was cut behind it; run `agent-gate audit verify`"
    )


def first_of_moved(conn: Connection) -> int | None:
    """The id of the first checkpoint of ``HEADS_MOVED`` (None: none yet): the heads
    stored below it were bound by the old format, every task's at once."""
    found = conn.execute(select(func.min(_CHECKPOINTS.c.id))
                         .where(_CHECKPOINTS.c.heads_format == HEADS_MOVED)).scalar()
    return None if found is None else int(found)


def _changed(conn: Connection, moved: Heads) -> Heads:
    """The moved heads that differ from the head each task's newest checkpoint bound;
    refused (``AuditCheckpointRefused``) where the chain went back or sideways since.

    A checkpoint of the old format read the heads table in its own snapshot, which may
    run ahead of its tree: a head below one it bound is then not yet bound again, not a
    deletion. One of ``HEADS_MOVED`` bound entries of its own tree, so every later leaf
    of that task lies above it. Tasks no new entry touched are not read: a head deleted
    or moved back without a new entry is caught by ``audit verify``, not here."""
    if not moved:
        return {}
    first_moved = first_of_moved(conn)
    other = _BOUND.alias("other")
    newest_per_task = (select(func.max(other.c.checkpoint_id))
                       .where(other.c.task_id == _BOUND.c.task_id).scalar_subquery())
    tasks = sorted(moved)
    bound: dict[str, tuple[int, str, int]] = {}
    for at in range(0, len(tasks), _CHUNK):
        for task, seq, digest, cp_id in conn.execute(
            select(_BOUND.c.task_id, _BOUND.c.seq, _BOUND.c.hash, _BOUND.c.checkpoint_id)
            .where(_BOUND.c.task_id.in_(tasks[at:at + _CHUNK]),
                   _BOUND.c.checkpoint_id == newest_per_task)
        ):
            bound[task] = (int(seq), digest, int(cp_id))
    changed: Heads = {}
    for task in tasks:
        seq, digest = moved[task]
        was = bound.get(task)
        if was is None or seq > was[0]:
            changed[task] = (seq, digest)
            continue
        if seq == was[0] and digest == was[1]:
            continue
        if seq < was[0] and (first_moved is None or was[2] < first_moved):
            continue
        raise AuditCheckpointRefused(
            f"checkpoint #{was[2]} bound entry #{was[0]} of task {task!r}, which now has "
            f"its head at #{seq}" + (" with another hash" if seq == was[0] else "")
            + ": run `agent-gate audit verify`"
        )
    return changed


def _fields(c: Checkpoint) -> dict[str, Any]:
    return {"id": c.id, "at": c.at, "tasks": c.tasks, "root": c.root,
            "prev_hash": c.prev_hash, "hash": c.hash, "legacy_seq": c.legacy_seq,
            "legacy_hash": c.legacy_hash, "legacy_last_id": c.legacy_last_id,
            "tree_size": c.tree_size, "tree_last_id": c.tree_last_id, "tree_root": c.tree_root,
            "tree_frontier": c.tree_frontier, "heads_format": c.heads_format,
            "note": c.note}


def take(engine: Engine, *, signer: SignerKey | None = None,
         origin: str | None = None) -> Checkpoint:
    """Write the next checkpoint in a transaction of its own (``audit checkpoint``):
    tried again if another writer took the same position first. With ``signer`` it is
    signed as a C2SP tlog-checkpoint (``origin`` defaults to the key's name, as the
    spec recommends), and the newest checkpoint if it was not signed yet."""
    for attempt in range(_RACES):
        upto = settled(engine)
        try:
            with begin_write(engine) as conn:
                lock_named(conn, CHECKPOINT_LOCK)
                made = write(conn, upto=upto)
                if signer is not None and made.note is None:
                    made = sign(conn, made, signer, origin or signer.name)
                return made
        except IntegrityError:
            if attempt == _RACES - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def tree_head(checkpoint: Checkpoint, origin: str) -> TreeHead:
    """The checkpoint's tree as a C2SP tlog-checkpoint body."""
    if checkpoint.tree_size is None or checkpoint.tree_root is None:
        raise AuditCheckpointRefused(
            f"checkpoint #{checkpoint.id} was written before the trail's Merkle tree: "
            "take a new one (`agent-gate audit checkpoint`)"
        )
    return TreeHead(origin, checkpoint.tree_size, bytes.fromhex(checkpoint.tree_root))


def sign(conn: Connection, checkpoint: Checkpoint, signer: SignerKey, origin: str) -> Checkpoint:
    """Sign ``checkpoint``'s tree and keep the note on its row (the note is public; the
    key never reaches the database)."""
    note = tree_head(checkpoint, origin).sign(signer)
    conn.execute(update(_CHECKPOINTS).where(_CHECKPOINTS.c.id == checkpoint.id)
                 .values(note=note))
    return replace(checkpoint, note=note)


def newest_of(engine: Engine) -> Checkpoint | None:
    with begin_read(engine) as conn:
        return newest(conn)

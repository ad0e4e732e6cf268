"""Checkpoints: one root hash over every task's chain head, linked into a chain.

The trail is one hash chain per task (``agent_gate.ledger.audit``), so no single
hash commits to all of it until a checkpoint does: it reads every row of
``audit_heads`` in one statement (one snapshot: a head and the entries it links
commit together, so the snapshot never holds half a transaction) and stores
``root``, the SHA-256 over all of them sorted by task (``chain.root_hash``),
with the previous checkpoint's hash, so checkpoints form a chain of their own.

Only the heads that changed since the previous checkpoint are stored
(``audit_checkpoint_heads``): storage grows with activity, not with tasks times
checkpoints, and the full set at checkpoint N (what ``audit verify`` hashes again)
is the newest stored head of each task at N or before.

Who writes them: ``agent-gate audit checkpoint`` (cron, an operator, or after a
batch), or an application through ``take``. The ledger's write path never does,
so no transaction of a call waits on one or reads every head. Writing one takes no lock
that a call's transaction takes: on PostgreSQL it reads heads in its own snapshot
while calls go on. Checkpoint writers take turns among themselves (``take`` holds
the named lock ``audit_checkpoint``, which no call's transaction takes); a writer
that bypasses it and races for the same position collides on its key instead, and
``take`` tries again on top of the winner. On SQLite it holds the database's write
lock for the read, as every write does.

A checkpoint never launders a deletion: if a head bound by the previous checkpoint
is missing, or has moved backwards or sideways, the writer refuses
(``AuditCheckpointRefused``) and ``audit verify`` names what happened.
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
from agent_gate.ledger.chain import GENESIS, as_utc, checkpoint_hash, root_hash
from agent_gate.ledger.models import AUDIT_CHECKPOINT_HEADS, AUDIT_CHECKPOINTS, AUDIT_HEADS
from agent_gate.ledger.settled import settled
from agent_gate.ledger.sql import lock_named
from agent_gate.ledger.trail_tree import extend

__all__ = [
    "CHECKPOINT_LOCK",
    "Checkpoint",
    "checkpoints",
    "current_heads",
    "heads_at",
    "newest",
    "newest_of",
    "sign",
    "take",
    "tree_head",
    "write",
]

_CHECKPOINTS = AUDIT_CHECKPOINTS
_BOUND = AUDIT_CHECKPOINT_HEADS
_HEADS = AUDIT_HEADS
CHECKPOINT_LOCK = "audit_checkpoint"
"""The ``sql.lock_named`` lock checkpoint writers take turns on."""
_RACES = 5
"""Times ``take`` tries again after another writer took the same position."""

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

    @property
    def tree(self) -> tuple[int, int, str] | None:
        if self.tree_size is None or self.tree_last_id is None or self.tree_root is None:
            return None
        return self.tree_size, self.tree_last_id, self.tree_root

    @property
    def anchor(self) -> str:
        """``ID:HASH``: what ``audit verify --anchor`` takes back."""
        return f"{self.id}:{self.hash}"

    def recomputed_hash(self) -> str:
        return checkpoint_hash(
            checkpoint_id=self.id, prev_hash=self.prev_hash, at=self.at, tasks=self.tasks,
            root=self.root, legacy_seq=self.legacy_seq, legacy_hash=self.legacy_hash,
            legacy_last_id=self.legacy_last_id, tree=self.tree,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "hash": self.hash, "at": self.at.isoformat(),
                               "tasks": self.tasks, "root": self.root,
                               "anchor": self.anchor}
        if self.legacy_seq is not None:
            out["legacy_head"] = {"seq": self.legacy_seq, "hash": self.legacy_hash}
        if self.tree is not None:
            out["tree"] = {"size": self.tree_size, "root": self.tree_root}
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
    )


def newest(conn: Connection) -> Checkpoint | None:
    row = conn.execute(
        select(_CHECKPOINTS).order_by(_CHECKPOINTS.c.id.desc()).limit(1)
    ).first()
    return _checkpoint(row) if row is not None else None


def checkpoints(conn: Connection) -> list[Checkpoint]:
    """Every checkpoint, oldest first."""
    return [_checkpoint(r) for r in conn.execute(select(_CHECKPOINTS).order_by(_CHECKPOINTS.c.id))]


def heads_at(conn: Connection, checkpoint_id: int) -> Heads:
    """Every task head checkpoint ``checkpoint_id`` binds: per task, the newest head
    stored at that checkpoint or before (the ``task_id, checkpoint_id`` index)."""
    inner = _BOUND.alias("later")
    newest_per_task = (
        select(func.max(inner.c.checkpoint_id))
        .where(inner.c.task_id == _BOUND.c.task_id, inner.c.checkpoint_id <= checkpoint_id)
        .scalar_subquery()
    )
    rows = conn.execute(
        select(_BOUND.c.task_id, _BOUND.c.seq, _BOUND.c.hash)
        .where(_BOUND.c.checkpoint_id == newest_per_task)
    )
    return {task: (int(seq), digest) for task, seq, digest in rows}


def current_heads(conn: Connection) -> Heads:
    """Every task's head now, in one statement (one snapshot)."""
    rows = conn.execute(select(_HEADS.c.task_id, _HEADS.c.seq, _HEADS.c.hash))
    return {task: (int(seq), digest) for task, seq, digest in rows}


def write(
    conn: Connection,
    *,
    at: datetime | None = None,
    legacy: tuple[int, str, int] | None = None,
    upto: int | None = None,
) -> Checkpoint:
    """Write the next checkpoint in ``conn``'s transaction, or return the newest one
    when no head moved since it (and no ``legacy`` head is to be recorded).

    The previous checkpoint is read before the heads: under PostgreSQL's READ
    COMMITTED each statement sees everything committed before it starts, so the heads
    read second are at least as new as the ones the previous checkpoint bound.
    ``legacy`` (seq, hash, last entry id) is the old global chain's head, recorded by
    the upgrade that split it (revision 0006).

    The Merkle tree grows from the previous checkpoint's frontier by the entries after
    its last leaf, up to ``upto`` (``trail_tree.settled``: on PostgreSQL an id below which
    nothing can still commit; None on SQLite, where ids commit in order): O(new entries
    + log n), never a rescan (``trail_tree.extend``).
    """
    prev = newest(conn)
    before = heads_at(conn, prev.id) if prev is not None else {}
    now = current_heads(conn)
    for task, (seq, digest) in before.items():
        head = now.get(task)
        if head is None or head[0] < seq or (head[0] == seq and head[1] != digest):
            found = "has no head" if head is None else f"has its head at #{head[0]}"
            raise AuditCheckpointRefused(
                f"checkpoint #{prev.id if prev else 0} bound entry #{seq} of task {task!r}, "
                f"which now {found}: run `agent-gate audit verify`"
            )
    changed = {task: head for task, head in now.items() if before.get(task) != head}
    frontier, last_id = extend(conn, prev, upto)
    grown = prev is None or prev.tree_size != frontier.size
    if prev is not None and not changed and legacy is None and not grown:
        return prev
    number = prev.id + 1 if prev is not None else 1
    stamp = as_utc(at) if at is not None else datetime.now(UTC)
    root = root_hash((task, seq, digest) for task, (seq, digest) in now.items())
    legacy_seq, legacy_hash, legacy_last_id = legacy if legacy is not None else (None, None, None)
    made = Checkpoint(
        id=number, at=stamp, tasks=len(now), root=root,
        prev_hash=prev.hash if prev is not None else GENESIS, hash="",
        legacy_seq=legacy_seq, legacy_hash=legacy_hash, legacy_last_id=legacy_last_id,
        tree_size=frontier.size, tree_last_id=last_id, tree_root=frontier.root().hex(),
        tree_frontier=frontier.to_text(),
    )
    made = Checkpoint(**{**_fields(made), "hash": made.recomputed_hash()})
    conn.execute(insert(_CHECKPOINTS).values(_fields(made)))
    if changed:
        conn.execute(insert(_BOUND), [
            {"checkpoint_id": number, "task_id": task, "seq": seq, "hash": digest}
            for task, (seq, digest) in sorted(changed.items())
        ])
    return made


def _fields(c: Checkpoint) -> dict[str, Any]:
    return {"id": c.id, "at": c.at, "tasks": c.tasks, "root": c.root,
            "prev_hash": c.prev_hash, "hash": c.hash, "legacy_seq": c.legacy_seq,
            "legacy_hash": c.legacy_hash, "legacy_last_id": c.legacy_last_id,
            "tree_size": c.tree_size, "tree_last_id": c.tree_last_id, "tree_root": c.tree_root,
            "tree_frontier": c.tree_frontier, "note": c.note}


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

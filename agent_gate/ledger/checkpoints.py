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

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, select
from sqlalchemy.exc import IntegrityError

from agent_gate.errors import AuditCheckpointRefused
from agent_gate.ledger.backend import begin_read, begin_write
from agent_gate.ledger.chain import GENESIS, as_utc, checkpoint_hash, root_hash
from agent_gate.ledger.models import AUDIT_CHECKPOINT_HEADS, AUDIT_CHECKPOINTS, AUDIT_HEADS
from agent_gate.ledger.sql import lock_named

__all__ = [
    "CHECKPOINT_LOCK",
    "Checkpoint",
    "checkpoints",
    "current_heads",
    "heads_at",
    "newest",
    "newest_of",
    "take",
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

    @property
    def anchor(self) -> str:
        """``ID:HASH``: what ``audit verify --anchor`` takes back."""
        return f"{self.id}:{self.hash}"

    def recomputed_hash(self) -> str:
        return checkpoint_hash(
            checkpoint_id=self.id, prev_hash=self.prev_hash, at=self.at, tasks=self.tasks,
            root=self.root, legacy_seq=self.legacy_seq, legacy_hash=self.legacy_hash,
            legacy_last_id=self.legacy_last_id,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "hash": self.hash, "at": self.at.isoformat(),
                               "tasks": self.tasks, "root": self.root,
                               "anchor": self.anchor}
        if self.legacy_seq is not None:
            out["legacy_head"] = {"seq": self.legacy_seq, "hash": self.legacy_hash}
        return out


def _checkpoint(row: Any) -> Checkpoint:
    return Checkpoint(
        id=int(row.id), at=as_utc(row.at), tasks=int(row.tasks), root=row.root,
        prev_hash=row.prev_hash, hash=row.hash,
        legacy_seq=None if row.legacy_seq is None else int(row.legacy_seq),
        legacy_hash=row.legacy_hash,
        legacy_last_id=None if row.legacy_last_id is None else int(row.legacy_last_id),
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
) -> Checkpoint:
    """Write the next checkpoint in ``conn``'s transaction, or return the newest one
    when no head moved since it (and no ``legacy`` head is to be recorded).

    The previous checkpoint is read before the heads: under PostgreSQL's READ
    COMMITTED each statement sees everything committed before it starts, so the heads
    read second are at least as new as the ones the previous checkpoint bound.
    ``legacy`` (seq, hash, last entry id) is the old global chain's head, recorded by
    the upgrade that split it (revision 0006).
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
    if prev is not None and not changed and legacy is None:
        return prev
    number = prev.id + 1 if prev is not None else 1
    stamp = as_utc(at) if at is not None else datetime.now(UTC)
    root = root_hash((task, seq, digest) for task, (seq, digest) in now.items())
    legacy_seq, legacy_hash, legacy_last_id = legacy if legacy is not None else (None, None, None)
    made = Checkpoint(
        id=number, at=stamp, tasks=len(now), root=root,
        prev_hash=prev.hash if prev is not None else GENESIS, hash="",
        legacy_seq=legacy_seq, legacy_hash=legacy_hash, legacy_last_id=legacy_last_id,
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
            "legacy_hash": c.legacy_hash, "legacy_last_id": c.legacy_last_id}


def take(engine: Engine) -> Checkpoint:
    """Write the next checkpoint in a transaction of its own (``audit checkpoint``):
    tried again if another writer took the same position first."""
    for attempt in range(_RACES):
        try:
            with begin_write(engine) as conn:
                lock_named(conn, CHECKPOINT_LOCK)
                return write(conn)
        except IntegrityError:
            if attempt == _RACES - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def newest_of(engine: Engine) -> Checkpoint | None:
    with begin_read(engine) as conn:
        return newest(conn)

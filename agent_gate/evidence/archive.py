"""``agent-gate audit archive --before AGE --out DIR``: finished tasks exported, then pruned.

Order of work, and why it cannot lose or re-run anything:

1. A new signed checkpoint (``export.signed_checkpoint``): every entry to be pruned is
   one of its leaves, so the bundle proves it against a signed root.
2. The candidate tasks, read once: every call terminal (no event leaves a terminal
   state, so nothing about them changes again), none touched since the cut, every
   entry inside the checkpoint's tree, the chain whole from #1 (a task archived once
   and used again stays live: its bundle would not start at #1).
3. Each task exported as its own bundle (``DIR/tasks/NNNNNN``, ``audit export --task``'s
   format: every entry with its inclusion proof), before anything is deleted.
4. Pruning, a bounded batch of tasks per write transaction. Inside it every task is
   checked again (all calls terminal, every entry one that was exported, each entry's
   hash recomputed from its fields); a task that changed since is left live. The batch
   keeps each entry's hashes (``audit_pruned``), the perfect subtrees of the signed tree
   that cover its leaves (``audit_subtrees``, each leaf checked against that tree first,
   cut at every checkpoint's size: what a full verify reads in their place), where each
   task's chain ended (``archived_heads``), moves the heads checkpoints bound for its
   tasks to ``audit_pruned_heads``, keeps a tombstone per call
   (``archived_calls``), deletes the calls' grants, deadlines, approvals, quota charges,
   entries and rows,
   and appends its own record to the trail (``pruned.ARCHIVE_TASK``, event ``archived``)
   with the root of the leaves it pruned and the hashes of its subtrees, of its tasks'
   chain ends and of the checkpoint heads it moved; all in one commit. A batch whose delete
   meets a concurrent writer (an entry naming one of its calls) rolls back whole and is
   tried one task at a time; a task that still fails stays live.

Calls go on meanwhile: a re-delivered call of a task being pruned either finds its row
(before the commit) or its tombstone (after: ``pruned.tombstone``), never neither.
"""

from __future__ import annotations

import bisect
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, insert, select
from sqlalchemy.exc import IntegrityError

from agent_gate.errors import EvidenceError
from agent_gate.evidence.export import Signed, export_bundle, signed_checkpoint
from agent_gate.evidence.merkle import Frontier
from agent_gate.evidence.note import SignerKey
from agent_gate.ledger import audit
from agent_gate.ledger.backend import begin_read, begin_write, on
from agent_gate.ledger.chain import as_utc
from agent_gate.ledger.checkpoints import checkpoints, first_of_moved
from agent_gate.ledger.models import (
    APPROVAL_DEADLINES,
    APPROVAL_GRANT_USES,
    APPROVAL_GRANTS,
    APPROVALS,
    ARCHIVED_CALLS,
    ARCHIVED_HEADS,
    AUDIT_CHECKPOINT_HEADS,
    AUDIT_EVENTS,
    AUDIT_PRUNED,
    AUDIT_PRUNED_HEADS,
    AUDIT_SUBTREES,
    QUOTA_CHARGES,
    TOOL_CALLS,
)
from agent_gate.ledger.pruned import ARCHIVE_EVENT, ARCHIVE_TASK, tombstone_text
from agent_gate.ledger.states import TERMINAL
from agent_gate.ledger.subtrees import (
    BOUND_HASH_KEY,
    BOUND_KEY,
    COUNT_KEY,
    HASH_KEY,
    HEADS_KEY,
    Bound,
    Subtree,
    bound_counts,
    bound_hash,
    cover,
    heads_hash,
    subtrees_hash,
)
from agent_gate.ledger.trail_tree import leaf_of

__all__ = ["ArchiveReport", "archive"]

_TERMINAL = sorted(s.value for s in TERMINAL)
_CHUNK = 500
"""Ids per ``IN (...)`` list: well under every backend's bound on parameters."""


@dataclass(slots=True)
class ArchiveReport:
    """What one ``audit archive`` run did: its batches' ids, what they pruned, and the
    tasks it exported but left live because they changed meanwhile."""

    run: str
    out: str
    tree_size: int
    tree_root: str
    tasks: int = 0
    calls: int = 0
    entries: int = 0
    batches: list[str] = field(default_factory=list)
    left_live: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "out": self.out, "tree_size": self.tree_size,
                "tree_root": self.tree_root, "tasks": self.tasks, "calls": self.calls,
                "entries": self.entries, "batches": self.batches, "left_live": self.left_live}


def archive(engine: Engine, signer: SignerKey, origin: str | None, before: datetime,
            out: Path, *, batch: int = 50) -> ArchiveReport:
    """Export every finished task older than ``before`` into ``out`` and prune it (see
    the module docstring); ``batch`` tasks per write transaction."""
    if batch < 1:
        raise EvidenceError("--batch must be at least 1")
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise EvidenceError(f"{out} is not empty: an archive is written into a new directory")
    signed = signed_checkpoint(engine, signer, origin)
    last_id = signed.checkpoint.tree_last_id or 0
    with begin_read(engine) as conn:
        tasks = _candidates(conn, before, last_id)
        cuts = cuts_of(conn, signed)
    report = ArchiveReport(uuid.uuid4().hex, str(out), signed.tree.size,
                           signed.tree.root().hex())
    exported: dict[str, set[int]] = {}
    for number, task in enumerate(tasks):
        where = out / "tasks" / f"{number:06d}"
        export_bundle(engine, signed, where, task_id=task)
        exported[task] = _exported_rows(where, signed)
    for start in range(0, len(tasks), batch):
        chunk = tasks[start:start + batch]
        try:
            _prune(engine, report, chunk, exported, before, signed, cuts)
        except IntegrityError:  # a concurrent writer named one of its calls
            for task in chunk:
                try:
                    _prune(engine, report, [task], exported, before, signed, cuts)
                except IntegrityError:
                    report.left_live.append(task)
    (out / "archive.json").write_text(json.dumps(
        {**report.to_dict(), "bundles": {f"tasks/{n:06d}": t for n, t in enumerate(tasks)}},
        indent=2) + "\n", encoding="utf-8")
    return report


def _candidates(conn: Connection, before: datetime, last_id: int) -> list[str]:
    """Tasks whose every call is terminal and untouched since ``before``, and whose every
    entry is a leaf of the signed tree (after the pre-upgrade global chain, if any)."""
    stored = checkpoints(conn)
    legacy = (stored[0].legacy_last_id or 0) if stored else 0
    calls = TOOL_CALLS.c
    open_tasks = select(calls.task_id).where(
        (calls.state.not_in(_TERMINAL)) | (calls.updated_at >= before))
    finished = (select(calls.task_id).where(calls.task_id.not_in(open_tasks))
                .group_by(calls.task_id))
    entries = AUDIT_EVENTS.c
    spans = conn.execute(
        select(entries.task_id, func.min(entries.id), func.max(entries.id),
               func.min(entries.seq))
        .where(entries.task_id.in_(finished)).group_by(entries.task_id)
    ).all()
    return sorted(task for task, low, high, first in spans
                  if task != ARCHIVE_TASK and low > legacy and high <= last_id and first == 1)


def _exported_rows(where: Path, signed: Signed) -> set[int]:
    """The ``audit_events`` ids the task's bundle holds (read back from what was written)."""
    rows = set()
    for line in (where / "entries.jsonl").read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if signed.ids[entry["index"]] != entry["row"]:  # pragma: no cover - export's own bug
            raise EvidenceError(f"bundle {where} names row {entry['row']} at the wrong leaf")
        rows.add(int(entry["row"]))
    return rows


def cuts_of(conn: Connection, signed: Signed) -> list[int]:
    """The sizes of every checkpoint's tree up to the signed one: no kept subtree may
    straddle one, so that verify recomputes each of those trees (their sizes are fixed:
    a later checkpoint only grows the tree)."""
    return [c.tree_size for c in checkpoints(conn)
            if c.tree_size is not None and c.tree_size <= signed.tree.size]


def _subtrees(signed: Signed, rows: Sequence[dict[str, Any]], cuts: Sequence[int],
              batch_id: str) -> list[Subtree]:
    """The perfect subtrees of the signed tree that cover the batch's pruned ``rows`` (in
    id order), each leaf first checked to be the signed tree's leaf at its position."""
    positions = []
    for row in rows:
        at = bisect.bisect_left(signed.ids, row["id"])
        if at == len(signed.ids) or signed.ids[at] != row["id"] or (
                signed.tree.levels[0][at].hex() != row["leaf"]):
            raise EvidenceError(
                f"audit entry #{row['seq']} of task {row['task_id']!r} (row {row['id']}) is "
                "not the leaf the signed checkpoint holds: run `agent-gate audit verify`")
        positions.append(at)
    return [Subtree(start, level, signed.ids[start], signed.ids[start + (1 << level) - 1],
                    signed.tree.subtree(start, start + (1 << level)).hex(), batch_id)
            for start, level in cover(positions, cuts)]


def _prune(engine: Engine, report: ArchiveReport, tasks: Sequence[str],
           exported: dict[str, set[int]], before: datetime, signed: Signed,
           cuts: Sequence[int]) -> None:
    """One batch in one write transaction (nothing of it commits unless all of it does)."""
    last_id = signed.checkpoint.tree_last_id or 0
    batch_id = f"{report.run[:24]}-{len(report.batches) + 1:06d}"
    pruned_calls: list[int] = []
    pruned_rows: list[dict[str, Any]] = []
    kept: list[str] = []
    tombstones: list[dict[str, Any]] = []
    ends: list[tuple[str, int, str]] = []
    with begin_write(engine) as conn:
        for task in tasks:
            found = _prunable(conn, task, exported[task], before, last_id)
            if found is None:
                kept.append(task)
                continue
            calls, rows = found
            tombstones.extend(
                {"task_id": task, "call_id": call["call_id"], "idem_key": call["idem_key"],
                 "record": tombstone_text(call), "archive": batch_id} for call in calls)
            pruned_calls.extend(int(c["id"]) for c in calls)
            pruned_rows.extend(rows)
            ends.append((task, rows[-1]["seq"], rows[-1]["hash"]))
        for at in range(0, len(tombstones), _CHUNK):  # one statement, many rows
            conn.execute(insert(ARCHIVED_CALLS), tombstones[at:at + _CHUNK])
        if pruned_rows:
            pruned_rows.sort(key=lambda r: r["id"])
            frontier = Frontier()
            for row in pruned_rows:
                frontier.append(bytes.fromhex(row["leaf"]))
                row["archive"] = batch_id
            pieces = _subtrees(signed, pruned_rows, cuts, batch_id)
            for at in range(0, len(pruned_rows), _CHUNK):
                conn.execute(insert(AUDIT_PRUNED), pruned_rows[at:at + _CHUNK])
            for at in range(0, len(pieces), _CHUNK):
                conn.execute(insert(AUDIT_SUBTREES), [
                    {"start": s.start, "level": s.level, "first_id": s.first_id,
                     "last_id": s.last_id, "hash": s.hash, "archive": s.archive}
                    for s in pieces[at:at + _CHUNK]])
            conn.execute(insert(ARCHIVED_HEADS), [
                {"task_id": task, "seq": seq, "hash": digest, "archive": batch_id}
                for task, seq, digest in ends])
            moved = _move_bound(conn, [task for task, _, _ in ends], batch_id)
            ids = [r["id"] for r in pruned_rows]
            # The record first: on SQLite a new row takes the largest id plus one, and
            # the record must stay above every id it prunes (ids are the tree's order).
            audit.append(on(conn), task_id=ARCHIVE_TASK, event=ARCHIVE_EVENT, detail={
                "archive": batch_id, "run": report.run, "entries": frontier.size,
                "root": frontier.root().hex(), "first_id": ids[0], "last_id": ids[-1],
                "tasks": len(tasks) - len(kept), "calls": len(pruned_calls),
                "tree_size": report.tree_size, "tree_root": report.tree_root,
                COUNT_KEY: len(pieces), HASH_KEY: subtrees_hash(pieces),
                HEADS_KEY: heads_hash(ends),
                BOUND_KEY: bound_counts(moved), BOUND_HASH_KEY: bound_hash(moved),
            })
            # Children before parents, each over every chunk before the next: a grant's
            # uses may name calls of another chunk, and a grant names its approval.
            chunks = [pruned_calls[at:at + _CHUNK] for at in range(0, len(pruned_calls), _CHUNK)]
            for part in chunks:
                conn.execute(delete(APPROVAL_GRANT_USES)
                             .where(APPROVAL_GRANT_USES.c.call_row_id.in_(part)))
                conn.execute(delete(APPROVAL_DEADLINES)
                             .where(APPROVAL_DEADLINES.c.call_row_id.in_(part)))
            for part in chunks:
                conn.execute(delete(APPROVAL_GRANTS).where(APPROVAL_GRANTS.c.approval_id.in_(
                    select(APPROVALS.c.id).where(APPROVALS.c.call_row_id.in_(part)))))
            for part in chunks:
                conn.execute(delete(APPROVALS).where(APPROVALS.c.call_row_id.in_(part)))
                conn.execute(delete(QUOTA_CHARGES).where(QUOTA_CHARGES.c.call_row_id.in_(part)))
            for at in range(0, len(ids), _CHUNK):
                conn.execute(delete(AUDIT_EVENTS).where(AUDIT_EVENTS.c.id.in_(ids[at:at + _CHUNK])))
            for at in range(0, len(pruned_calls), _CHUNK):
                conn.execute(delete(TOOL_CALLS).where(
                    TOOL_CALLS.c.id.in_(pruned_calls[at:at + _CHUNK])))
    if pruned_rows:
        report.batches.append(batch_id)
        report.tasks += len(tasks) - len(kept)
        report.calls += len(pruned_calls)
        report.entries += len(pruned_rows)
    report.left_live.extend(kept)


def _move_bound(conn: Connection, tasks: Sequence[str], batch_id: str) -> list[Bound]:
    """Move the heads checkpoints of ``chain.HEADS_MOVED`` bound for ``tasks`` (pruned whole)
    into ``audit_pruned_heads``: a full verify then counts them from the batch's record
    instead of reading one row per archived task per checkpoint. Heads bound by older
    checkpoints stay: each of their roots hashes every task's head, so they are read."""
    first = first_of_moved(conn)
    if first is None:
        return []
    b = AUDIT_CHECKPOINT_HEADS.c
    moved: list[Bound] = []
    for at in range(0, len(tasks), _CHUNK):
        part = tasks[at:at + _CHUNK]
        which = (b.task_id.in_(part), b.checkpoint_id >= first)
        rows = [(int(cp_id), task, int(seq), digest) for cp_id, task, seq, digest in
                conn.execute(select(b.checkpoint_id, b.task_id, b.seq, b.hash).where(*which))]
        if rows:
            conn.execute(insert(AUDIT_PRUNED_HEADS), [
                {"checkpoint_id": cp_id, "task_id": task, "seq": seq, "hash": digest,
                 "archive": batch_id} for cp_id, task, seq, digest in rows])
            conn.execute(delete(AUDIT_CHECKPOINT_HEADS).where(*which))
        moved.extend(rows)
    return moved


def _prunable(conn: Connection, task: str, exported: set[int], before: datetime,
              last_id: int) -> tuple[list[Any], list[dict[str, Any]]] | None:
    """The task's call rows and kept entry hashes, if it is still as exported: every call
    terminal and untouched since the cut, every entry one the bundle holds."""
    calls = conn.execute(select(TOOL_CALLS).where(TOOL_CALLS.c.task_id == task)
                         .order_by(TOOL_CALLS.c.id)).mappings().all()
    if not calls or any(c["state"] not in _TERMINAL or _after(c["updated_at"], before)
                        for c in calls):
        return None
    rows = []
    for entry in conn.execute(select(AUDIT_EVENTS).where(AUDIT_EVENTS.c.task_id == task)
                              .order_by(AUDIT_EVENTS.c.id)).mappings():
        if int(entry["id"]) not in exported or int(entry["id"]) > last_id:
            return None
        recomputed, leaf = leaf_of(entry)
        if recomputed != entry["hash"]:
            raise EvidenceError(
                f"audit entry #{entry['seq']} of task {task!r} (row {entry['id']}) no longer "
                "matches its hash: run `agent-gate audit verify`; nothing edited is archived")
        rows.append({"id": int(entry["id"]), "task_id": task, "seq": int(entry["seq"]),
                     "prev_hash": entry["prev_hash"], "hash": entry["hash"],
                     "leaf": leaf.hex()})
    if {r["id"] for r in rows} != exported:
        return None
    return list(calls), rows


def _after(value: datetime, cut: datetime) -> bool:
    return as_utc(value) >= as_utc(cut)

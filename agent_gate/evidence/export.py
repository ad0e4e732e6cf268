"""Proofs and bundles made from a ledger: ``audit prove`` and ``audit export``.

Everything is proven against a signed checkpoint (``checkpoints.take`` with a key signs a
new one first). Making a proof reads the leaves up to that checkpoint once and builds the
tree's levels (O(n) hashing; 2n hashes and n ids held, not the rows); each proof is then
O(log n), and only the exported rows are read again. A bundle holds no value the trail
does not: entries are exported as stored (``bundle.entry_json``).
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select, true

from agent_gate.errors import AuditCheckpointRefused, EvidenceError
from agent_gate.evidence.bundle import BUNDLE_FORMAT, PROOF_FORMAT, VERSION, entry_json
from agent_gate.evidence.merkle import Tree
from agent_gate.evidence.note import SignerKey
from agent_gate.ledger.backend import begin_read
from agent_gate.ledger.checkpoints import Checkpoint, checkpoints, take
from agent_gate.ledger.models import AUDIT_EVENTS
from agent_gate.ledger.trail_tree import leaves

__all__ = ["Signed", "export_bundle", "prove_call", "prove_consistency", "signed_checkpoint"]


@dataclass(frozen=True, slots=True)
class Signed:
    """A signed checkpoint with the trail's leaves up to it (and each leaf's row id)."""

    checkpoint: Checkpoint
    ids: list[int]
    tree: Tree
    history: list[Checkpoint]
    """Earlier signed checkpoints with a tree, oldest first."""

    @property
    def note(self) -> str:
        assert self.checkpoint.note is not None
        return self.checkpoint.note


def signed_checkpoint(engine: Engine, signer: SignerKey | None, origin: str | None) -> Signed:
    """A new signed checkpoint (with ``signer``), else the newest signed one, and the leaves
    it binds, read in one snapshot."""
    if signer is not None:
        take(engine, signer=signer, origin=origin)
    with begin_read(engine) as conn:
        stored = [c for c in checkpoints(conn) if c.note is not None and c.tree is not None]
        if not stored:
            raise AuditCheckpointRefused(
                "no signed checkpoint yet: pass --signing-key (or set AGENT_GATE_AUDIT_KEY)"
            )
        newest = stored[-1]
        assert newest.tree_last_id is not None
        ids, hashes = [], []
        for row, leaf in leaves(conn, upto=newest.tree_last_id):
            ids.append(int(row["id"]))
            hashes.append(leaf)
    tree = Tree(hashes)
    if (tree.size, tree.root().hex()) != (newest.tree_size, newest.tree_root):
        raise AuditCheckpointRefused(
            f"the trail no longer hashes to signed checkpoint #{newest.id} ({tree.size} "
            f"entries read, {newest.tree_size} signed): entries were edited, added or "
            "deleted; run `agent-gate audit verify`"
        )
    return Signed(newest, ids, tree, stored[:-1])


def _rows(engine: Engine, signed: Signed, where: Any) -> list[tuple[int, Mapping[str, Any]]]:
    """The rows ``where`` selects among the checkpoint's leaves, with their leaf index."""
    if not signed.ids:
        return []
    stmt = (select(AUDIT_EVENTS).where(where, AUDIT_EVENTS.c.id <= signed.ids[-1])
            .order_by(AUDIT_EVENTS.c.id))
    with begin_read(engine) as conn:
        rows = conn.execute(stmt).mappings().all()
    out = []
    for row in rows:
        index = bisect_left(signed.ids, int(row["id"]))
        if index < len(signed.ids) and signed.ids[index] == int(row["id"]):
            out.append((index, row))
    return out


def _proofs_of(signed: Signed, rows: list[tuple[int, Mapping[str, Any]]]
               ) -> list[dict[str, Any]]:
    size = signed.tree.size
    return [{**entry_json(row, i),
             "proof": [h.hex() for h in signed.tree.inclusion_proof(i, size)]} for i, row in rows]


def prove_call(engine: Engine, signed: Signed, call_id: str, task_id: str | None = None
               ) -> dict[str, Any]:
    """An inclusion proof of each of the call's entries in the signed checkpoint."""
    where = AUDIT_EVENTS.c.call_id == call_id
    if task_id is not None:
        where = where & (AUDIT_EVENTS.c.task_id == task_id)
    wanted = _rows(engine, signed, where)
    tasks = {row["task_id"] for _, row in wanted}
    if not wanted:
        raise EvidenceError(f"call {call_id!r} has no entry in the newest signed checkpoint "
                            "(take one after it ran: agent-gate audit checkpoint)")
    if len(tasks) > 1:
        raise EvidenceError(f"call id {call_id!r} is in {len(tasks)} tasks: name one with --task")
    return {"format": PROOF_FORMAT, "version": VERSION, "kind": "inclusion",
            "tree_size": signed.tree.size, "checkpoint": signed.note,
            "entries": _proofs_of(signed, wanted)}


def prove_consistency(signed: Signed, old_id: int, new_id: int) -> dict[str, Any]:
    """A consistency proof between two signed checkpoints, by their ids."""
    every = {c.id: c for c in [*signed.history, signed.checkpoint]}
    old, new = every.get(old_id), every.get(new_id)
    if old is None or new is None:
        raise EvidenceError(f"checkpoint #{old_id if old is None else new_id} is not a signed "
                            "checkpoint with a tree")
    assert old.tree_size is not None and new.tree_size is not None
    if old.tree_size > new.tree_size:
        raise EvidenceError(f"checkpoint #{old_id} is newer than #{new_id}")
    proof = signed.tree.consistency_proof(old.tree_size, new.tree_size)
    return {"format": PROOF_FORMAT, "version": VERSION, "kind": "consistency",
            "old": old.note, "checkpoint": new.note, "proof": [h.hex() for h in proof]}


def export_bundle(
    engine: Engine, signed: Signed, out: Path, *, task_id: str | None = None,
    since: datetime | None = None, until: datetime | None = None,
) -> dict[str, Any]:
    """Write a bundle into ``out`` (created; must be empty): see ``evidence.bundle``."""
    if task_id is not None and (since is not None or until is not None):
        raise EvidenceError("--task exports the whole task; --since/--until select a range "
                            "of every task's entries")
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise EvidenceError(f"{out} is not empty: a bundle is written into a new directory")
    size = signed.tree.size
    manifest: dict[str, Any] = {"format": BUNDLE_FORMAT, "version": VERSION,
                                "tree_size": size, "checkpoint_id": signed.checkpoint.id,
                                "filter": {"task": task_id,
                                           "since": since.isoformat() if since else None,
                                           "until": until.isoformat() if until else None}}
    if task_id is not None:
        wanted = _rows(engine, signed, AUDIT_EVENTS.c.task_id == task_id)
        if not wanted:
            raise EvidenceError(f"task {task_id!r} has no entry in the signed checkpoint")
        lines = _proofs_of(signed, wanted)
        manifest["mode"] = "task"
    else:
        inside = [i for i, _ in _rows(engine, signed, _window(since, until))]
        first, end = (inside[0], inside[-1] + 1) if inside else (size, size)
        run = (_rows(engine, signed, AUDIT_EVENTS.c.id.between(signed.ids[first],
                                                               signed.ids[end - 1]))
               if end > first else [])
        if len(run) != end - first:  # leaves of pruned entries inside the run
            raise EvidenceError(
                f"{end - first - len(run)} of the {end - first} entries from leaf {first} to "
                f"{end - 1} were archived (`audit archive`): their bundles are in the "
                "archive; export a range that starts after them, or one task (--task)")
        lines = [entry_json(row, i) for i, row in run]
        manifest.update(mode="range", first=first, end=end,
                        left=[h.hex() for h in signed.tree.frontier(first).hashes],
                        right=[[level, h.hex()] for level, h in signed.tree.pieces(end)])
    manifest["entries"] = len(lines)
    history = [{"checkpoint": c.note, "proof": [
        h.hex() for h in signed.tree.consistency_proof(c.tree_size or 0, size)]}
        for c in signed.history if c.tree_size]
    (out / "checkpoint.note").write_text(signed.note, encoding="utf-8")
    (out / "entries.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines),
                                       encoding="utf-8")
    (out / "history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history),
                                       encoding="utf-8")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def _window(since: datetime | None, until: datetime | None) -> Any:
    """The entries at or after ``since`` and before ``until`` (every entry without them)."""
    where = true()
    if since is not None:
        where = where & (AUDIT_EVENTS.c.at >= since)
    if until is not None:
        where = where & (AUDIT_EVENTS.c.at < until)
    return where

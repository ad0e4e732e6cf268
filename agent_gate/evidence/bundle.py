"""Proofs and bundles of the audit trail, and checking them offline with a public key.

Schema ``agent-gate/audit-entry`` version 1 (one JSON object per entry; ``entries.jsonl``
in a bundle, ``entries`` in a proof file)::

    row       audit_events.id              index     leaf position in the Merkle tree
    task      task id                      seq       position in the task's chain (1, 2, ...)
    prev      hash of the task's entry seq-1 (64 zeros for #1)
    hash      the entry's chain hash        at_us     time, microseconds since the epoch (UTC)
    call      call id or null               call_row  tool_calls.id or null
    event     what happened                 from, to  states (or null)
    actor     who (or null)                 detail    the stored detail text (JSON) or null

``detail`` is exactly the stored text: ids, codes, hashes and redacted stand-ins, never a
sealed or redacted value in clear (the trail never holds one). A verifier rebuilds each
entry's hashed text from these fields (``chain.entry_leaf``), so an edited field fails.

A bundle directory holds ``manifest.json`` (format ``agent-gate/audit-bundle`` v1),
``checkpoint.note`` (the signed C2SP checkpoint the entries are proven against),
``entries.jsonl`` and ``history.jsonl`` (each earlier signed checkpoint of the ledger
with a consistency proof to the bundle's). Its ``mode`` says what is proven:

* ``range``: the entries are every leaf ``[first, end)``; the manifest's ``left``
  (the frontier at ``first``) and ``right`` (the aligned subtrees after ``end``) rebuild
  the whole tree's root, so nothing in the range was dropped, added or moved.
* ``task``: one task's entries, each with an inclusion proof; its chain must run from
  #1 without a gap, so a dropped, reordered or edited entry fails. That no entry after
  the last one exists at the checkpoint is not proven (see docs/guides/audit.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agent_gate.errors import EvidenceError
from agent_gate.evidence.checkpoint import TreeHead, open_checkpoint
from agent_gate.evidence.merkle import Frontier, verify_consistency, verify_inclusion
from agent_gate.evidence.note import VerifierKey
from agent_gate.ledger.chain import GENESIS, entry_leaf, timestamp_us

__all__ = [
    "BUNDLE_FORMAT",
    "ENTRY_FORMAT",
    "PROOF_FORMAT",
    "Finding",
    "entry_json",
    "verify_bundle",
    "verify_proof",
]

ENTRY_FORMAT = "agent-gate/audit-entry"
BUNDLE_FORMAT = "agent-gate/audit-bundle"
PROOF_FORMAT = "agent-gate/audit-proof"
VERSION = 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Finding:
    """What an offline check concluded: ``ok``, how much it checked, the first problem."""

    ok: bool
    checked: int
    head: TreeHead | None
    problem: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checked": self.checked, "problem": self.problem,
                "tree_size": self.head.size if self.head else None,
                "root": self.head.root.hex() if self.head else None,
                "origin": self.head.origin if self.head else None, "notes": self.notes}


def entry_json(row: Any, index: int) -> dict[str, Any]:
    """One stored ``audit_events`` row in the entry schema (``row`` is a mapping)."""
    return {
        "row": int(row["id"]), "index": index, "task": row["task_id"], "seq": int(row["seq"]),
        "prev": row["prev_hash"], "hash": row["hash"], "at_us": timestamp_us(row["at"]),
        "call": row["call_id"], "call_row": row["call_row_id"], "event": row["event"],
        "from": row["from_state"], "to": row["to_state"], "actor": row["actor"],
        "detail": row["detail"],
    }


def _leaf(entry: dict[str, Any], where: str) -> bytes:
    """The entry's leaf hash, once its fields hash to its ``hash``."""
    try:
        digest, leaf = entry_leaf(
            seq=int(entry["seq"]), prev_hash=str(entry["prev"]),
            at=_EPOCH + timedelta(microseconds=int(entry["at_us"])),
            task_id=entry["task"], call_row_id=entry["call_row"], call_id=entry["call"],
            event=entry["event"], from_state=entry["from"], to_state=entry["to"],
            actor=entry["actor"], detail=entry["detail"],
        )
    except (KeyError, TypeError, ValueError) as error:
        raise EvidenceError(f"{where} is not an audit entry (field {error})") from None
    if digest != entry.get("hash"):
        raise _Failed(f"{where} was edited: its fields no longer hash to its hash")
    return leaf


class _Failed(Exception):
    """A check that failed (not malformed input): becomes ``Finding.problem``."""


def _hashes(values: Any, where: str) -> list[bytes]:
    try:
        out = [bytes.fromhex(v) for v in values]
    except (TypeError, ValueError):
        raise EvidenceError(f"{where} is not a list of hex hashes") from None
    return out


def _chains(entries: list[dict[str, Any]], *, from_first: bool) -> None:
    """Each task's entries follow each other (seq + 1, prev = hash before)."""
    last: dict[str, tuple[int, str]] = {}
    for entry in entries:
        task, seq = entry["task"], int(entry["seq"])
        before = last.get(task)
        if before is None:
            if from_first and (seq != 1 or entry["prev"] != GENESIS):
                raise _Failed(f"task {task!r}'s chain starts at #{seq}, not #1: entries "
                              "before it were dropped")
        elif seq != before[0] + 1 or entry["prev"] != before[1]:
            raise _Failed(f"task {task!r}'s entry #{seq} (row {entry['row']}) does not follow "
                          f"#{before[0]}: an entry was dropped or reordered")
        last[task] = (seq, entry["hash"])


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EvidenceError(f"{path.name} is missing") from None
    except (ValueError, UnicodeDecodeError):
        raise EvidenceError(f"{path.name} is not JSON") from None


def _read_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EvidenceError(f"{path.name} is missing") from None
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            value = json.loads(line)
        except ValueError:
            raise EvidenceError(f"{path.name} line {number} is not JSON") from None
        if not isinstance(value, dict):
            raise EvidenceError(f"{path.name} line {number} is not an object")
        out.append(value)
    return out


def _trusted(head: TreeHead, trusted: TreeHead | None, history: list[dict[str, Any]],
             key: VerifierKey) -> list[str]:
    """Every earlier checkpoint in ``history`` is consistent with ``head``; a ``trusted``
    one the verifier kept must be ``head`` or one of them (else a rollback or a fork)."""
    notes: list[str] = []
    seen_trusted = trusted is None or (trusted.size, trusted.root) == (head.size, head.root)
    for number, item in enumerate(history, start=1):
        old, _ = open_checkpoint(str(item.get("checkpoint")), key, origin=head.origin)
        proof = _hashes(item.get("proof") or [], f"history line {number}")
        if not verify_consistency(old.size, head.size, old.root, head.root, proof):
            raise _Failed(f"the ledger's earlier checkpoint at {old.size} entries (history line "
                          f"{number}) is not consistent with this one: history was rewritten")
        if trusted is not None and (old.size, old.root) == (trusted.size, trusted.root):
            seen_trusted = True
    if not seen_trusted:
        assert trusted is not None
        if trusted.size > head.size:
            raise _Failed(f"the checkpoint you trust has {trusted.size} entries, this bundle's "
                          f"only {head.size}: it was rolled back to an older checkpoint")
        raise _Failed("the checkpoint you trust is not in this ledger's history: the trail was "
                      "rewritten (or it is another ledger)")
    if trusted is not None:
        notes.append(f"consistent with the trusted checkpoint at {trusted.size} entries")
    return notes


def verify_bundle(directory: Path, key: VerifierKey, *, trusted_note: str | None = None
                  ) -> Finding:
    """Check a bundle with nothing but ``key`` (and, if kept, a trusted checkpoint)."""
    manifest = _read_json(directory / "manifest.json")
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise EvidenceError(f"manifest.json is not an {BUNDLE_FORMAT} manifest")
    if manifest.get("version") != VERSION:
        raise EvidenceError(f"bundle version {manifest.get('version')!r} is not {VERSION}")
    note = (directory / "checkpoint.note").read_text(encoding="utf-8") \
        if (directory / "checkpoint.note").is_file() else ""
    head, _ = open_checkpoint(note, key)
    trusted = open_checkpoint(trusted_note, key, origin=head.origin)[0] \
        if trusted_note is not None else None
    entries = _read_lines(directory / "entries.jsonl")
    history = _read_lines(directory / "history.jsonl") \
        if (directory / "history.jsonl").is_file() else []
    try:
        notes = _trusted(head, trusted, history, key)
        if manifest.get("mode") == "range":
            _range(manifest, head, entries)
        elif manifest.get("mode") == "task":
            _task(head, entries)
        else:
            raise EvidenceError("the manifest's mode is neither 'range' nor 'task'")
        if manifest.get("entries") != len(entries):
            raise _Failed(f"the manifest lists {manifest.get('entries')} entries, the bundle "
                          f"holds {len(entries)}: entries were dropped or added")
    except _Failed as failed:
        return Finding(False, len(entries), head, str(failed))
    return Finding(True, len(entries), head, None, notes)


def _range(manifest: dict[str, Any], head: TreeHead, entries: list[dict[str, Any]]) -> None:
    first = manifest.get("first")
    if not isinstance(first, int) or first < 0:
        raise EvidenceError("the manifest's 'first' is not a leaf index")
    try:
        frontier = Frontier(first, _hashes(manifest.get("left") or [], "'left'"))
    except ValueError:
        raise _Failed("the manifest's 'left' is not the frontier of its first leaf") from None
    for position, entry in enumerate(entries):
        where = f"entries.jsonl line {position + 1}"
        if entry.get("index") != first + position:
            raise _Failed(f"{where} is leaf {entry.get('index')}, expected {first + position}: "
                          "entries were dropped, added or reordered")
        frontier.append(_leaf(entry, where))
    try:
        for item in manifest.get("right") or []:
            frontier.extend_piece(_hashes([item[1]], "'right'")[0], int(item[0]))
    except (ValueError, TypeError, IndexError):
        raise _Failed("the entries and the manifest's 'right' do not tile the tree: entries "
                      "were dropped or added") from None
    if (frontier.size, frontier.root()) != (head.size, head.root):
        raise _Failed(f"the {len(entries)} entries do not rebuild the signed tree of "
                      f"{head.size} entries: an entry was changed, dropped or moved, or the "
                      "checkpoint is not theirs")
    _chains(entries, from_first=False)


def _task(head: TreeHead, entries: list[dict[str, Any]]) -> None:
    previous = -1
    for position, entry in enumerate(entries):
        where = f"entries.jsonl line {position + 1}"
        index = entry.get("index")
        if not isinstance(index, int) or index <= previous:
            raise _Failed(f"{where} is out of order (leaf {index} after {previous}): the "
                          "entries were reordered")
        previous = index
        leaf = _leaf(entry, where)
        proof = _hashes(entry.get("proof") or [], f"{where}'s proof")
        if not verify_inclusion(leaf, index, head.size, proof, head.root):
            raise _Failed(f"{where} (task {entry.get('task')!r} #{entry.get('seq')}) is not "
                          f"leaf {index} of the signed tree of {head.size} entries")
    _chains(entries, from_first=True)


def verify_proof(proof: dict[str, Any], checkpoint_note: str, key: VerifierKey) -> Finding:
    """Check a proof file (``audit prove``) against a signed checkpoint, with no database."""
    if not isinstance(proof, dict) or proof.get("format") != PROOF_FORMAT:
        raise EvidenceError(f"the proof is not an {PROOF_FORMAT} document")
    head, _ = open_checkpoint(checkpoint_note, key)
    try:
        if proof.get("kind") == "consistency":
            old, _ = open_checkpoint(str(proof.get("old")), key, origin=head.origin)
            path = _hashes(proof.get("proof") or [], "the proof")
            if not verify_consistency(old.size, head.size, old.root, head.root, path):
                raise _Failed(f"the checkpoint at {old.size} entries is not a prefix of the "
                              f"one at {head.size}: the log was rewritten between them")
            return Finding(True, 1, head, None, [f"{old.size} -> {head.size} entries"])
        entries = proof.get("entries")
        if proof.get("kind") != "inclusion" or not isinstance(entries, list):
            raise EvidenceError("the proof's kind is neither 'inclusion' nor 'consistency'")
        for number, entry in enumerate(entries, start=1):
            where = f"entry {number} of the proof"
            leaf = _leaf(entry, where)
            path = _hashes(entry.get("proof") or [], f"{where}'s path")
            if not verify_inclusion(leaf, int(entry.get("index", -1)), head.size, path,
                                    head.root):
                raise _Failed(f"{where} (task {entry.get('task')!r} #{entry.get('seq')}) is "
                              f"not in the signed tree of {head.size} entries")
        return Finding(True, len(entries), head)
    except _Failed as failed:
        return Finding(False, 0, head, str(failed))

"""Publishing signed checkpoints to sinks outside the ledger: the simplest witnesses.

A sink here is a file (it holds the newest checkpoint) or a directory (every checkpoint
as ``<size>.note``, zero-padded so names sort by size, and ``latest.note``). An
``http(s)://`` endpoint is served through the webhooks' signed outbox instead
(``serve.webhooks.deliver_checkpoints``: at least once, in order, retried). A ledger
rewritten later cannot rewrite what a sink kept, and ``agent-gate audit verify
--checkpoint SINK_FILE --key KEY`` compares the ledger with it.

Like a witness, a sink never goes backwards: publishing a checkpoint smaller than the
one it holds for the same origin (a rollback), or of the same size with another root (a
fork), is refused, and the sink keeps what it had. Each file is replaced atomically
(written beside it, then renamed), so a reader never sees half a note.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from agent_gate.errors import EvidenceError
from agent_gate.evidence.checkpoint import TreeHead, open_checkpoint
from agent_gate.evidence.note import VerifierKey

__all__ = ["LATEST", "publish"]

LATEST = "latest.note"


def _write(path: Path, text: str) -> None:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def publish(note: str, key: VerifierKey, sink: Path) -> Path:
    """Hand ``note`` (signed by ``key``) to ``sink``; the file now holding it."""
    head, _ = open_checkpoint(note, key)
    into_directory = sink.is_dir() or str(sink).endswith(os.sep)
    if into_directory:
        sink.mkdir(parents=True, exist_ok=True)
    latest = sink / LATEST if into_directory else sink
    if latest.is_file():
        _refuse_going_back(latest, head, key)
    if into_directory:
        _write(sink / f"{head.size:020d}.note", note)
    _write(latest, note)
    return latest


def _refuse_going_back(latest: Path, head: TreeHead, key: VerifierKey) -> None:
    try:
        held, _ = open_checkpoint(latest.read_text(encoding="utf-8"), key)
    except (EvidenceError, OSError, UnicodeDecodeError):
        return  # not this log's (another key, or not a note): nothing to keep consistent
    if held.origin != head.origin:
        return
    if held.size > head.size:
        raise EvidenceError(
            f"{latest} holds a checkpoint of {held.size} entries; refusing to publish one of "
            f"{head.size}: the ledger went back (rolled back or restored from a backup)")
    if held.size == head.size and held.root != head.root:
        raise EvidenceError(
            f"{latest} holds another checkpoint of {head.size} entries: the ledger's history "
            "forked (rewritten after it was published)")

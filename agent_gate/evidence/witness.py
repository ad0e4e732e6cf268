"""Publishing signed checkpoints to sinks outside the ledger: the simplest witnesses.

A sink is a file (it holds the newest checkpoint), a directory (every checkpoint as
``<size>.note``, zero-padded so names sort by size, and ``latest.note``), or an
``http(s)://`` endpoint: one POST of the note, signed as the webhooks are (HMAC-SHA256 of
``TIMESTAMP.BODY`` under ``$AGENT_GATE_WITNESS_SECRET``, the ``X-Agent-Gate-Timestamp``
and ``X-Agent-Gate-Signature: sha256=HEX`` headers), a 2xx being delivery. A ledger
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
from collections.abc import Iterable
from pathlib import Path

from agent_gate.errors import EvidenceError
from agent_gate.evidence.checkpoint import TreeHead, open_checkpoint
from agent_gate.evidence.note import VerifierKey

__all__ = ["LATEST", "SECRET_ENV", "post", "publish", "publish_all"]

LATEST = "latest.note"
SECRET_ENV = "AGENT_GATE_WITNESS_SECRET"
"""The HMAC secret an HTTP witness's POSTs are signed with."""
_POST_TRIES = 3
_POST_TIMEOUT = 10.0


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


def post(url: str, note: str, secret: bytes) -> None:
    """POST ``note`` to a witness endpoint; ``EvidenceError`` when no try got a 2xx."""
    import hashlib
    import hmac
    import time

    import httpx

    body = note.encode("utf-8")
    last = "no answer"
    with httpx.Client(timeout=_POST_TIMEOUT) as http:
        for attempt in range(_POST_TRIES):
            stamp = int(time.time())
            mac = hmac.new(secret, str(stamp).encode() + b"." + body, hashlib.sha256)
            try:
                got = http.post(url, content=body, headers={
                    "Content-Type": "text/plain; charset=utf-8",
                    "X-Agent-Gate-Event": "checkpoint",
                    "X-Agent-Gate-Timestamp": str(stamp),
                    "X-Agent-Gate-Signature": "sha256=" + mac.hexdigest()})
                if got.is_success:
                    return
                last = f"HTTP {got.status_code}"
            except httpx.HTTPError as error:
                last = type(error).__name__
            if attempt + 1 < _POST_TRIES:
                time.sleep(0.2 * 2 ** attempt)
    raise EvidenceError(f"the witness did not take it after {_POST_TRIES} tries ({last})")


def publish_all(sinks: Iterable[str], note: str, key: VerifierKey) -> tuple[list[str], list[str]]:
    """Hand ``note`` to every sink in turn: ``(published, failures)``, one failure never
    keeping the others from theirs."""
    done: list[str] = []
    failed: list[str] = []
    for sink in sinks:
        try:
            if sink.startswith(("http://", "https://")):
                secret = os.environ.get(SECRET_ENV)
                if not secret:
                    raise EvidenceError(f"${SECRET_ENV} is not set: an HTTP witness needs "
                                        "the secret its POSTs are signed with")
                post(sink, note, secret.encode())
                done.append(sink)
            else:
                done.append(str(publish(note, key, Path(sink))))
        except (EvidenceError, OSError) as error:
            failed.append(f"{sink}: {error}")
    return done, failed

"""``agent-gate serve`` takes the audit trail's checkpoints on a timer.

Why here: a checkpoint binds every task's hash chain into one root, and entries newer
than the newest checkpoint are protected by their own task's chain alone (README, "The
audit trail for many writers"). The ledger's writers never take one (it would put a
read of every task head on some call's path), so without a cron entry the window
stays open; a server an operator runs anyway closes it every ``checkpoint_every``.
A checkpoint the ledger refuses (a head a previous checkpoint bound is gone or moved
back) is logged as an error on ``agent_gate.serve`` and tried again at the next tick:
that is evidence of tampering, for a person to look at, not a reason to stop serving.
With ``checkpoint_signing_key`` each checkpoint is signed as a C2SP tlog-checkpoint and
handed to every ``checkpoint_publish`` witness (docs/guides/audit.md).
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy.exc import SQLAlchemyError

from agent_gate.errors import AuditCheckpointRefused
from agent_gate.evidence.note import SignerKey
from agent_gate.ledger import Ledger
from agent_gate.ledger.checkpoints import take
from agent_gate.serve.webhooks import hand_to_witnesses

__all__ = ["Checkpointer"]

log = logging.getLogger("agent_gate.serve")


class Checkpointer:
    """One thread: a checkpoint every ``every`` seconds until ``stop``."""

    def __init__(self, url: str, every: float, *, signer: SignerKey | None = None,
                 publish: tuple[str, ...] = ()) -> None:
        self.url = url
        self.every = every
        self.signer = signer
        """Signs each checkpoint as a C2SP tlog-checkpoint (``checkpoint_signing_key``)."""
        self.publish = publish
        """Witnesses each signed checkpoint is handed to (``checkpoint_publish``)."""
        self.unpublished = 0
        self.taken = 0
        """Checkpoints this server wrote (a tick when no head moved writes none)."""
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="agent-gate-checkpointer")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        with Ledger(self.url) as ledger:
            newest = 0
            while not self._stop.wait(self.every):
                try:
                    made = take(ledger.engine, signer=self.signer)
                except AuditCheckpointRefused as exc:
                    self.refused += 1
                    log.error("audit checkpoint refused: %s", exc)
                    continue
                except SQLAlchemyError as exc:  # a database away for a while: next tick
                    log.warning("audit checkpoint not taken: %s", type(exc).__name__)
                    continue
                fresh = made.id > newest
                if fresh:
                    newest = made.id
                    self.taken += 1
                    log.info("audit checkpoint %s (%s)", made.anchor, made.heads_text)
                self._hand_over(ledger, made.note if fresh else None)

    def _hand_over(self, ledger: Ledger, note: str | None) -> None:
        """Publish a new signed checkpoint (``note``; None: none new this tick). A file
        witness that fails is logged and served the newest at the next checkpoint (it
        may skip one, never go back); an HTTP witness is served from the outbox at every
        tick, so one that failed gets what it missed, in order, once it answers."""
        if not self.publish or self.signer is None:
            return
        _, failed = hand_to_witnesses(ledger.engine, self.publish, note, self.signer.verifier)
        for failure in failed:
            self.unpublished += 1
            log.error("audit checkpoint not published: %s", failure)

"""``agent-gate serve`` takes the audit trail's checkpoints on a timer.

Why here: a checkpoint binds every task's hash chain into one root, and entries newer
than the newest checkpoint are protected by their own task's chain alone (README, "The
audit trail for many writers"). The ledger's writers never take one (it would put a
read of every task head on some call's path), so without a cron entry the window
stays open; a server an operator runs anyway closes it every ``checkpoint_every``.
A checkpoint the ledger refuses (a head a previous checkpoint bound is gone or moved
back) is logged as an error on ``agent_gate.serve`` and tried again at the next tick:
that is evidence of tampering, for a person to look at, not a reason to stop serving.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy.exc import SQLAlchemyError

from agent_gate.errors import AuditCheckpointRefused
from agent_gate.ledger import Ledger
from agent_gate.ledger.checkpoints import take

__all__ = ["Checkpointer"]

log = logging.getLogger("agent_gate.serve")


class Checkpointer:
    """One thread: a checkpoint every ``every`` seconds until ``stop``."""

    def __init__(self, url: str, every: float) -> None:
        self.url = url
        self.every = every
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
                    made = take(ledger.engine)
                except AuditCheckpointRefused as exc:
                    self.refused += 1
                    log.error("audit checkpoint refused: %s", exc)
                    continue
                except SQLAlchemyError as exc:  # a database away for a while: next tick
                    log.warning("audit checkpoint not taken: %s", type(exc).__name__)
                    continue
                if made.id > newest:
                    newest = made.id
                    self.taken += 1
                    log.info("audit checkpoint %s (%d tasks)", made.anchor, made.tasks)

"""A sweeper that keeps running: a pass over the passed deadlines every few seconds.

Why a thread of its own, usable anywhere: a deadline must be acted on whether or not
anyone waits for the call, so ``agent-gate serve`` runs one, and so may any worker
(``with DeadlineSweeper(url, every=10): ...``) or a cron entry (``agent-gate
approvals sweep``, one pass). Several at once are safe: each deadline is acted on by
one compare-and-set (``ledger.sweep``), the others' attempts change nothing. A pass
that finds a full batch goes on at once; a database away for a while is logged and
tried again at the next tick, never a reason to stop.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from types import TracebackType

from sqlalchemy.exc import SQLAlchemyError

from agent_gate.ledger.store import Ledger

__all__ = ["DeadlineSweeper", "sweeper_name"]

log = logging.getLogger("agent_gate.ledger")


def sweeper_name() -> str:
    """Who this process sweeps as in the audit trail (``sweeper:HOST:PID``)."""
    return f"{socket.gethostname()[:100]}:{os.getpid()}"


class DeadlineSweeper:
    """One daemon thread: ``Ledger.sweep_deadlines`` every ``every`` seconds until ``stop``."""

    def __init__(self, url: str, every: float = 10.0, *, by: str | None = None,
                 batch: int = 100) -> None:
        if not every > 0:
            raise ValueError(f"a sweeper ticks every positive number of seconds, not {every}")
        self.url = url
        self.every = every
        self.by = by or sweeper_name()
        self.batch = batch
        self.denied = 0
        self.escalated = 0
        """Deadlines this sweeper acted on (another sweeper's are theirs)."""
        self.passes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="agent-gate-deadline-sweeper")

    def start(self) -> DeadlineSweeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def __enter__(self) -> DeadlineSweeper:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _run(self) -> None:
        with Ledger(self.url) as ledger:
            while not self._stop.is_set():
                try:
                    full = self._pass(ledger)
                except SQLAlchemyError as exc:  # a database away for a while: next tick
                    log.warning("deadline sweep not done: %s", type(exc).__name__)
                    full = False
                if not full and self._stop.wait(self.every):
                    return

    def _pass(self, ledger: Ledger) -> bool:
        report = ledger.sweep_deadlines(by=self.by, limit=self.batch)
        self.passes += 1
        self.denied += report.count("denied")
        self.escalated += report.count("escalated")
        for fired in report.fired:
            if fired.outcome in ("denied", "escalated"):
                log.info("deadline passed: call %r of task %r %s", fired.call_id,
                         fired.task_id, fired.outcome)
        return report.looked_at >= self.batch

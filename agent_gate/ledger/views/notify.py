"""Waiting for a person's answer to a call: PostgreSQL ``LISTEN``.

A person's answer (``approvals.insert_answer``: an approval or a denial) announces
itself (``approvals.announce``, a ``NOTIFY``) on the channel ``agent_gate_decision``
inside the transaction that records it,
so PostgreSQL delivers the notification when, and only if, that transaction commits:
a waiter woken by it always finds the answer. The payload names the task and the call
(ids only, never arguments); waiters re-read the row anyway, so a notification for
another ledger schema in the same database, or one that is lost, costs a re-read at
most, never a wrong answer.

SQLite has no such channel: ``Listener.open`` returns None there and waiters poll
(``agent_gate.gate.waiting``).
"""

from __future__ import annotations

from contextlib import closing
from typing import Any

from sqlalchemy import Engine

from agent_gate.ledger.approvals import CHANNEL, payload

__all__ = ["CHANNEL", "Listener", "payload"]


class Listener:
    """One pooled PostgreSQL connection listening on ``CHANNEL`` until closed.

    Opened *before* the waiter's first read of the call, so an answer committed
    between that read and the first wait is still delivered.
    """

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._conn = raw.driver_connection
        self._conn.autocommit = True
        self._conn.execute(f"LISTEN {CHANNEL}")

    @classmethod
    def open(cls, engine: Engine) -> Listener | None:
        """A listener on ``engine``'s database, or None where there is no ``LISTEN``."""
        if engine.dialect.name != "postgresql":
            return None
        return cls(engine.raw_connection())

    def wait(self, timeout: float, wanted: str | None = None) -> bool:
        """Block up to ``timeout`` seconds (0: only what has arrived); True once a
        notification arrived (one whose payload is ``wanted``, when given)."""
        with closing(self._conn.notifies(timeout=max(timeout, 0.0))) as notes:
            return any(wanted is None or note.payload == wanted for note in notes)

    def fileno(self) -> int:
        """The socket to watch for readability (an event loop's ``add_reader``)."""
        return int(self._conn.fileno())

    def close(self) -> None:
        try:
            self._conn.execute(f"UNLISTEN {CHANNEL}")
            self._conn.autocommit = False
        finally:
            self._raw.close()

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

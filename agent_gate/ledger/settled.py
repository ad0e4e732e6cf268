"""The id up to which the audit trail can no longer change (``settled``).

Its own module, under the trail's tree, the checkpoints and the operator pages that
all need the bound: in ``trail_tree`` it made ``agent-gate tasks`` (which reads pages)
import the chain's hashing, and in ``views.pages`` it closed an import circle.
"""

from __future__ import annotations

from sqlalchemy import Engine, func, select
from sqlalchemy.exc import OperationalError

from agent_gate.ledger.backend import begin_write
from agent_gate.ledger.models import AUDIT_EVENTS

__all__ = ["settled"]

_EVENTS = AUDIT_EVENTS

_SETTLE_WAIT = "250ms"
"""How long ``settled`` waits for inserting transactions before giving up for now."""


def settled(engine: Engine) -> int | None:
    """The id up to which the trail can no longer change: every entry with a smaller
    or equal id is committed or will never be. None: no bound needed (SQLite).

    Why: ids are given out at ``INSERT`` and, with one chain per task, transactions
    of different tasks on PostgreSQL commit in any order, so a reader going forward
    by id (``audit --follow``, webhooks) could pass an id whose entry commits a moment
    later, and never see it. An ``INSERT`` holds the table's ROW EXCLUSIVE lock from
    before its ids are drawn until its transaction ends, so taking SHARE on the table
    waits for every transaction that drew ids and lets none draw more until the
    highest id is read; the lock is held only for that read. When inserting
    transactions hold it longer than ``_SETTLE_WAIT``, the answer is 0 (nothing new
    is settled yet: the reader asks again at its next poll), so a reader never holds
    writers up longer than that. On SQLite every write transaction holds the database
    lock from its first statement to its commit: ids commit in order.
    """
    if engine.dialect.name != "postgresql":
        return None
    try:
        with begin_write(engine) as conn:
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{_SETTLE_WAIT}'")
            conn.exec_driver_sql(f"LOCK TABLE {_EVENTS.name} IN SHARE MODE")
            return int(conn.execute(select(func.coalesce(func.max(_EVENTS.c.id), 0))).scalar_one())
    except OperationalError as error:
        if getattr(error.orig, "sqlstate", None) == "55P03":  # lock_not_available
            return 0
        raise

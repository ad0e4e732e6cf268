"""The durable record of every tool call and its side-effect state.

``states`` is the state machine: the arrows, their column effects and which arrow
each observation calls for (no database code). ``store.Ledger`` is the facade that
applies them as committed compare-and-set updates: ``records`` (row and value
types, the one row converter), ``reads`` (queries), ``intake`` (a new call),
``flows`` (every transition over one compare-and-set builder), all written
against ``txn.Txn``, the one seam under them. ``reasons`` holds the stored reason
codes, ``sql`` the SQL that differs between SQLite and PostgreSQL. ``backend``
picks the storage path (plain Core, or the driver-level ``prepared`` /
kept-connection one; SQLAlchemy internals only in ``_sa_private``) and makes the
engines (``backend.dialect``); ``migrate`` brings a database to the schema through
Alembic only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_gate._lazy import exports

if TYPE_CHECKING:
    from agent_gate.errors import IllegalTransition, LedgerSchemaError
    from agent_gate.ledger.audit import AuditRecord
    from agent_gate.ledger.backend.dialect import (
        DEFAULT_URL,
        ENV_VAR,
        LedgerConfigError,
        LedgerMissing,
        LedgerReplaced,
        resolve_url,
    )
    from agent_gate.ledger.records import CallRecord, NewCall, TaskRecord, Transition
    from agent_gate.ledger.states import TERMINAL, TRANSITIONS, CallState, Event
    from agent_gate.ledger.store import Ledger
    from agent_gate.ledger.sweeper import DeadlineSweeper

# Resolved on first use: importing one module of the package (``ledger.views.pages`` for
# ``agent-gate tasks``, ``ledger.states`` for ``gate.desk``) runs this file, and an
# eager table here made every such import pay for the whole write path (flows,
# intake, audit, approvals, the trail verifier).
_LAZY: dict[str, str] = {
    "IllegalTransition": "agent_gate.errors",
    "LedgerSchemaError": "agent_gate.errors",
    "AuditRecord": "agent_gate.ledger.audit",
    "DEFAULT_URL": "agent_gate.ledger.backend.dialect",
    "ENV_VAR": "agent_gate.ledger.backend.dialect",
    "LedgerConfigError": "agent_gate.ledger.backend.dialect",
    "LedgerMissing": "agent_gate.ledger.backend.dialect",
    "LedgerReplaced": "agent_gate.ledger.backend.dialect",
    "resolve_url": "agent_gate.ledger.backend.dialect",
    "CallRecord": "agent_gate.ledger.records",
    "NewCall": "agent_gate.ledger.records",
    "TaskRecord": "agent_gate.ledger.records",
    "Transition": "agent_gate.ledger.records",
    "TERMINAL": "agent_gate.ledger.states",
    "TRANSITIONS": "agent_gate.ledger.states",
    "CallState": "agent_gate.ledger.states",
    "Event": "agent_gate.ledger.states",
    "Ledger": "agent_gate.ledger.store",
    "DeadlineSweeper": "agent_gate.ledger.sweeper",
}

__all__ = [
    "DEFAULT_URL",
    "ENV_VAR",
    "TERMINAL",
    "TRANSITIONS",
    "AuditRecord",
    "CallRecord",
    "CallState",
    "DeadlineSweeper",
    "Event",
    "IllegalTransition",
    "Ledger",
    "LedgerConfigError",
    "LedgerMissing",
    "LedgerReplaced",
    "LedgerSchemaError",
    "NewCall",
    "TaskRecord",
    "Transition",
    "resolve_url",
]

__getattr__, __dir__ = exports(__name__, _LAZY, globals())

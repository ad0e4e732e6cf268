"""The durable record of every tool call and its side-effect state.

``states`` is the state machine: the arrows, their column effects and which arrow
each observation calls for (no database code). ``store.Ledger`` is the facade that
applies them as committed compare-and-set updates: ``records`` (row and value
types, the one row converter), ``reads`` (queries), ``intake`` (a new call),
``flows`` (every transition over one compare-and-set builder), ``txn`` (what a
decision inside a transaction may read). ``reasons`` holds the stored reason codes.
``backend`` picks the storage path (plain Core, or the driver-level ``prepared`` /
kept-connection one; SQLAlchemy internals only in ``_sa_private``); ``dialect``
holds everything that differs between SQLite and PostgreSQL; ``migrate`` brings a
database to the schema through Alembic only.
"""

from __future__ import annotations

from agent_gate.errors import IllegalTransition, LedgerSchemaError
from agent_gate.ledger.audit import AuditRecord
from agent_gate.ledger.dialect import (
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

__all__ = [
    "DEFAULT_URL",
    "ENV_VAR",
    "TERMINAL",
    "TRANSITIONS",
    "AuditRecord",
    "CallRecord",
    "CallState",
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

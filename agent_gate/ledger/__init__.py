"""The durable record of every tool call and its side-effect state.

``states`` is the state machine (no database code); ``store.Ledger`` applies its
transitions as committed compare-and-set updates; ``dialect`` holds everything that
differs between SQLite and PostgreSQL; ``migrate`` brings a database to the schema
through Alembic only.
"""

from __future__ import annotations

from agent_gate.ledger.audit import AuditRecord
from agent_gate.ledger.dialect import (
    DEFAULT_URL,
    ENV_VAR,
    LedgerConfigError,
    LedgerMissing,
    LedgerReplaced,
    resolve_url,
)
from agent_gate.ledger.migrate import LedgerSchemaError
from agent_gate.ledger.states import TERMINAL, TRANSITIONS, CallState, Event, IllegalTransition
from agent_gate.ledger.store import CallRecord, Ledger, NewCall, TaskRecord, Transition

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

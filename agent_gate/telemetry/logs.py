"""The library's loggers, in a module of their own.

The ledger's migrations log under one of them, and opening a ledger (``agent-gate
tasks``) should not build the observer's classes to get a logger; the observer
(``base``) and the package both import them from here, so neither imports the other
back.
"""

from __future__ import annotations

import logging

__all__ = ["CALL_LOG", "MIGRATE_LOG", "STREAM_LOG"]

CALL_LOG = logging.getLogger("agent_gate.gate")
"""One record per transition of a gated call (INFO), per anomaly (WARNING)."""
STREAM_LOG = logging.getLogger("agent_gate.transport")
"""One record per stream's end (INFO), per reconnect and truncation (WARNING)."""
MIGRATE_LOG = logging.getLogger("agent_gate.ledger.migrate")
"""One record per schema upgrade (INFO); DEBUG on it lets Alembic's own lines through."""

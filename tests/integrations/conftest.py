"""What every agent-framework test shares: a gate on a real SQLite file under the
policy in ``policy.yaml``, and tools whose side effects are counted outside the ledger.
The MCP tests import their shared helpers (``mcp_harness``) from this directory."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ledger_templates import NewSqliteLedger  # tests/, on sys.path via tests/conftest.py

from agent_gate import Gate, ToolRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent))

POLICY = Path(__file__).with_name("policy.yaml")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def gate(db_path: Path, new_sqlite_ledger: NewSqliteLedger) -> Iterator[Gate]:
    """An ordinary gate with an empty registry: the adapter fills it."""
    with Gate(ToolRegistry(), new_sqlite_ledger(db_path), policy=POLICY) as g:
        yield g


Approvals = Callable[[], list[dict[str, object]]]
Bound = Callable[[str, dict[str, object]], bool]


@pytest.fixture
def approvals(db_path: Path) -> Approvals:
    return lambda: approvals_in(db_path)


@pytest.fixture
def bound(gate: Gate) -> Bound:
    return lambda task_id, approval: bound_to_the_call(gate, task_id, approval)


def approvals_in(db_path: Path) -> list[dict[str, object]]:
    """Every approval row, read from the file itself (not through the gate)."""
    with sqlite3.connect(db_path) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute(
            "SELECT call_id, verdict, decided_by, args_hash, policy_hash, "
            "consumed_at IS NOT NULL AS consumed FROM approvals ORDER BY id"
        ).fetchall()
    return [dict(r) for r in rows]


def bound_to_the_call(gate: Gate, task_id: str, approval: dict[str, object]) -> bool:
    """The approval names the call's argument hash and the gate's policy hash."""
    rec = gate.ledger.get(task_id, str(approval["call_id"]))
    assert rec is not None and gate.rules is not None
    return approval["args_hash"] == rec.args_hash and approval["policy_hash"] == gate.rules.hash

"""What the adapters' red teams read back after every race: the answers the ledger
holds and whether what ran is sound (each payment once, each large one approved)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_gate import CallState, Gate

Sent = list[tuple[str, int]]
"""The payments a test tool made, in order: (to, amount)."""
Approvals = Callable[[], list[dict[str, Any]]]


def states(gate: Gate, task: str) -> dict[str, CallState]:
    return {o.call_id: o.state for o in gate.calls(task)}


def recorded(gate: Gate) -> list[dict[str, Any]]:
    """Every answer the ledger holds, read through its own API (any backend), oldest
    first."""
    rows = []
    for rec in gate.ledger.calls():
        details = gate.ledger.call_details(rec.task_id, rec.call_id, max_shown=0)
        assert details is not None
        rows += [{"call_id": a.call_id, "verdict": a.verdict, "decided_by": a.decided_by,
                  "consumed": a.consumed, "id": a.id} for a in details.approvals]
    return [{k: v for k, v in row.items() if k != "id"}
            for row in sorted(rows, key=lambda row: row["id"])]


def assert_sound(gate: Gate, sent: Sent, approvals: Approvals, tasks: tuple[str, ...]) -> None:
    """No payment made twice; every call that ran ran once; every large one that ran
    (the policy sends those to a person) spent an approval given for it."""
    assert len(sent) == len(set(sent)), sent
    spent = {a["call_id"] for a in approvals() if a["verdict"] == "approved" and a["consumed"]}
    for task in tasks:
        for rec in gate.ledger.calls(task):
            assert rec.attempt <= 1, rec.call_id
            if rec.state is CallState.SUCCEEDED and rec.arguments["amount"] >= 100:
                assert rec.call_id in spent, rec.call_id
    assert gate.ledger.verify_audit().ok

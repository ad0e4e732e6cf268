"""The approval-deadline world the ledger's deadline tests and the command line's share:
one policy with a deadline that denies, one that escalates, two approve rules on one
tool (the earliest deadline counts) and a read that never waits; its tools; and a
bounded poll until the database's clock has passed the armed deadlines.

Why by the database's clock: the sweeper judges by it, and no test can move it, so
the deadlines are a second long and a test polls (bounded) instead of sleeping.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import text
from waiting import wait_until

from agent_gate import ToolRegistry
from agent_gate.ledger import Ledger

POLICY = """
version: 1
operators:
  fay: {roles: [finance]}
  sam: {roles: [support]}
tools:
  refund:
    effect: write
    idempotency: none
    rules:
      - id: refunds-wait
        effect: approve
        reason: A person reads every refund.
        approval: {timeout: 1s}
  wire:
    effect: write
    idempotency: none
    rules:
      - id: wires-wait
        effect: approve
        approval: {timeout: 1s, then: {escalate: finance}}
  slow:
    effect: write
    idempotency: none
    rules:
      - id: slow-wait
        effect: approve
        approval: {timeout: 30m}
      - id: slower-wait
        effect: approve
        approval: {timeout: 2h, then: {escalate: finance}}
  lookup:
    effect: read
    rules:
      - {id: reads, effect: allow}
"""
"""Line 21 holds ``wires-wait``'s escalation and line 28 ``slow-wait``'s timeout: the
command line's tests of a located load error point there."""

WRITES = ("refund", "wire", "slow")

_DB_NOW = {
    "sqlite": "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
    "postgresql": "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint",
}


def write_policy(directory: Path) -> Path:
    path = directory / "policy.yaml"
    path.write_text(POLICY, encoding="utf-8")
    return path


def _write(name: str, runs: list[str]) -> Callable[[str], dict[str, Any]]:
    def run(order: str) -> dict[str, Any]:
        runs.append(f"{name} {order}")
        return {"ok": True}

    return run


def deadline_tools(runs: list[str] | None = None) -> ToolRegistry:
    """The policy's tools; each write appends ``"<tool> <order>"`` to ``runs`` when it
    really runs (what a test checks to see nothing ran twice, or at all)."""
    tools = ToolRegistry()
    ran = runs if runs is not None else []
    for name in WRITES:
        tools.tool(name=name, effect="write", idempotency="none")(_write(name, ran))

    @tools.tool(effect="read")
    def lookup(order: str) -> dict[str, Any]:
        return {"order": order}

    return tools


def deadlines_passed(url: str, n: int) -> None:
    """Poll (bounded) until the database's clock has passed ``n`` armed deadlines: a
    sweep before that would find nothing to do; one that fired is no longer armed."""
    now = _DB_NOW["postgresql" if url.startswith("postgresql") else "sqlite"]

    def count() -> bool:
        with Ledger(url) as ledger, ledger.engine.connect() as conn:
            due = conn.execute(text("SELECT COUNT(*) FROM approval_deadlines WHERE "
                                    f"outcome = 'armed' AND due_ms <= {now}")).scalar_one()
        return int(due) >= n

    wait_until(count, timeout=30, what=f"{n} deadlines to pass by the database's clock")

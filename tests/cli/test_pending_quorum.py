"""``agent-gate pending --policy``: a quorum's progress ("1 of 2") as the inbox shows it,
the call kept listed after one approval; ``--operator NAME`` lists only what that
operator may answer, so no call escalated to a role they do not hold (issue 31)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from shared_fixtures import order_tools
from sqlalchemy import text
from waiting import wait_until

from agent_gate import CallState, Gate, Principal
from agent_gate.cli import main as cli
from agent_gate.ledger import Ledger
from agent_gate.ledger.views.operators import Operators

POLICY = """
version: 1
operators:
  fay: {roles: [finance]}
  gus: {roles: [finance]}
  sam: {roles: [support]}
tools:
  refund:
    effect: write
    idempotency: none
    rules:
      - id: two-for-a-refund
        effect: approve
        approval: {approvers: {min: 2, roles: [finance]}}
  wire:
    effect: write
    idempotency: none
    rules:
      - id: wires-wait
        effect: approve
        approval: {timeout: 1s, then: {escalate: finance}}
"""


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, terminal_width=250)


def listed(*args: str) -> list[dict[str, Any]]:
    got = run("pending", *args, "--json")
    assert got.exit_code == 0, got.output
    return [json.loads(line) for line in got.output.splitlines() if line.strip()]


@pytest.fixture
def waiting_calls(db_url: str, tmp_path: Path) -> tuple[str, str]:
    """Two refunds (one approved by fay: 1 of 2), a wire escalated to finance, and
    the operators fay and sam, who may both answer every tool."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    with Gate(order_tools("refund", "wire"), db_url, policy=str(policy)) as gate:
        for call_id, tool in (("r1", "refund"), ("r2", "refund"), ("w1", "wire")):
            out = gate.execute("t", {"call_id": call_id, "name": tool,
                                     "arguments": {"order": call_id}},
                               principal=Principal(id="agent"))
            assert out.state is CallState.AWAITING_APPROVAL
        gate.approve("r1", by="fay", task_id="t")
    with Ledger(db_url) as ledger:
        for name in ("fay", "sam"):
            Operators(ledger.engine).add(name, approve=["*"])
    now = ("(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint"
           if db_url.startswith("postgresql")
           else "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)")

    def passed() -> bool:
        with Ledger(db_url) as ledger, ledger.engine.connect() as conn:
            return bool(conn.execute(text(
                f"SELECT COUNT(*) FROM approval_deadlines WHERE due_ms <= {now}")).scalar_one())

    wait_until(passed, timeout=30, what="the wire's deadline to pass")
    swept = run("approvals", "sweep", "--db", db_url)
    assert "escalated to role finance" in swept.output, swept.output
    return db_url, str(policy)


def test_pending_with_the_policy_shows_a_quorums_progress(
        waiting_calls: tuple[str, str]) -> None:
    url, policy = waiting_calls
    # Without the policy the approved refund is left out (answered: nobody else needs to).
    assert [r["call_id"] for r in listed("--db", url)] == ["r2", "w1"]
    rows = listed("--db", url, "--policy", policy)
    assert [(r["call_id"], r["quorum"]) for r in rows] == [
        ("r1", "1 of 2"), ("r2", "0 of 2"), ("w1", None)]
    table = run("pending", "--db", url, "--policy", policy)
    assert table.exit_code == 0, table.output
    assert "two-for-a-refund (1 of 2)" in table.output
    assert "two-for-a-refund (0 of 2)" in table.output


def test_pending_for_an_operator_leaves_out_calls_escalated_to_a_role_they_lack(
        waiting_calls: tuple[str, str]) -> None:
    url, policy = waiting_calls
    mine = {name: [r["call_id"] for r in listed("--db", url, "--policy", policy,
                                                "--operator", name)]
            for name in ("fay", "sam")}
    assert mine == {"fay": ["r1", "r2", "w1"], "sam": ["r1", "r2"]}
    # Without the policy nobody holds a role: approve would refuse the wire, so it is
    # not listed for anyone.
    assert [r["call_id"] for r in listed("--db", url, "--operator", "fay")] == ["r2"]
    # What the listing promises, the answer keeps: sam's approval of the wire is refused.
    got = run("approve", "w1", "--task", "t", "--by", "sam", "--db", url,
              "--policy", policy)
    assert got.exit_code != 0 and "escalated to role 'finance'" in got.output
    more = run("pending", "--db", url, "--policy", policy, "--operator", "sam",
               "--limit", "2")
    assert more.exit_code == 0
    assert "more may follow" in more.output  # two fetched, one page: the wire may follow


def test_pending_for_an_operator_counts_its_limit_in_the_calls_it_shows(
        waiting_calls: tuple[str, str]) -> None:
    """The wire escalated to finance is the newest call: sam may not answer it, so the
    first call of his newest-first list is r2. Filtered after fetching, ``--limit 1``
    fetched the wire, dropped it and showed nothing."""
    url, policy = waiting_calls
    args = ("--db", url, "--policy", policy, "--operator", "sam", "--newest-first")
    assert [r["call_id"] for r in listed(*args, "--limit", "1")] == ["r2"]
    assert [r["call_id"] for r in listed(*args, "--limit", "2")] == ["r2", "r1"]
    table = run("pending", *args, "--limit", "1")
    assert table.exit_code == 0 and " r2 " in table.output, table.output
    assert "more may follow" in table.output

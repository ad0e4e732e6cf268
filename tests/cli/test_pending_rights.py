"""``agent-gate pending --operator NAME``: each state listed by its own right, the
calls awaiting approval by the operator's ``approve`` tools and the calls in doubt by
their ``resolve`` tools, also with ``--state all``; in the statement, so ``--limit``
counts only the calls they may answer. One list of both rights' tools for both states
listed the in-doubt calls of a tool they may only approve and the waiting calls of one
they may only resolve (and a ``*`` in either right listed every call)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from shared_fixtures import order_tools
from sqlalchemy import text

from agent_gate import CallState, Gate, Principal
from agent_gate.cli import main as cli
from agent_gate.ledger import Ledger
from agent_gate.ledger.views.operators import Operators

POLICY = """
version: 1
tools:
  refund:
    effect: write
    idempotency: none
    rules:
      - {id: refunds-wait, effect: approve}
  wire:
    effect: write
    idempotency: none
    rules:
      - {id: wires-wait, effect: approve}
"""
ORDER = ("refund-waits", "wire-waits", "refund-doubts", "wire-doubts")
"""The calls in the order they are recorded (their refs): one of each tool waiting,
then one of each in doubt."""


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, terminal_width=250)


def listed(*args: str) -> list[tuple[str, str]]:
    got = run("pending", *args, "--json")
    assert got.exit_code == 0, got.output
    rows: list[dict[str, Any]] = [json.loads(line) for line in got.output.splitlines()
                                  if line.strip()]
    return [(r["call_id"], r["state"]) for r in rows]


@pytest.fixture
def ledger_url(db_url: str, tmp_path: Path) -> str:
    """A refund and a wire awaiting approval, a refund and a wire in doubt; ann approves
    refunds and resolves wires, bo approves every tool and resolves wires."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    with Gate(order_tools("refund", "wire"), db_url, policy=str(policy)) as gate:
        for call_id in ORDER:
            out = gate.execute("t", {"call_id": call_id, "name": call_id.split("-")[0],
                                     "arguments": {"order": call_id}},
                               principal=Principal(id="agent"))
            assert out.state is CallState.AWAITING_APPROVAL
    with Ledger(db_url) as ledger:
        with ledger.engine.begin() as conn:  # as a gate that died mid-run leaves them
            conn.execute(text("UPDATE tool_calls SET state = 'in_doubt' "
                              "WHERE call_id IN ('refund-doubts', 'wire-doubts')"))
        ops = Operators(ledger.engine)
        ops.add("ann", approve=["refund"], resolve=["wire"])
        ops.add("bo", approve=["*"], resolve=["wire"])
    return db_url


def test_each_state_is_listed_by_its_own_right(ledger_url: str) -> None:
    mine = ("--db", ledger_url, "--operator", "ann")
    assert listed(*mine, "--state", "all") == [
        ("refund-waits", "awaiting_approval"), ("wire-doubts", "in_doubt")]
    assert listed(*mine) == [("refund-waits", "awaiting_approval")]
    assert listed(*mine, "--state", "in-doubt") == [("wire-doubts", "in_doubt")]
    # --limit counts the calls shown: the wire that waits and the refund in doubt
    # between them are not fetched and dropped, they are not read
    assert listed(*mine, "--state", "all", "--limit", "2") == [
        ("refund-waits", "awaiting_approval"), ("wire-doubts", "in_doubt")]
    assert listed(*mine, "--state", "all", "--newest-first", "--limit", "2") == [
        ("wire-doubts", "in_doubt"), ("refund-waits", "awaiting_approval")]
    first = listed(*mine, "--state", "all", "--limit", "1")
    assert first == [("refund-waits", "awaiting_approval")]
    with Ledger(ledger_url) as ledger:
        ref = ledger.get("t", "refund-waits").row_id  # type: ignore[union-attr]
    assert listed(*mine, "--state", "all", "--after", str(ref)) == [
        ("wire-doubts", "in_doubt")]
    # The table shows the same two calls.
    table = run("pending", *mine, "--state", "all", "--limit", "2")
    assert table.exit_code == 0, table.output
    assert "refund-waits" in table.output and "wire-doubts" in table.output
    assert "wire-waits" not in table.output and "refund-doubts" not in table.output
    assert "more may follow" in table.output


def test_every_tool_in_one_right_is_not_every_tool_in_the_other(ledger_url: str) -> None:
    """bo approves every tool but resolves only wires: the refund in doubt is not his."""
    assert listed("--db", ledger_url, "--operator", "bo", "--state", "all") == [
        ("refund-waits", "awaiting_approval"), ("wire-waits", "awaiting_approval"),
        ("wire-doubts", "in_doubt")]
    assert listed("--db", ledger_url, "--state", "all") == [
        ("refund-waits", "awaiting_approval"), ("wire-waits", "awaiting_approval"),
        ("refund-doubts", "in_doubt"), ("wire-doubts", "in_doubt")]

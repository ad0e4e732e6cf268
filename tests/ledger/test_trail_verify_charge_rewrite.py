"""A quota charge deleted or lowered in ``quota_charges`` is caught by ``audit verify``.

A task's usage of a limit is the sum of its calls' charges; a charge gone (or made
smaller) by a raw statement would let the task spend past its limit, and the rows of
``quota_charges`` are not hashed. The entry of the arrow that authorized the call
records what was charged (``charges`` in its detail, hashed with the entry), and
verify holds the stored charges to it. An approved call's charges are recorded the
same way, by its ``approve`` entry.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.calls import call

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.policy import Policy

from .test_trail_verify_state_rewrite import raw_sql, verify

POLICY = """\
version: 1
tools:
  spend:
    effect: write
    idempotency: none
    rules:
      - {id: big, effect: approve, when: [{arg: amount, number: {min: 100}}]}
      - {id: small, effect: allow, when: [{arg: amount, number: {max: 99}}]}
    limits:
      - {id: budget, sum: amount, max: 150}
"""


def tools(spent: list[int]) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(schema={"type": "object"}, effect="write", idempotency="none")
    def spend(amount: int) -> dict[str, Any]:
        spent.append(amount)
        return {"spent": amount}

    return registry


@pytest.mark.parametrize(("sql", "what"), [
    ("DELETE FROM quota_charges WHERE call_row_id = {row}", "that charge is gone"),
    ("UPDATE quota_charges SET amount = '1' WHERE call_row_id = {row}",
     "that charge now holds 1"),
], ids=["deleted", "lowered"])
def test_a_charge_rewritten_by_sql_fails_verify(db_url: str, sql: str, what: str) -> None:
    spent: list[int] = []
    with Gate(tools(spent), db_url, policy=Policy.from_text(POLICY)) as gate:
        assert gate.execute("t", call("c1", "spend", amount=40)).state is CallState.SUCCEEDED
        assert (
            gate.execute("t", call("c2", "spend", amount=100)).state
            is CallState.AWAITING_APPROVAL
        )
        gate.approve("c2", by="ops", task_id="t")
        (resumed,) = gate.resume("t")
        assert resumed.state is CallState.SUCCEEDED
        assert gate.ledger.usage("t") == {"spend/sum/amount": 140}
        row = gate.ledger.get("t", "c2").row_id  # charged by its approval
    assert spent == [40, 100]
    clean = verify(db_url)
    assert clean.exit_code == 0, clean.output

    raw_sql(db_url, sql.format(row=row))

    broken = verify(db_url, "--json")
    assert broken.exit_code == 1
    problem = json.loads(broken.output)["problem"]
    assert problem["kind"] == "charge_rewritten"
    assert "call 'c2' of task 't'" in problem["message"]
    assert "was charged 100 to 'spend/sum/amount'" in problem["message"]
    assert what in problem["message"]

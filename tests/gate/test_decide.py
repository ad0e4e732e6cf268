"""``Gate.decide``: a call recorded and decided, never run; ``execute`` runs it later.

An agent framework asks whether a call needs a person before it invokes the tool
(the OpenAI Agents SDK's ``needs_approval``); the answer must be the decision the
ledger keeps, with the quota it charges, and must not run anything.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from support.calls import call

from agent_gate import Gate, ToolRegistry
from agent_gate.ledger.states import CallState

POLICY = """
version: 1
tools:
  pay:
    effect: write
    idempotency: none
    rules:
      - {id: small, effect: allow, when: [{arg: amount, number: {max: 99}}]}
      - {id: large, effect: approve, when: [{arg: amount, number: {min: 100}}]}
      - {id: never-mallory, effect: deny, when: [{arg: to, equals: mallory}]}
    limits:
      - {id: two-per-task, max_calls: 2}
"""


def gate_with(tmp_path: Path, db_url: str, paid: list[tuple[str, int]]) -> Gate:
    tools = ToolRegistry()

    @tools.tool(
        schema={"type": "object", "properties": {"to": {"type": "string"},
                                                 "amount": {"type": "integer"}}},
        effect="write",
    )
    def pay(to: str, amount: int) -> str:
        paid.append((to, amount))
        return "paid"

    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    return Gate(tools, db_url, policy=policy)


def test_decide_records_the_decision_and_runs_nothing_until_execute(
    tmp_path: Path, db_url: str
) -> None:
    paid: list[tuple[str, int]] = []
    with gate_with(tmp_path, db_url, paid) as gate:
        assert gate.decide("t", call("a", "pay", to="bob", amount=10)).state is CallState.AUTHORIZED
        assert (
            gate.decide("t", call("b", "pay", to="carol", amount=500)).state
            is CallState.AWAITING_APPROVAL
        )
        denied = gate.decide("t", call("c", "pay", to="mallory", amount=5))
        assert (denied.state, denied.code) == (CallState.REJECTED, "policy_denied")
        assert paid == []
        # Seen again, a decided call keeps its decision (nothing charged twice).
        assert gate.decide("t", call("a", "pay", to="bob", amount=10)).state is CallState.AUTHORIZED
        assert gate.execute("t", call("a", "pay", to="bob", amount=10)).state is CallState.SUCCEEDED
        assert (
            asyncio.run(gate.adecide("t", call("a", "pay", to="bob", amount=10))).state
            is CallState.SUCCEEDED
        )
        assert gate.execute("t", call("a", "pay", to="bob", amount=10)).replayed
        assert paid == [("bob", 10)]
        assert gate.ledger.verify_audit().ok


def test_a_decided_call_counts_against_the_quota_once(tmp_path: Path, db_url: str) -> None:
    paid: list[tuple[str, int]] = []
    with gate_with(tmp_path, db_url, paid) as gate:
        for call_id in ("a", "b"):
            assert (
                gate.decide("t", call(call_id, "pay", to="bob", amount=1)).state
                is CallState.AUTHORIZED
            )
        for call_id in ("a", "b"):
            assert (
                gate.execute("t", call(call_id, "pay", to="bob", amount=1)).state
                is CallState.SUCCEEDED
            )
        third = gate.decide("t", call("c", "pay", to="bob", amount=1))
        assert third.state is CallState.REJECTED
        assert gate.execute("t", call("c", "pay", to="bob", amount=1)).state is CallState.REJECTED
        assert paid == [("bob", 1), ("bob", 1)]

"""Sequence rules: ``after``, ``not_after`` and ``prior:``, read from the task's earlier calls."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.cli import main
from agent_gate.errors import PolicyLoadError
from agent_gate.policy import Policy, TaskHistory, Verdict

POLICY = """\
version: 1
tools:
  verify_identity:
    redact: [order_id]             # sealed in the ledger: the decision unseals it
    rules: [{id: verify-ok, effect: allow}]
  export_data:
    rules: [{id: export-ok, effect: allow}]
  refund:
    after: [verify_identity]
    not_after: [export_data]
    rules:
      - id: refund-the-verified-order
        effect: allow
        when:
          - arg: order_id
            matches: 'ORD-[0-9]{6}'
          - prior: verify_identity.order_id
            absent: false
      - id: refund-only-the-verified-order
        effect: deny
        when:
          - prior: verify_identity.order_id
            absent: false
          - not:
              prior: verify_identity.order_id
              in: [ORD-000001, ORD-000002]
"""


@pytest.fixture
def policy() -> Policy:
    return Policy.from_text(POLICY, source="seq.yaml")


def decide(policy: Policy, args: dict[str, Any], history: TaskHistory | None) -> tuple[Any, ...]:
    decision = policy.evaluate("refund", args, history=history)
    return decision.effect, decision.rule_ids


def test_after_needs_a_succeeded_call(policy: Policy) -> None:
    args = {"order_id": "ORD-000001"}
    assert decide(policy, args, TaskHistory()) == (Verdict.DENY, ("agent-gate:after",))
    verified = TaskHistory(succeeded={"verify_identity": {"order_id": "ORD-000001"}})
    assert decide(policy, args, verified) == (Verdict.ALLOW, ("refund-the-verified-order",))


def test_not_after_refuses_once_the_other_tool_was_authorized(policy: Policy) -> None:
    history = TaskHistory(succeeded={"verify_identity": {"order_id": "ORD-000001"}},
                          authorized=frozenset({"export_data"}))
    assert decide(policy, {"order_id": "ORD-000001"}, history) == (
        Verdict.DENY, ("agent-gate:not-after",))


def test_prior_arguments_are_a_subject(policy: Policy) -> None:
    other = TaskHistory(succeeded={"verify_identity": {"order_id": "ORD-999999"}})
    assert decide(policy, {"order_id": "ORD-000001"}, other) == (
        Verdict.DENY, ("refund-only-the-verified-order",))


def test_no_history_denies_a_tool_with_sequence_rules(policy: Policy) -> None:
    assert decide(policy, {"order_id": "ORD-000001"}, None) == (
        Verdict.DENY, ("agent-gate:no-history",))
    assert policy.history_tools("refund") == {"verify_identity", "export_data"}
    assert policy.history_tools("export_data") == frozenset()
    assert policy.evaluate("export_data", {}).effect is Verdict.ALLOW


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (("after: [verify_identity]", "after: [verify_identiy]"), "tools.refund.after[0]"),
        (("prior: verify_identity.order_id\n            absent",
          "prior: verify_identiy.order_id\n            absent"),
         "tools.refund.rules[0].when[1].prior"),
        (("prior: verify_identity.order_id\n            absent",
          "prior: verify_identity\n            absent"), "tools.refund.rules[0].when[1].prior"),
    ],
)
def test_load_problems(change: tuple[str, str], where: str) -> None:
    with pytest.raises(PolicyLoadError) as info:
        Policy.from_text(POLICY.replace(*change), source="seq.yaml")
    assert info.value.problems[0].key == where


def test_through_a_gate_in_the_deciding_transaction(db_url: str, tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY, encoding="utf-8")
    ran: list[str] = []
    tools = ToolRegistry()
    schema = {"type": "object", "properties": {"order_id": {"type": "string"}}}

    @tools.tool(schema=schema, effect="read")
    def verify_identity(order_id: str) -> str:
        ran.append(f"verify {order_id}")
        return "ok"

    @tools.tool(schema={"type": "object"}, effect="read")
    def export_data() -> str:
        ran.append("export")
        return "ok"

    @tools.tool(schema=schema, effect="write")
    def refund(order_id: str) -> str:
        ran.append(f"refund {order_id}")
        return "ok"

    def call(gate: Gate, task: str, call_id: str, name: str, **args: Any) -> CallState:
        return gate.execute(task, {"call_id": call_id, "name": name, "arguments": args}).state

    with Gate(tools, db_url, policy=tmp_path / "policy.yaml", seal_key=os.urandom(32)) as gate:
        assert call(gate, "t1", "c1", "refund", order_id="ORD-000001") is CallState.REJECTED
        assert call(gate, "t1", "c2", "verify_identity", order_id="ORD-000001") is (
            CallState.SUCCEEDED)
        assert call(gate, "t1", "c3", "refund", order_id="ORD-000001") is CallState.SUCCEEDED
        # another task has verified another order: its refund of ours is refused
        call(gate, "t2", "c1", "verify_identity", order_id="ORD-424242")
        assert call(gate, "t2", "c2", "refund", order_id="ORD-000001") is CallState.REJECTED
        # after an export, no refund
        call(gate, "t1", "c4", "export_data")
        assert call(gate, "t1", "c5", "refund", order_id="ORD-000002") is CallState.REJECTED
        reasons = {c: getattr(gate.ledger.get("t1", c), "reason", None) for c in ("c1", "c5")}
    assert ran == ["verify ORD-000001", "refund ORD-000001", "verify ORD-424242", "export"]
    assert "agent-gate:after" not in str(reasons)  # reasons are sentences, ids in rule_ids
    assert "needs a succeeded call of 'verify_identity'" in (reasons["c1"] or "")
    assert "not allowed after a call of 'export_data'" in (reasons["c5"] or "")


def test_policy_test_cases_see_prior_calls(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY, encoding="utf-8")
    (tmp_path / "cases.yaml").write_text(
        "version: 1\ncases:\n"
        "  - name: verified first\n    tool: refund\n    args: {order_id: ORD-000002}\n"
        "    prior: [{tool: verify_identity, args: {order_id: ORD-000002}}]\n"
        "    expect: {decision: allow, rule_ids: [refund-the-verified-order]}\n"
        "  - name: not verified\n    tool: refund\n    args: {order_id: ORD-000002}\n"
        "    expect: {decision: deny, rule_ids: ['agent-gate:after']}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["policy", "test", str(tmp_path / "policy.yaml"),
                                       str(tmp_path / "cases.yaml")])
    assert result.exit_code == 0, result.output

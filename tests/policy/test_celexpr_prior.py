"""CEL's ``prior``: the arguments of the task's latest succeeded call of a tool, read
in the deciding transaction for exactly the tools the expression names."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.errors import PolicyLoadError
from agent_gate.policy import Policy, TaskHistory, Verdict

pytest.importorskip("cel_expr_python")

POLICY = """\
version: 1
tools:
  lookup_order:
    rules: [{id: lookups, effect: allow}]
  refund:
    rules:
      - id: refund-the-looked-up-order
        effect: allow
        when:
          - cel: 'has(prior.lookup_order) && prior.lookup_order.order_id == args.order_id'
"""


def test_prior_names_the_history_to_read_and_is_judged() -> None:
    policy = Policy.from_text(POLICY, source="p.yaml")
    assert policy.history_tools("refund") == {"lookup_order"}
    looked = TaskHistory(succeeded={"lookup_order": {"order_id": "ORD-1"}})
    assert policy.evaluate("refund", {"order_id": "ORD-1"}, history=looked).effect is Verdict.ALLOW
    assert policy.evaluate("refund", {"order_id": "ORD-2"}, history=looked).effect is Verdict.DENY
    assert policy.evaluate("refund", {"order_id": "ORD-1"},
                           history=TaskHistory()).effect is Verdict.DENY


@pytest.mark.parametrize(("cel", "message"), [
    ("'lookup_order' in prior", "must name its tool literally"),
    ("prior.lookup_ordr.order_id == args.order_id", "does not declare"),
])
def test_prior_that_cannot_be_read_is_a_load_problem(cel: str, message: str) -> None:
    text = POLICY.replace(
        "'has(prior.lookup_order) && prior.lookup_order.order_id == args.order_id'", repr(cel))
    with pytest.raises(PolicyLoadError) as info:
        Policy.from_text(text, source="p.yaml")
    problem = info.value.problems[0]
    assert problem.key == "tools.refund.rules[0].when[0].cel" and message in problem.message


def test_through_a_gate(db_url: str, tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(POLICY, encoding="utf-8")
    tools = ToolRegistry()
    schema = {"type": "object", "properties": {"order_id": {"type": "string"}}}

    @tools.tool(schema=schema, effect="read")
    def lookup_order(order_id: str) -> str:
        return "found"

    @tools.tool(schema=schema, effect="write")
    def refund(order_id: str) -> str:
        return "refunded"

    def call(call_id: str, tool: str, order: str) -> CallState:
        return gate.execute("t", {"call_id": call_id, "name": tool,
                                  "arguments": {"order_id": order}}).state

    with Gate(tools, db_url, policy=tmp_path / "p.yaml") as gate:
        assert call("r0", "refund", "ORD-1") is CallState.REJECTED  # nothing looked up
        assert call("l1", "lookup_order", "ORD-1") is CallState.SUCCEEDED
        assert call("r1", "refund", "ORD-2") is CallState.REJECTED  # another order
        assert call("r2", "refund", "ORD-1") is CallState.SUCCEEDED

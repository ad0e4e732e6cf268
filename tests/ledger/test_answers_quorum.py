"""Quorum (issue 32): ``approvers: {min: 2, roles: [...]}`` on an approve rule lets the
call run only once that many distinct permitted people approved it as it is; one
denial ends it (``deny: any``), or only as many denials as the quorum (``deny:
quorum``). Each answer is audited under its approver."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.cli import main as cli
from agent_gate.errors import ApprovalRefused, PolicyLoadError

POLICY = """
version: 1
operators:
  alice: {roles: [finance]}
  bob: {roles: [finance]}
  carol: {roles: [support]}
tools:
  pay:
    effect: write
    rules:
      - id: two-for-a-payment
        effect: approve
        approval: {approvers: {min: 2, distinct: true, roles: [finance], deny: quorum}}
  wire:
    effect: write
    rules:
      - id: two-for-a-wire
        effect: approve
        approval: {approvers: {min: 2}}
"""


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ToolRegistry, Counter[str], Path]:
    ran: Counter[str] = Counter()
    tools = ToolRegistry()

    def pay(amount: int) -> str:
        ran["pay"] += 1
        return "paid"

    def wire(amount: int) -> str:
        ran["wire"] += 1
        return "wired"

    tools.register(pay, effect="write")
    tools.register(wire, effect="write")
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    return tools, ran, policy


def call(g: Gate, call_id: str, tool: str = "pay") -> CallState:
    return g.execute("t", {"call_id": call_id, "name": tool,
                           "arguments": {"amount": 20000}}).state


def test_two_distinct_finance_approvers_make_the_quorum(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path]
) -> None:
    tools, ran, policy = setup
    with Gate(tools, db_url, policy=policy) as g:
        assert call(g, "p1") is CallState.AWAITING_APPROVAL
        g.approve("p1", by="alice", task_id="t")
        (waiting,) = g.resume("t")
        assert waiting.state is CallState.AWAITING_APPROVAL
        assert "1 of 2 approvals" in (waiting.reason or "")
        g.approve("p1", by="alice", task_id="t")  # the same person twice is one
        # no finance role: refused when given, as the inbox's offer says (test_inbox_approvers)
        with pytest.raises(ApprovalRefused, match="holds none of the roles the quorum counts"):
            g.approve("p1", by="carol", task_id="t")
        # and one recorded past the gate (straight into the ledger) does not count
        rec = g.ledger.get("t", "p1")
        assert rec is not None
        g.ledger.approve(rec, by="carol", reason=None, policy_hash=None, ttl_ms=None)
        (waiting,) = g.resume("t")
        assert waiting.state is CallState.AWAITING_APPROVAL, waiting.reason
        assert "1 of 2 approvals" in (waiting.reason or "")
        assert ran["pay"] == 0
        g.approve("p1", by="bob", task_id="t")
        (done,) = g.resume("t")
        assert done.state is CallState.SUCCEEDED
        approve = [e for e in g.ledger.audit("t") if e.event == "approve"]
        assert [sorted((e.detail or {})["approved_by"]) for e in approve] == [["alice", "bob"]]
        answers = g.ledger.answers(g.ledger.get("t", "p1"))
        assert {a.decided_by for a in answers if a.consumed} == {"alice", "bob"}
        assert {e.actor for e in g.ledger.audit("t") if e.event == "approval_granted"} == {
            "operator:alice", "operator:bob", "operator:carol"}
    assert ran["pay"] == 1


def test_deny_quorum_needs_as_many_denials_and_deny_any_one(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path]
) -> None:
    tools, ran, policy = setup
    with Gate(tools, db_url, policy=policy) as g:
        call(g, "p1")
        first = g.deny("p1", by="alice", task_id="t")
        assert first.state is CallState.AWAITING_APPROVAL
        assert g.deny("p1", by="alice", task_id="t").state is CallState.AWAITING_APPROVAL
        assert g.deny("p1", by="bob", task_id="t").state is CallState.REJECTED
        recorded = [e for e in g.ledger.audit("t") if e.event == "denial_recorded"]
        assert [e.actor for e in recorded] == ["operator:alice", "operator:alice"]
        call(g, "w1", "wire")
        assert g.deny("w1", by="carol", task_id="t").state is CallState.REJECTED
    assert ran == Counter()


def test_the_cli_deny_under_the_policy_keeps_a_quorum_call_waiting(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path]
) -> None:
    tools, _, policy = setup
    with Gate(tools, db_url, policy=policy) as g:
        call(g, "p1")
    out = CliRunner().invoke(cli, ["deny", "p1", "--by", "alice", "--policy", str(policy),
                                   "--db", db_url])
    assert out.exit_code == 0, out.output
    assert "still waits" in out.output
    out = CliRunner().invoke(cli, ["deny", "p1", "--by", "bob", "--policy", str(policy),
                                   "--db", db_url])
    assert out.exit_code == 0, out.output
    assert "rejected" in out.output


@pytest.mark.parametrize(("block", "message"), [
    ("{approvers: {min: 2}, grants: [{id: g, calls: 1}]}", "may not offer grants"),
    ("{approvers: {min: 2, distinct: false}}", "distinct: false"),
    ("{grants: [{id: g}]}", "needs 'for: DURATION' or 'calls: N'"),
    ("{grants: [{id: g, for: 0m}]}", "between 1 second and 366 days"),
    ("{grants: [{id: g, for_: 1h}]}", "for_"),  # the Python name is no second spelling
])
def test_an_approval_block_that_cannot_work_is_refused_at_load(
    tmp_path: Path, block: str, message: str
) -> None:
    from agent_gate.policy import Policy

    with pytest.raises(PolicyLoadError, match=message):
        Policy.from_text(f"""
version: 1
tools:
  pay:
    rules:
      - id: r
        effect: approve
        approval: {block}
""")


def test_an_approval_block_belongs_to_an_approve_rule() -> None:
    from agent_gate.policy import Policy

    with pytest.raises(PolicyLoadError, match="effect: approve"):
        Policy.from_text("""
version: 1
tools:
  pay:
    rules:
      - {id: r, effect: allow, approval: {approvers: {min: 2}}}
""")


def test_a_policy_without_the_block_keeps_its_hash() -> None:
    """Approvals already given stay bound: the hash is the one before the block existed."""
    from agent_gate.policy import Policy

    text = "version: 1\ntools:\n  pay:\n    rules:\n      - {id: r, effect: approve}\n"
    assert Policy.from_text(text).hash == (
        "sha256:c2ad1170ff0ce2f1a3efd3f8195464be74a2ce544d791610ecdcf806fd91864c")

"""Who may approve: a policy names approvers by role or id, the task's own
principal cannot approve its own call unless the policy says so, and every
refusal is audited. Before this, anyone who could reach the ledger approved
anything, including the agent's own principal."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.cli import main as cli
from agent_gate.gate import ApprovalRefused
from agent_gate.policy import Principal

POLICY = """
version: 1
operators:
  alice: {roles: [finance]}
  bob: {roles: [support]}
approvers:
  roles: [support, finance]
tools:
  refund:
    effect: write
    approvers: {roles: [finance], ids: [carol]}
    rules:
      - id: refunds-need-a-person
        effect: approve
  note:
    effect: write
    rules:
      - id: notes-need-a-person
        effect: approve
  memo:
    effect: write
    approvers: {self_approval: true}
    rules:
      - id: memos-need-a-person
        effect: approve
"""


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ToolRegistry, Counter[str], Path]:
    ran: Counter[str] = Counter()
    tools = ToolRegistry()
    for name in ("refund", "note", "memo"):
        def tool(name: str = name, **_: Any) -> str:
            ran[name] += 1
            return "done"

        tools.register(tool, name=name, schema={"type": "object"}, effect="write")
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    return tools, ran, policy


def gate(tools: ToolRegistry, url: str, policy: Path | None) -> Gate:
    return Gate(tools, url, policy=policy, principal=Principal(id="dave", roles={"support"}))


def ask(g: Gate, call_id: str, tool: str) -> None:
    out = g.execute("t", {"call_id": call_id, "name": tool, "arguments": {}})
    assert out.state is CallState.AWAITING_APPROVAL


def refusals(g: Gate) -> list[tuple[str | None, str]]:
    return [(e.call_id, e.actor or "") for e in g.ledger.audit("t")
            if e.event == "approval_refused"]


def test_only_named_roles_and_ids_approve_a_tool(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path]
) -> None:
    tools, ran, policy = setup
    with gate(tools, db_url, policy) as g:
        ask(g, "r1", "refund")
        with pytest.raises(ApprovalRefused, match="'bob' may not approve 'refund'"):
            g.approve("r1", by="bob", task_id="t")
        with pytest.raises(ApprovalRefused, match="may not approve"):
            g.approve("r1", by="mallory", task_id="t")
        assert refusals(g) == [("r1", "operator:bob"), ("r1", "operator:mallory")]
        assert g.resume("t")[0].state is CallState.AWAITING_APPROVAL
        assert ran["refund"] == 0
        g.approve("r1", by="alice", task_id="t")  # role finance
        assert g.resume("t")[0].state is CallState.SUCCEEDED
        ask(g, "r2", "refund")
        g.approve("r2", by="carol", task_id="t")  # named id
        assert g.resume("t")[0].state is CallState.SUCCEEDED
        # The file's default applies to tools without an entry of their own.
        ask(g, "n1", "note")
        g.approve("n1", by="bob", task_id="t")
        assert g.resume("t")[0].state is CallState.SUCCEEDED
        assert g.ledger.verify_audit().ok
    assert ran == Counter({"refund": 2, "note": 1})


def test_the_tasks_own_principal_cannot_approve_its_call(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path], tmp_path: Path
) -> None:
    tools, ran, policy = setup
    open_policy = tmp_path / "open.yaml"
    open_policy.write_text(
        "version: 1\ntools:\n  note:\n    rules:\n"
        "      - {id: notes-need-a-person, effect: approve}\n"
    )
    with gate(tools, db_url, open_policy) as g:
        ask(g, "n1", "note")
        # Without any approvers entry anyone may approve, but never the principal.
        with pytest.raises(ApprovalRefused, match="principal the task acts for"):
            g.approve("n1", by="dave", task_id="t")
        assert refusals(g) == [("n1", "operator:dave")]
        g.approve("n1", by="erin", task_id="t")
        assert g.resume("t")[0].state is CallState.SUCCEEDED
    with gate(tools, db_url, policy) as g:
        ask(g, "m1", "memo")  # self_approval: true for memos
        g.approve("m1", by="dave", task_id="t")
        assert g.resume("t")[0].state is CallState.SUCCEEDED
    assert ran == Counter({"note": 1, "memo": 1})


def test_an_approval_given_without_the_policy_is_checked_when_used(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path]
) -> None:
    """``agent-gate approve`` without ``--policy`` cannot check the approver; the gate
    that would use the approval does, leaves the call waiting, and audits it."""
    tools, ran, policy = setup
    with gate(tools, db_url, policy) as g:
        ask(g, "r1", "refund")
    result = CliRunner().invoke(cli, ["approve", "r1", "--task", "t", "--by", "bob",
                                      "--db", db_url])
    assert result.exit_code == 0, result.output
    with gate(tools, db_url, policy) as g:
        [waiting] = g.resume("t")
        assert waiting.state is CallState.AWAITING_APPROVAL
        assert "'bob' may not approve 'refund'" in (waiting.reason or "")
        [blocker] = g.blockers("t")
        assert blocker.needs == "approval" and "bob" in (blocker.reason or "")
        assert refusals(g)[-1][0] == "r1"
    # A permitted approver's answer is not shadowed by the refused one.
    result = CliRunner().invoke(cli, ["approve", "r1", "--task", "t", "--by", "alice",
                                      "--db", db_url])
    assert result.exit_code == 0, result.output
    with gate(tools, db_url, policy) as g:
        assert g.resume("t")[0].state is CallState.SUCCEEDED
    assert ran == Counter({"refund": 1})


def test_the_cli_refuses_with_the_reason_and_a_nonzero_exit(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path]
) -> None:
    tools, _, policy = setup
    with gate(tools, db_url, policy) as g:
        ask(g, "r1", "refund")
    result = CliRunner().invoke(cli, ["approve", "r1", "--task", "t", "--by", "bob",
                                      "--policy", str(policy), "--db", db_url])
    assert result.exit_code != 0
    assert "may not approve 'refund'" in result.output


def test_a_policy_without_approvers_keeps_its_hash() -> None:
    """Approvals already given are bound to the policy hash: adding the
    ``approvers``/``operators`` keys to the format must not change the hash of a file
    that does not use them, and using them must."""
    from agent_gate.policy import Policy

    base = "version: 1\ntools:\n  refund:\n    rules: [{id: a, effect: approve}]\n"
    spelled_out = base + "    approvers: null\noperators: {}\napprovers: null\n"
    used = base + "    approvers: {roles: [finance]}\noperators: {alice: {roles: [finance]}}\n"
    before = Policy.from_text(base, source="p.yaml").hash
    assert Policy.from_text(spelled_out, source="p.yaml").hash == before
    assert Policy.from_text(used, source="p.yaml").hash != before

"""Grants (issue 32): an approver picks one of the options an approve rule offers, and
the approval then covers later calls of the tool in the task, for a while or a number
of calls, within argument bounds; each covered call is audited with the grant's id,
a revoked or spent grant covers nothing, and another policy never honours it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.grants import POLICY, grant_tools, write_policy

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.cli import main as cli
from agent_gate.gate import ApprovalRefused
from agent_gate.ledger.reasons import ReasonCode


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ToolRegistry, Counter[str], Path]:
    ran: Counter[str] = Counter()
    return grant_tools(ran), ran, write_policy(tmp_path)


def mail(g: Gate, call_id: str, to: str, task: str = "t") -> Any:
    return g.execute(task, {"call_id": call_id, "name": "send_email", "arguments": {"to": to}})


def test_a_grant_covers_the_next_calls_within_its_bounds_and_count(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path]
) -> None:
    tools, ran, policy = setup
    with Gate(tools, db_url, policy=policy) as g:
        assert mail(g, "c1", "a@example.com").state is CallState.AWAITING_APPROVAL
        approval, new = g.approve("c1", by="alice", task_id="t", grant="two-more-in-domain")
        assert new
        assert [o.state for o in g.resume("t")] == [CallState.SUCCEEDED]
        # two more calls in the domain run without a person ...
        second = mail(g, "c2", "b@example.com")
        assert second.state is CallState.SUCCEEDED, second.reason
        # ... one outside the bounds waits, whatever the count says
        assert mail(g, "c3", "x@elsewhere.org").state is CallState.AWAITING_APPROVAL
        assert mail(g, "c4", "c@example.com").state is CallState.SUCCEEDED
        # the count is spent: the next one waits again
        assert mail(g, "c5", "d@example.com").state is CallState.AWAITING_APPROVAL
        # the same grant never covers another task
        assert mail(g, "o1", "a@example.com", task="other").state is (
            CallState.AWAITING_APPROVAL)
        (grant,) = g.ledger.grants(task_id="t")
        assert (grant.used_calls, grant.max_calls, grant.status) == (2, 2, "used up")
        assert grant.granted_by == "alice" and grant.approval_id == approval.id
        covered = [e for e in g.ledger.audit("t")
                   if e.event == "allow" and (e.detail or {}).get("grant_id") == grant.id]
        assert sorted(e.call_id for e in covered) == ["c2", "c4"]
        assert {(e.detail or {}).get("code") for e in covered} == {ReasonCode.GRANTED}
    assert ran == Counter({"a@example.com": 1, "b@example.com": 1, "c@example.com": 1})


def test_a_revoked_grant_covers_nothing_more_and_the_revocation_is_audited(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path]
) -> None:
    tools, ran, policy = setup
    with Gate(tools, db_url, policy=policy) as g:
        mail(g, "c1", "a@example.com")
        g.approve("c1", by="alice", task_id="t", grant="for-an-hour")
        g.resume("t")
        assert mail(g, "c2", "anyone@anywhere.org").state is CallState.SUCCEEDED
        (grant,) = g.ledger.grants(task_id="t", active=True)
        result = CliRunner().invoke(cli, ["grant", "revoke", str(grant.id), "--by", "bob",
                                          "--db", db_url])
        assert result.exit_code == 0, result.output
        assert "revoked" in result.output
        assert g.ledger.grants(task_id="t", active=True) == []
        assert mail(g, "c3", "a@example.com").state is CallState.AWAITING_APPROVAL
        revoked = [e for e in g.ledger.audit("t") if e.event == "grant_revoked"]
        assert [(e.actor, (e.detail or {})["grant_id"]) for e in revoked] == [
            ("operator:bob", grant.id)]
    assert sum(ran.values()) == 2


def test_a_grant_not_offered_is_refused_and_another_policy_never_honours_one(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path], tmp_path: Path
) -> None:
    tools, _, policy = setup
    with Gate(tools, db_url, policy=policy) as g:
        g.execute("t", {"call_id": "r1", "name": "refund", "arguments": {"amount": 5}})
        with pytest.raises(ApprovalRefused, match=r"not offered.*offered: none"):
            g.approve("r1", by="alice", task_id="t", grant="for-an-hour")
        mail(g, "c1", "a@example.com")
        with pytest.raises(ApprovalRefused, match="'nope' is not offered"):
            g.approve("c1", by="alice", task_id="t", grant="nope")
        g.approve("c1", by="alice", task_id="t", grant="for-an-hour")
        g.resume("t")
    changed = tmp_path / "changed.yaml"
    changed.write_text(POLICY.replace("for: 1h", "for: 2h"))
    with Gate(tools, db_url, policy=changed) as g2:
        assert mail(g2, "c2", "a@example.com").state is CallState.AWAITING_APPROVAL


def test_grant_list_shows_what_is_left_as_json(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path]
) -> None:
    import json

    tools, _, policy = setup
    with Gate(tools, db_url, policy=policy) as g:
        mail(g, "c1", "a@example.com")
    result = CliRunner().invoke(cli, ["approve", "c1", "--task", "t", "--by", "alice",
                                      "--policy", str(policy), "--grant",
                                      "two-more-in-domain", "--db", db_url])
    assert result.exit_code == 0, result.output
    assert "grant" in result.output and "two-more-in-domain" in result.output
    with Gate(tools, db_url, policy=policy) as g:
        g.resume("t")
        mail(g, "c2", "b@example.com")
    listed = CliRunner().invoke(cli, ["grant", "list", "--json", "--db", db_url])
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.output)
    assert (row["option"], row["used_calls"], row["max_calls"], row["status"]) == (
        "two-more-in-domain", 1, 2, "active")


def test_a_call_decided_under_a_grant_runs_when_claimed_later_unless_revoked(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path]
) -> None:
    """A framework decides first and runs later: the claim re-checks the call, the policy
    still asks for a person, and the grant that authorized it stands for them (once: it
    is not spent again); revoked in between, the call waits for a person after all."""
    tools, ran, policy = setup
    with Gate(tools, db_url, policy=policy) as g:
        mail(g, "c1", "a@example.com")
        g.approve("c1", by="alice", task_id="t", grant="for-an-hour")
        g.resume("t")
        for call_id in ("d1", "d2"):
            decided = g.decide("t", {"call_id": call_id, "name": "send_email",
                                     "arguments": {"to": f"{call_id}@example.com"}})
            assert decided.state is CallState.AUTHORIZED
        (grant,) = g.ledger.grants(task_id="t")
        assert grant.used_calls == 2
    with Gate(tools, db_url, policy=policy) as g2:  # another process: the claim re-checks
        ran_d1 = g2.execute("t", {"call_id": "d1", "name": "send_email",
                                  "arguments": {"to": "d1@example.com"}})
        assert ran_d1.state is CallState.SUCCEEDED
        g2.ledger.revoke_grant(grant.id, by="bob")
        held = g2.execute("t", {"call_id": "d2", "name": "send_email",
                                "arguments": {"to": "d2@example.com"}})
        assert held.state is CallState.AWAITING_APPROVAL
        (after,) = g2.ledger.grants(task_id="t")
        assert after.used_calls == 2
    assert ran == Counter({"a@example.com": 1, "d1@example.com": 1})


def test_approve_grant_without_the_policy_is_a_usage_error_and_changes_nothing(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path]
) -> None:
    tools, _, policy = setup
    with Gate(tools, db_url, policy=policy) as g:
        mail(g, "c1", "a@example.com")
    out = CliRunner().invoke(cli, ["approve", "c1", "--by", "alice", "--grant", "for-an-hour",
                                   "--db", db_url])
    assert out.exit_code == 2
    assert "--grant needs --policy" in out.output
    with Gate(tools, db_url, policy=policy) as g:
        assert g.ledger.grants() == []
        assert g.ledger.answers(g.ledger.get("t", "c1")) == []

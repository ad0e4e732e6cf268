"""Approval deadlines (issue 32): an approve rule's ``approval: {timeout, then}``,
armed by the ledger's clock, acted on by sweepers, once each, on SQLite and PostgreSQL.

The database's clock cannot be moved from a test, so the deadlines here are a second
long and the tests poll (bounded) until the database says they passed: no sleep, and
no worker's clock anywhere.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from support.deadlines import deadline_tools, deadlines_passed, write_policy
from waiting import wait_until

from agent_gate import CallState, Gate, Principal
from agent_gate.errors import ApprovalRefused
from agent_gate.gate import desk
from agent_gate.ledger import DeadlineSweeper, Ledger
from agent_gate.telemetry import observer


class World:
    def __init__(self, url: str, policy: Path) -> None:
        self.url = url
        self.policy = policy
        self.runs: list[str] = []

    def gate(self) -> Gate:
        return Gate(deadline_tools(self.runs), self.url, policy=str(self.policy))

    def send(self, *calls: tuple[str, str, str]) -> list[CallState]:
        with self.gate() as gate:
            return [gate.execute(task, {"call_id": cid, "name": tool,
                                        "arguments": {"order": cid}},
                                 principal=Principal(id="agent")).state
                    for task, cid, tool in calls]

    def sql(self, query: str) -> list[Any]:
        with Ledger(self.url) as ledger, ledger.engine.connect() as conn:
            return list(conn.execute(text(query)))

    def passed(self, n: int) -> None:
        deadlines_passed(self.url, n)

    def entries(self, event: str) -> list[Any]:
        with Ledger(self.url) as ledger:
            return [e for e in ledger.audit() if e.event == event]

    def record(self, task: str, call_id: str) -> Any:
        with Ledger(self.url) as ledger:
            return ledger.get(task, call_id)


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> World:
    return World(db_url, write_policy(tmp_path))


def test_a_deadline_that_passes_denies_the_call_once(world: World) -> None:
    assert world.send(("t", "r1", "refund"), ("t", "s1", "slow")) == [
        CallState.AWAITING_APPROVAL] * 2
    with Ledger(world.url) as ledger:
        armed = ledger.deadline(ledger.get("t", "r1"))
        assert armed is not None and armed.then == "deny" and armed.rule_id == "refunds-wait"
        assert 0 <= armed.remaining_seconds <= 1
        # the earliest of two approve rules' deadlines counts: 30m deny before 2h escalate
        slow = ledger.deadline(ledger.get("t", "s1"))
        assert slow is not None and (slow.then, slow.rule_id) == ("deny", "slow-wait")
    world.passed(1)
    with Ledger(world.url) as ledger:
        report = ledger.sweep_deadlines(by="one")
        assert [(f.call_id, f.outcome) for f in report.fired] == [("r1", "denied")]
        again = ledger.sweep_deadlines(by="two")
        assert again.fired == () and again.looked_at == 0
        rec = ledger.get("t", "r1")
        assert rec.state is CallState.REJECTED and rec.reason_code == "approval_timeout"
        assert ledger.get("t", "s1").state is CallState.AWAITING_APPROVAL  # 30m: not yet
        assert ledger.verify_audit().ok
    denials = world.entries("deny")
    assert [(e.call_id, e.actor, e.detail["code"]) for e in denials] == [
        ("r1", "sweeper:one", "approval_timeout")]
    # A resume never runs it, and a person can no longer approve it.
    with world.gate() as gate:
        assert gate.execute("t", {"call_id": "r1", "name": "refund",
                                  "arguments": {"order": "r1"}}).state is CallState.REJECTED
        with pytest.raises(Exception, match="not awaiting approval"):
            gate.approve("r1", by="fay", task_id="t")
    assert world.runs == []


def test_a_waiter_hears_the_deadline_deny(world: World) -> None:
    """``gate.wait`` (what an agent loop and the MCP proxy wait with) ends ``denied``
    when the deadline denies the call: woken by the sweep's commit (PostgreSQL
    ``NOTIFY``, SQLite polling), not left waiting or told it was never answered."""
    from agent_gate.gate import AnswerStatus

    world.send(("t", "r1", "refund"))
    heard: list[Any] = []
    with world.gate() as gate:
        waiting = gate.pending("t")[0]
        waiter = threading.Thread(target=lambda: heard.append(gate.wait(waiting, timeout=60)))
        waiter.start()
        world.passed(1)
        with Ledger(world.url) as ledger:
            assert ledger.sweep_deadlines(by="s").count("denied") == 1
        waiter.join(timeout=90)
        assert len(heard) == 1 and heard[0].status is AnswerStatus.DENIED
        assert heard[0].approval.decided_by == "sweeper:s"
        later = gate.wait(waiting, timeout=0)
        assert later.status is AnswerStatus.DENIED
    assert world.runs == []


def test_an_escalated_call_is_answered_only_by_the_role(world: World) -> None:
    world.send(("t", "w1", "wire"), ("t", "w2", "wire"))
    world.passed(2)
    with Ledger(world.url) as ledger:
        report = ledger.sweep_deadlines(by="s")
        assert sorted((f.call_id, f.outcome, f.role) for f in report.fired) == [
            ("w1", "escalated", "finance"), ("w2", "escalated", "finance")]
        assert ledger.sweep_deadlines(by="s").fired == ()  # escalated once
        found = ledger.deadline(ledger.get("t", "w1"))
        assert found is not None and found.escalated and found.summary() == \
            "escalated to finance"
        assert ledger.get("t", "w1").state is CallState.AWAITING_APPROVAL
    assert sorted(e.call_id for e in world.entries("approval_escalated")) == ["w1", "w2"]
    with world.gate() as gate:
        # sam is an operator, but not of finance: refused, audited; so is a denial
        with pytest.raises(ApprovalRefused, match="escalated to role 'finance'"):
            gate.approve("w1", by="sam", task_id="t")
        with pytest.raises(ApprovalRefused, match="escalated to role 'finance'"):
            gate.deny("w2", by="sam", task_id="t")
        gate.approve("w1", by="fay", task_id="t")
        gate.deny("w2", by="fay", task_id="t", reason="not this one")
        gate.resume("t")  # runs w1 once
    refused = world.entries("approval_refused")
    assert [(e.actor, e.detail["answer"]) for e in refused] == [
        ("operator:sam", "approve"), ("operator:sam", "deny")]
    assert world.runs == ["wire w1"]
    # Without a policy nobody's roles are known: the ledger alone refuses too.
    world.send(("u", "w3", "wire"))
    world.passed(1)
    with Ledger(world.url) as ledger:
        ledger.sweep_deadlines(by="s")
        with pytest.raises(ApprovalRefused, match="--policy FILE"):
            desk.approve(ledger, "w3", by="fay", task_id="u", reason=None, ttl=None)
        with pytest.raises(ApprovalRefused, match="--policy FILE"):
            desk.deny(ledger, "w3", by="fay", task_id="u", reason=None, observer=observer())


def test_an_approval_given_before_escalation_by_the_wrong_person_is_not_used(
    world: World,
) -> None:
    """The check when an approval is used, not only when it is given: an approval
    written straight to the ledger after the escalation still needs the role."""
    world.send(("t", "w1", "wire"))
    world.passed(1)
    with Ledger(world.url) as ledger:
        ledger.sweep_deadlines(by="s")
        ledger.approve(ledger.get("t", "w1"), by="sam", reason=None, policy_hash=None)
    with world.gate() as gate:
        gate.resume("t")
    assert world.runs == []
    assert world.record("t", "w1").state is CallState.AWAITING_APPROVAL


def test_a_call_approved_in_time_is_not_denied(world: World) -> None:
    world.send(("t", "r1", "refund"), ("t", "r2", "refund"))
    with world.gate() as gate:
        gate.approve("r1", by="fay", task_id="t")  # in time, not yet run
        gate.approve("r2", by="fay", task_id="t")
        gate.resume("t")  # runs both: r2's deadline is then moot
    world.send(("t", "r3", "refund"))
    with world.gate() as gate:
        gate.approve("r3", by="fay", task_id="t")  # in time; no gate ran it yet
    world.passed(3)
    with Ledger(world.url) as ledger:
        report = ledger.sweep_deadlines(by="s")
    assert sorted((f.call_id, f.outcome) for f in report.fired) == [
        ("r1", "moot"), ("r2", "moot"), ("r3", "answered")]
    with world.gate() as gate:
        gate.resume("t")
    assert sorted(world.runs) == ["refund r1", "refund r2", "refund r3"]
    assert world.entries("deny") == []


def test_a_call_decided_at_once_writes_no_deadline(world: World) -> None:
    assert world.send(("t", "l1", "lookup")) == [CallState.SUCCEEDED]
    assert world.sql("SELECT COUNT(*) FROM approval_deadlines")[0][0] == 0


@pytest.mark.slow
def test_sweepers_racing_never_deny_or_escalate_twice(world: World) -> None:
    n = 24
    world.send(*[("t" + str(i % 4), f"c{i}", "refund" if i % 2 else "wire") for i in range(n)])
    world.passed(n)
    racers = 6
    start = threading.Barrier(racers)
    reports: list[Any] = []
    lock = threading.Lock()

    def race(i: int) -> None:
        with Ledger(world.url) as ledger:
            start.wait()
            got = ledger.sweep_deadlines(by=f"r{i}", limit=n)
            with lock:
                reports.append(got)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(reports) == racers
    fired = [f for r in reports for f in r.fired]
    assert sorted(f.call_id for f in fired) == sorted(f"c{i}" for i in range(n))
    assert sum(r.count("denied") for r in reports) == n // 2
    assert sum(r.count("escalated") for r in reports) == n // 2
    assert len(world.entries("deny")) == n // 2
    assert len(world.entries("approval_escalated")) == n // 2
    rows = world.sql("SELECT outcome, COUNT(*) FROM approval_deadlines GROUP BY outcome")
    assert sorted((o, int(c)) for o, c in rows) == [("denied", n // 2), ("escalated", n // 2)]
    with Ledger(world.url) as ledger:
        assert ledger.verify_audit().ok


def test_a_sweeper_thread_acts_without_being_asked(world: World) -> None:
    world.send(("t", "r1", "refund"))
    with DeadlineSweeper(world.url, every=0.05, by="bg") as sweeper:
        wait_until(lambda: world.record("t", "r1").state is CallState.REJECTED, timeout=30,
                   what="the sweeper to deny r1")
    assert sweeper.denied == 1
    assert [e.actor for e in world.entries("deny")] == ["sweeper:bg"]

"""Human approval: durable, bound to arguments, policy hash and expiry, consumed once."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from shared_fixtures import EXAMPLE_POLICY, effect_lines
from support import WORKERS
from waiting import start_together

from agent_gate import CallState, Gate
from agent_gate.gate import ApprovalRefused, NotAwaitingApproval
from agent_gate.policy import Policy, Principal

pytestmark = pytest.mark.usefixtures("seal_key_env")


def refund(call_id: str, amount: float, order: str = "ORD-123456") -> dict[str, Any]:
    return {"call_id": call_id, "name": "refund", "arguments": {"order_id": order,
                                                                "amount": amount}}


def mail(call_id: str, to: str = "bob@gmail.com") -> dict[str, Any]:
    return {"call_id": call_id, "name": "send_email",
            "arguments": {"to": to, "subject": "Invoice", "body": "Dear Bob, the invoice."}}


def gate(tools: ModuleType, url: str, policy: Any = EXAMPLE_POLICY) -> Gate:
    return Gate(tools.tools, url, policy=policy, principal=Principal(id="u1", roles={"support"}))


def test_awaiting_approval_is_durable_shown_again_and_runs_once_after_approval(
    db_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    with gate(support_tools, db_url) as g:
        first = g.execute("t", mail("m1"))
        assert first.state is CallState.AWAITING_APPROVAL and first.ran is False
        assert "email-external-needs-approval" in (first.reason or "")
    # A restart: a new process-like gate sees the same request, not a second one.
    with gate(support_tools, db_url) as g:
        again = g.execute("t", mail("m1"))
        assert again.state is CallState.AWAITING_APPROVAL and again.replayed
        assert [c.call_id for c in g.ledger.calls("t")] == ["m1"]
        asks = [e for e in g.ledger.audit("t") if e.event == "require_approval"]
        assert len(asks) == 1 and asks[0].detail is not None
        assert asks[0].detail["rule_ids"] == ["email-external-needs-approval"]
        assert asks[0].detail["policy_hash"] == Policy.load(EXAMPLE_POLICY).hash
        assert [b.needs for b in g.blockers("t")] == ["approval"]

        approval, new = g.approve("m1", by="alice", reason="known customer")
        assert new and approval.policy_hash == Policy.load(EXAMPLE_POLICY).hash
        assert g.approve("m1", by="alice")[1] is False  # standing approval: not duplicated
        assert effect_lines(effects_file) == []  # approving runs nothing

        ran = g.execute("t", mail("m1"))
        assert ran.state is CallState.SUCCEEDED and not ran.replayed
        assert g.execute("t", mail("m1")).replayed
        assert g.resume("t") == []
        rec = g.ledger.get("t", "m1")
        assert rec is not None
        used = g.ledger.approval(rec)
        assert used is not None and used.consumed_attempt == 1
        events = [e.event for e in g.ledger.audit("t", call_id="m1")]
        assert events.index("approval_granted") < events.index("approve") < events.index("claim")
    assert effect_lines(effects_file) == ["t send_email bob@gmail.com Invoice"]


def test_arguments_edited_in_the_database_need_a_new_approval(
    sqlite_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    # Without redaction the row's arguments are what runs: an edit must not run.
    text = EXAMPLE_POLICY.read_text(encoding="utf-8")
    text = text.replace("redact: [card_last4]", "").replace(
        "redact:\n  - api_key\n  - password\n", "")
    unredacted = Policy.from_text(text, source="plain")
    assert not unredacted.redaction_rules("refund")
    with gate(support_tools, sqlite_url, policy=unredacted) as g:
        assert g.execute("t", refund("r1", 400)).state is CallState.AWAITING_APPROVAL
        g.approve("r1", by="alice")
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        db.execute("UPDATE tool_calls SET arguments = ? WHERE call_id = 'r1'",
                   ('{"amount":900,"order_id":"ORD-123456"}',))
    with gate(support_tools, sqlite_url, policy=unredacted) as g:
        waiting = g.resume("t")
        assert [o.state for o in waiting] == [CallState.AWAITING_APPROVAL]
        assert "the arguments changed since the approval" in (waiting[0].reason or "")
    assert effect_lines(effects_file) == []


def test_sealed_arguments_edited_in_the_database_never_run(
    sqlite_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    # refund redacts card_last4, so its arguments are sealed: the sealed blob is what
    # runs, bound to the row's task, call id and argument hash.
    with gate(support_tools, sqlite_url) as g:
        assert g.execute("t", refund("r1", 400)).state is CallState.AWAITING_APPROVAL
        assert g.execute("t", refund("r2", 500)).state is CallState.AWAITING_APPROVAL
        g.approve("r1", by="alice")
        g.approve("r2", by="alice")
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        # Swap the two sealed blobs: each is authentic, but not for that row.
        blobs = dict(db.execute("SELECT call_id, sealed_arguments FROM tool_calls"))
        for call_id, other in (("r1", "r2"), ("r2", "r1")):
            db.execute("UPDATE tool_calls SET sealed_arguments = ? WHERE call_id = ?",
                       (blobs[other], call_id))
    with gate(support_tools, sqlite_url) as g:
        waiting = g.resume("t")
        assert [o.state for o in waiting] == [CallState.AWAITING_APPROVAL] * 2
        assert all("cannot be opened" in (o.reason or "") for o in waiting)
    assert effect_lines(effects_file) == []


def test_changed_arguments_are_never_run_under_an_old_approval(
    db_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    with gate(support_tools, db_url) as g:
        g.execute("t", refund("r1", 400))
        g.approve("r1", by="alice")
        # The same call id with other arguments is a conflict, never a run.
        conflict = g.execute("t", refund("r1", 900))
        assert conflict.state is CallState.REJECTED and conflict.code == "conflict"
        # A regenerated call with edited arguments is a new call: it needs its own approval.
        regenerated = g.execute("t", refund("r2", 900))
        assert regenerated.state is CallState.AWAITING_APPROVAL
        assert g.execute("t", refund("r1", 400)).state is CallState.SUCCEEDED
        assert g.execute("t", refund("r2", 900)).state is CallState.AWAITING_APPROVAL
    assert effect_lines(effects_file) == ["t refund ORD-123456 400"]


def test_a_changed_policy_needs_a_new_approval(
    db_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    original = Policy.load(EXAMPLE_POLICY)
    text = EXAMPLE_POLICY.read_text(encoding="utf-8")
    edited = Policy.from_text(text.replace("max: 2000", "max: 3000"), source="edited.yaml")
    denying = Policy.from_text(
        text.replace("number: {gt: 100, max: 5000}", "number: {gt: 100, max: 5000}\n"
                     "      - id: no-refunds-today\n        effect: deny\n"),
        source="denying.yaml",
    )
    assert len({original.hash, edited.hash, denying.hash}) == 3
    with gate(support_tools, db_url) as g:
        g.execute("t", refund("r1", 400))
        g.approve("r1", by="alice")
    with gate(support_tools, db_url, policy=edited) as g:
        waiting = g.resume("t")
        assert [o.state for o in waiting] == [CallState.AWAITING_APPROVAL]
        assert "a changed policy needs a new approval" in (waiting[0].reason or "")
        assert original.hash in (waiting[0].reason or "")
    with gate(support_tools, db_url, policy=denying) as g:
        with pytest.raises(ApprovalRefused, match="denies call 'r1'"):
            g.approve("r1", by="alice")
        # The refusal is in the trail, as every refused answer is: who, and under which
        # policy the call was asked for and refused.
        refused = [e for e in g.ledger.audit("t") if e.event == "approval_refused"]
        assert [(e.actor, e.detail["policy_hash"], e.detail["asked_by"])  # type: ignore[index]
                for e in refused] == [("operator:alice", denying.hash, original.hash)]
    with gate(support_tools, db_url, policy=edited) as g:
        approval, new = g.approve("r1", by="bob")
        assert new and approval.policy_hash == edited.hash
        assert [o.state for o in g.resume("t")] == [CallState.SUCCEEDED]
    with gate(support_tools, db_url) as g:  # the original policy finds nothing left to do
        assert g.resume("t") == []
    assert effect_lines(effects_file) == ["t refund ORD-123456 400"]


def test_an_expired_approval_is_refused(
    db_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    with gate(support_tools, db_url) as g:
        g.execute("t", refund("r1", 400))
        g.approve("r1", by="alice", ttl=0.2)
        time.sleep(0.4)  # the clock must pass the expiry: the passing time is what is tested
        waiting = g.resume("t")
        assert [o.state for o in waiting] == [CallState.AWAITING_APPROVAL]
        assert "expired" in (waiting[0].reason or "")
        assert effect_lines(effects_file) == []
        assert g.approve("r1", by="alice", ttl=60)[1]
        assert [o.state for o in g.resume("t")] == [CallState.SUCCEEDED]
    assert effect_lines(effects_file) == ["t refund ORD-123456 400"]


def test_a_denied_call_is_rejected_and_never_runs(
    db_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    with gate(support_tools, db_url) as g:
        g.execute("t", refund("r1", 400))
        denied = g.deny("r1", by="carol", reason="duplicate order")
        assert denied.state is CallState.REJECTED
        assert denied.reason == "denied by carol: duplicate order"
        with pytest.raises(NotAwaitingApproval, match="'r1' of task 't' is rejected"):
            g.approve("r1", by="alice")
        assert g.resume("t") == []
        assert g.execute("t", refund("r1", 400)).state is CallState.REJECTED
    assert effect_lines(effects_file) == []


def test_a_quota_spent_while_waiting_rejects_the_approved_call(
    db_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    # refund-total-per-task: at most 2000 per task; re-checked when the approval is used.
    with gate(support_tools, db_url) as g:
        assert g.execute("t", refund("a", 1000)).state is CallState.AWAITING_APPROVAL
        assert g.execute("t", refund("b", 1000)).state is CallState.AWAITING_APPROVAL
        assert g.execute("t", refund("c", 100)).state is CallState.SUCCEEDED
        g.approve("a", by="alice")
        g.approve("b", by="alice")
        by_call = {o.call_id: o for o in g.resume("t")}
        assert by_call["a"].state is CallState.SUCCEEDED
        assert by_call["b"].state is CallState.REJECTED
        assert "refund-total-per-task" in (by_call["b"].reason or "")
        assert g.ledger.usage("t")["refund/sum/amount"] == 1100
    assert sorted(effect_lines(effects_file)) == ["t refund ORD-123456 100",
                                                  "t refund ORD-123456 1000"]


WORKER = WORKERS / "resume_worker.py"


@pytest.mark.slow
def test_two_concurrent_resumes_use_an_approval_once(
    db_url: str, support_tools: ModuleType, effects_file: Path, tmp_path: Path
) -> None:
    import json
    import subprocess
    import sys
    from collections import Counter

    tasks = [f"task-{i}" for i in range(4)]
    with gate(support_tools, db_url) as g:
        for task in tasks:
            assert g.execute(task, refund("big", 500)).state is CallState.AWAITING_APPROVAL
            g.approve("big", by="alice", task_id=task)
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), db_url, str(EXAMPLE_POLICY), str(go), *tasks],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(2)
    ]
    start_together(go, procs)  # both processes are up and waiting
    outcomes = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outcomes += [json.loads(line) for line in out.splitlines()]
    assert Counter(effect_lines(effects_file)) == Counter(
        {f"{t} refund ORD-123456 500": 1 for t in tasks}
    )
    ran = [o for o in outcomes if not o["replayed"]]
    assert sorted(o["task"] for o in ran) == tasks  # one process ran each task's call
    assert all(o["state"] == "succeeded" for o in ran)
    # The other process saw it running or finished, never ran it.
    assert {o["state"] for o in outcomes if o["replayed"]} <= {"succeeded", "executing"}
    with gate(support_tools, db_url) as g:
        for task in tasks:
            rec = g.ledger.get(task, "big")
            assert rec is not None and rec.state is CallState.SUCCEEDED and rec.attempt == 1
            approval = g.ledger.approval(rec)
            assert approval is not None and approval.consumed_attempt == 1
        assert g.ledger.verify_audit().ok

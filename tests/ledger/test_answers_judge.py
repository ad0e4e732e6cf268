"""One judge of "may a person answer this call", for approve, edit and deny alike.

Issue 31: approve and edit asked ``answers.waiting_call`` (the row under its task's
lock, still ``awaiting_approval``), deny asked its own two questions (the record it
was handed said ``awaiting_approval``, and the row had not moved since). So a call
that still waited but whose row had moved on (another approver edited it) was
approved and refused a denial, and one another person had already ended was refused
in two wordings. Each case below answers one stale record both ways and expects the
answers to agree. The approval's lifetime is judged once too (``answers.lifetime_ms``):
a plain approval and an edited one refuse the same ``ttl`` with the same error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from agent_gate import CallState, Gate, GateUsageError, ToolRegistry
from agent_gate.errors import NotAwaitingApproval
from agent_gate.ledger import Ledger
from agent_gate.ledger.records import CallRecord
from agent_gate.policy import Policy

POLICY = """
version: 1
tools:
  send_email:
    effect: write
    rules:
      - id: mail-needs-a-person
        effect: approve
        approval:
          editable: [body]
"""

CALL = {"call_id": "c1", "name": "send_email",
        "arguments": {"to": "ana@customer.example", "body": "Dear cus"}}


@pytest.fixture
def gate(db_url: str, tmp_path: Path) -> Iterator[Gate]:
    registry = ToolRegistry()

    @registry.tool(effect="write")
    def send_email(to: str, body: str) -> dict[str, Any]:
        return {"sent": True}

    with Gate(registry, db_url, policy=Policy.from_text(POLICY)) as g:
        yield g


def stale(gate: Gate) -> CallRecord:
    """The call as a person read it, waiting, before anything below happened."""
    assert gate.execute("t", CALL).state is CallState.AWAITING_APPROVAL
    (rec,) = gate.ledger.find("c1", "t")
    return rec


def now(gate: Gate) -> CallRecord:
    (rec,) = gate.ledger.find("c1", "t")
    return rec


def edited_by_another(gate: Gate) -> None:
    gate.approve("c1", by="alice", task_id="t", edit={"body": "Dear customer"})


def approval_expired(gate: Gate) -> None:
    gate.approve("c1", by="alice", task_id="t")
    with gate.ledger.engine.begin() as conn:
        conn.execute(text("UPDATE approvals SET expires_ms = expires_ms - :day"),
                     {"day": 2 * 86_400_000})


def denied_by_another(gate: Gate) -> None:
    gate.deny("c1", by="carol", task_id="t")


ANSWERS: dict[str, Callable[[Ledger, CallRecord], object]] = {
    "approve": lambda ledger, rec: ledger.approve(rec, by="bob"),
    "deny": lambda ledger, rec: ledger.deny(rec, by="bob"),
}


@pytest.mark.parametrize("answer", sorted(ANSWERS))
@pytest.mark.parametrize("meanwhile", [edited_by_another, approval_expired],
                         ids=["edited by another approver", "its approval expired"])
def test_a_call_that_still_waits_is_answered_whichever_the_answer(
    gate: Gate, answer: str, meanwhile: Callable[[Gate], None]
) -> None:
    seen = stale(gate)
    meanwhile(gate)
    moved = now(gate)
    assert moved.state is CallState.AWAITING_APPROVAL  # it still waits for a person
    ANSWERS[answer](gate.ledger, seen)
    after = now(gate)
    if answer == "deny":
        assert after.state is CallState.REJECTED
    else:
        last = gate.ledger.approval(after)
        assert after.state is CallState.AWAITING_APPROVAL
        assert last is not None and last.decided_by == "bob"
        assert last.args_hash == moved.args_hash  # the call as it stands, not as read
    assert gate.ledger.verify_audit().ok


@pytest.mark.parametrize("answer", sorted(ANSWERS))
def test_a_call_another_person_ended_is_refused_in_one_wording(gate: Gate, answer: str) -> None:
    seen = stale(gate)
    denied_by_another(gate)
    with pytest.raises(NotAwaitingApproval) as refused:
        ANSWERS[answer](gate.ledger, seen)
    assert str(refused.value) == "call 'c1' of task 't' is rejected, not awaiting approval"
    assert [a.decided_by for a in gate.ledger.answers(now(gate))] == ["carol"]


@pytest.mark.parametrize("edit", [None, {"body": "Dear customer"}], ids=["plain", "edited"])
@pytest.mark.parametrize("ttl", [0, float("nan"), True])
def test_an_approval_lifetime_is_refused_alike_with_or_without_an_edit(
    gate: Gate, edit: dict[str, Any] | None, ttl: Any
) -> None:
    seen = stale(gate)
    with pytest.raises(GateUsageError, match=r"^ttl: expected"):
        gate.approve("c1", by="bob", task_id="t", ttl=ttl, edit=edit)
    assert now(gate).args_hash == seen.args_hash and gate.ledger.answers(seen) == []


def test_the_ledger_judges_milliseconds_it_is_given_directly(gate: Gate) -> None:
    seen = stale(gate)
    with pytest.raises(GateUsageError, match=r"^ttl: expected a positive"):
        gate.ledger.approve(seen, by="bob", ttl_ms=0)
    assert gate.ledger.answers(seen) == []

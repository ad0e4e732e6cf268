"""An answer carries the hash of the arguments the person was shown (``args_hash=``).

The ledger approves, denies or resolves only while the call's arguments still hash to
it, compared inside the answer's own write transaction; otherwise ``AnswerMismatch``,
nothing answered, and an ``answer_refused`` entry (both hashes, no argument) stays in
the trail. Without the keyword the Python API answers as it always did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from agent_gate import AnswerMismatch, CallState, Gate, OutcomeUnknown, ToolRegistry
from agent_gate.ledger import Ledger

POLICY = """
version: 1
tools:
  send_email:
    effect: write
    idempotency: none
    rules:
      - {id: mail-needs-a-person, effect: approve, reason: A person reads every mail.}
  charge_card:
    effect: write
    idempotency: none
    rules:
      - {id: charges, effect: allow}
"""


def tools(runs: list[str]) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(effect="write", idempotency="none")
    def send_email(to: str, body: str) -> dict[str, Any]:
        runs.append(f"send_email {to}")
        return {"queued": True}

    @registry.tool(effect="write", idempotency="none")
    def charge_card(order: str) -> dict[str, Any]:
        runs.append(f"charge_card {order}")
        raise OutcomeUnknown("the processor timed out")

    return registry


@pytest.fixture
def gate(db_url: str, tmp_path: Path) -> Any:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    runs: list[str] = []
    with Gate(tools(runs), db_url, policy=str(policy)) as g:
        g.runs = runs  # type: ignore[attr-defined]
        yield g


def mail(call_id: str, to: str = "ana@example.org") -> dict[str, Any]:
    return {"call_id": call_id, "name": "send_email",
            "arguments": {"to": to, "body": "Dear Ana"}}


def shown(g: Gate, task: str, call_id: str) -> str:
    """The hash a person reads beside the arguments (``call show``, the inbox)."""
    details = g.ledger.call_details(task, call_id)
    assert details is not None
    return str(details.to_dict()["args_hash"])


def refusals(ledger: Ledger, task: str) -> list[Any]:
    return [e for e in ledger.audit(task) if e.event == "answer_refused"]


def rewrite_arguments(ledger: Ledger, task: str, call_id: str, to: str) -> None:
    """What "the arguments changed" means below the gate: the row's arguments and hash
    rewritten in the database, as only someone outside agent-gate can."""
    with ledger.engine.begin() as conn:
        conn.execute(
            text("UPDATE tool_calls SET arguments = :a, args_hash = :h "
                 "WHERE task_id = :t AND call_id = :c"),
            {"a": f'{{"body":"Dear Ana","to":"{to}"}}', "h": "f" * 64, "t": task, "c": call_id})


def test_the_shown_hash_approves_another_is_refused_and_audited(gate: Gate) -> None:
    assert gate.execute("t", mail("m1")).state is CallState.AWAITING_APPROVAL
    seen = shown(gate, "t", "m1")
    with pytest.raises(AnswerMismatch, match="read the call again") as refused:
        gate.approve("m1", by="bob", task_id="t", args_hash="0" * 64)
    assert "ana@example.org" not in str(refused.value)
    assert gate.ledger.approval(gate.ledger.get("t", "m1")) is None  # nothing approved
    (entry,) = refusals(gate.ledger, "t")
    assert (entry.actor, entry.call_id, entry.from_state, entry.to_state) == \
        ("operator:bob", "m1", "awaiting_approval", "awaiting_approval")
    assert entry.detail == {"answer": "approve", "expected_args_hash": "0" * 64,
                            "actual_args_hash": seen}
    approval, new = gate.approve("m1", by="bob", task_id="t", args_hash=seen)
    assert new and approval.args_hash == seen
    assert gate.execute("t", mail("m1")).state is CallState.SUCCEEDED
    assert gate.runs == ["send_email ana@example.org"]  # type: ignore[attr-defined]
    assert gate.ledger.verify_audit().ok


def test_arguments_rewritten_after_the_page_was_read_are_not_approved(gate: Gate) -> None:
    gate.execute("t", mail("m1"))
    seen = shown(gate, "t", "m1")
    rewrite_arguments(gate.ledger, "t", "m1", "mallory@evil.example")
    with pytest.raises(AnswerMismatch):
        gate.approve("m1", by="bob", task_id="t", args_hash=seen)
    with pytest.raises(AnswerMismatch):
        gate.deny("m1", by="bob", task_id="t", args_hash=seen)
    rec = gate.ledger.get("t", "m1")
    assert rec is not None and rec.state is CallState.AWAITING_APPROVAL
    assert gate.ledger.approval(rec) is None
    assert [e.detail["answer"] for e in refusals(gate.ledger, "t")] == ["approve", "deny"]
    assert gate.runs == []  # type: ignore[attr-defined]


def test_a_denial_needs_the_shown_hash_too(gate: Gate) -> None:
    gate.execute("t", mail("m1"))
    with pytest.raises(AnswerMismatch):
        gate.deny("m1", by="bob", task_id="t", args_hash="0" * 64)
    assert gate.ledger.get("t", "m1").state is CallState.AWAITING_APPROVAL  # type: ignore[union-attr]
    out = gate.deny("m1", by="bob", task_id="t", args_hash=shown(gate, "t", "m1"))
    assert out.state is CallState.REJECTED
    answers = [e.event for e in gate.ledger.audit("t") if e.actor == "operator:bob"]
    assert answers == ["answer_refused", "deny"]
    assert gate.ledger.verify_audit().ok


def test_resolving_needs_the_shown_hash(gate: Gate) -> None:
    charge = {"call_id": "c1", "name": "charge_card", "arguments": {"order": "o-7"}}
    assert gate.execute("t", charge).state is CallState.IN_DOUBT
    with pytest.raises(AnswerMismatch):
        gate.resolve("c1", as_="succeeded", task_id="t", by="carol", args_hash="0" * 64)
    assert gate.ledger.get("t", "c1").state is CallState.IN_DOUBT  # type: ignore[union-attr]
    (entry,) = refusals(gate.ledger, "t")
    assert (entry.actor, entry.detail["answer"]) == ("operator:carol", "resolve")
    out = gate.resolve("c1", as_="not-applied", task_id="t", by="carol",
                       args_hash=shown(gate, "t", "c1"))
    assert out.state is CallState.AUTHORIZED
    assert gate.ledger.verify_audit().ok


def test_without_a_hash_the_python_api_answers_as_before(gate: Gate) -> None:
    gate.execute("t", mail("m1"))
    gate.execute("t", mail("m2", to="zoe@example.org"))
    assert gate.approve("m1", by="bob", task_id="t")[1] is True
    assert gate.deny("m2", by="bob", task_id="t").state is CallState.REJECTED
    assert refusals(gate.ledger, "t") == []

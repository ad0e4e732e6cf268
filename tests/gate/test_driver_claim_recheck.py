"""A claim re-checks what it claims.

A call left ``authorized`` by a worker that died, or by a gate running an older,
laxer policy, used to be run by the next resume without re-evaluating the policy
or checking that the stored arguments still hash to ``args_hash``. The claim now
re-evaluates under the claiming gate's policy and verifies the hash, and moves the
call to ``rejected`` (or ``awaiting_approval``), audited, when either fails.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.ledger import Event, NewCall
from agent_gate.ledger.canonical import arguments_hash
from agent_gate.ledger.records import Ruling

LAX = """
version: 1
tools:
  transfer:
    effect: write
    rules:
      - id: transfer-anything
        effect: allow
"""

STRICT = """
version: 1
tools:
  transfer:
    effect: write
    rules:
      - id: transfer-small
        effect: allow
        when:
          - arg: amount
            number: {max: 100}
      - id: transfer-large-needs-approval
        effect: approve
        when:
          - arg: amount
            number: {gt: 100, max: 1000}
      - id: transfer-huge-denied
        effect: deny
        when:
          - arg: amount
            number: {gt: 1000}
    limits:
      - id: one-transfer-per-task
        max_calls: 1
"""

SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "number"}, "to": {"type": "string"}},
    "required": ["amount", "to"],
}


@pytest.fixture
def tools_and_runs() -> tuple[ToolRegistry, list[dict[str, Any]]]:
    runs: list[dict[str, Any]] = []
    tools = ToolRegistry()

    @tools.tool(schema=SCHEMA, effect="write")
    def transfer(amount: float, to: str) -> str:
        runs.append({"amount": amount, "to": to})
        return "sent"

    return tools, runs


def policy(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(body)
    return path


def left_authorized(
    gate: Gate, call_id: str, arguments: dict[str, Any], charges: dict[str, Decimal] | None = None
) -> None:
    """What a worker that died between its decision and its claim leaves behind:
    the call recorded and authorized (and charged) under the policy it ran."""
    rec, _ = gate.ledger.record(
        NewCall(task_id="t", call_id=call_id, idem_key=f"call:{call_id}", tool="transfer",
                effect="write", idempotency="none", args_hash=arguments_hash(arguments),
                arguments=arguments),
        provider=None, actor="dead-worker",
    )
    tr, _ = gate.ledger.authorize(
        rec,
        lambda _conn, _cur: Ruling(Event.ALLOW, "allowed", "allowed by an older policy",
                                   charges=charges or {}),
        actor="dead-worker",
    )
    assert tr.record.state is CallState.AUTHORIZED


def test_a_call_a_laxer_policy_authorized_is_denied_by_the_claiming_policy(
    db_url: str, tmp_path: Path, tools_and_runs: tuple[ToolRegistry, list[Any]]
) -> None:
    tools, runs = tools_and_runs
    with Gate(tools, db_url, policy=policy(tmp_path, "lax", LAX)) as lax:
        left_authorized(lax, "c1", {"amount": 5000, "to": "mallory"})
    with Gate(tools, db_url, policy=policy(tmp_path, "strict", STRICT)) as strict:
        [out] = strict.resume("t")
        assert (out.state, out.code) == (CallState.REJECTED, "policy_denied")
        assert "when claimed" in (out.reason or "")
        trail = [(a.event, a.from_state, a.to_state) for a in strict.ledger.audit("t")]
        assert ("reject", "authorized", "rejected") in trail
        assert strict.ledger.verify_audit().ok
        # Seen again (a replayed stream): the stored rejection, never a run.
        again = strict.execute(
            "t", {"call_id": "c1", "name": "transfer",
                  "arguments": {"amount": 5000, "to": "mallory"}})
        assert again.state is CallState.REJECTED and again.replayed
    assert runs == []


def test_a_call_the_claiming_policy_sends_to_a_person_waits_then_runs_once(
    db_url: str, tmp_path: Path, tools_and_runs: tuple[ToolRegistry, list[Any]]
) -> None:
    tools, runs = tools_and_runs
    with Gate(tools, db_url, policy=policy(tmp_path, "lax", LAX)) as lax:
        left_authorized(lax, "c1", {"amount": 500, "to": "bob"})
    with Gate(tools, db_url, policy=policy(tmp_path, "strict", STRICT)) as strict:
        [out] = strict.resume("t")
        assert (out.state, out.code) == (CallState.AWAITING_APPROVAL, "awaiting_approval")
        assert runs == []
        strict.approve("c1", by="ops", task_id="t")
        [ran] = strict.resume("t")
        assert ran.state is CallState.SUCCEEDED
        assert strict.resume("t") == []
    assert runs == [{"amount": 500, "to": "bob"}]


def test_a_call_still_allowed_runs_and_is_not_counted_against_itself(
    db_url: str, tmp_path: Path, tools_and_runs: tuple[ToolRegistry, list[Any]]
) -> None:
    """The call was charged when it was authorized; re-judging it must not see its
    own charge as a second transfer (max_calls: 1)."""
    tools, runs = tools_and_runs
    strict_file = policy(tmp_path, "strict", STRICT)
    with Gate(tools, db_url, policy=strict_file) as strict:
        left_authorized(strict, "c1", {"amount": 50, "to": "bob"},
                        charges={"transfer/calls": Decimal(1)})
    with Gate(tools, db_url, policy=strict_file) as strict:
        [out] = strict.resume("t")
        assert out.state is CallState.SUCCEEDED
        # A second transfer in the task is over the limit, as before.
        second = strict.execute(
            "t", {"call_id": "c2", "name": "transfer", "arguments": {"amount": 1, "to": "x"}})
        assert second.state is not CallState.SUCCEEDED
    assert runs == [{"amount": 50, "to": "bob"}]


def raw_update(db_url: str, sql: str, **params: Any) -> None:
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text(sql), params)
    finally:
        engine.dispose()


@pytest.mark.parametrize("with_policy", [True, False])
def test_arguments_edited_after_the_decision_are_refused_at_the_claim(
    db_url: str, tmp_path: Path, tools_and_runs: tuple[ToolRegistry, list[Any]],
    with_policy: bool,
) -> None:
    tools, runs = tools_and_runs
    file = policy(tmp_path, "lax", LAX) if with_policy else None
    with Gate(tools, db_url, policy=file) as gate:
        left_authorized(gate, "c1", {"amount": 5, "to": "bob"})
    raw_update(
        db_url, "UPDATE tool_calls SET arguments = :args WHERE call_id = 'c1'",
        args='{"amount": 5, "to": "mallory"}',
    )
    with Gate(tools, db_url, policy=file) as gate:
        [out] = gate.resume("t")
        assert (out.state, out.code) == (CallState.REJECTED, "arguments_changed")
        events = [a.event for a in gate.ledger.audit("t") if a.call_id == "c1"]
        assert events[-1] == "reject"
    assert runs == []


def test_the_gate_that_decided_a_call_claims_it_without_a_second_look(
    db_url: str, tmp_path: Path, tools_and_runs: tuple[ToolRegistry, list[Any]]
) -> None:
    """The common path stays one decision: record+decide, claim, outcome."""
    tools, runs = tools_and_runs
    with Gate(tools, db_url, policy=policy(tmp_path, "strict", STRICT)) as gate:
        out = gate.execute(
            "t", {"call_id": "c1", "name": "transfer", "arguments": {"amount": 5, "to": "b"}})
        assert out.state is CallState.SUCCEEDED
        events = [a.event for a in gate.ledger.audit("t") if a.call_id == "c1"]
    assert events == ["received", "allow", "claim", "succeed"]
    assert Counter(r["to"] for r in runs) == Counter({"b": 1})

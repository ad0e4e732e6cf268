"""Edit then approve (issue 32), through ``Gate.approve(..., edit=...)``, on every
backend: an approver changes the fields the policy marks ``editable``, the edited call
is a new version (schema, policy, new hash, the old one kept), runs once with the new
arguments, and the agent is told the arguments it ran with."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.errors import AnswerMismatch, NotAwaitingApproval
from agent_gate.policy import Policy
from agent_gate.policy.edits import EditRefused

POLICY = """
version: 1
tools:
  send_email:
    effect: write
    redact: [secret]
    rules:
      - id: internal-mail
        effect: allow
        when:
          - arg: to
            matches: '^[a-z]+@corp\\.example$'
      - id: external-mail-needs-a-person
        effect: approve
        when:
          - arg: to
            matches: '^[a-z]+@customer\\.example$'
        approval:
          editable: [subject, body, secret]
      - id: never-to-rivals
        effect: deny
        when:
          - arg: body
            matches: '.*rival.*'
"""

SCHEMA = {
    "type": "object",
    "properties": {
        "to": {"type": "string"},
        "subject": {"type": "string", "maxLength": 40},
        "body": {"type": "string"},
        "secret": {"type": "string"},
    },
    "required": ["to", "subject", "body"],
    "additionalProperties": False,
}

CALL = {"call_id": "c1", "name": "send_email",
        "arguments": {"to": "ana@customer.example", "subject": "Hello", "body": "Dear cus",
                      "secret": "s3cr3t-original"}}


@pytest.fixture
def sent() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def gate(db_url: str, sent: list[dict[str, Any]], tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    monkeypatch.setenv("AGENT_GATE_SEAL_KEY", "ab" * 32)
    registry = ToolRegistry()

    @registry.tool(schema=SCHEMA, effect="write")
    def send_email(**arguments: Any) -> dict[str, Any]:
        sent.append(arguments)
        return {"sent": True}

    with Gate(registry, db_url, policy=Policy.from_text(POLICY)) as g:
        yield g


def waiting(gate: Gate) -> str:
    outcome = gate.execute("t", CALL)
    assert outcome.state is CallState.AWAITING_APPROVAL
    rec = gate.ledger.find("c1", "t")[0]
    return rec.args_hash


def test_an_edited_call_runs_once_with_the_new_arguments(
    gate: Gate, sent: list[dict[str, Any]]
) -> None:
    shown = waiting(gate)
    approval, new = gate.approve("c1", by="olga", task_id="t", args_hash=shown,
                                 edit={"body": "Dear customer, thanks.", "subject": "Hi"})
    assert new and approval.args_hash != shown
    rec = gate.ledger.find("c1", "t")[0]
    assert rec.state is CallState.AWAITING_APPROVAL
    assert rec.args_hash == approval.args_hash
    assert rec.edited == ("body", "subject")

    outcome = gate.execute("t", CALL)  # the agent's own call seen again: not a conflict
    assert outcome.state is CallState.SUCCEEDED
    assert sent == [{"to": "ana@customer.example", "subject": "Hi",
                     "body": "Dear customer, thanks.", "secret": "s3cr3t-original"}]
    assert outcome.edited == ("body", "subject")
    told = json.loads(outcome.tool_output())
    assert told["result"] == {"sent": True}
    assert told["edited"]["fields"] == ["body", "subject"]
    assert told["edited"]["arguments"]["body"] == "Dear customer, thanks."
    # the sealed field reaches the model as its stand-in, never in clear
    assert "s3cr3t" not in outcome.tool_output()

    again = gate.execute("t", CALL)  # executed at most once
    assert again.state is CallState.SUCCEEDED and len(sent) == 1


def test_the_old_version_and_who_edited_are_kept_never_a_sealed_value(gate: Gate) -> None:
    shown = waiting(gate)
    gate.approve("c1", by="olga", task_id="t", args_hash=shown,
                 edit={"secret": "s3cr3t-edited", "body": "Dear customer"})
    details = gate.ledger.call_details("t", "c1")
    assert details is not None
    [edit] = details.edits
    assert edit.edited_by == "olga"
    assert edit.fields == ("secret", "body")
    assert edit.old_args_hash == shown and edit.new_args_hash == details.call.args_hash
    assert edit.old_arguments is not None and edit.old_arguments["body"] == "Dear cus"
    entries = [e for e in details.history if e.event == "edit"]
    assert len(entries) == 1 and entries[0].actor == "operator:olga"
    assert entries[0].detail["fields"] == ["secret", "body"]
    assert entries[0].detail["old_args_hash"] == shown
    everything = json.dumps(details.to_dict())
    assert "s3cr3t" not in everything
    assert gate.ledger.verify_audit().ok


def test_a_field_not_editable_is_refused_by_name_and_nothing_changes(gate: Gate) -> None:
    shown = waiting(gate)
    with pytest.raises(EditRefused) as caught:
        gate.approve("c1", by="olga", task_id="t", args_hash=shown,
                     edit={"to": "mallory@evil.example"})
    assert caught.value.field == "to"
    assert "'to'" in str(caught.value) and "mallory" not in str(caught.value)
    rec = gate.ledger.find("c1", "t")[0]
    assert rec.args_hash == shown and rec.edited == ()
    assert gate.ledger.call_details("t", "c1").approvals == ()  # type: ignore[union-attr]


def test_an_edit_the_schema_refuses_is_refused(gate: Gate) -> None:
    shown = waiting(gate)
    with pytest.raises(EditRefused, match="schema"):
        gate.approve("c1", by="olga", task_id="t", args_hash=shown,
                     edit={"subject": "x" * 41})
    assert gate.ledger.find("c1", "t")[0].args_hash == shown


def test_an_edit_the_policy_denies_is_refused_and_audited(gate: Gate) -> None:
    shown = waiting(gate)
    with pytest.raises(EditRefused, match="never-to-rivals"):
        gate.approve("c1", by="olga", task_id="t", args_hash=shown,
                     edit={"body": "buy from our rival"})
    details = gate.ledger.call_details("t", "c1")
    assert details is not None and details.call.args_hash == shown
    refused = [e for e in details.history if e.event == "edit_refused"]
    assert refused and refused[0].detail["fields"] == ["body"]
    assert "buy from" not in json.dumps(refused[0].detail)


def test_an_edit_for_arguments_not_shown_is_a_mismatch(gate: Gate) -> None:
    waiting(gate)
    with pytest.raises(AnswerMismatch):
        gate.approve("c1", by="olga", task_id="t", args_hash="0" * 64,
                     edit={"body": "Dear customer"})
    assert gate.ledger.find("c1", "t")[0].edited == ()


def test_a_second_editor_who_saw_the_first_version_is_refused(gate: Gate) -> None:
    shown = waiting(gate)
    gate.approve("c1", by="olga", task_id="t", args_hash=shown, edit={"body": "One"})
    with pytest.raises(AnswerMismatch):
        gate.approve("c1", by="piet", task_id="t", args_hash=shown, edit={"body": "Two"})
    current = gate.ledger.find("c1", "t")[0]
    approval, _ = gate.approve("c1", by="piet", task_id="t", args_hash=current.args_hash,
                               edit={"body": "Two"})
    rec = gate.ledger.find("c1", "t")[0]
    assert rec.edited == ("body",) and approval.args_hash == rec.args_hash
    assert len(gate.ledger.edits(rec)) == 2


def test_an_edit_of_a_call_that_does_not_wait_is_refused(gate: Gate) -> None:
    outcome = gate.execute("t", {**CALL, "call_id": "c2",
                                 "arguments": {**CALL["arguments"], "to": "bo@corp.example"}})
    assert outcome.state is CallState.SUCCEEDED
    with pytest.raises(NotAwaitingApproval):
        gate.approve("c2", by="olga", task_id="t", edit={"body": "x"})


def test_an_edit_that_changes_nothing_is_a_plain_approval(gate: Gate) -> None:
    shown = waiting(gate)
    approval, _ = gate.approve("c1", by="olga", task_id="t", args_hash=shown,
                               edit={"body": "Dear cus"})
    assert approval.args_hash == shown
    assert gate.ledger.find("c1", "t")[0].edited == ()


def test_rules_without_editable_let_nothing_change(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_GATE_SEAL_KEY", "ab" * 32)
    registry = ToolRegistry()

    @registry.tool(schema=SCHEMA, effect="write")
    def send_email(**arguments: Any) -> None:
        raise AssertionError("not run in this test")

    plain = POLICY.replace("        approval:\n          editable: [subject, body, secret]\n", "")
    assert "editable" not in plain
    with Gate(registry, db_url, policy=Policy.from_text(plain)) as g:
        shown = waiting(g)
        with pytest.raises(EditRefused, match="editable: none") as caught:
            g.approve("c1", by="olga", task_id="t", args_hash=shown, edit={"body": "x"})
        assert caught.value.field == "body"


def test_approval_belongs_to_an_approve_rule() -> None:
    from agent_gate.errors import PolicyLoadError

    with pytest.raises(PolicyLoadError, match="approval"):
        Policy.from_text(POLICY.replace("effect: deny\n", "effect: deny\n"
                                        "        approval: {editable: [body]}\n"))

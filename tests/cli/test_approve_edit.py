"""`agent-gate approve --set FIELD=JSON`: an approver edits the fields the policy marks
editable (policies/example.yaml: a mail's subject and body, never its recipient), the
edit checked against the tool's schema and the policy, and `resume` runs the call once
with the edited arguments."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner, Result
from shared_fixtures import EXAMPLE_POLICY

from agent_gate import Gate
from agent_gate.cli import main as cli
from agent_gate.ledger import Ledger
from agent_gate.policy import Principal

pytestmark = pytest.mark.usefixtures("seal_key_env")

BODY = "Dear Bob, the secret invoice text."


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def ledger_url(db_url: str, support_tools: ModuleType, effects_file: Path) -> str:
    with Gate(support_tools.tools, db_url, policy=EXAMPLE_POLICY,
              principal=Principal(id="u1", roles={"support"})) as gate:
        gate.execute("support-1", {"call_id": "m1", "name": "send_email", "arguments": {
            "to": "bob@gmail.com", "subject": "Invoice", "body": BODY}})
    return db_url


def edit_args(url: str, *sets: str) -> list[str]:
    out = ["approve", "m1", "--task", "support-1", "--by", "alice", "--db", url,
           "--policy", str(EXAMPLE_POLICY), "--tools", "support_tools"]
    for s in sets:
        out += ["--set", s]
    return out


def test_approve_set_edits_then_resume_runs_the_edited_call_once(
    ledger_url: str, support_tools: ModuleType
) -> None:
    got = run(*edit_args(ledger_url, 'subject="Invoice 42"', 'body="Dear Bob, fixed."'))
    assert got.exit_code == 0, got.output
    assert "edited (subject, body) and approved" in got.output
    assert BODY not in got.output
    with Ledger(ledger_url) as ledger:
        rec = ledger.get("support-1", "m1")
        assert rec is not None and rec.edited == ("subject", "body")
    resumed = run("resume", "support-1", "--tools", "support_tools", "--policy",
                  str(EXAMPLE_POLICY), "--db", ledger_url)
    assert resumed.exit_code == 0, resumed.output
    assert support_tools.effects() == ["support-1 send_email bob@gmail.com Invoice 42"]
    again = run("resume", "support-1", "--tools", "support_tools", "--policy",
                str(EXAMPLE_POLICY), "--db", ledger_url)
    assert again.exit_code == 0, again.output
    assert len(support_tools.effects()) == 1
    shown = run("call", "show", "m1", "--task", "support-1", "--db", ledger_url, "--json")
    details = json.loads(shown.output)
    assert details["edited"] == ["subject", "body"]
    assert details["edits"][0]["by"] == "alice"
    assert BODY not in shown.output  # the old body is sealed: a stand-in only


def test_approve_set_as_json_names_the_edited_fields(ledger_url: str) -> None:
    got = run(*edit_args(ledger_url, 'subject="Invoice 42"'), "--json")
    assert got.exit_code == 0, got.output
    answer = json.loads(got.output)
    assert answer["edited"] == ["subject"] and answer["verdict"] == "approved"


def test_a_field_not_editable_is_refused_by_name(ledger_url: str) -> None:
    before = Ledger(ledger_url)
    with before as ledger:
        shown = ledger.get("support-1", "m1")
    got = run(*edit_args(ledger_url, 'to="mallory@evil.example"'))
    assert got.exit_code == 1
    assert "field 'to' is not editable" in got.output and "mallory" not in got.output
    with Ledger(ledger_url) as ledger:
        now = ledger.get("support-1", "m1")
    assert now is not None and shown is not None and now.args_hash == shown.args_hash


def test_a_value_that_is_not_json_is_a_usage_error_naming_the_field(ledger_url: str) -> None:
    got = run(*edit_args(ledger_url, "subject=Invoice 42"))
    assert got.exit_code == 2
    assert "'subject' is not JSON" in got.output and "Invoice 42" not in got.output


def test_set_needs_the_policy_and_the_tools(ledger_url: str) -> None:
    got = run("approve", "m1", "--task", "support-1", "--by", "alice", "--db", ledger_url,
              "--set", 'subject="x"')
    assert got.exit_code == 2 and "--set needs --policy" in got.output


def test_a_value_longer_than_an_edit_may_be_is_refused_by_name(ledger_url: str) -> None:
    """The inbox's edit box and the API hold a new value to ``MAX_VALUE_CHARS``; so does
    ``--set``: one limit (``policy.edits``), whichever way the edit arrives."""
    from agent_gate.policy.edits import MAX_VALUE_CHARS

    mark = "zq-long-7f3a"
    with Ledger(ledger_url) as ledger:
        shown = ledger.get("support-1", "m1")
    got = run(*edit_args(ledger_url, "body=" + json.dumps(mark + "x" * MAX_VALUE_CHARS)))
    assert got.exit_code == 1
    assert f"field 'body' has {MAX_VALUE_CHARS + len(mark)} characters" in got.output
    assert mark not in got.output
    with Ledger(ledger_url) as ledger:
        now = ledger.get("support-1", "m1")
    assert now is not None and shown is not None and now.args_hash == shown.args_hash
    assert now.edited == ()

"""`approve`, `deny` and `resolve` say what they act on, and act on exactly that.

Each prints the tool, call, task, the arguments' hash and a short view of the
arguments as stored (a redacted field as its stand-in, never its value), and answers
only while the call's arguments hash to what it printed, or to ``--expect-hash``: a
mismatch changes nothing and is audited. A model-chosen id cannot drive the terminal.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

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


def mail(call_id: str, **extra: Any) -> dict[str, Any]:
    return {"call_id": call_id, "name": "send_email",
            "arguments": {"to": "bob@gmail.com", "subject": "Invoice", "body": BODY}, **extra}


@pytest.fixture
def ledger_url(db_url: str, support_tools: ModuleType, effects_file: Path) -> str:
    with Gate(support_tools.tools, db_url, policy=EXAMPLE_POLICY,
              principal=Principal(id="u1", roles={"support"})) as gate:
        gate.execute("support-1", mail("m1"))
        gate.execute("support-1", mail("m2"))
        gate.execute("support-1", mail("evil\x1b[2J\u202e-id"))
        gate.execute("mcp-session-7", mail("mcp-abc", provider="mcp"))
    with Gate(support_tools.tools, db_url) as gate:  # no policy: post_note runs
        gate.execute("notes", {"call_id": "n1", "name": "post_note",
                               "arguments": {"text": "timeout once"}})
    return db_url


def args_hash(url: str, task: str, call_id: str) -> str:
    with Ledger(url) as ledger:
        rec = ledger.get(task, call_id)
    assert rec is not None
    return rec.args_hash


def refused(url: str) -> list[Any]:
    with Ledger(url) as ledger:
        return [e for e in ledger.audit() if e.event == "answer_refused"]


def test_approve_prints_what_it_acts_on_and_binds_to_it(ledger_url: str) -> None:
    shown = args_hash(ledger_url, "support-1", "m1")
    got = run("approve", "m1", "--task", "support-1", "--by", "alice", "--db", ledger_url)
    assert got.exit_code == 0, got.output
    first, second = got.output.splitlines()[:2]
    assert first == "approving: send_email call m1 of task support-1"
    assert second.startswith(f"  arguments sha256 {shown}: {{")
    assert '"to": "bob@gmail.com"' in second and '"redacted"' in second
    assert BODY not in got.output and "secret invoice" not in got.output
    assert "next: agent-gate resume support-1 --tools MODULE[:ATTR]" in got.output


def test_an_expected_hash_other_than_the_calls_changes_nothing(ledger_url: str) -> None:
    other = args_hash(ledger_url, "support-1", "m2")
    for verb in ("approve", "deny"):
        got = run(verb, "m1", "--task", "support-1", "--by", "alice", "--expect-hash",
                  "0" * 64, "--db", ledger_url)
        assert got.exit_code == 1, got.output
        assert "read the call again" in got.output and "call show" in got.output
    with Ledger(ledger_url) as ledger:
        rec = ledger.get("support-1", "m1")
        assert rec is not None and rec.state.value == "awaiting_approval"
        assert ledger.approval(rec) is None
    assert [(e.actor, e.detail["answer"]) for e in refused(ledger_url)] == [
        ("operator:alice", "approve"), ("operator:alice", "deny")]
    ok = run("approve", "m2", "--task", "support-1", "--by", "alice", "--expect-hash",
             other.upper(), "--db", ledger_url, "--json")
    assert ok.exit_code == 0 and json.loads(ok.output)["args_hash"] == other


def test_an_expected_hash_must_look_like_one(ledger_url: str) -> None:
    got = run("deny", "m1", "--task", "support-1", "--by", "alice", "--expect-hash", "abc",
              "--db", ledger_url)
    assert got.exit_code == 2 and "64 hex digits" in got.output


def test_resolve_prints_what_it_acts_on_and_checks_the_hash(ledger_url: str) -> None:
    wrong = run("resolve", "n1", "--task", "notes", "--as", "not-applied",
                "--expect-hash", "1" * 64, "--db", ledger_url)
    assert wrong.exit_code == 1 and "read the call again" in wrong.output
    got = run("resolve", "n1", "--task", "notes", "--as", "not-applied", "--by", "carol",
              "--db", ledger_url)
    assert got.exit_code == 0, got.output
    assert got.output.startswith("resolving: post_note call n1 of task notes\n")
    assert f"  arguments sha256 {args_hash(ledger_url, 'notes', 'n1')}: " \
        '{"text": "timeout once"}' in got.output
    assert "is now authorized" in got.output and "agent-gate resume notes" in got.output


def test_a_hostile_call_id_cannot_drive_the_terminal(ledger_url: str) -> None:
    got = run("deny", "evil\x1b[2J\u202e-id", "--task", "support-1", "--by", "alice",
              "--db", ledger_url)
    assert got.exit_code == 0, got.output
    assert "\x1b" not in got.output and "\u202e" not in got.output
    assert "call evil\\x1b[2J\\u202e-id of task support-1" in got.output


def test_a_call_the_mcp_proxy_holds_runs_in_the_proxy_not_on_resume(ledger_url: str) -> None:
    got = run("approve", "mcp-abc", "--task", "mcp-session-7", "--by", "alice",
              "--db", ledger_url)
    assert got.exit_code == 0, got.output
    assert "the MCP proxy that holds it runs it once" in got.output
    assert "resume" not in got.output.replace("not agent-gate resume", "")

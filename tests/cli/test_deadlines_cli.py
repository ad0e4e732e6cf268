"""Approval deadlines on the command line: ``agent-gate approvals sweep`` (one pass),
``pending`` and ``call show`` showing the deadline, ``approve``/``deny`` of a call
escalated to a role, and ``serve --sweep-every`` read into the server's config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from support.deadlines import POLICY, deadline_tools, deadlines_passed, write_policy
from waiting import wait_until

from agent_gate import CallState, Gate, Principal
from agent_gate.cli import main as cli
from agent_gate.ledger import Ledger


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    return write_policy(tmp_path)


def send(url: str, policy: Path, *calls: tuple[str, str]) -> None:
    with Gate(deadline_tools(), url, policy=str(policy)) as gate:
        for call_id, tool in calls:
            out = gate.execute("t", {"call_id": call_id, "name": tool,
                                     "arguments": {"order": call_id}},
                               principal=Principal(id="agent"))
            assert out.state is CallState.AWAITING_APPROVAL


def test_sweep_denies_and_escalates_once_and_says_so(db_url: str, policy: Path) -> None:
    send(db_url, policy, ("r1", "refund"), ("w1", "wire"), ("s1", "slow"))
    deadlines_passed(db_url, 2)
    got = run("approvals", "sweep", "--db", db_url, "--by", "cron-1")
    assert got.exit_code == 0, got.output
    assert "denied (approval_timeout): it will not run: call r1 of task t" in got.output
    assert "escalated to role finance: only its holders may answer: call w1 of task t" \
        in got.output
    assert got.output.strip().endswith(
        "swept 2 passed deadline(s): 1 denied, 1 escalated, 0 answered in time, "
        "0 moot (the call had moved on)")
    again = run("approvals", "sweep", "--db", db_url, "--json")
    report = json.loads(again.output)
    assert (report["looked_at"], report["denied"], report["escalated"]) == (0, 0, 0)
    with Ledger(db_url) as ledger:
        rec = ledger.get("t", "r1")
        assert rec is not None and rec.state is CallState.REJECTED
        assert rec.reason_code == "approval_timeout"
        assert [e.actor for e in ledger.audit() if e.event == "deny"] == ["sweeper:cron-1"]


def test_pending_and_call_show_show_the_deadline(db_url: str, policy: Path) -> None:
    send(db_url, policy, ("s1", "slow"), ("w1", "wire"))
    rows = [json.loads(line) for line in
            run("pending", "--db", db_url, "--json").output.splitlines()]
    slow = rows[0]["deadline"]
    assert (slow["then"], slow["rule"], slow["escalated"]) == ("deny", "slow-wait", False)
    assert 1790 <= slow["remaining_seconds"] <= 1800
    table = CliRunner().invoke(cli, ["pending", "--db", db_url], terminal_width=250)
    assert "29m left, then deny" in table.output
    deadlines_passed(db_url, 1)
    assert run("approvals", "sweep", "--db", db_url).exit_code == 0
    rows = [json.loads(line) for line in
            run("pending", "--db", db_url, "--json").output.splitlines()]
    assert rows[1]["deadline"]["escalated"] is True
    shown = CliRunner().invoke(cli, ["call", "show", "w1", "--db", db_url],
                               terminal_width=250)
    assert "escalated to finance (rule wires-wait)" in shown.output
    details = json.loads(run("call", "show", "w1", "--db", db_url, "--json").output)
    assert details["deadline"]["role"] == "finance"


def test_an_escalated_call_needs_the_role_on_the_command_line(db_url: str,
                                                              policy: Path) -> None:
    send(db_url, policy, ("w1", "wire"), ("w2", "wire"))
    deadlines_passed(db_url, 2)
    assert run("approvals", "sweep", "--db", db_url).exit_code == 0
    # Without a policy nobody's roles are known; with it, sam does not hold finance.
    bare = run("approve", "w1", "--by", "fay", "--db", db_url)
    assert bare.exit_code != 0 and "--policy FILE" in bare.output
    wrong = run("approve", "w1", "--by", "sam", "--db", db_url, "--policy", str(policy))
    assert wrong.exit_code != 0 and "does not hold it" in wrong.output
    denied = run("deny", "w2", "--by", "sam", "--db", db_url, "--policy", str(policy))
    assert denied.exit_code != 0 and "does not hold it" in denied.output
    ok = run("approve", "w1", "--by", "fay", "--db", db_url, "--policy", str(policy))
    assert ok.exit_code == 0, ok.output
    done = run("deny", "w2", "--by", "fay", "--db", db_url, "--policy", str(policy))
    assert done.exit_code == 0 and "it will not run" in done.output
    with Ledger(db_url) as ledger:
        w2 = ledger.get("t", "w2")
        assert w2 is not None and w2.state is CallState.REJECTED
        refused = [e for e in ledger.audit() if e.event == "approval_refused"]
        assert [e.actor for e in refused] == ["operator:fay", "operator:sam", "operator:sam"]


def test_a_policy_with_a_bad_deadline_is_refused_at_its_line(tmp_path: Path) -> None:
    role = tmp_path / "role.yaml"
    role.write_text(POLICY.replace("then: {escalate: finance}", "then: {escalate: legal}"))
    got = run("policy", "check", str(role))
    assert got.exit_code != 0
    assert "role.yaml:21:40:" in got.output and "no operator holds role 'legal'" in got.output
    unit = tmp_path / "unit.yaml"
    unit.write_text(POLICY.replace("approval: {timeout: 30m}", "approval: {timeout: 30 min}"))
    got = run("policy", "check", str(unit))
    assert got.exit_code != 0
    assert "unit.yaml:28:20:" in got.output and "tools.slow.rules[0].approval.timeout" in got.output


def test_serve_sweeps_the_deadlines_itself(db_url: str, policy: Path) -> None:
    """``agent-gate serve --sweep-every``, a real process: a call nobody answers is
    denied by the server's sweeper, no command asked."""
    pytest.importorskip("uvicorn")
    send(db_url, policy, ("r1", "refund"))
    server = subprocess.Popen(
        [sys.executable, "-m", "agent_gate", "serve", "--db", db_url, "--listen",
         "127.0.0.1:0", "--sweep-every", "0.2s", "--checkpoint-every", "never"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def denied() -> bool:
            if server.poll() is not None:
                raise AssertionError(server.stderr.read().decode() if server.stderr else "")
            with Ledger(db_url) as ledger:
                rec = ledger.get("t", "r1")
            return rec is not None and rec.state is CallState.REJECTED
        wait_until(denied, timeout=60, what="the server's sweeper to deny r1")
    finally:
        server.terminate()
        server.wait(timeout=30)
    with Ledger(db_url) as ledger:
        entry = [e for e in ledger.audit() if e.event == "deny"]
    assert len(entry) == 1 and entry[0].actor.startswith("sweeper:")
    assert entry[0].detail["code"] == "approval_timeout"


def test_serve_without_a_sweeper(sqlite_url: str) -> None:
    pytest.importorskip("fastapi")
    from agent_gate.serve import create_app
    from agent_gate.serve.webhooks import ServeConfig

    assert create_app(sqlite_url).state.sweeper.every == 10.0
    assert create_app(sqlite_url, config=ServeConfig(sweep_every=None)).state.sweeper is None

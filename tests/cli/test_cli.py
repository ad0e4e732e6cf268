"""The operator commands, through the real console script and click's CliRunner."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner, Result
from shared_fixtures import AGENT_GATE, EXAMPLE_POLICY, HERE, effect_lines
from support.calls import call

from agent_gate import CallState, Gate
from agent_gate.cli import main as cli
from agent_gate.policy import Principal

pytestmark = pytest.mark.usefixtures("seal_key_env")


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def script(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([str(AGENT_GATE), *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


@pytest.fixture
def ledger_url(db_url: str, support_tools: ModuleType, effects_file: Path) -> str:
    """Two tasks: one finished, one with a call awaiting approval and one denied."""
    with Gate(support_tools.tools, db_url, policy=EXAMPLE_POLICY,
              principal=Principal(id="u1", roles={"support"})) as gate:
        gate.execute("done", call("w1", "get_weather", city="Zürich"))
        gate.execute("support-1", call("w2", "get_weather", city="Oslo"))
        gate.execute("support-1", call("m1", "send_email", to="bob@gmail.com",
                                       subject="Invoice", body="Dear Bob, see attached."))
        gate.execute("support-1", call("d1", "delete_file", path="/etc/passwd"))
    return db_url


def test_tasks_lists_counts_by_state(ledger_url: str) -> None:
    out = run("tasks", "--db", ledger_url)
    assert out.exit_code == 0
    lines = out.output.splitlines()
    assert lines[0].split() == ["task", "calls", "by", "state", "response", "updated", "(UTC)"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"done", "support-1"}
    assert rows["support-1"].split()[1] == "3"
    assert "1 awaiting_approval, 1 rejected, 1 succeeded" in rows["support-1"]
    js = [json.loads(line) for line in run("tasks", "--db", ledger_url, "--json").output
          .splitlines()]
    by_task = {t["task"]: t for t in js}
    assert by_task["support-1"]["counts"] == {"awaiting_approval": 1, "rejected": 1,
                                              "succeeded": 1}
    assert by_task["done"]["total"] == 1


def test_commands_refuse_a_ledger_that_is_not_there(tmp_path: Path) -> None:
    missing = f"sqlite:///{tmp_path / 'nope.db'}"
    for args in (["tasks"], ["audit"], ["audit", "verify"], ["approve", "x", "--by", "a"]):
        out = run(*args, "--db", missing)
        assert out.exit_code == 3 and "no ledger at" in out.output, args
    assert not (tmp_path / "nope.db").exists()


@pytest.mark.slow
def test_approve_then_resume_runs_the_call_once_through_the_console_script(
    ledger_url: str, effects_file: Path
) -> None:
    before = script("resume", "support-1", "--tools", "support_tools", "--policy",
                    str(EXAMPLE_POLICY), "--db", ledger_url, "--dry-run")
    assert before.returncode == 5, before.stderr  # a call awaits approval
    assert "m1" in before.stdout and "agent-gate approve / deny" in before.stdout

    approved = script("approve", "m1", "--by", "alice", "--reason", "known customer",
                      "--expires-in", "2h", "--db", ledger_url)
    assert approved.returncode == 0, approved.stderr
    assert "approved: call m1 (send_email) of task support-1 by alice" in approved.stdout
    assert "agent-gate resume support-1" in approved.stdout

    first = script("resume", "support-1", "--tools", "support_tools", "--policy",
                   str(EXAMPLE_POLICY), "--db", ledger_url, "--json")
    assert first.returncode == 4, first.stderr  # finished, but d1 was rejected
    report = json.loads(first.stdout)
    assert [b["needs"] for b in report["before"]] == ["run"]
    assert [(o["call_id"], o["state"], o["replayed"]) for o in report["outcomes"]] == [
        ("m1", "succeeded", False)]
    assert report["after"] == []
    second = script("resume", "support-1", "--tools", "support_tools", "--policy",
                    str(EXAMPLE_POLICY), "--db", ledger_url)
    assert second.returncode == 4, second.stderr
    assert "nothing; every call of the task is finished" in second.stdout
    assert effect_lines(effects_file).count("support-1 send_email bob@gmail.com Invoice") == 1


def test_resume_without_a_policy_says_so_and_leaves_approved_calls(ledger_url: str) -> None:
    run("approve", "m1", "--by", "alice", "--db", ledger_url)
    out = run("resume", "support-1", "--tools", "support_tools", "--db", ledger_url)
    assert out.exit_code == 5  # still awaiting approval
    assert "no --policy" in out.output
    assert "awaiting_approval" in out.output and "run with that policy" in out.output


def test_deny_rejects_and_approve_names_what_is_wrong(ledger_url: str) -> None:
    denied = run("deny", "m1", "--by", "carol", "--reason", "not our customer",
                 "--db", ledger_url, "--json")
    assert denied.exit_code == 0
    assert json.loads(denied.output)["state"] == "rejected"
    again = run("approve", "m1", "--by", "alice", "--db", ledger_url)
    assert again.exit_code == 1
    assert "call 'm1' of task 'support-1' is rejected, not awaiting approval" in again.output
    assert "`agent-gate call show CALL --task TASK` shows what happened" in again.output
    unknown = run("approve", "nope", "--by", "alice", "--db", ledger_url)
    assert unknown.exit_code == 1 and "no call 'nope'" in unknown.output
    bad = run("approve", "m1", "--by", "alice", "--expires-in", "soon", "--db", ledger_url)
    assert bad.exit_code == 2 and "not a duration" in bad.output


def test_audit_table_and_json_show_decisions_and_rule_ids(ledger_url: str) -> None:
    out = run("audit", "--db", ledger_url, "--task", "support-1")
    assert out.exit_code == 0
    header = out.output.splitlines()[0].split()
    assert header == ["#", "time", "(UTC)", "task", "call", "tool", "event", "state",
                      "decision", "rule", "ids", "actor"]
    deny_line = next(line for line in out.output.splitlines() if " reject " in line)
    assert "d1" in deny_line and "delete_file" in deny_line and "deny" in deny_line
    assert "delete-outside-workspace" in deny_line and "received → rejected" in deny_line
    wait_line = next(line for line in out.output.splitlines() if "require_approval" in line)
    assert "email-external-needs-approval" in wait_line and "approve" in wait_line
    only = [json.loads(line) for line in run("audit", "--db", ledger_url, "--call", "m1",
                                            "--json").output.splitlines()]
    assert {e["call"] for e in only} == {"m1"}
    assert [e["event"] for e in only] == ["received", "require_approval"]
    assert all(len(e["hash"]) == 64 for e in only)


@pytest.mark.slow
def test_audit_verify_through_the_console_script_names_the_edited_entry(
    sqlite_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    with Gate(support_tools.tools, sqlite_url, policy=EXAMPLE_POLICY) as gate:
        gate.execute("t", call("w", "get_weather", city="Oslo"))
    ok = script("audit", "verify", "--db", sqlite_url)
    assert ok.returncode == 0, ok.stderr
    assert "audit trail ok: 5 entries in 1 task chains" in ok.stdout
    assert "no checkpoint yet" in ok.stdout
    taken = script("audit", "checkpoint", "--db", sqlite_url)
    assert taken.returncode == 0, taken.stderr
    anchor = taken.stdout.splitlines()[0].removeprefix("checkpoint: ")
    assert anchor.startswith("1:") and "over 1 task heads" in taken.stdout
    ok = script("audit", "verify", "--db", sqlite_url, "--anchor", anchor)
    assert ok.returncode == 0 and f"checkpoint: {anchor}" in ok.stdout
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        db.execute("UPDATE audit_events SET detail = replace(detail, 'weather-for-anyone', "
                   "'x') WHERE task_id = 't' AND seq = 3")
    broken = script("audit", "verify", "--db", sqlite_url)
    assert broken.returncode == 1
    assert "audit trail BROKEN: audit entry #3 of task 't'" in broken.stderr
    assert "edited" in broken.stderr
    as_json = json.loads(script("audit", "verify", "--db", sqlite_url, "--json").stdout)
    assert as_json["ok"] is False
    assert (as_json["problem"]["task"], as_json["problem"]["seq"]) == ("t", 3)
    again = script("audit", "checkpoint", "--db", sqlite_url)
    assert again.returncode == 0 and anchor in again.stdout  # no head moved: the same one
    # A trail emptied behind a checkpoint: no new checkpoint papers over it...
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        db.execute("DELETE FROM audit_events")
        db.execute("DELETE FROM audit_heads")
    refused = script("audit", "checkpoint", "--db", sqlite_url)
    assert refused.returncode == 1 and "the last leaf of checkpoint #1's tree, is gone" \
        in refused.stderr
    # ...and once the checkpoints are gone too, the anchor kept elsewhere tells.
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        db.execute("DELETE FROM audit_checkpoint_heads")
        db.execute("DELETE FROM audit_checkpoints")
    emptied = script("audit", "verify", "--db", sqlite_url, "--anchor", anchor)
    assert emptied.returncode == 1 and "is neither a checkpoint" in emptied.stderr
    bad = script("audit", "verify", "--db", sqlite_url, "--anchor", "1:xyz")
    assert bad.returncode == 2 and "ID:HASH" in bad.stderr


@pytest.mark.slow
def test_resolve_settles_an_in_doubt_call_and_resume_runs_a_not_applied_one(
    db_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    with Gate(support_tools.tools, db_url) as gate:
        assert gate.execute("n", call("a", "post_note", text="timeout-a")).state \
            is CallState.IN_DOUBT
        assert gate.execute("n", call("b", "post_note", text="timeout-b")).state \
            is CallState.IN_DOUBT
    listed = run("resume", "n", "--tools", "support_tools", "--db", db_url, "--dry-run")
    assert "in_doubt" in listed.output and "agent-gate resolve CALL" in listed.output
    settled = run("resolve", "a", "--as", "succeeded", "--result", '{"posted": "by hand"}',
                  "--by", "dave", "--db", db_url, "--json")
    assert settled.exit_code == 0
    assert json.loads(settled.output)["state"] == "succeeded"
    again = run("resolve", "b", "--as", "not-applied", "--by", "dave", "--db", db_url)
    assert again.exit_code == 0 and "is now authorized" in again.output
    wrong = run("resolve", "a", "--as", "failed", "--db", db_url)
    assert wrong.exit_code == 1 and "'a' is succeeded, not in_doubt" in wrong.output
    bad = run("resolve", "b", "--as", "failed", "--result", "{}", "--db", db_url)
    assert bad.exit_code == 2
    resumed = script("resume", "n", "--tools", "support_tools", "--db", db_url, "--json")
    assert resumed.returncode == 6, resumed.stderr  # 'b' timed out again: in doubt
    outcomes = json.loads(resumed.stdout)["outcomes"]
    # 'b' runs again once (and times out again: in doubt); 'a' is finished and skipped.
    assert [(o["call_id"], o["state"]) for o in outcomes] == [("b", "in_doubt")]
    assert effect_lines(effects_file).count("n post_note timeout-b") == 2
    assert effect_lines(effects_file).count("n post_note timeout-a") == 1

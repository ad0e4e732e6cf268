"""``agent-gate demo``: the README's first command, and the commands it tells you to run next.

The demo is checked the way a newcomer would check it: what it prints, what the
ledger holds afterwards, and how many lines its harmless tools left in the
outbox. Then the printed "Next" commands are run as printed (approve, resume,
audit) and the demo once more: nothing ever runs twice.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agent_gate.cli import main
from agent_gate.demo.tools import outbox_counts
from agent_gate.demo.transcript import CALLS, CUT_INSIDE_EVENT
from agent_gate.ledger import CallState, Ledger


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh directory as a newcomer's checkout: the defaults land here."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENT_GATE_DB", raising=False)
    monkeypatch.delenv("AGENT_GATE_DEMO_OUTBOX", raising=False)
    for name in ("USER", "LOGNAME", "LNAME", "USERNAME"):  # as in a container or cron job
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def demo(*args: str) -> Any:
    result = CliRunner().invoke(main, ["demo", "--drip", "0", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def states(db: Path, task_id: str = "demo") -> dict[str, CallState]:
    with Ledger(f"sqlite:///{db}") as ledger:
        return {rec.call_id: rec.state for rec in ledger.calls(task_id)}


def table_rows(output: str) -> dict[str, list[str]]:
    """The final table's rows: call id -> its cells."""
    rows: dict[str, list[str]] = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if cells and cells[0].startswith("call_"):
            rows[cells[0]] = cells
    return rows


def next_commands(output: str) -> list[list[str]]:
    lines = output.splitlines()
    start = lines.index("Next") + 1
    commands = []
    for line in lines[start:]:
        if not line.startswith("  agent-gate "):
            break
        assert "$" not in line, line  # runs as printed: nothing for a shell to expand
        commands.append(shlex.split(line.strip())[1:])
    return commands


def test_the_demo_decides_runs_and_resumes_as_it_says(workdir: Path) -> None:
    first = demo()
    out = first.output
    assert "ledger: sqlite:///agent_gate.db  task: demo" in out
    # Cut in the middle of the second call, after the first (a read) already ran;
    # the resume from the stream's first id resends everything after it.
    assert f"connection 1 was cut after {CUT_INSIDE_EVENT} events" in out
    assert "resuming with Last-Event-ID: resp_demo_4calls:0" in out
    replayed = CUT_INSIDE_EVENT - 1
    assert f"2 connection(s) · {replayed} events replayed by the server after the cut" in out
    rows = table_rows(out)
    assert {c: rows[c][2].split(" · ")[0] for c in rows} == {c.call_id: c.expect for c in CALLS}
    assert rows["call_mail_partner"][2] == "approve · email-external-needs-approval"
    assert {c: rows[c][3] for c in rows} == {
        "call_weather": "succeeded",
        "call_mail_team": "succeeded",
        "call_mail_partner": "awaiting_approval",
        "call_cleanup": "rejected",
    }
    assert {c: rows[c][4] for c in rows} == dict.fromkeys(rows, "no")
    assert "tools run by this invocation: 2 · answered from the ledger: 0" in out
    assert states(workdir / "agent_gate.db")["call_mail_partner"] is CallState.AWAITING_APPROVAL
    assert outbox_counts("demo") == {"call_weather": 1, "call_mail_team": 1}
    assert (workdir / ".agent-gate-demo" / "outbox.jsonl").exists()

    # Twice: everything is answered from the ledger, nothing runs.
    second = demo()
    rows = table_rows(second.output)
    assert {c: rows[c][4] for c in rows} == dict.fromkeys(rows, "yes (ledger)")
    assert "tools run by this invocation: 0 · answered from the ledger: 4" in second.output
    assert "Every call was answered from the ledger: nothing ran again." in second.output
    assert outbox_counts("demo") == {"call_weather": 1, "call_mail_team": 1}

    # The printed next steps, run as printed.
    commands = next_commands(second.output)
    assert [c[0] for c in commands] == ["audit", "approve", "resume", "demo"]
    assert commands[1][:4] == ["approve", "call_mail_partner", "--task", "demo"]
    runner = CliRunner()
    # audit and approve succeed; resume finishes every call it may run and says by its
    # exit status that one call of the task was rejected (4).
    for command, status in zip(commands[:3], (0, 0, 4), strict=True):
        result = runner.invoke(main, command, catch_exceptions=False)
        assert result.exit_code == status, (command, result.output)
    assert outbox_counts("demo") == {"call_weather": 1, "call_mail_team": 1,
                                     "call_mail_partner": 1}
    assert set(states(workdir / "agent_gate.db").values()) == {
        CallState.SUCCEEDED, CallState.REJECTED
    }

    third = demo()
    rows = table_rows(third.output)
    assert rows["call_mail_partner"][3:6] == ["succeeded", "yes (ledger)", "1"]
    assert "calls that ever ran twice: 0" in third.output
    assert "agent-gate approve" not in third.output  # nothing waits any more
    assert outbox_counts("demo") == {"call_weather": 1, "call_mail_team": 1,
                                     "call_mail_partner": 1}


def test_the_demo_uses_the_given_ledger_and_says_so(workdir: Path) -> None:
    other = workdir / "elsewhere.db"
    out = demo("--db", f"sqlite:///{other}", "--task", "t2").output
    assert not (workdir / "agent_gate.db").exists()
    assert set(states(other, "t2")) == {c.call_id for c in CALLS}
    assert f"agent-gate audit --task t2 --db sqlite:///{other}" in out
    assert outbox_counts("t2") == {"call_weather": 1, "call_mail_team": 1}


@pytest.mark.slow
def test_the_demo_ends_by_itself_as_a_newcomer_runs_it(tmp_path: Path) -> None:
    """The real entry point, the default pacing, its own process: bounded in seconds."""
    env = {k: v for k, v in os.environ.items() if k not in ("AGENT_GATE_DB",
                                                             "AGENT_GATE_DEMO_OUTBOX")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    done = subprocess.run(
        [sys.executable, "-m", "agent_gate", "demo"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "response: completed" in done.stdout
    assert "agent-gate approve call_mail_partner --task demo" in done.stdout
    assert done.stderr == ""


def test_a_demo_on_another_ledger_in_the_same_directory_counts_its_own_runs(
    workdir: Path,
) -> None:
    """The outbox is the directory's, the runs it counts the ledger's: a second ledger's
    demo runs each tool once and says so, never "ran twice" for the first ledger's runs."""
    demo()
    other = demo("--db", f"sqlite:///{workdir / 'other.db'}")
    out = other.output
    assert "tools run by this invocation: 2 · answered from the ledger: 0" in out
    assert "calls that ever ran twice: 0" in out
    rows = table_rows(out)
    assert {c: rows[c][5] for c in ("call_weather", "call_mail_team")} == {
        "call_weather": "1", "call_mail_team": "1"}
    # Both ledgers' runs are in the one outbox: each tool ran once per ledger.
    assert outbox_counts("demo") == {"call_weather": 2, "call_mail_team": 2}

"""A worker SIGKILLed while its tool runs: the call is in doubt, never silently re-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import WORKERS
from waiting import wait_until

from agent_gate import CallState, Gate

WORKER = WORKERS / "gate_worker.py"


def effect_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def kill_mid_tool(
    tmp_path: Path, db_url: str, tool: str, *, before_effect: bool = False
) -> None:
    """Start a worker, wait until its tool is running, SIGKILL it, reap it."""
    marker = tmp_path / ("hang-before" if before_effect else "hang")
    marker.touch()
    env = dict(os.environ, **{"AG_HANG_BEFORE" if before_effect else "AG_HANG": str(marker)})
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), db_url, "task", "call-1", tool, '{"text": "hello"}'],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    running = Path(str(marker) + ".running")

    def started() -> bool:
        assert proc.poll() is None, proc.communicate()[1].decode()
        return running.exists()

    try:
        wait_until(started, what="the tool to start")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        marker.unlink(missing_ok=True)  # later runs in this process must not hang


@pytest.mark.slow
def test_killed_none_tool_is_in_doubt_and_nothing_reruns_it(
    tmp_path: Path, db_url: str, effects_file: Path, agent_tools: object
) -> None:
    kill_mid_tool(tmp_path, db_url, "post_note")
    assert len(effect_lines(effects_file)) == 1  # it did happen, once

    with Gate(agent_tools.tools, db_url) as gate:  # type: ignore[attr-defined]
        row = gate.ledger.get("task", "call-1")
        assert row is not None and row.state is CallState.EXECUTING  # committed before running
        (recovered,) = gate.recover("task")
        assert recovered.state is CallState.IN_DOUBT and recovered.code == "owner_dead"
        assert "died" in (recovered.reason or "")
        # Nothing re-runs it: not another sweep, not the same call arriving again.
        assert [o.state for o in gate.recover("task")] == [CallState.IN_DOUBT]
        again = gate.execute("task", {"call_id": "call-1", "name": "post_note",
                                      "arguments": {"text": "hello"}})
        assert again.state is CallState.IN_DOUBT and again.replayed
    # Nor a new worker process replaying the call.
    proc = subprocess.run(
        [sys.executable, str(WORKER), db_url, "task", "call-1", "post_note", '{"text": "hello"}'],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["state"] == "in_doubt"
    assert len(effect_lines(effects_file)) == 1

    # An operator settles it; afterwards it replays as settled.
    with Gate(agent_tools.tools, db_url) as gate:  # type: ignore[attr-defined]
        settled = gate.resolve("call-1", as_="succeeded", by="ops", note="seen in the CRM")
        assert settled.state is CallState.SUCCEEDED and settled.code == "resolved"
        assert settled.reason == "resolved by ops as succeeded: seen in the CRM"
        assert gate.recover("task") == []
    assert len(effect_lines(effects_file)) == 1


@pytest.mark.slow
def test_killed_natural_tool_is_rerun_once_by_recover(
    tmp_path: Path, db_url: str, effects_file: Path, agent_tools: object
) -> None:
    kill_mid_tool(tmp_path, db_url, "put_note")
    assert len(effect_lines(effects_file)) == 1
    with Gate(agent_tools.tools, db_url) as gate:  # type: ignore[attr-defined]
        (recovered,) = gate.recover("task")
        assert recovered.state is CallState.SUCCEEDED and not recovered.replayed
        assert recovered.attempt == 2 and recovered.result == {"posted": "hello"}
        assert gate.recover("task") == []
        assert gate.execute("task", {"call_id": "call-1", "name": "put_note",
                                     "arguments": {"text": "hello"}}).replayed
        events = [a.event for a in gate.ledger.audit("task") if a.call_id == "call-1"]
    assert events[:7] == ["received", "allow", "claim", "lose", "retry", "claim", "succeed"]
    lines = effect_lines(effects_file)
    assert len(lines) == 2 and lines[0] == lines[1]  # the same write, with the same key


@pytest.mark.slow
def test_reconcile_hook_settles_a_write_that_happened(
    tmp_path: Path, db_url: str, effects_file: Path, agent_tools: object
) -> None:
    kill_mid_tool(tmp_path, db_url, "checked_note")
    with Gate(agent_tools.tools, db_url) as gate:  # type: ignore[attr-defined]
        (recovered,) = gate.recover("task")
        assert recovered.state is CallState.SUCCEEDED and recovered.code == "reconciled"
        assert recovered.result["found"].startswith("ag-")
    assert len(effect_lines(effects_file)) == 1


def test_reconcile_hook_reruns_a_write_that_did_not_happen(
    tmp_path: Path, db_url: str, effects_file: Path, agent_tools: object
) -> None:
    kill_mid_tool(tmp_path, db_url, "checked_note", before_effect=True)
    assert effect_lines(effects_file) == []
    with Gate(agent_tools.tools, db_url) as gate:  # type: ignore[attr-defined]
        (recovered,) = gate.recover("task")
        assert recovered.state is CallState.SUCCEEDED and recovered.attempt == 2
        assert gate.recover("task") == []
        events = [a.event for a in gate.ledger.audit("task") if a.call_id == "call-1"]
    assert "retry" in events and events.count("claim") == 2
    assert len(effect_lines(effects_file)) == 1


def test_resolve_not_applied_makes_the_call_runnable_once_more(
    tmp_path: Path, db_url: str, effects_file: Path, agent_tools: object
) -> None:
    kill_mid_tool(tmp_path, db_url, "post_note", before_effect=True)
    call = {"call_id": "call-1", "name": "post_note", "arguments": {"text": "hello"}}
    with Gate(agent_tools.tools, db_url) as gate:  # type: ignore[attr-defined]
        # resolve sees the dead owner itself, no sweep needed first
        outcome = gate.resolve("call-1", as_="not-applied", task_id="task", by="ops")
        assert outcome.state is CallState.AUTHORIZED
        from agent_gate import NotInDoubt

        with pytest.raises(NotInDoubt, match="is authorized, not in_doubt"):
            gate.resolve("call-1", as_="failed")
        ran = gate.execute("task", call)
        assert ran.state is CallState.SUCCEEDED and not ran.replayed and ran.attempt == 2
        assert gate.execute("task", call).replayed
    assert len(effect_lines(effects_file)) == 1

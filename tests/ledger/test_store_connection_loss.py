"""A lost database connection at each step of a call, on PostgreSQL.

The server session of a worker is ended (``pg_terminate_backend``) before the claim,
inside the claim's transaction (for a call that runs at once, the one transaction
that records, decides and claims it), after the claim, and after the tool returned
but before its outcome is committed. Whatever the step, the call is left in a state
from which recovery is correct: never run, run once, or ``in_doubt``; never run
twice. The side effect is counted in a file outside the ledger.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from ledger_backends import PgSchema
from support import WORKERS

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.ledger import Ledger

WORKER = WORKERS / "pg_worker.py"
TASK, CALL = "task-1", "call-1"
CALL_ARGS = {"call_id": CALL, "name": "post", "arguments": {"text": "hello"}}

pytestmark = pytest.mark.backends("postgresql")


def effects(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def run_worker(url: str, mode: str, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, str(WORKER), url, TASK, CALL, mode, *extra],
        capture_output=True, text=True, timeout=120,
    )
    lines = proc.stdout.splitlines()
    assert proc.returncode in (0, 3, -signal.SIGKILL), proc.stderr
    return proc.returncode, json.loads(lines[-1]) if lines else {}


def bystander() -> ToolRegistry:
    """The same tool as a second worker would register it, counting its own runs."""
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write", idempotency="none", name="post")
    def post(**_: Any) -> None:
        raise AssertionError("a call whose outcome is unknown was run again")

    return tools


def events(url: str) -> list[str]:
    with Ledger(url) as ledger:
        assert ledger.verify_audit().ok
        return [e.event for e in ledger.audit(TASK) if e.call_id == CALL]


def state(url: str) -> tuple[CallState, int, str | None]:
    with Ledger(url) as ledger:
        rec = ledger.get(TASK, CALL)
        assert rec is not None
        return rec.state, rec.attempt, rec.reason_code


def test_sessions_lost_while_idle_before_the_claim_are_replaced(
    db_url: str, pg: PgSchema, effects_file: Path
) -> None:
    code, out = run_worker(db_url, "idle_before_claim")
    assert code == 0, out
    assert out["state"] == "succeeded" and not out["replayed"] and out["attempt"] == 1
    assert out["sessions"] >= 2  # the ended session(s), then the replacement
    assert len(effects(effects_file)) == 1


def recorded(url: str) -> bool:
    with Ledger(url) as ledger:
        return ledger.get(TASK, CALL) is not None


@pytest.mark.slow
def test_lost_inside_the_claim_rolls_the_intake_back_and_a_later_run_executes_once(
    db_url: str, pg: PgSchema, effects_file: Path
) -> None:
    """A call that runs at once is recorded, decided and claimed in one transaction:
    the session lost at the claim's UPDATE rolls all of it back. Nothing ran, nothing
    is half-recorded, and the error reaches the caller."""
    code, out = run_worker(db_url, "at_claim")
    assert (code, out["error"]) == (3, "OperationalError")
    assert not recorded(db_url)
    assert effects(effects_file) == []

    code, out = run_worker(db_url, "normal")
    assert code == 0 and out["state"] == "succeeded" and not out["replayed"]
    assert out["attempt"] == 1
    code, out = run_worker(db_url, "normal")
    assert code == 0 and out["state"] == "succeeded" and out["replayed"]
    assert len(effects(effects_file)) == 1
    assert events(db_url) == ["received", "allow", "claim", "succeed", "seen_again"]


@pytest.mark.slow
def test_killed_inside_the_claim_transaction_leaves_no_claim_and_no_lock(
    db_url: str, pg: PgSchema, effects_file: Path
) -> None:
    code, _ = run_worker(db_url, "sigkill_in_claim")
    assert code == -signal.SIGKILL
    assert not recorded(db_url)  # the intake's one transaction never committed
    code, out = run_worker(db_url, "normal")
    assert code == 0 and out["state"] == "succeeded" and out["attempt"] == 1
    assert len(effects(effects_file)) == 1


def test_lost_after_the_claim_the_outcome_still_commits_once(
    db_url: str, pg: PgSchema, effects_file: Path
) -> None:
    code, out = run_worker(db_url, "after_claim")
    assert code == 0, out
    assert out["state"] == "succeeded" and not out["replayed"] and out["attempt"] == 1
    assert out["sessions"] >= 2
    assert len(effects(effects_file)) == 1
    assert events(db_url) == ["received", "allow", "claim", "succeed"]


@pytest.mark.slow
def test_lost_before_the_outcome_commits_is_in_doubt_never_a_rerun(
    db_url: str, pg: PgSchema, effects_file: Path
) -> None:
    code, out = run_worker(db_url, "at_outcome")
    assert (code, out["error"]) == (3, "OperationalError")
    assert len(effects(effects_file)) == 1  # the write happened; the ledger never heard
    assert state(db_url)[:2] == (CallState.EXECUTING, 1)

    # Another worker replays the call: the owner is dead, so it goes to in_doubt,
    # and a non-idempotent tool is not run again.
    code, out = run_worker(db_url, "normal")
    assert code == 0 and out["state"] == "in_doubt" and out["code"] == "owner_dead"
    with Gate(bystander(), db_url) as gate:
        assert gate.execute(TASK, CALL_ARGS).state is CallState.IN_DOUBT
        assert [o.state for o in gate.recover(TASK)] == [CallState.IN_DOUBT]
    assert len(effects(effects_file)) == 1
    assert events(db_url).count("claim") == 1


def test_lost_before_the_outcome_with_the_worker_alive_waits_out_its_lease(
    db_url: str, pg: PgSchema, effects_file: Path, tmp_path: Path
) -> None:
    """The worker survives the lost commit: its lease, no longer renewed, runs out,
    and only then is the call in doubt; while it is live nobody takes the call."""
    stay = tmp_path / "stay"
    stay.touch()
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), db_url, TASK, CALL, "at_outcome", "2", str(stay)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert json.loads(line)["error"] == "OperationalError", proc.stderr
        seen: set[str] = set()
        with Gate(bystander(), db_url) as gate:
            deadline = time.monotonic() + 60
            while True:
                outcome = gate.execute(TASK, CALL_ARGS)
                seen.add(f"{outcome.state.value}:{outcome.code}")
                if outcome.state is CallState.IN_DOUBT:
                    break
                assert outcome.state is CallState.EXECUTING and outcome.code == "in_progress"
                assert time.monotonic() < deadline, "the lease never ran out"
                time.sleep(0.1)
        assert proc.poll() is None  # judged by its lease, not by its death
        assert state(db_url) == (CallState.IN_DOUBT, 1, "lease_expired")
    finally:
        stay.unlink(missing_ok=True)
        proc.communicate(timeout=60)
    assert proc.returncode == 3
    assert len(effects(effects_file)) == 1
    assert events(db_url).count("claim") == 1

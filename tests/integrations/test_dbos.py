"""Real DBOS workflows, killed with SIGKILL at each point of a gated call and recovered
by a new process: a finished call's outcome comes back, a call cut while its tool ran
is in doubt (the workflow's to handle, never sent again), and the payment in the
outbox outside the ledger is written at most once. Both ledger backends, each with
DBOS's system database on the same kind of database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ledger_backends import pg_base_url
from sqlalchemy import create_engine, text
from support import WORKERS
from support.engine_tools import POINTS
from support.kill_points import kill_at_mark
from waiting import wait_until

WORKER = WORKERS / "dbos_worker.py"
Run = subprocess.CompletedProcess[str]


@pytest.fixture
def system_db(backend: str, tmp_path: Path) -> Iterator[tuple[str, str | None]]:
    """DBOS's system database: a SQLite file, or a schema of its own on PostgreSQL."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'dbos.sqlite'}", None
        return
    base = pg_base_url()
    assert base is not None
    schema = f"dbos_{uuid.uuid4().hex[:12]}"
    url = base.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        yield url, schema
    finally:
        engine = create_engine(base, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()


class App:
    """One DBOS application's processes over one system database and one ledger."""

    def __init__(self, tmp_path: Path, system: tuple[str, str | None], ledger: str) -> None:
        self.system, self.schema = system
        self.ledger = ledger
        self.marks = tmp_path / "marks"
        self.marks.mkdir()
        self.env = dict(os.environ, AG_OUTBOX=str(tmp_path / "outbox"), AG_MARKS=str(self.marks))
        self.env.pop("AG_HANG", None)

    def argv(self, mode: str, workflow: str, tool: str, amount: int) -> list[str]:
        return [sys.executable, str(WORKER), mode, self.system, self.ledger, workflow, tool,
                str(amount), *([self.schema] if self.schema else [])]

    def kill_at(self, point: str, workflow: str, tool: str, amount: int = 10) -> None:
        """Start the workflow, wait until it stands at ``point``, SIGKILL the process."""
        proc = subprocess.Popen(self.argv("start", workflow, tool, amount),
                                env={**self.env, "AG_HANG": point},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        kill_at_mark(proc, self.marks, point)

    def run(self, mode: str, workflow: str, tool: str, amount: int = 10) -> dict[str, object]:
        done = subprocess.run(self.argv(mode, workflow, tool, amount), env=self.env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]

    def outbox(self) -> list[str]:
        path = Path(self.env["AG_OUTBOX"])
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.fixture
def app(tmp_path: Path, system_db: tuple[str, str | None], db_url: str) -> App:
    return App(tmp_path, system_db, db_url)


# What the recovered workflow reports after a kill at each point, for a payment tool
# with no reconcile hook: in doubt where the tool may have written, else its outcome.
EXPECTED = {
    "before-call": ("succeeded", 1),
    "before-effect": ("in_doubt", 0),
    "after-effect": ("in_doubt", 1),
    "after-outcome": ("succeeded", 1),
    "after-step": ("succeeded", 1),
}


@pytest.mark.slow
@pytest.mark.parametrize("point", POINTS)
def test_a_workflow_killed_at_each_point_never_pays_twice(app: App, point: str) -> None:
    app.kill_at(point, "wf-1", "send_payment")
    written_before = len(app.outbox())
    result = app.run("recover", "wf-1", "send_payment")
    state, writes = EXPECTED[point]
    if state == "in_doubt":
        assert result == {"in_doubt": "dbos-step-1", "task": "wf-1"}
    else:
        assert result["state"] == state and result["result"] == {"paid": 10, "to": "alice"}
        assert result["call_id"] == "dbos-step-1"
        # Cut after the gate's commit: the ledger's outcome, not a second run.
        assert result["replayed"] is (point == "after-outcome")
    assert len(app.outbox()) == writes
    assert len(app.outbox()) >= written_before  # nothing is taken back either
    # Recovered once more (a second crash after the first recovery): the same answer,
    # from DBOS's records, and still no second payment.
    assert app.run("recover", "wf-1", "send_payment") == result
    assert len(app.outbox()) == writes


@pytest.mark.slow
@pytest.mark.parametrize(("point", "writes"), [("before-effect", 1), ("after-effect", 1)])
def test_a_reconcile_hook_settles_a_call_cut_mid_tool(app: App, point: str, writes: int) -> None:
    """With a reconcile hook the recovered step asks it instead of raising: the write
    that happened is found (no second payment), the one that did not is made once."""
    app.kill_at(point, "wf-2", "checked_payment")
    result = app.run("recover", "wf-2", "checked_payment")
    assert result["state"] == "succeeded"
    assert len(app.outbox()) == writes


def _waiting_call(ledger: str, workflow: str) -> str:
    """The call the workflow waits on, once the ledger holds it ``awaiting_approval``."""
    from agent_gate import CallState, Gate, ToolRegistry

    def waiting() -> str | None:
        with Gate(ToolRegistry(), ledger) as gate:
            calls = gate.calls(workflow)
        ready = [c for c in calls if c.state is CallState.AWAITING_APPROVAL]
        return ready[0].call_id if ready else None

    return wait_until(waiting, what="the call to wait for approval")


@pytest.mark.slow
def test_a_workflow_waits_on_recv_until_the_cli_approves(app: App) -> None:
    proc = subprocess.Popen(app.argv("start", "wf-3", "send_payment", 150), env=app.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        call_id = _waiting_call(app.ledger, "wf-3")
        assert call_id == "dbos-step-1" and app.outbox() == []
        approved = subprocess.run(
            [sys.executable, "-m", "agent_gate", "approve", call_id, "--task", "wf-3",
             "--by", "alice", "--db", app.ledger],
            capture_output=True, text=True, timeout=60,
        )
        assert approved.returncode == 0, approved.stderr
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out.splitlines()[-1])
    assert result["state"] == "succeeded" and result["call_id"] == "dbos-step-1"
    assert len(app.outbox()) == 1


@pytest.mark.slow
def test_a_workflow_killed_while_waiting_recovers_to_the_answer(app: App) -> None:
    """Killed while it waits; a person denies the call meanwhile (``Gate.deny``, as the
    API and the inbox do); the recovered workflow reads the denial: never paid."""
    from agent_gate import Gate, ToolRegistry

    proc = subprocess.Popen(app.argv("start", "wf-4", "send_payment", 150), env=app.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        call_id = _waiting_call(app.ledger, "wf-4")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    with Gate(ToolRegistry(), app.ledger) as gate:
        gate.deny(call_id, task_id="wf-4", by="bob")
    result = app.run("recover", "wf-4", "send_payment", 150)
    assert result["state"] == "rejected" and result["call_id"] == call_id
    assert app.outbox() == []

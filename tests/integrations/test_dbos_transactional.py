"""Exactly once with DBOS on one PostgreSQL database: a transactional tool's call runs
as a DBOS datasource transaction on the ledger's own database, so the tool's row, the
ledger's outcome and DBOS's record of the step commit in one transaction. Real
processes are SIGKILLed before and after that commit, and at the points around it; a
new process recovers the workflow. The row counted in the tool's table is never
written twice, never lost, and the call is never in doubt; after each kill DBOS holds
the step done exactly when the ledger holds the call succeeded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ledger_backends import pg_base_url
from sqlalchemy import Engine, create_engine, text
from support import WORKERS
from support.kill_points import kill_at_mark

from agent_gate import CallState, Gate, ToolRegistry

WORKER = WORKERS / "dbos_txn_worker.py"
pytestmark = pytest.mark.backends("postgresql")


class App:
    """One DBOS application: its system schema, its datasource schema, one ledger."""

    def __init__(self, tmp_path: Path, ledger: str, admin: Engine) -> None:
        base = pg_base_url()
        assert base is not None
        self.system = base.set(drivername="postgresql").render_as_string(hide_password=False)
        suffix = uuid.uuid4().hex[:12]
        self.sys_schema, self.ds_schema = f"dbos_{suffix}", f"dbos_ds_{suffix}"
        self.ledger = ledger
        self.admin = admin
        self.marks = tmp_path / "marks"
        self.marks.mkdir()
        self.env = dict(os.environ, AG_MARKS=str(self.marks))
        self.env.pop("AG_HANG", None)
        engine = create_engine(ledger)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE engine_credits (amount INTEGER NOT NULL)"))
        engine.dispose()

    def argv(self, mode: str, workflow: str, amount: int) -> list[str]:
        return [sys.executable, str(WORKER), mode, self.system, self.ledger, workflow,
                str(amount), self.sys_schema, self.ds_schema]

    def kill_at(self, point: str, workflow: str, amount: int) -> None:
        proc = subprocess.Popen(self.argv("start", workflow, amount),
                                env={**self.env, "AG_HANG": point},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        kill_at_mark(proc, self.marks, point)

    def recover(self, workflow: str, amount: int) -> dict[str, object]:
        done = subprocess.run(self.argv("recover", workflow, amount), env=self.env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]

    def credits(self) -> list[int]:
        engine = create_engine(self.ledger)
        try:
            with engine.connect() as conn:
                return [r[0] for r in conn.execute(text("SELECT amount FROM engine_credits"))]
        finally:
            engine.dispose()

    def dbos_recorded(self, workflow: str) -> bool:
        """Has DBOS recorded the step's transaction output (its own table, same database)?"""
        with self.admin.connect() as conn:
            exists = conn.execute(text("SELECT to_regclass(:t)"),
                                  {"t": f"{self.ds_schema}.datasource_outputs"}).scalar()
            if exists is None:
                return False
            rows = conn.execute(text(
                f'SELECT count(*) FROM "{self.ds_schema}".datasource_outputs '
                "WHERE workflow_id LIKE :w"), {"w": f"%{workflow}%"}).scalar()
        return bool(rows)

    def ledger_state(self, workflow: str) -> CallState | None:
        with Gate(ToolRegistry(), self.ledger) as gate:
            calls = gate.calls(workflow)
        return calls[0].state if calls else None

    def drop(self) -> None:
        with self.admin.connect() as conn:
            for schema in (self.sys_schema, self.ds_schema):
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))


@pytest.fixture
def app(tmp_path: Path, db_url: str, pg_admin: Engine) -> Iterator[App]:
    made = App(tmp_path, db_url, pg_admin)
    try:
        yield made
    finally:
        made.drop()


# After a kill at each point: is the row written (and the ledger's outcome and DBOS's
# record with it), and which attempt of the tool's run the recovered workflow reports.
POINTS = {
    "before-call": (False, 1),
    "before-commit": (False, 2),  # the claim had committed; the run did not
    "before-ds-commit": (False, 2),  # all written, the outcome too: not committed
    "after-ds-commit": (True, 1),
    "after-commit": (True, 1),
}


@pytest.mark.slow
@pytest.mark.parametrize("point", list(POINTS))
def test_killed_around_the_commit_the_row_is_written_exactly_once(app: App, point: str) -> None:
    committed, attempt = POINTS[point]
    app.kill_at(point, "wf-t", 7)
    # One transaction: the tool's row, the ledger's outcome, DBOS's record, all or none.
    assert app.credits() == ([7] if committed else [])
    assert app.dbos_recorded("wf-t") is committed
    state = app.ledger_state("wf-t")
    assert (state is CallState.SUCCEEDED) is committed
    if point == "before-commit":
        assert state is CallState.EXECUTING  # not in doubt: nothing it wrote survived
    result = app.recover("wf-t", 7)
    assert result["state"] == "succeeded" and result["result"] == {"credited": 7}
    assert result["call_id"] == "dbos-step-1" and result["attempt"] == attempt
    # After the commit DBOS replays its own record: the gate is not even asked again
    # (it would answer replayed=True); before it, the gate runs the call once more.
    assert result["replayed"] is False
    assert app.credits() == [7]
    # (DBOS deletes a datasource's records once the workflow ends: its system
    # database holds the workflow's result from then on.)
    assert app.ledger_state("wf-t") is CallState.SUCCEEDED
    assert app.recover("wf-t", 7) == result
    assert app.credits() == [7]


@pytest.mark.backends("sqlite", "postgresql")
def test_a_datasource_elsewhere_is_refused(db_url: str, tmp_path: Path) -> None:
    """Its transaction would commit the tool's writes apart from the ledger's outcome:
    GatedSteps refuses it, naming no URL. A SQLite ledger has no such composition."""
    from dbos import DBOS, SQLAlchemyDatasource

    from agent_gate import GateUsageError
    from agent_gate.integrations.dbos import GatedSteps

    # Datasources register with the process's DBOS, which refuses them once launched:
    # an instance of this test's own, not launched, whatever ran before in this worker.
    DBOS(config={"name": "agent-gate-ds-refusal", "log_level": "WARNING",
                 "system_database_url": f"sqlite:///{tmp_path / 'dbos.sqlite'}"})
    elsewhere = SQLAlchemyDatasource.create(f"sqlite:///{tmp_path / 'app.sqlite'}")
    try:
        with Gate(ToolRegistry(), db_url) as gate:
            with pytest.raises(GateUsageError, match="ledger's own PostgreSQL") as caught:
                GatedSteps(gate, datasource=elsewhere)
            assert "sqlite" not in str(caught.value) and "postgres@" not in str(caught.value)
            if db_url.startswith("postgresql"):
                same = SQLAlchemyDatasource.create(db_url, schema=f"ds_{uuid.uuid4().hex[:8]}")
                try:
                    assert GatedSteps(gate, datasource=same).datasource is same
                finally:
                    with same.engine.begin() as conn:
                        conn.execute(text(f'DROP SCHEMA "{same.schema}" CASCADE'))
                    same.engine.dispose()
    finally:
        elsewhere.engine.dispose()
        DBOS.destroy(destroy_registry=False)


def test_a_transaction_retried_in_the_same_process_runs_the_call_once_more(
    db_url: str, pg_admin: Engine
) -> None:
    """What a DBOS datasource transaction retried in process meets (its commit failed,
    rolled back whole): the call ``executing`` under this live process's claim. The
    step's wait (``execute_when_free``) outlasts the lease, and the call then runs once
    more: one row, ``succeeded`` at attempt 2."""
    from agent_gate.gate.transactional import current_transaction, joining
    from agent_gate.integrations.engines import execute_when_free

    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write", transactional=True)
    def credit_one() -> str:
        current_transaction().execute(text("INSERT INTO engine_credits (amount) VALUES (1)"))
        return "ok"

    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE engine_credits (amount INTEGER NOT NULL)"))
    call = {"call_id": "c", "name": "credit_one", "arguments": {}}
    try:
        with Gate(tools, db_url, lease_seconds=0.5) as gate:
            with engine.connect() as conn, conn.begin() as txn, joining(conn):
                assert execute_when_free(gate, "t", call, patience=0).state is CallState.SUCCEEDED
                txn.rollback()  # as a failed commit of DBOS's transaction leaves it
            with engine.connect() as conn, conn.begin(), joining(conn):
                again = execute_when_free(gate, "t", call, patience=2 * gate.lease_ms / 1000)
        assert (again.state, again.attempt, again.replayed) == (CallState.SUCCEEDED, 2, False)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM engine_credits")).scalar() == 1
    finally:
        engine.dispose()

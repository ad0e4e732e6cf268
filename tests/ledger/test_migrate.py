"""The schema comes only from Alembic, on first use or via `agent-gate db upgrade`."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from support import WORKERS

from agent_gate.ledger import Ledger, LedgerConfigError, LedgerSchemaError
from agent_gate.ledger.backend import begin_write, create_ledger_engine
from agent_gate.ledger.migrate import HEAD, alembic_config, head_revision
from agent_gate.ledger.models import metadata

WORKER = WORKERS / "ledger_worker.py"

# The embedded default's own behaviour (first-use upgrade, pragmas, the file itself);
# tests/ledger/test_migrate_postgres.py covers the same ground on PostgreSQL.
pytestmark = pytest.mark.backends("sqlite")


def sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite:///")


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A path with no file yet: these tests are about what first use does to it."""
    return f"sqlite:///{tmp_path / 'ledger.db'}"


def test_fresh_file_is_upgraded_on_first_use_with_durable_pragmas(db_url: str) -> None:
    ledger = Ledger(db_url, create=True)
    try:
        with ledger.engine.connect() as conn:
            pragma = {
                p: conn.exec_driver_sql(f"PRAGMA {p}").scalar()
                for p in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
            }
    finally:
        ledger.close()
    assert pragma == {"journal_mode": "wal", "synchronous": 2, "foreign_keys": 1,
                      "busy_timeout": 30000}
    with sqlite3.connect(sqlite_path(db_url)) as raw:
        version = raw.execute("SELECT version_num FROM alembic_version").fetchall()
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert version == [(head_revision(),)]
    assert {"tasks", "tool_calls", "audit_events", "alembic_version"} <= tables


def test_models_and_migrations_agree(db_url: str) -> None:
    ledger = Ledger(db_url, create=True)
    try:
        with ledger.engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(ctx, metadata) == []
    finally:
        ledger.close()


def test_downgrade_and_upgrade_round_trip(db_url: str) -> None:
    Ledger(db_url, create=True).close()
    engine = create_ledger_engine(db_url)
    try:
        with begin_write(engine) as conn:
            command.downgrade(alembic_config(conn), "base")
        with sqlite3.connect(sqlite_path(db_url)) as raw:
            left = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert left == {"alembic_version"}
        with begin_write(engine) as conn:
            command.upgrade(alembic_config(conn), "head")
    finally:
        engine.dispose()
    Ledger(db_url).close()


def test_foreign_keys_are_enforced(db_url: str) -> None:
    ledger = Ledger(db_url, create=True)
    try:
        from sqlalchemy.exc import IntegrityError

        with pytest.raises(IntegrityError), begin_write(ledger.engine) as conn:
            conn.exec_driver_sql(
                "INSERT INTO audit_events (at, task_id, call_row_id, event) "
                "VALUES ('2024-01-01', 't', 999, 'x')"
            )
    finally:
        ledger.close()


def test_no_auto_upgrade_names_the_command(db_url: str) -> None:
    with pytest.raises(LedgerSchemaError, match="run `agent-gate db upgrade --db sqlite:///"):
        Ledger(db_url, auto_upgrade=False, create=True)


def test_unknown_revision_is_refused(db_url: str) -> None:
    Ledger(db_url, create=True).close()
    with sqlite3.connect(sqlite_path(db_url)) as raw:
        raw.execute("UPDATE alembic_version SET version_num = 'from_the_future'")
    with pytest.raises(LedgerSchemaError, match="does not know"):
        Ledger(db_url)


def test_tables_without_alembic_are_refused(db_url: str) -> None:
    with sqlite3.connect(sqlite_path(db_url)) as raw:
        raw.execute("CREATE TABLE tool_calls (id INTEGER PRIMARY KEY)")
    with pytest.raises(LedgerSchemaError, match="no Alembic revision"):
        Ledger(db_url)


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_in_memory_ledger_is_refused(url: str) -> None:
    with pytest.raises(LedgerConfigError, match="in-memory SQLite ledger forgets"):
        Ledger(url)


def test_unsupported_backend_is_refused() -> None:
    with pytest.raises(LedgerConfigError, match="unsupported ledger backend 'mysql'"):
        Ledger("mysql://localhost/x")


def test_env_var_supplies_the_default_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "from_env.db"
    monkeypatch.setenv("AGENT_GATE_DB", f"sqlite:///{path}")
    ledger = Ledger(create=True)
    ledger.close()
    assert ledger.url == f"sqlite:///{path}"
    assert path.exists()


@pytest.mark.slow
def test_many_processes_opening_a_fresh_file_upgrade_it_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "open", url, str(go), f"c{i}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(6)
    ]
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert results == [{"inserted": True, "state": "received"}] * 6
    with sqlite3.connect(sqlite_path(url)) as raw:
        assert raw.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (head_revision(),)
        ]
        assert raw.execute("SELECT count(*) FROM tool_calls").fetchone() == (6,)


def test_head_constant_is_alembic_head() -> None:
    """``migrate.HEAD`` lets a ledger at head open without Alembic; a new revision
    must move it, or every ledger would take the slow path (and this fails)."""
    assert head_revision() == HEAD


def test_a_ledger_behind_head_is_still_upgraded(db_url: str) -> None:
    """The plain-SQL look at the version answers only "at head"; anything else goes
    through Alembic as before."""
    Ledger(db_url, create=True).close()
    with sqlite3.connect(sqlite_path(db_url)) as raw:
        raw.execute("UPDATE alembic_version SET version_num = '0001_ledger'")
    with pytest.raises(LedgerSchemaError, match="at revision '0001_ledger'"):
        Ledger(db_url)

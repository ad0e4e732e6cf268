"""Ledger tests run on every backend: ``db_url`` comes from ``tests/conftest.py``
(a fresh SQLite file, or a fresh PostgreSQL schema at head, per test).

They also run over every implementation of the ledger's one seam (``txn.Txn``,
picked by ``agent_gate.ledger.backend.txn_class``): with ``db_url`` on SQLite and
PostgreSQL, the storage ``core`` is the plain-Core reference on each, and ``fast``
is ``sqlite_fast`` on SQLite and ``pg_pipeline`` on PostgreSQL (a test's id names its
storage and its database; ``test_backend.py`` checks which class each pair gets).
The storage is chosen through ``$AGENT_GATE_LEDGER_BACKEND``, so that worker processes
a test starts use it too. The folders below (backend, views) run over all of them as
well. The modules that test the fast path's own machinery run on it alone;
``test_seam.py`` checks the source, once; the PostgreSQL modules (once
``tests/postgres``) pick their storage themselves, and run once.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from ledger_backends import PgSchema, pg_schema  # on sys.path via tests/conftest.py
from sqlalchemy import Engine

from agent_gate.ledger.backend import BACKENDS, ENV_BACKEND, FAST, default

# The approvals, audit and quota folders drive their flows through the gate and the
# CLI, with the operator tests' fixtures (tests/cli/shared_fixtures.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))

from shared_fixtures import (
    effects_file,
    seal_key_env,
    support_tools,
)

__all__ = ["effects_file", "seal_key_env", "support_tools"]

HERE = Path(__file__).resolve().parent

FAST_ONLY = frozenset({"backend/test_fast.py", "backend/test_prepared.py",
                       "backend/test_spares.py", "backend/test_fast_folded_intake.py",
                       "backend/test_sqlite_fast_fold_faults.py"})
"""Modules about the fast path itself (kept connections, the driver cursor)."""
ONCE = frozenset({"test_seam.py"})
"""Modules that read the source, not a ledger: one storage is as good as another."""
AS_WRITTEN = frozenset({
    "test_store_connection_loss.py", "test_store_race.py", "test_migrate_postgres.py",
    "test_lease_sweep.py", "backend/test_pg_fast_folded_intake.py",
    "backend/test_spares_fork.py", "backend/test_libpq.py",
    "backend/test_pg_pipeline_loss.py", "backend/test_pg_pipeline_round_trips.py",
    "backend/test_pg_pipeline_server_append.py", "backend/test_pg_fast_write_path_faults.py",
})
"""The PostgreSQL modules (once ``tests/postgres``): each names the storage it is
about (``Ledger(url, storage=...)``) where that matters, else takes the default; they
run once, with the storage a process gets when nobody names one."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "ledger_storage" in metafunc.fixturenames:
        name = metafunc.definition.path.resolve().relative_to(HERE).as_posix()
        if name in FAST_ONLY:
            storages = [FAST]
        elif name in ONCE or name in AS_WRITTEN:
            storages = [default()]
        else:
            storages = list(BACKENDS)
        metafunc.parametrize("ledger_storage", storages, indirect=True)


@pytest.fixture(autouse=True)
def ledger_storage(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The storage path every ledger this test opens takes."""
    storage: str = request.param
    monkeypatch.setenv(ENV_BACKEND, storage)
    return storage


@pytest.fixture
def fresh_pg(pg_admin: Engine) -> Iterator[PgSchema]:
    """An empty PostgreSQL schema that nobody has upgraded: what an operator starts
    from (skipped when ``$AGENT_GATE_TEST_POSTGRES_URL`` is unset: ``pg_admin``)."""
    with pg_schema(pg_admin, upgraded=False) as schema:
        yield schema

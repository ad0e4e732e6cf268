"""Ledger tests run on every backend: ``db_url`` comes from ``tests/conftest.py``
(a fresh SQLite file, or a fresh PostgreSQL schema at head, per test).

They also run over every implementation of the ledger's one seam (``txn.Txn``,
picked by ``agent_gate.ledger.backend.txn_class``): with ``db_url`` on SQLite and
PostgreSQL, the storage ``core`` is the plain-Core reference on each, and ``fast``
is ``sqlite_fast`` on SQLite and ``pg_pipeline`` on PostgreSQL (a test's id names its
storage and its database; ``test_backend.py`` checks which class each pair gets).
The storage is chosen through ``$AGENT_GATE_LEDGER_BACKEND``, so that worker processes
a test starts use it too. The folders below (approvals, audit, quota) run over all of
them as well. The modules that test the fast path's own machinery run on it alone;
``test_seam.py`` checks the source, once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

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

FAST_ONLY = frozenset({"test_fast_paths.py", "test_prepared.py", "test_idle_connections.py",
                       "test_folded_intake.py", "test_fold_faults.py"})
"""Modules about the fast path itself (kept connections, the driver cursor)."""
ONCE = frozenset({"test_seam.py"})
"""Modules that read the source, not a ledger: one storage is as good as another."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "ledger_storage" in metafunc.fixturenames:
        name = metafunc.definition.path.name
        if name in FAST_ONLY:
            storages = [FAST]
        elif name in ONCE:
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

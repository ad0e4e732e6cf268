"""Ledger tests run on every backend: ``db_url`` comes from ``tests/conftest.py``
(a fresh SQLite file, or a fresh PostgreSQL schema at head, per test).

They also run over both storage paths (``agent_gate.ledger.backend``): the plain
SQLAlchemy Core reference and the fast driver-level one, chosen through
``$AGENT_GATE_LEDGER_BACKEND`` so that worker processes a test starts use it too.
The modules that test the fast path's own machinery run on it alone, and the flows
in the folders below (approvals, audit, quota: driven through the gate and the CLI)
on the default path: their storage is what the modules here already hold equal.
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


HERE = Path(__file__).resolve().parent


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "ledger_storage" in metafunc.fixturenames:
        path = metafunc.definition.path
        if path.name in FAST_ONLY:
            storages = [FAST]
        elif path.resolve().parent != HERE:
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

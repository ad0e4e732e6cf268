"""Fixtures for the PostgreSQL-specific tests (migrations, connection loss, racing).

Every test here is skipped when ``$AGENT_GATE_TEST_POSTGRES_URL`` is unset (the
``pg_admin`` fixture skips); tests that take ``db_url`` run on the backends their
``backends`` marker names.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from ledger_backends import PgSchema, pg_schema  # on sys.path via tests/conftest.py
from sqlalchemy import Engine

HERE = Path(__file__).parent
sys.path.append(str(HERE))  # race_tools, for the tests and their worker processes


@pytest.fixture
def fresh_pg(pg_admin: Engine) -> Iterator[PgSchema]:
    """An empty schema that nobody has upgraded: what an operator starts from."""
    with pg_schema(pg_admin, upgraded=False) as schema:
        yield schema


@pytest.fixture
def effects_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the race tools append one fsynced line per side effect (outside the
    ledger), inherited by every worker process."""
    path = tmp_path / "effects.log"
    monkeypatch.setenv("AG_EFFECTS", str(path))
    return path

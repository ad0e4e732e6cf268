"""The ledger backends every ledger and gate test runs against.

``db_url`` is parametrized over the backends, so one test body proves the same
guarantee on both:

* ``sqlite``: a fresh database file per test, at head (a copy of the one file per
  process that ``Ledger(create=True)`` upgraded: ``ledger_templates``);
* ``postgresql``: a fresh schema per test inside the database that
  ``$AGENT_GATE_TEST_POSTGRES_URL`` names, brought to head by the same Alembic
  upgrade ``agent-gate db upgrade`` runs (PostgreSQL is never upgraded implicitly;
  after a process's first schema, the statements it sent are replayed:
  ``ledger_templates``), and dropped afterwards. Skipped only when the variable is unset.

Why a schema per test: the suites use fixed task ids ("t", "task"), their worker
processes receive nothing but the URL, and several test runs may share one
server. A schema named by a random token, selected through the URL's
``options=-csearch_path=...``, gives every test (and every process it starts) an
empty ledger of its own without touching the code under test, and is cheaper than a
database per test. The schema's name is also the sessions' ``application_name``, so
teardown (and the connection-loss tests) can find every session a test opened,
including those of its worker processes.

A test about one backend's own behaviour says so: ``@pytest.mark.backends("sqlite")``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine

sys.path.append(str(Path(__file__).parent))  # for ledger_backends (a unique name), support

from ledger_backends import PG_ENV, PgSchema, pg_base_url, pg_schema
from ledger_templates import NewSqliteLedger, SqliteTemplates
from support import measured
from support.slow_check import (  # the hooks that list slow tests without the marker
    pytest_runtest_logreport,
    pytest_runtest_makereport,
    pytest_terminal_summary,
)

BACKENDS = ("sqlite", "postgresql")


__all__ = ["pytest_runtest_logreport", "pytest_runtest_makereport", "pytest_terminal_summary"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "backends(*names): run this test only on these ledger backends"
    )
    # Its hooks share names with slow_check's, so it is a plugin of its own, not imported here.
    config.pluginmanager.register(measured, "agent-gate-measured")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked slow first, each group in its collected order.

    Why: with ``-n`` a worker that finishes early takes tests from the other's queue
    (``--dist worksteal``, pyproject.toml), but a test already running cannot be
    shared; when the long ones start first, the last to finish are short ones.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("backends")
        names = marker.args if marker is not None else BACKENDS
        unknown = set(names) - set(BACKENDS)
        if unknown:
            raise pytest.UsageError(f"unknown ledger backends {sorted(unknown)}")
        metafunc.parametrize("backend", names, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """``sqlite`` or ``postgresql``; the latter skipped when no server is configured."""
    name: str = request.param
    if name == "postgresql" and pg_base_url() is None:
        pytest.skip(f"{PG_ENV} is not set")
    return name


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[Engine]:
    """An autocommit engine on the test database, for creating and dropping schemas."""
    base = pg_base_url()
    if base is None:
        pytest.skip(f"{PG_ENV} is not set")
    engine = create_engine(base, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def pg(backend: str, request: pytest.FixtureRequest) -> Iterator[PgSchema | None]:
    """The test's PostgreSQL schema (at head) when ``backend`` is postgresql, else None."""
    if backend != "postgresql":
        yield None
        return
    admin: Engine = request.getfixturevalue("pg_admin")
    with pg_schema(admin, upgraded=True) as schema:
        yield schema


@pytest.fixture(scope="session")
def new_sqlite_ledger(tmp_path_factory: pytest.TempPathFactory) -> NewSqliteLedger:
    """Puts a new SQLite ledger at head at a path and returns its URL (a copy of this
    process's template: ``ledger_templates``)."""
    return SqliteTemplates(tmp_path_factory.mktemp("ledger-templates")).new


@pytest.fixture
def sqlite_url(tmp_path: Path, new_sqlite_ledger: NewSqliteLedger) -> str:
    """A SQLite ledger file at head, for tests of the embedded default alone, or that
    read or tamper with the file itself."""
    return new_sqlite_ledger(tmp_path / "ledger.db")


@pytest.fixture
def db_url(
    backend: str, pg: PgSchema | None, tmp_path: Path, new_sqlite_ledger: NewSqliteLedger
) -> str:
    """A ledger URL of its own for this test, on each backend in turn."""
    if pg is not None:
        return pg.url
    # Created here, as the PostgreSQL schema is: code under test never creates a
    # ledger it was not told to (Ledger/Gate ``create=True``).
    return new_sqlite_ledger(tmp_path / "ledger.db")

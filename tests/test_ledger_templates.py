"""The suite's new ledgers (``ledger_templates``) are the ones an upgrade makes.

Most ledger tests start from a copied SQLite file or a replayed PostgreSQL upgrade
instead of running Alembic themselves; these tests hold both to what Alembic makes,
and show that the comparison the replay is checked with sees a difference.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from ledger_backends import pg_schema
from ledger_templates import NewSqliteLedger, catalog, record_upgrade, replay
from sqlalchemy import Engine

from agent_gate.ledger import Ledger
from agent_gate.ledger.backend import BACKENDS, ENV_BACKEND


def contents(path: Path) -> tuple[set[tuple[str, ...]], dict[str, list[tuple[object, ...]]]]:
    """A SQLite file's schema entries and every table's rows."""
    with sqlite3.connect(path) as conn:
        schema = set(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
        rows = {
            name: conn.execute(f'SELECT * FROM "{name}"').fetchall()
            for (kind, name, _table, _sql) in schema
            if kind == "table"
        }
    return schema, rows


@pytest.mark.parametrize("storage", BACKENDS)
def test_a_new_sqlite_ledger_is_the_file_an_upgrade_makes(
    storage: str, tmp_path: Path, new_sqlite_ledger: NewSqliteLedger,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV_BACKEND, storage)
    upgraded = tmp_path / "upgraded.db"
    Ledger(f"sqlite:///{upgraded}", create=True).close()
    for name in ("first.db", "second.db"):  # the template's first use, and a copy of it
        url = new_sqlite_ledger(tmp_path / name)
        assert url == f"sqlite:///{tmp_path / name}"
        assert contents(tmp_path / name) == contents(upgraded)
        with Ledger(url) as ledger:  # opens as it is, at head
            assert ledger.calls() == []


def test_a_replayed_postgresql_upgrade_is_the_schema_alembic_makes(pg_admin: Engine) -> None:
    with pg_schema(pg_admin, upgraded=False) as upgraded:
        recipe = record_upgrade(pg_admin, upgraded.url, upgraded.name)
        with pg_schema(pg_admin, upgraded=False) as replayed:
            replay(pg_admin, replayed.name, recipe.statements)
            with pg_admin.connect() as conn:
                assert catalog(conn, replayed.name) == recipe.catalog
            with Ledger(replayed.url) as ledger:
                assert ledger.calls() == []
        # What the check after a process's first replay compares would see a statement
        # that did not replay: here, the last index Alembic created.
        index = max(
            i for i, (statement, _) in enumerate(recipe.statements)
            if statement.startswith("CREATE INDEX")
        )
        with pg_schema(pg_admin, upgraded=False) as partial:
            replay(pg_admin, partial.name, [
                s for i, s in enumerate(recipe.statements) if i != index
            ])
            with pg_admin.connect() as conn:
                missing = set(recipe.catalog) - set(catalog(conn, partial.name))
    assert [kind for kind, *_ in missing] == ["index"]

"""New ledgers at head for tests, made by Alembic once per process and then copied.

Why: more than a thousand tests start from an empty ledger at head, and bringing one
there runs every Alembic revision: about 0.1 s of CPU for a SQLite file, and for a
PostgreSQL schema the same in Alembic plus the server's DDL. On a 2-core machine that
was a sixth of the suite's time.

* SQLite: the first ledger a process needs is made by ``Ledger(url, create=True)``, as
  before; every later one is a copy of that file. A fresh file at head holds nothing but
  its schema and its ``alembic_version`` row, so the copy is the ledger a new upgrade
  would have made (the order of ``sqlite_master`` rows may differ between processes,
  as it does between two upgrades in two processes).
* PostgreSQL: the first schema a process needs is upgraded by Alembic, with every
  statement it sends recorded; every later schema gets those statements again, in one
  transaction, as Alembic sent them (no statement names a schema: each runs on the
  schema its ``search_path`` selects). The first replayed schema is compared with the
  upgraded one, catalog entry by catalog entry, so a revision that replays differently
  fails loudly instead of giving tests another schema.

Both are kept per storage path (``agent_gate.ledger.backend.default()``, which tests
choose through ``$AGENT_GATE_LEDGER_BACKEND``), because it is the upgrade's engine's.
Tests about creating or upgrading a ledger make theirs themselves.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, event, text

from agent_gate.ledger import Ledger
from agent_gate.ledger.backend import create_ledger_engine
from agent_gate.ledger.backend import default as default_storage
from agent_gate.ledger.migrate import upgrade

NewSqliteLedger = Callable[[Path], str]
"""Puts a new ledger at head at a path; returns its URL."""


class SqliteTemplates:
    """One migrated SQLite file per storage path, copied for each test that needs one."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._files: dict[str, Path] = {}

    def new(self, path: Path) -> str:
        storage = default_storage()
        template = self._files.get(storage)
        if template is None:
            template = self._directory / f"{storage}.db"
            Ledger(f"sqlite:///{template}", create=True).close()
            self._files[storage] = template
        shutil.copyfile(template, path)
        return f"sqlite:///{path}"


Statement = tuple[str, Any]


class Recipe:
    """The statements one Alembic upgrade to head sent, and the catalog it left."""

    def __init__(self, statements: Sequence[Statement], catalog: list[tuple[str, ...]]) -> None:
        self.statements = statements
        self.catalog = catalog
        self.checked = False


_recipes: dict[str, Recipe] = {}


def _plain(parameters: Any) -> Any:
    """Recorded parameters as the driver takes them again (immutable mappings copied)."""
    if isinstance(parameters, Mapping):
        return dict(parameters)
    if isinstance(parameters, list):
        return [_plain(p) for p in parameters]
    return parameters


def catalog(conn: Connection, schema: str) -> list[tuple[str, ...]]:
    """Everything an upgrade puts in ``schema``, with the schema's name taken out:
    columns, constraints, indexes, functions, sequences and the Alembic revision."""
    rows = conn.execute(
        text(
            """
            SELECT 'column', c.table_name || '.' || c.column_name,
                   concat_ws(' ', c.ordinal_position, c.data_type, c.character_maximum_length,
                             c.is_nullable, c.column_default)
              FROM information_schema.columns c WHERE c.table_schema = :schema
            UNION ALL
            SELECT 'constraint', t.relname || '.' || k.conname, pg_get_constraintdef(k.oid)
              FROM pg_constraint k JOIN pg_class t ON t.oid = k.conrelid
             WHERE k.connamespace = CAST(:schema AS regnamespace)
            UNION ALL
            SELECT 'index', i.indexname, i.indexdef FROM pg_indexes i
             WHERE i.schemaname = :schema
            UNION ALL
            SELECT 'function', p.proname, pg_get_functiondef(p.oid) FROM pg_proc p
             WHERE p.pronamespace = CAST(:schema AS regnamespace)
            UNION ALL
            SELECT 'sequence', s.sequencename,
                   concat_ws(' ', s.data_type, s.start_value, s.increment_by, s.last_value)
              FROM pg_sequences s WHERE s.schemaname = :schema
            """
        ),
        {"schema": schema},
    ).all()
    revision = conn.execute(text(f'SELECT version_num FROM "{schema}".alembic_version')).all()
    found = [tuple(str(v).replace(schema, "<schema>") for v in row) for row in rows]
    found += [("revision", str(r[0])) for r in revision]
    return sorted(found)


def upgrade_pg_schema(admin: Engine, url: str, schema: str) -> None:
    """Bring the empty ``schema`` (``url``'s ``search_path``) to head: through Alembic
    the first time in a process (for its storage path), by replaying it after that."""
    storage = default_storage()
    recipe = _recipes.get(storage)
    if recipe is None:
        _recipes[storage] = record_upgrade(admin, url, schema)
        return
    replay(admin, schema, recipe.statements)
    if not recipe.checked:
        with admin.connect() as conn:
            replayed = catalog(conn, schema)
        assert replayed == recipe.catalog, (
            "replaying the Alembic upgrade gave another schema than the upgrade did: "
            f"{sorted(set(replayed) ^ set(recipe.catalog))}"
        )
        recipe.checked = True


def replay(admin: Engine, schema: str, statements: Sequence[Statement]) -> None:
    """``statements`` again, in one transaction, on the schema ``schema``."""
    with admin.connect() as conn:
        conn.execution_options(isolation_level="READ COMMITTED")
        with conn.begin():
            conn.exec_driver_sql(f"SET LOCAL search_path TO {schema}")
            conn.exec_driver_sql("SET LOCAL synchronous_commit TO off")  # a throwaway schema
            for statement, parameters in statements:
                conn.exec_driver_sql(statement, parameters)


def record_upgrade(admin: Engine, url: str, schema: str) -> Recipe:
    """Alembic's upgrade of the empty ``schema`` to head, with what it sent and left."""
    statements: list[Statement] = []

    def sent(
        conn: Connection, cursor: Any, statement: str, parameters: Any, context: Any,
        executemany: bool,
    ) -> None:
        statements.append((statement, _plain(parameters) or None))

    engine = create_ledger_engine(url)
    event.listen(engine, "before_cursor_execute", sent)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    named = [s for s, p in statements if schema in s or schema in repr(p)]
    assert not named, f"the upgrade named its schema, so it cannot be replayed: {named}"
    with admin.connect() as conn:
        return Recipe(statements, catalog(conn, schema))

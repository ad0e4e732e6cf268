"""Alembic environment for the agent-gate ledger.

Two ways in: agent-gate's own upgrade (``agent_gate.ledger.migrate``) hands over an
open connection that already holds the write lock, so that several processes
opening the same fresh database upgrade it exactly once; the ``alembic`` command
line gets a URL and this module opens that same kind of connection itself.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from agent_gate.ledger.backend import begin_write, create_ledger_engine
from agent_gate.ledger.backend.dialect import resolve_url
from agent_gate.ledger.migrate import MIGRATION_LOCK
from agent_gate.ledger.models import metadata
from agent_gate.ledger.sql import lock_named

config = context.config


def _url() -> str:
    return context.get_x_argument(as_dictionary=True).get("db") or resolve_url(
        config.get_main_option("sqlalchemy.url") or None
    )


def _configure(connection: Connection) -> None:
    # Concurrent upgrades of one PostgreSQL database wait for each other (a no-op on
    # SQLite, where the write transaction already excludes other writers).
    lock_named(connection, MIGRATION_LOCK)
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite cannot ALTER most constraints; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=metadata,
        literal_binds=True,
        render_as_batch=_url().startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    if config.config_file_name is not None:
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    engine = create_ledger_engine(_url())
    try:
        with begin_write(engine) as conn:
            _configure(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()

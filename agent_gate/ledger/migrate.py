"""Bringing a database to the schema this code expects, only through Alembic.

The Alembic configuration is built in code rather than read from an ``alembic.ini``
in the current directory, so ``agent-gate db upgrade`` and the first-use upgrade
work from any working directory. The revisions are looked up first inside the
package (``agent_gate/_migrations``, where a wheel ships them) and then in the
source tree's top-level ``migrations/`` next to the package.

An upgrade runs inside one write transaction on a connection handed to Alembic:
two processes that open the same fresh SQLite file at once serialize on the write
lock, and the second finds the schema at head and does nothing. On PostgreSQL the
transaction first takes the advisory lock ``MIGRATION_LOCK`` (``sql.lock_named``),
so two ``agent-gate db upgrade`` runs (or two workers started with
``auto_upgrade=True``) against one database serialize the same way; PostgreSQL's
DDL is transactional, so an upgrade that fails leaves the schema as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text

from agent_gate.errors import LedgerSchemaError
from agent_gate.ledger.backend import begin_read, begin_write
from agent_gate.ledger.sql import lock_named
from agent_gate.telemetry import MIGRATE_LOG

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic (with Mako and Pygments under it) is imported by the functions that need it,
# never by opening a ledger that is already at ``HEAD``: that is every operator
# command's start, and Alembic is the largest part of it.

__all__ = [
    "HEAD",
    "MIGRATION_LOCK",
    "LedgerSchemaError",
    "alembic_config",
    "current_revision",
    "ensure_schema",
    "head_revision",
    "script_location",
    "upgrade",
]


_LEDGER_TABLES = frozenset({"tasks", "tool_calls", "audit_events"})

HEAD = "0018_folded_checkpoint_heads"
"""The revision this version of agent-gate writes: the head of ``migrations/``. Named
here so that opening a ledger at head is one plain query; a test holds it to Alembic's
own head, so a new revision that forgets to move it fails loudly."""

MIGRATION_LOCK = "migrate"
"""The ``lock_named`` name every schema change holds (also taken by ``migrations/env.py``
when Alembic's own command line runs the revisions)."""


@contextmanager
def quiet_alembic() -> Iterator[None]:
    """Alembic's own INFO lines ("Context impl SQLiteImpl.", "Running upgrade ...")
    kept from a host's handlers while agent-gate drives it, unless asked for.

    Why: once an application configures logging, every first ``Gate()`` of a fresh
    file printed them. Asking for them: a level set on the ``alembic`` logger by the
    host, or DEBUG on ``agent_gate.ledger.migrate``; either way this leaves
    Alembic's logging alone. The level is put back as it was found.
    """
    alembic_log = logging.getLogger("alembic")
    if alembic_log.level != logging.NOTSET or MIGRATE_LOG.isEnabledFor(logging.DEBUG):
        yield
        return
    alembic_log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        alembic_log.setLevel(logging.NOTSET)


def script_location() -> Path:
    """Where the Alembic environment lives, for an installed wheel or a checkout."""
    # This file is agent_gate/ledger/migrate.py: the package is two levels up (found
    # by path, not by importing the package root, which would point an arrow upward).
    package_dir = Path(__file__).resolve().parent.parent
    for candidate in (package_dir / "_migrations", package_dir.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise LedgerSchemaError(
        "cannot find the ledger migrations: looked in "
        f"{package_dir / '_migrations'} and {package_dir.parent / 'migrations'}"
    )


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    with quiet_alembic():
        from alembic.script import ScriptDirectory

        head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the repository always has revisions
        raise LedgerSchemaError("the ledger migrations have no head revision")
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at; ``None`` for a database Alembic never touched."""
    with quiet_alembic():
        from alembic.runtime.migration import MigrationContext

        # reuse=False: Alembic's context stays referenced (by its event hooks) after use.
        with begin_read(engine, reuse=False) as conn:
            return MigrationContext.configure(conn).get_current_revision()


def _at_head(conn: Connection) -> bool:
    """Is the database stamped with ``HEAD`` alone? Plain SQL, no Alembic: any other
    answer (no version table, another revision, several rows) takes the full check."""
    if not inspect(conn).has_table("alembic_version"):
        return False
    rows = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    return [row[0] for row in rows] == [HEAD]


def _check_adoptable(conn: Connection, current: str | None) -> None:
    if current is None and set(inspect(conn).get_table_names()) & _LEDGER_TABLES:
        raise LedgerSchemaError(
            "the database has ledger tables but no Alembic revision; refusing to guess"
        )


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str | None]:
    """Upgrade under the write lock; returns (revision before, revision after).

    Everything is decided again under the lock: another process may have upgraded
    between our look and our turn, and then there is nothing left to do.
    """
    with quiet_alembic():
        from alembic import command
        from alembic.runtime.migration import MigrationContext

        with begin_write(engine, reuse=False) as conn:
            lock_named(conn, MIGRATION_LOCK)
            before = MigrationContext.configure(conn).get_current_revision()
            _check_adoptable(conn, before)
            command.upgrade(alembic_config(conn), revision)
            after = MigrationContext.configure(conn).get_current_revision()
    if before != after and MIGRATE_LOG.isEnabledFor(logging.INFO):
        MIGRATE_LOG.info(
            "ledger %s upgraded from %s to %s",
            engine.url.render_as_string(hide_password=True), before or "(empty)", after,
            extra={"from_revision": before, "to_revision": after},
        )
    return before, after


def ensure_schema(engine: Engine, *, auto_upgrade: bool | None = None) -> None:
    """Make sure the ledger's tables are at head before the first call is recorded.

    ``auto_upgrade=None`` (the default) upgrades only a *fresh* SQLite file: the
    embedded case, where nobody else could have run ``agent-gate db upgrade``
    first. A database at an older revision, or any fresh non-SQLite database, is an
    error naming the command to run, because upgrading a shared ledger under
    running workers is an operator's decision. ``True`` upgrades whatever is behind;
    ``False`` never upgrades.
    """
    with begin_read(engine) as conn:
        if _at_head(conn):
            return
    with quiet_alembic():
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory

        head = head_revision()
        with begin_read(engine, reuse=False) as conn:  # one snapshot: version and tables
            current = MigrationContext.configure(conn).get_current_revision()
            if current != head:
                _check_adoptable(conn, current)
        if current == head:
            return
        known = {
            s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()
        }
    if current is not None and current not in known:
        raise LedgerSchemaError(
            f"the ledger is at revision {current!r}, which this version of agent-gate "
            "does not know (written by a newer version?)"
        )
    fresh = current is None
    sqlite_fresh = fresh and engine.dialect.name == "sqlite"
    if auto_upgrade or (auto_upgrade is None and sqlite_fresh):
        upgrade(engine)
        return
    url = engine.url.render_as_string(hide_password=True)
    state = "empty" if fresh else f"at revision {current!r}, head is {head!r}"
    raise LedgerSchemaError(f"the ledger is {state}: run `agent-gate db upgrade --db {url}`")

"""PostgreSQL schemas for tests: one throwaway ledger per test, found by name.

Shared by ``tests/conftest.py`` (the ``db_url`` fixture) and the PostgreSQL tests'
worker processes. See ``tests/conftest.py`` for why a schema per test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import OperationalError

PG_ENV = "AGENT_GATE_TEST_POSTGRES_URL"
SCHEMA_PREFIX = "agt_"
DEADLOCK_DETECTED = "40P01"
DROP_ATTEMPTS = 5


def pg_base_url() -> URL | None:
    """The PostgreSQL database tests may use, or None when none is configured."""
    raw = os.environ.get(PG_ENV)
    return make_url(raw) if raw else None


class PgSchema:
    """One throwaway schema: its name, and a ledger URL whose sessions live in it."""

    def __init__(self, admin: Engine) -> None:
        base = pg_base_url()
        assert base is not None
        self.admin = admin
        self.name = f"{SCHEMA_PREFIX}{uuid.uuid4().hex[:16]}"
        query = dict(base.query)
        theirs = query.get("options")
        options = f"-csearch_path={self.name}"
        query["options"] = f"{theirs} {options}" if isinstance(theirs, str) else options
        query["application_name"] = self.name
        self.url = base.set(query=query).render_as_string(hide_password=False)

    def create(self) -> None:
        with self.admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE SCHEMA {self.name}")

    def upgrade(self) -> None:
        """Head: through Alembic, as ``agent-gate db upgrade`` does it, the first time
        in a process; after that by replaying what it sent (``ledger_templates``)."""
        from ledger_templates import upgrade_pg_schema

        upgrade_pg_schema(self.admin, self.url, self.name)

    def backend_pids(self) -> list[int]:
        """Every server session opened through this schema's URL, by any process."""
        with self.admin.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = :name "
                    "AND pid <> pg_backend_pid()"
                ),
                {"name": self.name},
            )
            return [int(r[0]) for r in rows]

    def terminate_sessions(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = :name AND pid <> pg_backend_pid()"
                ),
                {"name": self.name},
            )

    def drop(self) -> None:
        # Sessions left open (an unclosed Ledger, a SIGKILLed worker whose backend
        # has not noticed yet) would make DROP wait for their locks. A session that
        # starts between the two (a timed-out tool's thread, released at teardown,
        # recording its late outcome) can deadlock with the DROP, and PostgreSQL may
        # cancel the DROP: then its sessions are ended again and the DROP retried.
        for attempt in range(DROP_ATTEMPTS):
            self.terminate_sessions()
            try:
                with self.admin.connect() as conn:
                    conn.exec_driver_sql("SET lock_timeout = '20s'")
                    conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {self.name} CASCADE")
                return
            except OperationalError as exc:
                deadlock = getattr(exc.orig, "sqlstate", None) == DEADLOCK_DETECTED
                if not deadlock or attempt == DROP_ATTEMPTS - 1:
                    raise


@contextmanager
def pg_schema(admin: Engine, *, upgraded: bool) -> Iterator[PgSchema]:
    schema = PgSchema(admin)
    schema.create()
    try:
        if upgraded:
            schema.upgrade()
        yield schema
    finally:
        schema.drop()

"""A test's schema is dropped even when PostgreSQL cancels the first DROP as a deadlock.

What happened in a run: a timed-out tool's thread, released at teardown, recorded its
late outcome while ``PgSchema.drop`` ran; the two waited on each other's table locks,
PostgreSQL cancelled the DROP, and the test errored at teardown. Which of two
deadlocked sessions PostgreSQL cancels is its own choice, so the deadlock is played
here by the server's own error, raised for the first DROP statement.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from ledger_backends import PgSchema, pg_base_url  # on sys.path via tests/conftest.py
from sqlalchemy import Engine, create_engine, event, text


@pytest.fixture
def admin(pg_admin: Engine) -> Iterator[Engine]:
    """An admin engine of this test's own, so that its listener stays here."""
    engine = create_engine(pg_base_url(), isolation_level="AUTOCOMMIT")  # type: ignore[arg-type]
    try:
        yield engine
    finally:
        engine.dispose()


def test_a_drop_cancelled_as_a_deadlock_is_tried_again(admin: Engine) -> None:
    schema = PgSchema(admin)
    schema.create()
    drops: list[str] = []

    def cancel_the_first_drop(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        if statement.startswith("DROP SCHEMA"):
            drops.append(statement)
            if len(drops) == 1:
                raise psycopg.errors.DeadlockDetected("deadlock detected")

    event.listen(admin, "before_cursor_execute", cancel_the_first_drop)
    schema.drop()
    assert len(drops) == 2
    with admin.connect() as conn:
        left = conn.execute(
            text("SELECT count(*) FROM pg_namespace WHERE nspname = :name"),
            {"name": schema.name},
        ).scalar()
    assert left == 0


def test_other_errors_of_the_drop_are_not_retried(admin: Engine) -> None:
    schema = PgSchema(admin)
    schema.create()
    drops: list[str] = []

    def refuse(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        if statement.startswith("DROP SCHEMA"):
            drops.append(statement)
            raise psycopg.errors.LockNotAvailable("lock timeout")

    event.listen(admin, "before_cursor_execute", refuse)
    with pytest.raises(Exception, match="lock timeout"):
        schema.drop()
    event.remove(admin, "before_cursor_execute", refuse)
    schema.drop()
    assert len(drops) == 1

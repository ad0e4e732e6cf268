"""A PostgreSQL database of one benchmark run: a name no other run uses, dropped after.

Benchmarks that created a fixed database (``agent_gate_rt_bench``,
``agent_gate_bench``, ``agent_gate_peers``) dropped it first, so two runs at once (two
engineers, or CI beside a bench) dropped each other's database mid-measurement.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

ADMIN = "postgresql://postgres@127.0.0.1:5432"
"""The server's admin URL without a database; ``AGENT_GATE_BENCH_POSTGRES`` overrides."""


def admin_url() -> str:
    return os.environ.get("AGENT_GATE_BENCH_POSTGRES", ADMIN).rstrip("/")


@contextmanager
def scratch_database(prefix: str) -> Iterator[str | None]:
    """Yield the libpq URL of a new database named ``<prefix>_<pid>_<random>``, or None
    when psycopg or the server is missing; the database is dropped on the way out."""
    try:
        import psycopg
    except ImportError:
        yield None
        return
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(3)}"
    admin = f"{admin_url()}/postgres?connect_timeout=3"
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error:
        yield None
        return
    try:
        yield f"{admin_url()}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sqlalchemy_url(url: str) -> str:
    """The same database as a SQLAlchemy URL on the psycopg 3 driver."""
    return url.replace("postgresql://", "postgresql+psycopg://", 1)

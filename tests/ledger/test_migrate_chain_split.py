"""Revision 0006 on both backends: a ledger holding one global chain (format 1) is
split into per-task chains, and what was exported before the upgrade still counts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from ledger_backends import pg_schema
from sqlalchemy import Engine, text
from support.audit_tamper import reseal

from agent_gate.ledger import Ledger
from agent_gate.ledger.backend import begin_write, create_ledger_engine
from agent_gate.ledger.chain import HEADS_MOVED
from agent_gate.ledger.checkpoints import take, write
from agent_gate.ledger.migrate import alembic_config

OLD = "0005_listing_indexes"
TASKS = ("a", "b", "a", "b", "b", "a")
"""The task of each pre-upgrade entry, in id order: two tasks interleaved."""


@pytest.fixture
def blank_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A database nobody has upgraded yet, on each backend."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    admin: Engine = request.getfixturevalue("pg_admin")
    with pg_schema(admin, upgraded=False) as schema:
        yield schema.url


def upgrade_to(url: str, revision: str) -> None:
    engine = create_ledger_engine(url)
    try:
        with begin_write(engine) as conn:
            command.upgrade(alembic_config(conn), revision)
    finally:
        engine.dispose()


def downgrade_to(url: str, revision: str) -> None:
    engine = create_ledger_engine(url)
    try:
        with begin_write(engine) as conn:
            command.downgrade(alembic_config(conn), revision)
    finally:
        engine.dispose()


def rows(url: str, sql: str) -> list[tuple[object, ...]]:
    engine = create_ledger_engine(url)
    try:
        with begin_write(engine) as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()


@pytest.fixture
def old_ledger(blank_url: str) -> dict[int, str]:
    """A ledger at 0005 whose six entries form one global chain; returns the hash at
    each of its positions (what an operator may have exported as an anchor)."""
    upgrade_to(blank_url, "0001_ledger")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    engine = create_ledger_engine(blank_url)
    try:
        with begin_write(engine) as conn:
            for task in sorted(set(TASKS)):
                conn.execute(text("INSERT INTO tasks (id, created_at, updated_at) VALUES "
                                  "(:id, :at, :at)"), {"id": task, "at": start})
            for i, task in enumerate(TASKS):
                conn.execute(
                    text("INSERT INTO audit_events (at, task_id, event, detail) "
                         "VALUES (:at, :task, :event, :detail)"),
                    {"at": start + timedelta(seconds=i, microseconds=i * 7), "task": task,
                     "event": f"e{i}", "detail": json.dumps({"i": i})},
                )
    finally:
        engine.dispose()
    upgrade_to(blank_url, OLD)  # 0002 links them into one chain
    chain = dict(rows(blank_url, "SELECT seq, hash FROM audit_events ORDER BY id"))  # type: ignore[arg-type]
    assert rows(blank_url, "SELECT seq, hash FROM audit_chain") == [(6, chain[6])]
    return chain  # type: ignore[return-value]


def test_the_global_chain_is_split_by_task_and_its_head_kept(
    blank_url: str, old_ledger: dict[int, str]
) -> None:
    upgrade_to(blank_url, "head")
    assert rows(blank_url, "SELECT task_id, seq FROM audit_events ORDER BY id") == [
        ("a", 1), ("b", 1), ("a", 2), ("b", 2), ("b", 3), ("a", 3)]
    with Ledger(blank_url) as ledger:
        report = ledger.verify_audit()
        assert report.ok, report.to_dict()
        assert (report.entries, report.tasks) == (6, 2)
        first = report.checkpoint
        assert first is not None and first.id == 1 and first.tasks == 2
        assert (first.legacy_seq, first.legacy_hash) == (6, old_ledger[6])
        # Anchors exported before the upgrade: any position of the old chain.
        for seq in (6, 3, 1):
            assert ledger.verify_audit(anchor=(seq, old_ledger[seq])).ok
        assert ledger.verify_audit(anchor=(3, old_ledger[4])).problem.kind == "anchor"  # type: ignore[union-attr]
        # The ledger goes on: new entries, a new checkpoint linked to the upgrade's.
        ledger.ensure_task("c")
        ledger.record_terminal("a", "completed")
        second = take(ledger.engine)
        # The upgrade's checkpoint bound every head; the next, written since revision
        # 0018, binds the two that moved ("a" and the new "c"), and verify reads both.
        assert (second.id, second.prev_hash, second.tasks) == (2, first.hash, 2)
        assert (first.heads_format, second.heads_format) == (None, HEADS_MOVED)
        report = ledger.verify_audit(anchor=(6, old_ledger[6]))
        assert report.ok and report.entries == 8 and report.checkpoint == second
    assert rows(blank_url, "SELECT seq FROM audit_heads ORDER BY task_id") == [(4,), (3,), (1,)]


def test_pre_upgrade_entries_rewritten_with_every_hash_are_still_caught(
    blank_url: str, old_ledger: dict[int, str]
) -> None:
    """An attacker edits an old entry and hashes every chain and checkpoint again,
    keeping the recorded old head: the old chain (format 1) no longer reaches it."""
    upgrade_to(blank_url, "head")
    with Ledger(blank_url) as ledger:
        with begin_write(ledger.engine) as conn:
            conn.execute(text("UPDATE audit_events SET actor = 'someone-else' WHERE id = 2"))
            reseal(conn)
            conn.execute(text("DELETE FROM audit_checkpoint_heads"))
            conn.execute(text("DELETE FROM audit_checkpoints"))
            write(conn, legacy=(6, old_ledger[6], 6))
        problem = ledger.verify_audit().problem
        assert problem is not None and problem.kind == "legacy"
        assert "no longer hash to the old chain's head #6" in problem.message
        # Without the recorded old head, only an anchor from before the upgrade tells.
        with begin_write(ledger.engine) as conn:
            conn.execute(text("DELETE FROM audit_checkpoint_heads"))
            conn.execute(text("DELETE FROM audit_checkpoints"))
            write(conn)
        assert ledger.verify_audit().ok
        assert ledger.verify_audit(anchor=(1, old_ledger[1])).problem.kind == "anchor"  # type: ignore[union-attr]


def test_an_old_chain_broken_before_the_upgrade_stays_broken(
    blank_url: str, old_ledger: dict[int, str]
) -> None:
    """The upgrade records the old head as stored, not recomputed: it never launders."""
    engine = create_ledger_engine(blank_url)
    try:
        with begin_write(engine) as conn:
            conn.execute(text("UPDATE audit_events SET event = 'forged' WHERE id = 4"))
    finally:
        engine.dispose()
    upgrade_to(blank_url, "head")
    with Ledger(blank_url) as ledger:
        problem = ledger.verify_audit().problem
    assert problem is not None and problem.kind == "legacy"


def test_downgrade_restores_the_global_chain(
    blank_url: str, old_ledger: dict[int, str]
) -> None:
    upgrade_to(blank_url, "head")
    downgrade_to(blank_url, OLD)
    assert rows(blank_url, "SELECT seq, hash FROM audit_chain") == [(6, old_ledger[6])]
    assert dict(rows(blank_url, "SELECT seq, hash FROM audit_events")) == old_ledger  # type: ignore[arg-type]
    upgrade_to(blank_url, "head")
    with Ledger(blank_url) as ledger:
        assert ledger.verify_audit(anchor=(6, old_ledger[6])).ok


def test_an_empty_ledger_gets_no_checkpoint(blank_url: str) -> None:
    upgrade_to(blank_url, "head")
    with Ledger(blank_url) as ledger:
        report = ledger.verify_audit()
    assert report.ok and report.checkpoint is None and report.entries == 0

"""A SQLite ledger never silently starts over.

A worker whose ledger file is deleted or replaced stops committing (``LedgerReplaced``)
instead of writing into a file nobody will read, and a missing file is created only
when asked (``create=True``): otherwise the next process would open an empty ledger
and run every replayed call again.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.calls import Counting, call

from agent_gate import CallState, Gate
from agent_gate.cli import main as cli
from agent_gate.ledger import Ledger, LedgerConfigError, LedgerMissing, LedgerReplaced


def remove_ledger(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


@pytest.fixture
def counting() -> Counting:
    return Counting()


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def open_gate(counting: Counting, ledger_path: Path) -> Iterator[Gate]:
    """A gate on a new ledger file that has run call ``c1`` once."""
    with Gate(counting.tools, f"sqlite:///{ledger_path}", create=True) as gate:
        assert gate.execute("t", call("c1", n="c1")).state is CallState.SUCCEEDED
        assert counting.runs == 1
        yield gate


def test_a_deleted_ledger_file_stops_the_worker_before_the_tool_runs(
    open_gate: Gate, counting: Counting, ledger_path: Path
) -> None:
    remove_ledger(ledger_path)
    with pytest.raises(LedgerReplaced) as stopped:
        open_gate.execute("t", call("c2", n="c2"))
    message = str(stopped.value)
    assert str(ledger_path) in message and "was deleted" in message
    assert "put the ledger file back" in message
    assert counting.runs == 1
    # Replaying the call it already ran is refused too, and reads as well: nothing
    # is answered from, or written to, the unlinked file.
    with pytest.raises(LedgerReplaced):
        open_gate.execute("t", call("c1", n="c1"))
    with pytest.raises(LedgerReplaced):
        open_gate.ledger.get("t", "c1")
    assert counting.runs == 1
    assert not ledger_path.exists()  # the worker did not create a fresh one either
    # And the next process does not start over on an empty ledger.
    with pytest.raises(LedgerMissing, match="create=True"):
        Gate(counting.tools, f"sqlite:///{ledger_path}")
    assert not ledger_path.exists() and counting.runs == 1


def test_a_ledger_file_replaced_by_another_stops_the_worker(
    open_gate: Gate, counting: Counting, ledger_path: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other.db"
    Ledger(f"sqlite:///{other}", create=True).close()
    remove_ledger(ledger_path)
    os.replace(other, ledger_path)
    with pytest.raises(LedgerReplaced, match="was replaced by another file") as stopped:
        open_gate.execute("t", call("c2", n="c2"))
    assert str(ledger_path) in str(stopped.value)
    assert counting.runs == 1
    # Nothing was committed into the file now at the path.
    with sqlite3.connect(ledger_path) as db:
        assert db.execute("SELECT count(*) FROM tool_calls").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM tasks").fetchone() == (0,)


def test_the_ledger_resumes_when_its_file_is_put_back(
    open_gate: Gate, counting: Counting, ledger_path: Path, tmp_path: Path
) -> None:
    moved = tmp_path / "moved.db"
    os.rename(ledger_path, moved)
    with pytest.raises(LedgerReplaced):
        open_gate.execute("t", call("c1", n="c1"))
    os.rename(moved, ledger_path)
    again = open_gate.execute("t", call("c1", n="c1"))
    assert again.state is CallState.SUCCEEDED and again.replayed and counting.runs == 1


def test_a_missing_file_is_created_only_when_asked(tmp_path: Path, counting: Counting) -> None:
    path = tmp_path / "new.db"
    url = f"sqlite:///{path}"
    for open_it in (lambda: Ledger(url), lambda: Gate(counting.tools, url)):
        with pytest.raises(LedgerMissing) as missing:
            open_it()
        assert f"no ledger at {path}" in str(missing.value)
        assert "create=True" in str(missing.value)
        assert not path.exists()
    # An empty file is not a ledger either.
    path.touch()
    with pytest.raises(LedgerMissing, match="an empty file"):
        Ledger(url)
    path.unlink()
    with Gate(counting.tools, url, create=True) as gate:
        assert gate.execute("t", call("c1", n="c1")).state is CallState.SUCCEEDED
    with Gate(counting.tools, url) as gate:  # it exists now: no create needed
        assert gate.execute("t", call("c1", n="c1")).replayed
    assert counting.runs == 1


def test_in_memory_sqlite_is_still_refused(counting: Counting) -> None:
    for url in ("sqlite://", "sqlite:///:memory:"):
        with pytest.raises(LedgerConfigError, match="in-memory"):
            Ledger(url, create=True)


@pytest.mark.backends("postgresql")
def test_postgresql_needs_no_create(db_url: str, counting: Counting) -> None:
    with Gate(counting.tools, db_url) as gate:
        assert gate.execute("t", call("c1", n="c1")).state is CallState.SUCCEEDED


def test_db_current_does_not_create_a_ledger(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    out = CliRunner().invoke(cli, ["db", "current", "--db", f"sqlite:///{path}"])
    assert out.exit_code == 3 and f"no ledger at {path}" in out.output
    assert not path.exists()
    # `db upgrade` is how a new ledger is started from the command line.
    made = CliRunner().invoke(cli, ["db", "upgrade", "--db", f"sqlite:///{path}"])
    assert made.exit_code == 0, made.output
    with Ledger(f"sqlite:///{path}") as ledger:
        assert ledger.calls() == []

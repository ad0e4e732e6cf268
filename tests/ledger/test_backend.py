"""One site picks the storage path; both paths run the same statements alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_gate import _speedups
from agent_gate.errors import AgentGateError
from agent_gate.ledger import Event, Ledger, NewCall, backend
from agent_gate.ledger.backend import begin_write, prepared


def test_the_default_honours_pure_python_and_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(backend.ENV_BACKEND, raising=False)
    monkeypatch.setattr(_speedups, "PURE_PYTHON", True)
    assert backend.default() == backend.CORE
    monkeypatch.setattr(_speedups, "PURE_PYTHON", False)
    assert backend.default() == backend.FAST
    monkeypatch.setenv(backend.ENV_BACKEND, "core")
    assert backend.default() == backend.CORE
    monkeypatch.setenv(backend.ENV_BACKEND, "turbo")
    with pytest.raises(AgentGateError, match="unknown ledger backend 'turbo'"):
        backend.default()


@pytest.mark.parametrize("storage", backend.BACKENDS)
def test_the_constructor_picks_the_path_statements_take(tmp_path: Path, storage: str) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with Ledger(url, create=True, storage=storage) as ledger:
        assert backend.chosen(ledger.engine.dialect) == storage
        rec, _ = ledger.record(NewCall(
            task_id="t", call_id="c", idem_key="call:c", tool="x", effect="write",
            idempotency="none", args_hash="h", arguments={"a": 1},
        ))
        with begin_write(ledger.engine) as conn:
            same = backend.on(conn).read_call(id=rec.row_id)
            # The reference builds its own statements: none was compiled for the driver.
            compiled = prepared._DIALECT_CACHE in ledger.engine.dialect.__dict__
            assert compiled == (storage == "fast")
            if storage == "fast":
                assert isinstance(prepared.prepare(conn, "probe", _probe), prepared.Prepared)
        assert same == rec
        assert ledger.transition(rec, Event.ALLOW).won
    with pytest.raises(AgentGateError, match="unknown ledger backend"):
        Ledger(url, storage="turbo")


def _probe() -> Any:
    from sqlalchemy import literal_column, select

    return select(literal_column("1"))


def test_each_storage_on_each_database_runs_its_own_implementation(
    db_url: str, ledger_storage: str
) -> None:
    """The three implementations of the seam, one per (storage, database): the one the
    ledger suite ran against in this parametrisation, and the one its transactions get."""
    from agent_gate.ledger.backend.core import CoreTxn
    from agent_gate.ledger.backend.pg_fast import PgPipelineTxn
    from agent_gate.ledger.backend.sqlite_fast import SqliteFastTxn

    expected = {
        ("core", "sqlite"): CoreTxn, ("core", "postgresql"): CoreTxn,
        ("fast", "sqlite"): SqliteFastTxn, ("fast", "postgresql"): PgPipelineTxn,
    }
    with Ledger(db_url) as ledger:
        dialect = ledger.engine.dialect
        cls = backend.txn_class(dialect)
        assert cls is expected[(ledger_storage, dialect.name)]
        with backend.writing(ledger.engine) as txn:
            assert type(txn) is cls
            txn.lock_task("nobody")  # a statement through it: no task, nothing locked
        with backend.reading(ledger.engine) as txn:
            assert type(txn) is cls and txn.read_call(id=1) is None

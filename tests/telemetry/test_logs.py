"""The ``agent_gate`` logging hierarchy: no handlers of its own, Alembic quiet unless asked."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_gate import Gate, ToolRegistry

from .conftest import Capture


@pytest.fixture
def host_logging() -> Iterator[Capture]:
    """What an application's ``logging.basicConfig(level=INFO)`` does: a root handler."""
    capture = Capture()
    root = logging.getLogger()
    level = root.level
    root.addHandler(capture)
    root.setLevel(logging.INFO)
    try:
        yield capture
    finally:
        root.removeHandler(capture)
        root.setLevel(level)


def test_the_library_installs_only_a_null_handler() -> None:
    import agent_gate.telemetry  # noqa: F401  (the package that sets it up)

    handlers = logging.getLogger("agent_gate").handlers
    assert [type(h) for h in handlers] == [logging.NullHandler]
    for name in ("agent_gate.gate", "agent_gate.transport", "agent_gate.ledger.migrate"):
        assert logging.getLogger(name).handlers == []


def test_a_fresh_ledger_upgrades_without_alembic_lines(
    tmp_path: Path, host_logging: Capture
) -> None:
    with Gate(ToolRegistry(), f"sqlite:///{tmp_path / 'fresh.db'}", create=True):
        pass
    names = [r.name for r in host_logging.records]
    assert not [n for n in names if n.startswith("alembic")], names
    (upgraded,) = [r for r in host_logging.records if r.name == "agent_gate.ledger.migrate"]
    assert upgraded.to_revision == "0003_call_trace" and upgraded.from_revision is None
    assert logging.getLogger("alembic").level == logging.NOTSET


def test_alembic_speaks_when_asked(tmp_path: Path, host_logging: Capture) -> None:
    migrate = logging.getLogger("agent_gate.ledger.migrate")
    migrate.setLevel(logging.DEBUG)
    try:
        with Gate(ToolRegistry(), f"sqlite:///{tmp_path / 'fresh.db'}", create=True):
            pass
    finally:
        migrate.setLevel(logging.NOTSET)
    assert any(r.name.startswith("alembic") for r in host_logging.records)

"""The ``agent_gate`` logging hierarchy: no handlers of its own, Alembic quiet unless asked."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_gate import Gate, GateUsageError, ToolRegistry
from agent_gate.ledger.migrate import HEAD

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
    assert upgraded.to_revision == HEAD and upgraded.from_revision is None
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


def test_ids_with_lone_surrogates_are_written_escaped(tmp_path: Path) -> None:
    """A call id and a tool name decoded from JSON (``"c\\ud800"``) reach the log as
    their escapes: a host's UTF-8 handler writes every record, and none carries a
    character no stream or exporter can encode (before, the record broke the handler)."""
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    handler = logging.StreamHandler(stream)
    failures: list[BaseException] = []
    handler.handleError = lambda record: failures.append(sys.exc_info()[1])  # type: ignore[method-assign,assignment,return-value]
    logger = logging.getLogger("agent_gate")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with Gate(ToolRegistry(), f"sqlite:///{tmp_path / 'l.db'}", create=True) as gate:
            gate.execute("t\ud800", {"call_id": "c\udc00", "name": "to\ud83d", "arguments": {}})
    except GateUsageError:
        pass  # an id the ledger cannot store is the caller's error; its log was written
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    handler.flush()
    written = stream.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]
    assert failures == []
    assert "\\ud800" in written or "\\udc00" in written

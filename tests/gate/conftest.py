"""Gate tests run on every backend: ``db_url`` comes from ``tests/conftest.py``
(a fresh SQLite file, or a fresh PostgreSQL schema at head, per test)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.fixture
def effects_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the example tools record side effects; inherited by worker processes."""
    path = tmp_path / "effects.log"
    monkeypatch.setenv("AG_EFFECTS", str(path))
    return path


@pytest.fixture
def agent_tools() -> Iterator[object]:
    """The example tool module, importable as a user's module would be."""
    sys.path.insert(0, str(HERE))
    try:
        import agent_tools

        yield agent_tools
    finally:
        sys.path.remove(str(HERE))


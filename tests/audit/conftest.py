from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite ledger file, for tests that read or tamper with the file itself."""
    return f"sqlite:///{tmp_path / 'ledger.db'}"

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A fresh SQLite ledger file per test: real files, real fsyncs, real locks."""
    return f"sqlite:///{tmp_path / 'ledger.db'}"

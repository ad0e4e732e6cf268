"""Fixtures shared by the operator, approval, quota and audit tests (shared_fixtures.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cli"))

from shared_fixtures import (
    effects_file,
    seal_key_env,
    support_tools,
)

__all__ = ["effects_file", "seal_key_env", "support_tools"]

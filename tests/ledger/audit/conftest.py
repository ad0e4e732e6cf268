"""The audit tests' own helpers (``audit_tamper``) importable
by name, as tests/ledger/conftest.py does for the CLI's shared fixtures."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

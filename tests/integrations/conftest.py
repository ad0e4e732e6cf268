"""The integration tests import their shared helpers (``mcp_harness``) from this directory."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

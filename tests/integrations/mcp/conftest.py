"""The MCP conformance tests import ``conformance_results`` from this directory (and
``mcp_harness`` from the one above, which its own conftest puts on ``sys.path``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
